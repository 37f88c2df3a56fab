"""Warm-start of one policy only (`warmstart.<policy>_steps=0` leaves that policy as it is) and the
`interleaved` seed order (any prefix of the training seeds covers every category)."""

from __future__ import annotations

import collections

import jax
import numpy as np
import pytest

from genenv_jax.configs import base
from genenv_jax.configs import bfcl as bfcl_configs
from genenv_jax.configs.run_config import ConfigError, RunConfig
from genenv_jax.domains.bfcl import BFCLDomain
from genenv_jax.loop import CoEvolution
from genenv_jax.loop.context import interleaved


def _config(**overrides):
    c = bfcl_configs.get_config("tiny")
    base.apply(c, overrides)
    return RunConfig.from_config_dict(c, num_devices=jax.device_count())


def test_interleaved_order_takes_categories_in_turn_in_a_fixed_order():
    seeds = BFCLDomain(categories=("simple_python", "multiple", "irrelevance")).seeds("train")
    order = interleaved(seeds)
    assert sorted(t.task_id for t in order) == sorted(t.task_id for t in seeds)
    assert [t.category for t in order[:6]] == ["simple_python", "multiple", "irrelevance"] * 2
    assert collections.Counter(t.category for t in order[:30]) == {"simple_python": 10, "multiple": 10,
                                                                   "irrelevance": 10}
    again = interleaved(BFCLDomain(categories=("simple_python", "multiple", "irrelevance")).seeds("train"))
    assert [t.task_id for t in again] == [t.task_id for t in order]  # no run seed in it: every run alike


def test_warmstart_steps_may_be_zero_for_one_policy_not_both():
    config = _config(**{"warmstart.simulator_steps": 0})
    assert config.warmstart.simulator_steps == 0
    with pytest.raises(ConfigError, match="agent_steps \\+ simulator_steps must be >= 1"):
        _config(**{"warmstart.simulator_steps": 0, "warmstart.agent_steps": 0})
    with pytest.raises(ConfigError, match="warmstart.agent_steps"):
        _config(**{"warmstart.agent_steps": -1})


@pytest.mark.slow
def test_a_policy_with_zero_steps_starts_as_it_is(tmp_path):
    loop = CoEvolution(_config(**{"warmstart.agent_steps": 2, "warmstart.simulator_steps": 0}), tmp_path / "run")
    try:
        initial = loop.weights.initial()
        state = loop.fresh_state()
    finally:
        loop.environments.close()
        loop.checkpointer.close()
    assert set(loop.warmstart_metrics) == {"warmstart/agent_loss_first", "warmstart/agent_loss_last"}
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), state.simulator.params, initial[1])
    assert all(jax.tree.leaves(same))
    moved = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), state.agent.params, initial[0])
    assert not all(jax.tree.leaves(moved))


def test_spelled_targets_write_the_same_text_without_added_tokens():
    from genenv_jax.loop import learning
    from genenv_jax.loop.context import LoopContext, training_seeds
    from genenv_jax.text.chat_text import ChatText

    text = ChatText.load(None)
    tool_call = text.tokenizer.convert_tokens_to_ids("<tool_call>")
    rows = {}
    for spelled in (False, True):
        config = _config(**{"warmstart.spell_added_tokens": spelled})
        domain = BFCLDomain(categories=("simple_python",))
        ctx = LoopContext(config, domain, text, training_seeds(config, domain, text))
        rows[spelled] = learning.demonstration_row(ctx, ctx.train_seeds[0])
    plain, spelled = rows[False].response, rows[True].response
    assert tool_call in plain and tool_call not in spelled
    assert text.decode(plain) == text.decode(spelled) and text.decode(spelled).startswith("<tool_call>")
    assert spelled[:4] == [27, 14172, 13429, 29]  # "<", "tool", "_call", ">"
    assert rows[False].prompt == rows[True].prompt
    assert text.encode_spelled("no added tokens here") == text.encode("no added tokens here")
