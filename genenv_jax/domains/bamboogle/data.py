"""Bamboogle's 125 questions from the user's download, and the deterministic split the loop uses.

Readers (in this order, the first file present wins):
- `test.jsonl`: FlashRAG's copy (what `python -m genenv_jax.data.download bamboogle` fetches), one
  object a line: {"id": "test_0", "question", "golden_answers": [...], "metadata"}; lines with the
  original sheet's columns {"Question", "Answer"} (Hugging Face chiayewken/bamboogle) also read.
- `bamboogle.csv`: the original Google sheet (Press et al., 2023) exported as CSV, header Question,Answer.
Question and answer text is stripped (the sheet has a trailing newline); ids are FlashRAG's `test_<row>`.
Optional `hops.jsonl` ({"id", "hops": [{"question", "answer"}, ...]}): hop decompositions, not part of
Bamboogle, used only to write the simulator's reference generations.

Bamboogle has one split of 125. The loop needs seeds to train on and a held-out set, so split
'train' / 'validation' / 'test' is a hash of each id (60/20/20 by default); `split_mode="all_test"`
puts all 125 in 'test' for the official number (evaluation only).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

from genenv_jax.data.prepared import BenchmarkSource, DataMissing

QUESTION_FILES = ("test.jsonl", "bamboogle.csv")
HOPS_FILE = "hops.jsonl"
SPLIT_MODES = ("hash", "all_test")
DOWNLOAD = "python -m genenv_jax.data.download bamboogle --dest DIR, then data_dir=DIR"


@dataclasses.dataclass(frozen=True)
class Question:
    """One Bamboogle question: its id, text, gold answers and (optional) hop decomposition."""

    qid: str
    question: str
    answers: tuple[str, ...]
    hops: tuple[dict[str, str], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.qid, "question": self.question, "answers": list(self.answers),
                "hops": None if self.hops is None else [dict(h) for h in self.hops]}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> "Question":
        hops = record.get("hops")
        return cls(str(record["id"]), record["question"], tuple(record["answers"]),
                   None if hops is None else tuple(dict(h) for h in hops))


def _answers(value: Any, where: str) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    out = []
    for v in values:
        if not isinstance(v, (str, int, float)):
            raise DataMissing(f"{where}: answers must be strings, got {type(v).__name__}")
        text = str(v).strip()
        if text and text not in out:
            out.append(text)
    if not out:
        raise DataMissing(f"{where}: no gold answer")
    return tuple(out)


def _question_of(record: Any, index: int, where: str) -> Question:
    if not isinstance(record, dict):
        raise DataMissing(f"{where}: expected a JSON object")
    if "golden_answers" in record and "question" in record:
        return Question(str(record.get("id", f"test_{index}")), str(record["question"]).strip(),
                        _answers(record["golden_answers"], f"{where} key 'golden_answers'"))
    if "Question" in record and "Answer" in record:
        return Question(f"test_{index}", str(record["Question"]).strip(), _answers(record["Answer"], f"{where} key 'Answer'"))
    raise DataMissing(f"{where}: expected keys question/golden_answers (FlashRAG) or Question/Answer (the sheet)")


def question_file(data_dir: str | Path) -> Path:
    """The questions file of a download (the first of QUESTION_FILES present); a one-line DataMissing
    naming the download command when the directory or the file is missing."""
    root = Path(data_dir).expanduser()
    if not str(data_dir) or not root.is_dir():
        raise DataMissing(f"bamboogle: data_dir {str(data_dir)!r} is not a directory ({DOWNLOAD})")
    path = next((root / n for n in QUESTION_FILES if (root / n).is_file()), None)
    if path is None:
        raise DataMissing(f"bamboogle: {root} holds none of {', '.join(QUESTION_FILES)} ({DOWNLOAD})")
    return path


def read_questions(data_dir: str | Path) -> list[Question]:
    """The questions of a Bamboogle download (see the module docstring), in file order, with hops if given."""
    root = Path(data_dir).expanduser()
    path = question_file(root)
    questions = list(_read_jsonl(path) if path.suffix == ".jsonl" else _read_csv(path))
    seen = set()
    for q in questions:
        if q.qid in seen:
            raise DataMissing(f"{path}: duplicate id {q.qid!r}")
        seen.add(q.qid)
    hops = read_hops(root / HOPS_FILE) if (root / HOPS_FILE).is_file() else {}
    return [dataclasses.replace(q, hops=hops.get(q.qid)) for q in questions]


def _read_jsonl(path: Path) -> Iterator[Question]:
    index = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError as e:
                raise DataMissing(f"{path}:{number}: not a JSON line ({e})") from None
            yield _question_of(record, index, f"{path}:{number}")
            index += 1


def _read_csv(path: Path) -> Iterator[Question]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        for index, row in enumerate(csv.DictReader(f)):
            yield _question_of(row, index, f"{path}:{index + 2}")


def read_hops(path: Path) -> dict[str, tuple[dict[str, str], ...]]:
    """{id: hops} from a hops.jsonl; DataMissing naming the line of a malformed entry."""
    out = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            hops = tuple({"question": str(h["question"]).strip(), "answer": str(h["answer"]).strip()}
                         for h in record["hops"])
            out[str(record["id"])] = hops
        except (ValueError, KeyError, TypeError) as e:
            raise DataMissing(f"{path}:{number}: expected {{'id', 'hops': [{{'question', 'answer'}}, ...]}} ({e})") from None
    return out


def split_of_id(qid: str, mode: str = "hash", salt: str = "bamboogle") -> str:
    """The loop's split of a question: a hash of its id (60% train, 20% validation, 20% test), or
    'test' for every question under `all_test`."""
    if mode == "all_test":
        return "test"
    if mode != "hash":
        raise ValueError(f"bamboogle split_mode {mode!r}; expected one of {SPLIT_MODES}")
    bucket = int(hashlib.sha256(f"{salt}/{qid}".encode()).hexdigest(), 16) % 100
    return "train" if bucket < 60 else "validation" if bucket < 80 else "test"


SOURCE = BenchmarkSource(
    name="bamboogle", version="1.0.0", splits=("test",),
    examples=lambda root, split: (q.to_json() for q in read_questions(root)),
    instructions=DOWNLOAD)

__all__ = ["DOWNLOAD", "DataMissing", "QUESTION_FILES", "Question", "SOURCE", "SPLIT_MODES", "question_file", "read_hops",
           "read_questions", "split_of_id"]
