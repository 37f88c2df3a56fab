"""Learning with tiny random models on CPU: GRPO learns a verifiable task; RWR follows its weights."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import rl
from genenv_jax.models import forward, preset
from genenv_jax.models.lora import LoRAConfig, init_adapters, with_adapters
from genenv_jax.rl.advantages import gigpo_step_advantages
from tests.support.random_params import random_params

BOS, SEP = 1, 2
DIGITS = np.arange(3, 13)  # ten "digit" tokens


def make_sampler(cfg):
    """A minimal temperature-1 sampler over full `forward` passes (no KV cache; sequences are tiny).

    Returns tokens [B, P + n_new] and the sampled tokens' logprobs aligned with them (0 on the prompt).
    """
    @functools.partial(jax.jit, static_argnums=2)
    def sample(params, prompts, n_new, key):
        batch, prompt_len = prompts.shape
        tokens = jnp.concatenate([prompts, jnp.zeros((batch, n_new), prompts.dtype)], axis=1)
        logprobs = jnp.zeros(tokens.shape, jnp.float32)

        def one_token(i, carry):
            tokens, logprobs, key = carry
            key, sub = jax.random.split(key)
            logits = jax.lax.dynamic_index_in_dim(forward(cfg, params, tokens), prompt_len + i - 1, axis=1,
                                                  keepdims=False)  # [B, V]
            token = jax.random.categorical(sub, logits)
            logprob = jnp.take_along_axis(jax.nn.log_softmax(logits), token[:, None], axis=-1)[:, 0]
            tokens = jax.lax.dynamic_update_index_in_dim(tokens, token.astype(tokens.dtype), prompt_len + i, 1)
            logprobs = jax.lax.dynamic_update_index_in_dim(logprobs, logprob, prompt_len + i, 1)
            return tokens, logprobs, key

        tokens, logprobs, _ = jax.lax.fori_loop(0, n_new, one_token, (tokens, logprobs, key))
        return tokens, logprobs

    return sample


def _grpo_copy_history(cfg, step, trained, frozen, steps: int = 200, normalize_by_std: bool = True,
                       advantages_fn=None, refill_rounds: int = 0):
    """Rewards per GRPO step on the copy task, and the last step's metrics. `trained` is what the
    step updates: the params (full fine-tuning, `frozen` None) or LoRA adapters over `frozen`.
    `advantages_fn(rewards, prompts, rollouts)` replaces GRPO's advantages ([B] or [B, T]);
    `refill_rounds` > 0 is DAPO's dynamic sampling: groups of equal rewards are replaced by groups of
    fresh tasks for up to that many rounds (still-missing groups are the dropped ones, which add
    nothing but the KL term)."""
    def model(trained):  # the params the policy samples with
        return trained if frozen is None else with_adapters(frozen, trained)

    reference = jax.tree.map(jnp.copy, model(trained))  # the starting policy (LoRA at B = 0: the base)
    ref_logprobs_fn = rl.make_logprobs_fn(cfg)
    sample = make_sampler(cfg)
    opt_state = step.init_opt_state(trained)
    rng, key = np.random.RandomState(0), jax.random.key(1)
    tasks, rollouts = 16, 8
    rows = tasks * rollouts
    loss_mask = rl.build_loss_mask([3] * rows, [1] * rows, 4)
    history = []
    def groups(count):  # [count * rollouts] rows: prompts, tokens, old logprobs, rewards
        nonlocal key
        digits = rng.choice(DIGITS, count)
        prompts = np.stack([np.full(count, BOS), digits, np.full(count, SEP)], axis=1)
        prompts = np.repeat(prompts.astype(np.int32), rollouts, axis=0)  # a task's rollouts are contiguous
        key, sub = jax.random.split(key)
        tokens, old_logprobs = sample(model(trained), prompts, 1, sub)
        tokens = np.asarray(tokens)
        return prompts, tokens, np.asarray(old_logprobs), (tokens[:, 3] == prompts[:, 1]).astype(np.float32)

    for _ in range(steps):
        prompts, tokens, old_logprobs, rewards = groups(tasks)
        history.append(rewards.mean())  # the on-policy reward of the step's first draw
        for _ in range(refill_rounds):
            varied = (rewards.reshape(tasks, rollouts).max(1) > rewards.reshape(tasks, rollouts).min(1))
            if varied.all():
                break
            rows = np.repeat(varied, rollouts)
            extra = groups(int((~varied).sum()))
            prompts, tokens, old_logprobs, rewards = (np.concatenate([a[rows], b]) for a, b in
                                                      zip((prompts, tokens, old_logprobs, rewards), extra))
        advantages = (advantages_fn(rewards, prompts, rollouts) if advantages_fn else
                      rl.grpo_advantages(rewards, rollouts, normalize_by_std=normalize_by_std))
        batch = {"tokens": tokens, "attention_mask": np.ones_like(tokens), "loss_mask": loss_mask,
                 "old_logprobs": old_logprobs, "advantages": np.asarray(advantages, np.float32)}
        batch["ref_logprobs"] = np.asarray(ref_logprobs_fn(reference, batch))
        args = () if frozen is None else (frozen,)
        trained, opt_state, metrics = step(trained, opt_state, batch, *args)
        assert np.isfinite(float(metrics["loss"])) and np.isfinite(float(metrics["grad_norm"]))
    return history, metrics


@pytest.mark.slow
def test_grpo_learns_to_copy_a_digit():
    """Prompt [BOS, d, SEP] -> response d, reward 1 if copied. A random model is at chance (1/16).

    (Copying two digits also learns, but in a few seeds the policy collapses onto a wrong mode whose
    groups then have zero reward variance, hence zero advantage; one digit learns on every seed tried.)
    """
    cfg = preset("micro", vocab_size=16)
    params = random_params(cfg, 0)
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=3e-3, weight_decay=0.0))
    step = rl.make_grpo_step(cfg, optimizer, rl.GRPOConfig(kl_coef=1e-3, entropy_coef=0.0))
    history, metrics = _grpo_copy_history(cfg, step, params, None)
    start, end = np.mean(history[:5]), np.mean(history[-10:])
    assert start < 0.15, f"initial reward {start} should be near chance (1/16)"
    assert end > 0.9, f"reward after 200 GRPO steps is {end}; history {np.round(history[::20], 2)}"
    assert float(metrics["kl"]) > 0  # the policy moved away from the reference


# The loss variants users compare (docs/rl.md, "Policy-gradient variants"), each on the copy task
# with GRPO's step budget and learning rate.
VARIANTS = {
    "dual_clip": dict(dual_clip=3.0),
    "dr_grpo": dict(aggregation="seq_mean_token_sum_norm", norm_tokens=1, normalize_by_std=False),
    "gspo": dict(importance_sampling_level="sequence", aggregation="seq_mean_token_mean"),
    "gspo_token": dict(importance_sampling_level="sequence_token", aggregation="seq_mean_token_mean"),
}


def _gigpo_advantages(rewards, prompts, rollouts):
    """GiGPO's per-token advantages [B, T] on the copy task: one turn per episode whose anchor state
    is its prompt, so the step advantage is each reward against its group's mean (gamma^0 = 1)."""
    episode = np.asarray(rl.grpo_advantages(rewards, rollouts))
    step = gigpo_step_advantages(rewards, [[tuple(p)] for p in prompts], rollouts, gamma=0.95)
    per_token = np.zeros((len(rewards), 4), np.float32)
    per_token[:, 3] = episode + np.concatenate(step)  # omega 1, on the one response token
    return per_token


# Recipes that change the advantages or the data rather than the loss: (loss keys, helper keys).
RECIPES = {
    "dapo": (dict(clip_high=0.28), dict(refill_rounds=3)),  # decoupled clip, token mean, dynamic sampling
    "gigpo": ({}, dict(advantages_fn=_gigpo_advantages)),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "dapo" else n
                                  for n in list(VARIANTS) + list(RECIPES)])
def test_every_loss_variant_learns_to_copy_a_digit(name):
    cfg = preset("micro", vocab_size=16)
    loss_keys, recipe = RECIPES.get(name, (VARIANTS.get(name), {}))
    loss = rl.GRPOConfig(kl_coef=1e-3, entropy_coef=0.0, **loss_keys)
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=3e-3, weight_decay=0.0))
    step = rl.make_grpo_step(cfg, optimizer, loss)
    history, metrics = _grpo_copy_history(cfg, step, random_params(cfg, 0), None,
                                          normalize_by_std=loss.normalize_by_std, **recipe)
    start, end = np.mean(history[:5]), np.mean(history[-10:])
    assert start < 0.15 and end > 0.9, f"{name}: reward {start} -> {end}; history {np.round(history[::20], 2)}"


LORA_LEARNING_RATE, LORA_STEPS = 3e-3, 200


@pytest.mark.slow
def test_lora_grpo_learns_to_copy_a_digit():
    """The same task with only LoRA adapters trained (rank 4 on every projection, the base and the
    LM head frozen), KL anchored to the base. The frozen head is scaled x10: a random normal(0.02)
    head caps every logit gap near 0.3 (no hidden state makes a digit much likelier than chance),
    where a pretrained head can express a peaked answer. (x5 learns to ~0.65 in 200 steps, x30
    starts so peaked that every group agrees and the advantages vanish.)"""
    lora = LoRAConfig(rank=4, alpha=8.0)
    cfg = preset("micro", vocab_size=16, lora_scale=lora.scale)
    base = random_params(cfg, 0)
    base = {**base, "lm_head": base["lm_head"] * 10}
    adapters = init_adapters(cfg, lora, jax.random.key(2))
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=LORA_LEARNING_RATE, weight_decay=0.0))
    step = rl.make_grpo_step(cfg, optimizer, rl.GRPOConfig(kl_coef=1e-3, entropy_coef=0.0),
                             partition=lora.partition(cfg))
    before = jax.tree.map(np.asarray, base)
    history, metrics = _grpo_copy_history(cfg, step, adapters, base, steps=LORA_STEPS)
    start, end = np.mean(history[:5]), np.mean(history[-10:])
    assert start < 0.15, f"initial reward {start} should be near chance (1/16)"
    assert end > 0.9, f"reward after {LORA_STEPS} LoRA GRPO steps is {end}; history {np.round(history[::20], 2)}"
    assert float(metrics["kl"]) > 0
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(base)))


def test_rwr_moves_likelihood_toward_high_weight_samples():
    """Two generated 'tasks' after the same prompt; the one with R_env = 1 gets weight e^2, the
    other e^0. RWR raises the high-weight task's likelihood relative to the other; equal rewards
    (the control, same compiled step) bring them level."""
    cfg = preset("micro")
    params0 = random_params(cfg, 2)
    task_a, task_b = [5, 6, 7, 8], [9, 10, 11, 12]
    tokens = np.array([[BOS, SEP] + task_a] * 4 + [[BOS, SEP] + task_b] * 4, np.int32)
    loss_mask = rl.build_loss_mask([2] * 8, [4] * 8, tokens.shape[1])
    batch = {"tokens": tokens, "attention_mask": np.ones_like(tokens), "loss_mask": loss_mask}
    batch["ref_logprobs"] = np.asarray(rl.make_logprobs_fn(cfg)(params0, batch))
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=1e-2, weight_decay=0.0))
    step = rl.make_rwr_step(cfg, optimizer, rl.RWRConfig(reward_lambda=2.0, kl_coef=0.05))

    @jax.jit
    def task_logprobs(params):  # log p(task text | prompt) per row
        return jnp.sum(rl.token_logprobs(cfg, params, tokens)[0] * loss_mask, axis=1)

    def gap(params):  # log p(task_a) - log p(task_b)
        totals = np.asarray(task_logprobs(params))
        return totals[0] - totals[4]

    def train(rewards, steps=40):
        params = jax.tree.map(jnp.copy, params0)
        opt_state = step.init_opt_state(params)
        for _ in range(steps):
            params, opt_state, metrics = step(params, opt_state, dict(batch, rewards=np.asarray(rewards, np.float32)))
        return params, metrics

    weighted, metrics = train([1.0] * 4 + [0.0] * 4)
    control, _ = train([0.5] * 8)
    np.testing.assert_allclose(float(metrics["weight_max"]) / float(metrics["weight_min"]), np.exp(2.0), rtol=1e-5)
    # Weighted NLL's optimum puts p(task) proportional to its weight: a gap of log(e^2 / e^0) = 2 nats
    # (the small KL penalty pulls slightly toward the initial gap); equal weights give no gap.
    before, after, level = gap(params0), gap(weighted), gap(control)
    assert after - before > 1.0 and abs(after - 2.0) < 0.4, (before, after)
    assert abs(level) < 0.2, (before, level)
    assert float(metrics["kl"]) > 0
