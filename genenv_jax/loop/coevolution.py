"""The GenEnv co-evolution loop.

Each epoch: choose seeds -> the simulator writes variants -> parse and validate -> n agent
rollouts per task -> R_agent -> p_hat, R_env, band filter -> GRPO on the agent -> RWR on the
simulator (in-band tasks only) -> pools -> checkpoint -> metrics.

Modes: `genenv` (both policies learn), `random` (the simulator generates every epoch but is never
updated), `static` (variants generated once, up front, then drawn from each epoch) and `dreamgym`
(DreamGym: training seeds chosen by reward variance plus capped simulator variants; the agent's
episodes answered by an experience model in synthetic epochs, by the real environment after them;
`genenv_jax.loop.experience`).
Everything an epoch draws at random comes from (config.seed, epoch, stream), so a run resumed from
the checkpoint of epoch e replays epoch e + 1 exactly as an uninterrupted run would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

from tqdm.auto import tqdm

from genenv_jax.configs.run_config import RunConfig
from genenv_jax.core.compile_clock import compile_totals
from genenv_jax.domains import DOMAINS, get_domain
from genenv_jax.dreamgym.domains import domain_support
from genenv_jax.episodes import open_environments
from genenv_jax.loop import dynamic_sampling, epoch_tasks, learning, records, shared_pools
from genenv_jax.loop.context import LoopContext, training_seeds
from genenv_jax.loop.experience import ExperienceWorld, RealWorld, default_cache_dir
from genenv_jax.loop.heldout import HeldOut
from genenv_jax.loop.mode import Mode
from genenv_jax.loop.persistence import check_config_change, load_state, save_state
from genenv_jax.loop.policy import Placement
from genenv_jax.loop.rollouts import rollouts
from genenv_jax.loop.state import RECENT_SUCCESS_KEPT, LoopState, SeedStats
from genenv_jax.loop.tasks import (CurriculumTasks, GeneratedTasks, StaticTasks, TaskGenerator, TaskSource,
                                   replay_tasks)
from genenv_jax.loop.weights import PolicyWeights
from genenv_jax.parallel import barrier, broadcast_object, check_same_on_all, is_writer, make_mesh
from genenv_jax.text.chat_text import ChatText
from genenv_jax.workdir import storage
from genenv_jax.workdir.checkpoint_digests import tree_digest
from genenv_jax.workdir.checkpoints import Checkpointer
from genenv_jax.workdir.lock import WorkdirLock, WorkdirLockedError
from genenv_jax.workdir.metrics import (HELDOUT_DIR, MetricsWriter, plot_curves, read_metrics, summary_table,
                                       truncate_metrics)

POOLS = ("d_train", "d_env", "static_tasks")
REPLAY_POOL = "replay"  # mode=dreamgym: the experience model's replay buffer


class CoEvolution:
    """Runs GenEnv for `config.epochs` epochs in `workdir`, resuming from its latest checkpoint."""

    def __init__(self, config: RunConfig, workdir: str | os.PathLike):
        self.config = config
        self.workdir = storage.as_path(workdir)  # a local path or gs://BUCKET/PATH
        storage.makedirs(self.workdir)
        self.mesh = make_mesh(config.mesh)
        text = ChatText.load(config.tokenizer_dir or config.agent.model_dir or None)
        domain = get_domain(config.domain.name, **config.domain.options)
        self.mode = Mode.of(config)
        if self.mode.needs_dreamgym:
            domain_support(domain)  # a domain without DreamGym's pieces fails here, before any work
        self.ctx = LoopContext(config, domain, text, training_seeds(config, domain, text))
        self.weights = PolicyWeights(self.ctx, self.mesh)  # both policies and everything about their weights
        self.agent, self.simulator = self.weights.agent, self.weights.simulator
        self.environments = open_environments(domain, DOMAINS[config.domain.name], config.domain.options,
                                              config.episodes.env_workers, config.episodes.limits())
        world = self.mode.synthetic_epochs  # mode=dreamgym with synthetic epochs: the experience model's side
        self.pools = shared_pools.open_pools(self.workdir / "pools", POOLS + ((REPLAY_POOL,) if world else ()))
        generator = TaskGenerator(self.ctx, self.simulator)
        self.task_source: TaskSource = {
            "static": lambda: StaticTasks(self.ctx, generator, self.pools["static_tasks"]),
            "curriculum": lambda: CurriculumTasks(self.ctx, generator),
            "generated": lambda: GeneratedTasks(self.ctx, generator)}[self.mode.task_source]()
        # Where episodes run, the epoch's one DreamGym hook: the experience model's world, or the real one.
        self.world: RealWorld | ExperienceWorld = RealWorld(self.environments, self.mode.needs_dreamgym)
        if world:
            experience = self.weights.build(config.experience, config.experience.optimizer.learning_rate)  # SFT only
            self.world = ExperienceWorld(self.ctx, experience, self.pools[REPLAY_POOL],
                                         default_cache_dir(config.warmstart.cache_dir, self.workdir), self.environments)
        self.heldout = HeldOut(self.ctx, self.agent, self.environments, self.workdir / HELDOUT_DIR)
        self.checkpointer = Checkpointer(self.workdir / "checkpoints", max_to_keep=config.checkpoint.keep)
        self.world_metrics: dict[str, float] = {}  # the experience model's set-up (`ExperienceWorld.start`)
        self.final_state: LoopState | None = None  # set when `run` ends

    # ------------------------------------------------------------------ state
    @property
    def warmstart_metrics(self) -> dict[str, float]:
        """The starting row's set-up metrics: the experience model's, then the policies' warm-start."""
        return self.world_metrics | self.weights.warmstart_metrics

    def fresh_state(self) -> LoopState:
        """The state a fresh run starts from (`PolicyWeights.fresh_state`)."""
        return self.weights.fresh_state()

    def load_or_init(self) -> LoopState:
        """The newest checkpoint's state with the pools rolled back to it, or a fresh state; the
        experience model (mode=dreamgym) is fitted or reloaded once the replay pool is resumed."""
        check_config_change(self.checkpointer, self.config)
        state = load_state(self.checkpointer, self.weights.restore_targets(), shared_pools.writable(self.pools))
        shared_pools.sync(self.pools, "resume")
        self.world_metrics |= self.world.start()  # the replay pool is resumed: DreamGym opens its buffer, fits or reloads
        if state is None:
            if is_writer():
                (self.workdir / "metrics.jsonl").unlink(missing_ok=True)  # rows of a run that never checkpointed
            return self.weights.fresh_state()
        logging.info("resuming after epoch %d from %s", state.epoch, self.checkpointer.directory)
        self.weights.resume(state, self.checkpointer.directory)
        if is_writer():
            truncate_metrics(self.workdir / "metrics.jsonl", state.epoch)
        return state

    # ------------------------------------------------------------------ epoch
    def run_epoch(self, state: LoopState, epoch: int) -> dict:
        """Runs one epoch in place on `state`; returns its metrics. Pools are committed at the end."""
        c, ctx = self.config, self.ctx
        t0, compiled0 = time.time(), compile_totals()

        # 1-3. Tasks: the simulator's variants of chosen seeds (or draws from the static set).
        # The simulator's weights placed for sampling if the source samples, dropped before the rollouts.
        with Placement(self.simulator, state.simulator) as simulator_weights:
            gens, generation_counts = self.task_source.tasks(epoch, simulator_weights, state.seeds)
        tasks, task_counts = epoch_tasks.agent_tasks(ctx, gens, epoch)  # one record per generation, + top-ups
        t_gen, compiled_gen = time.time(), compile_totals()

        # 4-5. n agent rollouts per task (new + replayed) and their rewards R_agent.
        tasks += epoch_tasks.replayed(epoch_tasks.REPLAY, replay_tasks(ctx, self.pools["d_train"], epoch))
        envs = self.world.episodes_environments(epoch)  # DreamGym's synthetic epochs: the experience model answers
        # One sampler copy of the agent (LoRA: one merge) for the rollouts and refills, not held through the updates.
        with Placement(self.agent, state.agent) as agent_weights:
            episode_stats = rollouts(ctx, self.agent, agent_weights, envs, [t for t in tasks if t.rolls_out], epoch)
            groups = epoch_tasks.rolled_out(tasks)
            world_metrics = self.world.observe(epoch, groups)
            # DAPO's dynamic sampling (when enabled): marks the groups GRPO trains on, refilled past uninformative ones.
            refills = dynamic_sampling.choose_training_groups(ctx, self.agent, agent_weights, envs, tasks,
                                                              self.pools["d_train"], epoch)
        t_roll, compiled_roll = time.time(), compile_totals()

        # 6. p_hat, R_env and the band on the generated tasks; per-seed stats for the next epoch.
        scores, variances = epoch_tasks.score_generated(tasks, c.curriculum)
        self._update_seed_stats(state, scores, variances)

        # Every process computed the same tasks and rewards (else their batches would differ).
        check_same_on_all(f"epoch {epoch}'s tasks and rewards", json.dumps(
            [[g.task.task_id, [float(r) for r in g.rewards]]
             for g in epoch_tasks.rolled_out(tasks + refills.records)]).encode())

        # 7. GRPO on the agent; 8. RWR on the simulator with in-band tasks (genenv mode only).
        trained = tasks + refills.records
        state.agent, agent_metrics = learning.update_agent(ctx, self.agent, state.agent, trained, epoch)
        simulator_metrics = {}
        if self.mode.trains_simulator:
            state.simulator, simulator_metrics = learning.update_simulator(ctx, self.simulator, state.simulator,
                                                                           tasks, epoch)
        t_upd, compiled_upd = time.time(), compile_totals()
        every = c.evaluation.every_epochs
        evaluate = (epoch + 1) % every == 0 or epoch == c.epochs - 1
        heldout = self.heldout.metrics(Placement(self.agent, state.agent), epoch) if evaluate else {}  # updated weights
        compiled_end = compile_totals()

        # 9. Pools (committed before the checkpoint; resume rolls them back if the checkpoint is missing).
        self.world.commit(epoch)  # DreamGym: the replay pool's shard (synced with the others just below)
        reward_lambda = getattr(c.simulator.train.loss, "reward_lambda", None)  # RWR's, when it trains the simulator
        shared_pools.append_epoch(self.pools, epoch, {
            "d_train": records.d_train_records(tasks + refills.records),
            "d_env": records.d_env_records(tasks, reward_lambda)} | self.task_source.pool_records())
        if is_writer():
            records.write_samples(self.workdir / "samples", epoch, tasks, c.log.samples_per_epoch)
        times = {"generate_s": t_gen - t0, "rollouts_s": t_roll - t_gen, "updates_s": t_upd - t_roll,
                 "heldout_s": time.time() - t_upd}
        # of which XLA compilation (programs compiled in this process, persistent-cache loads included)
        marks = (compiled0, compiled_gen, compiled_roll, compiled_upd, compiled_end)
        times |= {f"compile_{phase}_s": b[0] - a[0]
                  for phase, a, b in zip(("generate", "rollouts", "updates", "heldout"), marks, marks[1:])}
        episodes = [ep for g in groups for ep in g.episodes]
        generated = len(gens) if self.mode.counts_generations else None
        row = records.epoch_metrics(records=tasks, generated=generated, times=times)
        counts = records.summed_counts(generation_counts, task_counts, episode_stats.counts, refills.counts)
        counts["time/compiled_programs"] = compiled_end[1] - compiled0[1]
        row |= episode_stats.metrics(episodes) | counts | refills.metrics | agent_metrics | simulator_metrics
        return row | world_metrics | heldout | {
            "sampler/compiled_programs": len(self.agent.sampler.compiled_programs)}  # so far, this process

    @staticmethod
    def _update_seed_stats(state: LoopState, scores, variances: dict[str, float]) -> None:
        for s in scores:  # the simulator's next prompt for this seed sees how the agent did
            stats = state.seeds.setdefault(s.seed_id, SeedStats())
            stats.recent_success = (stats.recent_success + [s.task_success])[-RECENT_SUCCESS_KEPT:]
        for seed_id, variance in variances.items():
            state.seeds.setdefault(seed_id, SeedStats()).reward_variance = variance

    def _starting_heldout(self, state: LoopState) -> dict[str, float]:
        """Held-out metrics of the starting agent; with `warmstart.cache_dir`, kept there beside the
        warm-started weights (keyed by their digest), so runs that start alike evaluate once."""
        cache_dir = self.config.warmstart.cache_dir
        weights = Placement(self.agent, state.agent)
        if not cache_dir:
            return self.heldout.metrics(weights, -1)
        identity = {"trained": tree_digest(state.agent.params), "base": state.bases.get("agent"),
                    "init_seed": self.config.init_seed}
        return self.heldout.cached_metrics(weights, -1, cache_dir, identity)

    # ------------------------------------------------------------------ run
    def run(self) -> list[dict]:
        """All remaining epochs; returns the per-epoch metric rows of the whole run."""
        with self._workdir_lock():
            return self._run()

    @contextlib.contextmanager
    def _workdir_lock(self):
        """The workdir lock, held by process 0; every process fails alike if it is taken."""
        lock, error = WorkdirLock(self.workdir) if is_writer() else None, None
        if lock is not None:
            try:
                lock.__enter__()
            except WorkdirLockedError as e:
                error = str(e)
        error = broadcast_object(error)
        if error is not None:
            raise WorkdirLockedError(error)
        try:
            yield
        finally:
            if lock is not None:
                lock.__exit__(None, None, None)

    def _run(self) -> list[dict]:
        c = self.config
        try:
            state = self.load_or_init()
            metrics = MetricsWriter(self.workdir, enabled=is_writer(), log=c.log, config=c.snapshot,
                                    settled=self.checkpointer.finished_epoch)  # trackers get checkpointed rows
        except BaseException:
            self.checkpointer.close()
            raise
        try:
            if state.epoch == -1 and (state.warm_started or self.heldout.tasks):  # the starting point
                metrics.write(-1, self.warmstart_metrics | self._starting_heldout(state))
            for epoch in range(state.epoch + 1, c.epochs):
                t0 = time.time()
                row = self.run_epoch(state, epoch)
                state.epoch = epoch
                metrics.write(epoch, row)  # before the checkpoint: resume drops rows it does not cover
                if (epoch + 1) % c.checkpoint.every_epochs == 0 or epoch == c.epochs - 1:
                    save_state(self.checkpointer, state, self.pools, c)
                logging.info("epoch %d: %s", epoch, row)
                if is_writer():
                    tqdm.write(records.epoch_line(epoch, row, time.time() - t0))
            self.checkpointer.wait_until_finished()
        finally:
            self.checkpointer.close()
            self.environments.close()
            metrics.close()
        barrier("run-finished")  # process 0's metrics are complete
        rows = [r for r in read_metrics(self.workdir / "metrics.jsonl") if r["epoch"] >= 0]
        if is_writer():
            plot_curves(rows, self.workdir / "curves.png", title=f"GenEnv ({c.mode}) on {c.domain.name}")
            (self.workdir / "summary.md").write_text(summary_table(rows) + "\n")
        self.final_state = state
        return rows
