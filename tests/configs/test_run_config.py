"""The typed run config: every bad value refused up front with one line naming the key; the
command line loads configs from anywhere and turns expected failures into one line + exit 2."""

import json
import os
import subprocess
import sys

import pytest

from genenv_jax.configs import bfcl
from genenv_jax.configs.experience_settings import REMOVED_EXPERIENCE_KEYS
from genenv_jax.loop.experience import experience_key
from genenv_jax.loop.persistence import config_changes
from genenv_jax.configs.run_config import ConfigError, RunConfig, saved_policy_settings
from tests.support import REPO
from tests.support.loop_configs import toy_config, toy_config_dict


def test_packaged_configs_validate_and_derive_shared_values():
    tiny = RunConfig.from_config_dict(bfcl.get_config("tiny"), num_devices=8)
    assert tiny.agent.train.loss.temperature == tiny.agent.sampling.temperature == 0.7
    assert tiny.simulator.train.loss.temperature == tiny.simulator.sampling.temperature == 0.5
    assert tiny.curriculum.k_min == 0.25 and "alpha" not in tiny.domain.options and "band" not in tiny.domain.options
    with pytest.raises(ConfigError, match=r"--config.agent.model_dir=.*allow_random_init"):
        RunConfig.from_config_dict(bfcl.get_config("7b"), num_devices=8)


def test_paper_setup_needs_only_the_agent_model_dir_when_the_simulator_shares_it(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    c = bfcl.get_config("7b")
    c.agent.model_dir = str(tmp_path)
    run = RunConfig.from_config_dict(c, num_devices=8)
    assert run.share_agent_init and run.simulator.model_dir == run.agent.model_dir == str(tmp_path)
    c.simulator.model_dir = "/elsewhere"
    with pytest.raises(ConfigError, match=r"simulator.model_dir is set but simulator.share_agent_init=True"):
        RunConfig.from_config_dict(c, num_devices=8)
    tiny = bfcl.get_config("tiny")
    tiny.simulator.preset = "micro"
    with pytest.raises(ConfigError, match=r"simulator.preset='micro' differs from agent.preset='tiny'"):
        RunConfig.from_config_dict(tiny, num_devices=8)
    tiny.simulator.share_agent_init = False
    assert RunConfig.from_config_dict(tiny, num_devices=8).simulator.preset == "micro"


@pytest.mark.parametrize("name", ["bfcl", "bfcl_multiturn", "alfworld", "api_bank", "bamboogle", "travelplanner"])
@pytest.mark.parametrize("preset", ["7b", "tiny"])
def test_every_benchmark_config_validates_and_its_options_build_the_domain(name, preset, tmp_path):
    """Each packaged benchmark config, both presets: the typed config accepts it and the domain's
    constructor accepts its options (data is read later, on first use)."""
    import importlib

    from genenv_jax.domains import get_domain

    c = importlib.import_module(f"genenv_jax.configs.{name}").get_config(preset)
    if preset == "7b":
        (tmp_path / "config.json").write_text("{}")
        c.agent.model_dir = str(tmp_path)
    run = RunConfig.from_config_dict(c, num_devices=8 if preset == "7b" else 1)   # tiny: a laptop's one CPU device
    assert run.domain.name == name
    if name == "alfworld":
        pytest.importorskip("alfworld", reason="the optional ALFWorld engine is not installed (make alfworld)")
    get_domain(name, **dict(run.domain.options))


@pytest.mark.parametrize("key,value,message", [
    ("curriculum.alpha", 1.5, r"config.curriculum.alpha=1.5: must lie in \(0, 1\)"),
    ("mode", "sometimes", r"config.mode='sometimes': expected one of genenv, random, static"),
    ("rollouts_per_task", 1, r"config.rollouts_per_task=1: must be >= 2"),
    ("agent.train.tasks_per_step", 3, r"config.agent.train.tasks_per_step x rollouts_per_task = 6 rows"),
    ("checkpoint.every_epochs", 0, r"config.checkpoint.every_epochs=0: must be >= 1"),
    ("checkpoint.keep", 0, r"config.checkpoint.keep=0: must be >= 1"),
    ("seed_selection.explore_fraction", 2.0, r"config.seed_selection.explore_fraction=2.0: must lie in \[0, 1\]"),
    ("agent.sampling.temperature", float("nan"), r"config.agent.sampling.temperature=nan: must be a finite number"),
    ("simulator.optimizer.learning_rate", float("nan"), r"config.simulator.optimizer.learning_rate=nan: must be a finite"),
    ("agent.optimizer.learning_rate", 0.0, r"config.agent.optimizer.learning_rate=0.0: must be > 0"),
    ("agent.sampling.top_p", 0.0, r"config.agent.sampling.top_p=0.0: must lie in \(0, 1\]"),
    ("agent.train.loss.kl_estimator", "k9", r"config.agent.train.loss.kl_estimator='k9': expected one of k1, k2, k3"),
    ("warmstart.simulator_target", "longest", r"config.warmstart.simulator_target='longest'"),
    ("agent.model_dir", "/no/such/dir", r"config.agent.model_dir='/no/such/dir': is not a directory"),
    ("agent.dtype", "int8", r"config.agent.dtype='int8': expected one of"),
    ("domain.max_seeds", -1, r"config.domain.max_seeds=-1: must be >= 0"),
    ("domain.name", "", r"config.domain.name is empty"),
    ("episodes.max_total_tokens", 100, r"config.episodes.max_total_tokens=100: must be >= agent.sampling.max_prompt_len"),
    ("episodes.env_workers", -1, r"config.episodes.env_workers=-1: must be >= 0"),
    ("agent.attention", "flash", r"config.agent.attention='flash': expected one of auto, einsum, query_blocks, blockwise"),
    ("new_tasks_per_epoch", -1, r"config.new_tasks_per_epoch=-1: must be >= 0"),
    ("init_seed", -2, r"config.init_seed=-2: must be >= -1"),
    ("evaluation.split", "holdout", r"config.evaluation.split='holdout': must be '' \(off\) or one of train"),
    ("evaluation.max_per_category", -1, r"config.evaluation.max_per_category=-1: must be >= 0"),
    # the learning rules', the optimizer's, the curriculum's and the mesh's keys: declared like the rest
    ("agent.train.loss.clip_high", -1.0, r"^config.agent.train.loss.clip_high=-1.0: must be >= 0$"),
    ("simulator.train.loss.kl_threshold", 0.0, r"^config.simulator.train.loss.kl_threshold=0.0: must be > 0$"),
    ("agent.train.loss.importance_sampling_level", "sequence",
     r"^config.agent.train.loss.importance_sampling_level='sequence': GSPO aggregates per sequence"),
    ("agent.optimizer.schedule", "cosine",
     r"^config.agent.optimizer.total_steps=None: schedule 'cosine' needs total_steps > warmup_steps \(0\)$"),
    ("simulator.optimizer.grad_clip", -1.0, r"^config.simulator.optimizer.grad_clip=-1.0: must be >= 0$"),
    ("curriculum.granularity", "episode", r"^config.curriculum.granularity='episode': expected one of variant, seed_batch$"),
    ("curriculum.beta", 0.0, r"^config.curriculum.beta=0.0: must be a finite number > 0$"),
    ("mesh.tensor", 0, r"^config.mesh.tensor=0: must be >= 1, or -1 \(the rest of the devices\)$"),
    ("warmstart.batch_size", 0, r"^config.warmstart.batch_size=0: must be >= 1$"),
    ("experience.optimizer.learning_rate", 0.0, r"^config.experience.optimizer.learning_rate=0.0: must be > 0$"),
    ("experience.train.loss.chunk_size", 0, r"^config.experience.train.loss.chunk_size=0: must be >= 1$"),
])
def test_bad_values_are_refused_before_any_work_naming_the_key(key, value, message):
    c = toy_config_dict(**{key: value, "mesh.data": 2, "mesh.fsdp": 4})
    with pytest.raises(ConfigError, match=message) as info:
        RunConfig.from_config_dict(c, num_devices=8)
    assert "\n" not in str(info.value)


def test_unknown_keys_are_named():
    c = toy_config_dict().to_dict()
    c["agent"]["train"]["loss"]["temprature"] = 1.0
    with pytest.raises(ConfigError, match=r"config.agent.train.loss: unknown key 'temprature'"):
        RunConfig.from_config_dict(c)
    c = toy_config_dict().to_dict()
    c["agent"]["train"]["loss"]["temperature"] = 1.0  # the loss temperature is the sampling temperature
    with pytest.raises(ConfigError, match="unknown key 'temperature'"):
        RunConfig.from_config_dict(c)


def test_config_changes_separate_safe_from_meaning_changing_keys():
    old, new = toy_config().snapshot, toy_config(epochs=5, seed=3, **{"curriculum.alpha": 0.3}).snapshot
    changes = {key: safe for key, _, _, safe in config_changes(old, new)}
    assert changes == {"epochs": True, "seed": False, "curriculum.alpha": False}


def test_a_run_saved_before_pad_per_step_existed_resumes_unchanged():
    new = toy_config().snapshot
    old = json.loads(json.dumps(new))
    for policy in ("agent", "simulator"):
        del old[policy]["train"]["pad_per_step"]
    assert config_changes(old, new) == []
    turned_on = toy_config(**{"agent.train.pad_per_step": True}).snapshot
    assert [(k, safe) for k, _, _, safe in config_changes(old, turned_on)] == [("agent.train.pad_per_step", False)]


def test_a_run_saved_with_the_experience_keys_read_by_nothing_resumes_unchanged():
    """Until 2026-12 the experience section copied a whole policy section; a run saved then holds
    those keys. They were read by nothing, so their saved values are ignored, whatever they were; the
    experience model's cached weights keep their key; the saved settings read as before."""
    new = toy_config().snapshot
    old = json.loads(json.dumps(new))
    for key, value in REMOVED_EXPERIENCE_KEYS.items():
        *parents, leaf = key.split(".")
        node = old["experience"]
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    assert config_changes(old, new) == []
    assert experience_key(old, 0, []) == experience_key(new, 0, [])
    assert saved_policy_settings(old, "experience") == saved_policy_settings(new, "experience")
    old["experience"]["optimizer"]["b1"] = 0.5  # a value no run ever read
    assert config_changes(old, new) == []


def test_the_experience_section_holds_what_the_experience_model_reads():
    run = toy_config(**{"experience.optimizer.learning_rate": 3e-3, "experience.train.loss.chunk_size": 64,
                        "experience.train.micro_batches": 2, "experience.sampling.temperature": 0.5})
    e = run.experience
    assert (e.name, e.rule, e.optimizer.learning_rate, e.train.micro_batches) == ("experience", "rwr", 3e-3, 2)
    assert (e.train.loss.chunk_size, e.train.loss.temperature, e.lora.enabled) == (64, 0.5, False)
    assert (e.preset, e.model_dir) == (run.agent.preset, run.agent.model_dir)  # "": the agent's source
    tree = toy_config_dict().to_dict()
    tree["experience"]["optimizer"]["b1"] = 0.95
    with pytest.raises(ConfigError, match=r"^config.experience.optimizer.b1: the experience model has no such key"):
        RunConfig.from_config_dict(tree)


def _main(*args, cwd):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "genenv_jax.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_command_line_failures_are_one_line_from_any_directory(tmp_path):
    config = f"{REPO}/configs/bfcl.py"
    runs = {
        "7b without model dir": _main(f"--config={config}", f"--workdir={tmp_path}/a", cwd=tmp_path),
        "unknown key": _main(f"--config={config}:tiny", "--config.nonsense=1", cwd=tmp_path),
        "nan temperature": _main("--config=bfcl:tiny", "--config.agent.sampling.temperature=nan",
                                 f"--workdir={tmp_path}/b", cwd=tmp_path),
        "bad preset name": _main(f"--config={config}:huge", cwd=tmp_path),
    }
    expected = {
        "7b without model dir": "--config.agent.model_dir=",
        "unknown key": "unknown config key 'nonsense'",
        "nan temperature": "config.agent.sampling.temperature=nan: must be a finite number",
        "bad preset name": "unknown bfcl preset 'huge'",
    }
    for name, proc in runs.items():
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (name, proc.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("genenv_jax: error: "), (name, proc.stderr[-2000:])
        assert expected[name] in lines[0], (name, lines[0])
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing was started


def test_wrong_types_in_a_plain_dict_config_are_named():
    c = toy_config_dict().to_dict()
    c["epochs"] = "3"
    with pytest.raises(ConfigError, match=r"config.epochs='3': must be int"):
        RunConfig.from_config_dict(c)


# The GenEnv reference code's values (docs/rl.md "The reference preset" gives each one's file and line).
REFERENCE_VALUES = {
    "agent.train.loss.clip_low": 0.2, "agent.train.loss.clip_high": 0.2, "agent.train.loss.dual_clip": 3.0,
    "agent.train.loss.kl_coef": 1e-3, "agent.train.loss.kl_estimator": "k3", "agent.train.loss.kl_clamp": 10.0,
    "agent.train.loss.entropy_coef": 1e-3, "agent.train.loss.aggregation": "token_mean",
    "agent.train.loss.advantage": "grpo", "agent.train.loss.std_ddof": 1, "agent.train.loss.adv_eps": 1e-6,
    "agent.optimizer.learning_rate": 1e-6, "agent.optimizer.schedule": "constant", "agent.optimizer.warmup_steps": 0,
    "agent.optimizer.grad_clip": 1.0, "agent.train.tasks_per_step": 16, "agent.train.passes": 1,
    "agent.sampling.temperature": 1.0, "agent.sampling.top_k": 0, "agent.sampling.top_p": 1.0,
    "agent.sampling.max_new_tokens": 512, "agent.sampling.max_prompt_len": 4096, "rollouts_per_task": 8,
    "curriculum.p_hat_samples": 4, "curriculum.alpha": 0.5, "curriculum.beta": 2.0, "seeds_per_epoch": 64,
    "simulator.sampling.temperature": 1.0, "simulator.sampling.max_new_tokens": 8192, "epochs": 20,
}


def test_reference_preset_carries_the_reference_codes_values():
    c = bfcl.get_config("reference")
    c.agent.allow_random_init = c.simulator.allow_random_init = True
    config = RunConfig.from_config_dict(c)
    for key, want in REFERENCE_VALUES.items():
        node = config
        for part in key.split("."):
            node = getattr(node, part)
        assert node == want, f"{key}: {node!r} != reference {want!r}"
    assert config.agent.preset == config.simulator.preset == "qwen2.5-7b" and config.mode == "genenv"
