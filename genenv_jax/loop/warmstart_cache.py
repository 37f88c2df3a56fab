"""Warm-started weights kept for reuse (`config.warmstart.cache_dir`): runs that differ only in what
happens after the warm-start (mode, epochs, curriculum knobs of the loop) start from the same
weights without repeating the SFT, and a study's modes start from identical agents.

Each policy's entry is keyed by a digest of everything its warm-start reads (its SFT rows as token
ids, its settings, the initial weights' seed), so a changed setting is a cache miss, never a wrong
hit. Entries are Orbax checkpoints (atomic commit, verified digests) with the SFT losses as
their metadata; a broken entry is ignored and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from genenv_jax.workdir import storage
from genenv_jax.workdir.checkpoint_digests import json_digest
from genenv_jax.workdir.checkpoints import Checkpointer, CheckpointError
from genenv_jax.rl.batches import TrainRow


def warmstart_key(snapshot: Mapping[str, Any], policy: str, init_seed: int, rows: Sequence[TrainRow],
                  base_digest: str | None = None) -> str:
    """The digest of what `policy`'s warm-start reads: its SFT rows (token ids, masks), its own
    config section (its `lora` keys too) and the agent's (a shared init starts from the agent's
    weights), the mesh, the warm-start settings, the seed of the initial weights and, under LoRA,
    the digest of the frozen base the adapters are trained over. Over-keying only costs a cache miss."""
    rows_digest = hashlib.sha256()
    for row in rows:
        rows_digest.update(json.dumps([list(map(int, row.prompt)), list(map(int, row.response)),
                                       None if row.loss_mask is None else np.asarray(row.loss_mask).tolist()]).encode())
    what = {"policy": policy, "section": snapshot.get(policy), "agent": snapshot.get("agent"),
            "share_agent_init": dict(snapshot.get("simulator", {})).get("share_agent_init"),
            "mesh": snapshot.get("mesh"), "init_seed": init_seed, "rows": rows_digest.hexdigest(),
            "warmstart": {k: v for k, v in dict(snapshot.get("warmstart", {})).items() if k != "cache_dir"}}
    if base_digest is not None:  # absent under full fine-tuning: its keys stay as they were
        what["base"] = base_digest
    return json_digest(json.loads(json.dumps(what, sort_keys=True, default=str)))[:16]


def cached_warmstart(cache_dir: str, key: str, policy: str, target: Any,
                     train: Callable[[], tuple[Any, dict]]) -> tuple[Any, dict]:
    """(params, metrics) of `policy`'s warm-start: restored from `cache_dir` when an entry for `key`
    (`warmstart_key`) exists, else computed by `train()` and stored. `target`: abstract params."""
    directory = storage.as_path(cache_dir) / f"{policy}-{key}"
    with Checkpointer(directory, max_to_keep=1, async_save=False) as checkpointer:
        if checkpointer.latest_epoch() is not None:
            try:
                restored = checkpointer.restore(0, {"params": target})
                logging.info("warm-start %s: reused %s", policy, directory)
                return restored.arrays["params"], dict(restored.meta["metrics"]) | {
                    f"warmstart/{policy}_cached": 1}
            except CheckpointError as e:
                logging.warning("warm-start cache %s is unreadable (%s); warm-starting again", directory, e)
                checkpointer.set_aside(0)
        params, metrics = train()
        checkpointer.save(0, {"params": params}, {"metrics": metrics})
        checkpointer.wait_until_finished()
    return params, metrics | {f"warmstart/{policy}_cached": 0}
