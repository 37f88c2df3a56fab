"""The calc real-model study's plan: its arms and their overrides, equal agent data between them,
and the `calc:real` preset's sizes that the simulator-aims issue asks for."""

from __future__ import annotations

import pytest

from genenv_jax.configs import study_calc_real
from genenv_jax.configs.run_config import RunConfig
from genenv_jax.domains import get_domain
from genenv_jax.study.runner import plan_runs, run_config


def test_the_study_plans_its_arms_at_equal_agent_data(tmp_path):
    study = study_calc_real.get_config()
    runs = plan_runs(study)
    assert [r.name for r in runs] == ["genenv-a0.5-s0", "random-a0.5-s0", "static-a0.5-s0", "genenv_blind-a0.5-s0",
                                      "genenv_grpo-a0.5-s0", "random_blind-a0.5-s0", "genenv-a0.2-s0",
                                      "genenv-a0.8-s0"]
    configs = {r.name: RunConfig.from_config_dict(run_config(study, r, tmp_path), num_devices=1) for r in runs}
    assert configs["genenv_grpo-a0.5-s0"].simulator_objective.objective == "grpo"
    assert configs["genenv-a0.5-s0"].simulator_objective.objective == "rwr"
    assert configs["genenv_blind-a0.5-s0"].simulator_feedback == "none"
    assert configs["random_blind-a0.5-s0"].simulator_feedback == "none"
    assert configs["genenv-a0.2-s0"].curriculum.alpha == 0.2
    snapshots = {name: dict(c.snapshot) for name, c in configs.items()}
    for name, snap in snapshots.items():  # only what names the arm differs
        differing = {k for k in snap if snap[k] != snapshots["genenv-a0.5-s0"][k]}
        assert differing <= {"mode", "curriculum", "simulator", "simulator_feedback"}, (name, differing)

    c = configs["genenv-a0.5-s0"]
    assert c.epochs >= 12 and c.rollouts_per_task >= 4 and c.new_tasks_per_epoch >= 48
    assert c.agent.train.tasks_per_epoch > 0  # a fixed number of GRPO rows per epoch in every arm
    assert c.evaluation.split == "test" and c.evaluation.every_epochs == 4
    domain = get_domain("calc", **c.domain.options)
    held_out = domain.seeds("test")
    by_level = {t.category for t in held_out}
    assert len(held_out) >= 400 and all(sum(t.category == lv for t in held_out) == len(held_out) // len(by_level)
                                        for lv in by_level)


def test_a_study_directory_inside_the_model_directory_is_refused_before_anything_is_written(tmp_path):
    from genenv_jax.core.errors import CommandError
    from genenv_jax.study.runner import run_study

    study = study_calc_real.get_config()
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")  # enough for validation, which reads no weights
    study.run.agent.model_dir = str(model_dir)
    inside = model_dir / "study"
    with pytest.raises(CommandError, match=rf"^--workdir {inside} lies inside an input \(config.agent.model_dir "):
        run_study(study, inside)
    assert sorted(p.name for p in model_dir.iterdir()) == ["config.json"]
