"""Local BM25 over a wiki-18-format corpus (bm25s), built once and cached.

The index lives under `$GENENV_CACHE/bamboogle/bm25/<key>/`, where the key digests the corpus's
absolute path, size and modification time and the index settings: a changed corpus is indexed
again, an unchanged one is loaded. It is built in a temporary directory beside its final name and
renamed into place, so a crash never leaves a half index under the real name; an exclusive lock
(`<key>.lock`, flock) makes concurrent processes (environment workers) wait for one builder and then
load its index. Passages are read back by byte offset from the corpus (a gzip corpus is unpacked
into the index directory once, since gzip cannot seek). Passages that share no term with the query
(score 0) are not returned.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
from pathlib import Path

import numpy as np

from genenv_jax.workdir.atomic_files import fsync_dir
from genenv_jax.domains.bamboogle.passages import CorpusError, Passage, open_corpus, passage_of_line

INDEX_VERSION = 1
TOKENIZER = {"lower": True, "stopwords": "en", "stemmer": None}  # bm25s's defaults, no stemmer dependency
CHUNK = 10_000  # passages tokenized at a time (only token ids are kept in memory)


def default_cache_root() -> Path:
    """$GENENV_CACHE/bamboogle (default ~/.cache/genenv_jax/bamboogle)."""
    return Path(os.environ.get("GENENV_CACHE") or Path.home() / ".cache" / "genenv_jax") / "bamboogle"


def index_key(corpus: Path) -> str:
    """Digest of what the index depends on: the corpus file (path, size, mtime) and the settings."""
    stat = corpus.stat()
    key = json.dumps([INDEX_VERSION, str(corpus.resolve()), stat.st_size, stat.st_mtime_ns, TOKENIZER])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class BM25Retriever:
    """BM25 search over one corpus file; the index is built on first use (see the module docstring)."""

    def __init__(self, corpus: str | os.PathLike, cache_dir: str | os.PathLike | None = None):
        self.corpus = Path(corpus).expanduser()
        if not self.corpus.is_file():
            raise CorpusError(f"bamboogle: corpus {self.corpus} is not a file")
        root = Path(cache_dir) if cache_dir else default_cache_root()
        self.index_dir = root / "bm25" / index_key(self.corpus)
        self.built_now = False
        self._lock = threading.Lock()
        if not (self.index_dir / "index.json").is_file():
            self.index_dir.parent.mkdir(parents=True, exist_ok=True)
            with open(self.index_dir.parent / f"{self.index_dir.name}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                if not (self.index_dir / "index.json").is_file():  # another process may have built it meanwhile
                    self._build()
        self._load()

    # ------------------------------------------------------------------ build
    def _build(self) -> None:
        import bm25s
        from bm25s.tokenization import Tokenizer

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        tmp = self.index_dir.with_name(f".tmp.{self.index_dir.name}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        unpacked = self.corpus.suffix == ".gz"
        plain = tmp / "corpus.jsonl" if unpacked else self.corpus
        tokenizer = Tokenizer(lower=TOKENIZER["lower"], stopwords=TOKENIZER["stopwords"])
        offsets, ids, chunk = [], [], []
        out = open(plain, "wb") if unpacked else None
        try:
            position = 0
            with open_corpus(self.corpus) as f:
                for number, line in enumerate(f, 1):
                    if line.strip():
                        passage = passage_of_line(line, f"{self.corpus}:{number}")
                        offsets.append(position)
                        chunk.append(passage.contents)
                        if len(chunk) == CHUNK:
                            ids += tokenizer.tokenize(chunk, show_progress=False, return_as="ids")
                            chunk = []
                    if out is not None:
                        out.write(line if line.endswith(b"\n") else line + b"\n")
                        position += len(line) + (not line.endswith(b"\n"))
                    else:
                        position += len(line)
        finally:
            if out is not None:
                out.close()
        if chunk:
            ids += tokenizer.tokenize(chunk, show_progress=False, return_as="ids")
        if not offsets:
            raise CorpusError(f"bamboogle: corpus {self.corpus} holds no passages")
        model = bm25s.BM25()
        model.index(ids, show_progress=False)
        model.save(str(tmp))
        tokenizer.save_vocab(str(tmp))
        np.save(tmp / "offsets.npy", np.asarray(offsets, np.int64))
        meta = {"version": INDEX_VERSION, "corpus": str(self.corpus.resolve()), "passages": len(offsets),
                "unpacked": unpacked, "tokenizer": TOKENIZER}
        (tmp / "index.json").write_text(json.dumps(meta, indent=1) + "\n")
        fsync_dir(tmp)
        try:
            os.rename(tmp, self.index_dir)
        except OSError:  # another process finished the same index first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
            if not (self.index_dir / "index.json").is_file():
                raise
        fsync_dir(self.index_dir.parent)
        self.built_now = True

    # ------------------------------------------------------------------ search
    def _load(self) -> None:
        import bm25s
        from bm25s.tokenization import Tokenizer

        meta = json.loads((self.index_dir / "index.json").read_text())
        self.model = bm25s.BM25.load(str(self.index_dir))
        self.tokenizer = Tokenizer(lower=TOKENIZER["lower"], stopwords=TOKENIZER["stopwords"])
        self.tokenizer.load_vocab(str(self.index_dir))
        self.offsets = np.load(self.index_dir / "offsets.npy")
        self.size = int(meta["passages"])
        self._plain = self.index_dir / "corpus.jsonl" if meta["unpacked"] else self.corpus
        self._file = None

    def passage(self, index: int) -> Passage:
        """The corpus's `index`-th passage (0-based), read by its byte offset."""
        with self._lock:
            if self._file is None:
                self._file = open(self._plain, "rb")
            self._file.seek(int(self.offsets[index]))
            line = self._file.readline()
        return passage_of_line(line, f"{self._plain}@{int(self.offsets[index])}")

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """The `topk` best passages of each query, best first, with their BM25 scores (score > 0 only:
        a query with no term of the corpus gets none)."""
        if not queries:
            return []
        k = max(1, min(topk, self.size))
        tokens = self.tokenizer.tokenize(list(queries), update_vocab=False, show_progress=False, return_as="ids")
        docs, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [[dataclasses.replace(self.passage(int(d)), score=float(s)) for d, s in zip(row, row_scores) if s > 0]
                for row, row_scores in zip(docs, scores)]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


__all__ = ["BM25Retriever", "INDEX_VERSION", "default_cache_root", "index_key"]
