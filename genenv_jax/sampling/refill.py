"""Starting prompts in free slots: prefill R prompts, write their caches into the slots' prompt
range, choose each prompt's first token from the prefill logits, and mark the slots running.

The first batch of a call and every later refill go through this one function, so a prompt's
computation is the same whichever slot or segment it starts in.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.decode import CACHE_AXES, Caches, extend, prefill, write_prompt_rows
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


@flax.struct.dataclass
class PoolPrefix:
    """Device inputs of a prefill that starts from pool entries (`prefix_cache.py`): `pool` per layer
    (k, v) [F, K, H]; `index` [R, P] the flat pool index of the key each prompt slot copies (-1:
    none; a row's prompt sits at [P - length, P), its reused prefix at the start of that range);
    `reused` [R] the prefix length of each row."""

    pool: Caches
    index: jax.Array
    reused: jax.Array


def gather_prefix(pool: Caches, index: jax.Array) -> Caches:
    """Caches [R, K, P, H]: slot p of row r holds pool key index[r, p] (zeros where index < 0)."""
    valid = (index >= 0)[:, None, :, None]

    def take(buf):  # [F, K, H] -> [R, K, P, H]
        return jnp.where(valid, jnp.take(buf, jnp.maximum(index, 0), axis=0).transpose(0, 2, 1, 3), 0)
    return jax.tree.map(take, pool)


def store_rows(pool: Caches, caches: Caches, index: jax.Array) -> Caches:
    """The pool with key s of row r of caches [R, K, S, H] written at flat index index[r, s]; an
    index >= F writes nothing."""
    def put(buf, rows):
        flat = rows.transpose(0, 2, 1, 3).reshape(-1, *buf.shape[1:])  # [R * S, K, H]
        return buf.at[index.reshape(-1)].set(flat.astype(buf.dtype), mode="drop")
    return jax.tree.map(put, pool, caches)


def prefill_prompts(cfg: ModelConfig, constrain: Constrain, rows_per_chunk: int, params: Params, tokens: jax.Array,
                    mask: jax.Array, prefix: PoolPrefix | None) -> tuple[Caches, jax.Array]:
    """Prompt caches [R, K, P, H] and last logits [R, V] of left-padded prompts.

    Without `prefix`, tokens/mask [R, P] are the whole prompts (a plain prefill). With it, they are
    each prompt's unmatched remainder, left-padded to T <= P: the reused keys are copied from the
    pool into the prompt range and the remainder is computed at slots [P - T, P) on top of them.
    """
    if prefix is None:
        return prefill(cfg, params, tokens, mask, cache_len=tokens.shape[1], rows_per_chunk=rows_per_chunk,
                       constrain=constrain)
    prompt_len = prefix.index.shape[1]
    caches = tuple(tuple(constrain(a, CACHE_AXES) for a in layer) for layer in gather_prefix(prefix.pool, prefix.index))
    positions = prefix.reused[:, None] + jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1, 0)
    return extend(cfg, params, caches, tokens, mask, positions, prompt_len - tokens.shape[1], prefix.index >= 0,
                  rows_per_chunk, constrain)


def refill(cfg: ModelConfig, constrain: Constrain, options: SelectOptions, rows_per_chunk: int, params: Params,
           state: DecodeState, tokens: jax.Array, mask: jax.Array, prompt_mask: jax.Array, lengths: jax.Array,
           slots: jax.Array, prompt_ids: jax.Array, caps: jax.Array, stop_ids: jax.Array, seed_low: jax.Array,
           seed_high: jax.Array, temperature: jax.Array, top_p: jax.Array, prefix: PoolPrefix | None = None,
           ) -> DecodeState:
    """Starts prompts (prompt_mask [R, P], left-padded; lengths, caps, prompt_ids [R]) in `slots` [R].

    tokens/mask: the prompts' last T <= P columns [R, T] (every prompt of the refill fits them: left
    padding), or with `prefix` their remainders after the reused prefix [R, T] (`prefill_prompts`);
    the prompt caches go to slots [P - T, P). A slot index >= B marks a padding row: nothing of it is
    written. `params` from `models.decode.unstack_layers`; stop_ids [n] (-1 never matches);
    scalars as `decode_segment`.
    """
    batch = state.done.shape[0]
    prompt_caches, last_logits = prefill_prompts(cfg, constrain, rows_per_chunk, params, tokens, mask, prefix)
    first, logprobs = choose(options, last_logits, prompt_ids, jnp.zeros_like(prompt_ids), seed_low, seed_high,
                             temperature, top_p)
    stops = is_stop(first, stop_ids)
    real = slots < batch
    state = write_results(state, jnp.where(real, prompt_ids, state.tokens.shape[0]), jnp.zeros_like(slots), first,
                          logprobs, stops)
    put = lambda a, v: a.at[slots].set(v, mode="drop")  # noqa: E731
    return state.replace(
        caches=write_prompt_rows(state.caches, prompt_caches, slots, prompt_len=state.prompt_mask.shape[1]),
        prompt_mask=put(state.prompt_mask, prompt_mask), prompt_lengths=put(state.prompt_lengths, lengths),
        prompt_ids=put(state.prompt_ids, prompt_ids), caps=put(state.caps, caps),
        steps=put(state.steps, jnp.ones_like(slots)), last_tokens=put(state.last_tokens, first),
        done=put(state.done, stops | (caps <= 1)))


def fill_entries(cfg: ModelConfig, constrain: Constrain, rows_per_chunk: int, params: Params, pool: Caches,
                 tokens: jax.Array, mask: jax.Array, index: jax.Array, reused: jax.Array, target: jax.Array) -> Caches:
    """Prefills shared prefixes into the pool: rows laid out as `refill`'s prompts (tokens/mask [R, T]
    the part not copied from the pool via `index` [R, P]), their keys stored at target [R, P]."""
    caches, _ = prefill_prompts(cfg, constrain, rows_per_chunk, params, tokens, mask, PoolPrefix(pool, index, reused))
    return store_rows(pool, caches, target)


def store_slots(pool: Caches, caches: Caches, rows: jax.Array, index: jax.Array) -> Caches:
    """The pool with the keys of slot rows `rows` [R] of the decode caches [B, K, S, H] stored at
    index [R, S] (>= F: not stored)."""
    return store_rows(pool, jax.tree.map(lambda a: a[rows], caches), index)
