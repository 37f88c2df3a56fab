"""The experience model at work: a batch of (task, history, state, action) queries -> one
retrieval over the replay buffer, one sampler call, parsed predictions. Used by the synthetic
environments during agent training and by the held-out next-state / reward evaluation."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from genenv_jax.text.chat_text import ChatText
from genenv_jax.dreamgym import experience_text as experience_model
from genenv_jax.dreamgym.embedding import Embedder, key_text
from genenv_jax.dreamgym.experience_text import Prediction, PromptSettings
from genenv_jax.dreamgym.replay import ReplayBuffer
from genenv_jax.domains.experience import Transition
from genenv_jax.sampling import SampleOutput

# sample(prompt ids, seed) -> one SampleOutput row per prompt, in order
SampleFn = Callable[[list[list[int]], int], SampleOutput]


@dataclasses.dataclass(frozen=True)
class Query:
    """One step to predict: what the experience model is shown besides the retrieved demos."""

    task: str
    history: tuple[tuple[str, str], ...]
    state: str
    action: str
    exclude: tuple[str, int] | None = None   # (task_id, step) of a held-out transition: never its own demo

    @classmethod
    def of(cls, t: Transition, exclude_self: bool = False) -> "Query":
        return cls(t.task, tuple((s, a) for s, a in t.history), t.state, t.action,
                   (t.task_id, t.step) if exclude_self else None)


@dataclasses.dataclass
class Retrieval:
    """Top-k real transitions from `buffer`, keyed by the experience model's embedding of (s, a);
    `top_k` 0 turns retrieval off (the ablation without replay)."""

    buffer: ReplayBuffer
    embedder: Embedder
    top_k: int = 3
    real_only: bool = True

    def demos(self, queries: Sequence[Query]) -> list[list[Transition]]:
        if self.top_k <= 0 or not len(self.buffer) or not queries:
            return [[] for _ in queries]
        vectors = self.embedder([key_text(q.state, q.action) for q in queries])  # [Q, D]
        exclude = [{q.exclude} if q.exclude else set() for q in queries]
        found = self.buffer.retrieve(vectors, self.top_k, real_only=self.real_only, exclude=exclude)
        return [[self.buffer[i] for i in row] for row in found]


def query_prompts(text: ChatText, queries: Sequence[Query], settings: PromptSettings, retrieval: Retrieval | None,
                  max_prompt_len: int) -> list[list[int]]:
    """The experience model's prompt ids for each query, with the demos `retrieval` finds: demos,
    then the oldest history steps, are dropped until a prompt fits `max_prompt_len` (one that
    cannot fit is returned as it is, longer)."""
    demos = retrieval.demos(queries) if retrieval is not None else [[] for _ in queries]
    out = []
    for q, shown in zip(queries, demos):
        while True:  # drop demos, then history, until the prompt fits
            ids = text.prompt(experience_model.prompt(q.task, q.history, q.state, q.action, shown, settings))
            if len(ids) <= max_prompt_len or not (shown or q.history):
                break
            if shown:
                shown = shown[:-1]
            else:
                q = dataclasses.replace(q, history=q.history[1:])
        out.append(ids)
    return out


@dataclasses.dataclass
class Predictor:
    """Prompts, retrieves, samples and parses for a batch of queries (`sample` closes over the
    experience model's params and sampling settings; `max_prompt_len` skips what cannot fit)."""

    text: ChatText
    sample: SampleFn
    settings: PromptSettings
    retrieval: Retrieval | None
    max_prompt_len: int

    def prompts(self, queries: Sequence[Query]) -> list[list[int]]:
        return query_prompts(self.text, queries, self.settings, self.retrieval, self.max_prompt_len)

    def predict(self, queries: Sequence[Query], seed: int) -> tuple[list[Prediction], dict[str, Any]]:
        """One prediction per query (a prompt that cannot fit is a failed prediction) and counts."""
        if not queries:
            return [], {}
        prompts = self.prompts(queries)
        fits = [i for i, p in enumerate(prompts) if len(p) <= self.max_prompt_len]
        predictions = [Prediction(ok=False, error="prompt_too_long")] * len(queries)
        if fits:
            out = self.sample([prompts[i] for i in fits], seed)
            for i, tokens in zip(fits, out.token_lists()):
                predictions[i] = experience_model.parse(self.text.decode(tokens))
        counts: dict[str, Any] = {}
        for p in predictions:
            if not p.ok:
                counts[f"experience/{p.error}"] = counts.get(f"experience/{p.error}", 0) + 1
        return predictions, counts


def accuracy(transitions: Sequence[Transition], predictions: Sequence[Prediction]) -> dict[str, float]:
    """Next-state exact match (whitespace-normalised), reward accuracy and parse rate."""
    def norm(s: str) -> str:
        return " ".join(s.split())

    n = len(transitions)
    if n == 0 or n != len(predictions):
        raise ValueError(f"{n} transitions but {len(predictions)} predictions")
    state = np.mean([p.ok and norm(p.next_state) == norm(t.next_state) for t, p in zip(transitions, predictions)])
    reward = np.mean([(p.reward if p.ok else 0.0) == float(t.reward >= 0.5) for t, p in zip(transitions, predictions)])
    parsed = np.mean([p.ok for p in predictions])
    return {"next_state_exact": float(state), "reward_accuracy": float(reward), "parse_rate": float(parsed)}


def baseline_predictions(transitions: Sequence[Transition], kind: str) -> list[Prediction]:
    """The trivial baselines: `repeat` the current state, or answer `nothing` ("Nothing happens.");
    both predict reward 0."""
    if kind == "repeat":
        return [Prediction(ok=True, next_state=t.state, reward=0.0) for t in transitions]
    if kind == "nothing":
        return [Prediction(ok=True, next_state="Nothing happens.", reward=0.0) for _ in transitions]
    raise ValueError(f"unknown baseline {kind!r}; expected 'repeat' or 'nothing'")
