"""Teacher-forced logits through the sampler's own decoding path, for tests: `models.decode.prefill`
of the sampler's left-padded prompts, then `models.decode.decode_step` fed given continuation
tokens at the per-row slots and positions the decode loop uses (`sampling.decode_loop.step_inputs`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.models.decode import decode_step, prefill
from genenv_jax.parallel import to_host
from genenv_jax.sampling.decode_loop import step_inputs


@functools.partial(jax.jit, static_argnums=(0, 6))
def _forced_logits(cfg, params, tokens, prompt_mask, prompt_lengths, forced, cache_len):
    """Logits [B, T, V]: the prefill's, then those after feeding forced[:, j] for j < T - 1."""
    caches, last_logits = prefill(cfg, params, tokens, prompt_mask, cache_len=cache_len,
                                  rows_per_chunk=tokens.shape[0])

    def step(caches, xs):
        i, fed = xs
        steps = jnp.full(fed.shape, i, jnp.int32)  # every row at step i: one write slot per row
        slot, positions, key_mask = step_inputs(steps, prompt_mask, prompt_lengths, cache_len)
        logits, caches = decode_step(cfg, params, caches, fed, positions, slot, key_mask)
        return caches, logits

    steps = forced.shape[1] - 1
    _, later = jax.lax.scan(step, caches, (jnp.arange(1, steps + 1), forced[:, :steps].T))  # [T - 1, B, V]
    return jnp.concatenate([last_logits[:, None], later.swapaxes(0, 1)], axis=1)


def teacher_forced_logits(sampler, params, prompts, continuations) -> list[np.ndarray]:
    """Logits [len(continuation_i), V] predicting each continuation token, computed by the cached
    path `Sampler.generate` runs (on a single-device sampler: no sharding constraints)."""
    assert len(prompts) == len(continuations)
    longest = max(len(c) for c in continuations)
    placed = sampler.prepare_params(params)
    batch = sampler.prepare_prompts(prompts, longest)
    forced = np.full((len(prompts), longest), sampler.pad_id, np.int32)
    for i, c in enumerate(continuations):
        forced[i, :len(c)] = c
    out = to_host(_forced_logits(sampler.cfg, placed.tree, jnp.asarray(batch.tokens), jnp.asarray(batch.mask),
                                 jnp.asarray(batch.lengths), jnp.asarray(forced),
                                 batch.tokens.shape[1] + batch.new_tokens_bucket))
    return [out[i, :len(c)] for i, c in enumerate(continuations)]
