"""Benchmark data as tensorflow-datasets builders: read the user's download once, serve it through Grain.

A benchmark describes its data with a `BenchmarkSource` (name, version, splits, the function that
reads one split of the user's download directory into JSON records). `load_records` prepares it
once with a TFDS builder (ArrayRecord files, no TensorFlow needed) under
`$GENENV_CACHE/tfds/<name>/<fingerprint>` and reads it back as a Grain data source. The
fingerprint covers the download directory's path and its files' sizes and times, so a changed
download is prepared again instead of being served stale.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

Record = dict[str, Any]


class DataMissing(ValueError):
    """The user's download directory is absent or lacks a file the benchmark needs (one-line message)."""


@dataclasses.dataclass(frozen=True)
class BenchmarkSource:
    """One benchmark's downloaded data as the TFDS builder sees it.

    name: the builder's name (a Python identifier, e.g. "api_bank"). version: "MAJOR.MINOR.PATCH";
      bump it whenever `examples` changes what it yields. splits: the split names `examples` serves.
    examples: `(data_dir, split) -> iterable of JSON-serialisable dicts`, in the benchmark's order.
    required: paths relative to data_dir that must exist (checked before anything is prepared).
    instructions: how to get the data (shown when it is missing), e.g. the download command.
    """

    name: str
    version: str
    splits: tuple[str, ...]
    examples: Callable[[Path, str], Iterable[Record]]
    required: tuple[str, ...] = ()
    instructions: str = ""

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"BenchmarkSource.name {self.name!r} must be a Python identifier")


def default_cache_root() -> Path:
    """$GENENV_CACHE/tfds (default ~/.cache/genenv_jax/tfds)."""
    return Path(os.environ.get("GENENV_CACHE") or Path.home() / ".cache" / "genenv_jax") / "tfds"


def check_data_dir(source: BenchmarkSource, data_dir: str | os.PathLike) -> Path:
    """The download directory as an absolute path; a one-line DataMissing naming what is absent."""
    root = Path(data_dir).expanduser().resolve()
    hint = f" ({source.instructions})" if source.instructions else ""
    if not str(data_dir) or not root.is_dir():
        raise DataMissing(f"{source.name}: data_dir {str(data_dir)!r} is not a directory{hint}")
    missing = [r for r in source.required if not (root / r).exists()]
    if missing:
        raise DataMissing(f"{source.name}: {root / missing[0]} is missing"
                          f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}{hint}")
    return root


def fingerprint(root: Path) -> str:
    """A digest of the directory's path and every file's relative path, size and mtime."""
    h = hashlib.sha256(str(root).encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        stat = path.stat()
        h.update(f"\0{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def load_records(source: BenchmarkSource, data_dir: str | os.PathLike, split: str,
                 cache_dir: str | os.PathLike | None = None) -> list[Record]:
    """The records of one split, prepared once (TFDS, ArrayRecord) and read through Grain, in order."""
    if split not in source.splits:
        raise ValueError(f"{source.name}: unknown split {split!r}; expected one of {source.splits}")
    root = check_data_dir(source, data_dir)
    builder = _builder(source, root, Path(cache_dir) if cache_dir else default_cache_root())
    return _read_split(builder, split)


def _read_split(builder, split: str) -> list[Record]:
    import grain

    dataset = grain.MapDataset.source(builder.as_data_source(split))
    rows = [row for row in (dataset[i] for i in range(len(dataset))) if int(row["index"]) >= 0]
    rows.sort(key=lambda row: int(row["index"]))  # TFDS shuffles by key; restore the source order
    return [json.loads(_text(row["record"])) for row in rows]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _builder(source: BenchmarkSource, root: Path, cache_root: Path):
    """A prepared TFDS builder for `source` over the download at `root` (prepared on first use)."""
    import tensorflow_datasets as tfds

    if not sys.stderr.isatty():
        tfds.disable_progress_bar()
    builder_cls = _builder_class(source.name, source.version, source.splits)
    data_dir = cache_root / source.name / fingerprint(root)

    def make():
        return builder_cls(examples=source.examples, manual_root=root, data_dir=str(data_dir),
                           file_format="array_record")

    builder = make()
    try:
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(root)))
    except FileExistsError:  # another process prepared the same download first: read its files
        builder = make()
    return builder


@functools.cache
def _builder_class(name: str, version: str, splits: tuple[str, ...]):
    """The TFDS builder class of one benchmark (records as JSON text with their index)."""
    import tensorflow_datasets as tfds

    class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version(version)
        MANUAL_DOWNLOAD_INSTRUCTIONS = f"the {name} download directory (data_dir)"

        def __init__(self, *, examples, manual_root: Path, **kwargs):
            self._examples, self._manual_root = examples, manual_root
            super().__init__(**kwargs)

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "index": tfds.features.Scalar(dtype=np.int64), "record": tfds.features.Text()}))

        def _split_generators(self, dl_manager):
            return {split: self._generate_examples(split) for split in splits}

        def _generate_examples(self, split):
            index = -1
            for index, record in enumerate(self._examples(self._manual_root, split)):
                yield index, {"index": index, "record": json.dumps(record, ensure_ascii=False, sort_keys=True)}
            if index < 0:  # TFDS refuses to write an empty split: one placeholder row, dropped by _read_split
                yield -1, {"index": -1, "record": "null"}

    Builder.name = name
    Builder.__name__ = Builder.__qualname__ = f"{name}_builder"
    return Builder
