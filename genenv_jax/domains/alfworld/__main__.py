"""CLI: build a generated ALFWorld game set in the official directory layout, or count the games of
a data directory (generated or the official json_2.1.1 download) per split and task type.

    python -m genenv_jax.domains.alfworld --build=/data/alfworld-gen --train=600 --validation=140 --test=134
    python -m genenv_jax.domains.alfworld --data_dir=/data/alfworld
"""

from __future__ import annotations

import argparse
import collections
import sys
from typing import Sequence

from genenv_jax.domains.alfworld import dataset, vocab


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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m genenv_jax.domains.alfworld", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
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
    if args.build:
        dataset.build(args.build, {"train": args.train, "validation": args.validation, "test": args.test},
                      salt=args.salt, max_steps=args.max_steps, workers=args.workers)
        print(format_counts(args.build))
    else:
        print(format_counts(args.data_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
