"""The DreamGym replay buffer: transitions with their embeddings, from which the experience model's
prompt retrieves the top-k real transitions most similar to the current (s_t, a_t) (the DreamGym
paper; docs/dreamgym.md). Seeded offline with real transitions, it grows online.

Held in memory, persisted through a `genenv_jax.workdir.pools.Pool`: one shard per epoch (`commit`), so the
loop's checkpoint manifests and `Pool.roll_back_to` cover it like the other pools, and a resumed
buffer is exactly the one checkpointed. Each record carries its embedding (base64 of little-endian
float32 plus its dimension), so a reopened buffer retrieves bit-identically without re-embedding.

Retrieval is cosine similarity in numpy: a [Q, N] matmul over chunks of the buffer, so a large
buffer never needs Q x N scores at once; ties go to the earlier transition (insertion order).

Shape letters: N transitions, Q queries, D embedding dimension, C rows of one chunk.
"""

from __future__ import annotations

import base64
import binascii
import collections
from typing import Any, Callable, Collection, Mapping, Sequence, Union

import numpy as np

from genenv_jax.domains.experience import REAL_SOURCES, SOURCES, Transition
from genenv_jax.workdir.pools import Pool

RECORD_VERSION = 1
RECORD_KEYS = frozenset({"replay_version", "transition", "embedding"})
VECTOR_DTYPE = np.dtype("<f4")     # stored byte order: little-endian float32
DEFAULT_CHUNK_ROWS = 8192          # buffer rows per retrieval matmul
READ_BLOCK = 1024                  # records decoded at once when opening

# An exclusion: per query, the (task_id, step) pairs it must not retrieve (looked up in an index);
# or a predicate (query index, transition) -> True to exclude, called once per query and eligible
# transition (Python calls: for small buffers or rare use).
Exclude = Union[Sequence[Collection[tuple[str, int]]], Callable[[int, Transition], bool], None]


class ReplayError(ValueError):
    """A replay pool record that cannot be read back (one line naming pool, epoch and index)."""


# -- records ----------------------------------------------------------------------------------

def encode_vector(vector: np.ndarray) -> dict[str, Any]:
    """JSON form of one embedding: its dimension and the base64 of its little-endian float32 bytes."""
    vector = np.ascontiguousarray(vector, VECTOR_DTYPE)  # [D]
    return {"dim": int(vector.shape[0]), "f32le": base64.b64encode(vector.tobytes()).decode("ascii")}


def decode_vector(data: Any) -> np.ndarray:
    """The float32 [D] vector of `encode_vector`'s output; ValueError if it is not one."""
    if not isinstance(data, Mapping) or set(data) != {"dim", "f32le"}:
        raise ValueError("embedding is not an object with exactly 'dim' and 'f32le'")
    dim, text = data["dim"], data["f32le"]
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1 or not isinstance(text, str):
        raise ValueError(f"embedding has dim {dim!r} and f32le of type {type(text).__name__}")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ValueError(f"embedding f32le is not base64 ({e})") from None
    if len(raw) != dim * VECTOR_DTYPE.itemsize:
        raise ValueError(f"embedding holds {len(raw)} bytes, dim {dim} needs {dim * VECTOR_DTYPE.itemsize}")
    return np.frombuffer(raw, VECTOR_DTYPE).astype(np.float32)


def encode_record(transition: Transition, vector: np.ndarray) -> dict[str, Any]:
    """The pool record of one buffer entry."""
    return {"replay_version": RECORD_VERSION, "transition": transition.to_json(), "embedding": encode_vector(vector)}


def decode_record(record: Any) -> tuple[Transition, np.ndarray]:
    """(transition, vector [D]) of a pool record; ValueError (or TypeError) saying what is wrong."""
    if not isinstance(record, Mapping) or set(record) != RECORD_KEYS:
        keys = sorted(record) if isinstance(record, Mapping) else type(record).__name__
        raise ValueError(f"not a replay record (keys {keys}, expected {sorted(RECORD_KEYS)})")
    if record["replay_version"] != RECORD_VERSION:
        raise ValueError(f"replay_version {record['replay_version']!r}, this code reads {RECORD_VERSION}")
    vector = decode_vector(record["embedding"])
    _check_vector(vector)
    return Transition.from_json(record["transition"]), vector


def _check_vector(vector: np.ndarray) -> None:
    """ValueError unless the vector is finite and non-zero (cosine needs a norm)."""
    if not np.all(np.isfinite(vector)):
        raise ValueError("embedding has NaN or inf")
    if not np.any(vector):
        raise ValueError("embedding is all zeros")


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


# -- the buffer -------------------------------------------------------------------------------

class ReplayBuffer:
    """Transitions and their embeddings [N, D] in insertion order: committed ones (read from the
    pool or committed here) first, then pending ones (added, not yet committed).

    Pending transitions are retrievable at once but reach the pool only with `commit(epoch)`. On
    multi-host runs every process keeps the same buffer (the same `add` calls) and only the process
    whose pool is writable (process 0, `loop.shared_pools`) writes the shard.
    """

    def __init__(self, pool: Pool, *, chunk_rows: int = DEFAULT_CHUNK_ROWS):
        if chunk_rows < 1:
            raise ValueError(f"ReplayBuffer: chunk_rows must be >= 1, got {chunk_rows}")
        self.pool = pool
        self.chunk_rows = int(chunk_rows)
        self._transitions: list[Transition] = []
        self._vectors = np.zeros((0, 0), np.float32)   # [capacity, D]; rows past len(self) unused
        self._inv_norms = np.zeros((0,), np.float64)   # [capacity]
        self._real = np.zeros((0,), bool)              # [capacity]
        self._by_key: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
        self._dim: int | None = None
        self._num_committed = 0

    @classmethod
    def open(cls, pool: Pool, *, dim: int | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> "ReplayBuffer":
        """The buffer of `pool`'s committed shards, every record checked (ReplayError naming pool,
        epoch and index on the first bad one). `dim`: the embedding dimension expected, if known."""
        buffer = cls(pool, chunk_rows=chunk_rows)
        buffer._dim = dim
        for shard in pool.shards:
            transitions, vectors = buffer._read_epoch(shard.epoch, shard.num_records)
            if transitions:
                buffer._append(transitions, vectors)
        buffer._num_committed = len(buffer)
        return buffer

    def _read_epoch(self, epoch: int, num_records: int) -> tuple[list[Transition], np.ndarray]:
        """The checked transitions and vectors [n, D] of one committed shard."""
        source = self.pool.data_source(epochs=epoch)
        if len(source) != num_records:
            raise self._error(epoch, len(source), f"shard holds {len(source)} records, the manifest says {num_records}")
        transitions, vectors = [], []
        for start in range(0, num_records, READ_BLOCK):
            for offset, record in enumerate(self._read_block(source, epoch, start, min(start + READ_BLOCK, num_records))):
                index = start + offset
                try:
                    transition, vector = decode_record(record)
                except (ValueError, TypeError) as e:
                    raise self._error(epoch, index, _one_line(e)) from None
                if self._dim is not None and vector.shape[0] != self._dim:
                    raise self._error(epoch, index, f"embedding dim {vector.shape[0]}, expected {self._dim}")
                self._dim = vector.shape[0]
                transitions.append(transition)
                vectors.append(vector)
        return transitions, np.stack(vectors) if vectors else np.zeros((0, self._dim or 0), np.float32)

    def _read_block(self, source, epoch: int, start: int, stop: int) -> list[Any]:
        """Records [start, stop) of a shard as dicts; on bytes that do not decode, finds the index."""
        try:
            return source.__getitems__(range(start, stop))
        except Exception:  # noqa: BLE001 - located and reported below, record by record
            for index in range(start, stop):
                try:
                    source[index]
                except Exception as e:  # noqa: BLE001
                    raise self._error(epoch, index, f"undecodable record ({_one_line(e)})") from None
            raise

    def _error(self, epoch: int, index: int, reason: str) -> ReplayError:
        return ReplayError(f"replay pool {self.pool.name!r} ({self.pool.dir}): epoch {epoch} record {index}: {reason}")

    # -- contents ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._transitions)

    def __getitem__(self, index: int) -> Transition:
        return self._transitions[index]

    @property
    def transitions(self) -> list[Transition]:
        """All transitions in insertion order (a copy of the list)."""
        return list(self._transitions)

    @property
    def embeddings(self) -> np.ndarray:
        """The stored vectors [N, D] (read-only view)."""
        view = self._vectors[:len(self)]
        view.flags.writeable = False
        return view

    @property
    def dim(self) -> int | None:
        """D, once known (from the pool, `open(dim=)` or the first `add`)."""
        return self._dim

    @property
    def num_pending(self) -> int:
        """Transitions added since the last commit."""
        return len(self) - self._num_committed

    def counts(self) -> dict[str, int]:
        """Number of transitions per source (every source listed, zeros included)."""
        counter = collections.Counter(t.source for t in self._transitions)
        return {source: counter[source] for source in SOURCES}

    # -- growing -----------------------------------------------------------------------------

    def add(self, transitions: Sequence[Transition], embeddings: np.ndarray) -> None:
        """Adds transitions with their vectors [n, D] (stored as float32, not renormalised); they are
        pending until `commit`. ValueError on a count or dimension mismatch or a bad vector."""
        transitions = list(transitions)
        vectors = np.asarray(embeddings, np.float32)  # [n, D]
        if vectors.ndim != 2 or vectors.shape[0] != len(transitions):
            raise ValueError(f"ReplayBuffer.add: {len(transitions)} transitions need embeddings [{len(transitions)}, D], "
                             f"got shape {vectors.shape}")
        if self._dim is not None and vectors.shape[1] != self._dim:
            raise ValueError(f"ReplayBuffer.add: embedding dim {vectors.shape[1]} does not match the buffer's "
                             f"{self._dim} (pool {self.pool.name!r}); were they made by another model?")
        for i, (t, v) in enumerate(zip(transitions, vectors)):
            if not isinstance(t, Transition):
                raise TypeError(f"ReplayBuffer.add: item {i} is a {type(t).__name__}, not a Transition")
            try:
                _check_vector(v)
            except ValueError as e:
                raise ValueError(f"ReplayBuffer.add: item {i}: {e}") from None
        if transitions:
            self._append(transitions, vectors)

    def _append(self, transitions: list[Transition], vectors: np.ndarray) -> None:
        """Appends checked entries, growing the arrays by doubling."""
        start, stop = len(self), len(self) + len(transitions)
        self._dim = vectors.shape[1]
        self._reserve(stop)
        self._vectors[start:stop] = vectors
        self._inv_norms[start:stop] = 1.0 / np.sqrt(_float64_row_dots(vectors, vectors))
        self._real[start:stop] = [t.source in REAL_SOURCES for t in transitions]
        for index, t in enumerate(transitions, start):
            self._by_key[(t.task_id, t.step)].append(index)
        self._transitions.extend(transitions)

    def _reserve(self, size: int) -> None:
        """Makes room for `size` rows."""
        capacity = self._vectors.shape[0]
        if size <= capacity and self._vectors.shape[1] == self._dim:
            return
        capacity = max(size, 2 * capacity, 64)
        self._vectors = _grown(self._vectors[:len(self)], (capacity, self._dim))
        self._inv_norms = _grown(self._inv_norms[:len(self)], (capacity,))
        self._real = _grown(self._real[:len(self)], (capacity,))

    def commit(self, epoch: int) -> None:
        """Writes the pending transitions as the pool's shard of `epoch` (an empty shard if none),
        where the pool is writable (process 0); they are committed in memory on every process."""
        records = [encode_record(t, v) for t, v in zip(self._transitions[self._num_committed:],
                                                        self._vectors[self._num_committed:len(self)])]
        if self.pool.writable:
            self.pool.append_epoch(epoch, records)
        self._num_committed = len(self)

    # -- retrieval ---------------------------------------------------------------------------

    def retrieve(self, query_vectors: np.ndarray, k: int, *, real_only: bool, exclude: Exclude = None) -> list[list[int]]:
        """Per query, the indices of the k most cosine-similar transitions, best first, ties to the
        earlier one. real_only: only expert/random/agent ones. exclude: see `Exclude`."""
        return [[i for i, _ in row] for row in self.retrieve_scored(query_vectors, k, real_only=real_only, exclude=exclude)]

    def retrieve_scored(self, query_vectors: np.ndarray, k: int, *, real_only: bool,
                        exclude: Exclude = None) -> list[list[tuple[int, float]]]:
        """`retrieve` with each index's cosine similarity: [(index, cosine), ...] per query."""
        if k < 0:
            raise ValueError(f"ReplayBuffer.retrieve: k must be >= 0, got {k}")
        queries = self._normalised_queries(query_vectors)  # [Q, D]
        excluded = self._excluded_indices(exclude, len(queries))
        best = [(np.zeros(0, np.float32), np.zeros(0, np.int64)) for _ in range(len(queries))]
        if k == 0:
            return [[] for _ in queries]
        for start in range(0, len(self), self.chunk_rows):
            stop = min(start + self.chunk_rows, len(self))
            scores = self._chunk_scores(queries, start, stop, real_only)  # [Q, C]
            for q in range(len(queries)):
                row = scores[q]
                self._mask_excluded(row, q, start, stop, exclude, excluded)
                best[q] = _merge_top_k(best[q], row, start, k)
        return [[(int(i), float(s)) for s, i in zip(*pair)] for pair in best]

    def _normalised_queries(self, query_vectors: np.ndarray) -> np.ndarray:
        """Queries [Q, D] as float64 unit vectors (float32 input); ValueError on a shape or dimension mismatch."""
        queries = np.asarray(query_vectors, np.float32)
        if queries.ndim != 2:
            raise ValueError(f"ReplayBuffer.retrieve: query_vectors must be [Q, D], got shape {queries.shape}")
        if self._dim is not None and queries.shape[1] != self._dim:
            raise ValueError(f"ReplayBuffer.retrieve: query dim {queries.shape[1]} does not match the buffer's "
                             f"{self._dim} (pool {self.pool.name!r})")
        for i, q in enumerate(queries):
            try:
                _check_vector(q)
            except ValueError as e:
                raise ValueError(f"ReplayBuffer.retrieve: query {i}: {e}") from None
        queries = queries.astype(np.float64)
        return queries / np.sqrt(_float64_row_dots(queries, queries))[:, None]

    def _chunk_scores(self, queries: np.ndarray, start: int, stop: int, real_only: bool) -> np.ndarray:
        """Cosine similarities [Q, C] of the queries with rows [start, stop); -inf where not eligible.

        Computed in float64 and rounded to float32: a float32 dot product's last bit depends on the
        summation order that numpy's and BLAS's kernels pick (by CPU and by the arrays' memory
        alignment), so a buffer reopened from its pool could rank a near tie differently from the
        one that wrote it. float64 sums differ by ~1e-16 relative, far below float32's rounding."""
        rows = self._vectors[start:stop].astype(np.float64)  # [C, D]
        scores = ((queries @ rows.T) * self._inv_norms[start:stop]).astype(np.float32)  # [Q, C]
        if real_only:
            scores[:, ~self._real[start:stop]] = -np.inf
        return scores

    def _excluded_indices(self, exclude: Exclude, num_queries: int) -> list[np.ndarray] | None:
        """Per query, the sorted buffer indices its (task_id, step) pairs exclude; None for a predicate or none."""
        if exclude is None or callable(exclude):
            return None
        if len(exclude) != num_queries:
            raise ValueError(f"ReplayBuffer.retrieve: exclude has {len(exclude)} entries for {num_queries} queries")
        return [np.asarray(sorted(i for key in keys for i in self._by_key.get((key[0], int(key[1])), ())), np.int64)
                for keys in exclude]

    def _mask_excluded(self, row: np.ndarray, q: int, start: int, stop: int, exclude: Exclude,
                       excluded: list[np.ndarray] | None) -> None:
        """Sets to -inf the scores (row [C], buffer rows [start, stop)) that query q must not retrieve."""
        if excluded is not None:
            indices = excluded[q]
            hit = indices[(indices >= start) & (indices < stop)]
            row[hit - start] = -np.inf
        elif exclude is not None:
            for j in range(start, stop):
                if np.isfinite(row[j - start]) and exclude(q, self._transitions[j]):
                    row[j - start] = -np.inf


def _float64_row_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise dot products [N] of a, b [N, D], summed in float64."""
    return np.einsum("nd,nd->n", a.astype(np.float64), b.astype(np.float64))


def _grown(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A zero array of `shape` and array's dtype that starts with `array`'s rows."""
    out = np.zeros(shape, array.dtype)
    if len(array):  # an empty array may have no columns yet ([0, 0] before the first add)
        out[:len(array)] = array
    return out


def _merge_top_k(best: tuple[np.ndarray, np.ndarray], row: np.ndarray, start: int,
                 k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (scores, indices) among `best` and the finite scores of `row` (buffer rows from
    `start`), ordered by score descending then index ascending, so ties go to the earlier row."""
    eligible = np.flatnonzero(np.isfinite(row))  # positions in the chunk
    if len(eligible) > k:  # keep every score tied with the k-th: which tie wins is decided below
        kth = np.partition(row[eligible], len(eligible) - k)[len(eligible) - k]
        eligible = eligible[row[eligible] >= kth]
    scores = np.concatenate([best[0], row[eligible]])
    indices = np.concatenate([best[1], eligible.astype(np.int64) + start])
    order = np.lexsort((indices, -scores))[:k]
    return scores[order], indices[order]
