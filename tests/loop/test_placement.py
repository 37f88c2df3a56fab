"""Sampler placement (`Policy.place`: a full cast, or under LoRA a merge, of a policy's model) is
decided by the epoch: one placement per policy and weights version, handed down as a `Placement`
that places on first use.

Per epoch, counted through `Policy.place`:
- simulator: 1 when the epoch's task source samples it (genenv and random modes every epoch;
  static mode only in the epoch that generates its set; dreamgym in epochs whose curriculum asks
  for variants), else 0;
- agent: 1 for the rollouts and dynamic sampling's refills together, plus 1 in an epoch that
  evaluates on the held-out split (the updated weights are other weights);
- before the first epoch: 1 agent placement when the starting agent is evaluated.
DreamGym's experience model is placed once per run, when it is fitted or reloaded
(`ExperienceWorld.start`): its weights never change, so no epoch places it.
"""

import collections

import pytest

from genenv_jax.loop import CoEvolution, Policy
from genenv_jax.loop.policy import Placement
from genenv_jax.workdir.pools import Pool
from tests.support.loop_configs import toy_config

pytestmark = pytest.mark.usefixtures("toy_domain")  # conftest.py registers the toy domain


def _count_placements(monkeypatch, loop: CoEvolution) -> tuple[collections.Counter, list[dict]]:
    """(placements so far by policy name, placements of each epoch run so far)."""
    counts: collections.Counter = collections.Counter()
    per_epoch: list[dict] = []
    place, run_epoch = Policy.place, loop.run_epoch

    def counted_place(self, state):
        counts[self.name] += 1
        return place(self, state)

    def counted_epoch(state, epoch):
        before = collections.Counter(counts)
        row = run_epoch(state, epoch)
        per_epoch.append(dict(counts - before))
        return row

    monkeypatch.setattr(Policy, "place", counted_place)
    monkeypatch.setattr(loop, "run_epoch", counted_epoch)
    return counts, per_epoch


@pytest.mark.slow
def test_each_policy_is_placed_once_per_weights_version(tmp_path, monkeypatch):
    """genenv mode with dynamic sampling (refills sample the rollouts' copy) and held-out evaluation
    every second epoch (and at the last): the updated agent is placed once more when evaluated."""
    loop = CoEvolution(toy_config(**{"evaluation.split": "test", "evaluation.every_epochs": 2,
                                     "dynamic_sampling.enabled": True}), tmp_path / "run")
    counts, per_epoch = _count_placements(monkeypatch, loop)
    rows = loop.run()
    assert any(r["dynamic_sampling/rounds"] > 0 for r in rows)  # refills ran, on the same placement
    assert [("heldout/accuracy" in r) for r in rows] == [False, True]
    assert per_epoch == [{"agent": 1, "simulator": 1}, {"agent": 2, "simulator": 1}]
    assert counts == {"agent": 1 + 1 + 2, "simulator": 2}  # the starting agent's evaluation: 1


@pytest.mark.slow
def test_static_mode_places_the_simulator_only_when_it_generates(tmp_path, monkeypatch):
    loop = CoEvolution(toy_config(mode="static", **{"static_variants_per_seed": 1}), tmp_path / "run")
    counts, per_epoch = _count_placements(monkeypatch, loop)
    loop.run()
    assert per_epoch == [{"agent": 1, "simulator": 1}, {"agent": 1}]  # epoch 1 draws from the set
    assert counts == {"agent": 2, "simulator": 1}  # no held-out split: no starting evaluation
    # The set is committed once, with epoch 0's other pools (the task source writes nothing itself).
    static = Pool(tmp_path / "run" / "pools", "static_tasks", writable=False)
    assert static.epochs == [0] and static.num_records() > 0
    drawn = {r["task"]["task_id"] for r in Pool(tmp_path / "run" / "pools", "d_env", writable=False).records((1,))}
    assert drawn and drawn <= {r["task"]["task_id"] for r in static.records()}


class _FakePolicy:
    name = "agent"

    def __init__(self):
        self.placed = 0

    def place(self, state):
        self.placed += 1
        return ("placed", state)


def test_a_placement_places_on_first_use_once_and_refuses_after_release():
    policy = _FakePolicy()
    with Placement(policy, "state") as weights:
        assert policy.placed == 0  # nothing sampled yet: nothing placed
        assert weights.params == ("placed", "state") and weights.params is weights.params
        assert policy.placed == 1
    with pytest.raises(RuntimeError, match="agent: sampling weights used after their placement was released"):
        _ = weights.params
    with Placement(policy, "state"):
        pass
    assert policy.placed == 1  # a stage that samples nothing places nothing
