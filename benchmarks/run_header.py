"""The header every benchmark prints above its results: the command, the date and the machine, so a
result pasted into docs/benchmarks.md says where it came from."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys

import jax


def host_description() -> str:
    """Host name, CPU model and CPU count."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{platform.node()}, {model}, {os.cpu_count()} CPUs"


def print_header() -> None:
    print(f"command: {' '.join(shlex.quote(a) for a in [sys.executable, *sys.argv])}")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"machine: {host_description()}; jax {jax.__version__}; devices: {jax.devices()} "
          f"({jax.devices()[0].device_kind})")
