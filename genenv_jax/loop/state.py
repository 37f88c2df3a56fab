"""The loop's typed state and how it maps onto a checkpoint (array items + JSON meta)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from genenv_jax.rl.batches import PolicyState

PyTree = Any
POLICIES = ("agent", "simulator")
STATE_SCHEMA_VERSION = 2
RECENT_SUCCESS_KEPT = 4  # per-seed success rates the simulator prompt shows


@dataclasses.dataclass
class SeedStats:
    """What the loop remembers about one seed between epochs.

    recent_success: the agent's success rates on its variants in the last epochs (newest last),
      shown to the simulator and used to pick the difficulty direction.
    reward_variance: DreamGym's V over all rollout rewards of the seed's variants in the latest
      epoch that measured it (seed selection prefers high V: feasible but not yet solved).
    """

    recent_success: list[float] = dataclasses.field(default_factory=list)
    reward_variance: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"recent_success": list(self.recent_success), "reward_variance": self.reward_variance}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SeedStats":
        return cls(recent_success=[float(x) for x in data["recent_success"]],
                   reward_variance=None if data["reward_variance"] is None else float(data["reward_variance"]))


@dataclasses.dataclass
class LoopState:
    """The state after epoch `epoch` (-1: nothing run yet); epoch + 1 runs next."""

    epoch: int
    agent: PolicyState
    simulator: PolicyState
    seeds: dict[str, SeedStats] = dataclasses.field(default_factory=dict)
    warm_started: bool = False
    # LoRA policies: name -> {"digest": `workdir.checkpoint_digests.tree_digest` of the frozen base,
    # "source": what it was built from}; a resume refuses a base with another digest.
    bases: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def policy(self, name: str) -> PolicyState:
        return self.agent if name == "agent" else self.simulator

    def checkpoint_arrays(self, with_references: bool) -> dict[str, PyTree]:
        """Array items to save (the trained trees: adapters under LoRA, never a frozen base);
        references only when they cannot be rebuilt from the config."""
        arrays = {}
        for name in POLICIES:
            p = self.policy(name)
            arrays[f"{name}_params"] = p.params
            arrays[f"{name}_opt_state"] = p.opt_state
            if with_references and p.reference is not None:
                arrays[f"{name}_reference"] = p.reference
        return arrays

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"schema_version": STATE_SCHEMA_VERSION, "epoch": self.epoch, "warm_started": self.warm_started,
                "seeds": {k: v.to_json() for k, v in self.seeds.items()}, "bases": dict(self.bases)}

    @classmethod
    def from_checkpoint(cls, epoch: int, arrays: Mapping[str, PyTree], meta: Mapping[str, Any]) -> "LoopState":
        if meta.get("schema_version") != STATE_SCHEMA_VERSION:
            raise ValueError(f"checkpoint of epoch {epoch} has loop-state schema {meta.get('schema_version')!r}; "
                             f"this version reads {STATE_SCHEMA_VERSION}")
        policies = {name: PolicyState(arrays[f"{name}_params"], arrays[f"{name}_opt_state"],
                                      arrays.get(f"{name}_reference")) for name in POLICIES}
        return cls(epoch=epoch, agent=policies["agent"], simulator=policies["simulator"],
                   seeds={k: SeedStats.from_json(v) for k, v in meta["seeds"].items()},
                   warm_started=bool(meta["warm_started"]), bases=dict(meta.get("bases") or {}))
