"""The policy-gradient variants of `rl.grpo_loss` (dual-clip, Dr. GRPO's token-sum normalisation,
GSPO's sequence ratio, GSPO-token) against float64 numpy re-derivations of the loss and of its
gradient with respect to the policy's logprobs and entropies: masking and an all-padding row included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import rl

TOL = dict(rtol=1e-6, atol=1e-7)
NORM_TOKENS = 7


def rollouts(seed=0, batch=6, length=9):
    rng = np.random.RandomState(seed)
    lp = -rng.uniform(0.05, 4.0, (batch, length)).astype(np.float32)
    old = (lp + rng.normal(0, 0.8, lp.shape)).astype(np.float32)  # ratios past 1 +- clip, some past 3
    ref = (lp + rng.normal(0, 0.6, lp.shape)).astype(np.float32)
    ent = rng.uniform(0, 3, lp.shape).astype(np.float32)
    mask = (rng.uniform(size=lp.shape) < 0.7).astype(np.float32)
    mask[2] = 0  # a padding row: no response tokens
    adv = rng.normal(size=batch).astype(np.float32)
    return lp, old, ref, ent, mask, adv


def np_weights(mask, aggregation):
    """d(aggregate)/d(value) per token."""
    n = mask.sum(-1, keepdims=True)
    rows = float((n > 0).sum())
    if aggregation == "token_mean":
        return mask / mask.sum()
    if aggregation == "seq_mean_token_mean":
        return np.where(n > 0, mask / np.maximum(n, 1) / rows, 0.0)
    return mask / (rows * NORM_TOKENS)  # seq_mean_token_sum_norm


def np_variant(lp, old, ref, adv, mask, ent, c):
    """(loss, dloss/dlp, dloss/dent) in float64."""
    lp, old, ref, ent, mask = (np.float64(x) for x in (lp, old, ref, ent, mask))
    a = np.float64(adv)[:, None] if np.ndim(adv) == 1 else np.float64(adv)
    n = np.maximum(mask.sum(-1, keepdims=True), 1.0)
    if c.importance_sampling_level == "token":
        r = np.exp(lp - old)
        dr_own = r
    else:
        log_s = (mask * (lp - old)).sum(-1, keepdims=True) / n  # [B, 1]
        if c.importance_sampling_level == "sequence":
            r = np.broadcast_to(np.exp(log_s), lp.shape)
        else:
            r = np.broadcast_to(np.exp(np.minimum(log_s, 10.0)), lp.shape)
            dr_own = np.where(log_s < 10.0, r, 0.0)
    lo, hi = 1 - c.clip_low, 1 + c.clip_high
    unclipped, clipped = -a * r, -a * np.clip(r, lo, hi)
    per_token = np.maximum(unclipped, clipped)
    dl_dr = np.where((unclipped > clipped) | ((r >= lo) & (r <= hi)), -a, 0.0)
    if c.dual_clip is not None:
        cap = -a * c.dual_clip
        capped = (a < 0) & (per_token > cap)
        per_token = np.where(capped, cap, per_token)
        dl_dr = np.where(capped, 0.0, dl_dr)
    w = np_weights(mask, c.aggregation)
    pg = (w * per_token).sum()
    upstream = w * dl_dr  # dpg/dr per token
    if c.importance_sampling_level == "sequence":  # every r_t of a row is s_i: ds_i/dlp_u = s_i m_u / n_i
        grad = (upstream * r).sum(-1, keepdims=True) * mask / n
    else:
        grad = upstream * dr_own
    x = np.clip(ref - lp, -20, 20)
    kl = np.exp(x) - x - 1
    dkl = np.where((np.abs(ref - lp) < 20) & (kl < c.kl_clamp), 1.0 - np.exp(x), 0.0)
    kl = np.minimum(kl, c.kl_clamp)
    loss = pg + c.kl_coef * (w * kl).sum() - c.entropy_coef * (w * ent).sum()
    return loss, grad + c.kl_coef * w * dkl, -c.entropy_coef * w


VARIANTS = {
    "grpo": dict(),
    "dual_clip": dict(dual_clip=3.0),
    "dual_clip_seq_mean": dict(dual_clip=2.0, aggregation="seq_mean_token_mean"),
    "dr_grpo": dict(aggregation="seq_mean_token_sum_norm", norm_tokens=NORM_TOKENS),
    "gspo": dict(importance_sampling_level="sequence", aggregation="seq_mean_token_mean"),
    "gspo_dual_clip": dict(importance_sampling_level="sequence", aggregation="seq_mean_token_mean", dual_clip=1.2),
    "gspo_token": dict(importance_sampling_level="sequence_token", aggregation="seq_mean_token_mean"),
}


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("seed", [0, 1])
def test_variant_loss_and_gradient_match_numpy(name, seed):
    lp, old, ref, ent, mask, adv = rollouts(seed)
    c = rl.GRPOConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.05, entropy_coef=0.01, **VARIANTS[name])

    def loss_of(lp, ent):
        return rl.grpo_loss(lp, jnp.asarray(old), jnp.asarray(adv), jnp.asarray(mask), c,
                            ref_logprobs=jnp.asarray(ref), entropy=ent)

    (loss, metrics), (d_lp, d_ent) = jax.value_and_grad(loss_of, argnums=(0, 1), has_aux=True)(
        jnp.asarray(lp), jnp.asarray(ent))
    want, want_lp, want_ent = np_variant(lp, old, ref, adv, mask, ent, c)
    np.testing.assert_allclose(float(loss), want, **TOL)
    np.testing.assert_allclose(np.asarray(d_lp), want_lp, **TOL)
    np.testing.assert_allclose(np.asarray(d_ent), want_ent, **TOL)
    assert np.all(np.asarray(d_lp)[2] == 0) and np.all(np.asarray(d_lp)[mask == 0] == 0)  # padding: no gradient
    if c.dual_clip is not None:
        assert 0 < float(metrics["clip_frac_lower"]) < 1  # the cap was active on some tokens


@pytest.mark.parametrize("name", ["grpo", "dual_clip", "dual_clip_seq_mean", "dr_grpo", "gspo_token"])
def test_per_token_advantages_match_numpy(name):
    """GiGPO trains on per-token advantages [B, T] (each agent turn its own): every variant that
    takes them, loss and gradients against numpy, with DAPO's decoupled clip."""
    lp, old, ref, ent, mask, _ = rollouts(5)
    per_token = np.random.RandomState(6).normal(size=lp.shape).astype(np.float32)
    c = rl.GRPOConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.05, entropy_coef=0.01, **VARIANTS[name])
    (loss, _), (d_lp, d_ent) = jax.value_and_grad(
        lambda x, e: rl.grpo_loss(x, jnp.asarray(old), jnp.asarray(per_token), jnp.asarray(mask), c,
                                  ref_logprobs=jnp.asarray(ref), entropy=e), argnums=(0, 1), has_aux=True)(
        jnp.asarray(lp), jnp.asarray(ent))
    want, want_lp, want_ent = np_variant(lp, old, ref, per_token, mask, ent, c)
    np.testing.assert_allclose(float(loss), want, **TOL)
    np.testing.assert_allclose(np.asarray(d_lp), want_lp, **TOL)
    np.testing.assert_allclose(np.asarray(d_ent), want_ent, **TOL)


def test_gspo_token_takes_per_token_advantages_and_equals_gspo_for_sequence_ones():
    lp, old, ref, ent, mask, adv = rollouts(3)
    gspo = rl.GRPOConfig(kl_coef=0.0, entropy_coef=0.0, importance_sampling_level="sequence",
                         aggregation="seq_mean_token_mean")
    token = rl.GRPOConfig(kl_coef=0.0, entropy_coef=0.0, importance_sampling_level="sequence_token",
                          aggregation="seq_mean_token_mean")

    def grad(c, a):
        return jax.value_and_grad(lambda x: rl.grpo_loss(x, old, a, mask, c)[0])(jnp.asarray(lp))

    (l1, g1), (l2, g2) = grad(gspo, adv), grad(token, adv)
    np.testing.assert_allclose(float(l1), float(l2), **TOL)
    np.testing.assert_allclose(np.asarray(g1), np.asarray(g2), rtol=1e-5, atol=1e-7)  # one gradient, two forms
    per_token = np.random.RandomState(4).normal(size=lp.shape).astype(np.float32)
    c = dict(clip_low=0.2, clip_high=0.2, dual_clip=None, kl_coef=0.0, entropy_coef=0.0, kl_clamp=10.0,
             aggregation="seq_mean_token_mean", importance_sampling_level="sequence_token")
    loss, g = grad(token, per_token)
    want, want_lp, _ = np_variant(lp, old, ref, per_token, mask, ent, rl.GRPOConfig(**c))
    np.testing.assert_allclose(float(loss), want, **TOL)
    np.testing.assert_allclose(np.asarray(g), want_lp, **TOL)
    with pytest.raises(ValueError, match="one advantage per sequence"):
        rl.grpo_loss(lp, old, per_token, mask, gspo)


def test_variant_settings_are_checked():
    for bad, match in ((dict(dual_clip=1.0), r"^GRPOConfig.dual_clip=1.0: must be > 1"),
                       (dict(importance_sampling_level="sequence"), "aggregates per sequence"),
                       (dict(importance_sampling_level="seq"), "importance_sampling_level"),
                       (dict(norm_tokens=-1), "norm_tokens")):
        with pytest.raises(ValueError, match=match):
            rl.GRPOConfig(**bad)
    with pytest.raises(ValueError, match="needs norm_tokens"):
        rl.grpo_loss(*[jnp.zeros((2, 3))] * 2, jnp.zeros(2), jnp.ones((2, 3)),
                     rl.GRPOConfig(aggregation="seq_mean_token_sum_norm", kl_coef=0.0, entropy_coef=0.0))
