"""Where episodes' environments live: in this process, or in worker processes so that CPU-bound
environments step in parallel. Both hosts answer batches of requests (`domains.requests`: Reset,
Step, Score, Close, each for an episode id); a failure (an exception in the environment, a request past its time limit, a worker
that died or was killed) comes back as an `EnvFailure` for that episode only. Every request runs
under the host's `EnvLimits` (limits.py). On a multi-host run process 0 holds them and broadcasts."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import multiprocessing.connection
import time
import traceback
from typing import Any, Mapping, Sequence

from genenv_jax.domains import build_domain
from genenv_jax.domains.base import Domain, Environment
from genenv_jax.domains.requests import Close, Request, Reset, Score, Step, own_copy
from genenv_jax.episodes.limits import (KILL_GRACE_S, EnvLimits, EnvTimeout, bound_answer, cap_address_space,
                                        time_limit)
from genenv_jax.parallel.processes import broadcast_object, is_multiprocess, is_writer

ENV_TIMEOUT = "env_timeout"    # a request ran past its limit (the episode ends; see docs/episodes.md)
ENV_MEMORY = "env_memory"      # the environment ran out of its worker's memory cap
WORKER_DIED = "worker_died"    # the worker process holding the episode's environment died or was killed
READY = "ready"                # a new worker's first message: its domain is built (start-up is not a request)
STARTUP_TIMEOUT_S = 3600.0     # a new worker must be ready within this (imports, Domain.prepare_environments)


@dataclasses.dataclass(frozen=True)
class EnvFailure:
    """Why an environment call did not answer: `reason` is counted (e.g. env_exception:KeyError)."""

    reason: str
    detail: str = ""


def _run(domain: Domain, envs: dict[int, Environment], request: Request) -> Any:
    match request:
        case Reset(episode, task):
            envs[episode] = domain.environment(own_copy(task))
            return envs[episode].reset()
        case Step(episode, text):
            return envs[episode].step(text)
        case Score(episode, transcript):
            return envs[episode].score(transcript)
        case Close(episode):
            envs.pop(episode, None)
            return None
    raise TypeError(f"not an environment request: {request!r}")


def _answer(domain: Domain, envs: dict[int, Environment], request: Request, limits: EnvLimits) -> Any:
    """One request's answer within `limits`; any failure ends only that episode (its environment is
    dropped)."""
    op, episode = request.op, request.episode
    seconds = limits.seconds(op)
    try:
        with time_limit(seconds):
            return bound_answer(_run(domain, envs, request), limits.max_observation_chars)
    except EnvTimeout:
        envs.pop(episode, None)
        return EnvFailure(ENV_TIMEOUT, f"{op} ran past its limit of {seconds:g} s")
    except MemoryError:
        envs.pop(episode, None)
        return EnvFailure(ENV_MEMORY, f"{op} ran out of the worker's memory cap of {limits.worker_memory_mb} MB")
    except Exception as e:  # noqa: BLE001 - an environment's failure ends only its episode
        envs.pop(episode, None)
        return EnvFailure(f"env_exception:{type(e).__name__}", "".join(traceback.format_exception_only(e))[-300:])


class LocalEnvironments:
    """Environments in this process (cheap single-turn domains, tests). The time limit holds for
    Python code (SIGALRM, main thread); a hang inside C code, and memory, are only limited in worker
    processes (`episodes.env_workers` > 0)."""

    def __init__(self, domain: Domain, limits: EnvLimits = EnvLimits()):
        self.domain, self.limits = domain, limits
        self._envs: dict[int, Environment] = {}
        self._prepared = False

    def call(self, requests: Sequence[Request]) -> list[Any]:
        if not self._prepared:  # once, before the first request and outside its limit
            self.domain.prepare_environments()
            self._prepared = True
        return [_answer(self.domain, self._envs, request, self.limits) for request in requests]

    def close(self) -> None:
        self._envs.clear()


def _worker_main(conn, domain_ref: str, options: Mapping[str, Any], limits: EnvLimits) -> None:
    """A worker: caps its memory, builds the domain, then answers each request of a batch as soon as
    it is done (so the host knows which request a worker is on when it stops answering)."""
    cap_address_space(limits.worker_memory_mb)
    domain = build_domain(domain_ref, options)
    domain.prepare_environments()
    envs: dict[int, Environment] = {}
    conn.send(READY)
    while True:
        try:
            requests = conn.recv()
        except EOFError:
            return
        if requests is None:
            return
        for request in requests:
            conn.send(_answer(domain, envs, request, limits))


@dataclasses.dataclass
class _Pending:
    """The requests of one batch sent to one worker, answered in order."""

    worker: int
    indices: list[int]
    answered: int = 0
    since: float = 0.0  # when the worker started on the request it is on (best known)


class WorkerEnvironments:
    """Environments in `num_workers` spawned processes; episode e lives in worker e % num_workers.

    A batch of requests goes out to every worker before any answer is read, so the workers step in
    parallel. A worker that dies fails its episodes' requests (`worker_died`) and is replaced for
    the episodes that start later. A worker that does not answer a request within its limit plus
    KILL_GRACE_S is killed: that request fails as `env_timeout`, the worker's other episodes as
    `worker_died` (their environments were in it), and a new worker serves later episodes.
    """

    def __init__(self, domain_ref: str, options: Mapping[str, Any], num_workers: int,
                 limits: EnvLimits = EnvLimits()):
        self.domain_ref, self.options, self.limits = domain_ref, dict(options), limits
        self._ctx = mp.get_context("spawn")  # never fork a process that runs JAX
        self._workers: list[tuple[Any, Any] | None] = [None] * num_workers
        self._ready = [False] * num_workers
        self._held: list[set[int]] = [set() for _ in range(num_workers)]  # episodes whose environment a worker holds
        self._dead_episodes: set[int] = set()
        self.killed = 0  # workers killed for running past a limit (the loop counts them)

    def _worker(self, index: int):
        if self._workers[index] is None:
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=_worker_main, args=(child, self.domain_ref, self.options, self.limits),
                                     daemon=True)
            proc.start()
            child.close()
            self._workers[index], self._ready[index] = (proc, parent), False
        return self._workers[index]

    def call(self, requests: Sequence[Request]) -> list[Any]:
        n = len(self._workers)
        by_worker: dict[int, list[int]] = {}
        for i, request in enumerate(requests):
            by_worker.setdefault(request.episode % n, []).append(i)
        answers: list[Any] = [None] * len(requests)
        pending: list[_Pending] = []
        for w, indices in by_worker.items():
            live = []
            for i in indices:
                request, ep = requests[i], requests[i].episode
                if ep in self._dead_episodes and not isinstance(request, Reset):
                    answers[i] = EnvFailure(WORKER_DIED, "the episode's environment worker died earlier")
                else:
                    self._dead_episodes.discard(ep)
                    live.append(i)
                    if isinstance(request, Reset):
                        self._held[w].add(ep)
                    elif isinstance(request, Close):
                        self._held[w].discard(ep)
            if not live:
                continue
            proc, conn = self._worker(w)
            try:
                conn.send([requests[i] for i in live])
                pending.append(_Pending(w, live, since=time.monotonic()))
            except (BrokenPipeError, OSError):
                self._fail_worker(w, live, answers)
        self._collect(requests, pending, answers)
        return answers

    def _deadline(self, requests: Sequence[Request], job: _Pending) -> float:
        if not self._ready[job.worker]:
            return job.since + STARTUP_TIMEOUT_S
        seconds = self.limits.seconds(requests[job.indices[job.answered]].op)
        return job.since + seconds + KILL_GRACE_S if seconds > 0 else float("inf")

    def _collect(self, requests: Sequence[Request], pending: list[_Pending], answers: list[Any]) -> None:
        """Reads every worker's answers as they come, killing a worker past its request's deadline."""
        while pending:
            now = time.monotonic()
            for job in [j for j in pending if self._deadline(requests, j) <= now]:
                pending.remove(job)
                self._kill_worker(job, requests, answers)
            if not pending:
                return
            wait = min(self._deadline(requests, j) for j in pending) - time.monotonic()
            conns = {self._workers[j.worker][1]: j for j in pending}
            ready = multiprocessing.connection.wait(list(conns), timeout=None if wait == float("inf") else max(0.0, wait))
            for conn in ready:
                job = conns[conn]
                try:
                    answer = conn.recv()
                except (EOFError, OSError, ConnectionResetError):
                    pending.remove(job)
                    self._fail_worker(job.worker, job.indices[job.answered:], answers)
                    continue
                if answer == READY and not self._ready[job.worker]:
                    self._ready[job.worker], job.since = True, time.monotonic()
                    continue
                answers[job.indices[job.answered]] = answer
                job.answered, job.since = job.answered + 1, time.monotonic()
                if job.answered == len(job.indices):
                    pending.remove(job)

    def _kill_worker(self, job: _Pending, requests: Sequence[Request], answers: list[Any]) -> None:
        if not self._ready[job.worker]:
            proc, _ = self._workers[job.worker]
            proc.kill()
            self._fail_worker(job.worker, job.indices, answers, f"no worker ready within {STARTUP_TIMEOUT_S:g} s")
            return
        request = requests[job.indices[job.answered]]
        op, ep = request.op, request.episode
        proc, _ = self._workers[job.worker]
        proc.kill()
        self.killed += 1
        rest = job.indices[job.answered + 1:]
        self._fail_worker(job.worker, rest, answers, f"killed: episode {ep}'s {op} ran past its limit")
        answers[job.indices[job.answered]] = EnvFailure(
            ENV_TIMEOUT, f"{op} did not come back within {self.limits.seconds(op):g} s + {KILL_GRACE_S:g} s; "
                         "its worker was killed and replaced")

    def _fail_worker(self, w: int, live: Sequence[int], answers: list[Any], detail: str = "") -> None:
        proc, conn = self._workers[w]
        conn.close()
        proc.join(timeout=1)
        code = proc.exitcode
        self._workers[w] = None
        for i in live:
            answers[i] = EnvFailure(WORKER_DIED, detail or f"environment worker exited with code {code}")
        self._dead_episodes.update(self._held[w])
        self._held[w] = set()

    def close(self) -> None:
        for entry in self._workers:
            if entry is None:
                continue
            proc, conn = entry
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            conn.close()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        self._workers = [None] * len(self._workers)


class ProcessZeroEnvironments:
    """Multi-host runs: process 0 steps the environments (`inner`, None elsewhere) and every
    process gets its answers by broadcast, so an environment that fails or times out on one host
    cannot make the processes' episodes (and then their batches) diverge."""

    def __init__(self, inner: LocalEnvironments | WorkerEnvironments | None):
        if is_writer() != (inner is not None):
            raise ValueError("process 0, and only process 0, holds the environments")
        self.inner = inner

    def call(self, requests: Sequence[Request]) -> list[Any]:
        return broadcast_object(self.inner.call(requests) if self.inner is not None else None)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def open_environments(domain: Domain, domain_ref: str = "", options: Mapping[str, Any] | None = None,
                      num_workers: int = 0, limits: EnvLimits = EnvLimits()):
    """The loop's and the evaluator's environments: in this process (`num_workers` 0) or in worker
    processes of `domain_ref`, under `limits`; on a multi-host run held by process 0 only and
    broadcast to the others."""
    inner = None
    if is_writer():
        inner = (LocalEnvironments(domain, limits) if num_workers == 0
                 else WorkerEnvironments(domain_ref, options or {}, num_workers, limits))
    return ProcessZeroEnvironments(inner) if is_multiprocess() else inner
