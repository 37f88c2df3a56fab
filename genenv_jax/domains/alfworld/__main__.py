"""CLI: build a generated ALFWorld game set in the official directory layout, or count the games of
a data directory (generated or the official json_2.1.1 download) per split and task type.

    python -m genenv_jax.domains.alfworld --build=/data/alfworld-gen --train=600 --validation=140 --test=134
    python -m genenv_jax.domains.alfworld --data_dir=/data/alfworld
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import Sequence

from genenv_jax.core.errors import ArgumentParser, CommandError, check_at_least, check_output_path, command
from genenv_jax.domains.alfworld import dataset, vocab

PROGRAM = "python -m genenv_jax.domains.alfworld"


def format_counts(data_dir: str) -> str:
    """A Markdown table of playable games per task type and split."""
    counts = collections.Counter()
    for split in dataset.OFFICIAL_SPLITS:
        if (dataset.split_root(data_dir) / dataset.OFFICIAL_SPLITS[split]).is_dir():
            counts.update((e.traj["task_type"], split) for e in dataset.read_split(data_dir, split))
    header = [dataset.OFFICIAL_SPLITS[s] for s in dataset.OFFICIAL_SPLITS]
    lines = ["| task type | " + " | ".join(header) + " |", "|---|" + "---:|" * len(header)]
    for task_type in vocab.TASK_TYPES:
        lines.append(f"| {task_type} | " + " | ".join(str(counts[task_type, s]) for s in dataset.OFFICIAL_SPLITS) + " |")
    lines.append("| all | " + " | ".join(str(sum(counts[t, s] for t in vocab.TASK_TYPES))
                                        for s in dataset.OFFICIAL_SPLITS) + " |")
    return "\n".join(lines)


def check_arguments(args) -> None:
    """Refuses, before any game is generated, negative counts and a `--build` directory that exists
    or cannot be created, and a `--data_dir` that holds no ALFWorld split (not an all-zero table)."""
    for flag, low in (("train", 0), ("validation", 0), ("test", 0), ("max_steps", 1), ("workers", 0)):
        check_at_least(getattr(args, flag), f"--{flag}", low)
    if args.build:
        if os.path.lexists(args.build):
            raise CommandError(f"--build {args.build}: already exists; give a new directory")
        check_output_path(args.build, "--build", directory=True)
    elif not any((dataset.split_root(args.data_dir) / name).is_dir() for name in dataset.OFFICIAL_SPLITS.values()):
        raise CommandError(f"--data_dir {args.data_dir}: no ALFWorld split directory in it "
                           f"({', '.join(dataset.OFFICIAL_SPLITS.values())}, or json_2.1.1/ holding them)")


@command(PROGRAM)
def main(argv: Sequence[str] | None = None) -> int:
    p = ArgumentParser(prog=PROGRAM, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="", help="write a generated, engine-verified game set to this new directory")
    p.add_argument("--data_dir", default="", help="count the playable games of this data directory")
    for split, default in (("train", 600), ("validation", 140), ("test", 134)):
        p.add_argument(f"--{split}", type=int, default=default, help=f"games in {dataset.OFFICIAL_SPLITS[split]}")
    p.add_argument("--salt", default="genenv")
    p.add_argument("--max_steps", type=int, default=50)
    p.add_argument("--workers", type=int, default=0, help="processes (0: all cores)")
    args = p.parse_args(argv)
    if bool(args.build) == bool(args.data_dir):
        p.error("give exactly one of --build and --data_dir")
    check_arguments(args)
    if args.build:
        dataset.build(args.build, {"train": args.train, "validation": args.validation, "test": args.test},
                      salt=args.salt, max_steps=args.max_steps, workers=args.workers)
        print(format_counts(args.build))
    else:
        print(format_counts(args.data_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
