"""LoRA in the co-evolution loop: one frozen base shared by the agent and the simulator, only
adapters trained and checkpointed, bit-equal resume, refusal to resume over another base."""

import jax
import numpy as np
import pytest

from genenv_jax.configs.run_config import ConfigError, RunConfig
from genenv_jax.evaluation import load_run_agent
from genenv_jax.loop import CoEvolution
from genenv_jax.models import lora as lora_lib
from genenv_jax.workdir.checkpoint_digests import tree_digest
from tests.support.loop_configs import toy_config, toy_config_dict

pytestmark = pytest.mark.usefixtures("toy_domain")  # conftest.py registers the toy domain

LORA = {"agent.lora.rank": 4, "simulator.lora.rank": 4, "agent.lora.alpha": 8.0, "simulator.lora.alpha": 8.0,
        "agent.lora.dropout": 0.05}  # the agent's steps drop adapter inputs: resume must still be bit-equal


def _equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.slow
def test_lora_policies_share_one_frozen_base_and_train_only_adapters(tmp_path):
    loop = CoEvolution(toy_config(epochs=1, **LORA), tmp_path / "run")
    state = loop.fresh_state()
    assert state.agent.frozen is state.simulator.frozen  # held once
    assert state.agent.reference is None and state.simulator.reference is None  # the base is the KL anchor
    assert set(state.agent.params["layers"]) == {"attn", "mlp"}
    assert all("_lora_" in k for block in state.agent.params["layers"].values() for k in block)
    base = jax.tree.map(np.asarray, state.agent.frozen)
    assert state.bases["agent"]["digest"] == state.bases["simulator"]["digest"] == tree_digest(base)
    rows = loop.run()
    final = loop.final_state
    assert np.isfinite(rows[0]["agent/loss"]) and rows[0]["agent/steps"] > 0
    assert _equal(final.agent.frozen, base)  # the base never moves
    assert not _equal(final.agent.params, state.agent.params)  # the adapters do
    saved = loop.checkpointer.metadata(0)
    assert set(saved["saved_items"]) == {"agent_params", "agent_opt_state", "simulator_params", "simulator_opt_state"}

    # The evaluator rebuilds the base, checks its digest and merges the run's adapters.
    cfg, params, epoch = load_run_agent(tmp_path / "run")
    assert epoch == 0 and cfg == loop.agent.cfg
    # The evaluator merges in one compiled program sharded over the devices, this test step by step:
    # the same float32 sums in another order (docs/reliability.md, "Float exactness audit").
    merged = lora_lib.merge(final.agent.frozen, final.agent.params, cfg.lora_scale)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6),
                 params, merged)


@pytest.mark.slow
def test_lora_resume_is_bit_equal_and_refuses_another_base(tmp_path):
    full = CoEvolution(toy_config(**LORA), tmp_path / "full")
    full.run()
    CoEvolution(toy_config(epochs=1, **LORA), tmp_path / "split").run()
    resumed = CoEvolution(toy_config(**LORA), tmp_path / "split")
    resumed.run()
    for name in ("agent", "simulator"):
        a, b = full.final_state.policy(name), resumed.final_state.policy(name)
        assert _equal(a.params, b.params) and _equal(a.opt_state, b.opt_state), name
    for name in ("d_train", "d_env"):
        assert full.pools[name].records() == resumed.pools[name].records(), name

    # Another base (a different init seed gives other random weights): one line with both digests.
    metrics_before = (tmp_path / "split" / "metrics.jsonl").read_text()
    other = CoEvolution(toy_config(epochs=3, init_seed=7, allow_config_change=True, **LORA), tmp_path / "split")
    with pytest.raises(ConfigError) as err:
        other.run()
    message = str(err.value)
    assert "\n" not in message and "agent's LoRA adapters of epoch 1 were trained on base" in message
    assert full.final_state.bases["agent"]["digest"] in message
    assert (tmp_path / "split" / "metrics.jsonl").read_text() == metrics_before  # nothing written is lost


def test_lora_warm_start_anchors_the_kl_to_the_warm_started_adapters(tmp_path):
    c = toy_config(epochs=1, **LORA, **{"warmstart.enabled": True, "warmstart.agent_steps": 2,
                                        "warmstart.simulator_steps": 2, "warmstart.batch_size": 4})
    loop = CoEvolution(c, tmp_path / "run")
    state = loop.fresh_state()
    assert state.warm_started and state.agent.reference is not None
    assert _equal(state.agent.reference, state.agent.params)  # a copy of the warm-started adapters
    b_leaves = [v for block in state.agent.params["layers"].values() for k, v in block.items() if k.endswith("_b")]
    assert any(np.abs(np.asarray(b)).max() > 0 for b in b_leaves)  # SFT moved B off zero


def test_mixed_lora_and_full_fine_tuning_keep_separate_weights(tmp_path):
    loop = CoEvolution(toy_config(epochs=1, **{"agent.lora.rank": 4, "agent.param_dtype": "bfloat16"}),
                       tmp_path / "run")
    state = loop.fresh_state()
    assert jax.tree.leaves(state.agent.frozen) and state.simulator.frozen == {}  # full fine-tuning: no frozen part
    assert state.simulator.reference is not None  # full fine-tuning: a copy of the initial weights
    assert {str(x.dtype) for x in jax.tree.leaves(state.agent.frozen)} == {"bfloat16"}  # the base in param_dtype
    assert {str(x.dtype) for x in jax.tree.leaves(state.agent.params)} == {"float32"}   # the adapters float32
    # The simulator starts from the agent's source: its float32 weights round to the agent's base.
    rounded = jax.tree.map(lambda x: np.asarray(x.astype(jax.numpy.bfloat16)).astype(np.float32), state.simulator.params)
    assert _equal(rounded, jax.tree.map(lambda x: np.asarray(x).astype(np.float32), state.agent.frozen))


def test_lora_config_keys_are_checked_at_the_edge():
    c = toy_config(**{"agent.lora.rank": 8, "agent.lora.targets": ("q,v",)})  # as `--config...targets=q,v` gives it
    assert c.agent.lora == lora_lib.LoRAConfig(rank=8, targets=("q", "v"))
    assert c.agent.model_config().lora_scale == 2.0 and c.agent.model_config().param_dtype == "float32"
    for key, value, expected in (("agent.lora.rank", -1, "config.agent.lora.rank=-1"),
                                 ("agent.lora.targets", ("q", "w"), r"^config.agent.lora.targets=\('q', 'w'\): \['w'\] are "
                                                                    "not projections"),
                                 ("simulator.lora.alpha", 0.0, r"^config.simulator.lora.alpha=0.0: must be a finite "
                                                               r"number > 0$"),
                                 ("agent.lora.dropout", 1.0, r"^config.agent.lora.dropout=1.0: must lie in \[0, 1\)$")):
        with pytest.raises(ConfigError, match=expected):
            toy_config(**{key: value})
    tree = toy_config_dict().to_dict()  # the experience model trains fully: its section has no lora keys
    tree["experience"]["lora"] = {"rank": 4}
    with pytest.raises(ConfigError, match=r"^config.experience.lora.rank: the experience model has no such key"):
        RunConfig.from_config_dict(tree)
