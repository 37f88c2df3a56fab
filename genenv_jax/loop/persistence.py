"""Saving the loop state with the pools' manifests and the config snapshot, and resuming from it:
the newest checkpoint that restores, pools rolled back to it, config changes logged or refused."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from genenv_jax.checkpointing import Checkpointer, resume
from genenv_jax.loop.state import POLICIES, LoopState, PolicyState
from genenv_jax.pools import Pool
from genenv_jax.run_config import ConfigError, RunConfig, config_changes


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
