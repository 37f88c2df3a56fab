"""Held-out accuracy of the agent: greedy, one episode per task of a seed split it never trains on,
overall and per category (`config.evaluation`). Measured after the warm-start and after every epoch,
so curves show what training changed on tasks the loop never saw.

It runs the evaluation command's own code (`evaluation.evaluate` with `sampler_generate_fn`): the
same task selection (`--max_per_category`, `--sample_seed`), prompts, batching and scoring, so a
held-out item's result equals the command's for the same params with `--batch_size` equal to the
agent's `sampling.batch_size` (tests/loop/test_heldout.py). Each evaluation's items are written to
`<workdir>/heldout/` (`workdir.metrics.heldout_items_file`) (the command's items.jsonl format)."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Mapping, Sequence

from genenv_jax.domains.base import Task
from genenv_jax.evaluation import select_tasks
from genenv_jax.evaluation.evaluate import EvalItem, evaluate, sampler_generate_fn
from genenv_jax.loop.context import LoopContext
from genenv_jax.loop.policy import Placement, Policy
from genenv_jax.loop.rollouts import episode_caps
from genenv_jax.parallel import is_writer
from genenv_jax.workdir import storage
from genenv_jax.workdir.checkpoint_digests import json_digest
from genenv_jax.workdir.metrics import heldout_items_file


def heldout_tasks(ctx: LoopContext) -> list[Task]:
    """The evaluation split's tasks (`max_per_category` of each category, the first ones or a seeded
    sample); [] when off."""
    e = ctx.config.evaluation
    if not e.split:
        return []
    tasks = ctx.domain.seeds(e.split)
    if not tasks:
        raise ValueError(f"config.evaluation.split={e.split!r}: domain {ctx.domain.name!r} has no tasks in that split")
    if e.split == ctx.config.domain.seed_split:
        raise ValueError(f"config.evaluation.split={e.split!r} is the split the loop trains on "
                         "(config.domain.seed_split): held-out accuracy needs another split")
    return select_tasks(tasks, e.max_per_category or None, sample_seed=None if e.sample_seed < 0 else e.sample_seed)


class HeldOut:
    """Scores agent params on the fixed held-out tasks with the agent's own sampler (greedy)."""

    def __init__(self, ctx: LoopContext, agent: Policy, environments, directory=None):
        self.ctx, self.agent, self.environments = ctx, agent, environments
        self.directory = directory  # where each evaluation's items go (None: not written)
        self.tasks = heldout_tasks(ctx)

    def metrics(self, weights: Placement, epoch: int | None = None) -> dict[str, float]:
        """`heldout/accuracy` (mean reward) and `heldout/<category>` of the agent's `weights` (placed
        only when evaluated); {} when evaluation is off. With `epoch`, the items are written too."""
        if not self.tasks:
            return {}
        out, items = self._evaluate(weights)
        self._write_items(epoch, items)
        return out

    def cached_metrics(self, weights: Placement, epoch: int, cache_dir: str,
                       identity: Mapping[str, Any]) -> dict[str, float]:
        """`metrics`, kept in `cache_dir` under a digest of `identity` (what the weights are, e.g. the
        trained tree's digest and its base's) and of this evaluation's settings: a study's runs that
        start from one warm-started agent evaluate it once (greedy decoding: the same items)."""
        if not self.tasks:
            return {}
        key = json_digest({"weights": dict(identity), "settings": self._settings()})[:16]
        path = storage.as_path(cache_dir) / f"heldout-{key}.json"
        if storage.exists(path):
            try:
                cached = json.loads(storage.read_bytes(path))
                self._write_items(epoch, [EvalItem(**it) for it in cached["items"]])
                return dict(cached["metrics"]) | {"heldout/cached": 1}
            except (ValueError, KeyError, TypeError) as e:
                logging.warning("held-out cache %s is unreadable (%s); evaluating again", path, e)
        out, items = self._evaluate(weights)
        self._write_items(epoch, items)
        if is_writer():
            storage.makedirs(cache_dir)
            storage.write_json_atomic(path, {"metrics": out, "items": [dataclasses.asdict(it) for it in items]})
        return out | {"heldout/cached": 0}

    def _settings(self) -> dict[str, Any]:
        """Everything besides the weights that decides the held-out items."""
        c = self.ctx.config
        return {"tasks": [t.task_id for t in self.tasks], "domain": c.snapshot.get("domain"),
                "caps": dataclasses.asdict(episode_caps(self.ctx, self.agent)),
                "agent": c.snapshot.get("agent"), "tokenizer": c.snapshot.get("tokenizer_dir")}

    def _evaluate(self, weights: Placement) -> tuple[dict[str, float], list[EvalItem]]:
        ctx, s = self.ctx, self.agent.settings.sampling
        caps = episode_caps(ctx, self.agent)
        generate = sampler_generate_fn(self.agent.sampler, weights.params, ctx.text.stop_ids,
                                       slots=s.batch_size, retain=caps.max_turns > 1)
        report = evaluate(ctx.domain, self.tasks, generate, ctx.text.tokenizer, max_new_tokens=s.max_new_tokens,
                          batch_size=s.batch_size, max_turns=caps.max_turns, progress=ctx.show_progress,
                          prompts_per_call=len(self.tasks), environments=self.environments, caps=caps)
        # Skipped tasks (prompt too long) score 0: the denominators are the whole held-out set.
        out = {"heldout/accuracy": sum(it.reward for it in report.items) / len(report.items)}
        return out | {f"heldout/{c}": row["accuracy"] for c, row in sorted(report.per_category.items())}, report.items

    def _write_items(self, epoch: int | None, items: Sequence[EvalItem]) -> None:
        if epoch is not None and self.directory is not None and is_writer():
            storage.makedirs(self.directory)
            storage.write_atomic(storage.as_path(self.directory) / heldout_items_file(epoch), "".join(
                json.dumps(dataclasses.asdict(it), ensure_ascii=False) + "\n" for it in items), fsync=False)
