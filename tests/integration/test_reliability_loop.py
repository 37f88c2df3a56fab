"""Reliability of the loop as a whole: resumed runs refuse meaning-changing config edits, a second
run in the same workdir is refused, and both leave every committed byte in place."""

import logging

import pytest

from genenv_jax.loop import CoEvolution
from genenv_jax.configs.run_config import ConfigError
from genenv_jax.workdir.lock import WorkdirLock, WorkdirLockedError
from tests.support.loop_configs import toy_config


pytestmark = pytest.mark.usefixtures("toy_domain")  # conftest.py registers the toy domain


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and "pools" in p.parts}


@pytest.mark.slow
def test_resume_with_changed_config_is_refused_or_logged(tmp_path, caplog):
    run = tmp_path / "run"
    CoEvolution(toy_config(epochs=1), run).run()
    committed = _files(run)
    for key, value in (("seed", 1), ("curriculum.alpha", 0.3), ("mode", "random"), ("rollouts_per_task", 4),
                       ("agent.train.tasks_per_step", 2)):
        with pytest.raises(ConfigError, match=rf"changed config.{key}.*allow_config_change") as info:
            CoEvolution(toy_config(epochs=2, **{key: value}), run).run()
        assert "\n" not in str(info.value)
    assert _files(run) == committed  # nothing written by the refused runs

    caplog.set_level(logging.WARNING)
    rows = CoEvolution(toy_config(epochs=2, allow_config_change=True, seed=1), run).run()  # allowed: goes on
    assert [r["epoch"] for r in rows] == [0, 1]
    assert "config.seed changed from 0 to 1 (changes the run)" in caplog.text
    assert "config.epochs changed from 1 to 2" in caplog.text


def test_a_second_run_in_the_same_workdir_is_refused(tmp_path):
    run = tmp_path / "run"
    loop = CoEvolution(toy_config(epochs=1), run)
    with WorkdirLock(run):  # another run holds the workdir
        with pytest.raises(WorkdirLockedError, match="in use by pid"):
            loop.run()
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())
    assert not (run / "metrics.jsonl").exists()
