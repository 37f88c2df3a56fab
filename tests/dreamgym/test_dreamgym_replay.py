"""DreamGym replay buffer and its embedder: cosine top-k retrieval with deterministic ties, source
and (task_id, step) exclusions, padding-invariant embeddings that keep a text's end, and
persistence through a Pool that resumes bit-identically and rolls back with a checkpoint manifest."""

import dataclasses

import numpy as np
import pytest

from genenv_jax.dreamgym.embedding import Embedder, key_text, transition_key_text
from genenv_jax.dreamgym.replay import ReplayBuffer, ReplayError, encode_record
from genenv_jax.domains.experience import REAL_SOURCES, Transition
from genenv_jax.models import preset
from genenv_jax.workdir.pools import Pool
from tests.support.random_params import random_params


class ByteText:
    """A byte-level tokenizer for the micro model (vocabulary 256): fast, and one token per ASCII char."""

    pad_id = 0

    def encode(self, text):
        return list(text.encode("utf-8"))


@pytest.fixture(scope="module")
def embedder():
    cfg = preset("micro")
    return Embedder(cfg, random_params(cfg, 0), ByteText(), max_length=96, max_batch=4)


def _transition(i, source="expert", task_id=None, step=None):
    return Transition(domain="alfworld", task_id=task_id or f"task{i % 3}", task="put a mug in the coffeemachine",
                      history=[], state=f"You are in room {i}. You see a desk {i * 7 % 11} and a shelf.",
                      action=f"go to desk {i}", next_state=f"You arrive at desk {i}.", reward=0.0, done=False,
                      valid=True, reasoning="moved", source=source, step=i if step is None else step)


SOURCES_CYCLE = ("expert", "random", "agent", "synthetic")


def _filled(embedder, pool, n=12, chunk_rows=5):
    transitions = [_transition(i, SOURCES_CYCLE[i % 4]) for i in range(n)]
    buffer = ReplayBuffer.open(pool, chunk_rows=chunk_rows)
    buffer.add(transitions, embedder([transition_key_text(t) for t in transitions]))
    return buffer, transitions


def _pool(tmp_path, name="replay"):
    return Pool(tmp_path / "pools", name)


def test_identical_state_action_retrieves_its_own_transition_first(tmp_path, embedder):
    buffer, transitions = _filled(embedder, _pool(tmp_path))
    queries = embedder([key_text(t.state, t.action) for t in transitions])  # [Q, D]
    scored = buffer.retrieve_scored(queries, 3, real_only=False)
    assert [row[0][0] for row in scored] == list(range(len(transitions)))
    assert all(row[0][1] == pytest.approx(1.0, abs=1e-5) for row in scored)
    assert all(row[1][1] < 1.0 - 1e-6 for row in scored)  # distinct texts: distinct vectors
    assert buffer.counts() == {"expert": 3, "random": 3, "agent": 3, "synthetic": 3} and len(buffer) == 12


def _reference_top_k(vectors, queries, k, eligible):
    """Top-k by the same float32 cosine formula over the whole matrix, ties to the lower index."""
    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    scores = (qn @ vectors.T) * (1.0 / np.linalg.norm(vectors, axis=1))  # [Q, N]
    out = []
    for q in range(len(queries)):
        idx = np.flatnonzero(eligible[q])
        order = np.lexsort((idx, -scores[q, idx]))[:k]
        out.append([int(i) for i in idx[order]])
    return out


def test_top_k_order_equals_a_numpy_rederivation_with_ties_by_insertion_order(tmp_path):
    """Entries in {-1, 0, 1} and queries of norm 2 or 4 make every dot product exact, so ties are
    exact and many; chunks of 7 rows test merging across chunks."""
    rng = np.random.RandomState(0)
    n, d = 60, 16
    vectors = rng.randint(-1, 2, size=(n, d)).astype(np.float32)
    vectors[np.abs(vectors).sum(axis=1) == 0, 0] = 1.0  # no zero rows
    vectors[[3, 10, 30, 50]] = [1.0] * 4 + [0.0] * (d - 4)  # exact duplicates in three chunks, norm 2
    queries = np.zeros((6, d), np.float32)
    for q in range(6):
        queries[q, rng.choice(d, 4 if q % 2 else 16, replace=False)] = rng.choice([-1.0, 1.0], 4 if q % 2 else 16)
    transitions = [_transition(i, SOURCES_CYCLE[i % 4], task_id="t", step=i) for i in range(n)]
    buffer = ReplayBuffer.open(_pool(tmp_path), chunk_rows=7)
    buffer.add(transitions[:25], vectors[:25])
    buffer.add(transitions[25:], vectors[25:])

    everything = np.ones((6, n), bool)
    real = np.broadcast_to(np.array([t.source in REAL_SOURCES for t in transitions]), (6, n))
    for k in (1, 5, 20, n + 3):
        assert buffer.retrieve(queries, k, real_only=False) == _reference_top_k(vectors, queries, k, everything)
        assert buffer.retrieve(queries, k, real_only=True) == _reference_top_k(vectors, queries, k, real)
    dup_query = vectors[3:4]  # norm 2: exact scores
    assert buffer.retrieve(dup_query, 4, real_only=False)[0] == [3, 10, 30, 50]  # tie: insertion order
    assert buffer.retrieve(queries, 0, real_only=False) == [[]] * 6


def test_real_only_excludes_synthetic_transitions(tmp_path, embedder):
    buffer, transitions = _filled(embedder, _pool(tmp_path))
    synthetic = [i for i, t in enumerate(transitions) if t.source == "synthetic"]
    queries = buffer.embeddings[synthetic]  # each synthetic transition's own vector
    assert [row[0] for row in buffer.retrieve(queries, 12, real_only=False)] == synthetic
    real_rows = buffer.retrieve(queries, 12, real_only=True)
    assert all(len(row) == 9 and all(transitions[i].real for i in row) for row in real_rows)


def test_exclusions_by_task_step_pairs_and_by_predicate(tmp_path, embedder):
    buffer, transitions = _filled(embedder, _pool(tmp_path))
    queries = buffer.embeddings[[0, 5]]  # [2, D]
    plain = buffer.retrieve(queries, 4, real_only=False)
    pairs = [{(transitions[0].task_id, 0)}, {(transitions[5].task_id, 5), ("no-such-task", 1)}]
    by_pairs = buffer.retrieve(queries, 4, real_only=False, exclude=pairs)
    assert by_pairs[0][:3] == plain[0][1:4] and by_pairs[1][:3] == plain[1][1:4]
    assert 0 not in by_pairs[0] and 5 not in by_pairs[1]

    def own(q, t):
        return (t.task_id, t.step) in pairs[q]

    assert buffer.retrieve(queries, 4, real_only=False, exclude=own) == by_pairs
    everything_out = buffer.retrieve(queries, 4, real_only=False, exclude=lambda q, t: True)
    assert everything_out == [[], []]
    with pytest.raises(ValueError, match="exclude has 1 entries for 2 queries"):
        buffer.retrieve(queries, 4, real_only=False, exclude=pairs[:1])


def test_embedding_ignores_padding_and_batch_company(embedder):
    short, other = key_text("You see a mug.", "take mug 1"), key_text("You are in a long hallway " * 3, "go north")
    alone = embedder([short])  # [1, D]
    for batch in ([short, other], [other, short], [other, short, other, other, short]):
        vectors = embedder(batch)
        for i, text in enumerate(batch):
            if text == short:
                np.testing.assert_allclose(vectors[i], alone[0], atol=1e-5, rtol=0)
    assert np.linalg.norm(alone, axis=1) == pytest.approx(1.0, abs=1e-6) and alone.dtype == np.float32
    assert all(b in (1, 2, 4) and t in (16, 32, 64, 128) for b, t in embedder.compiled_shapes)


def test_truncation_keeps_the_end_of_a_text(embedder):
    tail = key_text("You see a cup on the counter, a knife, a bowl and a kettle.", "take cup 1 from countertop 1")
    tail = tail[-embedder.max_length:]
    assert len(tail) == embedder.max_length
    text_a, text_b = "alpha " * 40 + tail, "omega, different " * 30 + tail
    assert embedder.tokenize(text_a) == ByteText().encode(tail)
    va, vb, vt = embedder([text_a, text_b, tail])
    np.testing.assert_allclose(va, vt, atol=1e-5, rtol=0)
    np.testing.assert_allclose(vb, vt, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="no tokens"):
        embedder([""])


def test_commit_reopen_is_bit_identical_and_roll_back_drops_later_epochs(tmp_path, embedder):
    pool = _pool(tmp_path)
    buffer, first = _filled(embedder, pool, n=5)
    assert buffer.num_pending == 5
    buffer.commit(0)
    manifest_after_epoch_0 = pool.manifest
    second = [_transition(i, "agent") for i in range(5, 9)]
    buffer.add(second, embedder([transition_key_text(t) for t in second]))
    buffer.commit(1)
    assert buffer.num_pending == 0 and pool.epochs == [0, 1]

    reopened = ReplayBuffer.open(Pool(tmp_path / "pools", "replay", writable=False))
    assert reopened.transitions == first + second
    assert reopened.embeddings.tobytes() == buffer.embeddings.tobytes()
    queries = embedder([key_text("You see a desk 3.", "go to desk 3"), key_text("nothing", "look")])
    assert reopened.retrieve_scored(queries, 5, real_only=True) == buffer.retrieve_scored(queries, 5, real_only=True)

    assert pool.roll_back_to(manifest_after_epoch_0) == [1]
    resumed = ReplayBuffer.open(pool)
    assert resumed.transitions == first
    assert resumed.embeddings.tobytes() == buffer.embeddings[:5].tobytes()
    resumed.commit(1)  # the replayed epoch commits again (here with nothing new: an empty shard)
    assert pool.epochs == [0, 1] and len(ReplayBuffer.open(pool)) == 5


@pytest.mark.parametrize("corrupt, reason", [
    (lambda r: {**r, "embedding": {**r["embedding"], "f32le": r["embedding"]["f32le"][:-8]}}, "bytes, dim"),
    (lambda r: {**r, "transition": {**r["transition"], "source": "dreamed"}}, "Transition.source"),
    (lambda r: {k: v for k, v in r.items() if k != "embedding"}, "not a replay record"),
], ids=["truncated-embedding", "unknown-source", "missing-field"])
def test_a_corrupted_record_gives_a_one_line_error_naming_pool_epoch_and_index(tmp_path, corrupt, reason):
    vector = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    good = [encode_record(_transition(i), vector) for i in range(3)]
    pool = _pool(tmp_path)
    pool.append_epoch(0, good)
    pool.append_epoch(4, good[:1] + [corrupt(good[1])] + good[2:])
    with pytest.raises(ReplayError) as error:
        ReplayBuffer.open(pool)
    message = str(error.value)
    assert "\n" not in message and "'replay'" in message and "epoch 4 record 1" in message and reason in message


def test_undecodable_bytes_are_located_by_index(tmp_path, monkeypatch):
    """Bytes that are not JSON at all (written past the pool's encoder) are found record by record."""
    from genenv_jax.workdir import pools

    encode = pools.encode_record
    monkeypatch.setattr(pools, "encode_record", lambda r, e: b"\xff{not json" if r.get("bad") else encode(r, e))
    vector = np.ones(8, np.float32)
    pool = _pool(tmp_path)
    pool.append_epoch(2, [encode_record(_transition(i), vector) for i in range(2)] + [{"bad": True}])
    with pytest.raises(ReplayError, match=r"epoch 2 record 2: undecodable record \(UnicodeDecodeError") as error:
        ReplayBuffer.open(pool)
    assert "\n" not in str(error.value)


def test_dimension_mismatch_is_a_clear_error(tmp_path):
    pool = _pool(tmp_path)
    buffer = ReplayBuffer.open(pool)
    buffer.add([_transition(0)], np.ones((1, 8), np.float32))
    with pytest.raises(ValueError, match="embedding dim 9 does not match the buffer's 8"):
        buffer.add([_transition(1)], np.ones((1, 9), np.float32))
    with pytest.raises(ValueError, match="query dim 9 does not match the buffer's 8"):
        buffer.retrieve(np.ones((1, 9), np.float32), 1, real_only=False)
    with pytest.raises(ValueError, match="all zeros"):
        buffer.add([_transition(1)], np.zeros((1, 8), np.float32))
    buffer.commit(0)
    with pytest.raises(ReplayError, match="epoch 0 record 0: embedding dim 8, expected 16"):
        ReplayBuffer.open(pool, dim=16)
    assert ReplayBuffer.open(pool, dim=8).dim == 8


def test_transitions_are_not_records_of_another_kind(tmp_path):
    buffer = ReplayBuffer.open(_pool(tmp_path))
    with pytest.raises(TypeError, match="not a Transition"):
        buffer.add([dataclasses.asdict(_transition(0))], np.ones((1, 8), np.float32))
    assert len(buffer) == 0 and buffer.counts()["expert"] == 0


def test_retrieval_does_not_depend_on_the_vectors_memory_alignment(tmp_path, embedder):
    """A float32 sum's last bit can follow the memory alignment of its operands (numpy's SIMD loops
    peel to alignment): scores are summed in float64, so copies at any offset rank and score alike."""
    vectors = embedder([key_text(f"You see a desk {i} and a lamp {i % 3}.", f"go to desk {i}") for i in range(9)])
    queries = embedder([key_text("You see a desk 3.", "go to desk 3"), key_text("nothing", "look")])
    results = []
    for offset in (0, 4, 8, 12, 16, 36):  # bytes past a 64-byte-aligned start
        raw = np.zeros(vectors.nbytes + 128, np.uint8)
        start = (-raw.ctypes.data) % 64 + offset
        shifted = np.frombuffer(raw[start:start + vectors.nbytes], np.float32).reshape(vectors.shape)
        shifted[...] = vectors
        buffer = ReplayBuffer(Pool(tmp_path / f"pools{offset}", "replay"))
        buffer.add([_transition(i, "agent") for i in range(9)], shifted)
        results.append(buffer.retrieve_scored(queries, 5, real_only=True))
    assert all(r == results[0] for r in results[1:])
