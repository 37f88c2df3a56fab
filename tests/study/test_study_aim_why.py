"""What decided whether the simulator could aim (study.aim_why and the report's section): the band
signal of a run against its tasks counted by hand, and the reward grid against R_env's formula."""

import math

import numpy as np
import pytest

from genenv_jax.study import calc_report
from genenv_jax.study.aim_why import band_signal, reward_grid, weight_ratio
from genenv_jax.study.arm_epochs import run_data
from genenv_jax.study.bootstrap import bootstrap_difference
from genenv_jax.study.results import load_study
from tests.study.test_study_calc_report import ALPHA, LEVELS, write_run, write_study


def test_band_signal_counts_the_runs_tasks(tmp_path):
    # epoch 0: levels 1, 2, 2, 3 at p_hat 1, 0.5, 0.75, 0; epoch 1: levels 2, 3, 3 at p_hat 0.25, 0, 1
    epochs = [(["level_1", "level_2", "level_2", "level_3"], [1.0, 0.5, 0.75, 0.0], 6, 0, 0),
              (["level_2", "level_3", "level_3"], [0.25, 0.0, 1.0], 6, 0, 0)]
    sim = {0: {"simulator/steps": 1, "simulator/tasks": 2}, 1: {"simulator/steps": 1, "simulator/tasks": 1}}
    spec = write_run(tmp_path, "genenv", "genenv", ALPHA, epochs, sim=sim)
    data = run_data(load_study(write_study(tmp_path, [spec], epochs=2)).runs[0], LEVELS)
    s = band_signal(data, min_level_tasks=2)
    assert (s.run, s.scored, s.steps, s.rows) == ("genenv-a0.5-s0", 7, 2, 3)
    assert s.extreme_share == pytest.approx(4 / 7) and s.in_band_share == pytest.approx(3 / 7)
    # in band: the three level-2 tasks; out: levels 1, 3, 3, 3
    assert s.level_gap.fmt() == bootstrap_difference([2, 2, 2], [1, 3, 3, 3]).fmt()
    assert s.level_gap.value == pytest.approx(2 - 10 / 4)
    assert s.by_level == {1: (0, 1), 2: (3, 3), 3: (0, 3)}
    assert s.best_level == (2, 3, 3)  # level 1 has one task: below min_level_tasks
    assert band_signal(data).best_level is None  # no level has MIN_LEVEL_TASKS (20) tasks


def test_band_signal_needs_per_task_records(tmp_path):
    spec = write_run(tmp_path, "random", "random", ALPHA, [(["level_1"] * 2, [0.5, 1.0], 4, 0, 0)], pool_epochs=[])
    data = run_data(load_study(write_study(tmp_path, [spec], epochs=1)).runs[0], LEVELS)
    assert data.scores[0].source == "metrics" and band_signal(data) is None


def _config(alpha, rollouts=4, beta=2.0, k_min=0.25, reward_lambda=1.0):
    return {"rollouts_per_task": rollouts, "curriculum": {"alpha": alpha, "beta": beta, "k_min": k_min},
            "simulator": {"train": {"loss": {"reward_lambda": reward_lambda}}}}


def test_reward_grid_against_the_formula():
    grid = reward_grid(_config(0.5))
    assert [g.p_hat for g in grid] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [g.in_band for g in grid] == [False, True, True, True, False]
    for g in grid:
        r = math.exp(-2.0 * (g.p_hat - 0.5) ** 2)
        assert g.r_env == pytest.approx(r) and g.rwr_weight == pytest.approx(math.exp(r))
    # the 1.84-2.72 over all p_hat; in band the weights differ by exp(1 - exp(-0.125))
    assert (round(grid[0].rwr_weight, 2), round(grid[2].rwr_weight, 2)) == (1.83, 2.72)
    assert weight_ratio(grid) == pytest.approx(math.exp(1 - math.exp(-0.125)))
    # alpha 0.2 puts the tasks the agent never solves in band, alpha 0.8 those it always solves
    assert [g.in_band for g in reward_grid(_config(0.2))] == [True, True, False, False, False]
    assert [g.in_band for g in reward_grid(_config(0.8))] == [False, False, False, True, True]
    assert weight_ratio(reward_grid(_config(0.5, rollouts=2, k_min=0.1))) == 1.0  # only p_hat 0.5 in band
    assert weight_ratio(reward_grid(_config(0.5, rollouts=3, k_min=0.1))) is None
    lam = reward_grid(_config(0.5, reward_lambda=4.0))
    assert np.allclose([g.rwr_weight for g in lam], np.exp(4.0 * np.asarray([g.r_env for g in lam])))


def test_the_report_section(tmp_path):
    epochs = [(["level_1", "level_2", "level_3"], [1.0, 0.5, 0.0], 6, 0, 0)] * 2
    runs = [write_run(tmp_path, "genenv", "genenv", ALPHA, epochs), write_run(tmp_path, "random", "random", ALPHA, epochs)]
    md = calc_report.why(calc_report.read_inputs(write_study(tmp_path, runs, epochs=2)))
    assert "| random-a0.5-s0 | 6 | 0.67 | 0.33 | " in md and "| L1 0/2, L2 2/2, L3 0/2 | - | - | - |" in md
    assert "| genenv-a0.5-s0 | 6 | 0.67 | 0.33 | " in md and "| 2 | 6 |" in md  # 2 steps of 3 rows (the default sim)
    assert "| alpha 0.5, beta 2, k_min 0.25, lambda 1 | 2 of 4 | 0.50 | yes | 1.000 | 2.718 |" in md
    assert "(genenv-a0.5-s0, random-a0.5-s0): in band, the largest RWR weight is 1.125 times" in md


def test_the_report_section_before_any_run_finished(tmp_path):
    runs = [write_run(tmp_path, "genenv", "genenv", ALPHA, [(["level_1"], [0.5], 2, 0, 0)], done=False)]
    md = calc_report.why(calc_report.read_inputs(write_study(tmp_path, runs, epochs=4)))
    assert "| genenv-a0.5-s0 | 1 | 0.00 | 1.00 | - | L1 1/1 | - | 1 | 3 |" in md and md.endswith("(No run has finished yet.)")
