"""The data pipeline: the download step (`genenv_jax.data.download`) against a local HTTP server, the
packaged manifests against the real benchmark files, and `genenv_jax.data.prepared` (TFDS + Grain).

No test reaches the network: every download goes to an http.server on 127.0.0.1 (ephemeral port).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from genenv_jax.data import download as dl
from genenv_jax.data.prepared import BenchmarkSource, DataMissing, load_records
from tests.support import REPO, TESTS

FIXTURES = TESTS / "fixtures" / "data"
MINI = FIXTURES / "mini"
MINI_MANIFEST = FIXTURES / "mini_manifest.json"
SHARED = REPO.parent / "shared" / "benchmarks"
SHARED_DIRS = {"api_bank": SHARED / "api-bank", "travelplanner": SHARED / "travelplanner"}
REQUIRED_FILES = [p.relative_to(MINI).as_posix() for p in MINI.rglob("*") if p.is_file() and p.suffix != ".gz"]


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory with single-range requests (206) and, for paths in `server.cut`, a response
    that promises the whole file but sends half of it and drops the connection."""

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            return super().send_head()
        data = path.read_bytes()
        start = 0
        spec = self.headers.get("Range", "")
        if spec.startswith("bytes=") and spec.endswith("-") and self.server.ranges:
            start = int(spec[len("bytes="):-1])
        self.server.requests.append((self.path, start))
        if start >= len(data) > 0:
            self.send_error(416)
            return None
        cut = self.path in self.server.cut
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        if cut:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return None
        self.wfile.write(body)
        return None


@pytest.fixture
def serve(monkeypatch):
    """serve(directory) -> the base URL of a local server of that directory (torn down after the test)."""
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    servers = []

    def start(directory: Path, *, cut=(), ranges=True):
        handler = functools.partial(_Handler, directory=str(directory))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.cut, server.ranges, server.requests = set(cut), ranges, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _run(capsys, *args) -> tuple[int, str, str]:
    code = dl.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest_variant(tmp_path: Path, edit) -> Path:
    raw = json.loads(MINI_MANIFEST.read_text())
    edit(raw)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(raw))
    return path


def test_download_lands_every_file_in_the_layout_and_a_rerun_skips(serve, tmp_path, capsys):
    base, server = serve(MINI)
    dest = tmp_path / "dest"
    code, out, err = _run(capsys, "bamboogle", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))
    assert (code, err) == (0, "")
    for rel in REQUIRED_FILES:
        assert (dest / rel).read_bytes() == (MINI / rel).read_bytes(), rel
    assert not (dest / "corpus.jsonl.gz").exists()  # the corpus group needs --include_corpus
    assert not list(dest.rglob("*.part"))
    assert "unhashed.txt (0.1 kB)  [no known checksum: not verified]" in out
    assert "--include_corpus" in out and "manual   manual/big.csv: copy it by hand" in out
    assert "mini: all 4 files in place" in out

    server.requests.clear()
    code, out, err = _run(capsys, "bamboogle", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST),
                          "--include_corpus")
    assert (code, err) == (0, "")
    assert server.requests == [("/corpus.jsonl.gz", 0)]  # everything else was verified and skipped
    assert out.count("  present  ") == 4 and "fetched  corpus.jsonl.gz" in out
    assert (dest / "corpus.jsonl.gz").read_bytes() == (MINI / "corpus.jsonl.gz").read_bytes()


def test_corrupted_file_is_refetched(serve, tmp_path, capsys):
    base, server = serve(MINI)
    dest = tmp_path / "dest"
    assert _run(capsys, "travelplanner", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))[0] == 0
    corrupted = dest / "nested" / "tables" / "prices.csv"
    data = bytearray(corrupted.read_bytes())
    data[100] ^= 1  # same size, different bytes: only the checksum can tell
    corrupted.write_bytes(bytes(data))
    server.requests.clear()
    code, out, _ = _run(capsys, "travelplanner", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))
    assert code == 0 and "refetched nested/tables/prices.csv" in out
    assert [path for path, _ in server.requests] == ["/nested/tables/prices.csv"]
    assert _sha(corrupted) == _sha(MINI / "nested" / "tables" / "prices.csv")


def test_checksum_mismatch_is_a_one_line_error_and_leaves_nothing_in_place(serve, tmp_path, capsys):
    base, _ = serve(MINI)
    manifest = _manifest_variant(tmp_path, lambda raw: raw["files"][0].update(sha256="0" * 64))
    dest = tmp_path / "dest"
    code, out, err = _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base, "--manifest", str(manifest))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: questions.jsonl: checksum mismatch for {base}/questions.jsonl: expected sha256 000")
    assert not (dest / "questions.jsonl").exists() and not (dest / "questions.jsonl.part").exists()
    assert (dest / "notes" / "with space.txt").is_file()  # the other files are still fetched
    assert "mini: 1 of 4 files failed; re-run to retry" in out


def test_a_file_longer_than_the_manifest_says_is_a_size_mismatch(serve, tmp_path, capsys):
    base, _ = serve(MINI)
    manifest = _manifest_variant(tmp_path, lambda raw: raw["files"][1].update(size=1000))
    dest = tmp_path / "dest"
    code, _, err = _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base, "--manifest", str(manifest))
    assert code == 1
    assert err == (f"error: nested/tables/prices.csv: size mismatch for {base}/nested/tables/prices.csv: expected "
                   f"1000 bytes, got 58610 (partial file removed)\n")
    assert not list((dest / "nested" / "tables").iterdir())


def test_http_error_names_the_url_and_the_cli_exits_nonzero(serve, tmp_path):
    base, _ = serve(MINI)
    manifest = _manifest_variant(tmp_path, lambda raw: raw["files"].append(
        {"path": "missing/upstream.json", "source": "upstream", "size": 3, "sha256": "1" * 64}))
    dest = tmp_path / "dest"
    env = {**os.environ, "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}
    proc = subprocess.run([sys.executable, "-m", "genenv_jax.data.download", "api_bank", "--dest", str(dest),
                           "--base_url", base, "--manifest", str(manifest)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"error: missing/upstream.json: HTTP 404 File not found from "
                                   f"{base}/missing/upstream.json")
    assert not (dest / "missing").exists()
    assert "\r" not in proc.stdout + proc.stderr  # no progress line when not on a terminal


def test_interrupted_download_leaves_no_file_in_place_and_a_rerun_resumes(serve, tmp_path, capsys):
    big = "/nested/tables/prices.csv"
    base, _ = serve(MINI, cut={big})
    dest = tmp_path / "dest"
    code, _, err = _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))
    assert code == 1
    assert err.startswith(f"error: nested/tables/prices.csv: download from {base}{big} interrupted after ")
    assert "re-run to resume" in err and len(err.strip().splitlines()) == 1
    target = dest / "nested" / "tables" / "prices.csv"
    part = target.with_name("prices.csv.part")
    assert not target.exists()
    half = part.stat().st_size
    assert 0 < half < (MINI / big[1:]).stat().st_size

    base, server = serve(MINI)  # a healthy server: the re-run asks only for the missing bytes
    code, out, err = _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))
    assert (code, err) == (0, "")
    assert server.requests == [(big, half)]
    assert _sha(target) == _sha(MINI / big[1:]) and not part.exists()


def test_a_server_without_ranges_restarts_the_partial_file(serve, tmp_path, capsys):
    big = "/nested/tables/prices.csv"
    dest = tmp_path / "dest"
    base, _ = serve(MINI, cut={big})
    assert _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))[0] == 1
    base, server = serve(MINI, ranges=False)
    assert _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))[0] == 0
    assert _sha(dest / big[1:]) == _sha(MINI / big[1:])


def test_a_complete_part_of_unknown_size_is_fetched_again_after_416(serve, tmp_path, capsys):
    base, server = serve(MINI)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "unhashed.txt.part").write_bytes((MINI / "unhashed.txt").read_bytes())  # nothing left to resume
    code, out, err = _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base, "--manifest", str(MINI_MANIFEST))
    assert (code, err) == (0, "")
    assert ("/unhashed.txt", 51) in server.requests and ("/unhashed.txt", 0) in server.requests
    assert (dest / "unhashed.txt").read_bytes() == (MINI / "unhashed.txt").read_bytes()


def test_progress_lines_only_where_asked_and_unreachable_hosts_are_one_line(serve, tmp_path):
    base, _ = serve(MINI)
    manifest = dl.load_manifest(MINI_MANIFEST)
    progress, out, err = io.StringIO(), io.StringIO(), io.StringIO()
    assert dl.download(manifest, tmp_path / "a", base_url=base, out=out, err=err, progress=progress) == []
    for entry in manifest.files[:4]:
        assert f"\r  {entry.path}: " in progress.getvalue()
    assert "\r" not in out.getvalue() and err.getvalue() == ""

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    failures = dl.download(manifest, tmp_path / "b", base_url=f"http://127.0.0.1:{port}", out=out, err=err)
    assert len(failures) == 4
    assert failures[0].startswith(f"questions.jsonl: cannot reach http://127.0.0.1:{port}/questions.jsonl (")


def test_manifest_paths_may_not_leave_the_directory(tmp_path):
    manifest = _manifest_variant(tmp_path, lambda raw: raw["files"][0].update(path="../escape.txt"))
    with pytest.raises(ValueError, match="must be relative and stay inside DIR"):
        dl.load_manifest(manifest)


@pytest.mark.parametrize("name", dl.BENCHMARKS)
def test_packaged_manifests_load_and_pin_every_url(name):
    manifest = dl.load_manifest(dl.manifest_path(name))
    assert manifest.name == name and manifest.files
    assert len({f.path for f in manifest.files}) == len(manifest.files)
    for entry in manifest.files:
        assert entry.url.startswith("https://") and "/main/" not in entry.url, entry.url
        assert entry.sha256 is None or len(entry.sha256) == 64
        assert entry.sha256 or "no known checksum" in entry.note, entry.path  # unknown ones say so


@pytest.mark.parametrize("name", sorted(SHARED_DIRS))
def test_manifest_checksums_match_the_real_benchmark_files(name):
    root = SHARED_DIRS[name]
    if not root.is_dir():
        pytest.skip(f"{root} is absent (real benchmark data only exists in the project's workspace)")
    manifest = dl.load_manifest(dl.manifest_path(name))
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    listed = {f.path for f in manifest.files}
    assert on_disk <= listed, sorted(on_disk - listed)[:5]
    for entry in manifest.files:
        if entry.path in on_disk:
            assert (entry.size, entry.sha256) == ((root / entry.path).stat().st_size, _sha(root / entry.path)), entry.path


def test_api_bank_download_end_to_end_from_a_mirror(serve, tmp_path, capsys):
    root = SHARED_DIRS["api_bank"]
    if not root.is_dir():
        pytest.skip(f"{root} is absent (real benchmark data only exists in the project's workspace)")
    base, _ = serve(root)
    dest = tmp_path / "api-bank"
    code, out, err = _run(capsys, "api_bank", "--dest", str(dest), "--base_url", base)
    assert (code, err) == (0, "")
    assert "api_bank: all 301 files in place" in out
    assert (dest / "lv3-samples" / "Hotel Booking.txt").is_file()
    assert (dest / "lv1-lv2-samples" / "level-2-toolsearcher" / "AddAlarm-level-3-1.jsonl").is_file()


# ---- genenv_jax.data.prepared ----

def _numbers_source(calls: list, required=("numbers.txt",)) -> BenchmarkSource:
    def examples(data_dir: Path, split: str):
        calls.append(split)
        values = (data_dir / "numbers.txt").read_text().split()
        for i, value in enumerate(values):
            if (i % 3 == 0) == (split == "test"):
                yield {"value": value, "position": i, "nested": {"split": split, "text": f"é{i}"}}

    return BenchmarkSource(name="numbers_fixture", version="1.0.0", splits=("train", "test"), examples=examples,
                           required=required, instructions="write numbers.txt")


def test_prepared_once_reused_in_order_and_prepared_again_when_the_download_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "download"
    data.mkdir()
    values = [str(v) for v in range(1000, 1000 - 7 * 60, -7)]  # 60 distinct values, not sorted ascending
    (data / "numbers.txt").write_text(" ".join(values))
    calls: list[str] = []
    source = _numbers_source(calls)

    train = load_records(source, data, "train")
    assert [r["value"] for r in train] == [v for i, v in enumerate(values) if i % 3]  # source order, not TFDS's
    assert train[0] == {"value": values[1], "position": 1, "nested": {"split": "train", "text": "é1"}}
    prepared_calls = len(calls)
    assert sorted(set(calls)) == ["test", "train"]
    test = load_records(source, data, "test")
    assert [r["position"] for r in test] == list(range(0, 60, 3))
    assert len(calls) == prepared_calls  # served from the prepared ArrayRecord files
    assert list((tmp_path / "cache" / "tfds" / "numbers_fixture").iterdir())

    (data / "numbers.txt").write_text(" ".join(values[:10]))  # a new download: new fingerprint
    assert [r["value"] for r in load_records(source, data, "train")] == [v for i, v in enumerate(values[:10]) if i % 3]
    assert len(calls) > prepared_calls
    assert len(list((tmp_path / "cache" / "tfds" / "numbers_fixture").iterdir())) == 2


def test_prepared_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    source = _numbers_source([], required=("numbers.txt", "more/a.json", "more/b.json"))
    with pytest.raises(DataMissing) as missing_dir:
        load_records(source, tmp_path / "nowhere", "train")
    message = str(missing_dir.value)
    assert "\n" not in message and "numbers_fixture" in message and "nowhere" in message
    assert "write numbers.txt" in message
    (tmp_path / "download").mkdir()
    (tmp_path / "download" / "numbers.txt").write_text("1 2 3")
    with pytest.raises(DataMissing) as missing_file:
        load_records(source, tmp_path / "download", "train")
    message = str(missing_file.value)
    assert "\n" not in message and "more/a.json is missing (and 1 more)" in message
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        load_records(source, tmp_path / "download", "validation")
    assert not (tmp_path / "cache").exists()  # nothing prepared for a failed call


def test_fixture_manifest_matches_its_files():
    raw = json.loads(MINI_MANIFEST.read_text())
    for item in raw["files"]:
        path = MINI / item["path"]
        if item["sha256"]:
            assert (item["size"], item["sha256"]) == (path.stat().st_size, _sha(path)), item["path"]
        else:
            assert path.is_file(), item["path"]


def test_an_empty_split_reads_as_no_records(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "download"
    data.mkdir()
    (data / "numbers.txt").write_text("5")  # one value: position 0 goes to "test", "train" is empty
    source = _numbers_source([])
    assert [r["value"] for r in load_records(source, data, "test")] == ["5"]
    assert load_records(source, data, "train") == []


def test_concurrent_preparations_of_one_download_both_succeed(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "download"
    data.mkdir()
    (data / "numbers.txt").write_text("1 2 3")
    barrier = threading.Barrier(2)

    def examples(data_dir: Path, split: str):
        try:
            barrier.wait(timeout=2)  # both preparations are under way before either renames its files
        except threading.BrokenBarrierError:
            pass  # (an implementation that serialises preparation gets here: fine)
        yield {"split": split}

    source = BenchmarkSource(name="race_fixture", version="1.0.0", splits=("train",), examples=examples)
    results: list = []

    def load():
        try:
            results.append(load_records(source, data, "train"))
        except Exception as error:  # noqa: BLE001 - the test reports what the loser saw
            results.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [[{"split": "train"}]] * 2
