"""Passages in the wiki-18 format and how the agent sees them.

A corpus line is `{"id": ..., "contents": "\"Title\"\\ntext"}` (Search-R1's wiki-18, FlashRAG's
format): the first line of `contents` is the title, the rest the text. The agent sees the top-k
passages of a search as Search-R1 shows them, one a line: `Doc i(Title: <title line>) <text>`.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import IO, Iterator


class CorpusError(ValueError):
    """A corpus file that cannot be read (one line naming the file and line)."""


@dataclasses.dataclass(frozen=True)
class Passage:
    """One retrieved passage: its corpus id, its `contents` (title line + text) and the retriever's score."""

    doc_id: str
    contents: str
    score: float | None = None

    @property
    def title(self) -> str:
        """The first line of `contents` (wiki-18 keeps the title in double quotes)."""
        return self.contents.split("\n", 1)[0]

    @property
    def text(self) -> str:
        return self.contents.split("\n", 1)[1] if "\n" in self.contents else ""

    def to_json(self) -> dict:
        return {"id": self.doc_id, "contents": self.contents}


def format_passages(passages: list[Passage]) -> str:
    """Search-R1's rendering of one search's results: `Doc i(Title: t) text`, one passage a line."""
    return "".join(f"Doc {i}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, 1))


def passage_of_line(line: str | bytes, where: str) -> Passage:
    """A corpus line as a Passage; CorpusError naming `where` (file:line) when it is not one."""
    try:
        record = json.loads(line)
    except ValueError as e:
        raise CorpusError(f"{where}: not a JSON line ({e})") from None
    if not isinstance(record, dict) or not isinstance(record.get("contents"), str) or "id" not in record:
        raise CorpusError(f"{where}: expected an object with 'id' and a string 'contents'")
    return Passage(doc_id=str(record["id"]), contents=record["contents"])


def open_corpus(path: Path) -> IO[bytes]:
    """The corpus file as bytes, gunzipped on the fly when it ends in .gz."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_corpus(path: str | Path) -> Iterator[Passage]:
    """Every passage of a wiki-18-format JSONL (optionally .gz) corpus, blank lines skipped."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus {path} is not a file")
    with open_corpus(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield passage_of_line(line, f"{path}:{number}")


def find_corpus(data_dir: str | Path) -> Path | None:
    """The corpus the download step puts in a Bamboogle data dir (wiki-18.jsonl, else .jsonl.gz)."""
    for name in ("wiki-18.jsonl", "wiki-18.jsonl.gz"):
        if (Path(data_dir) / name).is_file():
            return Path(data_dir) / name
    return None


__all__ = ["CorpusError", "Passage", "find_corpus", "format_passages", "iter_corpus", "open_corpus", "passage_of_line"]
