"""SFT of the experience model on real transitions: each row is the prompt it will see (with the
demos retrieval finds for it, never the transition itself) and the reply it should write."""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Sequence

import numpy as np

from genenv_jax.text.chat_text import ChatText
from genenv_jax.dreamgym import experience_model
from genenv_jax.dreamgym.experience_model import PromptSettings
from genenv_jax.dreamgym.predictor import Predictor, Query, Retrieval
from genenv_jax.dreamgym.transitions import Transition
from genenv_jax.loop.learning import shuffled_batches
from genenv_jax.loop.policy import float_metrics
from genenv_jax.loop.state import PolicyState
from genenv_jax.loop.updates import TrainFn, TrainRow, batch_shape, train_steps
from genenv_jax.rl import TrainStep


def sft_rows(text: ChatText, transitions: Sequence[Transition], retrieval: Retrieval | None,
             settings: PromptSettings, max_prompt_len: int) -> list[TrainRow]:
    """One row per transition; prompts built as at prediction time (same demo and history trimming)."""
    shaper = Predictor(text=text, sample=_no_sampling, settings=settings, retrieval=retrieval,
                       max_prompt_len=max_prompt_len)
    prompts = shaper.prompts([Query.of(t, exclude_self=True) for t in transitions])
    return [TrainRow(p, text.encode(experience_model.target(t, settings)) + [text.end_id])
            for p, t in zip(prompts, transitions) if len(p) <= max_prompt_len]


def _no_sampling(prompts, seed):
    raise RuntimeError("sft_rows only builds prompts")


def train(train_fn: TrainFn, state: PolicyState, rows: Sequence[TrainRow], *, steps: int, batch_size: int,
          rows_multiple: int, seed: int, pad_id: int, show_progress: bool = False) -> tuple[PolicyState, dict[str, float]]:
    """`steps` SFT steps of `batch_size` rows with `train_fn` (a policy's `sft_trainer()`), each pass
    over the rows in a fresh order; returns the state and the first / last loss."""
    if not rows:
        raise ValueError("experience model SFT: no rows (every prompt was longer than max_prompt_len?)")
    batches = ([rows[i] for i in picked] for picked in shuffled_batches(len(rows), batch_size, steps, seed))
    state, history = train_steps(train_fn, state, batches, **batch_shape(rows, batch_size, rows_multiple),
                                 pad_id=pad_id, scalar_key="rewards", desc="SFT experience model",
                                 show_progress=show_progress, total=steps)
    first, last = history[0]["loss"], history[-1]["loss"]
    logging.info("experience model SFT: %d steps on %d rows, loss %.3f -> %.3f", steps, len(rows), first, last)
    return state, {"experience/sft_loss_first": first, "experience/sft_loss_last": last,
                   "experience/sft_rows": float(len(rows))}


def bare_sft(step: TrainStep) -> tuple[TrainFn, Callable[[object], PolicyState]]:
    """(train_fn, state_of(params)) around an SFT step built outside a run config (tools, tests)."""
    def train_fn(state: PolicyState, batch: Mapping[str, np.ndarray]):
        params, opt_state, metrics = step(state.params, state.opt_state, step.place_batch(dict(batch)))
        return state.replace(params=params, opt_state=opt_state), float_metrics(metrics, "experience model SFT")

    return train_fn, lambda params: PolicyState(params=params, opt_state=step.init_opt_state(params))
