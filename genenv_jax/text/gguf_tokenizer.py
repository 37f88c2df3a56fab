"""The tokenizer a GGUF file carries. Only the file's metadata is read (no tensors), so the text
layer needs no model code: `models.gguf_io` reads the same files' tensors."""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from genenv_jax.text.tokenization import load_tokenizer, qwen25_chat_template

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

GGUF_SUFFIX = ".gguf"


def is_gguf_path(path: str | os.PathLike) -> bool:
    """Whether a model source names a GGUF file (by its suffix)."""
    return os.fspath(path).lower().endswith(GGUF_SUFFIX)


@functools.cache
def _plain_view_reader():
    """`gguf.GGUFReader` with its field parser slicing a plain ndarray view of the memory map.

    The reader parses every metadata value when it opens a file, one slice per string, and a
    Qwen2.5 vocabulary is ~760k of them (tokens, merges, their lengths). Sliced from the
    `np.memmap` itself, each slice builds another memmap object (`__array_finalize__`): ~6 of the
    ~11 s it took to open the real 0.5B's file on 2 cores. The view reads the same mapped bytes
    (no copy), so fields and tensors are the same arrays' values."""
    import numpy as np
    from gguf import GGUFReader

    class PlainViewReader(GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            dtype = np.dtype(dtype)
            count = int(count)
            arr = plain[offset:offset + dtype.itemsize * count].view(dtype)[:count]
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    return PlainViewReader


def open_gguf(path: str | os.PathLike):
    """A `gguf.GGUFReader` over the file (memory-mapped), or one line naming the file: missing, the
    `gguf` package absent, or a truncated / non-GGUF file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such GGUF file")
    try:
        reader_class = _plain_view_reader()
    except ImportError:
        raise ImportError(f"{path}: reading GGUF files needs the `gguf` package (pip install gguf)") from None
    try:
        return reader_class(path, "r")
    except Exception as err:  # noqa: BLE001 - the gguf package raises ValueError, struct.error, IndexError, ...
        raise ValueError(f"{path}: cannot read GGUF file (truncated or not GGUF): {type(err).__name__}: {err}") from None


class GGUFMetadata(Protocol):
    """What the tokenizer needs of an open GGUF file (`models.gguf_io.GGUFTensorReader` is one)."""

    path: str

    def field(self, key: str, default: Any = None) -> Any: ...


class GGUFFields:
    """A GGUF file's metadata values, without its tensors."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.reader = open_gguf(self.path)

    def field(self, key: str, default: Any = None) -> Any:
        """A metadata value (str, number, bool or list), or `default` if absent."""
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()


def _bundled_vocabulary() -> tuple[list[str], list[str]]:
    """(id -> token, merges as 'a b') of the bundled Qwen2.5 tokenizer."""
    tok = load_tokenizer()
    backend = json.loads(tok.backend_tokenizer.to_str())
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    return tok.convert_ids_to_tokens(list(range(len(tok)))), merges


def matches_bundled_vocabulary(meta: GGUFMetadata) -> bool:
    """Whether the file's tokenizer is Qwen2.5's BPE: the same tokens at the same ids, the same
    merges, and past Qwen2.5's 151,665 tokens only unused padding entries (a padded embedding)."""
    from gguf import TokenType

    if meta.field("tokenizer.ggml.model") != "gpt2":
        return False
    tokens, merges = meta.field("tokenizer.ggml.tokens") or [], meta.field("tokenizer.ggml.merges") or []
    bundled_tokens, bundled_merges = _bundled_vocabulary()
    n = len(bundled_tokens)
    if len(tokens) < n or tokens[:n] != bundled_tokens or merges != bundled_merges:
        return False
    types = meta.field("tokenizer.ggml.token_type") or []
    return all(t in (TokenType.UNUSED, TokenType.CONTROL) and tokens[n + i].startswith("[PAD")
               for i, t in enumerate(types[n:]))


def gguf_tokenizer(source: "str | os.PathLike | GGUFMetadata") -> "PreTrainedTokenizerBase":
    """The tokenizer a GGUF file carries, with its chat template; `source` is a path or an open file.

    Where the file's vocabulary is exactly Qwen2.5's (checked token by token and merge by merge),
    this is the bundled Qwen2.5 tokenizer with the file's chat template; otherwise transformers
    builds one from the file's own tokens and merges.
    """
    meta = GGUFFields(source) if isinstance(source, (str, os.PathLike)) else source
    template = meta.field("tokenizer.chat_template") or qwen25_chat_template()
    if matches_bundled_vocabulary(meta):
        tok = load_tokenizer()
        if tok.chat_template == template:
            return tok
        tok = copy.deepcopy(tok)
        tok.chat_template = template
        return tok
    from transformers import AutoTokenizer

    p = Path(meta.path).resolve()
    try:
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - transformers' GGUF converter raises many kinds
        raise ValueError(f"{meta.path}: cannot build a tokenizer from the file ({type(err).__name__}: {err})") from None
    if not getattr(tok, "chat_template", None):
        tok.chat_template = template
    return tok
