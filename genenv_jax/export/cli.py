"""The export command: `python -m genenv_jax.export` (argparse; `--help` lists the flags).

    python -m genenv_jax.export --run_dir=RUN --policy=agent --format=gguf --gguf_type=q8_0 --out=OUT
    python -m genenv_jax.export --run_dir=RUN --policy=simulator --format=peft --out=OUT
    python -m genenv_jax.export --run_dir=RUN --tasks --out=OUT      # the simulator's tasks as a dataset

Everything is written into a staging directory beside --out and renamed into place at the end,
with `export.json` saying what was exported from where, so an interrupted export leaves no
half-written --out. Flags and inputs are checked before any weights are read; an expected failure
is one line `genenv_jax.export: error: ...` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from genenv_jax.core.errors import ArgumentParser, CommandError, check_at_least, check_output_path, command
from genenv_jax.export.gguf_writer import GGUF_TYPES
from genenv_jax.export.policy_formats import FORMATS, format_problem
from genenv_jax.evaluation.run_policy import POLICY_NAMES
from genenv_jax.workdir import storage
from genenv_jax.workdir.checkpoints import CheckpointError

PROGRAM = "genenv_jax.export"
MANIFEST = "export.json"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    p.add_argument("--run_dir", required=True, help="a GenEnv run's workdir (its checkpoints/ and pools/)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--policy", choices=POLICY_NAMES, help="export this trained policy's weights")
    what.add_argument("--tasks", action="store_true",
                      help="export the simulator's generated tasks (D_env) as Parquet (and BFCL files for BFCL)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="with --policy: hf (merged HF directory), peft (LoRA adapters) or gguf (llama.cpp)")
    p.add_argument("--gguf_type", choices=GGUF_TYPES, default=None, help="with --format=gguf (default f16)")
    p.add_argument("--epoch", type=int, default=None, help="with --policy: which checkpoint (default: the latest)")
    p.add_argument("--out", required=True, help="a new (or empty) directory to write the export into")
    return p.parse_args(argv)


def _saved_config(run_dir: str, epoch: int | None) -> tuple[int, dict[str, Any]]:
    """(epoch, config snapshot) of the checkpoint the export reads, without reading any array."""
    from genenv_jax.workdir.checkpoints import Checkpointer

    ckpt = Checkpointer(storage.as_path(run_dir) / "checkpoints", async_save=False)
    try:
        epochs = ckpt.all_epochs()
        if not epochs:
            raise CommandError(f"--run_dir {run_dir}: no checkpoint in {ckpt.directory}")
        if epoch is not None and epoch not in epochs:
            raise CommandError(f"--epoch={epoch}: {run_dir} has no checkpoint of that epoch (it has {epochs})")
        epoch = epochs[-1] if epoch is None else epoch
        return epoch, ckpt.metadata(epoch)["config"]
    except CheckpointError as err:
        raise CommandError(f"--run_dir {run_dir}: {err}") from None
    finally:
        ckpt.close()


def check_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """Refuses, before any weights are read: flags that do not go together, a run dir without
    checkpoints, an epoch it does not have, a PEFT export of a policy without adapters, and an
    --out that is an input (the run, the policy's model source, the tokenizer), lies inside one,
    or already holds files. Returns the saved config snapshot."""
    if args.tasks and (args.format or args.gguf_type or args.epoch is not None):
        raise CommandError("--tasks exports the run's task pool; --format, --gguf_type and --epoch go with --policy")
    if args.policy and not args.format:
        raise CommandError("--policy needs --format (hf, peft or gguf)")
    if args.gguf_type and args.format != "gguf":
        raise CommandError(f"--gguf_type goes with --format=gguf, not --format={args.format}")
    check_at_least(args.epoch, "--epoch", 0)
    if "://" in args.out:
        raise CommandError(f"--out {args.out}: must be a local directory")
    if not storage.exists(storage.as_path(args.run_dir) / "checkpoints"):
        raise CommandError(f"--run_dir {args.run_dir}: no checkpoints/ in it (a GenEnv run's workdir)")
    epoch, snapshot = _saved_config(args.run_dir, args.epoch)
    inputs = {"--run_dir": args.run_dir}
    if args.policy:
        from genenv_jax.evaluation.run_policy import policy_settings, source_of, tokenizer_source

        settings = policy_settings(snapshot, args.policy)
        problem = format_problem(args.policy, args.format, settings.lora.enabled, source_of(settings))
        if problem:
            raise CommandError(problem)
        inputs |= {f"the {args.policy}'s model source": settings.model_dir or None,
                   "the run's tokenizer": tokenizer_source(snapshot)}
    check_output_path(args.out, "--out", directory=True, inputs=inputs)
    if os.path.isdir(args.out) and os.listdir(args.out):
        raise CommandError(f"--out {args.out}: exists and is not empty; give a new directory")
    return snapshot


def staged_export(out: str, write) -> list[str]:
    """Runs `write(staging)` in a fresh directory beside `out` and renames it to `out` (an empty
    `out` is replaced); nothing is left behind if `write` fails."""
    target = Path(out).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        summary = write(staging)
        (staging / MANIFEST).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if target.is_dir():
            target.rmdir()  # empty: checked before any work
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sorted(p.name for p in target.iterdir())


@command(PROGRAM, expected=(CheckpointError,))  # an unreadable checkpoint is one line too
def main(argv: Sequence[str] | None = None) -> int:
    """Exports a run's policy or its generated tasks into --out; an expected failure is one line
    and exit status 2 (`core.errors.command`)."""
    args = _parse_args(argv)
    check_arguments(args)
    t0 = time.time()
    run_dir = storage.absolute(args.run_dir)
    if args.tasks:
        from genenv_jax.export.tasks import export_tasks

        def write(staging: Path) -> dict[str, Any]:
            return {"run_dir": run_dir, "what": "tasks", **export_tasks(args.run_dir, staging)}
    else:
        from genenv_jax.export.policy_formats import export_policy
        from genenv_jax.evaluation.run_policy import load_run_policy

        def write(staging: Path) -> dict[str, Any]:
            policy = load_run_policy(args.run_dir, args.policy, args.epoch)
            return {"run_dir": run_dir, "what": "policy",
                    **export_policy(policy, args.format, staging, args.gguf_type or "f16")}
    files = staged_export(args.out, write)
    print(f"wrote {args.out} ({', '.join(files)}) in {time.time() - t0:.1f}s")
    return 0
