"""Per-run detail of a study, for studies with few seeds (the BFCL real-model study runs one per arm):
held-out accuracy with 95% intervals from the runs' held-out items, paired tests between arms on
those items, the simulator's parse / accept / ground rates from the epoch counters, and examples of
generated tasks from the runs' samples. Everything is read from the runs' own files (metrics.jsonl,
heldout/*.jsonl, samples/*.jsonl) and the base model's evaluation (study_dir/base/items.jsonl).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from genenv_jax.domains.generation import JSON_REASONS
from genenv_jax.workdir.metrics import HELDOUT_DIR, heldout_items_file

GROUNDING_REASON = "ungrounded_answer"  # domains.bfcl.grounding.REASON (a study reads metrics, not domains)


@dataclasses.dataclass(frozen=True)
class Proportion:
    """k successes of n, with the Wilson score interval (95%)."""

    k: float
    n: int

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    def interval(self, z: float = 1.959964) -> tuple[float, float] | None:
        if not self.n:
            return None
        p, n = self.k / self.n, self.n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    def fmt(self) -> str:
        """'0.415 [0.348, 0.485] (83/200)'; '-' without data."""
        if not self.n:
            return "-"
        lo, hi = self.interval()
        return f"{self.value:.3f} [{lo:.3f}, {hi:.3f}] ({self.k:g}/{self.n})"


def read_items(path: Path) -> dict[str, dict] | None:
    """{task_id: item} of an evaluation's items.jsonl (the evaluation command's or the loop's), or None."""
    if not path.is_file():
        return None
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {it["task_id"]: it for it in items}


def heldout_items(workdir: Path, epoch: int) -> dict[str, dict] | None:
    """A run's held-out items after `epoch` (-1: the starting point)."""
    return read_items(workdir / HELDOUT_DIR / heldout_items_file(epoch))


def accuracy(items: Mapping[str, dict], category: str | None = None) -> Proportion:
    """The share of `items` (of one category) with reward 1."""
    chosen = [it for it in items.values() if category is None or it["category"] == category]
    return Proportion(sum(float(it["reward"]) for it in chosen), len(chosen))


def mcnemar(a: Mapping[str, dict], b: Mapping[str, dict]) -> dict[str, Any]:
    """The exact two-sided McNemar test of two evaluations of the same items: b01 items only `a`
    solves, b10 items only `b` solves, p the binomial probability of a split at least as uneven."""
    shared = sorted(set(a) & set(b))
    only_a = sum(1 for t in shared if a[t]["reward"] >= 1 and b[t]["reward"] < 1)
    only_b = sum(1 for t in shared if b[t]["reward"] >= 1 and a[t]["reward"] < 1)
    n, k = only_a + only_b, min(only_a, only_b)
    p = 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)
    return {"n_items": len(shared), "only_first": only_a, "only_second": only_b, "p": p}


def simulator_rates(row: Mapping[str, Any]) -> dict[str, float | int | None]:
    """An epoch's simulator output from its counters: generated, JSON read (not a JSON rejection),
    accepted (became tasks), otherwise accepted (accepted, or refused only for an ungrounded answer:
    grounding is the last check), ungrounded (refused, or with grounding="record" accepted and
    flagged), and the rates json / accept / ground (grounded share of the otherwise accepted)."""
    generated = row.get("generated")
    if not generated:
        return {"generated": generated, "json": None, "accepted": None, "otherwise_accepted": None,
                "ungrounded": None, "json_rate": None, "accept_rate": None, "ground_rate": None}
    json_failures = sum(int(row.get(f"rejected/{r}", 0)) for r in JSON_REASONS)
    refused = int(row.get(f"rejected/{GROUNDING_REASON}", 0))
    flagged = int(row.get(f"flagged/{GROUNDING_REASON}", 0))
    accepted = int(row.get("tasks", 0))
    otherwise = accepted + refused
    return {"generated": int(generated), "json": int(generated) - json_failures, "accepted": accepted,
            "otherwise_accepted": otherwise, "ungrounded": refused + flagged,
            "json_rate": (int(generated) - json_failures) / generated, "accept_rate": accepted / generated,
            "ground_rate": (otherwise - refused - flagged) / otherwise if otherwise else None}


def rwr_tasks(workdir: Path, epoch: int) -> dict[str, int] | None:
    """The generated tasks of an epoch that were in band, so RWR trained the simulator on them, and
    how many of those failed grounding (flagged: only with grounding recorded), from the run's D_env
    pool; None when the pool has no such epoch."""
    from genenv_jax.workdir.pools import Pool

    if not (workdir / "pools" / "d_env").is_dir():
        return None
    pool = Pool(workdir / "pools", "d_env", writable=False)
    if pool.problem is not None or epoch not in pool.epochs:
        return None
    chosen = [r for r in pool.records([epoch]) if r.get("in_band")]
    flagged = sum(GROUNDING_REASON in ((r["task"].get("metadata") or {}).get("flags") or []) for r in chosen)
    return {"in_band": len(chosen), "ungrounded_in_band": flagged}


def read_samples(workdir: Path, epoch: int) -> list[dict]:
    """The generations a run logged for an epoch (samples/epoch_XXXX.jsonl; [] when absent)."""
    path = workdir / "samples" / f"epoch_{epoch:04d}.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ungrounded_examples(workdir: Path, epochs: Sequence[int], count: int) -> list[dict]:
    """Up to `count` logged generations whose answer failed grounding (flagged tasks, with the agent's
    rewards, or refusals), newest epoch first: {epoch, question, ground_truth, why, agent_rewards}."""
    out = []
    for epoch in sorted(epochs, reverse=True):
        for s in read_samples(workdir, epoch):
            task = s.get("task") or {}
            flags = (task.get("metadata") or {}).get("flags") or []
            if GROUNDING_REASON in flags:
                question = task["prompt"]["question"][-1]["content"]
                out.append({"epoch": epoch, "question": question, "ground_truth": task["verifier"]["ground_truth"],
                            "why": "; ".join(task["metadata"].get("ungrounded", [])),
                            "agent_rewards": s.get("agent_rewards")})
            elif s.get("rejection") == GROUNDING_REASON:
                out.append({"epoch": epoch, "question": None, "ground_truth": None, "why": s.get("detail"),
                            "agent_rewards": None, "generation": s.get("generation")})
            if len(out) >= count:
                return out
    return out
