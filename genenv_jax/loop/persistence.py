"""Saving the loop state with the pools' manifests and the config snapshot, and resuming from it:
the newest checkpoint that restores, pools rolled back to it, config changes logged or refused."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from genenv_jax.workdir.checkpoints import Checkpointer, resume
from genenv_jax.loop.state import POLICIES, LoopState
from genenv_jax.rl.batches import PolicyState
from genenv_jax.workdir.pools import Pool
from genenv_jax.configs.run_config import ConfigError, RunConfig, policy_defaults
from genenv_jax.configs.experience_settings import REMOVED_EXPERIENCE_KEYS


def save_state(checkpointer: Checkpointer, state: LoopState, pools: Mapping[str, Pool], config: RunConfig) -> None:
    """Checkpoints `state`; KL references only when warm-started (otherwise the config rebuilds them)."""
    meta = state.checkpoint_meta() | {"pool_manifests": {name: pool.manifest for name, pool in pools.items()},
                                      "config": dict(config.snapshot)}
    checkpointer.save(state.epoch, state.checkpoint_arrays(with_references=state.warm_started), meta)


def check_config_change(checkpointer: Checkpointer, config: RunConfig) -> None:
    """Logs every key that differs from the run's saved config; refuses changes that alter what the
    run means (seed, alpha, mode, rollouts, batch sizes, ...) unless `allow_config_change` is set."""
    saved = _newest_readable_config(checkpointer)
    if saved is None:
        return
    changes = config_changes(saved, config.snapshot)
    for key, old, new, safe in changes:
        logging.warning("resume: config.%s changed from %r to %r%s", key, old, new, "" if safe else " (changes the run)")
    unsafe = [key for key, _, _, safe in changes if not safe]
    if unsafe and not config.allow_config_change:
        raise ConfigError(
            f"resuming {checkpointer.directory} with changed config.{unsafe[0]}"
            + (f" (and {len(unsafe) - 1} more: {', '.join(unsafe[1:4])})" if len(unsafe) > 1 else "")
            + ", which changes what the run means; rerun with the saved values, use another --workdir, "
              "or pass --config.allow_config_change=True")


def check_bases(directory, state: LoopState, current: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuses to resume LoRA adapters over a base other than the one they were trained on: one
    line naming both digests (`workdir.checkpoint_digests.tree_digest`)."""
    for name, now in current.items():
        saved = state.bases.get(name)
        if saved is None:
            raise ConfigError(f"resuming {directory}: the checkpoint of epoch {state.epoch} records no LoRA base for "
                              f"the {name} (it was saved without LoRA); use another --workdir")
        if saved["digest"] != now["digest"]:
            raise ConfigError(
                f"resuming {directory}: the {name}'s LoRA adapters of epoch {state.epoch} were trained on base "
                f"{saved['digest']} ({saved['source']}, {saved['dtype']}) but config.{name} now gives base "
                f"{now['digest']} ({now['source']}, {now['dtype']}); resume with the run's base or use another --workdir")


def _newest_readable_config(checkpointer: Checkpointer) -> dict[str, Any] | None:
    for epoch in reversed(checkpointer.all_epochs()):
        try:
            return checkpointer.metadata(epoch)["config"]
        except Exception:  # noqa: BLE001 - a broken checkpoint: resume falls back past it
            continue
    return None


def load_state(checkpointer: Checkpointer, targets: Mapping[str, PolicyState],
               pools: Mapping[str, Pool]) -> LoopState | None:
    """The newest checkpoint that restores as a LoopState (references None when not saved), or None."""
    arrays = {}
    for name in POLICIES:
        t = targets[name]
        arrays |= {f"{name}_params": t.params, f"{name}_opt_state": t.opt_state, f"{name}_reference": t.params}
    restored = resume(checkpointer, arrays, pools)
    if restored is None:
        return None
    return LoopState.from_checkpoint(restored.epoch, restored.arrays, restored.meta)


# ----------------------------------------------------------------------------------------------
# Which config changes a resumed run may make
# ----------------------------------------------------------------------------------------------
# Keys that may change between a run and its resumption without changing what the run means.
# Mesh shape, micro-batches and sampler batch size change memory use and speed, not the algorithm.
SAFE_TO_CHANGE = ("epochs", "allow_config_change", "log.", "checkpoint.", "mesh.", "preset_name",
                  "agent.sampling.batch_size", "simulator.sampling.batch_size",
                  "agent.sampling.prefix_cache_tokens", "simulator.sampling.prefix_cache_tokens",
                  "experience.sampling.prefix_cache_tokens",
                  "agent.train.micro_batches", "simulator.train.micro_batches", "episodes.env_workers",
                  "episodes.step_timeout_s", "episodes.score_timeout_s", "episodes.max_observation_chars",
                  "episodes.env_memory_mb",
                  "warmstart.cache_dir", "evaluation.")

# Keys added after runs were saved without them, with the value that keeps the old behaviour:
# a run saved before the key existed resumes as long as the key keeps that value.
ADDED_LATER = {"new_tasks_per_epoch": 0, "init_seed": -1, "warmstart.spell_added_tokens": False,
               "simulator_feedback": "results", "simulator.train.objective": "rwr",
               "simulator.train.invalid_reward": 0.0,
               "log.trackers": ["jsonl", "tensorboard"], "log.wandb_project": "genenv_jax",
               "log.mlflow_tracking_uri": "", "log.mlflow_experiment": "genenv_jax",
               **{f"simulator.train.grpo.{k}": v for k, v in policy_defaults("simulator")["train"]["grpo"].items()},
               **{f"{policy}.train.{key}": value for policy in ("agent", "simulator")
                  for key, value in (("pad_per_step", False), ("tasks_per_epoch", 0))}}
# Keys removed later, read by nothing while they existed (the experience section's copies of a
# policy's optimizer, loss, batching and LoRA keys: `configs.settings.REMOVED_EXPERIENCE_KEYS`): a
# saved run's values of them are ignored, whatever they were, since no run ever read them.
REMOVED_LATER = tuple(f"experience.{key}" for key in REMOVED_EXPERIENCE_KEYS)
# Sections added later that only a mode added with them reads: absent from a saved run of another mode.
ADDED_LATER_SECTIONS = {"experience.": "dreamgym", "dreamgym.": "dreamgym"}


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and not (key == "options" and prefix == "domain."):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def config_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any, bool]]:
    """(key, saved value, new value, safe) for every key whose value differs between two snapshots."""
    old, new = _flatten(saved), _flatten(current)
    changes = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if a == "<absent>" and key in ADDED_LATER and b == ADDED_LATER[key]:
            continue
        if b == "<absent>" and key in REMOVED_LATER:
            continue
        if a == "<absent>" and any(key.startswith(p) and old.get("mode") != m for p, m in ADDED_LATER_SECTIONS.items()):
            continue
        if _normalise(a) != _normalise(b):
            safe = any(key == s or (s.endswith(".") and key.startswith(s)) for s in SAFE_TO_CHANGE)
            changes.append((key, a, b, safe))
    return changes


def _normalise(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _normalise(v) for k, v in value.items()}
    return value
