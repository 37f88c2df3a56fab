"""What an epoch writes besides the checkpoint: pool records (D_train, D_env), samples of generated
tasks, and the epoch's metrics row."""

from __future__ import annotations

import collections
import json
import os
from typing import Iterable, Mapping, Sequence

import numpy as np

from genenv_jax.workdir import storage
from genenv_jax.rl import rwr_weight
from genenv_jax.loop.epoch_tasks import EpochTask, rolled_out, scores_of, with_generation
from genenv_jax.loop.epoch_tasks import RolloutGroup
from genenv_jax.loop.tasks import Generation


def d_train_records(records: Sequence[EpochTask]) -> list[dict]:
    """The agent's pool: every valid episode of the records' rollouts (successes and failures) with
    its task, whole transcript (turns with roles), reward, end reason and per-turn metadata."""
    return [{"task": g.task.to_json(), "response": ep.final_text, "transcript": ep.transcript, "reward": ep.reward,
             "end_reason": ep.end_reason, "turns": ep.turns, "seed_id": g.task.parent_id, "replayed": g.replayed}
            for g in rolled_out(records) for ep in g.episodes if ep.valid]


def d_env_records(records: Sequence[EpochTask], reward_lambda: float | None) -> list[dict]:
    """The simulator's pool: every scored generated task with p_hat, R_env, band and RWR weight
    (None where the simulator's objective is not RWR: reward_lambda None)."""
    return [{"task": r.task.to_json(), "generation": g.text, "seed_id": g.seed.task_id, "difficulty": g.difficulty,
             "p_hat": s.p_hat, "r_env": s.r_env, "in_band": s.in_band,
             "weight": None if reward_lambda is None else float(rwr_weight(s.r_env, reward_lambda))}
            for r in records if (g := r.generation) is not None and r.task and (s := r.score) is not None]


def write_samples(directory: str | os.PathLike, epoch: int, records: Sequence[EpochTask], count: int) -> None:
    """The first `count` generations of the epoch (task or rejection, agent rewards), atomically
    (local or gs://)."""
    rewards_of = {g.task.task_id: g.rewards for g in rolled_out(records)}
    rows = []
    for g in [r.generation for r in with_generation(records)][:count]:
        row = {"seed_id": g.seed.task_id, "difficulty": g.difficulty, "generation": g.text}
        if g.task:
            row.update(task=g.task.to_json(), agent_rewards=rewards_of.get(g.task.task_id))
        else:
            row.update(rejection=g.result.reason, detail=g.result.detail)
        rows.append(row)
    storage.makedirs(directory)
    path = storage.as_path(directory) / f"epoch_{epoch:04d}.jsonl"
    storage.write_atomic(path, "".join(json.dumps(r, default=str) + "\n" for r in rows), fsync=False)


def summed_counts(*stages: Mapping[str, int | float]) -> dict[str, int | float]:
    """The epoch's event counts: each stage's own counts (generation, task choice, rollouts,
    refills), added where two stages count the same event; a count of 0 stays a key."""
    total: dict[str, int | float] = {}
    for counts in stages:
        for key, value in counts.items():
            total[key] = total.get(key, 0) + value
    return total


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return float(np.mean(values)) if values else None


def epoch_metrics(*, records: Sequence[EpochTask], generated: int | None, times: Mapping[str, float]) -> dict:
    """The epoch's curriculum, rollout and throughput numbers from its records before refills
    (update and count metrics are added by the loop)."""
    gens = [r.generation for r in with_generation(records)]
    groups = rolled_out(records)
    scores = scores_of(records)
    replayed = sum(1 for r in records if r.replayed and r.rolls_out)
    tasks = sum(1 for g in gens if g.task)
    fresh = [g for g in groups if not g.replayed]
    responses = [int(sum(ep.loss_mask)) for g in groups for ep in g.episodes]  # agent tokens per episode
    sampled_tokens = sum(responses) + sum(len(g.tokens) for g in gens)
    return {
        "tasks": tasks, "generated": generated, "replayed_tasks": replayed,
        "parse_rate": (tasks / generated) if generated else None,
        "p_hat_mean": _mean(s.p_hat for s in scores), "r_env_mean": _mean(s.r_env for s in scores),
        "in_band_fraction": _mean(float(s.in_band) for s in scores),
        "solved_fraction": _mean(float(s.task_success == 1.0) for s in scores),
        "unsolved_fraction": _mean(float(s.task_success == 0.0) for s in scores),
        "success_rate": _mean(r for g in fresh for r in g.rewards),
        "valid_rollout_fraction": _mean(v for g in groups for v in g.valid),
        "response_tokens_mean": _mean(responses),
        "task_tokens_mean": _mean(len(g.tokens) for g in gens if g.tokens),
        "tokens_per_s": sampled_tokens / max(times["generate_s"] + times["rollouts_s"], 1e-9),
        "agent/episodes": sum(len(g.episodes) for g in groups),
        **category_metrics(gens, fresh),
        **{f"time/{k}": v for k, v in times.items()},
    }


def category_metrics(gens: Sequence[Generation], fresh: Sequence[RolloutGroup]) -> dict[str, float | int]:
    """Per task category: how many valid tasks were generated, and the agent's mean reward on the
    new tasks of that category it rolled out (the difficulty histogram next to success per level)."""
    generated = collections.Counter(g.task.category for g in gens if g.task)
    rewards: dict[str, list[float]] = collections.defaultdict(list)
    for group in fresh:
        rewards[group.task.category] += group.rewards
    out: dict[str, float | int] = {f"category/{c}/generated": n for c, n in sorted(generated.items())}
    return out | {f"category/{c}/success": float(np.mean(r)) for c, r in sorted(rewards.items())}


def epoch_line(epoch: int, m: Mapping, seconds: float) -> str:
    """One human-readable line per epoch (the full metrics go to metrics.jsonl / TensorBoard)."""
    def f(key, fmt="{:.2f}"):
        return "-" if m.get(key) is None else fmt.format(m[key])
    if m.get("dreamgym/synthetic_epoch") is not None:  # dreamgym: seeds + capped variants, synthetic or real
        parsed = (f"{m['tasks']} ({m.get('dreamgym/generated_tasks', 0)} generated, "
                  f"{'synthetic' if m['dreamgym/synthetic_epoch'] else 'real'} episodes)")
    elif m.get("generated") is not None:
        parsed = f"{m['tasks']}/{m['generated']}"
    else:
        parsed = f"{m['tasks']} (static)"
    return (f"epoch {epoch}: tasks {parsed}, p_hat {f('p_hat_mean')}, R_env {f('r_env_mean')}, "
            f"in-band {f('in_band_fraction')}, success {f('success_rate')}, agent loss {f('agent/loss', '{:.4f}')}, "
            f"simulator loss {f('simulator/loss', '{:.4f}')} ({seconds:.0f} s)")
