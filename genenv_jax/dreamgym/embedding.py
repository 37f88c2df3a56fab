"""Text embeddings for the DreamGym replay buffer: the mean of a Qwen2 model's final hidden states
over a text's tokens, L2-normalised, so retrieval is cosine similarity in the experience model's
own representation (DreamGym: the top-k real transitions most similar to (s_t, a_t)).

Texts are batched by length and padded to (batch bucket, length bucket) shapes, so one jitted
program serves each bucket pair and their number stays small. Padding is masked out of the
attention and of the mean, so a text's vector does not depend on what it was batched with. Texts
longer than `max_length` tokens keep their end (the action comes last in `key_text`).

Shape letters: N texts, B batch, T padded length, D hidden size.
"""

from __future__ import annotations

import functools
from typing import Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.core.bucketing import length_bucket, next_power_of_two
from genenv_jax.domains.experience import Transition
from genenv_jax.models.config import ModelConfig
from genenv_jax.models.params import Params
from genenv_jax.models.qwen2 import hidden_states

DEFAULT_MAX_LENGTH = 512   # tokens embedded per text (the last ones)
DEFAULT_MAX_BATCH = 32     # texts per forward pass
MIN_LENGTH_BUCKET = 16     # shortest padded length


def key_text(state: str, action: str) -> str:
    """The text embedded for a (state, action) pair: state first, action last, so truncating from
    the left keeps the action. Stored transitions and queries both go through this function."""
    return f"State:\n{state}\nAction:\n{action}"


def transition_key_text(t: Transition) -> str:
    """The text a transition is stored under: its (s_t, a_t), as the paper keys retrieval."""
    return key_text(t.state, t.action)


class TextEncoder(Protocol):
    """What the embedder needs of a tokenizer (`genenv_jax.text.chat_text.ChatText` fits)."""

    pad_id: int

    def encode(self, text: str) -> list[int]: ...


@functools.partial(jax.jit, static_argnums=0)
def _pooled(cfg: ModelConfig, params: Params, tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """L2-normalised float32 mean of the final hidden states over the valid tokens: [B, D].
    tokens, mask [B, T] (right padding; rows with no valid token give zeros)."""
    hidden = hidden_states(cfg, params, tokens, None, mask).astype(jnp.float32)  # [B, T, D]
    weights = mask.astype(jnp.float32)[..., None]  # [B, T, 1]
    mean = (hidden * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1.0)  # [B, D]
    norm = jnp.linalg.norm(mean, axis=-1, keepdims=True)  # [B, 1]
    return mean / jnp.maximum(norm, 1e-12)


class Embedder:
    """Maps texts to L2-normalised float32 vectors [N, D] with a Qwen2 model's own weights.

    `params` may be replaced (e.g. after the experience model trains); vectors stored earlier were
    made with the old weights, so a buffer should be embedded with one set of weights throughout.
    The embedder must own its params: update steps donate theirs, so pass a copy of weights that
    will be trained.
    """

    def __init__(self, cfg: ModelConfig, params: Params, text: TextEncoder, *,
                 max_length: int = DEFAULT_MAX_LENGTH, max_batch: int = DEFAULT_MAX_BATCH):
        if max_length < 1 or max_batch < 1:
            raise ValueError(f"Embedder: max_length and max_batch must be >= 1, got {max_length}, {max_batch}")
        self.cfg = cfg
        self.params = params
        self.text = text
        self.max_length = int(max_length)
        self.max_batch = int(max_batch)
        self._shapes: set[tuple[int, int]] = set()

    @property
    def dim(self) -> int:
        """D: the model's hidden size."""
        return self.cfg.hidden_size

    @property
    def compiled_shapes(self) -> list[tuple[int, int]]:
        """The (batch, length) buckets run so far: one compiled program each."""
        return sorted(self._shapes)

    def tokenize(self, text: str) -> list[int]:
        """The ids embedded for `text`: its last `max_length` tokens. An empty text is an error
        (it has no mean)."""
        ids = list(self.text.encode(text))
        if not ids:
            raise ValueError(f"Embedder: text {text!r} has no tokens")
        return ids[-self.max_length:]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors [N, D] float32 for `texts`, in their order."""
        ids = [self.tokenize(t) for t in texts]
        out = np.zeros((len(ids), self.dim), np.float32)  # [N, D]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # similar lengths share a batch
        for start in range(0, len(order), self.max_batch):
            rows = order[start:start + self.max_batch]
            out[rows] = self._embed_batch([ids[i] for i in rows])
        return out

    def _bucket_shape(self, ids: Sequence[Sequence[int]]) -> tuple[int, int]:
        """Padded (batch, length) for a batch: a power of two (at most max_batch) by a length bucket."""
        batch = min(next_power_of_two(len(ids)), self.max_batch)
        return batch, length_bucket(max(len(x) for x in ids), MIN_LENGTH_BUCKET)

    def _embed_batch(self, ids: Sequence[Sequence[int]]) -> np.ndarray:
        """Vectors [len(ids), D] for one batch, run at its bucket shape."""
        batch, length = self._bucket_shape(ids)
        tokens = np.full((batch, length), self.text.pad_id, np.int32)  # [B, T]
        mask = np.zeros((batch, length), np.int32)  # [B, T]
        for row, x in enumerate(ids):
            tokens[row, :len(x)] = x
            mask[row, :len(x)] = 1
        self._shapes.add((batch, length))
        vectors = _pooled(self.cfg, self.params, jnp.asarray(tokens), jnp.asarray(mask))  # [B, D]
        return np.asarray(vectors, np.float32)[:len(ids)]
