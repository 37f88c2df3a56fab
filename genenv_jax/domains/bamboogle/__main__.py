"""EM, cover EM and F1 of an evaluation's answers: `python -m genenv_jax.domains.bamboogle --data_dir DIR
--items OUT/items.jsonl`.

The evaluation CLI's summary reports EM (the reward); cover EM and F1 need the answers themselves,
which its items.jsonl keeps (`task_id`, `response`: the last agent turn). This reads them, scores
each final `<answer>` against the download's gold answers and prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from genenv_jax.core.errors import ArgumentParser, CommandError, check_input_directory, command, one_line
from genenv_jax.domains.bamboogle.data import DataMissing, read_questions
from genenv_jax.domains.bamboogle.episode import score_responses


def read_items(path: Path) -> dict[str, str]:
    """{task_id: response} of an items.jsonl; ValueError naming the line of a malformed one."""
    out = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                item = json.loads(line)
                out[str(item["task_id"])] = str(item["response"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: expected an object with task_id and response ({e})") from None
    return out


PROGRAM = "python -m genenv_jax.domains.bamboogle"


@command(PROGRAM, expected=(DataMissing,))
def main(argv: Sequence[str] | None = None) -> int:
    p = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    p.add_argument("--data_dir", required=True, help="the Bamboogle download the evaluation used")
    p.add_argument("--items", required=True, help="an evaluation's items.jsonl")
    args = p.parse_args(argv)
    check_input_directory(args.data_dir, "--data_dir", "python -m genenv_jax.data.download bamboogle --dest DIR")
    golds = {q.qid: q.answers for q in read_questions(args.data_dir)}
    responses = read_items(Path(args.items))
    if not responses:
        raise CommandError(f"{args.items}: no items (an evaluation's items.jsonl has one JSON object a line)")
    try:
        scores = score_responses(golds, responses)
    except KeyError as e:  # ids the download has no gold answer for: items of another data set
        raise CommandError(f"{args.items}: {one_line(e).strip(chr(34))} (not in --data_dir {args.data_dir})") from None
    print(json.dumps(scores, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
