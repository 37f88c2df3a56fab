"""BFCL seeds and checks from the command line: `python -m genenv_jax.domains.bfcl --stats` prints seed
counts per category and split; `--check` runs the official checker on the reference response to
every shipped entry and `parse_task` on every entry re-serialised as a generation."""

from __future__ import annotations

import collections
import sys
from typing import Any, Sequence

from genenv_jax.core.errors import ArgumentParser, CommandError, check_within, command
from genenv_jax.domains.base import Task
from genenv_jax.domains.bfcl import data as bfcl_data, schema as bfcl_schema
from genenv_jax.domains.bfcl.data import SplitFractions
from genenv_jax.domains.bfcl.domain import GROUNDING_MODES, BFCLDomain
from genenv_jax.domains.bfcl.generation import task_as_generation


def format_stats(domain: BFCLDomain) -> str:
    """A Markdown table of seed counts per category and split."""
    counts = domain.split_counts()
    lines = ["| category | train | validation | test | total |", "|---|---:|---:|---:|---:|"]
    totals = collections.Counter()
    for category, c in counts.items():
        total = sum(c.values())
        totals.update(c)
        lines.append(f"| {category} | {c['train']} | {c['validation']} | {c['test']} | {total} |")
    lines.append(f"| **all** | {totals['train']} | {totals['validation']} | {totals['test']} | "
                 f"{sum(totals.values())} |")
    digest = bfcl_data.split_digest({t.task_id: t.metadata["split"] for t in domain.seeds("all")})
    return "\n".join(lines) + f"\n\nsplit digest (sha256 of sorted id/split pairs): {digest}"


def shipped_answer_check(domain: BFCLDomain) -> dict[str, Any]:
    """Scores every seed's reference response (rendered, parsed back, official checker).

    Returns {category: {"total", "passed", "failures": [(id, error_type)]}}.
    """
    report: dict[str, Any] = {}
    for task in domain.seeds("all"):
        r = report.setdefault(task.category, {"total": 0, "passed": 0, "failures": []})
        result = domain.score_details(task, domain.reference_response(task))
        r["total"] += 1
        if result.reward == 1.0:
            r["passed"] += 1
        else:
            r["failures"].append((task.task_id, result.details.get("error_type")))
    return report


def shipped_parse_check(domain: BFCLDomain) -> dict[str, collections.Counter]:
    """`parse_task` on every seed re-serialised as a generation (seeded by another seed of its category).

    Returns {category: Counter(reason -> count)} with "accepted" counted too.
    """
    report: dict[str, collections.Counter] = {}
    tasks = domain.seeds("all")
    by_category: dict[str, list[Task]] = collections.defaultdict(list)
    for t in tasks:
        by_category[t.category].append(t)
    for category, group in by_category.items():
        counter = report.setdefault(category, collections.Counter())
        keys = [bfcl_schema.question_key(t.prompt["question"]) for t in group]
        for i, task in enumerate(group):
            # The seed: the next entry of the category with a different question.
            j = next((k % len(group) for k in range(i + 1, i + len(group)) if keys[k % len(group)] != keys[i]), i)
            out = domain.parse_task(task_as_generation(task), group[j])
            counter["accepted" if isinstance(out, Task) else out.reason] += 1
    return report


PROGRAM = "python -m genenv_jax.domains.bfcl"


@command(PROGRAM)
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    parser.add_argument("--stats", action="store_true", help="print seed counts per category and split")
    parser.add_argument("--check", action="store_true",
                        help="reward check on every shipped possible answer, and parse_task on every entry")
    parser.add_argument("--validation", default="strict", choices=bfcl_schema.VALIDATION_LEVELS)
    parser.add_argument("--grounding", default="reject", choices=GROUNDING_MODES,
                        help="the grounding check of parse_task (grounding.py): reject, record or off")
    parser.add_argument("--train", type=float, default=0.7)
    parser.add_argument("--val", type=float, default=0.1)
    parser.add_argument("--test", type=float, default=0.2)
    args = parser.parse_args(argv)
    if not (args.stats or args.check):
        parser.error("nothing to do: pass --stats and/or --check")
    for flag in ("train", "val", "test"):
        check_within(getattr(args, flag), f"--{flag}", 0.0, 1.0)
    if abs(args.train + args.val + args.test - 1.0) > 1e-9:
        raise CommandError(f"--train {args.train:g} + --val {args.val:g} + --test {args.test:g} = "
                           f"{args.train + args.val + args.test:g}; the split fractions must sum to 1")
    domain = BFCLDomain(split_fractions=SplitFractions(args.train, args.val, args.test), validation=args.validation,
                        grounding=args.grounding)
    if args.stats:
        print(format_stats(domain))
    if args.check:
        print("\nReward of the reference response to every shipped entry (official checker):")
        for category, r in shipped_answer_check(domain).items():
            print(f"  {category}: {r['passed']}/{r['total']} = {r['passed'] / r['total']:.2%}")
            for task_id, error_type in r["failures"]:
                print(f"    FAIL {task_id}: {error_type}")
        print(f"\nparse_task ({args.validation}, grounding {args.grounding}) on every shipped entry re-serialised "
              "as a generation:")
        for category, counter in shipped_parse_check(domain).items():
            total = sum(counter.values())
            rejected = {k: v for k, v in counter.items() if k != "accepted"}
            print(f"  {category}: accepted {counter['accepted']}/{total}; rejected {rejected or '{}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
