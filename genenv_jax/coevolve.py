"""The GenEnv co-evolution loop (DESIGN.md, "The one loop").

Each epoch: choose seeds -> the simulator generates variants -> parse and validate -> n agent
rollouts per task -> R_agent -> p_hat, R_env, band filter -> GRPO on the agent -> RWR on the
simulator (in-band tasks only) -> pools -> checkpoint -> metrics.

Modes: `genenv` (both policies learn), `random` (the simulator generates every epoch but is never
updated) and `static` (variants generated once, up front, then drawn from each epoch).

Everything an epoch draws at random comes from (config.seed, epoch), so a run resumed from the
checkpoint of epoch e replays epoch e + 1 exactly as an uninterrupted run would.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import jax
import numpy as np
from ml_collections import ConfigDict
from tqdm.auto import tqdm

from genenv_jax import curriculum, sharding, tokenization
from genenv_jax.checkpointing import Checkpointer, CoevolveState, resume
from genenv_jax.domains import get_domain
from genenv_jax.domains.base import DIFFICULTY_DIRECTIONS, Domain, Rejection, Task, difficulty_direction
from genenv_jax.metrics import MetricsWriter, plot_curves, read_metrics, summary_table, truncate_metrics
from genenv_jax.packing import length_bucket, pack_sequences, padded_row_count
from genenv_jax.policy import Policy, copy_params, initial_params, make_policy, model_config
from genenv_jax.pools import Pool, mixed_batches
from genenv_jax.rl import grpo_advantages
from genenv_jax.rl.optim import to_float32
from genenv_jax.sampling import FINISH_STOP, Sampler

MODES = ("genenv", "random", "static")
POOLS = ("d_train", "d_env", "static_tasks")


class NonFiniteLossError(RuntimeError):
    """An update produced a NaN/inf loss; the run stops before saving anything from this epoch."""


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


@dataclasses.dataclass
class RolloutGroup:
    """A task's n agent rollouts (one GRPO group)."""

    task: Task
    prompt: list[int]
    responses: list[list[int]]
    logprobs: list[np.ndarray]
    texts: list[str]
    rewards: list[float]
    valid: list[bool]
    finish_reasons: list[str]
    replayed: bool = False


def _epoch_seed(seed: int, epoch: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(1)[0])


def _abstract(shapes, shardings):
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


def _finite(metrics: dict[str, float], what: str) -> None:
    loss = metrics.get("loss")
    if loss is not None and not math.isfinite(loss):
        raise NonFiniteLossError(f"{what}: non-finite loss {loss}; metrics {metrics}")


def _epoch_line(epoch: int, m: dict, seconds: float) -> str:
    """One human-readable line per epoch (the full metrics go to metrics.jsonl / TensorBoard)."""
    def f(key, fmt="{:.2f}"):
        return "-" if m.get(key) is None else fmt.format(m[key])
    parsed = f"{m['tasks']}/{m['generated']}" if m.get("generated") is not None else f"{m['tasks']} (static)"
    return (f"epoch {epoch}: tasks {parsed}, p_hat {f('p_hat_mean')}, R_env {f('r_env_mean')}, "
            f"in-band {f('in_band_fraction')}, success {f('success_rate')}, agent loss {f('agent/loss', '{:.4f}')}, "
            f"simulator loss {f('simulator/loss', '{:.4f}')} ({seconds:.0f} s)")


def _summarise(prefix: str, history: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per-step update metrics averaged over an epoch's steps, keys prefixed, plus the step count."""
    return {f"{prefix}/{k}": _mean(m[k] for m in history) for k in history[0]} | {f"{prefix}/steps": len(history)}


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return float(np.mean(values)) if values else None


class CoEvolution:
    """Runs GenEnv for `config.epochs` epochs in `workdir`, resuming from its latest checkpoint."""

    def __init__(self, config: ConfigDict, workdir: str | os.PathLike):
        if config.mode not in MODES:
            raise ValueError(f"config.mode {config.mode!r} not in {MODES}")
        self.config = config
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.mesh = sharding.make_mesh(sharding.MeshConfig(**config.mesh))
        self.curriculum = curriculum.CurriculumConfig(**dict(config.curriculum))
        self.tokenizer = tokenization.load_tokenizer(config.tokenizer_dir or config.agent.model_dir or None)
        self.pad_id = tokenization.pad_id(self.tokenizer)
        self.stop_ids = tokenization.stop_ids(self.tokenizer)
        self.domain: Domain = get_domain(config.domain.name, **dict(config.domain.options))
        self.train_seeds = self._training_seeds()
        self.seed_by_id = {s.task_id: s for s in self.train_seeds}

        agent_cfg = model_config(config.agent)
        env_model = config.agent if config.simulator.share_agent_init else config.simulator
        env_cfg = model_config(env_model)
        samplers: dict[Any, Sampler] = {}

        def sampler_for(cfg, model):
            key = cfg.replace(param_dtype=model["param_dtype"])
            if key not in samplers:
                samplers[key] = Sampler(key, self.mesh, pad_id=self.pad_id)
            return samplers[key]

        warm_lr = float(config.warmstart.learning_rate)
        self.agent = make_policy("agent", agent_cfg, sampler_for(agent_cfg, config.agent), self.mesh, rule="grpo",
                                 loss=config.grpo, optimizer=config.agent_optimizer,
                                 micro_batches=config.grpo_micro_batches, warmstart_lr=warm_lr)
        self.env = make_policy("simulator", env_cfg, sampler_for(env_cfg, env_model), self.mesh, rule="rwr",
                               loss=config.rwr, optimizer=config.simulator_optimizer,
                               micro_batches=config.rwr_micro_batches, warmstart_lr=warm_lr)
        self.pools = {name: Pool(self.workdir / "pools", name) for name in POOLS}
        self.checkpointer = Checkpointer(self.workdir / "checkpoints", max_to_keep=config.checkpoint.keep)
        self.metrics = MetricsWriter(self.workdir)
        self.samples_dir = self.workdir / "samples"
        self.samples_dir.mkdir(exist_ok=True)
        self.show_progress = bool(config.log.progress_bars)
        self.warmstart_metrics: dict[str, float] = {}  # first / last SFT loss per policy

    def _training_seeds(self) -> list[Task]:
        """The seed split, optionally cut to `max_seeds` (in file order, or the shortest prompts first)."""
        d = self.config.domain
        seeds = self.domain.seeds(d.seed_split)
        if not seeds:
            raise ValueError(f"domain {d.name!r} has no seeds in split {d.seed_split!r}")
        if d.seed_order == "shortest":  # agent prompt + answer + the task itself (what the simulator writes)
            lengths = {s.task_id: len(self._encode_prompt(self.domain.agent_prompt(s)))
                       + len(tokenization.encode(self.tokenizer, self.domain.reference_response(s)))
                       + len(tokenization.encode(self.tokenizer, json.dumps([s.prompt, s.verifier])))
                       for s in seeds}
            seeds = sorted(seeds, key=lambda s: (lengths[s.task_id], s.task_id))
        elif d.seed_order != "file":
            raise ValueError(f"config.domain.seed_order={d.seed_order!r}: expected 'file' or 'shortest'")
        return seeds[:d.max_seeds] if d.max_seeds > 0 else seeds

    # ------------------------------------------------------------------ state
    def _abstract_state(self, with_references: bool) -> CoevolveState:
        from genenv_jax.models import param_shapes

        def abstract_params(p: Policy):
            return _abstract(param_shapes(p.cfg), p.update.param_shardings)

        def abstract_opt(p: Policy):
            shapes = jax.eval_shape(lambda x: p.update.optimizer.init(to_float32(x)), param_shapes(p.cfg))
            return _abstract(shapes, p.update.opt_shardings)

        refs = {"agent": abstract_params(self.agent), "env": abstract_params(self.env)} if with_references else None
        return CoevolveState(epoch=0, agent_params=abstract_params(self.agent), env_params=abstract_params(self.env),
                             agent_opt_state=abstract_opt(self.agent), env_opt_state=abstract_opt(self.env),
                             rng=jax.random.key(0), reference_params=refs)

    def _initial_weights(self):
        """(agent, simulator) params as the config defines them, before any training."""
        c = self.config
        agent = initial_params(c.agent, self.mesh, c.seed)
        if c.simulator.share_agent_init:
            return agent, copy_params(agent)
        return agent, initial_params(c.simulator, self.mesh, c.seed + 1)

    def _fresh_state(self) -> CoevolveState:
        """Initial weights (optionally warm-started) and optimizer states; epoch -1 = nothing run yet."""
        c = self.config
        agent_params, env_params = self._initial_weights()
        warm = bool(c.warmstart.enabled)
        if warm:
            agent_params, env_params = self._warmstart(agent_params, env_params)
        refs = {"agent": copy_params(agent_params), "env": copy_params(env_params)}
        return CoevolveState(epoch=-1, agent_params=agent_params, env_params=env_params,
                             agent_opt_state=self.agent.update.init_opt_state(agent_params),
                             env_opt_state=self.env.update.init_opt_state(env_params),
                             rng=jax.random.key(c.seed), extra={"warm_started": warm, "seed_history": {}},
                             reference_params=refs)

    def _load_or_init(self) -> CoevolveState:
        # Warm-started references cannot be rebuilt from the config cheaply, so they are checkpointed.
        with_refs = bool(self.config.warmstart.enabled)
        state = resume(self.checkpointer, self._abstract_state(with_refs), self.pools)
        if state is None:
            (self.workdir / "metrics.jsonl").unlink(missing_ok=True)  # rows of a run that never checkpointed
            return self._fresh_state()
        logging.info("resuming after epoch %d from %s", state.epoch, self.checkpointer.directory)
        truncate_metrics(self.workdir / "metrics.jsonl", state.epoch)
        if state.reference_params is None:  # references are the initial weights: rebuild them
            agent, env = self._initial_weights()
            state.reference_params = {"agent": agent, "env": env}
        return state

    def _save(self, state: CoevolveState) -> None:
        state.pool_manifests = {name: pool.manifest for name, pool in self.pools.items()}
        state.config = json.loads(self.config.to_json_best_effort())
        saved_refs = state.reference_params
        if not state.extra.get("warm_started"):
            state.reference_params = None  # rebuilt from the config on resume
        self.checkpointer.save(state)
        state.reference_params = saved_refs

    # ------------------------------------------------------------------ prompts
    def _encode_prompt(self, prompt) -> list[int]:
        return tokenization.encode_chat(self.tokenizer, prompt.messages, prompt.tools)

    def _decode(self, tokens: Sequence[int]) -> str:
        return tokenization.decode(self.tokenizer, tokens, skip_special_tokens=True)

    def _progress(self, total: int, desc: str):
        return tqdm(total=total, desc=desc, unit="seq", leave=False, disable=not self.show_progress)

    # ------------------------------------------------------------------ warm-start
    def _warmstart_examples(self) -> tuple[list, list]:
        """(agent, simulator) SFT pairs of (prompt ids, target ids) from the first seeds."""
        n = int(self.config.warmstart.num_seeds) or len(self.train_seeds)
        seeds = self.train_seeds[:n]
        end = [tokenization.im_end_id(self.tokenizer)]
        agent, env = [], []
        for seed in seeds:
            agent.append((self._encode_prompt(self.domain.agent_prompt(seed)),
                          tokenization.encode(self.tokenizer, self.domain.reference_response(seed)) + end))
        target_of = self._simulator_targets(seeds)
        for seed in seeds:  # every difficulty direction the loop may ask for, so none is new later
            target = tokenization.encode(self.tokenizer, target_of[seed.task_id]) + end
            for direction in DIFFICULTY_DIRECTIONS:
                env.append((self._encode_prompt(self.domain.simulator_prompt(seed, (), direction)), target))
        return agent, env

    def _simulator_targets(self, seeds: Sequence[Task]) -> dict[str, str]:
        """Simulator SFT target per seed: a real sibling task written as a generation.

        `warmstart.simulator_target`: "next" (the next seed, so targets vary) or "shortest" (the
        shortest sibling of the same category: few, short targets a tiny model learns quickly).
        """
        mode = self.config.warmstart.simulator_target
        if mode == "next":
            return {s.task_id: self.domain.reference_generation(s, seeds[(i + 1) % len(seeds)])
                    for i, s in enumerate(seeds)}
        if mode != "shortest":
            raise ValueError(f"config.warmstart.simulator_target={mode!r}: expected 'next' or 'shortest'")
        length = {s.task_id: len(self.domain.reference_generation(s, s)) for s in seeds}
        targets = {}
        for seed in seeds:
            siblings = sorted((s for s in seeds if s.category == seed.category and s.task_id != seed.task_id),
                              key=lambda s: (length[s.task_id], s.task_id))
            targets[seed.task_id] = self.domain.reference_generation(seed, siblings[0] if siblings else None)
        return targets

    def _sft(self, policy: Policy, params, examples: list, steps: int, batch_size: int, seed: int):
        opt_state = policy.sft.init_opt_state(params)
        rng = np.random.default_rng(seed)
        rows = padded_row_count(batch_size, policy.rows_multiple)
        prompt_len = length_bucket(max(len(p) for p, _ in examples))
        target_len = length_bucket(max(len(t) for _, t in examples))
        order: list[int] = []
        losses = []
        for step in tqdm(range(steps), desc=f"warm-start {policy.name}", leave=False, disable=not self.show_progress):
            while len(order) < batch_size:
                order.extend(rng.permutation(len(examples)).tolist())
            picked, order = order[:batch_size], order[batch_size:]
            batch = pack_sequences([examples[i][0] for i in picked], [examples[i][1] for i in picked], self.pad_id,
                                   num_rows=rows, prompt_len=prompt_len, response_len=target_len)
            batch["rewards"] = np.zeros((rows,), np.float32)
            params, opt_state, metrics = policy.sft(params, opt_state, policy.sft.place_batch(batch))
            losses.append(float(metrics["loss"]))
            if not math.isfinite(losses[-1]):
                raise NonFiniteLossError(f"warm-start {policy.name}: loss {losses[-1]} at step {step}")
        logging.info("warm-start %s: %d steps, loss %.3f -> %.3f", policy.name, steps, losses[0], losses[-1])
        self.warmstart_metrics.update({f"warmstart/{policy.name}_loss_first": losses[0],
                                       f"warmstart/{policy.name}_loss_last": losses[-1]})
        return params

    def _warmstart(self, agent_params, env_params):
        w = self.config.warmstart
        agent_examples, env_examples = self._warmstart_examples()
        agent_params = self._sft(self.agent, agent_params, agent_examples, int(w.agent_steps), int(w.batch_size),
                                 _epoch_seed(self.config.seed, 0, 101))
        env_params = self._sft(self.env, env_params, env_examples, int(w.simulator_steps), int(w.batch_size),
                               _epoch_seed(self.config.seed, 0, 102))
        return agent_params, env_params

    # ------------------------------------------------------------------ task generation
    def _choose_seeds(self, epoch: int, history: dict[str, list[float]], count: int) -> list[Task]:
        sel = self.config.seed_selection
        ids = [s.task_id for s in self.train_seeds]
        rng = np.random.default_rng(_epoch_seed(self.config.seed, epoch, 1))
        if sel.strategy == "uniform" or not history:
            picks = [ids[i] for i in rng.choice(len(ids), size=count, replace=count > len(ids))]
        elif sel.strategy == "variance":
            variances = {sid: curriculum.reward_variance(r) for sid, r in history.items() if sid in self.seed_by_id and r}
            picks = list(curriculum.select_seeds(ids, variances, count, explore_fraction=sel.explore_fraction,
                                                 rng=rng).seed_ids)
        else:
            raise ValueError(f"seed_selection.strategy {sel.strategy!r} not in ('variance', 'uniform')")
        return [self.seed_by_id[i] for i in picks]

    def _generate(self, seeds: Sequence[Task], env_params, history: dict, epoch: int, stream: int,
                  counters: dict) -> list[Generation]:
        """Samples one variant per entry of `seeds` (repeat a seed for several) and parses it."""
        c = self.config
        prompts, meta = [], []
        for seed in seeds:
            recent = history.get(seed.task_id, [])
            direction = difficulty_direction(recent, self.curriculum.alpha, self.curriculum.k_min)
            ids = self._encode_prompt(self.domain.simulator_prompt(seed, recent, direction))
            if len(ids) > c.simulator_sampling.max_prompt_len:
                counters["simulator_prompt_too_long"] = counters.get("simulator_prompt_too_long", 0) + 1
                continue
            prompts.append(ids)
            meta.append((seed, direction))
        with self._progress(len(prompts), f"epoch {epoch}: simulator") as bar:
            out = self.env.sample(env_params, prompts, c.simulator_sampling,
                                  _epoch_seed(c.seed, epoch, stream), self.stop_ids, bar)
        gens = []
        for (seed, direction), prompt, toks, lps in zip(meta, prompts, out.token_lists(), out.logprob_lists()):
            text = self._decode(toks)
            result = self.domain.parse_task(text, seed, direction)
            gens.append(Generation(seed, direction, prompt, toks, lps, text, result))
        return gens

    def _static_tasks(self, epoch: int, env_params, counters: dict) -> list[Generation]:
        """mode=static: all variants generated at the first epoch, then drawn from every epoch."""
        pool = self.pools["static_tasks"]
        c = self.config
        if pool.num_records() == 0:
            seeds = self._choose_seeds(0, {}, c.seeds_per_epoch)
            seeds = [s for s in seeds for _ in range(c.static_variants_per_seed)]
            gens = self._generate(seeds, env_params, {}, 0, 2, counters)
            pool.append_epoch(0, [{"task": g.result.to_json()} for g in gens if isinstance(g.result, Task)])
            self._count_rejections(gens, counters)
        tasks = [Task.from_json(r["task"]) for r in pool.records()]
        if not tasks:
            return []
        rng = np.random.default_rng(_epoch_seed(c.seed, epoch, 3))
        want = c.seeds_per_epoch * c.variants_per_seed
        picks = rng.choice(len(tasks), size=min(want, len(tasks)), replace=False)
        return [Generation(self.seed_by_id.get(tasks[i].parent_id, tasks[i]), tasks[i].difficulty or "similar",
                           [], [], np.zeros(0), "", tasks[i]) for i in picks]

    @staticmethod
    def _count_rejections(gens: Sequence[Generation], counters: dict) -> None:
        for g in gens:
            if isinstance(g.result, Rejection):
                key = f"rejected/{g.result.reason}"
                counters[key] = counters.get(key, 0) + 1

    # ------------------------------------------------------------------ rollouts
    def _replay_tasks(self, epoch: int) -> list[Task]:
        """Tasks replayed from base seeds and D_train's earlier epochs, rolled out afresh (on-policy)."""
        r = self.config.replay
        if r.tasks_per_epoch <= 0:
            return []
        d_train = self.pools["d_train"]
        sources = {"base": [{"task": s.to_json()} for s in self.train_seeds],
                   "historical": d_train.data_source() if d_train.epochs else []}  # empty sources are dropped
        batch = next(mixed_batches(sources, {"base": r.base_ratio, "historical": r.historical_ratio},
                                   int(r.tasks_per_epoch), seed=_epoch_seed(self.config.seed, epoch, 4),
                                   num_batches=1))
        return [Task.from_json(rec["task"]) for rec in batch]

    def _rollouts(self, tasks: Sequence[Task], replayed: Sequence[bool], agent_params, epoch: int,
                  counters: dict) -> list[RolloutGroup]:
        c = self.config
        n = int(c.rollouts_per_task)
        prompts, kept = [], []
        for task, rep in zip(tasks, replayed):
            ids = self._encode_prompt(self.domain.agent_prompt(task))
            if len(ids) > c.agent_sampling.max_prompt_len:
                counters["agent_prompt_too_long"] = counters.get("agent_prompt_too_long", 0) + 1
                continue
            prompts.append(ids)
            kept.append((task, rep))
        flat = [p for p in prompts for _ in range(n)]
        with self._progress(len(flat), f"epoch {epoch}: agent rollouts") as bar:
            out = self.agent.sample(agent_params, flat, c.agent_sampling, _epoch_seed(c.seed, epoch, 5),
                                    self.stop_ids, bar)
        toks, lps = out.token_lists(), out.logprob_lists()
        groups = []
        for i, ((task, rep), prompt) in enumerate(zip(kept, prompts)):
            rows = range(i * n, (i + 1) * n)
            texts = [self._decode(toks[j]) for j in rows]
            rewards, valid = [], []
            for j, text in zip(rows, texts):
                rewards.append(float(self.domain.score(task, text)))
                valid.append(out.finish_reasons[j] == FINISH_STOP and tokenization.parse_tool_calls(text).ok)
            groups.append(RolloutGroup(task, prompt, [toks[j] for j in rows], [lps[j] for j in rows], texts,
                                       rewards, valid, [out.finish_reasons[j] for j in rows], rep))
        return groups

    # ------------------------------------------------------------------ updates
    def _update_agent(self, groups: Sequence[RolloutGroup], state: CoevolveState, epoch: int) -> dict:
        c = self.config
        if not groups:
            return {}
        n = int(c.rollouts_per_task)
        g = c.grpo
        rng = np.random.default_rng(_epoch_seed(c.seed, epoch, 6))
        per_step = int(c.grpo_tasks_per_step)
        rows = padded_row_count(per_step * n, self.agent.rows_multiple)
        response_len = length_bucket(c.agent_sampling.max_new_tokens)
        prompt_len = length_bucket(max(len(gr.prompt) for gr in groups))
        history = []
        steps = []
        for _ in range(int(c.grpo_epochs)):  # each pass visits every task once, in a fresh order
            order = rng.permutation(len(groups))
            steps += [order[i:i + per_step] for i in range(0, len(groups), per_step)]
        for picked in tqdm(steps, desc=f"epoch {epoch}: GRPO", leave=False, disable=not self.show_progress):
            chosen = [groups[i] for i in picked]
            rewards = np.asarray([r for gr in chosen for r in gr.rewards], np.float32)
            adv = np.asarray(grpo_advantages(rewards, n, eps=g.adv_eps, ddof=g.std_ddof,
                                             normalize_by_std=g.normalize_by_std))
            batch = pack_sequences([gr.prompt for gr in chosen for _ in range(n)],
                                   [r for gr in chosen for r in gr.responses], self.pad_id,
                                   response_logprobs=[lp for gr in chosen for lp in gr.logprobs],
                                   num_rows=rows, prompt_len=prompt_len, response_len=response_len)
            batch["advantages"] = np.zeros((rows,), np.float32)
            batch["advantages"][:len(adv)] = adv
            state.agent_params, state.agent_opt_state, metrics = self.agent.train(
                state.agent_params, state.agent_opt_state, state.reference_params["agent"], batch)
            _finite(metrics, f"epoch {epoch} GRPO")
            history.append(metrics)
        return _summarise("agent", history)

    def _update_simulator(self, gens: Sequence[Generation], r_env: dict[str, float], in_band: dict[str, bool],
                          state: CoevolveState, epoch: int) -> dict:
        c = self.config
        chosen = [g for g in gens if isinstance(g.result, Task) and in_band.get(g.result.task_id) and g.tokens]
        if not chosen:
            return {"simulator/steps": 0, "simulator/skipped": "no in-band tasks"}
        per_step = int(c.rwr_tasks_per_step)
        rows = padded_row_count(min(per_step, len(chosen)), self.env.rows_multiple)
        prompt_len = length_bucket(max(len(g.prompt) for g in chosen))
        response_len = length_bucket(c.simulator_sampling.max_new_tokens)
        rng = np.random.default_rng(_epoch_seed(c.seed, epoch, 7))
        order = rng.permutation(len(chosen))
        history = []
        for start in tqdm(range(0, len(chosen), rows), desc=f"epoch {epoch}: RWR", leave=False,
                          disable=not self.show_progress):
            part = [chosen[i] for i in order[start:start + rows]]
            batch = pack_sequences([g.prompt for g in part], [g.tokens for g in part], self.pad_id, num_rows=rows,
                                   prompt_len=prompt_len, response_len=response_len)
            batch["rewards"] = np.zeros((rows,), np.float32)
            batch["rewards"][:len(part)] = [r_env[g.result.task_id] for g in part]
            state.env_params, state.env_opt_state, metrics = self.env.train(
                state.env_params, state.env_opt_state, state.reference_params["env"], batch)
            _finite(metrics, f"epoch {epoch} RWR")
            history.append(metrics)
        return _summarise("simulator", history) | {"simulator/tasks": len(chosen)}

    # ------------------------------------------------------------------ epoch
    def run_epoch(self, state: CoevolveState, epoch: int) -> dict:
        """Runs one epoch in place on `state`; returns its metrics. Pools are committed at the end."""
        c = self.config
        t0 = time.time()
        counters: dict[str, int] = {}
        history: dict[str, list[float]] = state.extra.setdefault("seed_history", {})

        # 1-3. tasks: generated now (genenv / random) or drawn from the up-front set (static).
        if c.mode == "static":
            gens = self._static_tasks(epoch, state.env_params, counters)
        else:
            seeds = self._choose_seeds(epoch, history, c.seeds_per_epoch)
            seeds = [s for s in seeds for _ in range(c.variants_per_seed)]
            gens = self._generate(seeds, state.env_params, history, epoch, 2, counters)
            self._count_rejections(gens, counters)
        tasks = [g.result for g in gens if isinstance(g.result, Task)]
        generated = len(gens) if c.mode != "static" else None
        t_gen = time.time()

        # 4-5. agent rollouts and R_agent (generated tasks + replayed ones).
        replay = self._replay_tasks(epoch)
        groups = self._rollouts(tasks + replay, [False] * len(tasks) + [True] * len(replay), state.agent_params,
                                epoch, counters)
        t_roll = time.time()
        fresh = [gr for gr in groups if not gr.replayed]

        # 6. p_hat, R_env, band filter on the generated tasks.
        scores = curriculum.score_tasks(
            [{"task_id": gr.task.task_id, "seed_id": gr.task.parent_id or gr.task.task_id, "rewards": gr.rewards}
             for gr in fresh], self.curriculum) if fresh else []
        by_task = {s.task_id: s for s in scores}
        for s in scores:  # the simulator's next prompt for this seed sees how the agent did
            history[s.seed_id] = (history.get(s.seed_id, []) + [s.task_success])[-4:]

        # 7. GRPO on the agent.
        agent_metrics = self._update_agent(groups, state, epoch)
        # 8. RWR on the simulator, in-band tasks only (genenv mode).
        env_metrics = {}
        if c.mode == "genenv":
            env_metrics = self._update_simulator(gens, {t: s.r_env for t, s in by_task.items()},
                                                 {t: s.in_band for t, s in by_task.items()}, state, epoch)
        t_upd = time.time()

        # 9. pools (committed before the checkpoint; resume rolls them back if the checkpoint is missing).
        self.pools["d_train"].append_epoch(epoch, [
            {"task": gr.task.to_json(), "response": text, "reward": r, "seed_id": gr.task.parent_id,
             "replayed": gr.replayed}
            for gr in groups for text, r, ok in zip(gr.texts, gr.rewards, gr.valid) if ok])
        self.pools["d_env"].append_epoch(epoch, [
            {"task": g.result.to_json(), "generation": g.text, "seed_id": g.seed.task_id,
             "difficulty": g.difficulty, "p_hat": by_task[g.result.task_id].p_hat,
             "r_env": by_task[g.result.task_id].r_env, "in_band": by_task[g.result.task_id].in_band,
             "weight": float(math.exp(c.rwr.reward_lambda * by_task[g.result.task_id].r_env))}
            for g in gens if isinstance(g.result, Task) and g.result.task_id in by_task])
        self._write_samples(epoch, gens, groups)

        all_rewards = [r for gr in fresh for r in gr.rewards]
        responses = [len(r) for gr in groups for r in gr.responses]
        sampled_tokens = sum(responses) + sum(len(g.tokens) for g in gens)
        metrics = {
            "tasks": len(tasks), "generated": generated, "replayed_tasks": len(replay),
            "parse_rate": (len(tasks) / generated) if generated else None,
            "p_hat_mean": _mean(s.p_hat for s in scores), "r_env_mean": _mean(s.r_env for s in scores),
            "in_band_fraction": _mean(float(s.in_band) for s in scores),
            "solved_fraction": _mean(float(s.task_success == 1.0) for s in scores),
            "unsolved_fraction": _mean(float(s.task_success == 0.0) for s in scores),
            "success_rate": _mean(all_rewards),
            "valid_rollout_fraction": _mean(v for gr in groups for v in gr.valid),
            "response_tokens_mean": _mean(responses),
            "task_tokens_mean": _mean(len(g.tokens) for g in gens if g.tokens),
            "tokens_per_s": sampled_tokens / max(t_roll - t0, 1e-9),
            "time/generate_s": t_gen - t0, "time/rollouts_s": t_roll - t_gen, "time/updates_s": t_upd - t_roll,
            **counters, **agent_metrics, **env_metrics,
        }
        return metrics

    def _write_samples(self, epoch: int, gens: Sequence[Generation], groups: Sequence[RolloutGroup]) -> None:
        k = int(self.config.log.samples_per_epoch)
        rewards_of = {gr.task.task_id: gr.rewards for gr in groups}
        rows = []
        for g in gens[:k]:
            row = {"seed_id": g.seed.task_id, "difficulty": g.difficulty, "generation": g.text}
            if isinstance(g.result, Task):
                row.update(task=g.result.to_json(), agent_rewards=rewards_of.get(g.result.task_id))
            else:
                row.update(rejection=g.result.reason, detail=g.result.detail)
            rows.append(row)
        path = self.samples_dir / f"epoch_{epoch:04d}.jsonl"
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
        os.replace(tmp, path)

    # ------------------------------------------------------------------ run
    def run(self) -> list[dict]:
        """All remaining epochs; returns the per-epoch metric rows of the whole run."""
        c = self.config
        state = self._load_or_init()
        start = state.epoch + 1
        if start == 0 and state.extra.get("warm_started"):
            self.metrics.write(-1, self.warmstart_metrics)
        for epoch in range(start, c.epochs):
            t0 = time.time()
            metrics = self.run_epoch(state, epoch)
            state.epoch = epoch
            self.metrics.write(epoch, metrics)  # before the checkpoint: resume drops rows it does not cover
            if (epoch + 1) % c.checkpoint.every_epochs == 0 or epoch == c.epochs - 1:
                self._save(state)
            logging.info("epoch %d: %s", epoch, metrics)
            tqdm.write(_epoch_line(epoch, metrics, time.time() - t0))
        self.checkpointer.close()
        self.metrics.close()
        rows = [r for r in read_metrics(self.workdir / "metrics.jsonl") if r["epoch"] >= 0]
        plot_curves(rows, self.workdir / "curves.png", title=f"GenEnv ({c.mode}) on {c.domain.name}")
        (self.workdir / "summary.md").write_text(summary_table(rows) + "\n")
        self.final_state = state
        return rows


def validate_config(config: ConfigDict, num_devices: int | None = None) -> None:
    """Checks a run config before anything is built; errors name the key and the problem."""
    if config.mode not in MODES:
        raise ValueError(f"config.mode={config.mode!r}: expected one of {MODES}")
    for key in ("epochs", "seeds_per_epoch", "variants_per_seed", "rollouts_per_task", "grpo_tasks_per_step",
                "grpo_epochs", "grpo_micro_batches", "rwr_tasks_per_step", "rwr_micro_batches",
                "static_variants_per_seed"):
        if int(config[key]) < 1:
            raise ValueError(f"config.{key}={config[key]}: must be >= 1")
    if config.rollouts_per_task < 2:
        raise ValueError("config.rollouts_per_task must be >= 2 (GRPO advantages are relative within a group)")
    curriculum.CurriculumConfig(**dict(config.curriculum))  # alpha in (0, 1), beta > 0, k_min >= 0, ...
    if not config.domain.name:
        raise ValueError("config.domain.name is empty: pick a benchmark config such as configs/bfcl.py")
    mesh = sharding.MeshConfig(**config.mesh)
    data, fsdp, _ = mesh.resolve(jax.device_count() if num_devices is None else num_devices)
    rows = config.grpo_tasks_per_step * config.rollouts_per_task
    if rows % (data * fsdp * config.grpo_micro_batches):
        raise ValueError(f"config.grpo_tasks_per_step x rollouts_per_task = {rows} rows is not divisible by "
                         f"mesh data x fsdp ({data} x {fsdp}) x grpo_micro_batches ({config.grpo_micro_batches})")
    for name in ("agent_sampling", "simulator_sampling"):
        s = config[name]
        if s.temperature < 0 or s.max_new_tokens < 1 or s.batch_size < 1 or not 0 < s.top_p <= 1:
            raise ValueError(f"config.{name}: temperature >= 0, max_new_tokens >= 1, batch_size >= 1 and "
                             f"0 < top_p <= 1 required, got {s}")
    if config.warmstart.enabled and min(config.warmstart.agent_steps, config.warmstart.simulator_steps) < 1:
        raise ValueError("config.warmstart.enabled needs warmstart.agent_steps and simulator_steps >= 1")
    if config.seed_selection.strategy not in ("variance", "uniform"):
        raise ValueError(f"config.seed_selection.strategy={config.seed_selection.strategy!r}: "
                         "expected 'variance' or 'uniform'")
    for name, model in (("agent", config.agent), ("simulator", config.simulator)):
        if model.model_dir and not os.path.isdir(model.model_dir):
            raise FileNotFoundError(f"config.{name}.model_dir={model.model_dir!r} is not a directory")
