"""DAPO's dynamic sampling in the loop (`loop.dynamic_sampling`): uninformative groups are dropped
from GRPO and refilled, the budget and the extra rollouts are counted, and the loop runs with it
(and with GiGPO credit) end to end."""

import dataclasses
import types

import numpy as np
import pytest

from genenv_jax.domains.base import Task
from genenv_jax.episodes import Episode, EpisodeStats
from genenv_jax.loop import CoEvolution, dynamic_sampling, epoch_tasks
from genenv_jax.loop.epoch_tasks import EpochTask
from genenv_jax.loop.epoch_tasks import RolloutGroup
from genenv_jax.rl.registry import ADVANTAGE_ESTIMATORS
from tests.support.loop_configs import toy_config

pytestmark = pytest.mark.usefixtures("toy_domain")


def _group(name, rewards):
    task = Task(domain="toy", task_id=name, category="say", prompt={}, verifier={})
    episodes = [Episode(task, k, [1], [], tokens=[5], loss_mask=[1.0], logprobs=[0.0], states=["s"],
                        turns=[{"agent_tokens": 1, "finish": "stop", "calls_ok": True}], reward=r)
                for k, r in enumerate(rewards)]
    return RolloutGroup(task, episodes)


def _records(groups):
    """The epoch's records of rolled-out generated tasks."""
    return [EpochTask(epoch_tasks.GENERATED, g.task, rollouts=g) for g in groups]


def _trained(records):
    return [r.rollouts.task.task_id for r in records if r.trains_agent]


def _fake(monkeypatch, rounds_of_rewards):
    """Refill round r's rollouts get the given rewards; records what was asked for."""
    asked = []

    def rollouts(ctx, agent, weights, envs, records, epoch, refill_round=0):
        asked.append((refill_round, len(records)))
        scripted = rounds_of_rewards[refill_round - 1]
        # as many groups as scripted, even beyond what was asked (the update must still take no more)
        records.extend(EpochTask(epoch_tasks.REFILL, None) for _ in range(len(scripted) - len(records)))
        for i, (r, rewards) in enumerate(zip(records, scripted)):
            r.rollouts = _group(f"refill{refill_round}/{i}", rewards)
        return EpisodeStats()

    monkeypatch.setattr(dynamic_sampling, "rollouts", rollouts)
    monkeypatch.setattr(dynamic_sampling, "replay_tasks", lambda ctx, d_train, epoch, count, seed: [None] * count)
    return asked


def _context(**overrides):
    config = toy_config(**{"dynamic_sampling.enabled": True, **overrides})
    return types.SimpleNamespace(config=config), types.SimpleNamespace(settings=config.agent, place=lambda w: w)


def test_uninformative_groups_are_replaced_up_to_the_epochs_group_count(monkeypatch):
    ctx, agent = _context()
    records = _records([_group("a", [1, 0]), _group("b", [0, 0]), _group("c", [1, 1]), _group("d", [0, 1])])
    asked = _fake(monkeypatch, [[[1, 1], [0, 1]], [[1, 0], [1, 0], [0, 0]]])
    refills = dynamic_sampling.choose_training_groups(ctx, agent, None, None, records, None, 0)
    kept, m = _trained(records + refills.records), refills.metrics
    # Round 1 asks for the 2 missing groups and gets 1 informative one; round 2 asks for 1 more and
    # gets 2 (the first is kept: the update never trains on more groups than the epoch rolled out).
    assert asked == [(1, 2), (2, 1)]
    assert kept == ["a", "d", "refill1/1", "refill2/0"]
    assert len(refills.records) == 5 and all(r.origin == epoch_tasks.REFILL for r in refills.records)
    assert m["dynamic_sampling/rounds"] == 2 and m["dynamic_sampling/trained_groups"] == 4
    assert m["dynamic_sampling/dropped_groups"] == 2 + 1 + 1  # b, c; refill1/0; refill2/2
    assert m["dynamic_sampling/shortfall_groups"] == 0
    assert m["dynamic_sampling/extra_rollouts"] == 10 and m["agent/rollouts_total"] == 18


def test_the_round_cap_leaves_a_counted_shortfall(monkeypatch):
    ctx, agent = _context(**{"dynamic_sampling.max_rounds": 1})
    asked = _fake(monkeypatch, [[[0, 0], [1, 1]]])
    records = _records([_group("a", [0, 0]), _group("b", [0, 0])])
    refills = dynamic_sampling.choose_training_groups(ctx, agent, None, None, records, None, 0)
    kept, m = _trained(records + refills.records), refills.metrics
    assert asked == [(1, 2)] and kept == []
    assert m["dynamic_sampling/shortfall_groups"] == 2 and m["dynamic_sampling/refill_success_rate"] == 0.5


def test_the_advantage_filter_keeps_equal_rewards_with_step_credit(monkeypatch):
    """Equal rewards, different path lengths: DAPO's reward filter drops the group, the advantage
    filter under GiGPO keeps it (its shorter episode earns the larger discounted return)."""
    short = _group("g", [1, 1])
    long_ = short.episodes[1]
    long_.states, long_.tokens, long_.loss_mask = ["s", "t"], [5, 6, 5], [1.0, 0.0, 1.0]
    long_.turns = [{"agent_tokens": 1, "observation_tokens": 1}, {"agent_tokens": 1}]
    for flt, want in (("reward", [False]), ("advantage", [True])):
        ctx, agent = _context(**{"dynamic_sampling.filter": flt, "agent.train.loss.advantage": "gigpo"})
        assert dynamic_sampling.informative(ctx, agent, _records([short])) == want


def test_off_by_default_every_group_trains(monkeypatch):
    ctx = types.SimpleNamespace(config=toy_config())
    records = _records([_group("a", [0, 0])])
    assert dynamic_sampling.choose_training_groups(ctx, None, None, None, records, None, 0) == \
        dynamic_sampling.Refills()
    assert _trained(records) == ["a"]


@pytest.mark.slow
def test_loop_with_dynamic_sampling_and_gigpo_runs_and_counts_refills(tmp_path, monkeypatch):
    from tests.support import toy_domain
    from genenv_jax.domains.base import ScoreResult
    # A random tiny model never says the number: reward the parity of the reply's length instead, so
    # some groups vary and some do not.
    monkeypatch.setattr(toy_domain.ToyDomain, "score_details", lambda self, task, response:
                        ScoreResult(reward=float(len(response) % 2)))
    config = toy_config(epochs=1, **{"dynamic_sampling.enabled": True, "dynamic_sampling.max_rounds": 2,
                                     "dynamic_sampling.filter": "advantage",
                                     "agent.train.loss.advantage": "gigpo", "agent.train.loss.overlong_buffer": 4})
    # Every episode is credited once: by the advantage filter, whose credit the update reuses.
    credited = []
    estimator = ADVANTAGE_ESTIMATORS.get("gigpo")
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS._entries, "gigpo", dataclasses.replace(
        estimator, fn=lambda batch, loss: credited.append(len(batch.rewards)) or estimator.fn(batch, loss)))
    loop = CoEvolution(config, tmp_path / "run")
    (row,) = loop.run()
    assert sum(credited) == row["agent/rollouts_total"]
    groups = row["tasks"] + row["replayed_tasks"]
    assert row["dynamic_sampling/trained_groups"] + row["dynamic_sampling/shortfall_groups"] == groups
    assert row["agent/rollouts_total"] == row["agent/episodes"] + row["dynamic_sampling/extra_rollouts"]
    assert row["dynamic_sampling/extra_rollouts"] % 2 == 0 and row["dynamic_sampling/rounds"] <= 2
    assert row["dynamic_sampling/trained_groups"] > 0
    steps = -(-row["dynamic_sampling/trained_groups"] // config.agent.train.tasks_per_step)
    assert row["agent/steps"] == steps and np.isfinite(row["agent/loss"])
    assert "agent/gigpo_step_adv_nonzero" in row and row["agent/overlong_penalty_mean"] <= 0
    # Refill episodes are the agent's data too: D_train holds every valid one, marked replayed.
    assert loop.pools["d_train"].num_records() <= row["agent/rollouts_total"]
