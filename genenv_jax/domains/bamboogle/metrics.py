"""Bamboogle's answer scores: SQuAD-normalised exact match (the reward), cover EM and token F1.

All three compare a predicted answer with every gold answer and keep the best: exact match after
SQuAD normalisation (lower case, punctuation and the articles a/an/the removed, whitespace
collapsed), cover EM (a normalised gold answer is a substring of the normalised prediction, as
Search-R1's `subem`), and SQuAD's token-level F1.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import string
from typing import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(g) for g in golds))


def cover_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when a (non-empty) normalised gold answer occurs inside the normalised prediction."""
    predicted = normalize_answer(prediction)
    return float(any((g := normalize_answer(gold)) and g in predicted for gold in golds))


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """The best SQuAD token F1 of the prediction against the gold answers."""
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        reference = normalize_answer(gold).split()
        common = sum((collections.Counter(predicted) & collections.Counter(reference)).values())
        if common:
            precision, recall = common / len(predicted), common / len(reference)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


@dataclasses.dataclass(frozen=True)
class AnswerScores:
    """The three scores of one answer (None: the agent gave no answer, every score 0)."""

    em: float
    cover_em: float
    f1: float

    @classmethod
    def of(cls, prediction: str | None, golds: Sequence[str]) -> "AnswerScores":
        if prediction is None:
            return cls(0.0, 0.0, 0.0)
        return cls(exact_match(prediction, golds), cover_match(prediction, golds), token_f1(prediction, golds))


def mean_scores(rows: Sequence[AnswerScores]) -> dict[str, float]:
    """{"em", "cover_em", "f1"} averaged over the rows ({} for none)."""
    if not rows:
        return {}
    return {name: sum(getattr(r, name) for r in rows) / len(rows) for name in ("em", "cover_em", "f1")}


__all__ = ["AnswerScores", "cover_match", "exact_match", "mean_scores", "normalize_answer", "token_f1"]
