"""W&B (offline) and MLflow (a local sqlite store) fed from metrics.jsonl: every committed point once,
with its epoch and value, across real kills (SIGKILL) on either side of a tracker write and a
resume, read back with each tool's own reader (`wandb leet inspect --json`, MlflowClient)."""

import collections
import concurrent.futures
import inspect
import json
import re
import logging
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from genenv_jax.configs.run_config import ConfigError
from genenv_jax.configs.settings import LogSettings
from genenv_jax.loop.persistence import config_changes
from genenv_jax.workdir import storage, trackers
from genenv_jax.workdir.checkpoints import Checkpointer
from genenv_jax.workdir.metrics import MetricsWriter, read_metrics, truncate_metrics
from tests.support.loop_configs import toy_config, toy_config_dict

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

ALL = LogSettings(trackers=("jsonl", "tensorboard", "wandb", "mlflow"))
MLFLOW_NAME = {"rejected/bad (x)": "rejected/bad _x_"}  # the characters MLflow refuses become '_'


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory) -> Path:
    """An empty sqlite store as MLflow creates it: its schema migrations run once per session
    (seconds), and each test copies the file to where its run's store is."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow") / "empty.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def with_store(workdir: Path, empty: Path, name: str = trackers.MLFLOW_DB) -> Path:
    """`workdir` with an empty MLflow store at <workdir>/<name> (the default store's place)."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(empty, workdir / name)
    return workdir


def row(epoch: int) -> dict:
    """An epoch's metrics: floats, an int, a key MLflow must rename, and values no tracker plots."""
    return {"loss": 1.0 / (epoch + 3), "agent/kl": 0.1 * epoch, "tasks": 4 + epoch, "rejected/bad (x)": 2,
            "note": "text", "flag": True, "missing": None}


def committed(workdir: Path) -> dict[tuple[str, int], float]:
    """(metric, epoch) -> value of every plotted point metrics.jsonl holds."""
    return {(key, r["epoch"]): float(value) for r in read_metrics(workdir / "metrics.jsonl")
            for key, value in r.items() if key != "epoch" and isinstance(value, (int, float))
            and not isinstance(value, bool)}


def wandb_session_dirs(workdir: Path, run_id: str) -> list[Path]:
    """The run's W&B session directories, `offline-run-<time>-<run id>`; W&B adds `-1`, `-2`, ...
    when two sessions of the run start within the same second."""
    pattern = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(run_id)}(-\d+)?")
    return sorted(p for p in (workdir / "wandb").iterdir() if pattern.fullmatch(p.name))


def wandb_read_back(workdir: Path) -> collections.Counter:
    """((metric, epoch, step), value) -> how many history records hold it, over every .wandb log
    of the workdir's run, as W&B's own reader prints them."""
    run_id = json.loads((workdir / trackers.IDS_FILE).read_text())["wandb"]["run_id"]
    def inspect_log(log: Path) -> str:
        return subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log)],
                              capture_output=True, text=True, check=True).stdout

    logs = sorted(log for session in wandb_session_dirs(workdir, run_id) for log in session.glob("*.wandb"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        outputs = list(pool.map(inspect_log, logs))
    seen = collections.Counter()
    for out in outputs:
        for line in out.splitlines():
            record = json.loads(line)
            if record["type"] == "history":
                item = record["history"]["item"]
                seen.update(((key, item["epoch"], item["_step"]), value) for key, value in item.items()
                            if not key.startswith("_") and key != "epoch")
    return seen


def mlflow_read_back(workdir: Path) -> collections.Counter:
    """((metric, step), value) -> how many points MLflow's client returns for it."""
    from mlflow.tracking import MlflowClient

    ids = json.loads((workdir / trackers.IDS_FILE).read_text())["mlflow"]
    client = MlflowClient(ids["tracking_uri"])
    keys = client.get_run(ids["run_id"]).data.metrics
    return collections.Counter(((key, m.step), m.value) for key in keys
                               for m in client.get_metric_history(ids["run_id"], key))


def assert_exactly_once(workdir: Path, epochs: list[int]) -> None:
    points = committed(workdir)
    assert sorted({epoch for _, epoch in points}) == epochs
    wandb_points = wandb_read_back(workdir)
    assert wandb_points == collections.Counter({(key, epoch, epoch + 1): value for (key, epoch), value in points.items()
                                                }.items())
    mlflow_points = mlflow_read_back(workdir)
    assert mlflow_points == collections.Counter({(MLFLOW_NAME.get(key, key), epoch): value
                                                 for (key, epoch), value in points.items()}.items())


KILLED_RUN = textwrap.dedent("""
    import os, signal, sys, types
    from genenv_jax.workdir import trackers
    from genenv_jax.workdir.metrics import MetricsWriter

    ROW_SOURCE
    workdir, epochs, kill_at, when = sys.argv[1], [int(e) for e in sys.argv[2].split(",")], int(sys.argv[3]), sys.argv[4]
    feed = trackers.TrackerFeed.feed

    def feed_then_maybe_die(self, rows):
        rows = list(rows)
        reached = any(epoch == kill_at for epoch, _ in rows)
        if reached and when == "before_feed":  # metrics.jsonl has the row; no tracker got it
            os.kill(os.getpid(), signal.SIGKILL)
        feed(self, rows)
        if reached and when == "after_feed" and self.tracker.name == "mlflow":  # both trackers were sent it
            os.kill(os.getpid(), signal.SIGKILL)

    trackers.TrackerFeed.feed = feed_then_maybe_die
    log = types.SimpleNamespace(trackers=("jsonl", "wandb", "mlflow"))  # the run config's log section
    writer = MetricsWriter(workdir, log=log, config={"seed": 3, "log": {"trackers": ["jsonl", "wandb", "mlflow"]}})
    for epoch in epochs:
        writer.write(epoch, row(epoch))
    writer.close()
""")


def killed_run(tmp_path: Path, workdir: Path, epochs: str, kill_at: int, when: str) -> None:
    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN.replace("ROW_SOURCE", textwrap.dedent(inspect.getsource(row))))
    done = subprocess.run([sys.executable, str(script), str(workdir), epochs, str(kill_at), when],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


@pytest.mark.slow
def test_every_committed_point_once_across_kills_on_both_sides_of_a_tracker_write_and_a_resume(tmp_path,
                                                                                              empty_mlflow_store):
    workdir = with_store(tmp_path / "run", empty_mlflow_store)
    # 1. Killed after metrics.jsonl got epoch 1's row, before any tracker was sent it.
    killed_run(tmp_path, workdir, "-1,0,1", kill_at=1, when="before_feed")
    assert sorted({epoch for _, epoch in committed(workdir)}) == [-1, 0, 1]
    assert {step for (_, step), _ in mlflow_read_back(workdir)} == {-1, 0}  # the kill left epoch 1 behind
    assert all(epoch < 1 for (_, epoch, _), _ in wandb_read_back(workdir))
    # 2. Resumed (epoch 1 caught up on opening), then killed right after epoch 2 was sent to both.
    killed_run(tmp_path, workdir, "2", kill_at=2, when="after_feed")
    assert {step for (_, step), _ in mlflow_read_back(workdir)} == {-1, 0, 1, 2}
    # 3. Resumed again, to the end: nothing lost, nothing twice, in the same W&B and MLflow runs.
    ids = json.loads((workdir / trackers.IDS_FILE).read_text())
    writer = MetricsWriter(workdir, log=ALL)
    writer.write(3, row(3))
    writer.close()
    assert json.loads((workdir / trackers.IDS_FILE).read_text()) == ids
    assert len(wandb_session_dirs(workdir, ids["wandb"]["run_id"])) == 3  # one log a session
    assert_exactly_once(workdir, [-1, 0, 1, 2, 3])


def test_rows_a_resume_rewrites_reach_the_trackers_once_with_the_rerun_values(tmp_path, empty_mlflow_store):
    """Trackers get a row once a finished checkpoint covers it: the rows after the checkpoint a
    run resumes from are re-run and rewritten, and a tracker point cannot be taken back."""
    workdir, checkpoint = with_store(tmp_path / "run", empty_mlflow_store), {"epoch": None}

    def open_writer():
        return MetricsWriter(workdir, log=ALL, settled=lambda: checkpoint["epoch"])

    writer = open_writer()
    writer.write(-1, row(-1))
    writer.write(0, row(0))
    assert mlflow_read_back(workdir) == collections.Counter()  # no checkpoint yet: nothing is settled
    checkpoint["epoch"] = 0
    writer.write(1, row(1))  # killed before checkpoint 1: resume restores epoch 0 and re-runs epoch 1
    writer.close()
    assert {step for (_, step), _ in mlflow_read_back(workdir)} == {-1, 0}
    truncate_metrics(workdir / "metrics.jsonl", 0)  # what resume does
    writer = open_writer()
    writer.write(1, row(1) | {"loss": 0.123})  # the re-run's value (times differ between runs)
    checkpoint["epoch"] = 1
    writer.write(2, row(2))
    checkpoint["epoch"] = 2
    writer.close()
    assert_exactly_once(workdir, [-1, 0, 1, 2])
    assert (("loss", 1), 0.123) in mlflow_read_back(workdir)


def test_a_point_the_tracker_holds_is_never_sent_twice_even_when_the_file_lost_its_row(tmp_path, caplog,
                                                                                      empty_mlflow_store):
    """A row settled and sent, then dropped by a resume from an older checkpoint (a damaged one
    set aside): the tracker keeps its one point and a warning says the re-run's values differ.
    The store is one named by log.mlflow_tracking_uri, outside the workdir."""
    workdir, store = tmp_path / "run", with_store(tmp_path / "stores", empty_mlflow_store, "shared.db") / "shared.db"
    log = LogSettings(trackers=("jsonl", "mlflow"), mlflow_tracking_uri=f"sqlite:///{store}")
    writer = MetricsWriter(workdir, log=log)
    for epoch in range(3):
        writer.write(epoch, {"loss": float(epoch)})
    writer.close()
    truncate_metrics(workdir / "metrics.jsonl", 0)
    with caplog.at_level(logging.WARNING):
        writer = MetricsWriter(workdir, log=log)
        writer.write(1, {"loss": 10.0})
        writer.close()
    assert "holds epochs [1, 2] that metrics.jsonl no longer has" in caplog.text
    assert "already holds epoch 1 with other values for ['loss']" in caplog.text
    assert mlflow_read_back(workdir) == collections.Counter({(("loss", e), float(e)) for e in range(3)})
    assert not (workdir / "tensorboard").exists()  # tensorboard left out of log.trackers
    assert not (workdir / trackers.MLFLOW_DB).exists()


def test_trackers_are_checked_with_the_config_in_one_line(monkeypatch):
    assert toy_config().log.trackers == ("jsonl", "tensorboard")
    assert toy_config(**{"log.trackers": ("jsonl,wandb,mlflow",)}).log.trackers == ("jsonl", "wandb", "mlflow")
    for given, message in ((("jsonl,comet",), "log.trackers names 'comet'; known: jsonl, tensorboard, wandb, mlflow"),
                           (("tensorboard",), "log.trackers must include jsonl"),
                           (("jsonl,jsonl",), "log.trackers names a tracker twice")):
        with pytest.raises(ConfigError, match=message):
            toy_config(**{"log.trackers": given})
    real = trackers.importlib.util.find_spec
    for missing, tracker in (("wandb", "wandb"), ("mlflow", "mlflow"), ("sqlalchemy", "mlflow")):
        monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name, m=missing: None if name == m else real(name))
        with pytest.raises(ConfigError) as error:
            toy_config(**{"log.trackers": ("jsonl,tensorboard,wandb,mlflow",)})
        text = str(error.value)
        assert "\n" not in text and text.startswith("config.log.trackers=")
        assert f"log.trackers includes {tracker} but the {missing} package is not installed" in text
        assert text.endswith(": pip install -e '.[trackers]'")
    server = "http://mlflow:5000"  # a tracking server needs no SQLAlchemy here (it is still "missing")
    assert toy_config(**{"log.trackers": ("jsonl,mlflow",), "log.mlflow_tracking_uri": server}).log.mlflow_tracking_uri == server


def test_a_run_saved_before_the_trackers_resumes_without_a_change():
    old = toy_config_dict().to_dict()
    for key in ("trackers", "wandb_project", "mlflow_tracking_uri", "mlflow_experiment"):
        del old["log"][key]
    assert config_changes(old, toy_config().snapshot) == []
    changed = config_changes(old, toy_config(**{"log.trackers": ("jsonl,wandb",)}).snapshot)
    assert [(key, safe) for key, _, _, safe in changed] == [("log.trackers", True)]


def test_trackers_that_write_local_files_refuse_a_gs_workdir_in_one_line():
    remote = storage.as_path("gs://bucket/run")
    with pytest.raises(ConfigError, match=r"wandb.*--workdir gs://bucket/run is not a local directory"):
        trackers.open_feeds(remote, ("jsonl", "wandb"), [])
    with pytest.raises(ConfigError, match=r"mlflow_tracking_uri is empty.*not a local directory"):
        trackers.open_feeds(remote, ("jsonl", "mlflow"), [])


def test_finished_epoch_leaves_out_a_checkpoint_still_being_written(tmp_path, monkeypatch):
    with Checkpointer(tmp_path / "ckpt", async_save=True) as checkpointer:
        assert checkpointer.finished_epoch() is None
        checkpointer.save(0, {"x": np.zeros(3)}, {})
        checkpointer.wait_until_finished()
        checkpointer.save(1, {"x": np.ones(3)}, {})
        monkeypatch.setattr(checkpointer._manager, "is_saving_in_progress", lambda: True)
        assert checkpointer.latest_epoch() == 1 and checkpointer.finished_epoch() == 0
        monkeypatch.undo()
        checkpointer.wait_until_finished()
        assert checkpointer.finished_epoch() == 1
    assert checkpointer.finished_epoch() == 1  # still answers after close (the loop's writer closes last)
