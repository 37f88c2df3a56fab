"""The workdir's file operations for local paths and gs:// URLs, in one place.

A local path stays a `pathlib.Path` and keeps POSIX semantics: a file that must survive a crash
whole is written under a temp name, fsynced and renamed, and its directory fsynced
(`atomic_files`). A gs:// URL is an `etils.epath.Path`, which reaches Cloud Storage through gcsfs
(fsspec) when TensorFlow is not installed (with TensorFlow, through tf.io.gfile); Orbax uses the
same paths. On GCS:

- an object upload is atomic (readers see the old object or the new one, never half), so an
  atomic write is one upload to the final name, and there is nothing to fsync;
- objects cannot be appended: `append_text` rewrites the whole (small) object;
- ArrayRecord readers and Grain read local files only: a shard is written to a local staging file
  and uploaded to its final name (`staged_upload`), and read back through a local cache
  (`local_copy`) under `cache_dir()`, keyed by object path, generation and size, so a rewritten
  object is never served stale. The cache may be deleted at any time;
- there are no directories (`makedirs` does nothing) and a rename is a copy then a delete (`move`).

gcsfs's listing cache is turned off: other processes (a pod's other hosts) write the same workdir.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Union

import fsspec
from etils import epath

from genenv_jax.workdir.atomic_files import TMP_PREFIX, write_bytes_atomic

GS = "gs://"
CACHE_ENV = "GENENV_CACHE_DIR"
AnyPath = Union[Path, epath.Path]
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

fsspec.config.conf.setdefault("gcs", {}).setdefault("use_listings_cache", False)


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a gs:// URL (anything else is a local path)."""
    return os.fspath(path).startswith(GS)


def as_path(path: str | os.PathLike) -> AnyPath:
    """`path` as a pathlib.Path (local) or an epath.Path (gs://); ValueError for other URL schemes."""
    text = os.fspath(path)
    if text.startswith(GS):
        if len(text) <= len(GS) or text[len(GS)] == "/":
            raise ValueError(f"{text}: expected gs://BUCKET/PATH")
        return epath.Path(text)
    if _URL_RE.match(text):
        raise ValueError(f"{text}: only local paths and gs:// URLs are supported")
    return Path(text)


def absolute(path: str | os.PathLike) -> str:
    """`path` as an absolute local path or a gs:// URL without a trailing slash."""
    text = os.fspath(as_path(path))
    return text.rstrip("/") if is_remote(text) else os.path.abspath(text)


def _gcs() -> Any:
    """The gcsfs filesystem (the instance epath uses too: fsspec caches one per settings)."""
    return fsspec.filesystem("gcs", finalize_on_close=True)


# -- reading and listing -----------------------------------------------------------------------


def makedirs(path: str | os.PathLike) -> None:
    """Creates a local directory and its parents; nothing for gs:// (GCS has no directories, and a
    missing bucket fails at the first write, naming the object)."""
    if not is_remote(path):
        Path(path).mkdir(parents=True, exist_ok=True)


def exists(path: str | os.PathLike) -> bool:
    return as_path(path).exists()


def file_size(path: str | os.PathLike) -> int | None:
    """The size of the file `path` in bytes, or None if it does not exist."""
    if is_remote(path):
        try:
            return int(_gcs().info(os.fspath(path))["size"])
        except FileNotFoundError:
            return None
    try:
        return Path(path).stat().st_size
    except FileNotFoundError:
        return None


def listdir(path: str | os.PathLike) -> list[str]:
    """Sorted names directly under `path`; [] if it does not exist."""
    if not as_path(path).is_dir():
        return []
    try:
        return sorted(p.name for p in as_path(path).iterdir())
    except FileNotFoundError:
        return []


def read_bytes(path: str | os.PathLike) -> bytes:
    return as_path(path).read_bytes()


def open_text(path: str | os.PathLike, errors: str = "strict") -> IO[str]:
    """`path` opened for reading UTF-8 text line by line (universal newlines, as `open` does)."""
    if is_remote(path):
        return io.StringIO(read_bytes(path).decode("utf-8", errors=errors), newline=None)
    return open(path, encoding="utf-8", errors=errors)


# -- writing -----------------------------------------------------------------------------------


def write_atomic(path: str | os.PathLike, data: str | bytes, *, fsync: bool = True) -> None:
    """Replaces `path` by `data` (str: UTF-8) so that readers see the old or the new content, never
    half: locally a temp file, fsync and rename (fsync=False: no fsync), on GCS one upload."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    if is_remote(path):
        _gcs().pipe_file(os.fspath(path), data)
    else:
        write_bytes_atomic(Path(path), data, fsync=fsync)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Replaces `path` by the JSON of `obj` (indented, sorted keys), atomically."""
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True))


def append_text(path: str | os.PathLike, text: str) -> None:
    """Appends `text` to `path` durably: locally an append and fsync; on GCS, where objects cannot
    be appended, the whole object is rewritten (one atomic upload; meant for small files)."""
    if is_remote(path):
        old = read_bytes(path) if exists(path) else b""
        _gcs().pipe_file(os.fspath(path), old + text.encode("utf-8"))
        return
    with open(path, "a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def unlink(path: str | os.PathLike, missing_ok: bool = False) -> None:
    as_path(path).unlink(missing_ok=missing_ok)


def move(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Renames a file or directory tree: locally `os.replace` (atomic); on GCS a copy of every
    object then a delete (not atomic: callers move only what no reader needs meanwhile)."""
    if is_remote(src) != is_remote(dst):
        raise ValueError(f"cannot move {src} to {dst}: both must be local or both gs://")
    if is_remote(src):
        _gcs().mv(os.fspath(src), os.fspath(dst), recursive=True)
    else:
        os.replace(src, dst)


# -- ArrayRecord files on GCS: staged writes and a local read cache ----------------------------


def cache_dir() -> Path:
    """Local directory for staged and cached gs:// files: $GENENV_CACHE_DIR, else
    $XDG_CACHE_HOME/genenv_jax/gcs (default ~/.cache/genenv_jax/gcs)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "genenv_jax" / "gcs"


def _cache_file(url: str, info: dict) -> Path:
    """Where the object `url` of this generation and size is cached."""
    key = hashlib.sha256(url.encode("utf-8")).hexdigest()[:20]
    return cache_dir() / key / f"{info.get('generation') or 0}-{info['size']}-{url.rsplit('/', 1)[-1]}"


def _into_cache(local: Path, url: str) -> None:
    """Moves `local`, just uploaded as `url`, into the read cache (no download to read it back)."""
    cached = _cache_file(url, _gcs().info(url))
    cached.parent.mkdir(parents=True, exist_ok=True)
    os.replace(local, cached)


@contextlib.contextmanager
def staged_upload(final: AnyPath) -> Iterator[Path]:
    """A local temp file to write the content of the gs:// object `final` into; uploaded to
    `final` (one object write, so readers never see half) when the block ends without an error."""
    url = os.fspath(final)
    staging = cache_dir() / "staging"
    staging.mkdir(parents=True, exist_ok=True)
    tmp = staging / f"{TMP_PREFIX}{url.rsplit('/', 1)[-1]}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        yield tmp
        upload(tmp, url)
        _into_cache(tmp, url)
    finally:
        tmp.unlink(missing_ok=True)


def upload(local: str | os.PathLike, remote: str | os.PathLike) -> None:
    """Copies the local file `local` to the gs:// object `remote` (one object write)."""
    _gcs().put_file(os.fspath(local), os.fspath(remote))


def local_copy(path: str | os.PathLike) -> str:
    """A local file with the content of `path`: the path itself if local; for gs:// a copy in the
    read cache, downloaded once per object generation."""
    if not is_remote(path):
        return os.fspath(path)
    url = os.fspath(path)
    cached = _cache_file(url, _gcs().info(url))
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f"{TMP_PREFIX}{cached.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            _gcs().get_file(url, str(tmp))
            os.replace(tmp, cached)
        finally:
            tmp.unlink(missing_ok=True)
    return str(cached)


def bucket_and_key(path: str | os.PathLike) -> tuple[str, str]:
    """("bucket", "key/of/object") of a gs:// URL."""
    text = os.fspath(path)
    if not text.startswith(GS):
        raise ValueError(f"{text}: not a gs:// URL")
    bucket, _, key = text[len(GS):].partition("/")
    return bucket, key
