"""DreamGym's side of the loop (mode=dreamgym): the experience model, fitted once by SFT on offline
real transitions of the training seeds; the replay buffer it retrieves from (the loop's `replay`
pool: seeded with the offline transitions, grown with every synthetic epoch's transitions, rolled
back with the checkpoints like the other pools); and the synthetic environments the agent's episodes
run in during synthetic epochs.

The experience model is not part of the checkpointed loop state: its weights are a pure function
of the config and the offline data, kept like warm-started weights (`warmstart.cache_dir`, else
`<workdir>/experience_model`), so a resumed run reloads them instead of repeating the SFT.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Mapping, Sequence

from genenv_jax.configs.experience_settings import REMOVED_EXPERIENCE_KEYS
from genenv_jax.workdir import storage
from genenv_jax.workdir.checkpoint_digests import json_digest
from genenv_jax.dreamgym import sft as experience_sft
from genenv_jax.dreamgym.domains import OfflineSettings, domain_support, run_rng_key
from genenv_jax.dreamgym.embedding import Embedder, transition_key_text
from genenv_jax.dreamgym.environments import SyntheticEnvironments
from genenv_jax.dreamgym.model import ExperienceModel
from genenv_jax.dreamgym.experience_text import PromptSettings
from genenv_jax.dreamgym.replay import ReplayBuffer
from genenv_jax.domains.experience import Transition
from genenv_jax.episodes.limits import EnvTimeout, time_limit
from genenv_jax.loop.context import STREAM_EXPERIENCE, STREAM_EXPERIENCE_SFT, LoopContext, epoch_seed
from genenv_jax.loop.policy import Policy
from genenv_jax.rl.batches import TrainRow
from genenv_jax.loop.warmstart_cache import cached_warmstart
from genenv_jax.workdir.pools import Pool

EXPERIENCE_INIT_OFFSET = 2  # random init seed: init_seed + 2 (the agent's is + 0, the simulator's + 1)
# dreamgym keys that change neither the offline data nor the SFT (only how the loop uses the model)
LOOP_ONLY_KEYS = ("synthetic_epochs", "task_generation", "generated_task_share", "retrieve_real_only", "grow_replay")


def experience_key(snapshot: Mapping[str, Any], init_seed: int, rows: Sequence[TrainRow]) -> str:
    """Digest of what the experience model's SFT reads: its rows (token ids), its config section,
    the dreamgym keys that shape the data and the SFT, the mesh and the initial weights' seed."""
    rows_digest = hashlib.sha256()
    for row in rows:
        rows_digest.update(json.dumps([list(map(int, row.prompt)), list(map(int, row.response))]).encode())
    dreamgym = {k: v for k, v in dict(snapshot.get("dreamgym", {})).items() if k not in LOOP_ONLY_KEYS}
    what = {"experience": _as_digested(snapshot.get("experience")), "agent": snapshot.get("agent"),
            "dreamgym": dreamgym, "mesh": snapshot.get("mesh"), "init_seed": init_seed, "rows": rows_digest.hexdigest()}
    return json_digest(json.loads(json.dumps(what, sort_keys=True, default=str)))[:16]


def _as_digested(section: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The experience section as `experience_key` has always digested it: with the keys it lost in
    2026-12 (`REMOVED_EXPERIENCE_KEYS`, read by nothing) at the values every run had, so that the
    weights cached by a run saved before then keep their key."""
    if section is None:
        return None
    tree = json.loads(json.dumps(section, default=str))
    for key, value in REMOVED_EXPERIENCE_KEYS.items():
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node.setdefault(leaf, value)
    return tree


class RealWorld:
    """Where an epoch's episodes run, the loop's one DreamGym hook, for runs without synthetic
    epochs: always the domain's own environments, nothing to start, observe or commit (in dreamgym
    mode the row still says `dreamgym/synthetic_epoch` 0). `ExperienceWorld` is the other one."""

    def __init__(self, environments, reports_synthetic: bool):
        self.real, self.reports_synthetic = environments, reports_synthetic

    def start(self) -> dict[str, float]:
        return {}

    def episodes_environments(self, epoch: int):
        return self.real

    def observe(self, epoch: int, groups: Sequence[Any] = ()) -> dict[str, float]:
        return {"dreamgym/synthetic_epoch": 0.0} if self.reports_synthetic else {}

    def commit(self, epoch: int) -> None:
        pass


class ExperienceWorld:
    """The experience model, its replay buffer and synthetic environments for one run (mode=dreamgym
    with synthetic epochs): the loop's DreamGym hook (`RealWorld`'s interface). `real`: the
    domain's own environments, for the epochs that are not synthetic."""

    def __init__(self, ctx: LoopContext, policy: Policy, pool: Pool, cache_dir: str, real):
        self.ctx, self.policy, self.pool, self.cache_dir, self.real = ctx, policy, pool, cache_dir, real
        self.settings = ctx.config.dreamgym
        self.support = domain_support(ctx.domain)
        self.prompt_settings = PromptSettings(max_history=self.settings.max_history, reasoning=self.settings.reasoning,
                                              environment=self.support.environment)
        self.model: ExperienceModel | None = None  # built by `start`
        self.environments: SyntheticEnvironments | None = None
        self._placed = None

    @property
    def buffer(self) -> ReplayBuffer | None:
        """The replay buffer retrieval serves (the `replay` pool's), once `start` ran."""
        return None if self.model is None else self.model.buffer

    @property
    def embedder(self) -> Embedder | None:
        return None if self.model is None else self.model.embedder

    def offline_transitions(self) -> list[Transition]:
        """The training seeds' real transitions (expert walkthroughs, random episodes); deterministic."""
        s = self.settings
        return self.support.offline(self.ctx.domain, self.ctx.train_seeds, OfflineSettings(
            s.offline_random_per_task, s.offline_random_steps, s.offline_invalid_prob, run_rng_key(self.ctx.config.seed)))

    def start(self) -> dict[str, float]:
        """Called once the loop's pools are resumed: opens the buffer (seeding it with the offline
        transitions on a fresh run; they are committed with epoch 0's shard), fits or reloads the
        experience model and builds the synthetic environments. Returns set-up metrics."""
        c, ctx = self.ctx.config, self.ctx
        t0 = time.time()
        initial = self.policy.initial_params(c.init_seed + EXPERIENCE_INIT_OFFSET)
        self.model = ExperienceModel.build(ctx.text, self.policy.cfg, initial, self.offline_transitions(), self.pool,
                                           self.prompt_settings, top_k=self.settings.top_k,
                                           max_prompt_len=self.policy.settings.sampling.max_prompt_len)
        t_collect = time.time() - t0
        params, metrics = self._fit(initial)
        self._placed = self.policy.sampler.prepare_params(params)
        predictor = self.model.predictor(self._sample, real_only=self.settings.retrieve_real_only)
        self.environments = SyntheticEnvironments(self.support.adapter(ctx.domain), predictor, ctx.domain.name)
        offline = len(self.model.offline)
        logging.info("dreamgym: %d offline transitions, replay buffer %d, experience model ready in %.1f s",
                     offline, len(self.buffer), time.time() - t0)
        return metrics | {"experience/offline_transitions": float(offline),
                          "time/experience_collect_s": t_collect, "time/experience_setup_s": time.time() - t0}

    def _fit(self, initial) -> tuple[Any, dict]:
        """The SFT'd experience weights: from the cache when this data and config were fitted before."""
        ctx, s = self.ctx, self.settings
        rows = self.model.sft_rows()

        def train():
            state, metrics = experience_sft.train(
                self.policy.sft_trainer(), self.policy.sft_state(initial), rows, steps=s.sft_steps,
                batch_size=s.sft_batch_size, rows_multiple=self.policy.rows_multiple,
                seed=epoch_seed(ctx.config.init_seed, 0, STREAM_EXPERIENCE_SFT), pad_id=ctx.text.pad_id,
                show_progress=ctx.show_progress)
            return state.params, metrics

        key = experience_key(ctx.config.snapshot, ctx.config.init_seed, rows)
        return cached_warmstart(self.cache_dir, key, "experience", self.policy.update.abstract_params(), train)

    def _sample(self, prompts: list[list[int]], seed: int):
        s = self.policy.settings.sampling
        return self.policy.sampler.generate(self._placed, prompts, max_new_tokens=s.max_new_tokens,
                                            temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=seed,
                                            stop_tokens=self.ctx.text.stop_ids, slots=s.batch_size)

    # ------------------------------------------------------------------ per epoch
    def episodes_environments(self, epoch: int):
        """`epoch`'s environments: the synthetic ones, seeded for it (a resumed epoch samples as the
        original), when `dreamgym.synthetic(epoch)`; else the real ones."""
        if not self.settings.synthetic(epoch):
            return self.real
        self.environments.seed(self.ctx.seed(epoch, STREAM_EXPERIENCE))
        self.environments.counts = {}
        return self.environments

    def observe(self, epoch: int, groups: Sequence[Any] = ()) -> dict[str, float]:
        """After an epoch's episodes (`groups`: its RolloutGroups), with `grow_replay`: a synthetic
        epoch's predicted transitions join the buffer, or a real epoch's agent episodes, replayed on
        the real environment into real transitions (source "agent"). Returns the experience model's
        and the buffer's metrics."""
        synthetic = self.settings.synthetic(epoch)
        out: dict[str, float] = {}
        if synthetic:
            new = self.environments.take_transitions()
            out["replay/added_synthetic"] = float(len(new) if self.settings.grow_replay else 0)
            out |= {k: float(v) for k, v in self.environments.counts.items()}
        else:
            new, failed = self._agent_transitions(groups) if self.settings.grow_replay else ([], 0)
            out["replay/added_agent"] = float(len(new))
            if failed:
                out["replay/agent_replay_failed"] = float(failed)
        if self.settings.grow_replay and new:
            self.buffer.add(new, self.embedder([transition_key_text(t) for t in new]))
        return out | {"replay/size": float(len(self.buffer))} | {
            f"replay/{k}": float(v) for k, v in self.buffer.counts().items()} | {
            "dreamgym/synthetic_epoch": float(synthetic)}

    def _agent_transitions(self, groups: Sequence[Any]) -> tuple[list[Transition], int]:
        """The real transitions of a real epoch's episodes (the domain replays each transcript on
        fresh environment state, within `episodes.score_timeout_s`); an episode whose replay fails
        or runs past the limit is counted and left out."""
        out, failed = [], 0
        seconds = self.ctx.config.episodes.score_timeout_s
        for group in groups:
            for episode in group.episodes:
                try:
                    with time_limit(seconds):
                        out += self.support.episode(self.ctx.domain, group.task, episode.transcript)
                except EnvTimeout:
                    failed += 1
                    logging.warning("dreamgym: replaying an episode of %s ran past %g s; not added",
                                    group.task.task_id, seconds)
                except Exception as e:  # noqa: BLE001 - a replay that disagrees never stops the run
                    failed += 1
                    logging.warning("dreamgym: replaying an episode of %s failed (%s: %s); not added",
                                    group.task.task_id, type(e).__name__, str(e)[:200])
        return out, failed

    def commit(self, epoch: int) -> None:
        """The buffer's pending transitions as the `replay` pool's shard of `epoch` (process 0 writes)."""
        self.buffer.commit(epoch)


def default_cache_dir(config_cache_dir: str, workdir) -> str:
    """Where the experience weights are kept: `warmstart.cache_dir` if set, else inside the workdir."""
    return config_cache_dir or str(storage.as_path(workdir) / "experience_model")
