"""Variants by name (`rl.registry`): the registered advantage estimators and policy losses are
exactly today's allowed values; a variant registered in a test is accepted by the config and used
by the code that dispatches on it (credit, the simulator's update, the policy's step); an unknown
name fails in one line that lists the registered ones."""

import types

import numpy as np
import pytest

from genenv_jax import rl
from genenv_jax.configs.run_config import ConfigError
from genenv_jax.configs.settings import loss_class
from genenv_jax.domains.base import Task
from genenv_jax.episodes import Episode
from genenv_jax.loop import learning
from genenv_jax.loop.credit import group_credits
from genenv_jax.loop.epoch_tasks import RolloutGroup
from genenv_jax.rl.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, Credits, Registry
from tests.support.loop_configs import toy_config


def test_registered_sets_are_todays_allowed_values():
    assert ADVANTAGE_ESTIMATORS.names() == ("grpo", "gigpo")
    assert [ADVANTAGE_ESTIMATORS.get(n).per_turn for n in ("grpo", "gigpo")] == [False, True]
    assert set(POLICY_LOSSES.names()) == {"grpo", "rwr"}
    grpo, rwr = POLICY_LOSSES.get("grpo"), POLICY_LOSSES.get("rwr")
    assert (grpo.config, grpo.make_step, grpo.grouped) == (rl.GRPOConfig, rl.make_grpo_step, True)
    assert (rwr.config, rwr.make_step, rwr.grouped) == (rl.RWRConfig, rl.make_rwr_step, False)
    assert loss_class("grpo") is rl.GRPOConfig and loss_class("rwr") is rl.RWRConfig
    assert rl.GRPOConfig(kl_coef=0.0).needs_reference is False and rl.GRPOConfig().needs_reference is True


def test_unknown_names_fail_in_one_line_listing_the_registered_ones():
    with pytest.raises(ValueError) as err:
        POLICY_LOSSES.get("ppo")
    assert str(err.value) == "unknown policy loss 'ppo' (registered: grpo, rwr)"
    with pytest.raises(ValueError, match=r"^unknown advantage estimator 'rloo' \(registered: grpo, gigpo\)$"):
        ADVANTAGE_ESTIMATORS.get("rloo")
    with pytest.raises(ValueError, match=r"^GRPOConfig.advantage='rloo': expected one of grpo, gigpo$"):
        rl.GRPOConfig(advantage="rloo")
    with pytest.raises(ConfigError) as err:
        toy_config(**{"agent.train.loss.advantage": "rloo"})
    assert str(err.value) == "config.agent.train.loss.advantage='rloo': expected one of grpo, gigpo"
    with pytest.raises(ConfigError) as err:
        toy_config(**{"simulator.train.objective": "ppo"})
    assert str(err.value) == "config.simulator.train.objective='ppo': expected one of grpo, rwr"
    with pytest.raises(ValueError, match="already registered"):
        rl.register_advantage("grpo")(lambda batch, loss: None)
    assert Registry("thing").problem("x") == "unknown thing 'x' (registered: )"


@pytest.fixture
def reward_estimator():
    """A toy estimator for one test: each episode's advantage is twice its reward, with one metric
    (over the groups an update trains on)."""
    @rl.register_advantage("twice_reward", summarise=lambda groups: {"agent/twice_reward_groups": float(len(groups))})
    def twice_reward(batch, loss):
        return Credits(2.0 * batch.rewards)
    yield twice_reward
    ADVANTAGE_ESTIMATORS.remove("twice_reward")


def _group(rewards):
    task = Task(domain="toy", task_id="t", category="c", prompt={}, verifier={})
    episodes = [Episode(task, k, [1], [], tokens=[5, 5], loss_mask=[1.0, 1.0], logprobs=[0.0, 0.0], states=["s"],
                        turns=[{"agent_tokens": 2, "finish": "stop", "calls_ok": True}], reward=r)
                for k, r in enumerate(rewards)]
    return RolloutGroup(task, episodes)


def test_a_registered_estimator_is_accepted_by_the_config_and_used_by_the_credit(reward_estimator):
    run = toy_config(**{"agent.train.loss.advantage": "twice_reward"})
    assert run.agent.train.loss.advantage == "twice_reward"
    credits, metrics = group_credits([_group([1.0, 0.0]), _group([0.5, 0.5])], 2, run.agent.train.loss, 8)
    np.testing.assert_array_equal(credits[0].advantages, [2.0, 0.0])
    np.testing.assert_array_equal(credits[1].advantages, [1.0, 1.0])
    assert credits[1].token_advantages is None and credits[1].informative
    assert metrics == {"agent/twice_reward_groups": 2.0}
    ADVANTAGE_ESTIMATORS.remove("twice_reward")
    with pytest.raises(ValueError, match="expected one of grpo, gigpo$"):
        rl.GRPOConfig(advantage="twice_reward")
    rl.register_advantage("twice_reward")(reward_estimator)  # for the fixture's removal


@pytest.fixture
def copied_loss():
    """RWR registered again as 'rwr_copy' (not grouped) and GRPO as 'grpo_copy' (grouped) for one test."""
    rl.register_policy_loss("rwr_copy", config=rl.RWRConfig, grouped=False)(rl.make_rwr_step)
    rl.register_policy_loss("grpo_copy", config=rl.GRPOConfig, grouped=True)(rl.make_grpo_step)
    yield
    POLICY_LOSSES.remove("rwr_copy")
    POLICY_LOSSES.remove("grpo_copy")


def test_a_registered_policy_loss_is_a_simulator_objective_with_its_own_section(copied_loss):
    run = toy_config(**{"simulator.train.objective": "rwr_copy", "simulator.train.rwr_copy.reward_lambda": 2.5})
    assert run.simulator.rule == "rwr_copy" and run.simulator.train.loss == rl.RWRConfig(reward_lambda=2.5)
    with pytest.raises(ConfigError, match=r"variants_per_seed=1: must be >= 2 with simulator.train.objective=grpo_copy"):
        toy_config(**{"simulator.train.objective": "grpo_copy"})
    grouped = toy_config(**{"simulator.train.objective": "grpo_copy", "variants_per_seed": 2})
    assert isinstance(grouped.simulator.train.loss, rl.GRPOConfig)


@pytest.mark.parametrize("objective, pipeline", [("rwr", "update_rwr"), ("grpo", "update_simulator_grpo"),
                                                 ("rwr_copy", "update_rwr"), ("grpo_copy", "update_simulator_grpo")])
def test_the_simulators_update_follows_the_registered_losss_grouping(copied_loss, monkeypatch, objective, pipeline):
    called = []
    for name in ("update_rwr", "update_simulator_grpo"):
        monkeypatch.setattr(learning, name, lambda *args, name=name: called.append(name) or (None, {}))
    ctx = types.SimpleNamespace(config=types.SimpleNamespace(
        simulator_objective=types.SimpleNamespace(objective=objective)))
    learning.update_simulator(ctx, None, None, [], 0)
    assert called == [pipeline]


def test_the_policys_step_is_built_by_its_rules_registered_builder():
    from genenv_jax.loop.policy import build_policy
    from genenv_jax.parallel import make_mesh
    built = []

    @rl.register_policy_loss("rwr_recorded", config=rl.RWRConfig, grouped=False)
    def make_recorded_step(cfg, optimizer, loss, **kwargs):
        built.append(loss)
        return "the rwr_recorded step"

    try:
        run = toy_config(num_devices=8, **{"simulator.train.objective": "rwr_recorded"})
        simulator = build_policy(run.simulator, make_mesh(run.mesh), None, warmstart_lr=None)
    finally:
        POLICY_LOSSES.remove("rwr_recorded")
    assert simulator.update == "the rwr_recorded step" and built == [run.simulator.train.loss]
    assert simulator.needs_reference == run.simulator.train.loss.needs_reference
