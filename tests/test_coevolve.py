"""The co-evolution loop end to end on a toy domain: resume equality, modes, failures, config checks."""

import json

import jax
import numpy as np
import pytest

from configs import base
from genenv_jax import domains
from genenv_jax.coevolve import CoEvolution, NonFiniteLossError, validate_config
from genenv_jax.evaluation import load_run_agent


@pytest.fixture(autouse=True)
def toy_domain(monkeypatch):
    monkeypatch.setitem(domains.DOMAINS, "toy", "toy_domain:ToyDomain")


def toy_config(**overrides):
    c = base.get_config()
    c.domain.name = "toy"
    c.domain.options = {"num_seeds": 4}
    for model in (c.agent, c.simulator):
        model.update(preset="tiny", param_dtype="float32", dtype="float32", remat_policy="none")
    c.update(epochs=2, seeds_per_epoch=4, variants_per_seed=1, rollouts_per_task=2, grpo_tasks_per_step=4,
             rwr_tasks_per_step=4)
    c.agent_sampling.update(max_new_tokens=8, temperature=1.0, batch_size=16)
    c.simulator_sampling.update(max_new_tokens=8, temperature=1.0, batch_size=16)
    c.grpo.chunk_size = 16
    c.rwr.chunk_size = 16
    c.agent_optimizer.learning_rate = 1e-3
    c.simulator_optimizer.learning_rate = 1e-3
    c.curriculum.k_min = 0.5  # with 2 rollouts p_hat is 0, 0.5 or 1: let every task into the band
    c.replay.tasks_per_epoch = 2
    c.log.progress_bars = False
    for key, value in overrides.items():
        node = c
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value
    return c


def _params_equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_run(tmp_path):
    full = CoEvolution(toy_config(), tmp_path / "full")
    rows = full.run()
    assert [r["epoch"] for r in rows] == [0, 1]
    assert rows[0]["generated"] == 4 and rows[0]["tasks"] + sum(
        v for k, v in rows[0].items() if k.startswith("rejected/")) == 4
    assert "agent/loss" in rows[0] and np.isfinite(rows[0]["agent/loss"])
    assert (tmp_path / "full" / "curves.png").exists() and (tmp_path / "full" / "summary.md").exists()

    CoEvolution(toy_config(epochs=1), tmp_path / "split").run()  # stopped after epoch 0
    resumed = CoEvolution(toy_config(), tmp_path / "split")
    resumed.run()                                                 # restarts at epoch 1
    assert _params_equal(full.final_state.agent_params, resumed.final_state.agent_params)
    assert _params_equal(full.final_state.env_params, resumed.final_state.env_params)
    for name in ("d_train", "d_env"):
        assert full.pools[name].records() == resumed.pools[name].records(), name
    metrics = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [0, 1]
    assert any(r.get("simulator/steps", 0) > 0 for r in rows)  # RWR ran on in-band tasks

    # The evaluator reads the run's checkpointed agent (`--run_dir`).
    cfg, params, epoch = load_run_agent(tmp_path / "full")
    assert epoch == 1 and cfg == full.agent.cfg
    assert _params_equal(params, full.final_state.agent_params)


def test_random_mode_never_updates_the_simulator_and_rejections_are_counted(tmp_path):
    loop = CoEvolution(toy_config(mode="random", epochs=1, **{"domain.options": {"reject_all": True}}),
                       tmp_path / "run")
    before = jax.tree.map(np.asarray, loop._fresh_state().env_params)
    rows = loop.run()
    assert rows[0]["tasks"] == 0 and rows[0]["rejected/no_number"] == 4  # an all-rejected epoch completes
    assert rows[0]["replayed_tasks"] == 2 and "agent/loss" in rows[0]     # replayed seeds still train the agent
    assert _params_equal(before, loop.final_state.env_params)
    assert loop.pools["d_env"].epochs == [0] and loop.pools["d_env"].num_records() == 0


def test_non_finite_loss_stops_before_saving(tmp_path, monkeypatch):
    loop = CoEvolution(toy_config(epochs=1), tmp_path / "run")
    real_update = loop.agent.update

    class PoisonedStep:  # the real step, with its loss replaced by NaN
        def __getattr__(self, name):
            return getattr(real_update, name)

        def __call__(self, params, opt_state, batch):
            params, opt_state, metrics = real_update(params, opt_state, batch)
            return params, opt_state, {**metrics, "loss": float("nan")}

    monkeypatch.setattr(loop.agent, "update", PoisonedStep())
    with pytest.raises(NonFiniteLossError, match="GRPO: non-finite loss nan"):
        loop.run()
    assert loop.checkpointer.latest_epoch() is None


@pytest.mark.parametrize("key,value,message", [
    ("curriculum.alpha", 1.5, "alpha"),
    ("mode", "sometimes", "config.mode"),
    ("rollouts_per_task", 1, "rollouts_per_task"),
    ("grpo_tasks_per_step", 3, "not divisible by mesh data x fsdp"),
])
def test_config_validation_names_the_problem(key, value, message):
    c = toy_config(**{key: value, "mesh.data": 2, "mesh.fsdp": 4})
    with pytest.raises(ValueError, match=message):
        validate_config(c, num_devices=8)


def test_locked_config_rejects_unknown_keys():
    c = base.lock(toy_config())
    with pytest.raises(AttributeError, match="not_a_key"):
        c.grpo.not_a_key = 1


@pytest.mark.slow
def test_loop_runs_from_hf_model_dirs(tmp_path):
    """The paper's setup: agent and simulator weights from (different) HF dirs, tokenizer from the agent's."""
    from genenv_jax import tokenization
    from genenv_jax.models import init_params, preset, save_hf

    cfg = preset("tiny")
    dirs = {}
    for name, seed in (("agent", 0), ("simulator", 1)):
        dirs[name] = tmp_path / name
        save_hf(cfg, init_params(cfg, jax.random.key(seed)), dirs[name])
    tokenization.load_tokenizer().save_pretrained(dirs["agent"])
    c = toy_config(epochs=1, **{"agent.model_dir": str(dirs["agent"]), "simulator.model_dir": str(dirs["simulator"]),
                                "simulator.share_agent_init": False})
    loop = CoEvolution(c, tmp_path / "run")
    assert tokenization.has_tokenizer_files(dirs["agent"]) and loop.tokenizer.name_or_path == str(dirs["agent"])
    initial_agent, initial_env = loop._initial_weights()
    assert _params_equal(initial_agent, init_params(cfg, jax.random.key(0)))
    assert _params_equal(initial_env, init_params(cfg, jax.random.key(1)))
    rows = loop.run()
    assert rows[0]["tasks"] > 0 and np.isfinite(rows[0]["agent/loss"])
