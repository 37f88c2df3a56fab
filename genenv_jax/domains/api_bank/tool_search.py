"""ToolSearcher: keywords -> the best-matching API's description, ranked lexically.

Upstream embeds the keywords and each API's "name words + description" text with a sentence-embedding
model and returns the nearest API. Here keywords that spell an API's name pick it, and otherwise the
same texts are ranked with BM25 over lower-cased, Porter-stemmed word tokens (CamelCase names split
into words and counted twice), so the searcher needs no model and is deterministic; docs/api_bank.md lists where its choice differs from the recorded one.
As upstream, an API that takes a `token` comes back after GetUserToken's description (a list of two).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Mapping, Sequence

from nltk.stem.porter import PorterStemmer   # nltk comes with rouge-score

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[a-z0-9]+")
_STEMMER = PorterStemmer()


def name_words(name: str) -> str:
    """'QueryHistoryToday' -> 'query history today'."""
    return _CAMEL.sub(" ", name).lower()


@functools.lru_cache(maxsize=4096)
def stem(word: str) -> str:
    return _STEMMER.stem(word)


def tokens(text: str) -> list[str]:
    spaced = _CAMEL.sub(" ", text)
    return [stem(w) for w in _WORD.findall(spaced.lower())]


class ToolSearcher:
    """BM25 (k1=1.2, b=0.75) over each API's name words (counted twice) and description."""

    def __init__(self, descriptions: Sequence[Mapping[str, Any]], token_api: Mapping[str, Any] | None = None,
                 k1: float = 1.2, b: float = 0.75):
        self.descriptions = [dict(d) for d in descriptions]
        self.token_api = dict(token_api) if token_api else None
        self.k1, self.b = k1, b
        self.documents = [tokens(name_words(d["name"])) * 2 + tokens(d.get("description", ""))
                          for d in self.descriptions]
        self.mean_length = sum(map(len, self.documents)) / max(len(self.documents), 1)
        n = len(self.documents)
        counts: dict[str, int] = {}
        for document in self.documents:
            for token in set(document):
                counts[token] = counts.get(token, 0) + 1
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in counts.items()}

    def scores(self, keywords: str) -> list[float]:
        query = tokens(keywords)
        out = []
        for document in self.documents:
            score = 0.0
            for token in set(query):
                f = document.count(token)
                if f:
                    norm = 1 - self.b + self.b * len(document) / self.mean_length
                    score += self.idf[token] * f * (self.k1 + 1) / (f + self.k1 * norm)
            out.append(score)
        return out

    def best(self, keywords: str) -> dict[str, Any]:
        """The API named by the keywords, else the best-scoring description (ties: the earlier in the pool).

        A name can have two variants in a mixed pool (level-1/2 first, then level-3): keywords that spell
        it exactly pick the last (level-3 searches by exact name), worded ones ("query meeting") the first."""
        spelled = [d for d in self.descriptions if d["name"] == str(keywords).strip()]
        if spelled:   # the exact CamelCase name, as level-3 dialogues search: the pool's last variant
            return dict(spelled[-1])
        squeezed = re.sub(r"[^a-z0-9]", "", str(keywords).lower())
        named = next((d for d in self.descriptions if d["name"].lower() == squeezed), None)
        if named is not None:
            return dict(named)
        scores = self.scores(keywords)
        index = max(range(len(scores)), key=lambda i: (scores[i], -i))
        return dict(self.descriptions[index])

    def search(self, keywords: str):
        """What ToolSearcher returns: the best description, after GetUserToken's when it takes a token."""
        best = self.best(keywords)
        if self.token_api is not None and "token" in best.get("input_parameters", {}):
            return [dict(self.token_api), best]
        return best


__all__ = ["ToolSearcher", "name_words", "tokens"]
