"""A run's trained policy (the agent or the simulator) read back from its Orbax checkpoint.

The checkpoint holds what the loop trained, the trainable part of the policy's partition
(`models.partition`: full params, or LoRA's adapters). A frozen part is never saved, so it is
rebuilt from the run's saved config as the loop builds it (`loop.weights.PolicyWeights.initial`)
and checked against the digest the run recorded, so a trained part is never merged into another
base than the one it was trained on.
Both the evaluator (`evaluation.evaluate.load_run_agent`) and the export command read policies
through `load_run_policy`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.partition import Partition
from genenv_jax.workdir import storage

POLICY_NAMES = ("agent", "simulator")
_SOURCE_KEYS = ("model_dir", "preset", "allow_random_init")
RANDOM_INIT = "random init of preset"


@dataclasses.dataclass
class RunPolicy:
    """One policy of a run at one epoch, as its `partition` splits it: `trainable` (restored from
    the checkpoint) and `frozen` (rebuilt; `{}` under full fine-tuning); `tokenizer_source` is what
    the run's tokenizer was loaded from (`ChatText.load`: a directory, a GGUF file, or None for the
    bundled Qwen2.5 one)."""

    name: str
    epoch: int
    cfg: ModelConfig
    partition: Partition
    trainable: Any
    frozen: Any
    model_source: str
    tokenizer_source: str | None
    mesh: Any = None

    def merged(self) -> Any:
        """The policy's weights as one param tree (`Partition.merged`; a frozen part's buffers are
        donated: read `frozen` before, not after)."""
        if not self.partition.has_frozen:
            return self.trainable  # nothing to fold in
        import jax

        from genenv_jax.models.partitioning import param_shardings

        merge = jax.jit(self.partition.merged, out_shardings=param_shardings(self.cfg, self.mesh), donate_argnums=1)
        return merge(self.trainable, self.frozen)


def policy_settings(snapshot: Mapping[str, Any], name: str):
    """A policy's settings from a saved config snapshot. With `simulator.share_agent_init` (the
    default) the simulator started from the agent's weights, so it takes the agent's model source,
    as `configs.run_config` does when the run starts."""
    from genenv_jax.configs.run_config import saved_policy_settings

    if name == "simulator" and snapshot["simulator"].get("share_agent_init", True):
        agent = snapshot["agent"]
        shared = {key: agent[key] for key in _SOURCE_KEYS if key in agent}
        snapshot = {**snapshot, "simulator": {**snapshot["simulator"], **shared}}
    return saved_policy_settings(snapshot, name)


def _init_seed(snapshot: Mapping[str, Any], name: str) -> int:
    """The seed the policy's initial weights were drawn from (the loop's `PolicyWeights.initial`)."""
    from genenv_jax.configs.run_config import saved_init_seed

    seed = saved_init_seed(snapshot)
    shared = snapshot["simulator"].get("share_agent_init", True)
    return seed if name == "agent" or shared else seed + 1


def source_of(settings) -> str:
    """Where a policy's initial weights come from: the resolved model source, or the preset."""
    return settings.model_dir or f"{RANDOM_INIT} {settings.preset}"


def tokenizer_source(snapshot: Mapping[str, Any]) -> str | None:
    """What the run loaded its tokenizer from: `tokenizer_dir`, else the agent's resolved model
    source, else None (the bundled Qwen2.5 tokenizer), as `loop.coevolution` does."""
    return snapshot.get("tokenizer_dir") or policy_settings(snapshot, "agent").model_dir or None


def load_run_policy(run_dir: str | os.PathLike, name: str = "agent", epoch: int | None = None) -> RunPolicy:
    """Policy `name` of a GenEnv run's checkpoint (default: the latest epoch), its params
    FSDP-sharded over every device (the default mesh). A frozen base is rebuilt from the saved
    config and must have the digest the run recorded (a ValueError naming both otherwise)."""
    from genenv_jax.parallel import MeshConfig, abstract_like, make_mesh
    from genenv_jax.workdir.checkpoints import Checkpointer

    if name not in POLICY_NAMES:
        raise ValueError(f"policy {name!r}: expected one of {', '.join(POLICY_NAMES)}")
    ckpt = Checkpointer(storage.as_path(run_dir) / "checkpoints", async_save=False)
    try:
        epoch = ckpt.latest_epoch() if epoch is None else epoch
        if epoch is None:
            raise FileNotFoundError(f"{run_dir}: no checkpoints under {ckpt.directory}")
        meta = ckpt.metadata(epoch)
        snapshot = meta["config"]
        settings = policy_settings(snapshot, name)
        cfg, mesh = settings.model_config(), make_mesh(MeshConfig())
        partition = settings.partition(cfg)
        frozen = partition.frozen_shapes()
        if partition.has_frozen:
            frozen = _checked_base(ckpt, epoch, meta, name, settings, cfg, mesh, _init_seed(snapshot, name))
        target = abstract_like(partition.trainable_shapes(), partition.trainable_shardings(mesh))
        return RunPolicy(name=name, epoch=epoch, cfg=cfg, partition=partition,
                         trainable=ckpt.restore_item(epoch, f"{name}_params", target), frozen=frozen,
                         model_source=source_of(settings), tokenizer_source=tokenizer_source(snapshot), mesh=mesh)
    finally:
        ckpt.close()


def _checked_base(ckpt, epoch: int, meta: Mapping[str, Any], name: str, settings, cfg: ModelConfig, mesh,
                  init_seed: int):
    """A policy's frozen base rebuilt as the loop builds it, its digest checked against the
    checkpoint's record."""
    from genenv_jax.models.loading import initial_params
    from genenv_jax.workdir.checkpoint_digests import tree_digest

    base = initial_params(cfg, mesh, model_dir=settings.model_dir, seed=init_seed)
    saved = (meta.get("bases") or {}).get(name)
    digest = tree_digest(base)
    if saved is None or saved["digest"] != digest:
        recorded = "no base digest" if saved is None else f"base {saved['digest']} ({saved['source']})"
        raise ValueError(f"{ckpt.directory}: the {name}'s LoRA adapters of epoch {epoch} were trained on {recorded}, "
                         f"but its saved config rebuilds base {digest} ({settings.model_dir or settings.preset}); "
                         "is the model source still the one the run used?")
    return base
