"""One Bamboogle episode in Search-R1's protocol: search, read the top passages, answer.

Each agent turn holds one action, the first `<search>query</search>` or `<answer>text</answer>` in
the reply (text around it is reasoning, e.g. `<think>`). A search is answered with the top-k
passages as `<information>Doc i(Title: t) text ...</information>` (NO_RESULTS when none matched);
an answer ends the episode; a
reply with neither costs a turn and is told how to act. After `max_searches` searches a further
search ends the episode unanswered, as does running out of `max_turns` agent turns. R_agent is the
exact match of the answer (SQuAD-normalised, any gold answer); cover EM and F1 are kept in details.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from genenv_jax.domains.bamboogle.metrics import AnswerScores, mean_scores
from genenv_jax.domains.bamboogle.passages import format_passages
from genenv_jax.domains.bamboogle.retrieval import RetrievalError, Retriever
from genenv_jax.domains.base import ChatPrompt, Environment, Message, ScoreResult, StepOutcome, Task

_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
MAX_QUERY_CHARS = 512

INVALID_ACTION = ("Your previous reply had no action. To search, put a query between <search> and </search>; "
                  "to give the final answer, put it between <answer> and </answer>.")
NO_MORE_SEARCHES = "You have used all your searches; give your final answer between <answer> and </answer>."
NO_RESULTS = "No passage matched the query."


def instructions(question: str, max_searches: int) -> str:
    """The agent's first message: the protocol (Search-R1's tags) and the question."""
    return (
        "Answer the question below. Think inside <think> and </think> whenever you receive new information. "
        "If you are missing knowledge, search Wikipedia by writing <search> your query </search>; the top "
        "results come back between <information> and </information>. "
        f"You may search up to {max_searches} times, one search per reply. When you know the answer, write "
        "only the short answer between <answer> and </answer>, for example <answer> Beijing </answer>.\n"
        f"Question: {question}")


def parse_action(text: str) -> tuple[str, str] | None:
    """(kind, content) of the first search/answer tag in a reply, content stripped; None if there is none."""
    match = _ACTION.search(text)
    return (match.group(1), match.group(2).strip()) if match else None


def final_answer(transcript: Sequence[Message]) -> str | None:
    """The answer the episode ended with: the last assistant turn's action when it is an answer."""
    for message in reversed(transcript):
        if message.get("role") == "assistant":
            action = parse_action(str(message.get("content", "")))
            return action[1] if action and action[0] == "answer" else None
    return None


class BamboogleEnvironment(Environment):
    """A search-augmented QA episode over one retriever; never raises on agent text."""

    def __init__(self, task: Task, retriever: Retriever | None, topk: int = 3, max_searches: int = 4,
                 max_turns: int = 6):
        self.task, self.retriever, self.topk = task, retriever, topk
        self.max_searches, self.max_turns = max_searches, max_turns
        self.turns = self.searches = self.invalid = self.retrieval_errors = 0
        self.ended: str | None = None
        self.queries: list[str] = []

    def reset(self) -> ChatPrompt:
        self.turns = self.searches = self.invalid = self.retrieval_errors = 0
        self.ended, self.queries = None, []
        content = instructions(self.task.prompt["question"], self.max_searches)
        return ChatPrompt(messages=[{"role": "user", "content": content}])

    def _finish(self, how: str, info: dict) -> StepOutcome:
        self.ended = how
        return StepOutcome(observation=[], done=True, info=dict(info, ended=how))

    def step(self, agent_text: str) -> StepOutcome:
        if self.ended is not None:
            return StepOutcome(observation=[], done=True, info={"errors": {"step_after_done": 1}})
        self.turns += 1
        action = parse_action(agent_text)
        info: dict = {"errors": {}, "action": action[0] if action else None}
        if action is not None and action[0] == "answer":
            return self._finish("answer", info)
        if action is None or not action[1]:
            self.invalid += 1
            info["errors"] = {"invalid_action" if action is None else "empty_query": 1}
            reply = INVALID_ACTION
        elif self.searches >= self.max_searches:
            info["errors"] = {"search_cap": 1}
            return self._finish("search_cap", info)
        else:
            self.searches += 1
            query = action[1][:MAX_QUERY_CHARS]
            self.queries.append(query)
            try:
                passages = self._retriever().search([query], self.topk)[0]
                reply = f"<information>{format_passages(passages).strip() or NO_RESULTS}</information>"
            except RetrievalError as e:  # a retriever outage is not the agent's fault, but is counted
                self.retrieval_errors += 1
                info["errors"] = {"retrieval_error": 1}
                reply = f"<information>Search failed: {e}</information>"
            if self.searches >= self.max_searches:
                reply += "\n" + NO_MORE_SEARCHES
        if self.turns >= self.max_turns:
            return self._finish("turn_cap", info)
        return StepOutcome(observation=[{"role": "user", "content": reply}], done=False, info=info)

    def _retriever(self) -> Retriever:
        if self.retriever is None:
            raise RetrievalError("bamboogle: this environment has no retriever")
        return self.retriever

    def score(self, transcript: Sequence[Message]) -> ScoreResult:
        """EM of the final answer (0 without one), with cover EM, F1 and the episode's counts."""
        answer = final_answer(transcript)
        scores = AnswerScores.of(answer, self.task.verifier["answers"])
        details = {"em": scores.em, "cover_em": scores.cover_em, "f1": scores.f1, "answer": answer,
                   "searches": self.searches, "invalid_actions": self.invalid, "ended": self.ended,
                   "retrieval_errors": self.retrieval_errors,
                   # numeric, averaged per category by the evaluator: the summary's cover EM and F1
                   "metric/em": float(scores.em), "metric/cover_em": float(scores.cover_em), "metric/f1": scores.f1}
        if answer is None:
            details["error_type"] = "no_answer"
        elif not scores.em:
            details["error_type"] = "wrong_answer"
        return ScoreResult(scores.em, details)


def score_responses(golds: Mapping[str, Sequence[str]], responses: Mapping[str, str]) -> dict[str, float]:
    """{"em", "cover_em", "f1", "n"} of final agent texts by task id (an evaluation's items.jsonl
    `response`s) against the gold answers by task id; KeyError naming ids that have no gold."""
    unknown = sorted(set(responses) - set(golds))
    if unknown:
        raise KeyError(f"bamboogle: responses for unknown task ids {unknown[:3]}")
    rows = [AnswerScores.of(final_answer([{"role": "assistant", "content": text}]), golds[tid])
            for tid, text in responses.items()]
    return dict(mean_scores(rows), n=float(len(rows)))


__all__ = ["BamboogleEnvironment", "NO_RESULTS", "final_answer", "instructions", "parse_action", "score_responses"]
