"""Next-token choice from float32 logits: greedy, temperature, top-k, top-p, with the chosen
token's logprob. Works on one decode step's [B, V] logits; nothing full-vocab outlives the step."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. temperature 0 is greedy (top_k / top_p are then ignored).

    top_k 0 means no top-k filter; top_p 1.0 means no nucleus filter. Filters apply in HF's
    order: temperature, then top-k, then top-p over the renormalised top-k candidates.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def select_tokens(logits: jax.Array, row_keys: jax.Array, step: jax.Array, temperature: jax.Array,
                  top_p: jax.Array, *, greedy: bool, top_k: int, use_top_p: bool,
                  ) -> tuple[jax.Array, jax.Array]:
    """Chooses one token per row from logits [B, V] float32.

    `row_keys` [B] are per-row PRNG keys, folded with `step` ([] or [B]: each row's own step), so a
    row's draws do not depend on the batch it shares. Returns tokens [B] int32 and their logprobs
    [B] float32: log_softmax of logits / temperature (plain log_softmax when greedy), before any
    top-k / top-p truncation.
    """
    if greedy:
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        chosen = jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0]
        return tokens, chosen - jax.nn.logsumexp(logits, axis=-1)

    scaled = logits / temperature  # [B, V]
    vocab = scaled.shape[-1]
    if top_k or use_top_p:
        # Candidates sorted by descending logit; without top-k, top-p needs the whole vocab sorted.
        cand_logits, cand_ids = jax.lax.top_k(scaled, min(top_k, vocab) if top_k else vocab)  # [B, C]
    else:
        cand_logits, cand_ids = scaled, None
    if use_top_p:
        probs = jax.nn.softmax(cand_logits, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs  # probability of the better candidates
        cand_logits = jnp.where(mass_before < top_p, cand_logits, -jnp.inf)  # the best always stays
    step_keys = jax.vmap(jax.random.fold_in)(row_keys, jnp.broadcast_to(step, row_keys.shape))
    choice = jax.vmap(jax.random.categorical)(step_keys, cand_logits)  # [B]
    if cand_ids is None:
        tokens = choice.astype(jnp.int32)
    else:
        tokens = jnp.take_along_axis(cand_ids, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)
    chosen = jnp.take_along_axis(scaled, tokens[:, None], axis=-1)[:, 0]
    return tokens, chosen - jax.nn.logsumexp(scaled, axis=-1)


def prompt_keys(seed_low: jax.Array, seed_high: jax.Array, prompt_ids: jax.Array) -> jax.Array:
    """PRNG keys [B] of prompts: fold_in(key(seed), prompt index), with the 64-bit seed given as its
    two 32-bit halves. Keyed by the prompt's index in the call, not by the slot it decodes in, so a
    prompt draws the same stream whichever slot or refill segment it lands in."""
    key = jax.random.fold_in(jax.random.key(seed_low), seed_high)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, prompt_ids)
