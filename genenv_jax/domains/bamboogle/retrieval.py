"""Retrieval behind one interface: local BM25 over a corpus file, or a Search-R1 `/retrieve` server.

`Retriever.search(queries, topk)` returns, per query, the top passages best first. The HTTP client
speaks Search-R1's retrieval server protocol: POST {"queries": [...], "topk": k, "return_scores":
true} -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]} (one list per query;
without scores each item is the document itself). Any such server works: Search-R1's e5 dense
retriever over wiki-18, its BM25 server, or FlashRAG's.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from genenv_jax.domains.bamboogle.passages import Passage, find_corpus


class RetrievalError(RuntimeError):
    """The retriever could not answer (one line naming the server or corpus)."""


class RetrieverMissing(ValueError):
    """No retriever is configured (a setup error: raised, never shown to the agent)."""


class Retriever(Protocol):
    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """The `topk` best passages of each query, best first."""


class HTTPRetriever:
    """Client of a Search-R1-compatible retrieval server (`url` is its /retrieve endpoint)."""

    def __init__(self, url: str, timeout_s: float = 60.0, attempts: int = 3):
        self.url, self.timeout_s, self.attempts = url, timeout_s, max(1, attempts)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        if not queries:
            return []
        body = json.dumps({"queries": list(queries), "topk": int(topk), "return_scores": True}).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        for attempt in range(self.attempts):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    reply = json.loads(response.read().decode("utf-8"))
                break
            except urllib.error.HTTPError as e:  # the server answered: retrying will not help
                raise RetrievalError(f"retrieval server {self.url}: HTTP {e.code} {e.reason}") from None
            except (urllib.error.URLError, OSError, ValueError) as e:
                if attempt + 1 == self.attempts:
                    raise RetrievalError(f"retrieval server {self.url}: {type(e).__name__}: {e}") from None
                time.sleep(0.5 * 2 ** attempt)
        return parse_reply(reply, len(queries), self.url)


def parse_reply(reply: Any, expected: int, source: str) -> list[list[Passage]]:
    """The passages of a /retrieve reply; RetrievalError naming the first malformed part."""
    rows = reply.get("result") if isinstance(reply, dict) else None
    if not isinstance(rows, list) or len(rows) != expected:
        raise RetrievalError(f"retrieval server {source}: expected {{'result': [...]}} with {expected} lists")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise RetrievalError(f"retrieval server {source}: result[{i}] is not a list")
        passages = []
        for j, item in enumerate(row):
            document = item.get("document", item) if isinstance(item, dict) else None
            score = item.get("score") if isinstance(item, dict) and "document" in item else None
            if not isinstance(document, dict) or not isinstance(document.get("contents"), str):
                raise RetrievalError(f"retrieval server {source}: result[{i}][{j}] has no document 'contents'")
            if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
                raise RetrievalError(f"retrieval server {source}: result[{i}][{j}] has a non-numeric score")
            passages.append(Passage(doc_id=str(document.get("id", "")), contents=document["contents"],
                                    score=None if score is None else float(score)))
        out.append(passages)
    return out


def corpus_path(corpus: str = "", data_dir: str = "") -> Path:
    """The BM25 corpus: `corpus` if given, else the one the download put in `data_dir`; a one-line
    RetrieverMissing naming the options when there is none (checked when the domain is built)."""
    if corpus:
        path = Path(corpus).expanduser()
        if not path.is_file():
            raise RetrieverMissing(f"bamboogle: domain.options.corpus {corpus!r} is not a file")
        return path
    path = find_corpus(data_dir) if data_dir else None
    if path is None:
        raise RetrieverMissing("bamboogle: no retriever: set domain.options.retrieval_url (a Search-R1 /retrieve "
                               "server) or domain.options.corpus (a wiki-18-format JSONL), or put wiki-18.jsonl[.gz] "
                               "in data_dir (python -m genenv_jax.data.download bamboogle --include_corpus)")
    return path


def make_retriever(retrieval_url: str = "", corpus: str = "", data_dir: str = "",
                   cache_dir: str = "") -> Retriever:
    """The configured retriever: the server at `retrieval_url` if set, else BM25 over `corpus_path`."""
    if retrieval_url:
        return HTTPRetriever(retrieval_url)
    from genenv_jax.domains.bamboogle.bm25_index import BM25Retriever

    return BM25Retriever(corpus_path(corpus, data_dir), cache_dir or None)


__all__ = ["HTTPRetriever", "RetrievalError", "RetrieverMissing", "Retriever", "corpus_path", "make_retriever",
           "parse_reply"]
