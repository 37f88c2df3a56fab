"""Both policies' weights, apart from the epoch that trains them: the agent's and the simulator's
compiled pieces (`Policy`), their initial weights, the frozen base both may share, their KL
references, the warm-start and its cache, the restore targets of a checkpoint and the patching of
a resumed state (what is rebuilt rather than saved). Each policy's weights are its partition's
pair (`models.partition`: trainable, frozen); nothing here asks which partition it is.

The epoch (`loop.coevolution`) only reads and replaces `PolicyState`s; everything that decides
what those states start as, or how a checkpoint becomes one again, is here, in one place.

- **Initial weights** (`initial`): the config's model source (an HF dir, a GGUF file or a random
  init of the preset), drawn from `init_seed` (the simulator from `init_seed + 1` unless it shares
  the agent's init). When the weights are trained whole (full fine-tuning) a shared init is copied
  (each policy's step donates its own buffers); one frozen base (LoRA's) is held once when both
  policies adapt the same source in the same dtype and layout (`RunConfig.shares_frozen_base`).
- **References**: the KL anchor is a copy of the starting trained tree (full fine-tuning: the
  initial weights; LoRA after a warm-start: the warm-started adapters), or, when the untrained part
  leaves the frozen model as it is and nothing was warm-started, the frozen part alone (no copy).
- **Warm-start**: SFT of each policy with steps > 0 (`loop.learning.warmstart`), or its weights
  from `warmstart.cache_dir` (`loop.warmstart_cache`), keyed by everything the SFT reads.
- **Resume**: checkpoints hold the trained trees, optimizer states and (after a warm-start) the
  references; the frozen parts and the references of runs that were not warm-started are rebuilt
  from the config, after checking that a frozen base is the one the trained part was trained on.
"""

from __future__ import annotations

from typing import Any, Mapping

from jax.sharding import Mesh

from genenv_jax.configs.run_config import PolicySettings
from genenv_jax.loop import learning
from genenv_jax.loop.context import LoopContext
from genenv_jax.loop.persistence import check_bases
from genenv_jax.loop.policy import Params, Policy, build_policy, copy_params
from genenv_jax.loop.state import POLICIES, LoopState
from genenv_jax.loop.warmstart_cache import cached_warmstart, warmstart_key
from genenv_jax.rl.batches import PolicyState, TrainRow
from genenv_jax.sampling import PrefixCacheConfig, Sampler
from genenv_jax.workdir.checkpoint_digests import tree_digest


class PolicyWeights:
    """The agent's and the simulator's `Policy` and everything about their weights outside an epoch:
    initial weights, base sharing, references, warm-start (and its cache), restore and resume."""

    def __init__(self, ctx: LoopContext, mesh: Mesh):
        self.ctx, self.config, self.mesh = ctx, ctx.config, mesh
        self._samplers: dict[tuple, Sampler] = {}
        warm = self.config.warmstart
        self._warm_lr = warm.learning_rate if warm.enabled else None
        self.agent = self.build(self.config.agent, self._warm_lr)
        self.simulator = self.build(self.config.simulator, self._warm_lr)
        self.warmstart_metrics: dict[str, float] = {}  # the policies' SFT losses (and cache hits)

    @property
    def policies(self) -> dict[str, Policy]:
        """name -> Policy, in `POLICIES` order."""
        return {"agent": self.agent, "simulator": self.simulator}

    def build(self, settings: PolicySettings, sft_lr: float | None) -> Policy:
        """A policy's compiled pieces (`sft_lr`: its warm-start SFT's learning rate, None for none).
        Policies of one model shape and prefix pool share one `Sampler`, so its programs compile once."""
        cfg = settings.model_config().replace(param_dtype=settings.param_dtype)
        pool = settings.sampling.prefix_cache_tokens
        if (cfg, pool) not in self._samplers:
            self._samplers[cfg, pool] = Sampler(cfg, self.mesh, pad_id=self.ctx.text.pad_id,
                                                prefix_cache=PrefixCacheConfig(tokens=pool))
        return build_policy(settings, self.mesh, self._samplers[cfg, pool], warmstart_lr=sft_lr)

    # ------------------------------------------------------------------ a fresh run
    def initial(self) -> tuple[Params, Params]:
        """(agent, simulator) model weights as the config defines them, before any training (each
        policy's partition splits them). A frozen base is held once when both policies start from
        the same source (`share_agent_init`, or one model_dir) in the same dtype and layout."""
        config, agent, simulator = self.config, self.agent, self.simulator
        weights = agent.initial_params(config.init_seed)
        if config.share_agent_init and not agent.partition.has_frozen and not simulator.partition.has_frozen:
            return weights, copy_params(weights)  # trained whole: each policy trains (and donates) its copy
        if config.shares_frozen_base():
            return weights, weights  # one frozen base under both policies' trained parts
        return weights, simulator.initial_params(config.init_seed if config.share_agent_init else config.init_seed + 1)

    def fresh_state(self) -> LoopState:
        """Initial (optionally warm-started) weights, their references and optimizer states; epoch -1."""
        c, policies = self.config, self.policies
        weights = dict(zip(POLICIES, self.initial()))
        trained = {name: p.initial_trained(weights[name], c.init_seed + i)
                   for i, (name, p) in enumerate(policies.items())}
        bases = self.base_records(weights)
        steps = {"agent": c.warmstart.agent_steps, "simulator": c.warmstart.simulator_steps}
        warmed = {name: c.warmstart.enabled and steps[name] > 0 for name in POLICIES}  # 0 steps: as it is
        if any(warmed.values()):
            rows = dict(zip(POLICIES, learning.warmstart_examples(self.ctx)))
            for name, p in policies.items():
                if warmed[name]:
                    trained[name], metrics = self._warmstart(p, trained[name], rows[name], p.frozen_of(weights[name]),
                                                             bases.get(name))
                    self.warmstart_metrics |= metrics
        states = {name: p.new_state(trained[name], p.frozen_of(weights[name]), warmed[name])
                  for name, p in policies.items()}
        return LoopState(epoch=-1, agent=states["agent"], simulator=states["simulator"],
                         warm_started=any(warmed.values()), bases=bases)

    def base_records(self, weights: Mapping[str, Params]) -> dict[str, dict]:
        """name -> {digest, source, dtype} of each policy's frozen base, for those that have one (one
        digest per shared base)."""
        digests: dict[int, str] = {}
        out = {}
        for name, policy in self.policies.items():
            if policy.partition.has_frozen:
                base = weights[name]
                digest = digests.setdefault(id(base), tree_digest(base))
                s = policy.settings
                out[name] = {"digest": digest, "source": s.model_dir or f"random init of preset {s.preset}",
                             "dtype": s.param_dtype}
        return out

    def _warmstart(self, policy: Policy, params: Params, rows: list[TrainRow], frozen: Params,
                   base: dict | None) -> tuple[Params, dict]:
        """SFT of one policy on its warm-start rows, or its weights from `warmstart.cache_dir`."""
        def train():
            return learning.warmstart(self.ctx, policy, params, rows, frozen)
        cache_dir = self.config.warmstart.cache_dir
        if not cache_dir:
            return train()
        key = warmstart_key(self.config.snapshot, policy.name, self.config.init_seed, rows,
                            base_digest=None if base is None else base["digest"])
        return cached_warmstart(cache_dir, key, policy.name, policy.update.abstract_params(), train)

    # ------------------------------------------------------------------ restore and resume
    def restore_targets(self) -> dict[str, PolicyState]:
        """name -> the abstract PolicyState (shapes, dtypes, shardings) its checkpoint items restore into."""
        return {name: p.abstract_state(with_reference=True) for name, p in self.policies.items()}

    def resume(self, state: LoopState, directory: Any) -> None:
        """Completes a restored `state` in place with what checkpoints do not hold: the frozen parts
        (never saved) and the references of a run that was not warm-started (its initial trained
        part, unless that is the frozen part alone); refuses a trained part over another base than
        the one it was trained on."""
        policies = self.policies.values()
        if all(state.policy(n).reference is not None for n in POLICIES) and not any(p.partition.has_frozen
                                                                                   for p in policies):
            return  # trained whole after a warm-start: the references were saved, nothing is frozen
        weights = dict(zip(POLICIES, self.initial()))
        check_bases(directory, state, self.base_records(weights))
        for name, policy in self.policies.items():
            restored = state.policy(name).replace(frozen=policy.frozen_of(weights[name]))
            if restored.reference is None and not policy.partition.starts_at_frozen:
                restored = restored.replace(reference=weights[name])
            setattr(state, name, restored)
