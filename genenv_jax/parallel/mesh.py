"""Device mesh (data, fsdp, tensor), logical-axis rules, batch shardings, multi-host start-up.

Model code names array axes logically ('embed', 'mlp', 'q_heads', ...); `LOGICAL_RULES` maps them
to mesh axes, MaxText style. A mesh axis that does not divide an array dimension is dropped for
that array (it is replicated along it), so e.g. 4 kv heads still work with tensor=8.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import socket
import time
from typing import Any, Iterator, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax.core.config_checks import KeyProblem, check_fields, setting

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

# (logical axis, mesh axis or axes or None), in order of precedence.
LOGICAL_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", BATCH_AXES),
    ("activation_batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("activation_mlp", "tensor"),
    ("head_dim", None),
    ("layers", None),
    ("norm", None),
    ("activation_length", None),
    ("activation_embed", None),
)


def _axis_size(value: int) -> str | None:
    """>= 1, or -1 (the rest of the devices)"""
    return None if value >= 1 or value == -1 else "must be >= 1, or -1 (the rest of the devices)"


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Mesh shape, the `mesh` config section; one axis may be -1 ("the rest of the devices"). Each key
    is declared with its doc and rule (`core.config_checks.setting`)."""

    data: int = setting(1, "data-parallel axis: batch rows are split over it, params replicated", check=_axis_size)
    fsdp: int = setting(-1, "FSDP axis: batch rows and params (and optimizer state) are split over it",
                        check=_axis_size)
    tensor: int = setting(1, "tensor-parallel axis: heads, MLP and vocab are split over it", check=_axis_size)

    def __post_init__(self):
        check_fields(self)
        free = [axis for axis in MESH_AXES if getattr(self, axis) == -1]
        if len(free) > 1:
            raise KeyProblem(self, free[1], f"at most one axis may be -1 ({free[0]} is)")

    def resolve(self, num_devices: int) -> tuple[int, int, int]:
        sizes = [self.data, self.fsdp, self.tensor]  # checked when constructed: sizes >= 1, at most one -1
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            if num_devices % known:
                raise ValueError(f"mesh {dict(zip(MESH_AXES, sizes))}: {num_devices} devices are not "
                                 f"divisible by {known}")
            sizes[sizes.index(-1)] = num_devices // known
        if math.prod(sizes) != num_devices:
            raise ValueError(f"mesh {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} devices, "
                             f"{num_devices} are available")
        return tuple(sizes)


def make_mesh(mesh_cfg: MeshConfig | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over `devices` (default: all), laid out for the interconnect."""
    mesh_cfg = mesh_cfg or MeshConfig()
    devices = list(jax.devices() if devices is None else devices)
    shape = mesh_cfg.resolve(len(devices))
    try:
        grid = mesh_utils.create_device_mesh(shape, devices=devices)
    except (ValueError, NotImplementedError, AssertionError):
        grid = np.asarray(devices).reshape(shape)  # e.g. a subset of a TPU slice
    return Mesh(grid, MESH_AXES)


def logical_to_spec(logical: P | Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules: Sequence[tuple[str, Any]] | None = None) -> P:
    """Maps a spec of logical axis names to mesh axes for an array of `shape`.

    Each mesh axis is used at most once per array, and only where it divides the dimension.
    """
    rules = LOGICAL_RULES if rules is None else rules
    table = dict(rules)
    used: set[str] = set()
    out = []
    for name, dim in zip(tuple(logical), shape):
        target = table.get(name) if name is not None else None
        axes = (target,) if isinstance(target, str) else tuple(target or ())
        chosen = []
        for axis in axes:
            size = mesh.shape.get(axis, 1)
            if axis in used or size == 1:
                continue
            if dim % (math.prod(mesh.shape[a] for a in chosen) * size):
                continue
            chosen.append(axis)
        used.update(chosen)
        out.append(None if not chosen else chosen[0] if len(chosen) == 1 else tuple(chosen))
    return P(*out)


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Leading (batch) axis over data x fsdp, the rest replicated."""
    return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


def shard_batch(batch, mesh: Mesh):
    """Puts a pytree of host arrays (the global batch) onto the mesh, batch axis over data x fsdp.

    Multi-host: every process passes the same global batch (the loop computes it identically on
    each) and supplies the rows of its own devices; nothing crosses hosts.
    """
    batch_size = math.prod(mesh.shape[a] for a in BATCH_AXES)

    def put(x):
        x = np.asarray(x)
        if x.ndim and x.shape[0] % batch_size:
            raise ValueError(f"batch dimension {x.shape[0]} is not divisible by data*fsdp = {batch_size}")
        sharding = batch_sharding(mesh, x.ndim) if x.ndim else NamedSharding(mesh, P())
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, batch)


@contextlib.contextmanager
def mesh_context(mesh: Mesh, rules=None) -> Iterator[None]:
    """Activates the mesh and logical rules so the model's activation constraints apply."""
    activate = jax.set_mesh if hasattr(jax, "set_mesh") else (lambda m: m)  # jax < 0.7: `with mesh:`
    with activate(mesh), nn.logical_axis_rules(tuple(LOGICAL_RULES if rules is None else rules)):
        yield


_initialized = False


def _environment_is_multihost() -> bool:
    env = os.environ
    return bool(env.get("JAX_COORDINATOR_ADDRESS") or env.get("MEGASCALE_COORDINATOR_ADDRESS")
                or "," in env.get("TPU_WORKER_HOSTNAMES", "")
                or int(env.get("SLURM_JOB_NUM_NODES", "1") or 1) > 1)


DEFAULT_COORDINATOR_TIMEOUT_S = 60.0  # JAX's own default waits 300 s, silently


class DistributedSetupError(ValueError):
    """Multi-process flags that contradict each other, or a coordinator that cannot be reached in
    time; the message is one line naming the flag or the address."""


def check_distributed_flags(coordinator_address: str | None, num_processes: int | None, process_id: int | None,
                            timeout_s: float = DEFAULT_COORDINATOR_TIMEOUT_S) -> None:
    """Refuses, before any work, multi-process flags that cannot describe a job: `--num_processes`
    or `--process_id` without `--coordinator_address` (JAX would silently run one process), an
    address that is not HOST:PORT, a process id outside [0, num_processes), a timeout that is not a
    finite number > 0. On a cluster JAX detects (TPU pod, SLURM) the flags may be left out."""
    if not 0 < timeout_s < math.inf:
        raise DistributedSetupError(f"--coordinator_timeout_s={timeout_s}: must be a finite number > 0")
    if num_processes is not None and num_processes < 1:
        raise DistributedSetupError(f"--num_processes={num_processes}: must be >= 1")
    if coordinator_address is None:
        if (num_processes or 1) > 1 and not _environment_is_multihost():
            raise DistributedSetupError(f"--num_processes={num_processes} needs --coordinator_address=HOST:PORT "
                                        "(process 0's address); without it JAX runs one process")
        if process_id not in (None, 0) and not _environment_is_multihost():
            raise DistributedSetupError(f"--process_id={process_id} needs --coordinator_address=HOST:PORT and "
                                        "--num_processes")
        return
    _host_and_port(coordinator_address)
    if (num_processes is None or process_id is None) and not _environment_is_multihost():
        raise DistributedSetupError(f"--coordinator_address={coordinator_address} needs --num_processes and "
                                    "--process_id (JAX cannot detect them outside a TPU pod or SLURM job)")
    if num_processes is not None and process_id is not None and not 0 <= process_id < num_processes:
        raise DistributedSetupError(f"--process_id={process_id}: must lie in [0, {num_processes}) "
                                    f"(--num_processes={num_processes})")


def _host_and_port(address: str) -> tuple[str, int]:
    """HOST:PORT (or [IPv6]:PORT) split; anything else is refused naming the flag."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DistributedSetupError(f"--coordinator_address={address}: expected HOST:PORT (e.g. 10.0.0.2:8476)")
    return host, int(port)


def wait_for_coordinator(address: str, process_id: int | None, timeout_s: float) -> None:
    """Before `jax.distributed.initialize`, which aborts the whole process with a C++ stack dump
    when it cannot connect: process 0 checks that it can serve on the port (the host resolves, the
    port is free); every other process retries a TCP connection to process 0 until `timeout_s`
    passes. Either failure is one line naming the address."""
    host, port = _host_and_port(address)
    try:
        socket.getaddrinfo(host, port)
    except OSError as err:
        raise DistributedSetupError(f"--coordinator_address={address}: cannot resolve {host} ({err})") from None
    if process_id == 0:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("", port))
            except OSError as err:
                raise DistributedSetupError(f"--coordinator_address={address}: process 0 cannot serve on port "
                                            f"{port} ({(err.strerror or str(err)).lower()})") from None
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=max(0.1, min(5.0, deadline - time.monotonic()))).close()
            return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise DistributedSetupError(
                    f"--coordinator_address={address}: no coordinator reachable within {timeout_s:g} s "
                    f"({(err.strerror or str(err)).lower()}); is process 0 running there? (--coordinator_timeout_s "
                    "waits longer)"
                ) from None
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None,
                           timeout_s: float = DEFAULT_COORDINATOR_TIMEOUT_S) -> None:
    """Calls `jax.distributed.initialize` for a multi-host run; a no-op on one host.

    With no arguments it initialises when the environment describes a multi-host job (TPU pod
    VMs, SLURM, or JAX_COORDINATOR_ADDRESS), letting JAX auto-detect the rest. The flags are
    checked first (`check_distributed_flags`), the coordinator reached (`wait_for_coordinator`),
    and JAX waits at most `timeout_s` for every process to join.
    """
    global _initialized
    if _initialized:
        return
    check_distributed_flags(coordinator_address, num_processes, process_id, timeout_s)
    if coordinator_address is None and not _environment_is_multihost():
        return
    if coordinator_address is not None:
        wait_for_coordinator(coordinator_address, process_id, timeout_s)
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, initialization_timeout=max(1, math.ceil(timeout_s)))
    _initialized = True
    logging.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())
