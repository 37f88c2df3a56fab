"""Teacher-forced logits through the sampler's own decoding path, for tests: the sampler's prefill,
then `models.decode.decode_step` fed given continuation tokens at the slots and positions the
decode loop uses (`sampling.decode_loop.step_inputs`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.models.decode import decode_step
from genenv_jax.parallel import to_host
from genenv_jax.sampling.decode_loop import step_inputs


@functools.partial(jax.jit, static_argnums=0)
def _forced_logits(cfg, params, caches, last_logits, prompt_mask, prompt_lengths, forced):
    """Logits [B, T, V]: the prefill's, then those after feeding forced[:, j] for j < T - 1."""
    cache_len = caches[0][0].shape[2]

    def step(caches, xs):
        i, tokens = xs
        slot, positions, key_mask = step_inputs(i, prompt_mask, prompt_lengths, cache_len)
        logits, caches = decode_step(cfg, params, caches, tokens, positions, slot, key_mask)
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
    forced = np.full((batch.tokens.shape[0], longest), sampler.pad_id, np.int32)
    for i, c in enumerate(continuations):
        forced[i, :len(c)] = c
    caches, last_logits = sampler.prefill(placed, batch)
    out = to_host(_forced_logits(sampler.cfg, placed.tree, caches, last_logits, batch.mask, batch.lengths,
                                 jnp.asarray(forced)))
    return [out[i, :len(c)] for i, c in enumerate(continuations)]
