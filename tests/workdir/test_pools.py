"""Pools: atomic append-only shards, crash leftovers ignored, Grain sources, mixing ratios."""

import collections
import dataclasses
import json
import os

import grain
import pytest

from genenv_jax.workdir import pool_mixing, pools


def _records(tag, n):
    return [{"src": tag, "i": i, "reward": float(i % 2), "text": f"task {tag}-{i} ✓"} for i in range(n)]


def test_append_read_roundtrip_and_manifest(tmp_path):
    pool = pools.Pool(tmp_path, "d_train")
    assert pool.epochs == [] and pool.records() == [] and len(pool.data_source()) == 0
    path0 = pool.append_epoch(0, _records("e0", 5))
    pool.append_epoch(1, [])  # an epoch that produced nothing
    pool.append_epoch(2, _records("e2", 3))
    assert path0 == tmp_path / "d_train" / "epoch_00000.array_record" and path0.exists()
    assert pool.epochs == [0, 1, 2] and pool.num_records() == 8 and pool.num_records([1]) == 0

    reopened = pools.Pool(tmp_path, "d_train", writable=False)
    assert reopened.manifest == pool.manifest
    assert json.loads((tmp_path / "d_train" / "manifest.json").read_text()) == pool.manifest
    assert reopened.records() == _records("e0", 5) + _records("e2", 3)
    assert reopened.records(epochs=2) == _records("e2", 3)
    assert reopened.records(epochs=range(2)) == _records("e0", 5)

    source = reopened.data_source(epochs=[0, 2])
    assert isinstance(source, grain.sources.RandomAccessDataSource)
    assert len(source) == 8 and source[6] == _records("e2", 3)[1]
    assert source.__getitems__([0, 7]) == [_records("e0", 5)[0], _records("e2", 3)[2]]
    assert list(grain.MapDataset.source(source)) == _records("e0", 5) + _records("e2", 3)


def test_append_validates_input(tmp_path):
    pool = pools.Pool(tmp_path, "d_env")
    pool.append_epoch(3, _records("a", 1))
    with pytest.raises(ValueError, match="epochs must increase"):
        pool.append_epoch(3, _records("b", 1))
    with pytest.raises(ValueError, match="JSON"):
        pool.append_epoch(4, [{"weight": float("nan")}])
    with pytest.raises(TypeError, match="mappings or dataclass"):
        pool.append_epoch(4, ["not a record"])
    assert pool.epochs == [3] and sorted(os.listdir(pool.dir)) == ["epoch_00003.array_record", "manifest.json"]
    with pytest.raises(PermissionError):
        pools.Pool(tmp_path, "d_env", writable=False).append_epoch(5, [])

    @dataclasses.dataclass
    class Task:
        task_id: str
        weight: float

    pool.append_epoch(4, [Task("t1", 2.5)])
    assert pool.records(4) == [{"task_id": "t1", "weight": 2.5}]


def test_crash_before_manifest_commit_loses_nothing_committed(tmp_path, monkeypatch):
    pool = pools.Pool(tmp_path, "d_train")
    pool.append_epoch(0, _records("e0", 4))
    committed = pool.manifest

    real_replace = os.replace

    def crash_on_manifest(src, dst):
        if os.fspath(dst).endswith("manifest.json"):
            raise OSError("simulated crash while committing the manifest")
        return real_replace(src, dst)

    monkeypatch.setattr(pools.os, "replace", crash_on_manifest)
    with pytest.raises(OSError, match="simulated crash"):
        pool.append_epoch(1, _records("e1", 4))
    monkeypatch.setattr(pools.os, "replace", real_replace)
    # The shard of epoch 1 is on disk (renamed), plus a temp manifest, but neither is committed.
    assert (pool.dir / "epoch_00001.array_record").exists()
    assert any(name.startswith(".tmp.manifest.json") for name in os.listdir(pool.dir))

    reader = pools.Pool(tmp_path, "d_train", writable=False)  # a reader ignores the leftovers
    assert reader.epochs == [0] and reader.records() == _records("e0", 4)
    reopened = pools.Pool(tmp_path, "d_train")  # opening deletes nothing ...
    assert reopened.manifest == committed and len(os.listdir(pool.dir)) == 4
    assert reopened.roll_back_to(committed) == [1]  # ... rolling back to a checkpoint's manifest does
    assert sorted(os.listdir(pool.dir)) == ["epoch_00000.array_record", "manifest.json"]
    reopened.append_epoch(1, _records("again", 2))  # and the epoch can be redone
    assert reopened.records(1) == _records("again", 2)


def test_crash_mid_shard_write_leaves_temp_file_that_roll_back_cleans(tmp_path, monkeypatch):
    pool = pools.Pool(tmp_path, "d_env")
    pool.append_epoch(0, _records("e0", 3))
    monkeypatch.setattr(pools, "fsync_file", lambda path: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError, match="disk gone"):
        pool.append_epoch(1, _records("e1", 3))
    monkeypatch.undo()
    assert any(name.startswith(".tmp.epoch_00001") for name in os.listdir(pool.dir))
    reopened = pools.Pool(tmp_path, "d_env")
    assert reopened.epochs == [0] and reopened.records() == _records("e0", 3)
    assert reopened.roll_back_to(reopened.manifest) == []  # a temp file is not a dropped epoch
    assert sorted(os.listdir(pool.dir)) == ["epoch_00000.array_record", "manifest.json"]


def test_truncate_and_corruption_detection(tmp_path):
    pool = pools.Pool(tmp_path, "d_train")
    for epoch in range(4):
        pool.append_epoch(epoch, _records(f"e{epoch}", 2))
    assert pool.truncate_to(1) == [2, 3]
    assert pool.epochs == [0, 1] and not (pool.dir / "epoch_00002.array_record").exists()
    assert pools.Pool(tmp_path, "d_train").records() == _records("e0", 2) + _records("e1", 2)
    assert pool.truncate_to(5) == []
    assert pool.truncate_to(-1) == [0, 1] and pool.epochs == []

    pool.append_epoch(0, _records("x", 2))
    with open(pool.dir / "epoch_00000.array_record", "ab") as f:
        f.write(b"garbage")
    resized = pools.Pool(tmp_path, "d_train")  # opens (resume may still fix it), but refuses to be used
    assert "bytes, the manifest says" in resized.problem
    with pytest.raises(pools.PoolError, match=r"epoch_00000.array_record has \d+ bytes, the manifest says \d+"):
        resized.records()
    with pytest.raises(pools.PoolError, match="belongs to pool"):
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "manifest.json").write_text((pool.dir / "manifest.json").read_text())
        pools.Pool(tmp_path, "other")


def test_an_untrusted_pool_refuses_every_use_until_rolled_back(tmp_path):
    pool = pools.Pool(tmp_path, "d_train")
    pool.append_epoch(0, _records("e0", 2))
    pool.append_epoch(1, _records("e1", 2))
    saved = pool.manifest
    (pool.dir / "manifest.json").unlink()
    lost = pools.Pool(tmp_path, "d_train")
    assert lost.problem.startswith(f"{pool.dir / 'manifest.json'} is missing but {pool.dir} holds 2 shard files")
    for use in (lambda: lost.records(), lambda: lost.manifest, lambda: lost.epochs, lambda: lost.append_epoch(2, [])):
        with pytest.raises(pools.PoolError, match="is missing but"):
            use()
    assert len(os.listdir(pool.dir)) == 2  # nothing deleted
    assert lost.roll_back_to(saved) == [] and lost.problem is None
    assert lost.records() == _records("e0", 2) + _records("e1", 2)

    empty_dir = pools.Pool(tmp_path, "fresh")  # no manifest and no shards: simply empty
    assert empty_dir.problem is None and empty_dir.epochs == []


SOURCES = {"base": _records("base", 40), "historical": _records("historical", 300), "new": _records("new", 64)}
RATIOS = {"base": 0.2, "historical": 0.3, "new": 0.5}


def test_mixing_ratios_hold_over_many_batches():
    counts = collections.Counter()
    per_batch_new = []
    for batch in pool_mixing.mixed_batches(SOURCES, RATIOS, batch_size=16, seed=7, num_batches=250):
        assert len(batch) == 16
        counts.update(r["src"] for r in batch)
        per_batch_new.append(sum(r["src"] == "new" for r in batch))
    total = sum(counts.values())
    for name, ratio in RATIOS.items():
        assert counts[name] / total == pytest.approx(ratio, abs=0.01)
    assert min(per_batch_new) >= 7 and max(per_batch_new) <= 9  # every batch is near 8 of 16
    # The small sources are cycled through full permutations: every record of "new" gets used.
    new_ids = [r["i"] for b in pool_mixing.mixed_batches(SOURCES, RATIOS, 16, 7, num_batches=10) for r in b
               if r["src"] == "new"]
    assert sorted(new_ids[:64]) == list(range(64)) and new_ids[:64] != list(range(64))


def test_mixing_is_deterministic_per_seed():
    a = list(pool_mixing.mixed_batches(SOURCES, RATIOS, 8, seed=3, num_batches=20))
    b = list(pool_mixing.mixed_batches(SOURCES, RATIOS, 8, seed=3, num_batches=20))
    c = list(pool_mixing.mixed_batches(SOURCES, RATIOS, 8, seed=4, num_batches=20))
    assert a == b and a != c
    # Endless iteration starts with the same batches.
    endless = pool_mixing.mixed_batches(SOURCES, RATIOS, 8, seed=3)
    assert [next(endless) for _ in range(5)] == a[:5]


def test_mixing_with_pool_sources_and_empty_components(tmp_path):
    pool = pools.Pool(tmp_path, "d_train")
    pool.append_epoch(0, _records("e0", 30))
    sources = {"base": _records("base", 10), "historical": pool.data_source(range(0)), "new": pool.data_source(0)}
    assert pool_mixing.effective_ratios(sources, RATIOS) == pytest.approx({"base": 0.2 / 0.7, "new": 0.5 / 0.7})
    counts = collections.Counter(r["src"] for b in pool_mixing.mixed_batches(sources, RATIOS, 7, 0, num_batches=40)
                                 for r in b)
    assert set(counts) == {"base", "e0"} and counts["e0"] / 280 == pytest.approx(5 / 7, abs=0.01)
    with pytest.raises(ValueError, match="nothing to sample"):
        pool_mixing.mixed_batches({"new": []}, {"new": 1.0}, 4, 0)
    with pytest.raises(ValueError, match="ratios name"):
        pool_mixing.mixed_batches(sources, {"base": 1.0}, 4, 0)
    with pytest.raises(ValueError, match="batch_size"):
        pool_mixing.mixed_batches(sources, RATIOS, 0, 0)
    with pytest.raises(ValueError, match="finite number >= 0"):
        pool_mixing.mixed_batches(sources, {**RATIOS, "new": -1.0}, 4, 0)
