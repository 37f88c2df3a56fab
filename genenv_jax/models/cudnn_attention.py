"""GPU attention: cuDNN flash attention through `jax.nn.dot_product_attention(implementation="cudnn")`,
with padding turned into sequence lengths, and the check of when cuDNN can take a call.

cuDNN's padding masks are sequence lengths (valid tokens first). Training rows are left- and/or
right-padded, so each row is rolled to bring its valid run to the front (causal order within the
run is unchanged and RoPE is already applied), attended with `is_causal`, and rolled back; padding
queries come out as zeros.

Shape letters: B batch, T length, K kv heads, G query heads per kv head, N = K * G, H head dim.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.models.attention_mask import Mask, PaddedCausalMask


def cudnn_unsupported_reason(*, platform: str, dtype: Any, head_dim: int, q_len: int, kv_len: int,
                             structured_mask: bool, compute_capability: str | None = None,
                             cudnn_version: int | None = None) -> str | None:
    """Why `jax.nn.dot_product_attention(implementation="cudnn")` cannot take this call, or None.

    The constraints kept here: an NVIDIA GPU with cuDNN (>= 8.9.1), bfloat16/float16 q/k/v, head
    dim a multiple of 8 and <= 128 (<= 256 from compute capability 9.0, Hopper), causal
    self-attention given as a `PaddedCausalMask` (T == S; padding becomes sequence lengths).
    """
    if platform not in ("gpu", "cuda"):
        return f"cudnn needs an NVIDIA GPU, the backend is {platform!r}"
    if cudnn_version is None:
        return "cuDNN was not detected"
    if cudnn_version < 8901:
        return f"cuDNN {cudnn_version} is older than 8.9.1"
    if np.dtype(dtype) not in (np.dtype(jnp.bfloat16), np.dtype(jnp.float16)):
        return f"cudnn attention needs bfloat16 or float16 inputs, got {np.dtype(dtype).name}"
    major_minor = tuple(int(x) for x in (compute_capability or "0.0").split(".")[:2])
    head_max = 256 if major_minor >= (9, 0) else 128
    if head_dim % 8 or head_dim > head_max:
        return f"head dim {head_dim} is not a multiple of 8 <= {head_max}"
    if not structured_mask:
        return "cudnn attention here takes a PaddedCausalMask, not a dense mask"
    if q_len != kv_len:
        return f"causal self-attention needs T == S, got {q_len} and {kv_len}"
    return None


def _gpu_facts() -> tuple[str | None, int | None]:
    """(compute capability, cuDNN version) of the first GPU, or Nones when there is none."""
    try:
        from jax._src.cudnn.fused_attention_stablehlo import check_cudnn_version

        version = int(check_cudnn_version())
        capability = getattr(jax.devices("gpu")[0], "compute_capability", None)
        return capability, version
    except Exception:  # noqa: BLE001 - no GPU backend, no cuDNN, or a jax without these internals
        return None, None


def cudnn_reason_for(q: jax.Array, k: jax.Array, mask: Mask) -> str | None:
    capability, version = _gpu_facts() if jax.default_backend() == "gpu" else (None, None)
    return cudnn_unsupported_reason(platform=jax.default_backend(), dtype=q.dtype, head_dim=q.shape[-1],
                                    q_len=q.shape[1], kv_len=k.shape[2],
                                    structured_mask=isinstance(mask, PaddedCausalMask),
                                    compute_capability=capability, cudnn_version=version)


def roll_valid_to_front(key_valid: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """For rows whose valid tokens are one contiguous run: gather indices [B, T] that move the run
    to the front, the inverse indices, and the run lengths [B] (int32, at least 1)."""
    length = key_valid.shape[1]
    valid = key_valid.astype(bool)
    first = jnp.argmax(valid, axis=1).astype(jnp.int32)  # 0 for an all-padding row
    count = jnp.maximum(jnp.sum(valid, axis=1, dtype=jnp.int32), 1)
    positions = jnp.arange(length, dtype=jnp.int32)[None, :]
    return (positions + first[:, None]) % length, (positions - first[:, None]) % length, count


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: Mask, *,
                    implementation: str = "cudnn") -> jax.Array:
    """cuDNN flash attention: q [B, T, K, G, H], k/v [B, K, T, H], `PaddedCausalMask` -> [B, K, G, T, H].

    Each row is rolled so its valid run starts at 0 (causal order within the run is unchanged,
    and RoPE is already applied), attended with is_causal and the run length as the query and key
    sequence lengths, rolled back, and zeroed on padding queries. `implementation="xla"` runs the
    same wrapper on XLA's own `dot_product_attention` (how the CPU tests check it).
    """
    if not isinstance(mask, PaddedCausalMask):
        raise ValueError("cudnn_attention needs a PaddedCausalMask (causal self-attention with padding)")
    reason = cudnn_reason_for(q, k, mask) if implementation == "cudnn" else None
    if reason is not None:
        raise ValueError(f"attention='cudnn' cannot run here: {reason}")
    batch, length, kv_heads, groups, head_dim = q.shape
    gather, scatter, count = roll_valid_to_front(mask.key_valid)
    along_t = lambda x, idx: jnp.take_along_axis(x, idx[:, :, None, None], axis=1)  # noqa: E731
    q_r = along_t(q.reshape(batch, length, kv_heads * groups, head_dim), gather)  # [B, T, N, H]
    k_r = along_t(k.transpose(0, 2, 1, 3), gather)  # [B, T, K, H]
    v_r = along_t(v.transpose(0, 2, 1, 3), gather)
    out = jax.nn.dot_product_attention(q_r, k_r, v_r, is_causal=True, query_seq_lengths=count,
                                       key_value_seq_lengths=count, implementation=implementation)
    out = jnp.where(mask.key_valid[:, :, None, None], along_t(out, scatter), 0).astype(v.dtype)
    return out.reshape(batch, length, kv_heads, groups, head_dim).transpose(0, 2, 3, 1, 4)
