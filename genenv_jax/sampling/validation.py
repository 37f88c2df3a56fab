"""Checks of the sampler's inputs, with errors that name the offending prompt, token or param."""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import numpy as np

from genenv_jax.models import ModelConfig, param_shapes


@functools.lru_cache(maxsize=16)
def _expected_param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    return {jax.tree_util.keystr(k): v.shape for k, v in jax.tree_util.tree_leaves_with_path(param_shapes(cfg))}


def check_param_tree(cfg: ModelConfig, params: Any) -> None:
    """Raises a ValueError naming the first param whose path or shape does not fit `cfg`."""
    want = _expected_param_shapes(cfg)
    try:
        got = {jax.tree_util.keystr(k): tuple(np.shape(v)) for k, v in jax.tree_util.tree_leaves_with_path(params)}
    except Exception as e:  # noqa: BLE001 - any non-tree input
        raise ValueError(f"params must be the model's param tree: {e}") from None
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        raise ValueError(f"params do not match the config: missing {missing[:5]}, unexpected {extra[:5]}")
    for path, shape in want.items():
        if got[path] != shape:
            raise ValueError(f"param {path} has shape {got[path]}, the config needs {shape}")


def validate_prompts(prompts: Sequence[Sequence[int]], vocab_size: int) -> list[np.ndarray]:
    """Prompts as int32 rows; each must be a non-empty list of ids in [0, vocab_size)."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple, np.ndarray)):
        raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError("prompts is empty")
    rows = []
    for i, prompt in enumerate(prompts):
        row = np.asarray(prompt)
        if row.ndim != 1 or row.size == 0:
            raise ValueError(f"prompt {i} must be a non-empty 1-D list of token ids, got shape {row.shape}")
        if row.dtype.kind not in "iu":
            raise TypeError(f"prompt {i} must hold integer token ids, got dtype {row.dtype}")
        if row.min() < 0 or row.max() >= vocab_size:
            raise ValueError(f"prompt {i} has token ids outside [0, {vocab_size}): "
                             f"min {row.min()}, max {row.max()}")
        rows.append(row.astype(np.int32))
    return rows


def validate_stop_tokens(stop_tokens: Sequence[int], vocab_size: int) -> list[int]:
    """Stop ids as ints, each in [0, vocab_size)."""
    ids = [int(t) for t in np.asarray(list(stop_tokens), dtype=np.int64).reshape(-1)]
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"stop_tokens {bad} are outside the vocabulary [0, {vocab_size})")
    return ids


def validate_caps(max_new_tokens: int | Sequence[int], num_prompts: int) -> np.ndarray:
    """max_new_tokens as [n] int32 caps: one int for every prompt, or one int >= 1 per prompt."""
    if isinstance(max_new_tokens, (int, np.integer)) and not isinstance(max_new_tokens, bool):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        return np.full((num_prompts,), int(max_new_tokens), np.int32)
    if isinstance(max_new_tokens, (str, bytes)) or not isinstance(max_new_tokens, (list, tuple, np.ndarray)):
        raise ValueError(f"max_new_tokens must be an int >= 1 or one per prompt, got {max_new_tokens!r}")
    caps = list(max_new_tokens)
    if len(caps) != num_prompts:
        raise ValueError(f"max_new_tokens has {len(caps)} caps for {num_prompts} prompts")
    for i, cap in enumerate(caps):
        if not isinstance(cap, (int, np.integer)) or isinstance(cap, bool) or cap < 1:
            raise ValueError(f"max_new_tokens[{i}] must be an int >= 1, got {cap!r}")
    return np.asarray(caps, np.int32)
