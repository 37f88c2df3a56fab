"""Per-token log-probabilities and entropies of a sequence under the model, and loss masks.

Convention: everything is aligned with `tokens` [B, T]. `logprobs[:, t]` is
log p(tokens[:, t] | tokens[:, :t]); position 0 has no prediction and is 0. A loss mask marks
the tokens the policy generated (response tokens, not prompt, padding or tool observations).

The LM head runs over chunks of the sequence inside a rematerialised `lax.scan`, so only one
float32 [B, chunk, V] block of logits exists at a time, forward and backward; with a 152k
vocabulary a full [B, T, V] float32 tensor would not fit for long sequences. Under a mesh the
head's vocabulary is split over the devices (`lm_head.py`).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from genenv_jax.models import ModelConfig, hidden_states, param_shardings
from genenv_jax.models.partition import Partition
from genenv_jax.parallel import BATCH_AXES, batch_sharding, mesh_context, split_micro_batches
from genenv_jax.rl.lm_head import chunked_token_stats

Params = Any


def token_logprobs(cfg: ModelConfig, params: Params, tokens: jax.Array,
                   attention_mask: jax.Array | None = None, positions: jax.Array | None = None, *,
                   chunk_size: int = 512, temperature: float = 1.0, with_entropy: bool = False,
                   needed: jax.Array | None = None, dropout: Any = None) -> tuple[jax.Array, jax.Array | None]:
    """Per-token logprobs [B, T] (float32) of `tokens` under `params`, and entropies [B, T] if asked.

    `attention_mask` [B, T] marks real tokens (left or right padding both work); `temperature`
    divides the logits, matching a sampler that sampled at that temperature. The entropy at t is
    that of the distribution that produced tokens[:, t]. Differentiable; call inside jit.

    `needed` [B, T] (e.g. the loss mask) marks the positions whose values are used: a sequence
    chunk with none of them skips the LM head (`lax.cond`) and returns zeros there, so a long
    prompt in front of a short response costs no vocabulary projection. `dropout`: a training step's
    forward dropout (`models.partition.Partition.dropout`), None for none.
    """
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [batch, time], got shape {tokens.shape}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    batch, length = tokens.shape
    if length < 2:
        zeros = jnp.zeros((batch, length), jnp.float32)
        return zeros, (zeros if with_entropy else None)

    hidden = hidden_states(cfg, params, tokens, positions, attention_mask, dropout)  # [B, T, D]
    chunks, targets, use_chunk, predicted = head_chunks(hidden, tokens, needed, chunk_size)
    logprobs, entropy = chunked_token_stats(cfg, params, chunks, targets, use_chunk, temperature=temperature,
                                            with_entropy=with_entropy)  # [n, B, C] each

    def unchunk(x):  # [n, B, C] -> [B, T], with position 0 set to 0
        return jnp.where(predicted, x.swapaxes(0, 1).reshape(batch, -1)[:, :length], 0.0)

    return unchunk(logprobs), (unchunk(entropy) if with_entropy else None)


def head_chunks(hidden: jax.Array, tokens: jax.Array, needed: jax.Array | None, chunk_size: int,
                ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The LM head's input in sequence chunks, aligned by target: (hidden [n, B, C, D], targets
    [n, B, C], use_chunk [n] bool, predicted [T] bool).

    Position t of the chunks holds the state that predicts token t (zeros at t = 0, which has no
    prediction: `predicted` is False there), so chunk k covers targets [kC, (k+1)C): a response
    that starts at a bucket boundary fills whole chunks, where chunks of the predicting positions
    would compute one more chunk for the response's first token alone. A chunk is used when it
    holds a `needed` [B, T] position (all chunks when `needed` is None)."""
    batch, length = tokens.shape
    chunk = min(chunk_size, length)
    num_chunks = -(-length // chunk)
    pad = num_chunks * chunk - length
    hidden = jnp.pad(hidden[:, :-1], ((0, 0), (1, pad), (0, 0)))  # [B, nC, D]: position t predicts token t
    targets = jnp.pad(tokens, ((0, 0), (0, pad)))
    predicted = jnp.arange(length) > 0
    if needed is None:
        use_chunk = jnp.ones((num_chunks,), bool)
    else:
        need = jnp.pad((needed > 0) & predicted, ((0, 0), (0, pad)))
        use_chunk = jnp.any(need.reshape(batch, num_chunks, chunk), axis=(0, 2))  # [n]
    return (hidden.reshape(batch, num_chunks, chunk, -1).swapaxes(0, 1),
            targets.reshape(batch, num_chunks, chunk).swapaxes(0, 1), use_chunk, predicted)


def build_loss_mask(prompt_lengths: Sequence[int] | np.ndarray, response_lengths: Sequence[int] | np.ndarray,
                    seq_len: int, observation_spans: Sequence[Sequence[tuple[int, int]]] | None = None,
                    prompt_offsets: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """Float32 mask [B, seq_len]: 1 on response tokens the policy generated, 0 elsewhere.

    Row b holds `prompt_offsets[b]` padding tokens (left padding; default 0), then
    `prompt_lengths[b]` prompt tokens, then `response_lengths[b]` response tokens, then padding.
    `observation_spans[b]` lists (start, end) half-open token ranges, in absolute positions of the
    row, that the environment wrote into the response (tool results); they are masked out.
    """
    prompt_lengths = np.asarray(prompt_lengths, np.int64)
    response_lengths = np.asarray(response_lengths, np.int64)
    if prompt_lengths.ndim != 1 or prompt_lengths.shape != response_lengths.shape:
        raise ValueError(f"prompt_lengths {prompt_lengths.shape} and response_lengths "
                         f"{response_lengths.shape} must be equal 1-D shapes")
    offsets = (np.zeros_like(prompt_lengths) if prompt_offsets is None
               else np.asarray(prompt_offsets, np.int64))
    if offsets.shape != prompt_lengths.shape:
        raise ValueError(f"prompt_offsets shape {offsets.shape} != prompt_lengths {prompt_lengths.shape}")
    if (prompt_lengths < 0).any() or (response_lengths < 0).any() or (offsets < 0).any():
        raise ValueError("prompt_lengths, response_lengths and prompt_offsets must be >= 0")
    start = offsets + prompt_lengths
    end = start + response_lengths
    if (end > seq_len).any():
        row = int(np.argmax(end > seq_len))
        raise ValueError(f"row {row}: prompt + response ends at {end[row]} > seq_len {seq_len}")
    position = np.arange(seq_len)[None, :]
    mask = (position >= start[:, None]) & (position < end[:, None])
    if observation_spans is not None:
        if len(observation_spans) != len(prompt_lengths):
            raise ValueError(f"observation_spans has {len(observation_spans)} rows, expected "
                             f"{len(prompt_lengths)}")
        for row, spans in enumerate(observation_spans):
            for span_start, span_end in spans:
                if not 0 <= span_start <= span_end <= seq_len:
                    raise ValueError(f"row {row}: observation span ({span_start}, {span_end}) is not "
                                     f"within [0, {seq_len}]")
                mask[row, span_start:span_end] = False
    return mask.astype(np.float32)


# Batch fields the logprob function reads (a loss mask, when present, skips prompt-only chunks).
_LOGPROB_KEYS = ("tokens", "attention_mask", "positions", "loss_mask")


def make_logprobs_fn(cfg: ModelConfig, mesh: Any = None, *, chunk_size: int = 512,
                     temperature: float = 1.0, micro_batches: int = 1, rules: Any = None,
                     partition: Partition | None = None):
    """A jitted `fn(params, batch, trainable=None) -> logprobs [B, T]` for weights that do not change
    inside it (reference / old policy): the model `params`, or with `trainable` a partition's pair
    (`params` its frozen part), whose model is `partition.model(trainable, params)`.

    `batch` holds "tokens" [B, T] and optionally "attention_mask", "positions" and "loss_mask" (only
    chunks with loss tokens get values; see `token_logprobs`). With a mesh the
    params are expected on `models.param_shardings(cfg, mesh)` and the batch rows over
    data x fsdp; the result is sharded like the batch. `micro_batches` runs the rows in that many
    sequential slices (`lax.map`) to bound activation memory. `partition` defaults to full
    fine-tuning, where the pair is `({}, params)`.
    """
    partition = Partition(cfg) if partition is None else partition
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")

    def one_slice(params, rows):
        logprobs, _ = token_logprobs(cfg, params, rows["tokens"], rows.get("attention_mask"),
                                     rows.get("positions"), chunk_size=chunk_size, temperature=temperature,
                                     needed=rows.get("loss_mask"))
        return logprobs

    def fn(params, batch, trainable=None):
        if "tokens" not in batch:
            raise KeyError(f"logprobs batch needs 'tokens'; it has {sorted(batch)}")
        if trainable is not None:
            params = partition.model(trainable, params)
        keys = [k for k in _LOGPROB_KEYS if k in batch]
        rows = {k: batch[k] for k in keys}
        size, length = rows["tokens"].shape
        if micro_batches == 1:
            return one_slice(params, rows)
        sliced = jax.tree.map(lambda x: split_micro_batches(x, micro_batches, mesh), rows)  # [M, B/M, T]
        out = jax.lax.map(lambda r: one_slice(params, r), sliced)  # [M, B/M, T]
        return out.swapaxes(0, 1).reshape(size, length)  # slice m held rows m, m+M, ...

    if mesh is None:
        return jax.jit(fn)
    rows = NamedSharding(mesh, P(BATCH_AXES))
    whole = jax.jit(fn, in_shardings=(param_shardings(cfg, mesh, rules), rows), out_shardings=batch_sharding(mesh, 2))
    pair = jax.jit(fn, in_shardings=(partition.frozen_shardings(mesh, rules), rows,
                                     partition.trainable_shardings(mesh, rules)), out_shardings=batch_sharding(mesh, 2))

    def call(params, batch, trainable=None):
        batch = {k: v for k, v in batch.items() if k in _LOGPROB_KEYS}
        with mesh_context(mesh, rules):
            return whole(params, batch) if trainable is None else pair(params, batch, trainable)
    return call
