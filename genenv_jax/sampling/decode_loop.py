"""The on-device decode loop: the first token from the prefill logits, then a `lax.while_loop` of
cached decode steps that feeds one token per row per step until every row is done.

Generated token i (i >= 1) is predicted by the step that feeds token i - 1 at cache slot
P + i - 1 (P: the prompt bucket) and position prompt_length + i - 1.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.decode import Caches, decode_step
from genenv_jax.models.params import Params
from genenv_jax.models.primitives import Constrain
from genenv_jax.sampling.token_selection import select_tokens


@dataclasses.dataclass(frozen=True)
class LoopOptions:
    """What is fixed per compiled decode program (a static argument)."""

    steps_per_sync: int  # decode steps between loop-exit checks
    pad_id: int  # written after a row's end
    greedy: bool
    top_k: int  # 0: no top-k filter
    use_top_p: bool


@flax.struct.dataclass
class DecodeState:
    """The loop carry. `decode_loop` returns the last one, with tokens / logprobs cut to [B, G]."""

    steps: jax.Array  # [] int32: tokens generated per row so far (the last block's overrun included)
    caches: Caches  # per layer (k, v) [B, K, P + G, H]
    last_tokens: jax.Array  # [B] int32: the token each row feeds next
    tokens: jax.Array  # [B, G + steps_per_sync - 1] int32, pad_id after each row's end
    logprobs: jax.Array  # [B, G + steps_per_sync - 1] float32, 0 after each row's end
    lengths: jax.Array  # [B] int32: tokens recorded per row
    stopped: jax.Array  # [B] bool: the row sampled a stop token
    done: jax.Array  # [B] bool: stopped, reached max_new_tokens, or a row that only pads the batch


def step_inputs(i: jax.Array, prompt_mask: jax.Array, prompt_lengths: jax.Array, cache_len: int,
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """For the step that feeds generated token i - 1: its cache slot, positions [B], key mask [B, S]
    (the row's prompt slots and the generated slots up to this one)."""
    prompt_len = prompt_mask.shape[1]
    slot = prompt_len + i - 1
    slots = jnp.arange(cache_len)
    in_prompt = jnp.pad(prompt_mask, ((0, 0), (0, cache_len - prompt_len)))  # [B, S]
    key_mask = in_prompt | ((slots >= prompt_len) & (slots <= slot))[None, :]
    return slot, prompt_lengths + i - 1, key_mask


def _record(state: DecodeState, tokens: jax.Array, logprobs: jax.Array, stop_ids: jax.Array,
            max_new_tokens: jax.Array, pad_id: int) -> DecodeState:
    """Writes the tokens [B] chosen at step `state.steps` (padding on finished rows)."""
    i, done = state.steps, state.done
    is_stop = jnp.any(tokens[:, None] == stop_ids[None, :], axis=-1)
    return state.replace(
        steps=i + 1,
        last_tokens=tokens,
        tokens=jax.lax.dynamic_update_slice(state.tokens, jnp.where(done, pad_id, tokens)[:, None], (0, i)),
        logprobs=jax.lax.dynamic_update_slice(state.logprobs, jnp.where(done, 0.0, logprobs)[:, None], (0, i)),
        lengths=state.lengths + (~done).astype(jnp.int32),
        stopped=state.stopped | (~done & is_stop),
        done=done | is_stop | (i + 1 >= max_new_tokens))


def decode_loop(cfg: ModelConfig, constrain: Constrain, options: LoopOptions, params: Params, caches: Caches,
                last_logits: jax.Array, prompt_mask: jax.Array, prompt_lengths: jax.Array, active: jax.Array,
                stop_ids: jax.Array, max_new_tokens: jax.Array, seed_low: jax.Array, seed_high: jax.Array,
                temperature: jax.Array, top_p: jax.Array) -> DecodeState:
    """The decode program. last_logits [B, V] from the prefill; prompt_mask [B, P]; prompt_lengths,
    active [B]; stop_ids [n] (-1 never matches); scalars: max_new_tokens, the seed's two 32-bit
    halves, temperature, top_p. `params` from `models.decode.unstack_layers`."""
    batch = prompt_mask.shape[0]
    cache_len = caches[0][0].shape[2]
    width = cache_len - prompt_mask.shape[1]  # G
    key = jax.random.fold_in(jax.random.key(seed_low), seed_high)
    row_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(batch))
    select = functools.partial(select_tokens, row_keys=row_keys, temperature=temperature, top_p=top_p,
                               greedy=options.greedy, top_k=options.top_k, use_top_p=options.use_top_p)
    record = functools.partial(_record, stop_ids=stop_ids, max_new_tokens=max_new_tokens, pad_id=options.pad_id)

    def one_step(_, state: DecodeState) -> DecodeState:
        slot, positions, key_mask = step_inputs(state.steps, prompt_mask, prompt_lengths, cache_len)
        # Past the last bucket slot (only in the overrun after every row is done) the write clamps.
        logits, caches = decode_step(cfg, params, state.caches, state.last_tokens, positions, slot, key_mask,
                                     constrain)
        tokens, logprobs = select(logits, step=state.steps)
        return record(state.replace(caches=caches), tokens, logprobs)

    # Output columns get steps_per_sync - 1 spare slots for the overrun of the last block.
    columns = width + options.steps_per_sync - 1
    state = DecodeState(
        steps=jnp.int32(0), caches=caches, last_tokens=jnp.zeros((batch,), jnp.int32),
        tokens=jnp.full((batch, columns), options.pad_id, jnp.int32),
        logprobs=jnp.zeros((batch, columns), jnp.float32),
        lengths=jnp.zeros((batch,), jnp.int32), stopped=jnp.zeros((batch,), bool), done=~active)
    state = record(state, *select(last_logits, step=jnp.int32(0)))
    state = jax.lax.while_loop(
        lambda s: (s.steps < max_new_tokens) & ~jnp.all(s.done),
        lambda s: jax.lax.fori_loop(0, options.steps_per_sync, one_step, s),
        state)
    return state.replace(tokens=state.tokens[:, :width], logprobs=state.logprobs[:, :width])
