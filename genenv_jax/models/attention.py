"""Attention kernels behind `primitives.grouped_query_attention`, and the choice between them.

Every kernel computes the same thing: grouped-query attention of q [B, T, K, G, H] over k, v
[B, K, S, H] under a mask, returning [B, K, G, T, H] in v's dtype, with float32 scores and
softmax and scores scaled by 1 / sqrt(H). They differ in memory, speed and where they run:

- `einsum_attention` (here): the reference. Plain einsums that materialise the float32
  [B, K, G, T, S] scores (and, for the backward pass, the probabilities): memory quadratic in
  sequence length.
- `blockwise_attention` (`blockwise_attention.py`): plain JAX, online softmax over key/value
  blocks inside a `jax.custom_vjp` whose backward pass recomputes each block's scores from q, k, v
  and the saved per-row log-sum-exp (FlashAttention-2 style). Memory linear in sequence length,
  forward and backward; with a causal mask, key blocks entirely above the diagonal are skipped
  (about half the FLOPs). Runs everywhere; the fallback everywhere.
- `query_block_attention` (`query_block_attention.py`): causal attention as a static unroll of
  dense query blocks, each over the key prefix it sees: about half einsum's FLOPs and memory, no
  loop. The CPU kernel: XLA's CPU backend runs blockwise's loop of sliced blocks several times
  slower than the same FLOPs as plain matmuls.
- `splash_attention` (`splash_attention.py`): the Pallas TPU splash-attention kernel, under
  `shard_map` over batch and kv heads, padding as segment ids. On a non-TPU backend it runs in
  Pallas interpret mode (slow: tests only).
- `cudnn_attention` (`cudnn_attention.py`): `jax.nn.dot_product_attention(..., implementation=
  "cudnn")` (GPU only), with padding as sequence lengths after rolling each row's valid tokens to
  the front.

Masks (`attention_mask.py`). A kernel takes either a dense bool mask [B, T, S] (True: the query may
see the key) or a `PaddedCausalMask`, the structured mask of causal self-attention over padded rows,
which never materialises a [T, S] array and lets kernels skip blocks. All kernels agree on every query row that
has at least one visible key. Rows with none (padding queries) are never NaN but differ: einsum,
query_blocks and blockwise give a uniform average over the keys they visited, splash lets a padding query see the
padding keys before it, cudnn returns zeros. The model only uses the rows of real tokens.

Choice: `ModelConfig.attention` ("auto" | "einsum" | "query_blocks" | "blockwise" | "splash" |
"cudnn"), resolved when the forward is traced (`resolve_kernel_name`): "auto" is splash on TPU,
cudnn on GPU where its constraints hold (`cudnn_unsupported_reason`), query_blocks on CPU while its
probabilities stay under `QUERY_BLOCKS_MAX_BYTES`, blockwise otherwise.

Shape letters: B batch, T query length, S key length, K kv heads, G query heads per kv head,
N = K * G query heads, H head dim.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

import jax

from genenv_jax.models.attention_mask import MASK_VALUE, Mask, PaddedCausalMask, dense_mask
from genenv_jax.models.blockwise_attention import blockwise_attention
from genenv_jax.models.query_block_attention import dense_attention, query_block_attention
from genenv_jax.models.cudnn_attention import cudnn_attention, cudnn_reason_for, cudnn_unsupported_reason
from genenv_jax.models.splash_attention import splash_attention

__all__ = ["KERNELS", "MASK_VALUE", "AttentionKernel", "Mask", "PaddedCausalMask", "blockwise_attention",
           "query_block_attention",
           "cudnn_attention", "cudnn_unsupported_reason", "dense_mask", "einsum_attention", "kernel_for",
           "resolve_kernel_name", "splash_attention"]

# kernel(q [B, T, K, G, H], k [B, K, S, H], v [B, K, S, H], mask) -> [B, K, G, T, H]
AttentionKernel = Callable[..., jax.Array]


def einsum_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask) -> jax.Array:
    """The reference kernel in plain einsums: float32 scores and softmax, probs in v's dtype.

    q [B, T, K, G, H], k/v [B, K, S, H] -> [B, K, G, T, H]. Materialises the [B, K, G, T, S] scores.
    The einsums contract [B, K, G x T, H] against [B, K, S, H] (`dense_attention`): one batched
    matmul per (batch, kv head) with long rows, 1.5x faster on XLA's CPU backend than contracting
    q's [B, T, K, G, H] layout directly, with the same sums.
    """
    return dense_attention(q.transpose(0, 2, 3, 1, 4), k, v, dense_mask(mask))


KERNELS: dict[str, AttentionKernel] = {
    "einsum": einsum_attention,
    "query_blocks": query_block_attention,
    "blockwise": blockwise_attention,
    "splash": splash_attention,
    "cudnn": cudnn_attention,
}


def resolve_kernel_name(name: str, q: jax.Array, k: jax.Array, mask: Mask, platform: str | None = None,
                        cudnn_reason: Callable[[jax.Array, jax.Array, Mask], str | None] | None = None) -> str:
    """The kernel `name` stands for on `platform` (default: the JAX backend) for these inputs.

    "auto": splash on TPU (blockwise for a dense mask), cudnn on GPU when `cudnn_reason(q, k, mask)`
    (default: `cudnn_unsupported_reason` for the inputs and the local GPU) is None, else blockwise;
    on CPU query_blocks for a causal mask whose probabilities fit `QUERY_BLOCKS_MAX_BYTES`;
    blockwise elsewhere. Explicit names are kept; "splash" off TPU runs in interpret mode, "cudnn"
    raises where it cannot run.
    """
    if name not in ("auto", *KERNELS):
        raise ValueError(f"unknown attention kernel {name!r}; expected one of {('auto', *KERNELS)}")
    if name != "auto":
        return name
    platform = jax.default_backend() if platform is None else platform
    structured = isinstance(mask, PaddedCausalMask)
    if platform == "tpu" and structured:
        return "splash"
    if platform in ("gpu", "cuda"):
        reason = (cudnn_reason_for if cudnn_reason is None else cudnn_reason)(q, k, mask)
        if reason is None:
            return "cudnn"
        _log_fallback_once(reason)
    if platform == "cpu" and structured and _causal_probs_bytes(q, k) <= QUERY_BLOCKS_MAX_BYTES:
        return "query_blocks"
    return "blockwise"


# "auto" on CPU: query_blocks while the float32 probabilities it keeps for the backward pass (about
# half of [B, N, T, S]) stay under this; blockwise (linear memory) beyond.
QUERY_BLOCKS_MAX_BYTES = 1 << 29


def _causal_probs_bytes(q: jax.Array, k: jax.Array) -> int:
    """Bytes of the float32 probabilities of causal attention of q [B, T, K, G, H] over k [B, K, S, H]."""
    batch, length, kv_heads, groups, _ = q.shape
    return batch * kv_heads * groups * length * k.shape[2] * 4 // 2


@functools.lru_cache(maxsize=16)
def _log_fallback_once(reason: str) -> None:
    logging.info("attention: cudnn not used (%s); using blockwise", reason)


def kernel_for(name: str) -> AttentionKernel:
    """The `AttentionKernel` for a `ModelConfig.attention` value; "auto" is resolved per call, at
    trace time, from the backend and the inputs (`resolve_kernel_name`)."""
    if name != "auto":
        resolve_kernel_name(name, None, None, None)  # validates the name
        return KERNELS[name]

    def auto(q, k, v, mask):
        return KERNELS[resolve_kernel_name("auto", q, k, mask)](q, k, v, mask)
    return auto
