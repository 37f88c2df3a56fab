"""One decode segment: a `lax.while_loop` of cached decode steps over B slots, each slot feeding
its own prompt's last token at its own step, until the host has work to do.

A slot's token i (i >= 1) is predicted by the step that feeds token i - 1 at cache slot P + i - 1
and position prompt_length + i - 1. The segment ends when no slot is running, when `refill_at`
slots are free (the host then starts queued prompts in them, `scheduler.py`), or when a running
slot would write past the cache window W in the next block of steps (the host then grows W).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.decode import decode_step
from genenv_jax.models.params import Params
from genenv_jax.models.primitives import Constrain
from genenv_jax.sampling.refill import SelectOptions, choose
from genenv_jax.sampling.slot_state import DecodeState, record_step


@dataclasses.dataclass(frozen=True)
class LoopOptions:
    """What is fixed per compiled decode program (a static argument)."""

    steps_per_sync: int  # decode steps between loop-exit checks
    select: SelectOptions


def step_inputs(steps: jax.Array, prompt_mask: jax.Array, prompt_lengths: jax.Array, cache_len: int,
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """For the step that feeds each slot's token steps - 1 (steps [B]): its cache slot [B], position
    [B] and key mask [B, S] (the slot's prompt and its generated slots up to this one)."""
    prompt_len = prompt_mask.shape[1]
    offsets = jnp.arange(cache_len) - prompt_len  # [S]: generated-token index of each cache slot
    in_prompt = jnp.pad(prompt_mask, ((0, 0), (0, cache_len - prompt_len)))  # [B, S]
    key_mask = in_prompt | ((offsets[None, :] >= 0) & (offsets[None, :] < steps[:, None]))
    return prompt_len + steps - 1, prompt_lengths + steps - 1, key_mask


def fits_window(state: DecodeState, steps_ahead: int) -> jax.Array:
    """[] bool: every running slot can take `steps_ahead` more steps (or reach its cap) inside the
    window: its last write, at generated index min(steps + steps_ahead, cap) - 2, is < W."""
    last_step = jnp.minimum(state.steps + steps_ahead, state.caps)
    return jnp.all(state.done | (last_step - 1 <= state.window))


def decode_segment(cfg: ModelConfig, constrain: Constrain, options: LoopOptions, params: Params,
                   state: DecodeState, stop_ids: jax.Array, refill_at: jax.Array, seed_low: jax.Array,
                   seed_high: jax.Array, temperature: jax.Array, top_p: jax.Array) -> DecodeState:
    """Decodes until no slot runs, `refill_at` slots are free, or the window is full (see module doc).

    `params` from `models.decode.unstack_layers`; stop_ids [n] (-1 never matches); scalars:
    refill_at, the seed's two 32-bit halves, temperature, top_p.
    """
    cache_len = state.caches[0][0].shape[2]
    sync = options.steps_per_sync

    def one_step(_, s: DecodeState) -> DecodeState:
        slot, positions, key_mask = step_inputs(s.steps, s.prompt_mask, s.prompt_lengths, cache_len)
        # A free slot's write clamps to the last cache slot of its own row: harmless, it runs nothing.
        logits, caches = decode_step(cfg, params, s.caches, s.last_tokens, positions, slot, key_mask, constrain)
        tokens, logprobs = choose(options.select, logits, s.prompt_ids, s.steps, seed_low, seed_high,
                                  temperature, top_p)
        return record_step(s.replace(caches=caches, decode_steps=s.decode_steps + 1), tokens, logprobs, stop_ids)

    def keep_going(s: DecodeState) -> jax.Array:
        free = jnp.sum(s.done.astype(jnp.int32))
        return ~jnp.all(s.done) & (free < refill_at) & fits_window(s, sync)

    return jax.lax.while_loop(keep_going, lambda s: jax.lax.fori_loop(0, sync, one_step, s), state)
