"""The one batched-update routine GRPO (agent), RWR (simulator) and every SFT (the warm-starts, the
experience model) share: a policy's arrays (`PolicyState`), rows -> fixed-shape padded batches ->
one optimizer step each -> metrics checked finite and averaged."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import flax.struct
import numpy as np
from tqdm.auto import tqdm

from genenv_jax.rl.packing import length_bucket, pack_sequences, padded_row_count
from genenv_jax.rl.step import TrainStep

PyTree = Any


@flax.struct.dataclass
class PolicyState:
    """One policy's arrays, as its partition (`models.partition`) splits the weights: `params` the
    trainable part, `frozen` the frozen part (never updated, donated or saved; `{}` under full
    fine-tuning, LoRA's base, which policies that start from one source share), the optimizer state
    of the trainable part, and `reference`, the trainable part the KL term anchors to: a frozen copy
    of the starting (or warm-started) trainable part, or None for the frozen part alone (a fresh
    LoRA run's base, adapters off).
    """

    params: PyTree
    opt_state: PyTree
    reference: PyTree | None = None
    frozen: PyTree = dataclasses.field(default_factory=dict)


class NonFiniteLossError(RuntimeError):
    """An update produced a NaN/inf loss; the run stops before saving anything from this epoch."""


TrainFn = Callable[[PolicyState, Mapping[str, np.ndarray]], tuple[PolicyState, dict[str, float]]]


@dataclasses.dataclass(frozen=True)
class TrainRow:
    """One training sequence: prompt ids, response ids, and the row's scalar (`advantages` for
    GRPO, `rewards` = R_env for RWR, unused 0 for SFT). `logprobs` are the sampler's old logprobs
    of the response tokens (GRPO's importance ratio); `loss_mask` marks the response tokens in the
    loss (a multi-turn episode's agent tokens), all of them when None. `token_scalars`, when set,
    replaces `scalar` by one value per response token (GiGPO's per-turn advantages)."""

    prompt: Sequence[int]
    response: Sequence[int]
    scalar: float = 0.0
    logprobs: np.ndarray | None = None
    loss_mask: np.ndarray | None = None
    token_scalars: np.ndarray | None = None


def train_steps(train: TrainFn, state: PolicyState, steps: Iterable[Sequence[TrainRow]], *, rows: int,
                prompt_len: int, response_len: int, pad_id: int, scalar_key: str, desc: str,
                show_progress: bool, total: int | None = None,
                pad_per_step: bool = False) -> tuple[PolicyState, list[dict[str, float]]]:
    """Runs one optimizer step per entry of `steps`, each packed into [rows, prompt_len + response_len].

    `pad_per_step`: each step's prompts and responses are padded to the length buckets of its own
    longest prompt and response (at most `prompt_len` / `response_len`) rather than to the longest of
    them all: fewer padded tokens when lengths vary, one compiled step per pair of buckets used.
    Padding never enters the loss, so the update is the same either way (to float rounding)."""
    history = []
    for chosen in tqdm(steps, desc=desc, total=total, leave=False, disable=not show_progress):
        step_prompt_len, step_response_len = prompt_len, response_len
        if pad_per_step:
            step_prompt_len = min(prompt_len, length_bucket(max(len(r.prompt) for r in chosen)))
            step_response_len = min(response_len, length_bucket(max(len(r.response) for r in chosen)))
        with_logprobs = chosen[0].logprobs is not None
        with_masks = any(r.loss_mask is not None for r in chosen)
        masks = [np.ones(len(r.response), np.float32) if r.loss_mask is None else r.loss_mask for r in chosen]
        per_token = any(r.token_scalars is not None for r in chosen)
        values = {scalar_key: [np.full(len(r.response), r.scalar, np.float32) if r.token_scalars is None
                               else r.token_scalars for r in chosen]} if per_token else None
        batch = pack_sequences([r.prompt for r in chosen], [r.response for r in chosen], pad_id,
                               response_logprobs=[r.logprobs for r in chosen] if with_logprobs else None,
                               response_masks=masks if with_masks else None,
                               num_rows=rows, prompt_len=step_prompt_len, response_len=step_response_len,
                               response_values=values)
        if not per_token:  # one scalar per row [rows]; per-token values are [rows, P + R]
            batch[scalar_key] = np.zeros((rows,), np.float32)
            batch[scalar_key][:len(chosen)] = [r.scalar for r in chosen]
        started = time.perf_counter()
        state, metrics = train(state, batch)  # metrics come back as floats: the step has finished
        # positions the step computed (rows x padded length), the real tokens among them, its seconds
        history.append(metrics | {"tokens_computed": float(batch["tokens"].size),
                                  "tokens_real": float(batch["attention_mask"].sum()),
                                  "step_s": time.perf_counter() - started})
    return state, history


def batch_shape(rows: Sequence[TrainRow], rows_per_step: int, rows_multiple: int,
                response_len: int | None = None) -> dict[str, int]:
    """Fixed padded sizes for a set of rows: rows per batch, prompt and response buckets."""
    return {"rows": padded_row_count(rows_per_step, rows_multiple),
            "prompt_len": length_bucket(max(len(r.prompt) for r in rows)),
            "response_len": length_bucket(response_len or max(len(r.response) for r in rows))}


def summarise(prefix: str, history: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-step update metrics averaged over an epoch's steps, keys prefixed, plus the step count;
    the steps' wall seconds summed as `time/{prefix}_steps_s`."""
    if not history:
        return {f"{prefix}/steps": 0}
    keys = [k for k in history[0] if k != "step_s"]
    return {f"{prefix}/{k}": float(np.mean([m[k] for m in history])) for k in keys} | {
        f"{prefix}/steps": len(history), f"time/{prefix}_steps_s": float(sum(m.get("step_s", 0.0) for m in history))}


def shuffled_batches(count: int, batch_size: int, steps: int, seed: int) -> Iterator[list[int]]:
    """`steps` batches of example indices, each epoch over the examples in a fresh order."""
    rng = np.random.default_rng(seed)
    order: list[int] = []
    for _ in range(steps):
        while len(order) < batch_size:
            order.extend(rng.permutation(count).tolist())
        picked, order = order[:batch_size], order[batch_size:]
        yield picked


def float_metrics(metrics: Mapping[str, Any], what: str) -> dict[str, float]:
    """Update metrics as floats; NonFiniteLossError when the loss is NaN/inf (`what` names the update)."""
    out = {k: float(v) for k, v in metrics.items()}
    loss = out.get("loss")
    if loss is not None and not math.isfinite(loss):
        raise NonFiniteLossError(f"{what}: non-finite loss {loss}; metrics {out}")
    return out


def step_trainer(step: TrainStep, what: str) -> TrainFn:
    """A `TrainFn` around a step that needs no reference logprobs (SFT): the batch placed on the
    step's mesh, one step, metrics checked finite (`what` names the update in an error)."""
    def train(state: PolicyState, batch: Mapping[str, np.ndarray]) -> tuple[PolicyState, dict[str, float]]:
        params, opt_state, metrics = step(state.params, state.opt_state, step.place_batch(dict(batch)), state.frozen)
        return state.replace(params=params, opt_state=opt_state), float_metrics(metrics, what)
    return train
