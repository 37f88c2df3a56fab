"""Packs (prompt, response) token lists into the fixed-shape batches the update steps take.

Row layout: `[pad … prompt | response … pad]`: the prompt is left-padded to a bucket P and the
response right-padded to a bucket R, so every batch of a run has one of a few shapes [B, P + R]
and the jitted steps compile a handful of times. Positions follow from `attention_mask`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from genenv_jax.core.bucketing import length_bucket, round_up


def pack_sequences(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int, *,
                   response_logprobs: Sequence[Sequence[float]] | None = None,
                   response_masks: Sequence[Sequence[float]] | None = None, num_rows: int | None = None,
                   prompt_len: int | None = None, response_len: int | None = None,
                   response_values: Mapping[str, Sequence[Sequence[float]]] | None = None) -> dict[str, np.ndarray]:
    """A batch dict: tokens, attention_mask (int32), loss_mask (float32, on response tokens) [B, P + R],
    and old_logprobs (float32, aligned with tokens) when `response_logprobs` is given.
    `response_values` maps further batch keys to one float per response token of each row (GiGPO's
    per-token advantages), packed the same way (0 elsewhere).
    `response_masks` limits the loss to some response tokens (a multi-turn episode's agent turns,
    not its observations); by default every response token is in the loss.

    `num_rows` pads the batch with empty rows (all-zero masks, no loss) up to a fixed row count;
    `prompt_len` / `response_len` fix P / R (default: buckets of the longest prompt / response).
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    per_token = dict(response_values or {})
    if response_logprobs is not None:
        per_token["old_logprobs"] = response_logprobs
    for key, values in per_token.items():
        if len(values) != len(responses):
            raise ValueError(f"{len(values)} {'logprob' if key == 'old_logprobs' else key} rows for "
                             f"{len(responses)} responses")
    rows = len(prompts) if num_rows is None else int(num_rows)
    if rows < len(prompts):
        raise ValueError(f"num_rows {rows} < {len(prompts)} sequences")
    p_len = prompt_len or length_bucket(max((len(p) for p in prompts), default=1))
    r_len = response_len or length_bucket(max((len(r) for r in responses), default=1))
    tokens = np.full((rows, p_len + r_len), pad_id, np.int32)
    attention = np.zeros((rows, p_len + r_len), np.int32)
    loss_mask = np.zeros((rows, p_len + r_len), np.float32)
    packed = {key: np.zeros((rows, p_len + r_len), np.float32) for key in per_token}
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        if len(prompt) > p_len or len(response) > r_len:
            raise ValueError(f"row {i}: prompt {len(prompt)} / response {len(response)} tokens exceed "
                             f"the padded lengths {p_len} / {r_len}")
        start = p_len - len(prompt)
        tokens[i, start:p_len] = prompt
        tokens[i, p_len:p_len + len(response)] = response
        attention[i, start:p_len + len(response)] = 1
        if response_masks is None:
            loss_mask[i, p_len:p_len + len(response)] = 1.0
        else:
            mask = np.asarray(response_masks[i], np.float32)
            if mask.shape != (len(response),):
                raise ValueError(f"row {i}: {mask.shape[0]} loss-mask entries for {len(response)} response tokens")
            loss_mask[i, p_len:p_len + len(response)] = mask
        for key, values in per_token.items():
            row = np.asarray(values[i], np.float32)
            if row.shape != (len(response),):
                what = "logprobs" if key == "old_logprobs" else key
                raise ValueError(f"row {i}: {row.shape[0]} {what} for {len(response)} response tokens")
            packed[key][i, p_len:p_len + len(response)] = row
    return {"tokens": tokens, "attention_mask": attention, "loss_mask": loss_mask} | packed


def padded_row_count(rows: int, multiple: int) -> int:
    """Rows rounded up so the batch splits over micro-batches and data-parallel devices."""
    return round_up(max(rows, 1), multiple)
