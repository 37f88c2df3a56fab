"""API-Bank's scores: call correctness by replay and execution, ROUGE-L F of replies.

A call is scored on a fresh API state from the initial database: the dialogue's earlier gold calls
replayed on it in order (`replay_history`; API-Bank's own evaluator skips this step), then the
predicted call executed and its result compared with the gold call's recorded result
(`correctness.is_correct`), in one scoring ("official": the original evaluator's APIs and rules,
"strict": ours). Replies are
scored with ROUGE-L F (`rouge-score`, no stemming, as the `rouge` package API-Bank uses).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Mapping, Sequence

from genenv_jax.domains.api_bank.calls import ParsedCall


@functools.lru_cache(maxsize=16)
def initial_bank(init_database_dir: str, suite: str = "level-1-2", scoring: str = "strict"):
    """The APIs of `suite` over the initial database of one download (loaded once; copy it per episode).

    Levels 1-2 and level 3 have separate API pools, as upstream (its level-3 APIs live apart): the
    tool searcher of a level-1/2 item ranks the level-1/2 APIs only, a level-3 episode's the level-3 ones."""
    from genenv_jax.domains.api_bank.executor import APIBank

    return APIBank(Path(init_database_dir), suite=suite, scoring=scoring)


def fresh_bank(init_database_dir: str, suite: str = "level-1-2", scoring: str = "strict"):
    """A new API state of `suite` (run as `scoring` runs calls) from the initial database."""
    return initial_bank(str(init_database_dir), suite, scoring).copy_initial()


def as_result(recorded: Mapping[str, Any]):
    """A recorded result dict {api_name, input, output, exception} as an ApiResult (api_name None when
    the recording has none)."""
    from genenv_jax.domains.api_bank.executor import ApiResult

    return ApiResult(api_name=recorded.get("api_name"), input=recorded.get("input"), output=recorded.get("output"),
                     exception=recorded.get("exception"))


def replay(bank, history: Sequence[Mapping[str, Any]]) -> None:
    """Executes the API turns of a dialogue prefix on `bank`, in order (their results are not checked)."""
    for turn in history:
        if turn.get("role") == "API":
            bank.call(turn["api_name"], dict(turn["param_dict"]))


@dataclasses.dataclass(frozen=True)
class CallVerdict:
    """Whether a predicted call reproduces the gold call's result, and why not."""

    correct: bool
    reason: str     # "correct", "no_call", "wrong_api", "refused" (official), "exception", "wrong_result"
    predicted: dict[str, Any] | None = None
    result: dict[str, Any] | None = None

    def to_details(self) -> dict[str, Any]:
        return {"correct": self.correct, "error_type": None if self.correct else self.reason,
                "predicted": self.predicted, "result": self.result}


def judge(gold: Mapping[str, Any], predicted: ParsedCall | None, result, scoring: str = "strict") -> CallVerdict:
    """The verdict on an executed prediction (`result`, an ApiResult) against a gold API turn."""
    from genenv_jax.domains.api_bank.correctness import is_correct

    if predicted is None:
        return CallVerdict(False, "no_call")
    shown = result.to_json()
    named = scoring != "official" or predicted.name == gold["api_name"]   # the original compares the turn's name
    if named and is_correct(as_result(gold["result"]), result, scoring):
        return CallVerdict(True, "correct", predicted.to_json(), shown)
    if predicted.name != gold["api_name"]:
        reason = "wrong_api"
    elif getattr(result, "refused", None):
        reason = "refused"
    elif result.exception:
        reason = "exception"
    else:
        reason = "wrong_result"
    return CallVerdict(False, reason, predicted.to_json(), shown)


def score_call(init_database_dir: str, history: Sequence[Mapping[str, Any]], gold: Mapping[str, Any],
               predicted: ParsedCall | None, replay_history: bool = True, scoring: str = "strict") -> CallVerdict:
    """Replays `history` (if `replay_history`) on a fresh state, executes `predicted` and compares with `gold`,
    all as `scoring` runs and judges calls."""
    if predicted is None:
        return CallVerdict(False, "no_call")
    bank = fresh_bank(init_database_dir, "level-1-2", scoring)
    if replay_history:
        replay(bank, history)
    return judge(gold, predicted, bank.call(predicted.name, dict(predicted.params)), scoring)


@functools.lru_cache(maxsize=1)
def _rouge_scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def strip_reply_label(text: str) -> str:
    """A reply without a leading "AI:" label (the official prompt shows replies as "AI: ...")."""
    text = text.strip()
    return text[3:].strip() if text.startswith("AI:") else text


def rouge_l(reference: str, prediction: str) -> float:
    """ROUGE-L F-measure of a reply against the reference reply (0 for an empty reply)."""
    prediction = strip_reply_label(prediction)
    if not prediction.strip() or not reference.strip():
        return 0.0
    return float(_rouge_scorer().score(reference, prediction)["rougeL"].fmeasure)


__all__ = ["CallVerdict", "as_result", "fresh_bank", "initial_bank", "judge", "replay", "rouge_l", "score_call",
           "strip_reply_label"]
