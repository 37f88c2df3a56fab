"""Starts N local JAX processes (a real multi-host setup on one machine): each gets
`devices_per_process` virtual CPU devices, and `jax.distributed` connects them through a
coordinator on 127.0.0.1. Used by tests/integration/test_multiprocess.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from tests.support import REPO as ROOT, subprocess_env

# A BFCL tiny run small enough to start, train, checkpoint and resume in a test (the demo preset
# itself warms up for minutes): 2 warm-start steps per policy, 2 seeds, short outputs; 2 tasks x
# 4 rollouts = 8 GRPO rows, one per device.
SMALL_TINY_BFCL = (
    "--config=bfcl:tiny", "--config.epochs=2", "--config.warmstart.agent_steps=2",
    "--config.warmstart.simulator_steps=2", "--config.seeds_per_epoch=2", "--config.domain.max_seeds=4",
    "--config.replay.tasks_per_epoch=2", "--config.agent.train.tasks_per_step=2",
    "--config.agent.sampling.max_new_tokens=16", "--config.simulator.sampling.max_new_tokens=48",
    "--config.log.progress_bars=False",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(devices: int) -> dict[str, str]:
    env = subprocess_env(devices, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def start(module_args: Sequence[str], processes: int, devices_per_process: int, log_dir: Path) -> list[subprocess.Popen]:
    """`python -m <module_args>` in `processes` processes joined by jax.distributed (one process:
    no coordinator). Output of process i goes to log_dir/process_i.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = []
    for i in range(processes):
        dist = ([] if processes == 1 else
                [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={processes}", f"--process_id={i}"])
        log = open(log_dir / f"process_{i}.log", "w")
        procs.append(subprocess.Popen([sys.executable, "-m", *module_args, *dist], cwd=ROOT,
                                      env=environment(devices_per_process), stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return procs


def wait(procs: list[subprocess.Popen], timeout: float,
         kill_when: Callable[[], bool] | None = None) -> list[int]:
    """Exit codes of `procs`; with `kill_when`, SIGKILLs every process as soon as it returns True
    (a host failure). A process that fails takes the others down; the logs are shown on failure."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if kill_when is not None and kill_when():
            for p in procs:
                p.kill()
            break
        if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
            time.sleep(5)  # let the others report, then stop them
            for p in procs:
                p.kill()
            break
        time.sleep(0.2)
    codes = [p.wait() for p in procs]
    return codes


def logs(log_dir: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(log_dir.glob("process_*.log")))


def run(module_args: Sequence[str], processes: int, devices_per_process: int, log_dir: Path,
        timeout: float = 900) -> None:
    """Runs to completion; AssertionError with every process's log tail if any process fails."""
    codes = wait(start(module_args, processes, devices_per_process, log_dir), timeout)
    assert codes == [0] * processes, f"exit codes {codes}\n{logs(log_dir)}"
