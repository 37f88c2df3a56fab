"""The structure one co-evolution epoch runs through, measured by running it: which package files
its calls enter, how often each is entered afresh from another file, and which files the
training-weights concerns (LoRA) reach.

One genenv epoch of the suite's toy run (a 512-token tokenizer and a tiny random Qwen2, full
fine-tuning, then again with LoRA adapters on both policies) runs under `sys.setprofile`. Every
Python call whose code lives in `genenv_jax/` is attributed to its file. A file is *entered* when a
call into it comes from another file while it is not already on the stack (so a file's own helpers
and its callbacks into itself do not count), and *re-entered* when that happens again later in the
same epoch. Only calls inside `CoEvolution.run_epoch` count: the wiring before the first epoch is
measured apart (`set-up`).

    python benchmarks/epoch_structure.py                 # this checkout
    python benchmarks/epoch_structure.py --source DIR    # another checkout's genenv_jax (e.g. a git worktree)

The toy config comes from the checkout's own tests (`tests/support/loop_configs.py`, or
`tests/loop_configs.py` in older ones), so both sides run the same run.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", default=None, help="a checkout whose genenv_jax and tests are measured "
                                                   "(default: the one this script is in)")
    p.add_argument("--top", type=int, default=12, help="files listed by entries (0: every file)")
    return p.parse_args(argv)


def use_checkout(root: Path) -> None:
    """Imports genenv_jax and tests from `root`, ahead of any installed (editable) copy."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, str(root))


def toy_config(root: Path, lora: bool):
    from genenv_jax import domains
    from genenv_jax.configs.run_config import RunConfig

    try:
        from tests.support.loop_configs import toy_config_dict
        toy_domain = "tests.support.toy_domain:ToyDomain"
    except ImportError:  # checkouts before tests/ was grouped by package: tests/ is the import root
        sys.path.insert(0, str(root / "tests"))
        from loop_configs import toy_config_dict
        toy_domain = "toy_domain:ToyDomain"
    domains.DOMAINS["toy"] = toy_domain  # as the suite's fixture registers it
    overrides = {"epochs": 1}
    if lora:
        overrides |= {"agent.lora.rank": 4, "simulator.lora.rank": 4}
    return RunConfig.from_config_dict(toy_config_dict(**overrides), num_devices=1)


class EpochTrace:
    """Counts file entries of the calls made while `active` (see the module docstring)."""

    def __init__(self, package: Path):
        self.package = str(package) + os.sep
        self.active = False
        self.stack: list[str | None] = []
        self.entries: collections.Counter[str] = collections.Counter()
        self.entered_from: dict[str, set[str]] = collections.defaultdict(set)

    def file_of(self, frame) -> str | None:
        name = frame.f_code.co_filename
        return name[len(self.package):] if name.startswith(self.package) else None

    def __call__(self, frame, event, arg):
        if event == "call":
            here = self.file_of(frame)
            caller = self.stack[-1] if self.stack else None
            if self.active and here is not None and here != caller and here not in self.stack:
                self.entries[here] += 1
                self.entered_from[here].add(caller or "(outside)")
            self.stack.append(here if here is not None else caller)
        elif event == "return" and self.stack:
            self.stack.pop()


def measure(root: Path, lora: bool) -> EpochTrace:
    from genenv_jax.loop import CoEvolution

    trace = EpochTrace(root / "genenv_jax")
    with tempfile.TemporaryDirectory() as workdir:
        loop = CoEvolution(toy_config(root, lora), workdir)
        run_epoch = loop.run_epoch

        def traced_epoch(state, epoch):
            trace.active = True
            try:
                return run_epoch(state, epoch)
            finally:
                trace.active = False

        loop.run_epoch = traced_epoch
        sys.setprofile(trace)
        try:
            loop.run()
        finally:
            sys.setprofile(None)
    return trace


def report(trace: EpochTrace, label: str, top: int) -> None:
    files = sorted(trace.entries)
    reentered = {f: n for f, n in trace.entries.items() if n > 1}
    print(f"{label}: {len(files)} files entered, {sum(trace.entries.values())} entries, "
          f"{len(reentered)} files entered more than once")
    for name, count in trace.entries.most_common(top or None):
        print(f"  {count:4d}  {name}  (from {len(trace.entered_from[name])} files)")


def main(argv=None) -> None:
    args = parse_args(argv)
    root = Path(args.source or Path(__file__).resolve().parents[1]).resolve()
    use_checkout(root)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import genenv_jax

    if not genenv_jax.__file__.startswith(str(root)):
        raise SystemExit(f"--source={root}: imported genenv_jax from {genenv_jax.__file__}")
    print(f"checkout: {root}")
    for lora in (False, True):
        report(measure(root, lora), "one genenv epoch, " + ("LoRA rank 4" if lora else "full fine-tuning"), args.top)


if __name__ == "__main__":
    main()
