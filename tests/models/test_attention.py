"""Attention kernels against the einsum reference: forward and gradients, padded batches, sharding,
kernel choice. Blockwise runs natively on CPU; splash runs in Pallas interpret mode; cuDNN cannot run
here, so its constraint checks, the choice logic and its wrapper (on XLA's attention) are tested."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from genenv_jax import parallel
from genenv_jax.models import ModelConfig, attention, forward, init_params, param_shapes, preset
from genenv_jax.models import blockwise_attention as blockwise
from genenv_jax.models import cudnn_attention as cudnn
from genenv_jax.models import splash_attention as splash
from genenv_jax.models.attention import PaddedCausalMask
from genenv_jax.rl import token_logprobs

# Rows: unpadded, left-padded, right-padded, both, and one with no valid token at all.
PADDINGS = {"causal": [(0, 0)], "left": [(0, 0), (9, 0)], "right": [(0, 0), (0, 13)],
            "mixed": [(5, 0), (0, 7), (3, 4), (70, 0)]}


def _inputs(paddings, length=70, kv_heads=2, groups=3, head_dim=16, dtype=jnp.float32, seed=0):
    """q [B, T, K, G, H], k/v [B, K, T, H], the mask, key_valid [B, T] and a cotangent that is zero
    on padding queries (the loss never reads them)."""
    rng = np.random.RandomState(seed)
    batch = len(paddings)
    valid = np.ones((batch, length), bool)
    for row, (left, right) in enumerate(paddings):
        valid[row, :left] = False
        valid[row, length - right:] = False
    q = jnp.asarray(rng.randn(batch, length, kv_heads, groups, head_dim), dtype)
    k = jnp.asarray(rng.randn(batch, kv_heads, length, head_dim), dtype)
    v = jnp.asarray(rng.randn(batch, kv_heads, length, head_dim), dtype)
    cot = rng.randn(batch, kv_heads, groups, length, head_dim) * valid[:, None, None, :, None]
    return q, k, v, PaddedCausalMask(jnp.asarray(valid)), valid, jnp.asarray(cot, jnp.float32)


def _value_and_grads(kernel, q, k, v, mask, cot):
    def loss(q, k, v):
        out = kernel(q, k, v, mask)
        return jnp.sum(out.astype(jnp.float32) * cot), out
    (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    return out, grads


def _max_errors(kernel, q, k, v, mask, valid, cot):
    """Max |kernel - einsum| over valid query rows, and over each gradient (all finite)."""
    out, grads = _value_and_grads(kernel, q, k, v, mask, cot)
    ref, ref_grads = _value_and_grads(attention.einsum_attention, q, k, v, mask, cot)
    assert np.isfinite(np.asarray(out, np.float32)).all(), "padding rows must not be NaN"
    assert all(np.isfinite(np.asarray(g, np.float32)).all() for g in grads)
    rows = valid[:, None, None, :, None]
    out_err = float(np.max(np.abs(np.where(rows, np.asarray(out, np.float32) - np.asarray(ref, np.float32), 0))))
    return out_err, [float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))
                     for a, b in zip(grads, ref_grads)]


BLOCKS = [(16, 16), (32, 16), (16, 48), (24, 40), (512, 512)]  # several blocks, uneven, one block


@pytest.mark.parametrize("padding", sorted(PADDINGS))
@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: f"q{b[0]}kv{b[1]}")
def test_blockwise_equals_einsum_float32(padding, blocks):
    q, k, v, mask, valid, cot = _inputs(PADDINGS[padding])
    kernel = functools.partial(attention.blockwise_attention, block_q=blocks[0], block_kv=blocks[1])
    out_err, grad_errs = _max_errors(kernel, q, k, v, mask, valid, cot)
    assert out_err < 1e-5 and max(grad_errs) < 1e-5, (out_err, grad_errs)


@pytest.mark.parametrize("padding", sorted(PADDINGS))
@pytest.mark.parametrize("block_q", [None, 16, 24, 70], ids=lambda b: f"q{b}")
def test_query_blocks_equal_einsum_float32(padding, block_q):
    """Several blocks (uneven last block), one block, and the default size (one block at 70 rows)."""
    q, k, v, mask, valid, cot = _inputs(PADDINGS[padding])
    kernel = functools.partial(attention.query_block_attention, block_q=block_q)
    out_err, grad_errs = _max_errors(kernel, q, k, v, mask, valid, cot)
    assert out_err < 1e-5 and max(grad_errs) < 1e-5, (out_err, grad_errs)


def test_query_blocks_take_dense_masks_and_bfloat16():
    q, k, v, mask, valid, cot = _inputs(PADDINGS["mixed"])
    dense = mask.dense()  # one block over all keys: einsum's sums exactly
    np.testing.assert_array_equal(attention.query_block_attention(q, k, v, dense), attention.einsum_attention(q, k, v, dense))
    q, k, v, mask, valid, cot = _inputs(PADDINGS["left"], dtype=jnp.bfloat16)
    out_err, grad_errs = _max_errors(functools.partial(attention.query_block_attention, block_q=16), q, k, v, mask,
                                     valid, cot)
    assert out_err < 2e-2 and max(grad_errs) < 0.25, (out_err, grad_errs)


def test_query_block_sizes_bound_the_number_of_blocks():
    from genenv_jax.models.query_block_attention import MAX_BLOCKS, MIN_BLOCK_Q, query_block_size
    assert query_block_size(70) == MIN_BLOCK_Q and query_block_size(640) == 128
    assert query_block_size(4096) == 256 and -(-4096 // query_block_size(4096)) <= MAX_BLOCKS
    assert query_block_size(9216) == 640 and -(-9216 // 640) <= MAX_BLOCKS
    assert query_block_size(640, block_q=48) == 48
    with pytest.raises(ValueError, match="block_q"):
        query_block_size(640, block_q=0)


@pytest.mark.parametrize("padding", ["left", "mixed"])
def test_blockwise_equals_einsum_bfloat16(padding):
    q, k, v, mask, valid, cot = _inputs(PADDINGS[padding], dtype=jnp.bfloat16)
    kernel = functools.partial(attention.blockwise_attention, block_q=16, block_kv=32)
    out_err, grad_errs = _max_errors(kernel, q, k, v, mask, valid, cot)
    # bfloat16 has an 8-bit mantissa: outputs are O(1), gradients O(10).
    assert out_err < 2e-2 and max(grad_errs) < 0.25, (out_err, grad_errs)


def test_blockwise_takes_dense_masks_like_the_decoder():
    """A dense [B, T, S] mask (the KV-cache decoder's kind: T queries over S cache slots)."""
    rng = np.random.RandomState(3)
    q = jnp.asarray(rng.randn(3, 1, 2, 2, 8), jnp.float32)
    k = jnp.asarray(rng.randn(3, 2, 37, 8), jnp.float32)
    v = jnp.asarray(rng.randn(3, 2, 37, 8), jnp.float32)
    mask = jnp.asarray(rng.rand(3, 1, 37) < 0.6).at[:, :, 0].set(True)
    ref = attention.einsum_attention(q, k, v, mask)
    out = attention.blockwise_attention(q, k, v, mask, block_q=8, block_kv=8)
    np.testing.assert_allclose(out, ref, atol=1e-6)
    grad = jax.grad(lambda v: attention.blockwise_attention(q, k, v, mask, block_kv=8).sum())(v)
    np.testing.assert_allclose(grad, jax.grad(lambda v: attention.einsum_attention(q, k, v, mask).sum())(v), atol=1e-6)


def test_causal_block_skipping_visits_exactly_the_lower_triangle():
    for bq, bk, length in [(16, 16, 64), (16, 48, 96), (40, 24, 120), (512, 512, 512)]:
        blocks = blockwise._Blocks(bq, bk, True)
        num_q, num_kv = length // bq, length // bk
        for i in range(num_q):
            needed = int(blockwise._kv_blocks_needed(blocks, num_kv, i))
            # Block (i, j) holds a visible pair (key <= query) iff j * bk <= (i + 1) * bq - 1.
            assert needed == sum(j * bk <= (i + 1) * bq - 1 for j in range(num_kv))
            for j in range(num_kv):
                assert (j < needed) == (i >= int(blockwise._first_q_block(blocks, j)))


def _compiled_temp_bytes(kernel, length):
    q = jax.ShapeDtypeStruct((1, length, 2, 4, 64), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, 2, length, 64), jnp.bfloat16)
    valid = jax.ShapeDtypeStruct((1, length), jnp.bool_)

    def loss(q, k, v, valid):
        return jnp.sum(kernel(q, k, v, PaddedCausalMask(valid)).astype(jnp.float32))
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    return grad.lower(q, kv, kv, valid).compile().memory_analysis().temp_size_in_bytes


def test_blockwise_memory_is_linear_in_sequence_length():
    """Compile-only: forward + backward temporaries at T = 1k and 4k. The einsum kernel's float32
    [B, N, T, T] scores alone are 32 MiB at 1k and 512 MiB at 4k."""
    scores_4k = 8 * 4096 * 4096 * 4
    einsum_4k = _compiled_temp_bytes(attention.einsum_attention, 4096)
    block_1k = _compiled_temp_bytes(attention.blockwise_attention, 1024)
    block_4k = _compiled_temp_bytes(attention.blockwise_attention, 4096)
    assert einsum_4k > scores_4k
    assert block_4k < scores_4k / 8
    assert block_4k < 5 * block_1k  # linear (4x) up to the fixed per-block buffers


# ----- splash (Pallas TPU kernel, interpret mode on CPU) -----
@pytest.mark.parametrize("padding", ["left", "mixed"])
def test_splash_interpret_equals_einsum(padding):
    q, k, v, mask, valid, cot = _inputs(PADDINGS[padding], length=200)  # padded to 256: two 128 tiles
    out_err, grad_errs = _max_errors(functools.partial(attention.splash_attention, interpret=True),
                                     q, k, v, mask, valid, cot)
    assert out_err < 1e-5 and max(grad_errs) < 1e-5, (out_err, grad_errs)


def test_splash_under_a_mesh_runs_per_device_in_shard_map():
    q, k, v, mask, valid, cot = _inputs(PADDINGS["mixed"], length=128, kv_heads=2, groups=2)
    mesh = parallel.make_mesh(parallel.MeshConfig(data=1, fsdp=4, tensor=2))
    kernel = functools.partial(attention.splash_attention, interpret=True)
    with parallel.mesh_context(mesh):
        out, grads = jax.jit(functools.partial(_value_and_grads, kernel))(q, k, v, mask, cot)
    ref, ref_grads = _value_and_grads(attention.einsum_attention, q, k, v, mask, cot)
    rows = valid[:, None, None, :, None]
    np.testing.assert_allclose(np.where(rows, out, 0), np.where(rows, ref, 0), atol=1e-5)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, atol=1e-5)


def test_shard_map_specs_split_batch_and_heads_where_they_divide():
    mesh = AbstractMesh((1, 4, 2), ("data", "fsdp", "tensor"))
    q_spec, kv_spec, seg_spec, out_spec = splash.shard_map_specs(mesh, batch=8, kv_heads=2)
    assert q_spec == out_spec == P(("fsdp",), ("tensor",), None, None)
    assert kv_spec == P(("fsdp",), ("tensor",), None, None) and seg_spec == P(("fsdp",), None)
    q_spec, _, seg_spec, _ = splash.shard_map_specs(mesh, batch=2, kv_heads=3)
    assert q_spec == P(None, None, None, None) and seg_spec == P(None, None)
    mesh = AbstractMesh((2, 2, 2), ("data", "fsdp", "tensor"))
    assert splash.shard_map_specs(mesh, batch=4, kv_heads=4)[0] == P(("data", "fsdp"), ("tensor",), None, None)
    assert splash.shard_map_specs(mesh, batch=2, kv_heads=4)[0] == P(("data",), ("tensor",), None, None)


def test_splash_segment_ids_and_tiles():
    valid = jnp.asarray([[False, True, True], [True, True, False]])
    np.testing.assert_array_equal(splash.splash_segment_ids(valid), [[0, 1, 1], [1, 1, 0]])
    assert [splash.splash_block(n) for n in (128, 256, 384, 1024, 9216)] == [128, 256, 128, 512, 512]


# ----- cuDNN (constraint checks and the wrapper; the kernel itself needs a GPU) -----
def test_cudnn_constraints():
    ok = dict(platform="gpu", dtype=jnp.bfloat16, head_dim=128, q_len=9216, kv_len=9216, structured_mask=True,
              compute_capability="9.0", cudnn_version=90100)
    assert attention.cudnn_unsupported_reason(**ok) is None
    for change, words in [(dict(platform="cpu"), "NVIDIA GPU"), (dict(platform="tpu"), "NVIDIA GPU"),
                          (dict(cudnn_version=None), "not detected"), (dict(cudnn_version=8600), "older"),
                          (dict(dtype=jnp.float32), "bfloat16 or float16"),
                          (dict(head_dim=100), "multiple of 8"),
                          (dict(head_dim=256, compute_capability="8.0"), "<= 128"),
                          (dict(structured_mask=False), "dense mask"), (dict(kv_len=4096), "T == S")]:
        reason = attention.cudnn_unsupported_reason(**{**ok, **change})
        assert reason is not None and words in reason, (change, reason)
    assert attention.cudnn_unsupported_reason(**{**ok, "head_dim": 256}) is None  # Hopper: up to 256
    assert attention.cudnn_unsupported_reason(**{**ok, "dtype": jnp.float16}) is None


def test_auto_choice_by_backend_and_constraints():
    q, k, v, mask, _, _ = _inputs(PADDINGS["left"])
    resolve = attention.resolve_kernel_name
    assert resolve("auto", q, k, mask, platform="cpu") == "query_blocks"
    assert resolve("auto", q, k, mask.dense(), platform="cpu") == "blockwise"  # query_blocks skips causal blocks only
    huge = jax.ShapeDtypeStruct((1, 16384, 2, 7, 64), jnp.float32)  # 7.5 GiB of probabilities: linear memory
    assert resolve("auto", huge, jax.ShapeDtypeStruct((1, 2, 16384, 64), jnp.float32), mask, platform="cpu") \
        == "blockwise"
    assert resolve("auto", q, k, mask, platform="tpu") == "splash"
    assert resolve("auto", q, k, mask.dense(), platform="tpu") == "blockwise"  # splash takes segment ids only
    assert resolve("auto", q, k, mask, platform="gpu", cudnn_reason=lambda *_: None) == "cudnn"
    assert resolve("auto", q, k, mask, platform="gpu", cudnn_reason=lambda *_: "float32 inputs") == "blockwise"
    # Without an injected reason the real check runs: float32 inputs (and no GPU here) -> blockwise.
    assert resolve("auto", q, k, mask, platform="gpu") == "blockwise"
    for name in ("einsum", "query_blocks", "blockwise", "splash", "cudnn"):
        assert resolve(name, q, k, mask, platform="cpu") == name
    with pytest.raises(ValueError, match="unknown attention kernel"):
        resolve("flash", q, k, mask)
    with pytest.raises(ValueError, match="cannot run here: cudnn needs an NVIDIA GPU"):
        attention.cudnn_attention(q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), v.astype(jnp.bfloat16), mask)
    # On CPU "auto" is the query-block kernel for this causal mask.
    auto = attention.kernel_for("auto")
    np.testing.assert_array_equal(auto(q, k, v, mask), attention.query_block_attention(q, k, v, mask))


def test_roll_valid_to_front():
    valid = jnp.asarray([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], bool)
    gather, scatter, count = cudnn.roll_valid_to_front(valid)
    np.testing.assert_array_equal(count, [3, 6, 1])
    np.testing.assert_array_equal(np.take_along_axis(np.asarray(valid), np.asarray(gather), 1)[0],
                                  [1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(np.take_along_axis(np.asarray(gather), np.asarray(scatter), 1),
                                  np.broadcast_to(np.arange(6), (3, 6)))


@pytest.mark.parametrize("padding", ["left", "mixed"])
def test_cudnn_wrapper_on_xla_attention_equals_einsum(padding):
    """The cudnn kernel's roll / sequence-length / unroll logic, run on XLA's dot_product_attention."""
    paddings = [p for p in PADDINGS[padding] if p != (70, 0)] + [(70, 0)] * (padding == "mixed")
    q, k, v, mask, valid, cot = _inputs(paddings)
    kernel = functools.partial(attention.cudnn_attention, implementation="xla")
    out_err, grad_errs = _max_errors(kernel, q, k, v, mask, valid, cot)
    assert out_err < 1e-5 and max(grad_errs) < 1e-5, (out_err, grad_errs)
    out = kernel(q, k, v, mask)
    assert float(jnp.abs(jnp.where(mask.key_valid[:, None, None, :, None], 0, out)).max()) == 0.0  # pad rows: 0


# ----- the model with each kernel -----
def test_config_field_is_validated_and_leaves_hf_config_and_params_alone():
    cfg = preset("micro")
    assert cfg.attention == "auto"
    with pytest.raises(ValueError, match="attention 'flash' not in"):
        cfg.replace(attention="flash")
    blockwise = cfg.replace(attention="blockwise")
    assert "attention" not in blockwise.to_hf_dict()
    assert ModelConfig.from_hf_dict(blockwise.to_hf_dict()).attention == "auto"
    assert jax.tree.structure(param_shapes(blockwise)) == jax.tree.structure(param_shapes(cfg))
    assert jax.tree.map(lambda s: s.shape, param_shapes(blockwise)) == jax.tree.map(lambda s: s.shape,
                                                                                      param_shapes(cfg))


def _padded_tokens(cfg, length=40):
    rng = np.random.RandomState(5)
    tokens = rng.randint(3, cfg.vocab_size, (4, length))
    mask = np.ones_like(tokens)
    mask[1, :11] = 0  # left padding
    mask[2, length - 9:] = 0  # right padding
    mask[3, :4] = mask[3, length - 6:] = 0  # both, as loop.packing lays rows out
    return tokens, mask


# blockwise at 600 tokens: two 512-query blocks; query_blocks at 300: three blocks; splash (interpret mode, slow) at 40.
@pytest.mark.parametrize("kernel,length", [("blockwise", 600), ("query_blocks", 300), ("splash", 40)])
def test_model_logits_and_gradients_match_einsum(kernel, length):
    cfg = preset("micro").replace(remat_policy="full")
    params = init_params(cfg, jax.random.key(0))
    tokens, mask = _padded_tokens(cfg, length)
    loss_mask = mask.astype(np.float32)
    loss_mask[:, :20] = 0

    def loss(cfg, params):
        logprobs, _ = token_logprobs(cfg, params, tokens, mask, chunk_size=16)
        return -jnp.sum(logprobs * loss_mask)

    ref_logits = forward(cfg.replace(attention="einsum"), params, tokens, attention_mask=mask)
    logits = forward(cfg.replace(attention=kernel), params, tokens, attention_mask=mask)
    valid = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(logits)[valid], np.asarray(ref_logits)[valid], atol=1e-5)
    ref_grads = jax.grad(functools.partial(loss, cfg.replace(attention="einsum")))(params)
    grads = jax.grad(functools.partial(loss, cfg.replace(attention=kernel)))(params)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        np.testing.assert_allclose(g, r, atol=1e-5)
