"""SFT of the experience model on real transitions: each row is the prompt it will see (with the
demos retrieval finds for it, never the transition itself) and the reply it should write."""

from __future__ import annotations

import logging
from typing import Callable, Sequence


from genenv_jax.text.chat_text import ChatText
from genenv_jax.dreamgym import experience_text as experience_model
from genenv_jax.dreamgym.experience_text import PromptSettings
from genenv_jax.dreamgym.predictor import Query, Retrieval, query_prompts
from genenv_jax.domains.experience import Transition
from genenv_jax.rl.batches import (PolicyState, TrainFn, TrainRow, batch_shape, shuffled_batches, step_trainer,
                                   train_steps)
from genenv_jax.rl import TrainStep


def sft_rows(text: ChatText, transitions: Sequence[Transition], retrieval: Retrieval | None,
             settings: PromptSettings, max_prompt_len: int) -> list[TrainRow]:
    """One row per transition; prompts built as at prediction time (same demo and history trimming)."""
    prompts = query_prompts(text, [Query.of(t, exclude_self=True) for t in transitions], settings, retrieval,
                            max_prompt_len)
    return [TrainRow(p, text.encode(experience_model.target(t, settings)) + [text.end_id])
            for p, t in zip(prompts, transitions) if len(p) <= max_prompt_len]


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
    return step_trainer(step, "experience model SFT"), lambda params: PolicyState(
        params=params, opt_state=step.init_opt_state(params))
