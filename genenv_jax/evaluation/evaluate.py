"""Benchmark evaluation of params (an HF model dir, a random preset, or params in memory).

Greedy decoding of every task's episode (agent turns and the environment's observations), scored by
the domain's verifier (for BFCL the official AST checker), reported as per-category accuracy plus
the domain's summary, written as JSON and Markdown. `evaluate` takes any `GenerateFn`;
`evaluate_params` decodes with the KV-cache sampler (`genenv_jax.sampling.generate`). The command
line is `cli.py` (`python -m genenv_jax.evaluation`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from genenv_jax.text import tokenization
from genenv_jax.text.chat_text import ChatText
from genenv_jax.domains.base import Domain, Task
from genenv_jax.episodes import EpisodeCaps, open_environments, run_episodes
from genenv_jax.models import ModelConfig
from genenv_jax.parallel import is_writer
from genenv_jax.sampling import FINISH_LENGTH, FINISH_STOP, SampleOutput, params_mesh, shared_sampler

# (prompts, max_new_tokens) -> generated ids per prompt, ending before the first stop token.
GenerateFn = Callable[[Sequence[Sequence[int]], int], list[list[int]]]
REPORT_VERSION = 1


# ----------------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------------
def truncate_at_stop(ids: Sequence[int], stop_tokens: Sequence[int]) -> list[int]:
    """ids up to (not including) the first stop token."""
    stops = set(int(s) for s in stop_tokens)
    out = []
    for t in ids:
        if int(t) in stops:
            break
        out.append(int(t))
    return out


def make_generate_fn(cfg: ModelConfig, params: Any, stop_tokens: Sequence[int], pad_id: int,
                     slots: int | None = None) -> GenerateFn:
    """A greedy GenerateFn on the KV-cache sampler (one compiled program per shape bucket); `slots`
    prompts decode at once, refilled from the rest (greedy tokens do not depend on it). The params
    are placed once and every call retains its sequences in the sampler's prefix pool, so a
    multi-turn episode's next turn prefills only what the environment added (docs/sampling.md)."""
    sampler = shared_sampler(cfg, params_mesh(params), pad_id)
    return sampler_generate_fn(sampler, sampler.prepare_params(params), stop_tokens, slots)


def sampler_generate_fn(sampler: Any, placed: Any, stop_tokens: Sequence[int], slots: int | None = None,
                        retain: bool = True) -> GenerateFn:
    """The greedy GenerateFn of `sampler` over params it has placed (`Sampler.prepare_params`):
    what the evaluation command decodes with, and the loop's held-out evaluation too (its agent's
    sampler), so both give the same tokens for the same params, prompts and `slots`."""
    def fn(prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        out = sampler.generate(placed, [list(p) for p in prompts], max_new_tokens=max_new_tokens, temperature=0.0,
                               stop_tokens=list(stop_tokens), seed=0, slots=slots, retain=retain)
        return [truncate_at_stop(row, stop_tokens) for row in out.token_lists()]
    return fn


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EvalItem:
    """One evaluated task."""

    task_id: str
    category: str
    reward: float
    response: str
    error_type: str | None
    prompt_tokens: int
    response_tokens: int
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # the score's numeric `metric/*` details


def metric_details(details: Mapping[str, Any]) -> dict[str, float]:
    """The numeric `metric/*` entries of a score's details: the counts a benchmark's own rates are built from."""
    return {k: float(v) for k, v in details.items() if k.startswith("metric/") and isinstance(v, (int, float))}


@dataclasses.dataclass(frozen=True)
class EvalReport:
    """Per-category accuracy, the domain's summary, and every item."""

    domain: str
    per_category: dict[str, dict[str, float]]  # {category: {"n", "correct", "accuracy", "metric/*" means}}
    summary: dict[str, float]
    items: list[EvalItem]
    config: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"report_version": REPORT_VERSION, "domain": self.domain, "per_category": self.per_category,
                "summary": self.summary, "config": self.config}


def select_tasks(tasks: Sequence[Task], max_per_category: int | None = None,
                 categories: Sequence[str] | None = None, sample_seed: int | None = None) -> list[Task]:
    """The first `max_per_category` tasks of each category (in the given order), optionally filtered;
    with `sample_seed`, a seeded random sample of that many per category (numpy PCG64 permutation of
    each category's tasks), in the given order."""
    if sample_seed is not None and max_per_category is not None:
        chosen: set[str] = set()
        for ids in ([t.task_id for t in tasks if t.category == c] for c in dict.fromkeys(t.category for t in tasks)):
            chosen.update(ids[i] for i in np.random.default_rng([sample_seed, len(ids)]).permutation(len(ids))[
                :max_per_category])
        tasks = [t for t in tasks if t.task_id in chosen]
    counts: dict[str, int] = {}
    out = []
    for t in tasks:
        if categories is not None and t.category not in categories:
            continue
        if max_per_category is not None and counts.get(t.category, 0) >= max_per_category:
            continue
        counts[t.category] = counts.get(t.category, 0) + 1
        out.append(t)
    return out


def per_category_accuracy(items: Sequence[EvalItem]) -> dict[str, dict[str, float]]:
    """{category: {"n", "correct", "accuracy", and the mean of each `metric/*` detail}}, categories in
    first-seen order. An item without a metric (a prompt too long to run) counts 0 for it, so a domain's
    `summary` can rebuild its benchmark's own rates (TravelPlanner's delivery, micro and macro rates)."""
    table: dict[str, dict[str, float]] = {}
    sums: dict[str, dict[str, float]] = {}
    for it in items:
        row = table.setdefault(it.category, {"n": 0, "correct": 0.0})
        row["n"] += 1
        row["correct"] += it.reward
        category_sums = sums.setdefault(it.category, {})
        for key, value in it.metrics.items():
            category_sums[key] = category_sums.get(key, 0.0) + value
    for category, row in table.items():
        row["accuracy"] = row["correct"] / row["n"]
        row.update({key: total / row["n"] for key, total in sorted(sums[category].items())})
    return table


def _decode_in_batches(generate_fn: GenerateFn, prompts: Mapping[int, list[int]], max_new_tokens: int,
                       batch_size: int) -> dict[int, list[int]]:
    """Runs generate_fn over prompts in batches of similar length; returns ids per prompt key."""
    order = sorted(prompts, key=lambda i: len(prompts[i]))
    out: dict[int, list[int]] = {}
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        rows = generate_fn([prompts[i] for i in chunk], max_new_tokens)
        if len(rows) != len(chunk):
            raise RuntimeError(f"generate_fn returned {len(rows)} rows for {len(chunk)} prompts")
        out.update(zip(chunk, rows))
    return out


def _episode_sampler(generate_fn: GenerateFn, max_new_tokens: int, batch_size: int, end_id: int):
    """The episode runner's sample function over a GenerateFn (which drops the stop token): a row
    shorter than the cap stopped, and gets `<|im_end|>` back so the next turn renders correctly."""
    def sample(prompts: list[list[int]], turn: int) -> SampleOutput:
        rows = _decode_in_batches(generate_fn, dict(enumerate(prompts)), max_new_tokens, batch_size)
        rows = [list(rows[i]) + ([end_id] if len(rows[i]) < max_new_tokens else []) for i in range(len(prompts))]
        return SampleOutput.from_rows(rows, [FINISH_STOP if r[-1:] == [end_id] else FINISH_LENGTH for r in rows])
    return sample


def evaluate(domain: Domain, tasks: Sequence[Task], generate_fn: GenerateFn, tokenizer: Any,
             max_new_tokens: int = 256, batch_size: int = 8, max_prompt_tokens: int | None = None,
             max_turns: int = 8, progress: bool = True,
             config: Mapping[str, Any] | None = None, prompts_per_call: int | None = None,
             environments: Any = None, caps: EpisodeCaps | None = None) -> EvalReport:
    """Runs one greedy episode per task through the domain's environment and scores it.

    The same episode runner as training (`genenv_jax.episodes`): each turn, the live episodes'
    prompts are decoded in batches of similar length and their environments answer. A task whose
    first prompt is longer than `max_prompt_tokens` is not decoded and counts as a failure
    ('prompt_too_long'), so the denominators stay the full task set; an episode still open after
    `max_turns` (or past `max_prompt_tokens + max_new_tokens` tokens) is scored as it stands.
    `prompts_per_call`: prompts per `generate_fn` call (default `batch_size`). `environments`: an
    open host to run the episodes in (the loop's; default: one opened and closed here); `caps`:
    episode caps that replace those the three limits above make (the loop's, for its held-out set).
    """
    if batch_size < 1 or max_new_tokens < 1 or max_turns < 1:
        raise ValueError("batch_size, max_new_tokens and max_turns must be positive")
    text = ChatText(tokenizer, tokenization.pad_id(tokenizer), tokenization.stop_ids(tokenizer),
                    tokenization.im_end_id(tokenizer))
    limit = max_prompt_tokens if max_prompt_tokens is not None else 1 << 30
    if caps is None:
        caps = EpisodeCaps(max_turns=max_turns, max_total_tokens=limit + max_new_tokens,
                           max_new_tokens=max_new_tokens, max_prompt_len=limit)
    envs = open_environments(domain) if environments is None else environments  # multi-host: process 0 scores
    try:
        with tqdm(total=len(tasks), desc=f"eval {domain.name}", unit="task",
                  disable=not (progress and is_writer())) as bar:
            groups, _ = run_episodes(tasks, 1, envs, text, caps,
                                     _episode_sampler(generate_fn, caps.max_new_tokens,
                                                      prompts_per_call or batch_size, text.end_id),
                                     bar)
    finally:
        if environments is None:
            envs.close()
    episode_of = {g[0].episode_id: g[0] for g in groups}
    items = []
    for i, task in enumerate(tasks):
        ep = episode_of.get(i)
        if ep is None:
            first = len(text.prompt(domain.agent_prompt(task))) if caps.max_prompt_len < 1 << 30 else 0
            items.append(EvalItem(task.task_id, task.category, 0.0, "", "prompt_too_long", first, 0))
            continue
        generated = sum(t["agent_tokens"] - (t["finish"] == FINISH_STOP) for t in ep.turns)
        items.append(EvalItem(task.task_id, task.category, ep.reward, ep.final_text, ep.details.get("error_type"),
                              len(ep.prompt), generated, metric_details(ep.details)))
    table = per_category_accuracy(items)
    summary = domain.summary(table)
    return EvalReport(domain=domain.name, per_category=table, summary=summary, items=items,
                      config=dict(config or {}, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                  max_prompt_tokens=max_prompt_tokens, max_turns=max_turns,
                                  num_tasks=len(tasks)))


def format_markdown(report: EvalReport) -> str:
    """The report as Markdown: per-category table, then the summary."""
    lines = [f"# {report.domain} evaluation", "",
             "| category | n | correct | accuracy |", "|---|---:|---:|---:|"]
    for category, row in report.per_category.items():
        lines.append(f"| {category} | {int(row['n'])} | {row['correct']:g} | {row['accuracy']:.2%} |")
    lines += ["", "| summary | accuracy |", "|---|---:|"]
    lines += [f"| {k} | {v:.2%} |" for k, v in report.summary.items()]
    lines += ["", "config: `" + json.dumps(report.config, sort_keys=True) + "`", ""]
    return "\n".join(lines)


def write_report(report: EvalReport, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Writes results.json, results.md and items.jsonl (one scored response per line)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "items": out / "items.jsonl"}
    paths["json"].write_text(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    paths["markdown"].write_text(format_markdown(report), encoding="utf-8")
    with paths["items"].open("w", encoding="utf-8") as f:
        for it in report.items:
            f.write(json.dumps(dataclasses.asdict(it), ensure_ascii=False) + "\n")
    return paths


def evaluate_params(cfg: ModelConfig, params: Any, domain: Domain, tasks: Sequence[Task], tokenizer: Any,
                    **kwargs: Any) -> EvalReport:
    """`evaluate` with greedy decoding of `params` (a checkpoint's agent params, an HF model, ...)."""
    if cfg.vocab_size < len(tokenizer):
        raise ValueError(f"model vocab_size {cfg.vocab_size} is smaller than the tokenizer's {len(tokenizer)} "
                         "tokens; use a model with the tokenizer's vocabulary (e.g. preset 'tiny', not 'micro')")
    stops = tokenization.stop_ids(tokenizer)
    generate_fn = make_generate_fn(cfg, params, stops, tokenization.pad_id(tokenizer), kwargs.get("batch_size", 8))
    config = dict(kwargs.pop("config", {}), decoding="greedy")
    return evaluate(domain, tasks, generate_fn, tokenizer, config=config, prompts_per_call=len(tasks) or 1,
                    **kwargs)


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------
def load_run_agent(run_dir: str | os.PathLike, epoch: int | None = None) -> tuple[ModelConfig, Any, int]:
    """(cfg, params, epoch) of the agent in a GenEnv run's Orbax checkpoint (default: the latest epoch);
    the model config from the checkpoint's config snapshot, the params FSDP-sharded over every device
    of every process (the default mesh), so greedy decoding runs over the global mesh multi-host too.
    A LoRA run's checkpoint holds adapters: its base is rebuilt from the saved config, checked
    against the digest the run recorded, and returned with the adapters merged in
    (`evaluation.run_policy.load_run_policy`)."""
    from genenv_jax.evaluation.run_policy import load_run_policy

    policy = load_run_policy(run_dir, "agent", epoch)
    return policy.cfg, policy.merged(), policy.epoch
