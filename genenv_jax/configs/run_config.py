"""The typed run config: the ConfigDict validated once, at the edge, into frozen dataclasses.

`RunConfig.from_config_dict(cd)` checks every key before any work starts and raises `ConfigError`
with one line naming the key (`config.agent.sampling.temperature=nan: must be a finite number`).
Inside the loop only these dataclasses are read. Every key is declared once, with its default, doc
and allowed values (`core.config_checks.setting`): the top-level keys here, the sections in
`settings.py`, the experience model's in `experience_settings.py`, mode=dreamgym's in
`dreamgym/settings.py`, the learning rules', the optimizer's and the curriculum's in `rl/`, the
mesh's in `parallel/`; docs/config.md lists them all (`python -m genenv_jax.tools.config_docs`).
`configs/base.py` builds the default ConfigDict from the same declarations. Values that must agree
are derived here, never copied: a policy's loss temperature is its sampling temperature; the
domain gets alpha and the band from `curriculum`.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any, Mapping

from genenv_jax.configs.experience_settings import ExperienceSettings, experience_section, without_removed_keys
from genenv_jax.configs.settings import (POLICY_DEFAULTS, POLICY_RULES, CheckpointSettings, DomainSettings,
                                         DynamicSamplingSettings, EpisodeSettings, EvaluationSettings, LogSettings,
                                         PolicySettings, ReplaySettings, SamplingSettings, SeedSelectionSettings,
                                         SimulatorObjectiveSettings, TrainSettings, WarmstartSettings, loss_class)
from genenv_jax.core.config_checks import (ConfigError, check_declared, check_type, defaults, failure, section, setting,
                                           to_dict)
from genenv_jax.data.model_sources import ModelSourceError, resolve_model_source
from genenv_jax.dreamgym.settings import DreamGymSettings
from genenv_jax.models import param_shapes, preset
from genenv_jax.models.lora import LoRAConfig
from genenv_jax.parallel import MeshConfig
from genenv_jax.rl import POLICY_LOSSES, OptimizerConfig
from genenv_jax.rl.curriculum import CurriculumConfig

MODES = ("genenv", "random", "static", "dreamgym")
SIMULATOR_FEEDBACK = ("results", "none")
# The simulator's train keys beyond a policy's own: its objective, and the GRPO loss `grpo` uses.
_OBJECTIVE_KEYS = tuple(f.name for f in dataclasses.fields(SimulatorObjectiveSettings))
# A preset at least this large is never randomly initialised unless asked for (`allow_random_init`).
RANDOM_INIT_LIMIT = 100_000_000

__all__ = ["ConfigError", "MODES", "PolicySettings", "RunConfig", "SamplingSettings", "TrainSettings",
           "policy_defaults", "saved_init_seed", "saved_policy_settings"]


def _tokenizer_dir(value: str) -> str | None:
    """'' or a directory (or a .gguf file)"""
    if value and not (os.path.isdir(value) or (value.endswith(".gguf") and os.path.isfile(value))):
        return "is not a directory (or a .gguf file)"
    return None


def _rollouts(value: int) -> str | None:
    """>= 2"""
    return None if value >= 2 else "must be >= 2"  # GRPO advantages are relative in a group


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a run reads, validated. `snapshot` is the JSON of the ConfigDict it came from."""

    seed: int = setting(0, "the run's seed (sampling, data order)", minimum=0)
    init_seed: int = setting(-1, "seed of the initial weights and the warm-start; -1: `seed` (runs that share it "
                                 "start from the same model and differ only in what the loop samples)", minimum=-1)
    mode: str = setting("genenv", "genenv | random (simulator never updated) | static (variants generated once) | "
                                  "dreamgym (the agent learns on an experience model's synthetic episodes)",
                        choices=MODES)
    epochs: int = setting(10, "epochs of the loop", minimum=1)
    mesh: MeshConfig = setting(factory=MeshConfig)
    allow_config_change: bool = setting(False, "resume with changed settings that alter the run's meaning")
    agent: PolicySettings = setting(in_tree=False)
    simulator: PolicySettings = setting(in_tree=False)
    share_agent_init: bool = setting(doc="the simulator starts from the agent's initial weights and model source "
                                         "(the paper's setup); its own model_dir must then be '' "
                                         "(config.simulator.share_agent_init)", in_tree=False)
    simulator_objective: SimulatorObjectiveSettings = setting(in_tree=False)  # config.simulator.train.objective, ...
    simulator_feedback: str = setting("results", "what the simulator's prompt says of the agent: results (its "
                                                 "recent success on the seed against alpha, and the direction "
                                                 "toward it: the paper's prompt) | none (the seed alone, direction "
                                                 "'similar': any aiming comes from training)",
                                      choices=SIMULATOR_FEEDBACK)
    tokenizer_dir: str = setting("", "'' -> the agent's model_dir, else the bundled Qwen2.5 tokenizer",
                                 check=_tokenizer_dir)
    experience: PolicySettings = setting(in_tree=False)  # mode=dreamgym: `ExperienceSettings.policy()`
    dreamgym: DreamGymSettings = setting(factory=DreamGymSettings)
    domain: DomainSettings = setting(factory=DomainSettings)
    curriculum: CurriculumConfig = setting(factory=CurriculumConfig)
    seeds_per_epoch: int = setting(64, "seeds the simulator writes variants of per epoch", minimum=1)
    variants_per_seed: int = setting(1, "variants asked of the simulator per seed", minimum=1)
    rollouts_per_task: int = setting(8, "agent episodes per task (the GRPO group)", check=_rollouts)
    new_tasks_per_epoch: int = setting(0, "0: the agent rolls out every valid new task; > 0: exactly this many "
                                          "(topped up with training seeds), so modes get equal agent data", minimum=0)
    seed_selection: SeedSelectionSettings = setting(factory=SeedSelectionSettings)
    static_variants_per_seed: int = setting(6, "mode=static: variants generated once, up front (paper: 6x)",
                                            minimum=1)
    replay: ReplaySettings = setting(factory=ReplaySettings)
    dynamic_sampling: DynamicSamplingSettings = setting(factory=DynamicSamplingSettings)
    episodes: EpisodeSettings = setting(factory=EpisodeSettings)
    warmstart: WarmstartSettings = setting(factory=WarmstartSettings)
    evaluation: EvaluationSettings = setting(factory=EvaluationSettings)
    checkpoint: CheckpointSettings = setting(factory=CheckpointSettings)
    log: LogSettings = setting(factory=LogSettings)
    preset_name: str = setting("custom", "the preset's name (the default workdir)", in_tree=False)
    snapshot: Mapping[str, Any] = dataclasses.field(compare=False, repr=False, default_factory=dict,
                                                    metadata={"in_tree": False})

    @classmethod
    def from_config_dict(cls, config: Any, num_devices: int | None = None) -> "RunConfig":
        """Validates `config` (a ConfigDict or nested dict); `num_devices` checks the mesh fits."""
        tree = to_dict(config)
        return _build(tree, num_devices)

    def default_workdir(self) -> str:
        return f"runs/{self.domain.name}-{self.preset_name}"

    def check_domain_registered(self) -> None:
        """Refuses a `domain.name` that is not a registered domain, before any work (the commands call
        this; code that builds a run around its own domain object, as the tests' toy domain, does not)."""
        from genenv_jax.domains import DOMAINS

        if self.domain.name not in DOMAINS:
            raise failure("domain.name", self.domain.name, f"not a registered domain ({', '.join(sorted(DOMAINS))})")

    def input_paths(self) -> dict[str, str]:
        """The paths the run reads, by config key: each policy's model source (resolved), the
        tokenizer, and the domain's path options (`*_dir`, `*_path`, `*_file`). The workdir must
        not equal or lie inside one of them (`core.errors.check_output_outside`): a run writes
        dozens of files into its workdir and rotates its checkpoints there."""
        paths = {f"config.{p.name}.model_dir": p.model_dir for p in (self.agent, self.simulator, self.experience)
                 if p.model_dir}
        if self.tokenizer_dir:
            paths["config.tokenizer_dir"] = self.tokenizer_dir
        for key, value in self.domain.options.items():
            if isinstance(value, str) and value and key.endswith(("_dir", "_path", "_file")):
                paths[f"config.domain.options.{key}"] = value
        return paths

    def shares_frozen_base(self) -> bool:
        """Whether the agent and the simulator train over one frozen base: both train LoRA adapters
        (their partitions' frozen part is the base), start from the same source (`share_agent_init`, or one model_dir)
        and have the same param tree (dtype and layout). The loop then holds the base once; the
        memory plan counts it once."""
        a, s = self.agent, self.simulator
        same_source = self.share_agent_init or (bool(a.model_dir) and a.model_dir == s.model_dir)
        return (a.lora.enabled and s.lora.enabled and same_source  # read off the config: no model source is opened
                and param_shapes(a.model_config()) == param_shapes(s.model_config()))


# The top-level keys that hold one value (the rest are sections or derived).
_SCALARS = tuple(f.name for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING)
_SECTIONS = {f.name: f.default_factory for f in dataclasses.fields(RunConfig)  # name -> its dataclass
             if f.default_factory is not dataclasses.MISSING and f.metadata.get("in_tree", True)}
_POLICIES = ("agent", "simulator", "experience")
_HINTS = typing.get_type_hints(RunConfig)


def _simulator_alternatives() -> tuple[str, ...]:
    """The registered policy losses other than the simulator's default rule (today: grpo): each may
    be its objective and has its own loss section, `simulator.train.<name>`."""
    return tuple(r for r in POLICY_LOSSES if r != POLICY_RULES["simulator"])


def policy_defaults(name: str) -> dict[str, Any]:
    """The default tree of one policy section (agent, simulator or experience). A loss section's
    temperature is not in the tree: it is the policy's sampling temperature."""
    if name == "experience":
        return defaults(ExperienceSettings, POLICY_DEFAULTS[name])
    tree = defaults(PolicySettings, POLICY_DEFAULTS[name])
    tree["train"]["loss"] = defaults(loss_class(POLICY_RULES[name]))
    if name == "simulator":
        tree["share_agent_init"] = True  # start from the agent's initial weights (the paper's setup)
        tree["train"] |= defaults(SimulatorObjectiveSettings)
        for rule in _simulator_alternatives():  # train.grpo: the loss of simulator.train.objective=grpo
            tree["train"][rule] = defaults(loss_class(rule))
    return tree


def run_defaults() -> dict[str, Any]:
    """The default tree of a whole run (what configs/base.py's ConfigDict holds)."""
    return defaults(RunConfig) | {name: policy_defaults(name) for name in _POLICIES}


# ----------------------------------------------------------------------------------------------
# The whole tree
# ----------------------------------------------------------------------------------------------
def saved_policy_settings(snapshot: Mapping[str, Any], name: str) -> PolicySettings:
    """A policy's settings from a run's saved config snapshot (e.g. to rebuild its model config); an
    experience section saved with the keys it no longer has (`REMOVED_EXPERIENCE_KEYS`) reads without them."""
    tree = {k: v for k, v in snapshot[name].items() if k != "share_agent_init"}
    if name == "experience":
        return _sourced(experience_section(without_removed_keys(tree)).policy(), check_source=False)
    rule = POLICY_RULES[name]
    if name == "simulator":
        tree, objective = _simulator_objective(tree, int(snapshot.get("variants_per_seed", 1)))
        rule = objective.objective
    return _policy(tree, name, rule, check_source=False)


def saved_init_seed(snapshot: Mapping[str, Any]) -> int:
    """The seed of a saved run's initial weights (`init_seed`, whose -1 means `seed`)."""
    init_seed = int(snapshot.get("init_seed", -1))
    return int(snapshot.get("seed", 0)) if init_seed == -1 else init_seed


def _policy(tree: Mapping[str, Any], name: str, rule: str, check_source: bool = True) -> PolicySettings:
    """One policy section: its sampling, optimizer and train sections (the loss takes the sampling
    temperature), its model keys, and its weights' source resolved and checked."""
    if not isinstance(tree, Mapping):
        raise failure(name, tree, "must be a section (a dict of keys)")
    sampling = section(SamplingSettings, tree.get("sampling", {}), f"{name}.sampling")
    optimizer = section(OptimizerConfig, tree.get("optimizer", {}), f"{name}.optimizer")
    train_tree = dict(tree.get("train", {}))
    # The simulator's GRPO objective trains with its `train.grpo` section (another registered loss with
    # `train.<its name>`); its RWR `train.loss` then waits unused.
    alternatives = _simulator_alternatives()
    losses = {"loss": train_tree.pop("loss", {}), **{r: train_tree.pop(r, None) for r in alternatives}}
    loss_key = rule if name == "simulator" and rule in alternatives else "loss"
    loss = section(loss_class(rule), losses[loss_key] or {}, f"{name}.train.{loss_key}", skip=("temperature",),
                   extra={"temperature": sampling.temperature})
    if getattr(loss, "norm_tokens", None) == 0:  # Dr. GRPO's constant L: the longest reply the policy samples
        loss = dataclasses.replace(loss, norm_tokens=sampling.max_new_tokens)
    if getattr(loss, "overlong_buffer", 0) > sampling.max_new_tokens:
        raise failure(f"{name}.train.{loss_key}.overlong_buffer", loss.overlong_buffer,
                      f"must be <= {name}.sampling.max_new_tokens ({sampling.max_new_tokens}), the reply cap it ends at")
    train = section(TrainSettings, train_tree, f"{name}.train", skip=("loss",), extra={"loss": loss})
    lora = section(LoRAConfig, tree.get("lora", {}), f"{name}.lora")
    settings = section(PolicySettings, tree, name, skip=("name", "rule"),
                       extra={"name": name, "rule": rule, "sampling": sampling, "optimizer": optimizer, "train": train,
                              "lora": lora})
    return _sourced(settings, check_source)


def _sourced(settings: PolicySettings, check_source: bool) -> PolicySettings:
    """A policy's settings with its model source resolved (`_resolved_source`) and, with
    `check_source`, checked (`_check_weights_source`)."""
    name = settings.name
    if settings.model_dir:
        settings = dataclasses.replace(settings, model_dir=_resolved_source(f"{name}.model_dir", settings.model_dir,
                                                                            fetch=check_source))
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
        raise failure(key, spec, err.reason) from None


def _check_weights_source(p: PolicySettings) -> None:
    """A model source resolves (see `_resolved_source`); a large preset is never randomly
    initialised by accident."""
    if p.model_dir:
        return
    try:
        cfg = preset(p.preset)
    except KeyError as e:
        raise failure(f"{p.name}.preset", p.preset, str(e.args[0])) from None
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
    """The whole tree: every declared key read and checked (`section`), then what involves several keys."""
    known = set(_SCALARS) | set(_SECTIONS) | set(_POLICIES)
    unknown = sorted(set(tree) - known)
    if unknown:
        raise ConfigError(f"config: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    scalars = {}
    for key in _SCALARS:  # a key left out takes its declared default
        scalars[key] = check_type(key, tree.get(key, fields[key].default), _HINTS[key])
        check_declared(key, scalars[key], fields[key].metadata)
    if scalars["init_seed"] == -1:
        scalars["init_seed"] = scalars["seed"]

    sections = {name: section(cls, tree.get(name, {}), name) for name, cls in _SECTIONS.items() if name != "domain"}
    mesh = sections["mesh"]
    if num_devices is not None:
        try:
            data, fsdp, _ = mesh.resolve(num_devices)
        except ValueError as e:
            raise ConfigError(f"config.mesh: {e}") from None
    else:
        data = fsdp = 1

    agent = _policy(tree["agent"], "agent", POLICY_RULES["agent"])
    simulator_tree = dict(tree["simulator"])
    share = check_type("simulator.share_agent_init", simulator_tree.pop("share_agent_init", True), bool)
    if share:
        simulator_tree.update(_shared_source(tree["agent"], simulator_tree))
    simulator_tree, objective = _simulator_objective(simulator_tree, scalars["variants_per_seed"])
    simulator = _policy(simulator_tree, "simulator", objective.objective)
    experience_tree = dict(tree.get("experience") or {})
    if not experience_tree.get("model_dir") and not experience_tree.get("preset"):  # "": the agent's source
        experience_tree.update({k: tree["agent"][k] for k in ("model_dir", "preset", "allow_random_init")})
    experience = _sourced(experience_section(experience_tree).policy(), check_source=scalars["mode"] == "dreamgym")

    domain_tree = dict(tree["domain"])
    options = dict(domain_tree.pop("options", None) or {})  # the domain's own keys: its constructor checks them
    domain = section(DomainSettings, domain_tree, "domain", skip=("options",), extra={"options": options})
    if not domain.name:
        raise ConfigError("config.domain.name is empty: pick a benchmark config such as configs/bfcl.py")
    replay, episodes, warmstart = sections["replay"], sections["episodes"], sections["warmstart"]
    if (replay.tasks_per_epoch or sections["dynamic_sampling"].enabled) and replay.base_ratio + replay.historical_ratio <= 0:
        raise ConfigError("config.replay: base_ratio + historical_ratio must be > 0 when tasks_per_epoch > 0 "
                          "or dynamic_sampling is enabled (its refills are drawn with these ratios)")
    if episodes.max_total_tokens < agent.sampling.max_prompt_len + agent.sampling.max_new_tokens:
        raise failure("episodes.max_total_tokens", episodes.max_total_tokens,
                      "must be >= agent.sampling.max_prompt_len + max_new_tokens (a first turn must fit)")
    if warmstart.enabled and warmstart.agent_steps + warmstart.simulator_steps < 1:
        raise failure("warmstart.agent_steps", warmstart.agent_steps,
                      "agent_steps + simulator_steps must be >= 1 when warmstart.enabled")
    if sections["curriculum"].p_hat_samples > scalars["rollouts_per_task"]:
        raise failure("curriculum.p_hat_samples", sections["curriculum"].p_hat_samples,
                      f"must be <= rollouts_per_task ({scalars['rollouts_per_task']}): p_hat uses the first "
                      "rollouts of each task's group")
    for p in (agent, simulator):
        group = scalars["rollouts_per_task"] if p.name == "agent" else scalars["variants_per_seed"]
        grouped = POLICY_LOSSES.get(p.rule).grouped  # rows are tasks x group size
        rows = p.train.tasks_per_step * (group if grouped else 1)
        multiple = data * fsdp * p.train.micro_batches
        if grouped and rows % multiple:
            raise ConfigError(
                f"config.{p.name}.train.tasks_per_step x {'rollouts_per_task' if p.name == 'agent' else 'variants_per_seed'}"
                f" = {rows} rows is not divisible by mesh data x fsdp ({data} x {fsdp}) x "
                f"{p.name}.train.micro_batches ({p.train.micro_batches})")
    return RunConfig(agent=agent, simulator=simulator, share_agent_init=share, simulator_objective=objective,
                     experience=experience, domain=domain, snapshot=tree, **sections, **scalars)


def _simulator_objective(tree: Mapping[str, Any], variants_per_seed: int
                         ) -> tuple[dict[str, Any], SimulatorObjectiveSettings]:
    """The simulator's section without its objective keys (its `train.grpo` loss stays for `_policy`)
    and the objective's settings."""
    tree = dict(tree)
    train = dict(tree.get("train", {}))
    objective = section(SimulatorObjectiveSettings, {k: train.pop(k) for k in _OBJECTIVE_KEYS if k in train},
                        "simulator.train")
    if POLICY_LOSSES.get(objective.objective).grouped and variants_per_seed < 2:
        raise failure("variants_per_seed", variants_per_seed, f"must be >= 2 with simulator.train.objective="
                      f"{objective.objective} "
                      "(a prompt's generations form the group its advantages are relative to)")
    tree["train"] = train
    return tree, objective
