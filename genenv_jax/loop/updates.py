"""The one batched-update routine GRPO (agent), RWR (simulator) and warm-start SFT share:
rows -> fixed-shape padded batches -> one optimizer step each -> averaged metrics."""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from genenv_jax.loop.packing import length_bucket, pack_sequences, padded_row_count
from genenv_jax.loop.state import PolicyState

TrainFn = Callable[[PolicyState, Mapping[str, np.ndarray]], tuple[PolicyState, dict[str, float]]]


@dataclasses.dataclass(frozen=True)
class TrainRow:
    """One training sequence: prompt ids, response ids, and the row's scalar (`advantages` for
    GRPO, `rewards` = R_env for RWR, unused 0 for SFT). `logprobs` are the sampler's old logprobs
    of the response tokens (GRPO's importance ratio); `loss_mask` marks the response tokens in the
    loss (a multi-turn episode's agent tokens), all of them when None."""

    prompt: Sequence[int]
    response: Sequence[int]
    scalar: float = 0.0
    logprobs: np.ndarray | None = None
    loss_mask: np.ndarray | None = None


def train_steps(train: TrainFn, state: PolicyState, steps: Iterable[Sequence[TrainRow]], *, rows: int,
                prompt_len: int, response_len: int, pad_id: int, scalar_key: str, desc: str,
                show_progress: bool, total: int | None = None) -> tuple[PolicyState, list[dict[str, float]]]:
    """Runs one optimizer step per entry of `steps`, each packed into [rows, prompt_len + response_len]."""
    history = []
    for chosen in tqdm(steps, desc=desc, total=total, leave=False, disable=not show_progress):
        with_logprobs = chosen[0].logprobs is not None
        with_masks = any(r.loss_mask is not None for r in chosen)
        masks = [np.ones(len(r.response), np.float32) if r.loss_mask is None else r.loss_mask for r in chosen]
        batch = pack_sequences([r.prompt for r in chosen], [r.response for r in chosen], pad_id,
                               response_logprobs=[r.logprobs for r in chosen] if with_logprobs else None,
                               response_masks=masks if with_masks else None,
                               num_rows=rows, prompt_len=prompt_len, response_len=response_len)
        batch[scalar_key] = np.zeros((rows,), np.float32)
        batch[scalar_key][:len(chosen)] = [r.scalar for r in chosen]
        state, metrics = train(state, batch)
        history.append(metrics)
    return state, history


def batch_shape(rows: Sequence[TrainRow], rows_per_step: int, rows_multiple: int,
                response_len: int | None = None) -> dict[str, int]:
    """Fixed padded sizes for a set of rows: rows per batch, prompt and response buckets."""
    return {"rows": padded_row_count(rows_per_step, rows_multiple),
            "prompt_len": length_bucket(max(len(r.prompt) for r in rows)),
            "response_len": length_bucket(response_len or max(len(r.response) for r in rows))}


def summarise(prefix: str, history: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-step update metrics averaged over an epoch's steps, keys prefixed, plus the step count."""
    if not history:
        return {f"{prefix}/steps": 0}
    return {f"{prefix}/{k}": float(np.mean([m[k] for m in history])) for k in history[0]} | {
        f"{prefix}/steps": len(history)}
