"""The typed run config: the ConfigDict validated once, at the edge, into frozen dataclasses.

`RunConfig.from_config_dict(cd)` checks every key before any work starts and raises `ConfigError`
with one line naming the key (`config.agent.sampling.temperature=nan: must be a finite number`).
Inside the loop only these dataclasses are read. Values that must agree are derived here, never
copied: a policy's loss temperature is its sampling temperature; the domain gets alpha and the band
from `curriculum`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from genenv_jax.core.config_checks import ConfigError
from genenv_jax.core.config_checks import check_fraction as _fraction
from genenv_jax.core.config_checks import check_in as _choice
from genenv_jax.core.config_checks import check_positive as _positive
from genenv_jax.core.config_checks import check_type as _check_type
from genenv_jax.core.config_checks import failure as _fail
from genenv_jax.core.config_checks import section as _section
from genenv_jax.core.config_checks import to_dict as _to_dict
from genenv_jax.curriculum import CurriculumConfig
from genenv_jax.domains.base import SPLITS
from genenv_jax.dreamgym.settings import DreamGymSettings, dreamgym_settings
from genenv_jax.data.model_sources import ModelSourceError, resolve_model_source
from genenv_jax.models import ModelConfig, preset
from genenv_jax.models.loading import model_config as source_model_config
from genenv_jax.models.config import ATTENTION_KERNELS, REMAT_POLICIES
from genenv_jax.parallel import MeshConfig
from genenv_jax.rl import GRPOConfig, OptimizerConfig, RWRConfig

MODES = ("genenv", "random", "static", "dreamgym")
SEED_ORDERS = ("file", "shortest")
SEED_STRATEGIES = ("variance", "uniform")
SIMULATOR_TARGETS = ("next", "shortest")
# A preset at least this large is never randomly initialised unless asked for (`allow_random_init`).
RANDOM_INIT_LIMIT = 100_000_000


# ----------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    max_prompt_len: int
    batch_size: int


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    tasks_per_step: int
    micro_batches: int
    passes: int
    loss: GRPOConfig | RWRConfig


@dataclasses.dataclass(frozen=True)
class PolicySettings:
    """One trained LLM: weights, sampling, optimizer, update rule ('grpo' agent, 'rwr' simulator)."""

    name: str
    rule: str
    model_dir: str
    preset: str
    allow_random_init: bool
    param_dtype: str
    dtype: str
    remat_policy: str
    scan_layers: bool
    attention: str
    sampling: SamplingSettings
    optimizer: OptimizerConfig
    train: TrainSettings

    def model_config(self) -> ModelConfig:
        """The training config: float32 master params, the configured compute dtype and layout."""
        layout = dict(param_dtype="float32", dtype=self.dtype, remat_policy=self.remat_policy,
                      scan_layers=self.scan_layers, attention=self.attention)
        if self.model_dir:
            return source_model_config(self.model_dir, **layout)
        return preset(self.preset, **layout)


@dataclasses.dataclass(frozen=True)
class DomainSettings:
    name: str
    options: Mapping[str, Any]
    seed_split: str
    max_seeds: int
    seed_order: str


@dataclasses.dataclass(frozen=True)
class SeedSelectionSettings:
    strategy: str
    explore_fraction: float


@dataclasses.dataclass(frozen=True)
class ReplaySettings:
    tasks_per_epoch: int
    base_ratio: float
    historical_ratio: float


@dataclasses.dataclass(frozen=True)
class WarmstartSettings:
    enabled: bool
    agent_steps: int
    simulator_steps: int
    batch_size: int
    learning_rate: float
    num_seeds: int
    simulator_target: str
    cache_dir: str = ""  # "" -> off; else warm-started weights are kept there, keyed by what produced them


@dataclasses.dataclass(frozen=True)
class EvaluationSettings:
    """Held-out accuracy of the agent after every epoch (greedy, one episode per task)."""

    split: str = ""             # "" -> off; else a seed split of the domain ("validation", "test")
    max_per_category: int = 0   # 0 -> every task of the split


@dataclasses.dataclass(frozen=True)
class EpisodeSettings:
    """Caps of one agent episode (the per-turn cap is the agent's sampling.max_new_tokens) and the
    environment worker processes (0: environments step in the loop's process)."""

    max_turns: int
    max_total_tokens: int
    env_workers: int


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    keep: int
    every_epochs: int


@dataclasses.dataclass(frozen=True)
class LogSettings:
    samples_per_epoch: int
    progress_bars: bool


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything a run reads, validated. `snapshot` is the JSON of the ConfigDict it came from."""

    seed: int
    init_seed: int   # the initial weights' and warm-start's seed (config.init_seed, or seed when -1)
    mode: str
    epochs: int
    mesh: MeshConfig
    allow_config_change: bool
    agent: PolicySettings
    simulator: PolicySettings
    share_agent_init: bool
    tokenizer_dir: str
    domain: DomainSettings
    curriculum: CurriculumConfig
    seeds_per_epoch: int
    variants_per_seed: int
    rollouts_per_task: int
    new_tasks_per_epoch: int
    seed_selection: SeedSelectionSettings
    static_variants_per_seed: int
    replay: ReplaySettings
    episodes: EpisodeSettings
    warmstart: WarmstartSettings
    evaluation: EvaluationSettings
    checkpoint: CheckpointSettings
    log: LogSettings
    preset_name: str
    experience: PolicySettings     # mode=dreamgym: the experience model (read by that mode only)
    dreamgym: DreamGymSettings     # mode=dreamgym's settings (read by that mode only)
    snapshot: Mapping[str, Any] = dataclasses.field(compare=False, repr=False, default_factory=dict)

    @classmethod
    def from_config_dict(cls, config: Any, num_devices: int | None = None) -> "RunConfig":
        """Validates `config` (a ConfigDict or nested dict); `num_devices` checks the mesh fits."""
        tree = _to_dict(config)
        return _build(tree, num_devices)

    def default_workdir(self) -> str:
        return f"runs/{self.domain.name}-{self.preset_name}"


# ----------------------------------------------------------------------------------------------
# Reading a section into a dataclass, with the key path in every error
# ----------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------
# The whole tree
# ----------------------------------------------------------------------------------------------
_POLICY_KEYS = ("model_dir", "preset", "allow_random_init", "param_dtype", "dtype", "remat_policy", "scan_layers",
                "attention")
_DTYPES = ("float32", "bfloat16", "float16")


def saved_policy_settings(snapshot: Mapping[str, Any], name: str) -> PolicySettings:
    """A policy's settings from a run's saved config snapshot (e.g. to rebuild its model config)."""
    tree = {k: v for k, v in snapshot[name].items() if k != "share_agent_init"}
    return _policy(tree, name, "grpo" if name == "agent" else "rwr", check_source=False)


def _policy(tree: Mapping[str, Any], name: str, rule: str, check_source: bool = True) -> PolicySettings:
    known = set(_POLICY_KEYS) | {"sampling", "optimizer", "train"} | ({"share_agent_init"} if name == "simulator"
                                                                        else set())
    unknown = sorted(set(tree) - known)
    if unknown:
        raise ConfigError(f"config.{name}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    sampling = _section(SamplingSettings, tree["sampling"], f"{name}.sampling")
    s = f"{name}.sampling"
    if not sampling.temperature > 0:
        raise _fail(f"{s}.temperature", sampling.temperature, "must be > 0 (training samples; the loss uses it too)")
    if not 0 < sampling.top_p <= 1:
        raise _fail(f"{s}.top_p", sampling.top_p, "must lie in (0, 1]")
    _positive(f"{s}.top_k", sampling.top_k, 0)
    for key in ("max_new_tokens", "max_prompt_len", "batch_size"):
        _positive(f"{s}.{key}", getattr(sampling, key))
    optimizer = _section(OptimizerConfig, tree["optimizer"], f"{name}.optimizer")
    if optimizer.learning_rate <= 0:
        raise _fail(f"{name}.optimizer.learning_rate", optimizer.learning_rate, "must be > 0")
    train_tree = dict(tree["train"])
    loss_cls = GRPOConfig if rule == "grpo" else RWRConfig
    loss = _section(loss_cls, train_tree.pop("loss", {}), f"{name}.train.loss", skip=("temperature",),
                    extra={"temperature": sampling.temperature})
    train = _section(TrainSettings, train_tree, f"{name}.train", extra={"loss": loss})
    for key in ("tasks_per_step", "micro_batches", "passes"):
        _positive(f"{name}.train.{key}", getattr(train, key))
    model = {k: _check_type(f"{name}.{k}", tree[k], bool if k in ("allow_random_init", "scan_layers") else str)
             for k in _POLICY_KEYS}
    for key in ("param_dtype", "dtype"):
        _choice(f"{name}.{key}", model[key], _DTYPES)
    _choice(f"{name}.attention", model["attention"], ATTENTION_KERNELS)
    _choice(f"{name}.remat_policy", model["remat_policy"], REMAT_POLICIES)
    if model["model_dir"]:
        model["model_dir"] = _resolved_source(f"{name}.model_dir", model["model_dir"], fetch=check_source)
    settings = PolicySettings(name=name, rule=rule, sampling=sampling, optimizer=optimizer, train=train, **model)
    if check_source:
        _check_weights_source(settings)
    return settings


def _resolved_source(key: str, spec: str, fetch: bool) -> str:
    """The local path (HF directory or .gguf file) a model_dir names (`data.model_sources`): a named
    model is fetched on first use, a hub id comes from the hub or its cache. Settings hold this
    path; the config snapshot keeps what the user wrote. Without `fetch` (a saved run's settings),
    an unresolvable source stays as written."""
    try:
        return resolve_model_source(spec, fetch=fetch).path
    except ModelSourceError as err:
        if not fetch:
            return spec
        raise _fail(key, spec, err.reason) from None


def _check_weights_source(p: PolicySettings) -> None:
    """A model source resolves (see `_resolved_source`); a large preset is never randomly
    initialised by accident."""
    if p.model_dir:
        return
    try:
        cfg = preset(p.preset)
    except KeyError as e:
        raise _fail(f"{p.name}.preset", p.preset, str(e.args[0])) from None
    if cfg.num_params() >= RANDOM_INIT_LIMIT and not p.allow_random_init:
        raise ConfigError(
            f"config.{p.name}.model_dir is empty, so the {p.preset} preset would start from random "
            f"{cfg.num_params() / 1e9:.1f}B-parameter weights; pass --config.{p.name}.model_dir=/path/to/"
            f"Qwen2.5-Instruct (the paper's setup), or --config.{p.name}.allow_random_init=True to train "
            "from random weights")


def _shared_source(agent: Mapping[str, Any], simulator: Mapping[str, Any]) -> dict[str, Any]:
    """With `share_agent_init` the simulator starts from the agent's weights, so it takes the
    agent's model source (model_dir, preset, allow_random_init); a different one is a conflict."""
    if simulator.get("model_dir") and simulator["model_dir"] != agent.get("model_dir"):
        raise ConfigError("config.simulator.model_dir is set but simulator.share_agent_init=True starts the simulator "
                          "from the agent's weights; drop it or pass --config.simulator.share_agent_init=False")
    if not simulator.get("model_dir") and not agent.get("model_dir") and simulator.get("preset") != agent.get("preset"):
        raise ConfigError(f"config.simulator.preset={simulator.get('preset')!r} differs from agent.preset="
                          f"{agent.get('preset')!r} but simulator.share_agent_init=True starts the simulator from the "
                          "agent's weights; make them equal or pass --config.simulator.share_agent_init=False")
    return {key: agent[key] for key in ("model_dir", "preset", "allow_random_init") if key in agent}


def _build(tree: dict[str, Any], num_devices: int | None) -> RunConfig:
    top = {"seed", "mode", "epochs", "mesh", "allow_config_change", "agent", "simulator", "tokenizer_dir", "domain",
           "curriculum", "seeds_per_epoch", "variants_per_seed", "rollouts_per_task", "seed_selection",
           "static_variants_per_seed", "replay", "episodes", "warmstart", "checkpoint", "log", "preset_name",
           "new_tasks_per_epoch", "evaluation", "init_seed", "experience", "dreamgym"}
    unknown = sorted(set(tree) - top)
    if unknown:
        raise ConfigError(f"config: unknown key {unknown[0]!r} (known: {', '.join(sorted(top))})")
    scalars = {k: _check_type(k, tree.get(k, d), t) for k, d, t in (
        ("seed", None, int), ("mode", None, str), ("epochs", None, int), ("allow_config_change", False, bool),
        ("tokenizer_dir", "", str), ("seeds_per_epoch", None, int), ("variants_per_seed", None, int),
        ("rollouts_per_task", None, int), ("static_variants_per_seed", None, int), ("new_tasks_per_epoch", 0, int),
        ("init_seed", -1, int),
        ("preset_name", "custom", str))}
    _choice("mode", scalars["mode"], MODES)
    for key in ("epochs", "seeds_per_epoch", "variants_per_seed", "static_variants_per_seed"):
        _positive(key, scalars[key])
    _positive("new_tasks_per_epoch", scalars["new_tasks_per_epoch"], 0)
    _positive("init_seed", scalars["init_seed"], -1)
    if scalars["init_seed"] == -1:
        scalars["init_seed"] = scalars["seed"]
    _positive("rollouts_per_task", scalars["rollouts_per_task"], 2)  # GRPO advantages are relative in a group
    tokenizer_dir = scalars["tokenizer_dir"]
    if tokenizer_dir and not (os.path.isdir(tokenizer_dir) or (tokenizer_dir.endswith(".gguf") and
                                                              os.path.isfile(tokenizer_dir))):
        raise _fail("tokenizer_dir", tokenizer_dir, "is not a directory (or a .gguf file)")

    mesh = _section(MeshConfig, tree["mesh"], "mesh")
    if num_devices is not None:
        try:
            data, fsdp, _ = mesh.resolve(num_devices)
        except ValueError as e:
            raise ConfigError(f"config.mesh: {e}") from None
    else:
        data = fsdp = 1

    agent = _policy(tree["agent"], "agent", "grpo")
    simulator_tree = dict(tree["simulator"])
    share = _check_type("simulator.share_agent_init", simulator_tree.pop("share_agent_init", True), bool)
    if share:
        simulator_tree.update(_shared_source(tree["agent"], simulator_tree))
    simulator = _policy(simulator_tree, "simulator", "rwr")

    experience_tree = dict(tree.get("experience") or {})
    if not experience_tree.get("model_dir") and not experience_tree.get("preset"):  # "": the agent's source
        experience_tree.update({k: tree["agent"][k] for k in ("model_dir", "preset", "allow_random_init")})
    experience = _policy(experience_tree, "experience", "rwr", check_source=scalars["mode"] == "dreamgym")
    dreamgym = dreamgym_settings(tree.get("dreamgym") or {})

    domain = _section(DomainSettings, {**tree["domain"], "options": None}, "domain",
                      extra={"options": dict(tree["domain"].get("options") or {})})
    if not domain.name:
        raise ConfigError("config.domain.name is empty: pick a benchmark config such as configs/bfcl.py")
    _choice("domain.seed_order", domain.seed_order, SEED_ORDERS)
    _positive("domain.max_seeds", domain.max_seeds, 0)

    curriculum = _section(CurriculumConfig, tree["curriculum"], "curriculum")
    selection = _section(SeedSelectionSettings, tree["seed_selection"], "seed_selection")
    _choice("seed_selection.strategy", selection.strategy, SEED_STRATEGIES)
    _fraction("seed_selection.explore_fraction", selection.explore_fraction)
    replay = _section(ReplaySettings, tree["replay"], "replay")
    _positive("replay.tasks_per_epoch", replay.tasks_per_epoch, 0)
    for key in ("base_ratio", "historical_ratio"):
        if getattr(replay, key) < 0:
            raise _fail(f"replay.{key}", getattr(replay, key), "must be >= 0")
    if replay.tasks_per_epoch and replay.base_ratio + replay.historical_ratio <= 0:
        raise ConfigError("config.replay: base_ratio + historical_ratio must be > 0 when tasks_per_epoch > 0")
    episodes = _section(EpisodeSettings, tree["episodes"], "episodes")
    _positive("episodes.max_turns", episodes.max_turns)
    _positive("episodes.env_workers", episodes.env_workers, 0)
    if episodes.max_total_tokens < agent.sampling.max_prompt_len + agent.sampling.max_new_tokens:
        raise _fail("episodes.max_total_tokens", episodes.max_total_tokens,
                    "must be >= agent.sampling.max_prompt_len + max_new_tokens (a first turn must fit)")
    warmstart = _section(WarmstartSettings, tree["warmstart"], "warmstart")
    _choice("warmstart.simulator_target", warmstart.simulator_target, SIMULATOR_TARGETS)
    if warmstart.enabled:
        for key in ("agent_steps", "simulator_steps", "batch_size"):
            _positive(f"warmstart.{key}", getattr(warmstart, key))
        if warmstart.learning_rate <= 0:
            raise _fail("warmstart.learning_rate", warmstart.learning_rate, "must be > 0")
    _positive("warmstart.num_seeds", warmstart.num_seeds, 0)
    evaluation = _section(EvaluationSettings, tree.get("evaluation", {}),
                          "evaluation")
    if evaluation.split and evaluation.split not in SPLITS:
        raise _fail("evaluation.split", evaluation.split, f"must be '' (off) or one of {', '.join(SPLITS)}")
    _positive("evaluation.max_per_category", evaluation.max_per_category, 0)
    checkpoint = _section(CheckpointSettings, tree["checkpoint"], "checkpoint")
    _positive("checkpoint.keep", checkpoint.keep)
    _positive("checkpoint.every_epochs", checkpoint.every_epochs)
    log = _section(LogSettings, tree["log"], "log")
    _positive("log.samples_per_epoch", log.samples_per_epoch, 0)

    for p in (agent, simulator):
        rows = p.train.tasks_per_step * (scalars["rollouts_per_task"] if p.rule == "grpo" else 1)
        multiple = data * fsdp * p.train.micro_batches
        if p.rule == "grpo" and rows % multiple:
            raise ConfigError(
                f"config.{p.name}.train.tasks_per_step x rollouts_per_task = {rows} rows is not divisible by "
                f"mesh data x fsdp ({data} x {fsdp}) x {p.name}.train.micro_batches ({p.train.micro_batches})")
    return RunConfig(mesh=mesh, agent=agent, simulator=simulator, share_agent_init=share, domain=domain,
                     experience=experience, dreamgym=dreamgym,
                     curriculum=curriculum, seed_selection=selection, replay=replay, episodes=episodes, warmstart=warmstart,
                     evaluation=evaluation, checkpoint=checkpoint, log=log, snapshot=tree, **scalars)
