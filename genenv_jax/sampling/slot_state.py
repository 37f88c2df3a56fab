"""The sampler's device state: B decode slots, each running one prompt at its own step, and the
results of every prompt of the call, written by prompt index as tokens are chosen.

Results live on the device and are indexed by prompt, not by slot, so a slot can be refilled with
the next prompt as soon as its own finishes, without copying anything to the host; the host reads
the results once, at the end of the call.

Shape letters: B slots, P prompt bucket, W window (generated slots in the cache), N prompts of the
call (bucketed), G new-token bucket (the largest per-prompt cap, bucketed), R refilled rows.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.decode import Caches, new_caches, resize_caches
from genenv_jax.models.primitives import Constrain


@flax.struct.dataclass
class DecodeState:
    """Slots and results. A free slot (`done`) holds no running prompt: its own finished, or it was
    never filled; its `prompt_ids` entry is N (out of range, so its writes are dropped)."""

    caches: Caches  # per layer (k, v) [B, K, P + W, H]: prompt at [0, P), generated tokens from P
    prompt_mask: jax.Array  # [B, P] bool: the slot's prompt tokens (left-padded)
    prompt_lengths: jax.Array  # [B] int32
    prompt_ids: jax.Array  # [B] int32: which prompt of the call the slot decodes
    caps: jax.Array  # [B] int32: that prompt's max_new_tokens
    steps: jax.Array  # [B] int32: tokens generated for it so far
    last_tokens: jax.Array  # [B] int32: the token the slot feeds next
    done: jax.Array  # [B] bool: the slot is free
    tokens: jax.Array  # [N, G] int32 per prompt, pad_id after its end
    logprobs: jax.Array  # [N, G] float32 per prompt, 0 after its end
    lengths: jax.Array  # [N] int32 tokens recorded per prompt
    stopped: jax.Array  # [N] bool: the prompt's last token is a stop token
    decode_steps: jax.Array  # [] int32: decode forward passes run so far, each over the slots of its time

    @property
    def window(self) -> int:
        """W: cache slots for generated tokens."""
        return self.caches[0][0].shape[2] - self.prompt_mask.shape[1]


def empty_state(cfg: ModelConfig, constrain: Constrain, *, slots: int, prompt_len: int, window: int,
                num_prompts: int, new_tokens: int, pad_id: int) -> DecodeState:
    """All slots free, zeroed caches [B, K, P + W, H], empty results [N, G]."""
    b, n = slots, num_prompts
    return DecodeState(
        caches=new_caches(cfg, (b,), prompt_len + window, constrain),
        prompt_mask=jnp.zeros((b, prompt_len), bool), prompt_lengths=jnp.zeros((b,), jnp.int32),
        prompt_ids=jnp.full((b,), n, jnp.int32), caps=jnp.zeros((b,), jnp.int32),
        steps=jnp.zeros((b,), jnp.int32), last_tokens=jnp.zeros((b,), jnp.int32), done=jnp.ones((b,), bool),
        tokens=jnp.full((n, new_tokens), pad_id, jnp.int32), logprobs=jnp.zeros((n, new_tokens), jnp.float32),
        lengths=jnp.zeros((n,), jnp.int32), stopped=jnp.zeros((n,), bool), decode_steps=jnp.int32(0))


def resize_window(state: DecodeState, window: int) -> DecodeState:
    """The state with its caches cut or grown to P + window slots (slots past every running row's
    step only: the caller checks that)."""
    return state.replace(caches=resize_caches(state.caches, state.prompt_mask.shape[1] + window))


def compact_slots(state: DecodeState, rows: jax.Array) -> DecodeState:
    """The state on B' = len(rows) slots: slot i of the result is slot rows[i] of `state` (its cache
    rows and per-slot fields copied as they are); the per-prompt results are unchanged."""
    take = lambda a: a[rows]  # noqa: E731
    return state.replace(
        caches=jax.tree.map(take, state.caches), prompt_mask=take(state.prompt_mask),
        prompt_lengths=take(state.prompt_lengths), prompt_ids=take(state.prompt_ids), caps=take(state.caps),
        steps=take(state.steps), last_tokens=take(state.last_tokens), done=take(state.done))


def is_stop(tokens: jax.Array, stop_ids: jax.Array) -> jax.Array:
    """[X] bool: tokens [X] that are one of stop_ids [n] (-1 entries never match)."""
    return jnp.any(tokens[:, None] == stop_ids[None, :], axis=-1)


def write_results(state: DecodeState, prompt_ids: jax.Array, steps: jax.Array, tokens: jax.Array,
                  logprobs: jax.Array, stops: jax.Array) -> DecodeState:
    """Records token `steps[x]` of prompt `prompt_ids[x]` for rows x of [X] arrays; a prompt id >= N
    writes nothing."""
    at = lambda a, *idx: a.at[idx]  # noqa: E731
    return state.replace(
        tokens=at(state.tokens, prompt_ids, steps).set(tokens, mode="drop"),
        logprobs=at(state.logprobs, prompt_ids, steps).set(logprobs, mode="drop"),
        lengths=at(state.lengths, prompt_ids).set(steps + 1, mode="drop"),
        stopped=at(state.stopped, prompt_ids).set(stops, mode="drop"))


def record_step(state: DecodeState, tokens: jax.Array, logprobs: jax.Array, stop_ids: jax.Array) -> DecodeState:
    """Records the tokens [B] (and logprobs) one decode step chose, for the slots that were running;
    a slot whose prompt stops or reaches its cap becomes free."""
    running = ~state.done
    stops = is_stop(tokens, stop_ids)
    n = state.tokens.shape[0]
    state = write_results(state, jnp.where(running, state.prompt_ids, n), state.steps, tokens, logprobs, stops)
    steps = state.steps + running.astype(jnp.int32)
    return state.replace(steps=steps, last_tokens=tokens, done=state.done | stops | (steps >= state.caps))
