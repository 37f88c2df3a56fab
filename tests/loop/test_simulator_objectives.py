"""The simulator's objectives (`simulator.train.objective`): GRPO over a prompt's generations against
a numpy re-derivation, both objectives moving a tiny simulator's task levels toward the level a
scripted agent solves about alpha of the time, and GRPO in the loop (it trains, it resumes bit-equal)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import rl
from genenv_jax.domains.base import Rejection, Task
from genenv_jax.loop import epoch_tasks
from genenv_jax.loop.epoch_tasks import EpochTask
from genenv_jax.loop.simulator_grpo import generation_rewards, group_rows
from genenv_jax.loop.tasks import Generation
from genenv_jax.models import forward, init_params, preset
from genenv_jax.rl.batches import PolicyState, TrainRow, step_trainer, train_steps
from genenv_jax.rl.curriculum import CurriculumConfig, TaskScore, env_reward
from tests.support.loop_configs import toy_config


def _task(task_id: str) -> Task:
    return Task(domain="toy", task_id=task_id, category="say", prompt={}, verifier={})


def _generation(group: int, task_id: str | None, tokens=(5, 6), logprobs=(-0.5, -1.5)) -> Generation:
    seed = _task("seed")
    result = _task(task_id) if task_id else Rejection(domain="toy", reason="no_number", detail="", seed_id="seed",
                                                               raw_text="")
    return Generation(seed, "similar", [1, 2], list(tokens), np.asarray(logprobs, np.float32), "", result, group)


def _records(gens, r_env):
    """The epoch's records of `gens`, scored where `r_env` has the task (as `epoch_tasks.score_generated` sets them)."""
    return [EpochTask(epoch_tasks.GENERATED if g.task else epoch_tasks.REJECTED, g.task, g,
                      score=TaskScore(g.task.task_id, "seed", 1, 0.5, 0.0, 0.5, r_env[g.task.task_id], True)
                      if g.task and g.task.task_id in r_env else None) for g in gens]


def test_rewards_are_r_env_invalid_reward_or_left_out():
    gens = [_generation(0, "a"), _generation(0, None), _generation(0, "unscored"), _generation(1, "b"),
            _generation(1, "c", tokens=())]
    groups = generation_rewards(_records(gens, {"a": 0.8, "b": 0.5, "c": 0.9}), invalid_reward=-0.25)
    assert {g: [(m.task.task_id if m.task else None, r) for m, r in members] for g, members in groups.items()} == {
        0: [("a", 0.8), (None, -0.25)],  # the valid task that was not rolled out has no reward: left out
        1: [("b", 0.5)]}  # an empty generation trains nothing: left out


def test_group_advantages_and_loss_against_numpy():
    loss = rl.GRPOConfig(kl_coef=0.0, entropy_coef=0.0)
    rewards = [0.61, 1.0, 0.0, 0.88]
    members = [(_generation(0, f"t{i}", tokens=(5 + i, 7), logprobs=(-0.1 * i, -0.3)), r) for i, r in enumerate(rewards)]
    rows = group_rows(members, loss)
    r = np.asarray(rewards, np.float64)
    want = (r - r.mean()) / (r.std(ddof=1) + loss.adv_eps)  # GRPO: group mean and std (ddof 1)
    np.testing.assert_allclose([row.scalar for row in rows], want, rtol=1e-5)
    assert [row.response for row in rows] == [[5 + i, 7] for i in range(4)]
    np.testing.assert_array_equal(rows[2].logprobs, np.asarray([-0.2, -0.3], np.float32))  # the sampler's
    assert group_rows(members[:1], loss) == [] and group_rows([(m, 0.5) for m, _ in members], loss) == []

    # The GRPO loss of these rows (token mean, clipped ratio) equals its numpy form.
    logp = np.asarray([[-0.2, -0.35], [-0.05, -0.3], [-0.3, -0.2], [-0.25, -0.4]], np.float32)
    old = np.stack([row.logprobs for row in rows])
    got, _ = rl.grpo_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray([row.scalar for row in rows]),
                          jnp.ones(logp.shape), loss)
    ratio = np.exp(logp - old)
    adv = np.asarray([row.scalar for row in rows])[:, None]
    per_token = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - loss.clip_low, 1 + loss.clip_high))
    np.testing.assert_allclose(float(got), per_token.mean(), rtol=1e-5)


# ----- both objectives on a tiny simulator and a scripted agent -----
VALID = (3, 4, 5, 6)               # the simulator's first token writes a task of level 1..4; others are invalid
SOLVED = {1: 1.0, 2: 0.75, 3: 0.5, 4: 0.0}  # the scripted agent's success rate at each level
ALPHA, GROUP, PROMPT = 0.5, 8, [1, 2]
CURRICULUM = CurriculumConfig(alpha=ALPHA, beta=2.0, k_min=0.25)


def _level_probabilities(cfg, params) -> np.ndarray:
    """P(the first generated token) over the vocabulary, given the prompt."""
    logits = forward(cfg, params, jnp.asarray([PROMPT]))[0, -1]
    return np.asarray(jax.nn.softmax(logits))


def _distance_to_alpha(probs: np.ndarray) -> float:
    """E|p_success - alpha| over the simulator's valid tasks (invalid ones count as the worst, 0.5)."""
    out = sum(probs[t] * abs(SOLVED[i + 1] - ALPHA) for i, t in enumerate(VALID))
    return float(out + (1 - probs[list(VALID)].sum()) * 0.5)


def _train(objective: str, steps: int = 40):
    """`steps` epochs of one prompt x GROUP generations: R_env from the scripted agent's success rate,
    then the objective's update as the loop builds it (`group_rows`; in-band RWR rows weighted by R_env)."""
    cfg = preset("micro", vocab_size=8)
    params = init_params(cfg, jax.random.key(0))
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=3e-2, weight_decay=0.0))
    loss = rl.GRPOConfig(kl_coef=0.0) if objective == "grpo" else rl.RWRConfig(kl_coef=0.0)
    step = (rl.make_grpo_step if objective == "grpo" else rl.make_rwr_step)(cfg, optimizer, loss)
    state = PolicyState(params, step.init_opt_state(params))
    train = step_trainer(step, objective)
    before = _level_probabilities(cfg, state.params)
    key = jax.random.key(1)
    for epoch in range(steps):
        key, sub = jax.random.split(key)
        probs = _level_probabilities(cfg, state.params)
        tokens = np.asarray(jax.random.choice(sub, len(probs), (GROUP,), p=jnp.asarray(probs)))
        gens, scores = [], {}
        for i, token in enumerate(tokens):
            level = VALID.index(int(token)) + 1 if int(token) in VALID else None
            task_id = f"L{level}#{i}" if level else None
            gens.append(_generation(0, task_id, tokens=(int(token),), logprobs=(float(np.log(probs[token])),)))
            if level:
                scores[task_id] = SOLVED[level]
        rewards = {t: float(env_reward(p, CURRICULUM.alpha, CURRICULUM.beta)) for t, p in scores.items()}
        if objective == "grpo":
            rows = [row for members in generation_rewards(_records(gens, rewards), 0.0).values() for row in group_rows(members, loss)]
            key_name = "advantages"
        else:  # RWR on the in-band tasks, each weighted by its R_env
            rows = [TrainRow(g.prompt, g.tokens, rewards[g.task.task_id]) for g in gens
                    if g.task and abs(scores[g.task.task_id] - ALPHA) <= CURRICULUM.k_min]
            key_name = "rewards"
        if rows:
            state, _ = train_steps(train, state, [rows], rows=GROUP, prompt_len=2, response_len=16, pad_id=0,
                                   scalar_key=key_name, desc="", show_progress=False)
    return before, _level_probabilities(cfg, state.params)


@pytest.mark.parametrize("objective", ["rwr", "grpo"])
def test_both_objectives_move_the_task_levels_toward_the_agents_alpha(objective):
    before, after = _train(objective)
    in_band = [VALID[1], VALID[2]]  # levels 2 and 3: p_success 0.75 and 0.5 are within k_min of alpha
    assert after[in_band].sum() > 0.6 > before[in_band].sum() + 0.2, (before, after)
    assert _distance_to_alpha(after) < _distance_to_alpha(before) - 0.15
    if objective == "grpo":  # the group-relative reward singles out the level at alpha
        assert after[VALID[2]] == after[list(VALID)].max()


# ----- in the loop -----
GRPO_LOOP = {"simulator.train.objective": "grpo", "variants_per_seed": 2, "simulator.train.tasks_per_step": 2}


@pytest.mark.usefixtures("toy_domain")
@pytest.mark.slow
def test_grpo_simulator_trains_in_the_loop_and_resumes_bit_equal(tmp_path):
    from genenv_jax.loop import CoEvolution

    full = CoEvolution(toy_config(**GRPO_LOOP), tmp_path / "full")
    rows = full.run()
    assert any(r["simulator/steps"] > 0 for r in rows), rows
    assert all("simulator/groups" in r and "simulator/reward_mean" in r for r in rows)
    CoEvolution(toy_config(epochs=1, **GRPO_LOOP), tmp_path / "split").run()
    resumed = CoEvolution(toy_config(**GRPO_LOOP), tmp_path / "split")
    resumed.run()
    for name in ("agent", "simulator"):
        a, b = full.final_state.policy(name), resumed.final_state.policy(name)
        for x, y in zip(jax.tree.leaves((a.params, a.opt_state)), jax.tree.leaves((b.params, b.opt_state))):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)
