"""Curriculum: R_env values, the band filter, p_hat granularity, reward variance, seed selection."""

import math

import numpy as np
import pytest

from genenv_jax.rl import curriculum as cur
from genenv_jax.rl import rwr_weight


def test_env_reward_hand_values():
    assert cur.env_reward(0.5) == pytest.approx(1.0)
    assert cur.env_reward(0.0, alpha=0.5, beta=2.0) == pytest.approx(math.exp(-0.5))
    assert cur.env_reward(1.0, alpha=0.5, beta=2.0) == pytest.approx(math.exp(-0.5))
    assert cur.env_reward(0.25, alpha=0.5, beta=4.0) == pytest.approx(math.exp(-0.25))
    out = cur.env_reward([0.0, 0.3, 0.5, 0.9], alpha=0.3, beta=10.0)
    np.testing.assert_allclose(out, np.exp(-10.0 * np.square(np.array([0.0, 0.3, 0.5, 0.9]) - 0.3)))
    assert out.argmax() == 1 and out.shape == (4,)


@pytest.mark.parametrize("kwargs, message", [
    ({"alpha": 0.0}, "alpha"), ({"alpha": 1.0}, "alpha"), ({"beta": 0.0}, "beta"), ({"beta": -1.0}, "beta"),
])
def test_env_reward_rejects_bad_hyperparameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cur.env_reward(0.5, **kwargs)


def test_env_reward_rejects_bad_p_hat():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cur.env_reward([0.5, 1.2])
    with pytest.raises(ValueError, match="NaN"):
        cur.env_reward(float("nan"))


def test_band_filter_edges_included():
    p = np.array([0.0, 0.375, 0.4, 0.5, 0.6, 0.625, 1.0])
    np.testing.assert_array_equal(cur.in_band(p, alpha=0.5, k_min=0.1),
                                  [False, False, True, True, True, False, False])
    # 0.4 - 0.3 is 0.10000000000000003 in floats; an exact k/n on the edge is still in band.
    assert cur.in_band(0.4, alpha=0.3, k_min=0.1)
    assert not cur.in_band(0.41, alpha=0.3, k_min=0.1)
    with pytest.raises(ValueError, match="k_min"):
        cur.in_band(0.5, k_min=-0.1)


def test_rwr_weight_and_variance():
    np.testing.assert_allclose(rwr_weight([0.0, 1.0], 1.0), [1.0, math.e])  # the one definition, in rl
    assert cur.reward_variance([1, 0, 1, 0]) == pytest.approx(0.25)
    assert cur.reward_variance([1, 1, 1]) == 0.0
    assert cur.reward_variance([0.0, 0.5, 1.0]) == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="empty"):
        cur.reward_variance([])


def _rollouts():
    # seed A: task a1 solved 1/4, task a2 solved 3/4; seed B: task b1 solved 4/4.
    rows = [("a1", "A", r) for r in (1, 0, 0, 0)] + [("a2", "A", r) for r in (1, 1, 0, 1)]
    rows += [("b1", "B", 1.0)] * 4
    return [{"task_id": t, "seed_id": s, "reward": r} for t, s, r in rows]


def test_score_tasks_variant_granularity():
    scores = cur.score_tasks(_rollouts(), cur.CurriculumConfig(alpha=0.5, beta=2.0, k_min=0.1))
    by_id = {s.task_id: s for s in scores}
    assert [s.task_id for s in scores] == ["a1", "a2", "b1"]
    assert by_id["a1"].p_hat == 0.25 and by_id["a2"].p_hat == 0.75 and by_id["b1"].p_hat == 1.0
    assert by_id["a1"].r_env == pytest.approx(math.exp(-2.0 * 0.0625))
    assert by_id["b1"].r_env == pytest.approx(math.exp(-0.5))
    assert not any(s.in_band for s in scores)
    assert by_id["a1"].reward_variance == pytest.approx(0.1875) and by_id["b1"].reward_variance == 0.0
    assert by_id["a2"].num_rollouts == 4 and by_id["a2"].seed_id == "A"


def test_score_tasks_seed_batch_granularity():
    scores = cur.score_tasks(_rollouts(), cur.CurriculumConfig(granularity="seed_batch"))
    by_id = {s.task_id: s for s in scores}
    # Seed A pools 8 rollouts with 4 successes: p_hat 0.5, in band, R_env 1 for both variants.
    assert by_id["a1"].p_hat == by_id["a2"].p_hat == 0.5
    assert by_id["a1"].in_band and by_id["a2"].in_band and by_id["a1"].r_env == pytest.approx(1.0)
    assert by_id["a1"].task_success == 0.25  # the task's own rate is still reported
    assert by_id["b1"].p_hat == 1.0 and not by_id["b1"].in_band


def test_score_tasks_grouped_rewards_and_threshold():
    records = [{"task_id": "t", "seed_id": "s", "rewards": [0.9, 0.4, 1.0, 0.2]}]
    assert cur.score_tasks(records)[0].p_hat == pytest.approx(0.625)  # mean reward
    thresholded = cur.score_tasks(records, cur.CurriculumConfig(success_threshold=0.8))[0]
    assert thresholded.p_hat == 0.5 and thresholded.in_band
    with pytest.raises(ValueError, match="two parent seeds"):
        cur.score_tasks([{"task_id": "t", "seed_id": "s1", "reward": 1},
                         {"task_id": "t", "seed_id": "s2", "reward": 0}])
    with pytest.raises(KeyError, match="seed_id"):
        cur.score_tasks([{"task_id": "t", "reward": 1}])
    with pytest.raises(ValueError, match="granularity"):
        cur.CurriculumConfig(granularity="episode")


def test_seed_variances():
    v = cur.seed_variances(_rollouts())
    assert v == {"A": pytest.approx(0.25), "B": 0.0}


def test_select_seeds_prefers_variance_and_explores():
    ids = [f"s{i}" for i in range(20)]
    variances = {"s3": 0.25, "s7": 0.1875, "s11": 0.09, "s12": 0.0, "s13": 0.0}
    sel = cur.select_seeds(ids, variances, 8, explore_fraction=0.5, rng=0)
    assert len(sel.seed_ids) == 8 and len(set(sel.seed_ids)) == 8
    assert sel.seed_ids[:3] == ("s3", "s7", "s11")  # zero-variance seeds are not "variance" picks
    assert sel.count("variance") == 3 and sel.count("explore") == 5
    assert cur.select_seeds(ids, variances, 8, explore_fraction=0.5, rng=0) == sel  # seeded
    picks = {cur.select_seeds(ids, variances, 8, explore_fraction=0.5, rng=k).seed_ids for k in range(5)}
    assert len(picks) > 1  # exploration differs between seeds


def test_select_seeds_caps_synthetic_share_and_refills():
    ids = [f"real{i}" for i in range(3)] + [f"syn{i}" for i in range(10)]
    synthetic = {i for i in ids if i.startswith("syn")}
    variances = {i: 0.25 for i in synthetic}  # the synthetic seeds look the most useful
    sel = cur.select_seeds(ids, variances, 8, explore_fraction=0.0, max_synthetic_fraction=0.25,
                           synthetic=synthetic, rng=1)
    assert sum(s in synthetic for s in sel.seed_ids) == 2  # floor(0.25 * 8)
    assert {s for s in sel.seed_ids if s not in synthetic} == {"real0", "real1", "real2"}
    assert sel.count("refill") == 3  # only 5 distinct eligible seeds for 8 slots
    with pytest.raises(ValueError, match="synthetic"):
        cur.select_seeds(["syn0"], {}, 2, max_synthetic_fraction=0.0, synthetic={"syn0"})
    with pytest.raises(ValueError, match="not candidate"):
        cur.select_seeds(["a"], {"b": 0.1}, 1)
