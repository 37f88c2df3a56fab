"""Where episodes' environments live: in this process, or in worker processes so that CPU-bound
environments step in parallel. Both hosts answer batches of reset / step / score requests for
episode ids; a failure (an exception in the environment, a worker that died) comes back as an
`EnvFailure` for that episode only. On a multi-host run process 0 holds them and broadcasts."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import traceback
from typing import Any, Mapping, Sequence

from genenv_jax.domains import build_domain
from genenv_jax.domains.base import Domain, Environment, Task
from genenv_jax.parallel.processes import broadcast_object, is_multiprocess, is_writer

Request = tuple[str, int, Any]  # (op: "reset" | "step" | "score" | "close", episode id, payload)


@dataclasses.dataclass(frozen=True)
class EnvFailure:
    """Why an environment call did not answer: `reason` is counted (e.g. env_exception:KeyError)."""

    reason: str
    detail: str = ""


def _answer(domain: Domain, envs: dict[int, Environment], op: str, episode: int, payload: Any) -> Any:
    try:
        if op == "reset":
            envs[episode] = domain.environment(Task.from_json(payload))
            return envs[episode].reset()
        if op == "step":
            return envs[episode].step(payload)
        if op == "score":
            return envs[episode].score(payload)
        if op == "close":
            envs.pop(episode, None)
            return None
        raise ValueError(f"unknown environment request {op!r}")
    except Exception as e:  # noqa: BLE001 - an environment's failure ends only its episode
        envs.pop(episode, None)
        return EnvFailure(f"env_exception:{type(e).__name__}", "".join(traceback.format_exception_only(e))[-300:])


class LocalEnvironments:
    """Environments in this process (cheap single-turn domains, tests)."""

    def __init__(self, domain: Domain):
        self.domain = domain
        self._envs: dict[int, Environment] = {}

    def call(self, requests: Sequence[Request]) -> list[Any]:
        return [_answer(self.domain, self._envs, op, ep, payload) for op, ep, payload in requests]

    def close(self) -> None:
        self._envs.clear()


def _worker_main(conn, domain_ref: str, options: Mapping[str, Any]) -> None:
    domain = build_domain(domain_ref, options)
    envs: dict[int, Environment] = {}
    while True:
        try:
            requests = conn.recv()
        except EOFError:
            return
        if requests is None:
            return
        conn.send([_answer(domain, envs, op, ep, payload) for op, ep, payload in requests])


class WorkerEnvironments:
    """Environments in `num_workers` spawned processes; episode e lives in worker e % num_workers.

    A batch of requests goes out to every worker before any answer is read, so the workers step in
    parallel. A worker that dies fails its episodes' requests (`worker_died`) and is replaced for
    the episodes that start later.
    """

    def __init__(self, domain_ref: str, options: Mapping[str, Any], num_workers: int):
        self.domain_ref, self.options = domain_ref, dict(options)
        self._ctx = mp.get_context("spawn")  # never fork a process that runs JAX
        self._workers: list[tuple[Any, Any] | None] = [None] * num_workers
        self._held: list[set[int]] = [set() for _ in range(num_workers)]  # episodes whose environment a worker holds
        self._dead_episodes: set[int] = set()

    def _worker(self, index: int):
        if self._workers[index] is None:
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=_worker_main, args=(child, self.domain_ref, self.options), daemon=True)
            proc.start()
            child.close()
            self._workers[index] = (proc, parent)
        return self._workers[index]

    def call(self, requests: Sequence[Request]) -> list[Any]:
        n = len(self._workers)
        by_worker: dict[int, list[int]] = {}
        for i, (op, ep, _) in enumerate(requests):
            by_worker.setdefault(ep % n, []).append(i)
        answers: list[Any] = [None] * len(requests)
        sent = []
        for w, indices in by_worker.items():
            live = []
            for i in indices:
                op, ep, _ = requests[i]
                if ep in self._dead_episodes and op != "reset":
                    answers[i] = EnvFailure("worker_died", "the episode's environment worker died earlier")
                else:
                    self._dead_episodes.discard(ep)
                    live.append(i)
                    if op == "reset":
                        self._held[w].add(ep)
                    elif op == "close":
                        self._held[w].discard(ep)
            if not live:
                continue
            proc, conn = self._worker(w)
            try:
                conn.send([requests[i] for i in live])
                sent.append((w, live))
            except (BrokenPipeError, OSError):
                self._fail_worker(w, live, answers)
        for w, live in sent:
            proc, conn = self._workers[w]
            try:
                for i, answer in zip(live, conn.recv()):
                    answers[i] = answer
            except (EOFError, OSError, ConnectionResetError):
                self._fail_worker(w, live, answers)
        return answers

    def _fail_worker(self, w: int, live: Sequence[int], answers: list[Any]) -> None:
        proc, conn = self._workers[w]
        conn.close()
        proc.join(timeout=1)
        code = proc.exitcode
        self._workers[w] = None
        for i in live:
            answers[i] = EnvFailure("worker_died", f"environment worker exited with code {code}")
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
                      num_workers: int = 0):
    """The loop's and the evaluator's environments: in this process (`num_workers` 0) or in worker
    processes of `domain_ref`; on a multi-host run held by process 0 only and broadcast to the others."""
    inner = None
    if is_writer():
        inner = LocalEnvironments(domain) if num_workers == 0 else WorkerEnvironments(domain_ref, options or {}, num_workers)
    return ProcessZeroEnvironments(inner) if is_multiprocess() else inner
