#!/usr/bin/env python3
"""An sbatch script that runs GenEnv on a multi-node GPU cluster, one JAX process per node (or per GPU).

    python tpu/slurm.py --nodes 4 --gpus_per_node 8 --workdir /shared/runs/bfcl-7b --dry_run \\
        -- --config.agent.model_dir=/shared/models/Qwen2.5-7B-Instruct      # prints the script
    python tpu/slurm.py --nodes 4 --gpus_per_node 8 --workdir /shared/runs/bfcl-7b \\
        -- --config.agent.model_dir=/shared/models/Qwen2.5-7B-Instruct      # writes logs/<job>.sbatch, sbatch's it

The script exports JAX_COORDINATOR_ADDRESS (the first node of the job), which makes
genenv_jax.parallel.initialize_distributed() call jax.distributed.initialize(); inside each srun
task JAX takes the process count and id from SLURM_NTASKS and SLURM_PROCID. With one process per
node it also exports JAX_LOCAL_DEVICE_IDS so that the process drives all the node's GPUs (JAX's
SLURM detection would otherwise give each task a single GPU). The repo and its .venv must be on
a filesystem every node sees, and so must the workdir. See docs/tpu.md.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # the shared error line (stdlib only: no venv needed)
from genenv_jax.core.errors import ArgumentParser, CommandError, Once, check_not_empty, command  # noqa: E402

PROGRAM = "slurm.py"
# Values written into #SBATCH lines, which sbatch reads without a shell: no spaces or quotes.
PLAIN = re.compile(r"[A-Za-z0-9_./+:@-]+")
# A job name is also the file name of logs/<job>.sbatch and the logs: no path separators, no leading dot.
JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
# sbatch's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS; or no limit.
TIME = re.compile(r"(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2}|UNLIMITED|INFINITE)", re.IGNORECASE)
MAX_GPUS_PER_NODE = 64  # more than any node holds: a typo, which sbatch would only queue forever
MAX_NODES = 10_000  # more GPU nodes than the largest clusters have (Frontier: 9,408)


def check_values(a: argparse.Namespace) -> None:
    """Refuses values sbatch would queue forever or mis-read, and a job name that would put
    logs/<job>.sbatch outside `<repo_dir>/logs`."""
    if not 1 <= a.nodes <= MAX_NODES:
        why = " (more nodes than any cluster has)" if a.nodes > MAX_NODES else ""
        raise CommandError(f"--nodes {a.nodes}: must lie in [1, {MAX_NODES}]{why}")
    if not 1 <= a.gpus_per_node <= MAX_GPUS_PER_NODE:
        raise CommandError(f"--gpus_per_node {a.gpus_per_node}: must lie in [1, {MAX_GPUS_PER_NODE}]")
    if not JOB_NAME.fullmatch(a.job_name):
        raise CommandError(f"--job_name {a.job_name!r}: letters, digits and _.+- only, not starting with a dot "
                           "(it names logs/<job>.sbatch)")
    if not TIME.fullmatch(a.time):
        raise CommandError(f"--time {a.time!r}: expected minutes, HH:MM:SS or D-HH:MM:SS (sbatch's --time)")


def sbatch_script(a: argparse.Namespace, overrides: list[str]) -> str:
    check_values(a)
    for flag in ("job_name", "time", "partition", "account", "repo_dir"):
        value = getattr(a, flag)
        if value and not PLAIN.fullmatch(value):
            raise ValueError(f"--{flag} {value!r}: only letters, digits and _./+:@- are allowed")
    for item in a.env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", item):
            raise ValueError(f"--env {item!r}: expected NAME=VALUE")
    for arg in overrides:
        if not arg.startswith("--"):
            raise ValueError(f"argument {arg!r} after --: expected flags for genenv_jax.main")
        flag = arg.partition("=")[0]
        if flag in ("--workdir", "--config"):
            raise CommandError(f"{arg} after -- contradicts slurm.py's own {flag}; give {flag} once, before --")
    per_node = a.process_per == "node"
    tasks = 1 if per_node else a.gpus_per_node
    cpus = '"$SLURM_CPUS_ON_NODE"' if per_node else f'"$((SLURM_CPUS_ON_NODE / {tasks}))"'
    log = f"{a.repo_dir}/logs/{a.job_name}"
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={a.job_name}",
             f"#SBATCH --nodes={a.nodes}",
             f"#SBATCH --ntasks-per-node={tasks}",
             f"#SBATCH --gpus-per-node={a.gpus_per_node}",
             "#SBATCH --exclusive",
             f"#SBATCH --time={a.time}",
             f"#SBATCH --output={log}-%j.out"]
    if a.partition:
        lines.append(f"#SBATCH --partition={a.partition}")
    if a.account:
        lines.append(f"#SBATCH --account={a.account}")
    lines += ["# Written by tpu/slurm.py (docs/tpu.md).",
              "set -euo pipefail",
              f"cd {shlex.quote(a.repo_dir)}",
              "",
              "# jax.distributed: process 0 serves the coordinator on the first node of the job (the port is",
              "# the one JAX's own SLURM detection derives from the job id); JAX reads the process count and",
              "# id from SLURM_NTASKS and SLURM_PROCID in each srun task.",
              'export JAX_COORDINATOR_ADDRESS="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
              ':$((SLURM_JOB_ID % 4096 + 61440))"']
    if per_node:
        lines += ["# One process per node drives all of the node's GPUs.",
                  f"export JAX_LOCAL_DEVICE_IDS={','.join(map(str, range(a.gpus_per_node)))}"]
    else:
        lines += ["# One process per GPU: JAX gives task i of a node GPU i (SLURM_LOCALID)."]
    lines += [f"export {shlex.quote(item)}" for item in a.env]
    main = [a.python, "-u", "-m", "genenv_jax.main", f"--config={a.config}", f"--workdir={a.workdir}", *overrides]
    lines += ["",
              "# One log per process: logs/<job>-<jobid>-<process id>.log",
              f"srun --ntasks-per-node={tasks} --cpus-per-task={cpus} --kill-on-bad-exit=1 "
              f"--output={log}-%j-%t.log \\",
              "    " + shlex.join(main)]
    return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, overrides = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[0],
                                     epilog="Arguments after -- go to genenv_jax.main. See docs/tpu.md.")
    parser.add_argument("--nodes", action=Once, type=int, required=True, help="nodes in the job")
    parser.add_argument("--gpus_per_node", action=Once, type=int, default=8)
    parser.add_argument("--process_per", action=Once, choices=("node", "gpu"), default="node",
                        help="one JAX process per node (default) or per GPU")
    parser.add_argument("--workdir", action=Once, required=True, help="run directory, on a filesystem every node sees")
    parser.add_argument("--config", action=Once, default="configs/bfcl.py", help="--config of genenv_jax.main")
    parser.add_argument("--job_name", action=Once, default="genenv")
    parser.add_argument("--time", action=Once, default="48:00:00", help="wall-clock limit (D-HH:MM:SS or HH:MM:SS)")
    parser.add_argument("--partition", action=Once)
    parser.add_argument("--account", action=Once)
    parser.add_argument("--repo_dir", action=Once, default=str(REPO_ROOT), help="the repo on the cluster (default: this one)")
    parser.add_argument("--python", action=Once, default=".venv/bin/python", help="interpreter, relative to --repo_dir")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment for the job (repeatable)")
    parser.add_argument("--dry_run", action="store_true", help="print the sbatch script and submit nothing")
    a = parser.parse_args(argv)
    check_not_empty(a, ("workdir", "config", "job_name", "time", "partition", "account", "repo_dir", "python"))
    if "--dry_run" in overrides:
        parser.error("--dry_run after -- would go to genenv_jax.main; put it before --")
    return a, overrides


@command(PROGRAM)
def main(argv: list[str]) -> int:
    a, overrides = parse(argv)
    script = sbatch_script(a, overrides)
    if a.dry_run:
        sys.stdout.write(script)
        return 0
    path = Path(a.repo_dir) / "logs" / f"{a.job_name}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)  # sbatch does not create the directory of --output
    path.write_text(script)
    print(f"+ sbatch {shlex.quote(str(path))}", file=sys.stderr, flush=True)
    return subprocess.run(["sbatch", str(path)]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
