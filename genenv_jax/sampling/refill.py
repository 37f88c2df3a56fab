"""Starting prompts in free slots: prefill R prompts, write their caches into the slots' prompt
range, choose each prompt's first token from the prefill logits, and mark the slots running.

The first batch of a call and every later refill go through this one function, so a prompt's
computation is the same whichever slot or segment it starts in.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.decode import prefill, write_prompt_rows
from genenv_jax.models.params import Params
from genenv_jax.models.primitives import Constrain
from genenv_jax.sampling.slot_state import DecodeState, is_stop, write_results
from genenv_jax.sampling.token_selection import prompt_keys, select_tokens


@dataclasses.dataclass(frozen=True)
class SelectOptions:
    """How tokens are chosen; fixed per compiled program (a static argument)."""

    greedy: bool
    top_k: int  # 0: no top-k filter
    use_top_p: bool


def choose(options: SelectOptions, logits: jax.Array, prompt_ids: jax.Array, steps: jax.Array,
           seed_low: jax.Array, seed_high: jax.Array, temperature: jax.Array, top_p: jax.Array,
           ) -> tuple[jax.Array, jax.Array]:
    """Tokens and logprobs [X] from logits [X, V] for token `steps[x]` of prompt `prompt_ids[x]`."""
    return select_tokens(logits, prompt_keys(seed_low, seed_high, prompt_ids), steps, temperature, top_p,
                         greedy=options.greedy, top_k=options.top_k, use_top_p=options.use_top_p)


def refill(cfg: ModelConfig, constrain: Constrain, options: SelectOptions, rows_per_chunk: int, params: Params,
           state: DecodeState, tokens: jax.Array, mask: jax.Array, lengths: jax.Array, slots: jax.Array,
           prompt_ids: jax.Array, caps: jax.Array, stop_ids: jax.Array, seed_low: jax.Array,
           seed_high: jax.Array, temperature: jax.Array, top_p: jax.Array) -> DecodeState:
    """Starts prompts tokens/mask [R, P] (left-padded; lengths, caps, prompt_ids [R]) in `slots` [R].

    A slot index >= B marks a padding row: nothing of it is written. `params` from
    `models.decode.unstack_layers`; stop_ids [n] (-1 never matches); scalars as `decode_segment`.
    """
    batch = state.done.shape[0]
    prompt_caches, last_logits = prefill(cfg, params, tokens, mask, cache_len=tokens.shape[1],
                                         rows_per_chunk=rows_per_chunk, constrain=constrain)
    first, logprobs = choose(options, last_logits, prompt_ids, jnp.zeros_like(prompt_ids), seed_low, seed_high,
                             temperature, top_p)
    stops = is_stop(first, stop_ids)
    real = slots < batch
    state = write_results(state, jnp.where(real, prompt_ids, state.tokens.shape[0]), jnp.zeros_like(slots), first,
                          logprobs, stops)
    put = lambda a, v: a.at[slots].set(v, mode="drop")  # noqa: E731
    return state.replace(
        caches=write_prompt_rows(state.caches, prompt_caches, slots),
        prompt_mask=put(state.prompt_mask, mask), prompt_lengths=put(state.prompt_lengths, lengths),
        prompt_ids=put(state.prompt_ids, prompt_ids), caps=put(state.caps, caps),
        steps=put(state.steps, jnp.ones_like(slots)), last_tokens=put(state.last_tokens, first),
        done=put(state.done, stops | (caps <= 1)))

