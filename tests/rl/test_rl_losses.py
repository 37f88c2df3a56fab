"""GRPO / RWR losses, advantages, KL estimators, logprobs and masks against float64 numpy re-derivations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import rl
from genenv_jax.models import forward, preset
from genenv_jax.rl.losses import normalizer, token_count
from tests.support.random_params import random_params

TOL = dict(atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------- numpy references (float64)
def np_advantages(rewards, n, eps, ddof, normalize_by_std):
    groups = np.asarray(rewards, np.float64).reshape(-1, n)
    out = np.zeros_like(groups)
    for g, r in enumerate(groups):
        if np.all(r == r[0]):
            continue  # zero-variance group: zero advantage
        out[g] = (r - r.mean()) / (r.std(ddof=ddof) + eps) if normalize_by_std else r - r.mean()
    return out.reshape(-1)


def np_kl(lp, ref, estimator, clamp):
    lp, ref = np.float64(lp), np.float64(ref)
    if estimator == "k1":
        kl = lp - ref
    elif estimator == "k2":
        kl = 0.5 * (lp - ref) ** 2
    else:
        x = np.clip(ref - lp, -20, 20)
        kl = np.exp(x) - x - 1
    return kl if clamp is None else np.clip(kl, -clamp, clamp)


def np_aggregate(values, mask, mode):
    values, mask = np.float64(values), np.float64(mask)
    if mode == "token_mean":
        return (values * mask).sum() / max(mask.sum(), 1)
    rows = [(v * m).sum() / m.sum() for v, m in zip(values, mask) if m.sum() > 0]
    return np.mean(rows) if rows else 0.0


def np_grpo(lp, old, ref, adv, mask, ent, c):
    lp, old, adv = np.float64(lp), np.float64(old), np.float64(adv)[:, None]
    ratio = np.exp(lp - old)
    unclipped = -adv * ratio
    clipped = -adv * np.clip(ratio, 1 - c.clip_low, 1 + c.clip_high)
    pg = np_aggregate(np.maximum(unclipped, clipped), mask, c.aggregation)
    kl = np_aggregate(np_kl(lp, ref, c.kl_estimator, c.kl_clamp), mask, c.aggregation)
    entropy = np_aggregate(ent, mask, c.aggregation)
    clip_frac = ((clipped > unclipped) * mask).sum() / mask.sum()
    return {"pg_loss": pg, "kl": kl, "entropy": entropy, "clip_frac": clip_frac,
            "loss": pg + c.kl_coef * kl - c.entropy_coef * entropy}


def np_rwr_weights(rewards, lam, norm, valid):
    w = np.where(valid, np.exp(lam * np.float64(rewards)), 0.0)
    if norm == "none":
        return w
    w = w / w.sum()
    return w if norm == "softmax" else w * valid.sum()


def random_rollouts(seed=0, batch=6, length=9):
    rng = np.random.RandomState(seed)
    lp = -rng.uniform(0.05, 4.0, (batch, length)).astype(np.float32)
    old = (lp + rng.normal(0, 0.4, lp.shape)).astype(np.float32)  # ratios both sides of the clip range
    ref = (lp + rng.normal(0, 0.6, lp.shape)).astype(np.float32)
    ent = rng.uniform(0, 3, lp.shape).astype(np.float32)
    mask = (rng.uniform(size=lp.shape) < 0.7).astype(np.float32)
    mask[min(2, batch - 1)] = 0  # a row with no response tokens
    adv = rng.normal(size=batch).astype(np.float32)
    return lp, old, ref, ent, mask, adv


# ---------------------------------------------------------------- advantages
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("normalize_by_std", [True, False])
def test_advantages_match_numpy(ddof, normalize_by_std):
    rng = np.random.RandomState(1)
    rewards = rng.uniform(size=24).astype(np.float32)
    rewards[8:12] = 0.1  # a zero-variance group (0.1 is inexact in binary: the mean is not exactly 0.1)
    rewards[12:16] = (rng.uniform(size=4) > 0.5).astype(np.float32)
    got = rl.grpo_advantages(rewards, 4, eps=1e-6, ddof=ddof, normalize_by_std=normalize_by_std)
    want = np_advantages(rewards, 4, 1e-6, ddof, normalize_by_std)
    np.testing.assert_allclose(np.asarray(got), want, **TOL)
    assert np.all(np.asarray(got)[8:12] == 0.0)


def test_advantages_errors():
    with pytest.raises(ValueError, match="num_rollouts"):
        rl.grpo_advantages(np.zeros(10), 4)
    with pytest.raises(ValueError, match="ddof"):
        rl.grpo_advantages(np.zeros(4), 1, ddof=1)


# ---------------------------------------------------------------- GRPO loss
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_grpo_loss_matches_numpy(estimator, aggregation):
    lp, old, ref, ent, mask, adv = random_rollouts()
    config = rl.GRPOConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.05, kl_estimator=estimator,
                           entropy_coef=0.01, aggregation=aggregation)
    loss, metrics = rl.grpo_loss(lp, old, adv, mask, config, ref_logprobs=ref, entropy=ent)
    want = np_grpo(lp, old, ref, adv, mask, ent, config)
    assert 0 < want["clip_frac"] < 1
    np.testing.assert_allclose(float(loss), want["loss"], **TOL)
    for key in ("pg_loss", "kl", "entropy", "clip_frac"):
        np.testing.assert_allclose(float(metrics[key]), want[key], err_msg=key, **TOL)
    assert float(metrics["tokens"]) == mask.sum()


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_match_numpy(estimator):
    lp, _, ref, _, _, _ = random_rollouts(3)
    ref = ref.copy()
    ref[0, 0] = lp[0, 0] + 30.0  # exercises the clamp
    for clamp in (None, 10.0):
        got = np.asarray(rl.kl_penalty(lp, ref, estimator, clamp))
        np.testing.assert_allclose(got, np_kl(lp, ref, estimator, clamp), atol=1e-6, rtol=2e-6)
    if estimator != "k1":
        assert np.all(np.asarray(rl.kl_penalty(lp, ref, estimator)) >= 0)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_grpo_micro_batches_sum_to_full_batch(aggregation):
    lp, old, ref, ent, mask, adv = random_rollouts(4, batch=8)
    config = rl.GRPOConfig(aggregation=aggregation, kl_coef=0.1, entropy_coef=0.01)
    full, full_metrics = rl.grpo_loss(lp, old, adv, mask, config, ref_logprobs=ref, entropy=ent)
    norm, tokens = normalizer(jnp.asarray(mask), aggregation), token_count(jnp.asarray(mask))
    parts = [rl.grpo_loss(lp[s], old[s], adv[s], mask[s], config, ref_logprobs=ref[s], entropy=ent[s],
                          norm=norm, num_tokens=tokens) for s in (slice(0, 3), slice(3, 8))]
    np.testing.assert_allclose(sum(float(p[0]) for p in parts), float(full), **TOL)
    for key in full_metrics:
        np.testing.assert_allclose(sum(float(p[1][key]) for p in parts), float(full_metrics[key]),
                                   err_msg=key, **TOL)


def test_grpo_gradient_points_the_right_way():
    lp, _, ref, ent, _, _ = random_rollouts(5, batch=2, length=4)
    old = lp.copy()  # on-policy: ratio 1, inside the clip range
    adv = np.array([1.5, -0.5], np.float32)
    mask = np.ones_like(lp)
    for aggregation in ("token_mean", "seq_mean_token_mean"):
        config = rl.GRPOConfig(aggregation=aggregation)  # paper defaults: kl 1e-3 k3, entropy 1e-3
        loss_of = lambda x: rl.grpo_loss(x, old, adv, mask, config, ref_logprobs=ref, entropy=ent)[0]  # noqa: E731
        grad = np.asarray(jax.grad(loss_of)(jnp.asarray(lp)))
        assert np.all(np.isfinite(grad))
        assert np.all(grad[0] < 0), "raising a positive-advantage token's logprob must lower the loss"
        assert np.all(grad[1] > 0), "raising a negative-advantage token's logprob must raise the loss"
        # And a small step along -grad lowers the loss.
        assert float(loss_of(jnp.asarray(lp) - 1e-2 * grad)) < float(loss_of(jnp.asarray(lp)))
    # Outside the clip range the surrogate is flat in the logprob.
    config = rl.GRPOConfig(kl_coef=0.0, entropy_coef=0.0)
    far = old + np.log(1.5)  # ratio 1.5 > 1 + 0.2 with positive advantage -> clipped
    grad = jax.grad(lambda x: rl.grpo_loss(x, old, adv, mask, config)[0])(jnp.asarray(far))
    assert np.all(np.asarray(grad)[0] == 0) and np.all(np.asarray(grad)[1] > 0)


def test_grpo_loss_needs_reference_when_kl_on():
    lp, old, _, _, mask, adv = random_rollouts()
    with pytest.raises(ValueError, match="ref_logprobs"):
        rl.grpo_loss(lp, old, adv, mask, rl.GRPOConfig(entropy_coef=0.0))
    with pytest.raises(ValueError, match="aggregation"):
        rl.GRPOConfig(aggregation="sum")


# ---------------------------------------------------------------- RWR loss
@pytest.mark.parametrize("weight_norm", ["none", "mean", "softmax"])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_rwr_loss_matches_numpy(weight_norm, aggregation):
    lp, _, ref, _, mask, _ = random_rollouts(6)
    rewards = np.random.RandomState(6).uniform(size=lp.shape[0]).astype(np.float32)
    valid = mask.sum(1) > 0
    config = rl.RWRConfig(reward_lambda=1.7, weight_norm=weight_norm, aggregation=aggregation, kl_coef=0.2)
    weights = rl.rwr_weights(rewards, config.reward_lambda, weight_norm, jnp.asarray(valid))
    want_w = np_rwr_weights(rewards, 1.7, weight_norm, valid)
    np.testing.assert_allclose(np.asarray(weights), want_w, **TOL)
    loss, metrics = rl.rwr_loss(lp, weights, mask, config, ref_logprobs=ref)
    nll = np_aggregate(want_w[:, None] * -np.float64(lp), mask, aggregation)
    kl = np_aggregate(np_kl(lp, ref, "k3", 10.0), mask, aggregation)
    np.testing.assert_allclose(float(loss), nll + 0.2 * kl, **TOL)
    np.testing.assert_allclose(float(metrics["weighted_nll"]), nll, **TOL)
    np.testing.assert_allclose(float(metrics["kl"]), np_aggregate(np_kl(lp, ref, "k3", 10.0), mask, "token_mean"),
                               **TOL)


def test_rwr_weights_are_stable_for_large_rewards():
    weights = rl.rwr_weights(jnp.array([1000.0, 999.0, 0.0]), 1.0, "mean")
    np.testing.assert_allclose(np.asarray(weights), np_rwr_weights(np.array([1000, 999, 0.0]) - 1000, 1.0, "mean",
                                                                  np.ones(3, bool)), **TOL)
    assert np.all(np.asarray(rl.rwr_weights(jnp.zeros(3), 1.0, "mean", jnp.zeros(3, bool))) == 0)


def test_rwr_weight_is_one_function_on_host_and_in_jit():
    rewards = np.array([0.0, 0.25, 1.0])
    host = rl.rwr_weight(rewards, 1.5)  # pool records: numpy float64
    assert isinstance(host, np.ndarray) and host.dtype == np.float64
    np.testing.assert_allclose(host, np.exp(1.5 * rewards), rtol=1e-15)
    assert float(rl.rwr_weight(0.5, 2.0)) == np.exp(1.0)
    traced = jax.jit(lambda r: rl.rwr_weight(r, 1.5))(jnp.asarray(rewards, jnp.float32))
    np.testing.assert_allclose(np.asarray(traced), host, rtol=1e-6)
    # Unnormalised step weights are exactly these.
    np.testing.assert_allclose(np.asarray(rl.rwr_weights(jnp.asarray(rewards), 1.5, "none")), host, rtol=1e-6)


def test_rwr_gradient_favours_high_weight_rows():
    lp = -np.ones((2, 3), np.float32)
    mask = np.ones_like(lp)
    config = rl.RWRConfig(kl_coef=0.0)
    weights = rl.rwr_weights(jnp.array([1.0, 0.0]), 2.0, "mean")
    grad = np.asarray(jax.grad(lambda x: rl.rwr_loss(x, weights, mask, config)[0])(jnp.asarray(lp)))
    assert np.all(np.isfinite(grad)) and np.all(grad < 0)
    assert np.all(grad[0] < grad[1])  # raising the high-weight row's likelihood pays more


# ---------------------------------------------------------------- logprobs and masks
@pytest.fixture(scope="module")
def micro():
    cfg = preset("micro")
    return cfg, random_params(cfg, 0)


def np_log_softmax(logits):
    logits = np.float64(logits)
    top = logits.max(-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_token_logprobs_match_full_forward(micro, chunk_size):
    cfg, params = micro
    rng = np.random.RandomState(0)
    tokens = rng.randint(0, cfg.vocab_size, (3, 11)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[1, :4] = 0  # left padding
    for temperature in (1.0, 0.7):
        lp, ent = rl.token_logprobs(cfg, params, tokens, mask, chunk_size=chunk_size, temperature=temperature,
                                    with_entropy=True)
        logp = np_log_softmax(np.asarray(forward(cfg, params, tokens, attention_mask=mask)) / temperature)
        want = np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], -1)[..., 0]
        want_ent = -(np.exp(logp) * logp).sum(-1)[:, :-1]
        np.testing.assert_allclose(np.asarray(lp)[:, 1:], want, atol=1e-5)
        np.testing.assert_allclose(np.asarray(ent)[:, 1:], want_ent, atol=1e-5)
        assert np.all(np.asarray(lp)[:, 0] == 0)


def test_token_logprobs_gradient_is_finite_and_matches_full_forward(micro):
    cfg, params = micro
    tokens = np.random.RandomState(1).randint(0, cfg.vocab_size, (2, 9)).astype(np.int32)

    def chunked(p):  # 3 chunks of 3: rematerialised LM head inside a scan
        return jnp.sum(rl.token_logprobs(cfg, p, tokens, chunk_size=3)[0])

    def unchunked(p):
        logp = jax.nn.log_softmax(forward(cfg, p, tokens)[:, :-1])
        return jnp.sum(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))

    got, want = jax.jit(lambda p: (jax.grad(chunked)(p), jax.grad(unchunked)(p)))(params)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
        assert np.all(np.isfinite(np.asarray(a))), jax.tree_util.keystr(path)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, err_msg=jax.tree_util.keystr(path))


def test_build_loss_mask():
    mask = rl.build_loss_mask([2, 1], [3, 4], 8, observation_spans=[[(3, 4)], []], prompt_offsets=[0, 2])
    want = np.array([[0, 0, 1, 0, 1, 0, 0, 0],
                     [0, 0, 0, 1, 1, 1, 1, 0]], np.float32)
    np.testing.assert_array_equal(mask, want)
    with pytest.raises(ValueError, match="seq_len"):
        rl.build_loss_mask([5], [4], 8)
    with pytest.raises(ValueError, match="observation span"):
        rl.build_loss_mask([1], [2], 8, observation_spans=[[(6, 9)]])


# ---------------------------------------------------------------- optimizer
def test_schedules():
    constant = rl.make_schedule(rl.OptimizerConfig(learning_rate=1e-3, warmup_steps=10))
    assert float(constant(0)) == 0 and np.isclose(float(constant(5)), 5e-4) and np.isclose(float(constant(500)), 1e-3)
    cosine = rl.make_schedule(rl.OptimizerConfig(learning_rate=1e-3, schedule="cosine", total_steps=110,
                                                 warmup_steps=10, end_lr_factor=0.1))
    assert np.isclose(float(cosine(10)), 1e-3) and np.isclose(float(cosine(60)), 0.55e-3)
    assert np.isclose(float(cosine(110)), 1e-4)
    linear = rl.make_schedule(rl.OptimizerConfig(learning_rate=1e-3, schedule="linear", total_steps=100))
    assert np.isclose(float(linear(50)), 5e-4) and np.isclose(float(linear(100)), 0.0)
    with pytest.raises(ValueError, match="total_steps"):
        rl.OptimizerConfig(schedule="cosine")
    with pytest.raises(KeyError, match="unknown optimizer config keys"):
        rl.OptimizerConfig.from_dict({"learning_rate": 1e-3, "lr": 1e-3})


def test_optimizer_clips_decays_and_keeps_float32_state():
    rng = np.random.RandomState(0)
    params = {"attn": {"q_kernel": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
                       "q_bias": jnp.asarray(rng.normal(size=(3,)), jnp.float32)},
              "norm": {"scale": jnp.ones((3,), jnp.float32)}}
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    opt = rl.make_optimizer(dict(learning_rate=0.1, weight_decay=0.5, grad_clip=1.0, decay_norms_and_biases=False))
    state = rl.init_opt_state(opt, bf16)
    assert {x.dtype for x in jax.tree.leaves(state) if jnp.issubdtype(x.dtype, jnp.floating)} == {np.dtype("float32")}
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, state = jax.jit(opt.update)(zero, state, params)
    # Zero gradient: matrices decay (-lr * wd * w), norm scales and biases do not.
    np.testing.assert_allclose(np.asarray(updates["attn"]["q_kernel"]), -0.05 * np.asarray(params["attn"]["q_kernel"]),
                               rtol=1e-6)
    assert np.all(np.asarray(updates["norm"]["scale"]) == 0)
    assert np.all(np.asarray(updates["attn"]["q_bias"]) == 0)
    assert np.isclose(float(rl.current_learning_rate(state)), 0.1)
    # Clipping: a huge gradient gives the same first Adam step as the same direction at unit norm.
    opt = rl.make_optimizer(dict(learning_rate=0.1, weight_decay=0.0, grad_clip=1.0, eps=1e-3))
    first_step = jax.jit(lambda g: opt.update(g, opt.init(params), params)[0])
    big = jax.tree.map(lambda x: 1e6 * jnp.ones_like(x), params)
    norm = np.sqrt(sum(np.sum(np.square(np.asarray(x))) for x in jax.tree.leaves(big)))
    clipped, reference = first_step(big), first_step(jax.tree.map(lambda x: x / norm, big))
    for a, b in zip(jax.tree.leaves(clipped), jax.tree.leaves(reference)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)


def test_rwr_weight_stats_ignore_padding_rows():
    from genenv_jax.rl.rwr import weight_stats
    valid = jnp.array([True, True, False])
    weights = rl.rwr_weights(jnp.array([1.0, 0.0, 5.0]), 1.0, "mean", valid)
    stats = {k: float(v) for k, v in weight_stats(weights, valid).items()}
    e = np.e
    np.testing.assert_allclose([stats["weight_mean"], stats["weight_max"], stats["weight_min"]],
                               [1.0, 2 * e / (e + 1), 2 / (e + 1)], rtol=1e-6)
    np.testing.assert_allclose(stats["weight_ess"], (e + 1) ** 2 / (e * e + 1), rtol=1e-6)
    empty = weight_stats(jnp.zeros(3), jnp.zeros(3, bool))
    assert all(np.isfinite(float(v)) and float(v) == 0 for v in empty.values())


def test_needed_mask_skips_prompt_chunks_and_keeps_response_values():
    """Chunks without loss tokens skip the LM head; the needed positions are unchanged (values and grads)."""
    from genenv_jax.models import init_params, preset
    from genenv_jax.rl import token_logprobs

    cfg = preset("micro")
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 24), 0, cfg.vocab_size)
    needed = jnp.zeros((2, 24)).at[:, 17:22].set(1.0)  # a "response" in the 4th and 5th chunks of 4
    full, _ = token_logprobs(cfg, params, tokens, chunk_size=4)
    part, _ = token_logprobs(cfg, params, tokens, chunk_size=4, needed=needed)
    np.testing.assert_allclose(part * needed, full * needed, atol=1e-6)
    assert float(jnp.abs(part[:, :16]).max()) == 0.0  # chunks of targets 0-15 were skipped
    # Chunks are aligned by target: a response of targets [16, 20) fills one chunk, and only it runs.
    aligned = jnp.zeros((2, 24)).at[:, 16:20].set(1.0)
    one, _ = token_logprobs(cfg, params, tokens, chunk_size=4, needed=aligned)
    np.testing.assert_allclose(one[:, 16:20], full[:, 16:20], atol=1e-6)
    assert float(jnp.abs(one[:, :16]).max()) == 0.0 and float(jnp.abs(one[:, 20:]).max()) == 0.0
    assert float(full[:, 0].max()) == float(full[:, 0].min()) == 0.0  # token 0 has no prediction

    def loss(p, mask):
        return jnp.sum(token_logprobs(cfg, p, tokens, chunk_size=4, needed=mask)[0] * needed)

    g_full = jax.grad(loss)(params, None)
    g_part = jax.grad(loss)(params, needed)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), g_full, g_part)
