"""Where an epoch's tasks come from: the simulator writing variants of chosen seeds (genenv / random
modes), a set generated once up front (static mode), and tasks replayed from D_train."""

from __future__ import annotations

import collections
import dataclasses
from typing import Protocol, Sequence

import numpy as np

from genenv_jax.rl import curriculum
from genenv_jax.domains.base import ChatPrompt, Rejection, Task
from genenv_jax.loop.context import (STREAM_GENERATE, STREAM_REPLAY, STREAM_SEEDS, STREAM_STATIC, STREAM_TOP_UP,
                                     LoopContext)
from genenv_jax.loop.policy import Placement, Policy
from genenv_jax.loop.state import SeedStats
from genenv_jax.workdir.pool_mixing import mixed_batches
from genenv_jax.workdir.pools import Pool

Counts = collections.Counter  # a stage's events by name (rejections, prompts too long, ...)


@dataclasses.dataclass
class Generation:
    """One simulator sample: the seed it came from, its tokens, and what parsing made of it."""

    seed: Task
    difficulty: str
    prompt: list[int]
    tokens: list[int]
    logprobs: np.ndarray
    text: str
    result: Task | Rejection
    group: int = -1  # generations of one prompt share it (the simulator's GRPO group); -1: none

    @property
    def task(self) -> Task | None:
        return self.result if isinstance(self.result, Task) else None


def choose_seeds(ctx: LoopContext, epoch: int, seeds: dict[str, SeedStats], count: int) -> list[Task]:
    """Uniform, or DreamGym's choice: seeds whose last rollouts' rewards vary most, plus exploration."""
    sel = ctx.config.seed_selection
    ids = [s.task_id for s in ctx.train_seeds]
    rng = np.random.default_rng(ctx.seed(epoch, STREAM_SEEDS))
    variances = {sid: s.reward_variance for sid, s in seeds.items()
                 if sid in ctx.seed_by_id and s.reward_variance is not None}
    if sel.strategy == "uniform" or not variances:
        picks = [ids[i] for i in rng.choice(len(ids), size=count, replace=count > len(ids))]
    else:
        picks = list(curriculum.select_seeds(ids, variances, count, explore_fraction=sel.explore_fraction,
                                             rng=rng).seed_ids)
    return [ctx.seed_by_id[i] for i in picks]


def _parse(ctx: LoopContext, text: str, seed: Task, direction: str) -> Task | Rejection:
    """The domain's parse; an unexpected exception becomes a rejection named by its type."""
    try:
        return ctx.domain.parse_task(text, seed, direction)
    except Exception as e:  # noqa: BLE001 - model text must never stop the run
        return Rejection(domain=ctx.domain.name, reason=f"parser_exception:{type(e).__name__}",
                         detail=str(e)[:200], seed_id=seed.task_id, raw_text=text)


def simulator_request(ctx: LoopContext, seed: Task, stats: dict[str, SeedStats]) -> tuple[ChatPrompt, str]:
    """The simulator's prompt for one variant of `seed` and the difficulty direction it asks for:
    toward the curriculum's alpha, judged with its band k_min on the seed's recent success."""
    cur = ctx.config.curriculum
    if ctx.config.simulator_feedback == "none":  # nothing of the agent: no results, no direction toward alpha
        return ctx.domain.simulator_prompt(seed, None, "similar", cur.alpha), "similar"
    recent = stats[seed.task_id].recent_success if seed.task_id in stats else []
    direction = curriculum.difficulty_direction(recent, cur.alpha, cur.k_min)
    return ctx.domain.simulator_prompt(seed, recent, direction, cur.alpha), direction


class TaskGenerator:
    """The simulator writing one variant per seed entry, steered toward the curriculum's alpha."""

    def __init__(self, ctx: LoopContext, simulator: Policy):
        self.ctx = ctx
        self.simulator = simulator

    def generate(self, seeds: Sequence[Task], weights: Placement, stats: dict[str, SeedStats], epoch: int,
                 groups: Sequence[int] | None = None) -> tuple[list[Generation], Counts]:
        """One generation per entry of `seeds` (repeat a seed for several) by the simulator's `weights`
        (placed only if some prompt fits), and what generating them counted (prompts too long, the
        sampler's prefill and decode work, rejections by reason, recorded flags); `groups[i]` tags
        entry i's generation (the entries of one prompt share a group), default none."""
        ctx = self.ctx
        counts = Counts()
        prompts, meta = [], []
        for i, seed in enumerate(seeds):
            prompt, direction = simulator_request(ctx, seed, stats)
            ids = ctx.text.prompt(prompt)
            if len(ids) > self.simulator.settings.sampling.max_prompt_len:
                counts["simulator_prompt_too_long"] += 1
                continue
            prompts.append(ids)
            meta.append((seed, direction, -1 if groups is None else groups[i]))
        with ctx.progress(len(prompts), f"epoch {epoch}: simulator") as bar:
            out = self.simulator.sample(weights, prompts, ctx.seed(epoch, STREAM_GENERATE), ctx.text.stop_ids, bar)
        if out.stats is not None:  # the simulator's prompts share their instructions: prefilled once
            counts["simulator/prefill_requested_tokens"] += out.stats.prefill.requested
            counts["simulator/prefill_computed_tokens"] += out.stats.prefill.computed
            # decode: steps, rows computed (slots x steps, fewer after compaction) and tokens kept
            counts["simulator/decode_steps"] += out.stats.decode_steps
            counts["simulator/decode_row_steps"] += out.stats.computed_row_steps
            counts["simulator/decode_tokens"] += out.stats.useful_tokens
            for program in ("refill", "decode", "resize", "compact"):  # seconds, when the sampler is timed
                if getattr(out.stats, f"{program}_s"):
                    counts[f"time/simulator_{program}_s"] += getattr(out.stats, f"{program}_s")
        gens = []
        for (seed, direction, group), prompt, toks, lps in zip(meta, prompts, out.token_lists(), out.logprob_lists()):
            text = ctx.text.decode(toks)
            gens.append(Generation(seed, direction, prompt, toks, lps, text, _parse(ctx, text, seed, direction), group))
        for g in gens:
            if isinstance(g.result, Rejection):
                counts[f"rejected/{g.result.reason}"] += 1
            else:  # a check the domain was told to record rather than enforce (e.g. BFCL grounding="record")
                for flag in g.result.metadata.get("flags", ()):
                    counts[f"flagged/{flag}"] += 1
        return gens, counts


class TaskSource(Protocol):
    """An epoch's new tasks (with the generations behind them, empty for drawn ones) and what
    making them counted; `simulator_weights`: the simulator's weights as the epoch placed them for
    sampling (the copy is made only if the source samples: static mode draws from its set after the
    first epoch)."""

    def tasks(self, epoch: int, simulator_weights: Placement,
              stats: dict[str, SeedStats]) -> tuple[list[Generation], Counts]: ...

    def pool_records(self) -> dict[str, list[dict]]:
        """Records the source made in this epoch's `tasks`, by pool name, for the epoch to commit
        with its other pools (a source writes nothing itself, so a kill before the epoch's
        checkpoint leaves nothing to roll back)."""


class GeneratedTasks:
    """genenv / random modes: fresh variants of chosen seeds every epoch."""

    def __init__(self, ctx: LoopContext, generator: TaskGenerator):
        self.ctx, self.generator = ctx, generator

    def tasks(self, epoch, simulator_weights, stats):
        c = self.ctx.config
        seeds = choose_seeds(self.ctx, epoch, stats, c.seeds_per_epoch)
        groups = [i for i in range(len(seeds)) for _ in range(c.variants_per_seed)]  # a seed's variants: one prompt
        seeds = [s for s in seeds for _ in range(c.variants_per_seed)]
        return self.generator.generate(seeds, simulator_weights, stats, epoch, groups)

    def pool_records(self) -> dict[str, list[dict]]:
        return {}


class StaticTasks:
    """static mode: all variants generated at the first epoch, then drawn from. The set is the
    `static_tasks` pool, committed by the epoch that generated it (`pool_records`)."""

    def __init__(self, ctx: LoopContext, generator: TaskGenerator, pool: Pool):
        self.ctx, self.generator, self.pool = ctx, generator, pool
        self.generated: list[dict] = []  # the set this epoch generated, until the epoch commits it

    def tasks(self, epoch, simulator_weights, stats):
        c = self.ctx.config
        counts = Counts()
        rows = self.pool.records()
        if not rows:  # the first epoch (a resume before its checkpoint rolled the pool back to empty)
            seeds = choose_seeds(self.ctx, 0, {}, c.seeds_per_epoch)
            seeds = [s for s in seeds for _ in range(c.static_variants_per_seed)]
            gens, counts = self.generator.generate(seeds, simulator_weights, {}, 0)
            rows = self.generated = [{"task": g.task.to_json()} for g in gens if g.task]
        tasks = [Task.from_json(r["task"]) for r in rows]
        if not tasks:
            return [], counts
        rng = np.random.default_rng(self.ctx.seed(epoch, STREAM_STATIC))
        wanted = c.new_tasks_per_epoch or c.seeds_per_epoch * c.variants_per_seed
        picks = rng.choice(len(tasks), size=min(wanted, len(tasks)), replace=False)
        return [Generation(self.ctx.seed_by_id.get(tasks[i].parent_id, tasks[i]), tasks[i].difficulty or "similar",
                           [], [], np.zeros(0), "", tasks[i]) for i in picks], counts

    def pool_records(self) -> dict[str, list[dict]]:
        generated, self.generated = self.generated, []
        return {"static_tasks": generated} if generated else {}


def seed_generation(seed: Task) -> Generation:
    """A training seed as one of the epoch's tasks (no simulator sample behind it)."""
    return Generation(seed, "similar", [], [], np.zeros(0), "", seed)


class CurriculumTasks:
    """dreamgym mode: DreamGym's curriculum. `seeds_per_epoch` training seeds chosen by reward
    variance (`seed_selection`); with `dreamgym.task_generation`, the chosen seeds whose last
    rollouts' rewards varied most (variance > 0: feasible, not yet solved) are replaced by the
    simulator's variants of them, at most `generated_task_share` of the epoch's tasks. A variant
    that does not parse leaves its seed in place."""

    def __init__(self, ctx: LoopContext, generator: TaskGenerator):
        self.ctx, self.generator = ctx, generator

    def tasks(self, epoch, simulator_weights, stats):
        c = self.ctx.config
        seeds = choose_seeds(self.ctx, epoch, stats, c.seeds_per_epoch)
        cap = int(c.dreamgym.generated_task_share * len(seeds) + 1e-9) if c.dreamgym.task_generation else 0
        variance = {i: stats[s.task_id].reward_variance for i, s in enumerate(seeds)
                    if s.task_id in stats and (stats[s.task_id].reward_variance or 0.0) > 0}
        picked = sorted(variance, key=lambda i: (-variance[i], i))[:cap]
        gens, counts = self.generator.generate([seeds[i] for i in picked], simulator_weights, stats, epoch)
        counts["dreamgym/generation_requests"] += len(picked)
        counts["dreamgym/generated_tasks"] += sum(1 for g in gens if g.task)
        replaced = collections.Counter(g.seed.task_id for g in gens if g.task)  # per seed id: seeds may repeat
        kept = []
        for i, s in enumerate(seeds):
            if i in picked and replaced[s.task_id] > 0:
                replaced[s.task_id] -= 1
            else:
                kept.append(seed_generation(s))
        return kept + list(gens), counts  # rejected generations add no task but are counted and logged

    def pool_records(self) -> dict[str, list[dict]]:
        return {}


def top_up_tasks(ctx: LoopContext, missing: int, epoch: int) -> list[Task]:
    """`missing` training seeds drawn at random: the agent's data when the simulator wrote fewer than
    `new_tasks_per_epoch` valid tasks (equal agent data in every mode)."""
    rng = np.random.default_rng(ctx.seed(epoch, STREAM_TOP_UP))
    seeds = ctx.train_seeds
    return [seeds[i] for i in rng.choice(len(seeds), size=missing, replace=missing > len(seeds))]


def replay_tasks(ctx: LoopContext, d_train: Pool, epoch: int, count: int | None = None,
                 seed: int | None = None) -> list[Task]:
    """Tasks replayed from base seeds and D_train's earlier epochs, rolled out afresh (on-policy):
    `replay.tasks_per_epoch` of them, or `count` drawn with `seed` (dynamic sampling's refills)."""
    r = ctx.config.replay
    count = r.tasks_per_epoch if count is None else count
    if count <= 0:
        return []
    sources = {"base": [{"task": s.to_json()} for s in ctx.train_seeds],
               "historical": d_train.data_source() if d_train.epochs else []}  # empty sources are dropped
    batch = next(mixed_batches(sources, {"base": r.base_ratio, "historical": r.historical_ratio}, count,
                               seed=ctx.seed(epoch, STREAM_REPLAY) if seed is None else seed, num_batches=1))
    return [Task.from_json(rec["task"]) for rec in batch]
