"""The LoRA GRPO step against a numpy re-derivation on a tiny model (float64 references, 1e-5).

Loss: the adapted model's token logprobs are computed from numpy-merged weights (W + s A B in
float64, loaded as a plain base tree: no adapter code runs), and the GRPO loss of those logprobs
is re-derived in numpy (`test_rl_losses.np_grpo`). Gradient: by the chain rule through
y = x W + s (x A) B, dL/dA = s G B^T and dL/dB = s A^T G, where G = dL/dW' is the full
fine-tuning gradient at the merged weights W'; numpy forms both from G, and the LoRA step's own
gradient (read off one plain SGD step with learning rate 1) must match them.
"""

import jax
import numpy as np
import optax
import pytest

from genenv_jax import rl
from genenv_jax.models import forward, init_params, preset
from genenv_jax.models.lora import BLOCK_OF, TARGETS, LoRAConfig, init_adapters
from tests.support.random_params import with_random_b
from test_rl_losses import np_grpo

LORA = LoRAConfig(rank=3, alpha=6.0)
CFG = preset("micro", vocab_size=64, lora_scale=LORA.scale)
LOSS = rl.GRPOConfig(kl_coef=0.05, entropy_coef=0.01, clip_low=0.2, clip_high=0.28)
BATCH, LENGTH, PROMPT = 4, 10, 4


def _np_merged(base, adapters):
    """Base params with W + s A B merged in float64 per layer (kernel layouts as models/lora.py)."""
    layers = {block: dict(leaves) for block, leaves in base["layers"].items()}
    for target in TARGETS:
        block = layers[BLOCK_OF[target]]
        kernel = np.asarray(block[f"{target}_kernel"], np.float64)       # [L, in..., out...]
        a = np.asarray(adapters["layers"][BLOCK_OF[target]][f"{target}_lora_a"], np.float64)  # [L, in..., r]
        b = np.asarray(adapters["layers"][BLOCK_OF[target]][f"{target}_lora_b"], np.float64)  # [L, r, out...]
        delta = np.einsum("lir,lro->lio", a.reshape(a.shape[0], -1, a.shape[-1]), b.reshape(b.shape[0], b.shape[1], -1))
        block[f"{target}_kernel"] = (kernel + LORA.scale * delta.reshape(kernel.shape)).astype(np.float32)
    return {**base, "layers": layers}


def _np_logprobs_and_entropy(logits, tokens):
    """[B, T] logprobs of tokens[:, t] given the logits at t - 1 (0 at t = 0) and their entropies, float64."""
    logits = np.asarray(logits, np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    lp, ent = np.zeros(tokens.shape), np.zeros(tokens.shape)
    lp[:, 1:] = np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
    ent[:, 1:] = -(np.exp(logp[:, :-1]) * logp[:, :-1]).sum(-1)
    return lp, ent


@pytest.fixture(scope="module")
def setup():
    base = init_params(CFG, jax.random.key(0))
    adapters = with_random_b(init_adapters(CFG, LORA, jax.random.key(1)), seed=2, std=0.3)
    rng = np.random.RandomState(0)
    tokens = rng.randint(3, CFG.vocab_size, (BATCH, LENGTH)).astype(np.int32)
    mask = np.zeros((BATCH, LENGTH), np.float32)
    mask[:, PROMPT:] = 1.0
    mask[1, -2:] = 0.0  # a shorter response
    merged = _np_merged(base, adapters)
    lp, ent = _np_logprobs_and_entropy(forward(CFG, merged, tokens), tokens)
    batch = {"tokens": tokens, "attention_mask": np.ones_like(tokens), "loss_mask": mask,
             # old / reference logprobs near the current ones, so some ratios clip and the KL is non-zero
             "old_logprobs": (lp + rng.normal(0, 0.3, lp.shape) * mask).astype(np.float32),
             "ref_logprobs": (lp + rng.normal(0, 0.5, lp.shape) * mask).astype(np.float32),
             "advantages": rng.normal(size=BATCH).astype(np.float32)}
    return base, adapters, merged, batch, lp, ent


def test_lora_grpo_loss_matches_numpy(setup):
    base, adapters, _, batch, lp, ent = setup
    step = rl.make_grpo_step(CFG, optax.sgd(1.0), LOSS, partition=LORA.partition(CFG), donate=False)
    _, _, metrics = step(adapters, step.init_opt_state(adapters), batch, base)
    expected = np_grpo(lp, batch["old_logprobs"], batch["ref_logprobs"], batch["advantages"], batch["loss_mask"],
                       ent, LOSS)
    assert 0 < expected["clip_frac"] < 1 and expected["kl"] > 0  # every term of the loss is exercised
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac"):
        np.testing.assert_allclose(float(metrics[key]), expected[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_lora_grpo_gradient_matches_the_numpy_chain_rule(setup):
    base, adapters, merged, batch, _, _ = setup
    lora_step = rl.make_grpo_step(CFG, optax.sgd(1.0), LOSS, partition=LORA.partition(CFG), donate=False)
    new, _, _ = lora_step(adapters, lora_step.init_opt_state(adapters), batch, base)
    full_step = rl.make_grpo_step(CFG, optax.sgd(1.0), LOSS, donate=False)  # at the merged weights
    moved, _, _ = full_step(merged, full_step.init_opt_state(merged), batch)
    checked = 0
    for target in TARGETS:
        block = BLOCK_OF[target]
        g = (np.asarray(merged["layers"][block][f"{target}_kernel"], np.float64)
             - np.asarray(moved["layers"][block][f"{target}_kernel"], np.float64))  # dL/dW' [L, in..., out...]
        a = np.asarray(adapters["layers"][block][f"{target}_lora_a"], np.float64)
        b = np.asarray(adapters["layers"][block][f"{target}_lora_b"], np.float64)
        layers, rank = a.shape[0], a.shape[-1]
        g2 = g.reshape(layers, a[0].size // rank, -1)                        # [L, in, out]
        a2, b2 = a.reshape(layers, -1, rank), b.reshape(layers, rank, -1)    # [L, in, r], [L, r, out]
        expected = {"a": LORA.scale * np.einsum("lio,lro->lir", g2, b2).reshape(a.shape),
                    "b": LORA.scale * np.einsum("lir,lio->lro", a2, g2).reshape(b.shape)}
        for part, want in expected.items():
            name = f"{target}_lora_{part}"
            got = np.asarray(adapters["layers"][block][name], np.float64) - np.asarray(new["layers"][block][name])
            assert np.abs(want).max() > 1e-4, name  # a gradient worth comparing
            np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, np.abs(want).max()), rtol=0, err_msg=name)
            checked += 1
    assert checked == 2 * len(TARGETS)
