"""Batched sampling with a KV cache: jitted prefill, on-device decode loop, bucketed shapes.

    from genenv_jax.sampling import Sampler, generate
    out = generate(cfg, params, [[1, 2, 3], [4, 5]], max_new_tokens=32, temperature=0.7, seed=0)
    out.token_lists(), out.logprobs, out.lengths, out.finish_reasons

`generate(..., slots=256)` decodes 256 prompts at a time and refills finished slots from the
queue of the rest (continuous batching); `out.stats` says how busy the slots were. Prompts that
share leading tokens (with each other, or with what a `retain=True` call kept: an episode's earlier
turns) prefill only the rest (`prefix_cache.py`); `out.stats.prefill` counts the tokens.
The decoder itself (KV-cache layout, prefill, decode step) is `genenv_jax.models.decode`.
"""

from genenv_jax.sampling.buckets import Buckets
from genenv_jax.sampling.prefix_cache import PrefillCounts, PrefixCacheConfig
from genenv_jax.sampling.sampler import (FINISH_LENGTH, FINISH_STOP, PromptBatch, SampleOutput, Sampler,
                                         SamplerParams, generate, params_mesh, shared_sampler)
from genenv_jax.sampling.scheduler import SlotStats
from genenv_jax.sampling.slot_state import DecodeState
from genenv_jax.sampling.token_selection import SamplingParams, select_tokens

__all__ = ["Buckets", "DecodeState", "FINISH_LENGTH", "FINISH_STOP", "PrefillCounts", "PrefixCacheConfig",
           "PromptBatch", "SampleOutput", "Sampler",
           "SamplerParams", "SamplingParams", "SlotStats", "generate", "params_mesh", "select_tokens", "shared_sampler"]
