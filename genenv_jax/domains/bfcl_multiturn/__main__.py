"""CLI: `python -m genenv_jax.domains.bfcl_multiturn --stats` prints seed counts per category and split;
`--check` replays every shipped ground truth through our environment and scores it, perturbs it,
compares each verdict with BFCL's official checker, and runs `parse_task` on every entry."""

from __future__ import annotations

import collections
import sys
import time
from typing import Sequence

from genenv_jax.core.errors import ArgumentParser, command
from genenv_jax.domains.base import Task
from genenv_jax.domains.bfcl.data import SPLITS
from genenv_jax.domains.bfcl_multiturn import schema, verify
from genenv_jax.domains.bfcl_multiturn.domain import BFCLMultiTurnDomain


def format_stats(domain: BFCLMultiTurnDomain) -> str:
    """A Markdown table of seed counts per category and split."""
    counts = collections.Counter((t.category, t.metadata["split"]) for t in domain.seeds("all"))
    lines = ["| category | train | validation | test |", "|---|---:|---:|---:|"]
    for category in domain.categories:
        lines.append(f"| {category} | " + " | ".join(str(counts[category, s]) for s in SPLITS) + " |")
    return "\n".join(lines)


def shipped_parse_check(domain: BFCLMultiTurnDomain) -> dict[str, collections.Counter]:
    """`parse_task` on every seed written as a generation, seeded by the next seed of its category."""
    report: dict[str, collections.Counter] = {}
    by_category: dict[str, list[Task]] = collections.defaultdict(list)
    for t in domain.seeds("all"):
        by_category[t.category].append(t)
    for category, group in by_category.items():
        counter = report.setdefault(category, collections.Counter())
        for i, task in enumerate(group):
            out = domain.parse_task(schema.as_generation(task), group[(i + 1) % len(group)])
            counter["accepted" if isinstance(out, Task) else out.reason] += 1
    return report


PROGRAM = "python -m genenv_jax.domains.bfcl_multiturn"


@command(PROGRAM)
def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog=PROGRAM,
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--stats", action="store_true", help="print seed counts per category and split")
    parser.add_argument("--check", action="store_true", help="replay, perturbation agreement and parse_task checks")
    args = parser.parse_args(argv)
    if not (args.stats or args.check):
        parser.error("nothing to do: pass --stats and/or --check")
    domain = BFCLMultiTurnDomain()
    if args.stats:
        print(format_stats(domain))
    if args.check:
        t0 = time.perf_counter()
        report = verify.check_tasks(domain, domain.seeds("all"))
        print(f"\nReplay and perturbations vs the official checker ({time.perf_counter() - t0:.0f} s):")
        for case in report.n:
            n = report.n[case]
            print(f"  {case}: n={n}, ours valid {report.ours_valid[case]}, official valid "
                  f"{report.official_valid[case]}, agree {report.agree[case]}/{n} = {report.agree[case] / n:.2%}")
        for failure in report.replay_failures:
            print(f"    REPLAY FAIL {failure}")
        for disagreement in report.disagreements:
            print(f"    DISAGREE {disagreement}")
        print("\nparse_task on every shipped entry written as a generation:")
        for category, counter in shipped_parse_check(domain).items():
            rejected = {k: v for k, v in counter.items() if k != "accepted"}
            print(f"  {category}: accepted {counter['accepted']}/{sum(counter.values())}; rejected {rejected or '{}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
