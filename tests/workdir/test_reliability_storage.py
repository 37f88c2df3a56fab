"""Storage faults and what each becomes: the run continues, falls back, or refuses with one line,
and no committed data is lost. A toy loop with the real write order (pools commit, metrics row,
then the checkpoint) stands in for the co-evolution loop."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from orbax.checkpoint._src.handlers import json_checkpoint_handler

from genenv_jax.workdir.checkpoints import CheckpointError, Checkpointer, abstract_tree, resume
from genenv_jax.workdir import storage
from genenv_jax.workdir.metrics import MetricsWriter, read_metrics, tensorboard_scalars, truncate_metrics
from genenv_jax.workdir.tensorboard_events import (event_files, read_events, read_scalars, scalars_record,
                                                   version_record)
from genenv_jax.workdir.pools import Pool, PoolError
from genenv_jax.workdir.lock import WorkdirLock, WorkdirLockedError
from tests.support import REPO

TOY_OPT = optax.adam(0.1)
POOL_NAMES = ("d_train", "d_env")


class SimulatedKill(Exception):
    """Stands for the process dying at a given point of an epoch."""


def _fresh_arrays():
    agent, env = {"w": jnp.zeros((3,), jnp.float32)}, {"w": jnp.ones((2,), jnp.float32)}
    return {"agent_params": agent, "agent_opt_state": TOY_OPT.init(agent), "env_params": env}


def _toy_epoch(arrays, epoch, pools):
    """One epoch: 'rollouts' drawn from (seed, epoch), committed to the pools, then a train step."""
    rewards = np.asarray(jax.random.bernoulli(jax.random.fold_in(jax.random.key(42), epoch), 0.5, (6,)), np.float32)
    pools["d_train"].append_epoch(epoch, [{"epoch": epoch, "i": i, "reward": float(r)} for i, r in enumerate(rewards)])
    pools["d_env"].append_epoch(epoch, [{"epoch": epoch, "weight": float(rewards.mean())}])
    target = jnp.asarray(rewards.mean())
    agent = arrays["agent_params"]
    grads = jax.grad(lambda p: jnp.sum(jnp.square(p["w"] - target)))(agent)
    updates, opt_state = TOY_OPT.update(grads, arrays["agent_opt_state"], agent)
    new = {"agent_params": optax.apply_updates(agent, updates), "agent_opt_state": opt_state,
           "env_params": jax.tree.map(lambda x: x * 0.5 + target, arrays["env_params"])}
    return new, {"reward_mean": float(rewards.mean())}


def toy_run(workdir: Path, num_epochs: int, kill_at: tuple[str, int] | None = None):
    """Runs or resumes the toy loop to `num_epochs`; returns (last epoch, arrays).

    kill_at=(point, epoch) raises SimulatedKill at point "pools" (after the pool commit),
    "metrics" (after the metrics row) or "saved" (after `save` returned) of that epoch.
    """
    pools = {name: Pool(workdir / "pools", name) for name in POOL_NAMES}
    metrics_path = workdir / "metrics.jsonl"
    with Checkpointer(workdir / "ckpt", max_to_keep=3) as ckpt:
        restored = resume(ckpt, abstract_tree(_fresh_arrays()), pools)
        if restored is None:
            epoch, arrays = -1, _fresh_arrays()
            metrics_path.unlink(missing_ok=True)
        else:
            epoch, arrays = restored.epoch, restored.arrays
            truncate_metrics(metrics_path, epoch)
        writer = MetricsWriter(workdir, enabled=True)
        try:
            for epoch in range(epoch + 1, num_epochs):
                arrays, row = _toy_epoch(arrays, epoch, pools)
                _maybe_kill(kill_at, "pools", epoch)
                writer.write(epoch, row)
                _maybe_kill(kill_at, "metrics", epoch)
                ckpt.save(epoch, arrays, {"pool_manifests": {n: p.manifest for n, p in pools.items()}})
                _maybe_kill(kill_at, "saved", epoch)
        finally:
            writer.close()
    return epoch, arrays


def _maybe_kill(kill_at, point, epoch):
    if kill_at == (point, epoch):
        raise SimulatedKill(f"{point} of epoch {epoch}")


def _assert_same_run(workdir_a: Path, workdir_b: Path, arrays_a, arrays_b):
    for x, y in zip(jax.tree.leaves(arrays_a), jax.tree.leaves(arrays_b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for name in POOL_NAMES:
        a, b = Pool(workdir_a / "pools", name), Pool(workdir_b / "pools", name)
        assert a.epochs == b.epochs and a.records() == b.records()
    assert read_metrics(workdir_a / "metrics.jsonl") == read_metrics(workdir_b / "metrics.jsonl")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """A toy run of 4 epochs that nothing interrupted: what every recovered run must equal."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    epoch, arrays = toy_run(workdir, 4)
    assert epoch == 3
    return workdir, arrays


def _resume_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("resume:")]


def _fail_background_json_writes(monkeypatch):
    """Every checkpoint's JSON item then fails in Orbax's background thread with ENOSPC."""

    async def disk_full(self, item, directory):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / "metadata"))

    monkeypatch.setattr(json_checkpoint_handler.JsonCheckpointHandler, "_save_fn", disk_full)


# ----------------------------------------------------------------------------------------------
# Checkpoints: a kill at any point resumes exactly; broken checkpoints fall back or refuse.


@pytest.mark.parametrize("point", ["pools", "metrics", "saved"])
def test_a_kill_at_any_point_of_an_epoch_resumes_exactly(tmp_path, uninterrupted, point):
    with pytest.raises(SimulatedKill):
        toy_run(tmp_path, 4, kill_at=(point, 2))
    epoch, arrays = toy_run(tmp_path, 4)
    assert epoch == 3
    _assert_same_run(uninterrupted[0], tmp_path, uninterrupted[1], arrays)


@pytest.mark.slow
def test_a_disk_full_checkpoint_write_is_one_line_and_the_rerun_resumes_exactly(tmp_path, uninterrupted,
                                                                                monkeypatch, caplog, capfd):
    toy_run(tmp_path, 2)
    _fail_background_json_writes(monkeypatch)
    with pytest.raises(CheckpointError) as failure:
        toy_run(tmp_path, 4)  # epoch 2's write fails in the background; the next save reports it
    message = str(failure.value)
    assert "\n" not in message and message.startswith(f"checkpoint of epoch 2 in {tmp_path / 'ckpt'} was not written")
    assert "No space left on device" in message
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.exc_info and "orbax" in r.pathname]  # Orbax's tracebacks dropped
    monkeypatch.undo()
    epoch, arrays = toy_run(tmp_path, 4)
    assert epoch == 3
    _assert_same_run(uninterrupted[0], tmp_path, uninterrupted[1], arrays)


def test_a_failed_background_write_surfaces_at_wait_and_close(tmp_path, monkeypatch):
    arrays = _fresh_arrays()
    _fail_background_json_writes(monkeypatch)
    ckpt = Checkpointer(tmp_path)
    ckpt.save(0, arrays, {})
    with pytest.raises(CheckpointError, match=r"^checkpoint of epoch 0 in .* was not written: OSError: \[Errno 28\] "
                                              r"No space left on device"):
        ckpt.wait_until_finished()
    ckpt.save(1, arrays, {})
    with pytest.raises(CheckpointError, match="checkpoint of epoch 1 .* No space left on device"):
        ckpt.close()
    monkeypatch.undo()
    with Checkpointer(tmp_path) as reopened:
        assert reopened.all_epochs() == []


def _item_dir(workdir: Path, epoch: int, item: str = "agent_params") -> Path:
    return workdir / "ckpt" / str(epoch) / item


def _data_files(item_dir: Path) -> list[Path]:
    """The OCDBT data files Orbax wrote for one item (<item>/d/* and <item>/ocdbt.process_N/d/*)."""
    return [p for p in item_dir.rglob("*") if p.is_file() and p.parent.name == "d"]


def _largest_data_file(item_dir: Path) -> Path:
    return max(_data_files(item_dir), key=lambda p: p.stat().st_size)


def _truncate_data(workdir, epoch):
    for path in _data_files(_item_dir(workdir, epoch)):
        os.truncate(path, path.stat().st_size // 2)


def _delete_array_manifest(workdir, epoch):
    (_item_dir(workdir, epoch) / "manifest.ocdbt").unlink()


def _edit_meta_json(workdir, epoch):
    path = workdir / "ckpt" / str(epoch) / "meta" / "metadata"
    stored = json.loads(path.read_text())
    stored["meta"]["pool_manifests"]["d_env"]["shards"] = []  # still valid JSON, wrong content
    path.write_text(json.dumps(stored))


def _delete_meta_json(workdir, epoch):
    (workdir / "ckpt" / str(epoch) / "meta" / "metadata").unlink()


@pytest.mark.parametrize("damage, cause", [
    pytest.param(_truncate_data, "does not restore: ValueError: OUT_OF_RANGE", id="truncated-data-files"),
    pytest.param(_delete_array_manifest, "does not restore: ValueError: NOT_FOUND", id="missing-ocdbt-manifest"),
    pytest.param(_edit_meta_json, "is corrupt: its JSON does not match its recorded digest", id="edited-meta-json"),
    pytest.param(_delete_meta_json, "does not restore", id="missing-meta-json"),
])
def test_a_broken_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, uninterrupted, caplog, damage, cause):
    with pytest.raises(SimulatedKill):
        toy_run(tmp_path, 4, kill_at=("pools", 3))  # checkpoints 0..2 (keep 3), pools one epoch ahead
    damage(tmp_path, 2)
    epoch, arrays = toy_run(tmp_path, 4)
    assert epoch == 3
    _assert_same_run(uninterrupted[0], tmp_path, uninterrupted[1], arrays)
    [line] = [m for m in _resume_lines(caplog) if "resuming from" in m]
    assert "\n" not in line and line.startswith(f"resume: checkpoint of epoch 2 in {tmp_path / 'ckpt'} {cause}")
    assert line.endswith("and resuming from the checkpoint of epoch 1")
    [aside] = (tmp_path / "ckpt-broken").iterdir()  # kept for a post-mortem, out of Orbax's way
    assert aside.name.startswith("epoch_2.") and str(aside) in line
    assert any("pool d_train: dropped epochs [2, 3] past the checkpoint of epoch 1" in m for m in _resume_lines(caplog))


@pytest.mark.slow
def test_flipped_bytes_in_a_params_file_are_caught_by_the_checksum(tmp_path, caplog):
    params = {"w": jnp.linspace(0, 1, 64 * 1024, dtype=jnp.float32).reshape(1024, 64)}
    with Checkpointer(tmp_path / "ckpt", async_save=False) as ckpt:
        ckpt.save(0, {"agent_params": params}, {"pool_manifests": {}})
        ckpt.save(1, {"agent_params": jax.tree.map(lambda x: x + 1, params)}, {"pool_manifests": {}})
    path = _largest_data_file(_item_dir(tmp_path, 1))
    data = bytearray(path.read_bytes())
    data[2000:6096] = bytes(b ^ 0xFF for b in data[2000:6096])  # 4 KB flipped, the file still decodes
    path.write_bytes(bytes(data))
    with Checkpointer(tmp_path / "ckpt") as ckpt:
        with pytest.raises(CheckpointError, match=r"^checkpoint of epoch 1 in .* is corrupt: item agent_params "
                                                  r"leaf w does not match its saved checksum$"):
            ckpt.restore(1, {"agent_params": abstract_tree(params)})
        restored = resume(ckpt, {"agent_params": abstract_tree(params)}, {})
    assert restored.epoch == 0
    np.testing.assert_array_equal(restored.arrays["agent_params"]["w"], params["w"])


def test_non_finite_values_are_refused_on_save_and_on_restore(tmp_path, monkeypatch):
    bad = {"agent_params": {"w": jnp.array([1.0, jnp.nan, jnp.inf])}}
    with Checkpointer(tmp_path, async_save=False) as ckpt:
        with pytest.raises(CheckpointError, match=r"^refusing to save epoch 0 to .*: item agent_params leaf w holds "
                                                  r"2 non-finite values$"):
            ckpt.save(0, bad, {})
        assert ckpt.all_epochs() == []
        monkeypatch.setattr(Checkpointer, "_refuse_nonfinite", lambda *args: None)  # e.g. written by older code
        ckpt.save(0, bad, {})
        with pytest.raises(CheckpointError, match=r"is corrupt: item agent_params leaf w holds 2 non-finite values$"):
            ckpt.restore(0, abstract_tree(bad))


@pytest.mark.slow
def test_when_no_checkpoint_restores_resume_refuses_and_touches_nothing(tmp_path):
    with pytest.raises(SimulatedKill):
        toy_run(tmp_path, 4, kill_at=("pools", 2))
    for epoch in (0, 1):
        _delete_array_manifest(tmp_path, epoch)
    before = {p: p.read_bytes() for p in (tmp_path / "pools").rglob("*") if p.is_file()}
    with pytest.raises(CheckpointError) as refusal:
        toy_run(tmp_path, 4)
    message = str(refusal.value)
    assert "\n" not in message and message.startswith(f"no checkpoint in {tmp_path / 'ckpt'} restores (epoch 1: ")
    assert "; epoch 0: " in message
    assert {p: p.read_bytes() for p in (tmp_path / "pools").rglob("*") if p.is_file()} == before


# ----------------------------------------------------------------------------------------------
# Pools: a lost or corrupt manifest is restored from the checkpoint; committed shards are never deleted.


def test_a_missing_pool_manifest_is_restored_from_the_checkpoint(tmp_path, uninterrupted, caplog):
    with pytest.raises(SimulatedKill):
        toy_run(tmp_path, 4, kill_at=("pools", 2))
    manifest = tmp_path / "pools" / "d_train" / "manifest.json"
    manifest.unlink()
    shards = sorted(p.name for p in manifest.parent.iterdir())
    assert shards == ["epoch_00000.array_record", "epoch_00001.array_record", "epoch_00002.array_record"]
    opened = Pool(tmp_path / "pools", "d_train")
    assert sorted(p.name for p in manifest.parent.iterdir()) == shards  # opening deleted nothing
    with pytest.raises(PoolError, match=r"^pool 'd_train': .*manifest.json is missing but .* holds 3 shard files"):
        opened.records()

    epoch, arrays = toy_run(tmp_path, 4)
    assert epoch == 3
    _assert_same_run(uninterrupted[0], tmp_path, uninterrupted[1], arrays)
    assert any(m.startswith("resume: pool d_train: restored its manifest from the checkpoint of epoch 1 (")
               for m in _resume_lines(caplog))


def test_a_corrupt_pool_manifest_is_one_line_and_restored_from_the_checkpoint(tmp_path, uninterrupted, caplog):
    toy_run(tmp_path, 2)
    manifest = tmp_path / "pools" / "d_env" / "manifest.json"
    manifest.write_text('{"schema_version": 1, "pool": "d_en')  # cut mid-write by something else
    opened = Pool(tmp_path / "pools", "d_env")
    with pytest.raises(PoolError) as unreadable:
        opened.epochs  # noqa: B018 - reading the property raises
    assert str(unreadable.value).startswith(f"pool 'd_env': {manifest} is unreadable (JSONDecodeError: ")
    assert "\n" not in str(unreadable.value)

    epoch, arrays = toy_run(tmp_path, 4)
    assert epoch == 3
    _assert_same_run(uninterrupted[0], tmp_path, uninterrupted[1], arrays)
    assert any("pool d_env: restored its manifest" in m for m in _resume_lines(caplog))


def test_without_any_checkpoint_every_shard_is_uncommitted(tmp_path, uninterrupted):
    with pytest.raises(SimulatedKill):
        toy_run(tmp_path, 4, kill_at=("pools", 0))  # died in epoch 0, before the first checkpoint
    (tmp_path / "pools" / "d_train" / "manifest.json").unlink()
    epoch, arrays = toy_run(tmp_path, 4)
    assert epoch == 3
    _assert_same_run(uninterrupted[0], tmp_path, uninterrupted[1], arrays)


def test_a_lost_committed_shard_refuses_resume_and_deletes_nothing(tmp_path):
    with pytest.raises(SimulatedKill):
        toy_run(tmp_path, 4, kill_at=("pools", 2))
    pool_dir = tmp_path / "pools" / "d_train"
    (pool_dir / "epoch_00001.array_record").unlink()
    before = sorted(p.name for p in pool_dir.iterdir())
    with pytest.raises(PoolError, match=r"^pool 'd_train': shard .*epoch_00001.array_record listed by the "
                                        r"checkpoint's manifest is missing; refusing to resume"):
        toy_run(tmp_path, 4)
    assert sorted(p.name for p in pool_dir.iterdir()) == before  # epoch 2 (past the checkpoint) kept too


@pytest.mark.slow
def test_a_pool_from_another_run_is_refused(tmp_path):
    toy_run(tmp_path, 1)
    pools = {name: Pool(tmp_path / "other_pools", name) for name in POOL_NAMES}
    pools["d_train"].append_epoch(0, [{"x": 2}, {"x": 3}])
    with Checkpointer(tmp_path / "ckpt") as ckpt:
        with pytest.raises(PoolError, match=r"does not match the checkpoint: pool has epochs \[0\], checkpoint "
                                            r"recorded \[0\]"):
            resume(ckpt, abstract_tree(_fresh_arrays()), pools)
        with pytest.raises(CheckpointError, match="has no manifest for pool 'base'"):
            resume(ckpt, abstract_tree(_fresh_arrays()), {"base": Pool(tmp_path / "pools", "base")})
    assert pools["d_train"].records() == [{"x": 2}, {"x": 3}]


# ----------------------------------------------------------------------------------------------
# Metrics: bad lines are kept aside, never dropped silently.


def test_bad_metrics_lines_are_kept_aside_and_the_valid_rows_rewritten(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"epoch": 0, "x": 1.5}), "garbage {", json.dumps({"step": 7, "note": "from another tool"}),
             json.dumps({"epoch": 1, "x": 2.5, "tag": "b", "ok": None}), json.dumps({"epoch": 2, "x": [1, 2]}),
             json.dumps({"epoch": 3, "x": 4.0})]
    original = "\n".join(lines) + "\n"
    path.write_text(original)

    rows = read_metrics(path)  # reading skips bad lines, says so, and changes nothing
    assert [r["epoch"] for r in rows] == [0, 1, 3] and path.read_text() == original
    [warning] = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert warning == (f"{path}: skipped 3 bad line(s) (line 2: not JSON (Expecting value; a line cut by a crash?); "
                       f"line 3: 'epoch' must be an int >= -1, got None; line 5: value of 'x' is a list, not a scalar)")

    truncate_metrics(path, 1)  # resume: bad file aside, good rows of epochs <= 1 rewritten
    assert read_metrics(path) == [{"epoch": 0, "x": 1.5}, {"epoch": 1, "x": 2.5, "tag": "b", "ok": None}]
    [aside] = tmp_path.glob("metrics.jsonl.bad-*")
    assert aside.read_text() == original
    [kept] = [r.getMessage() for r in caplog.records if "kept the original aside" in r.getMessage()]
    assert kept.endswith(f"kept the original aside as {aside} and rewrote its 3 valid rows") and "\n" not in kept


def test_metrics_writer_writes_only_rows_the_reader_accepts(tmp_path):
    writer = MetricsWriter(tmp_path, enabled=True)
    writer.write(-1, {"warmstart/loss": np.float32(0.5)})
    writer.write(0, {"loss": jnp.asarray(0.25), "count": np.int64(3), "flag": np.bool_(True), "mode": "genenv"})
    with pytest.raises(ValueError, match="metric 'hist' is a list"):
        writer.write(1, {"hist": [1, 2]})
    with pytest.raises(ValueError, match="may not contain the key 'epoch'"):
        writer.write(1, {"epoch": 5})
    writer.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [
        {"epoch": -1, "warmstart/loss": 0.5}, {"epoch": 0, "loss": 0.25, "count": 3, "flag": True, "mode": "genenv"}]


# ----------------------------------------------------------------------------------------------
# TensorBoard events: always the committed rows of metrics.jsonl, each exactly once.

_KILLED_TOY_RUN = """
import os, signal, sys
from pathlib import Path
import test_reliability_storage as toy

def die(kill_at, point, epoch):  # a real kill: no finally block, no close, no flush
    if kill_at == (point, epoch):
        os.kill(os.getpid(), signal.SIGKILL)

toy._maybe_kill = die
toy.toy_run(Path(sys.argv[1]), 4, kill_at=(sys.argv[2], int(sys.argv[3])))
"""


def _killed_toy_run(workdir: Path, point: str, epoch: int) -> None:
    """The toy run in a child process SIGKILLed at `point` of `epoch` (see `toy_run`)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(Path(__file__).resolve().parent)]))
    child = subprocess.run([sys.executable, "-c", _KILLED_TOY_RUN, str(workdir), point, str(epoch)],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]


def _assert_events_equal_metrics(workdir: str | Path, epochs: list[int]) -> None:
    """The TensorBoard events hold every scalar of metrics.jsonl's rows exactly once (as float32,
    TensorBoard's precision) and nothing else, in one event file (a local or gs:// workdir)."""
    workdir = storage.as_path(workdir)
    rows = read_metrics(workdir / "metrics.jsonl")
    assert [r["epoch"] for r in rows] == epochs
    want = {(tag, r["epoch"]): [float(np.float32(x))] for r in rows for tag, x in tensorboard_scalars(r).items()}
    assert read_scalars(workdir / "tensorboard") == want
    assert len(event_files(workdir / "tensorboard")) == 1


@pytest.mark.slow
def test_tensorboard_events_survive_a_kill_mid_epoch_a_resume_and_a_checkpoint_fallback(tmp_path):
    _killed_toy_run(tmp_path, "metrics", 2)  # epoch 2's row and events written, its checkpoint not
    _assert_events_equal_metrics(tmp_path, [0, 1, 2])
    assert toy_run(tmp_path, 4)[0] == 3  # resumes after epoch 1: epoch 2's first row and events dropped
    _assert_events_equal_metrics(tmp_path, [0, 1, 2, 3])
    _truncate_data(tmp_path, 3)  # the newest checkpoint is broken: the rerun falls back to epoch 2's
    assert toy_run(tmp_path, 4)[0] == 3
    _assert_events_equal_metrics(tmp_path, [0, 1, 2, 3])


def test_tensorboard_events_are_rebuilt_from_metrics_jsonl_on_opening(tmp_path):
    row = {f"group/m{i:02d}": i + 0.25 for i in range(33)} | {"mode": "genenv", "ok": True, "none": None}
    writer = MetricsWriter(tmp_path)
    for epoch in (-1, 0, 1, 2):
        writer.write(epoch, row)  # never closed: each row's events are on disk when write returns
    _assert_events_equal_metrics(tmp_path, [-1, 0, 1, 2])
    [events] = event_files(tmp_path / "tensorboard")
    wall_time_0 = read_events(events.read_bytes())[2].wall_time
    with open(events, "ab") as f:  # a kill in the middle of appending a record
        f.write(scalars_record(3, row_scalars := tensorboard_scalars({"epoch": 3, **row}), 1.0)[:-7])
    stale = tmp_path / "tensorboard" / "events.out.tfevents.1700000000.host"  # an old writer's file
    stale.write_bytes(version_record(1.0) + scalars_record(0, row_scalars, 1.0))
    (tmp_path / "tensorboard" / ".tmp.genenv-events.1234").write_bytes(b"a rebuild cut by a kill")
    assert read_scalars(tmp_path / "tensorboard")[("group/m00", 0)] == [0.25, 0.25]  # doubled, as before

    truncate_metrics(tmp_path / "metrics.jsonl", 1)  # resume after epoch 1
    MetricsWriter(tmp_path).write(2, row | {"group/m00": 7.5})
    _assert_events_equal_metrics(tmp_path, [-1, 0, 1, 2])
    assert read_scalars(tmp_path / "tensorboard")[("group/m00", 2)] == [7.5]
    [events] = event_files(tmp_path / "tensorboard")
    assert storage.listdir(tmp_path / "tensorboard") == [events.name]
    written = read_events(events.read_bytes())
    assert written[0].file_version == "brain.Event:2" and written[2].wall_time == wall_time_0  # times kept

    MetricsWriter(tmp_path).write(2, {"group/m00": 8.5})  # a row replaced in place: its later values win
    assert read_scalars(tmp_path / "tensorboard")[("group/m00", 2)] == [8.5]
    assert ("group/m01", 2) not in read_scalars(tmp_path / "tensorboard")


# ----------------------------------------------------------------------------------------------
# Workdir lock: one run per workdir; a lock left by a killed run is taken over.

_HOLD_LOCK = """
import sys, time
from genenv_jax.workdir.lock import WorkdirLock
lock = WorkdirLock(sys.argv[1]); lock.acquire()
print("locked", flush=True)
time.sleep(120)
"""


def _lock_holder(workdir: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(workdir)], stdout=subprocess.PIPE, text=True,
                             cwd=REPO)
    assert child.stdout.readline().strip() == "locked"
    return child


def test_a_second_run_in_the_same_workdir_is_refused(tmp_path):
    child = _lock_holder(tmp_path)
    try:
        with pytest.raises(WorkdirLockedError) as refusal:
            WorkdirLock(tmp_path).acquire()
        assert str(refusal.value).startswith(f"workdir {tmp_path} is in use by pid {child.pid} on host "
                                             f"{socket.gethostname()} since ")
        assert str(refusal.value).endswith("; stop that run or use another --workdir")
    finally:
        child.kill()
        child.wait()
    with WorkdirLock(tmp_path) as lock:  # in one process too: a second holder is refused
        assert lock.held
        with pytest.raises(WorkdirLockedError, match=f"in use by pid {os.getpid()}"):
            WorkdirLock(tmp_path).acquire()
    assert (tmp_path / "run.lock").read_text() == ""  # a clean release leaves no holder behind


def test_a_lock_left_by_a_killed_run_is_taken_over_with_one_line(tmp_path, caplog):
    child = _lock_holder(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait()
    with WorkdirLock(tmp_path):
        holder = json.loads((tmp_path / "run.lock").read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    [line] = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    assert line.startswith(f"workdir {tmp_path}: taking over the lock left by pid {child.pid} on host "
                           f"{socket.gethostname()} since ")
    assert line.endswith("that process is gone (killed or crashed)")
