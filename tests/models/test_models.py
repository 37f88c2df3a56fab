"""Qwen2 decoder: parity with HF transformers, HF checkpoint round trips, configs, errors."""

import json
import os
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from transformers import Qwen2ForCausalLM

from genenv_jax.models import PRESETS, ModelConfig, forward, init_params, load_hf, param_shapes, preset, save_hf
from tests.support.hf_reference import make_hf_model, save_hf_model


def _hf_logits(model, tokens, mask, positions):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                    position_ids=torch.tensor(positions))
    return out.logits.numpy()


# (heads, kv_heads) -> kv-head groups of 1, 2 and 7; tied and untied embeddings.
@pytest.mark.parametrize("heads,kv_heads,tied", [(4, 4, False), (4, 2, True), (7, 1, False), (14, 2, True)])
def test_logits_match_hf_float32(tmp_path, heads, kv_heads, tied):
    hf = make_hf_model(hidden=56, heads=heads, kv_heads=kv_heads, head_dim=8, tied=tied, layers=3)
    cfg, params = load_hf(save_hf_model(hf, tmp_path / "hf"))
    assert cfg.num_heads // cfg.num_kv_heads == heads // kv_heads and cfg.tie_word_embeddings == tied
    rng = np.random.RandomState(0)
    for length in (1, 7, 13):  # odd sequence lengths
        tokens = rng.randint(0, cfg.vocab_size, (2, length))
        mask = np.ones_like(tokens)
        positions = np.broadcast_to(np.arange(length), tokens.shape)
        ours = np.asarray(forward(cfg, params, tokens))
        np.testing.assert_allclose(ours, _hf_logits(hf, tokens, mask, positions), atol=1e-4, rtol=0)


@pytest.mark.parametrize("attention", ["auto", "einsum", "query_blocks", "blockwise"])  # auto is query_blocks on CPU
def test_padded_batch_with_attention_mask_matches_hf(tmp_path, attention):
    hf = make_hf_model(heads=4, kv_heads=2)
    cfg, params = load_hf(save_hf_model(hf, tmp_path / "hf"), attention=attention)
    assert cfg.attention == attention
    tokens = np.random.RandomState(1).randint(3, cfg.vocab_size, (3, 11))
    mask = np.ones_like(tokens)
    mask[1, :4] = 0  # left padding
    mask[2, 8:] = 0  # right padding
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0)
    ours = np.asarray(forward(cfg, params, tokens, attention_mask=mask))
    ref = _hf_logits(hf, tokens, mask, positions)
    valid = mask.astype(bool)
    assert np.isfinite(ours).all()  # fully masked padding rows give finite logits
    np.testing.assert_allclose(ours[valid], ref[valid], atol=1e-4, rtol=0)
    # A left-padded row equals the same row run alone, unpadded.
    alone = np.asarray(forward(cfg, params, tokens[1:2, 4:]))
    np.testing.assert_allclose(ours[1, 4:], alone[0], atol=1e-5)


@pytest.mark.parametrize("max_shard_size", [None, "20KB"])
def test_hf_roundtrip_is_bit_exact(tmp_path, max_shard_size):
    hf = make_hf_model(tied=False)
    src = save_hf_model(hf, tmp_path / "src", max_shard_size=max_shard_size)
    if max_shard_size:
        assert os.path.exists(os.path.join(src, "model.safetensors.index.json"))
    cfg, params = load_hf(src)
    save_hf(cfg, params, tmp_path / "out", max_shard_bytes=30_000 if max_shard_size else 5 << 30)
    reloaded = Qwen2ForCausalLM.from_pretrained(str(tmp_path / "out"))
    ref, got = hf.state_dict(), reloaded.state_dict()
    assert set(ref) == set(got)
    for name in ref:
        assert torch.equal(ref[name], got[name]), name
    cfg2, params2 = load_hf(tmp_path / "out")
    assert cfg2 == cfg
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, params2)


def test_save_hf_replaces_existing_directory_atomically(tmp_path):
    cfg = preset("micro")
    params = init_params(cfg, jax.random.key(0))
    out = tmp_path / "model"
    save_hf(cfg, params, out)
    save_hf(cfg, init_params(cfg, jax.random.key(1)), out)
    assert sorted(os.listdir(tmp_path)) == ["model"]  # no temp or .old leftovers
    _, loaded = load_hf(out)
    np.testing.assert_array_equal(np.asarray(loaded["embed"]["embedding"]),
                                  np.asarray(init_params(cfg, jax.random.key(1))["embed"]["embedding"]))


def test_load_hf_casts_dtype_and_keeps_checkpoint_dtype_by_default(tmp_path):
    src = save_hf_model(make_hf_model(), tmp_path / "hf")
    cfg, params = load_hf(src)
    assert cfg.param_dtype == "float32" and params["embed"]["embedding"].dtype == jnp.float32
    cfg16, params16 = load_hf(src, dtype="bfloat16")
    assert cfg16.param_dtype == "bfloat16"
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params16))


@pytest.fixture(scope="module")
def float32_checkpoint(tmp_path_factory):
    return save_hf_model(make_hf_model(), tmp_path_factory.mktemp("hf"))


@pytest.mark.parametrize("dtype", ["float32", np.float32, jnp.float32, np.dtype("float32"), "bfloat16",
                                   ml_dtypes.bfloat16, jnp.bfloat16], ids=repr)
def test_load_hf_dtype_names_and_dtypes_are_equivalent(float32_checkpoint, dtype):
    cfg, params = load_hf(float32_checkpoint, dtype=dtype)
    name = "bfloat16" if "bfloat16" in repr(dtype) else "float32"
    assert cfg.param_dtype == cfg.dtype == name
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(name)}


def _rewrite_tensors(path, edit):
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def test_load_hf_errors_name_the_tensor(tmp_path):
    src = save_hf_model(make_hf_model(), tmp_path / "hf")
    st = os.path.join(src, "model.safetensors")
    name = "model.layers.1.mlp.up_proj.weight"

    _rewrite_tensors(st, lambda t: t.__setitem__(name, t[name][:-1]))
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.up_proj\.weight has shape \(71, 48\).*\(72, 48\)"):
        load_hf(src)
    _rewrite_tensors(st, lambda t: t.pop(name))
    with pytest.raises(ValueError, match=r"missing tensor.*model\.layers\.1\.mlp\.up_proj\.weight"):
        load_hf(src)
    _rewrite_tensors(st, lambda t: t.update({name: np.zeros((72, 48), np.float32),
                                             "model.layers.9.extra.weight": np.zeros(3, np.float32)}))
    with pytest.raises(ValueError, match=r"unexpected tensor.*model\.layers\.9\.extra\.weight"):
        load_hf(src)


def test_load_hf_refuses_non_finite_and_non_float_tensors(tmp_path):
    src = save_hf_model(make_hf_model(), tmp_path / "hf")
    st = os.path.join(src, "model.safetensors")
    name = "model.layers.0.self_attn.k_proj.bias"
    original = load_file(st)[name]

    _rewrite_tensors(st, lambda t: t[name].__setitem__(3, np.nan))
    with pytest.raises(ValueError, match=rf"^{re.escape(st)}: tensor {name} has non-finite values \(NaN or inf\)$"):
        load_hf(src)
    _rewrite_tensors(st, lambda t: t.__setitem__(name, np.full(original.shape, np.inf, np.float32)))
    with pytest.raises(ValueError, match=rf"tensor {name} has non-finite values"):
        load_hf(src)

    integers = np.arange(original.size, dtype=np.int32).reshape(original.shape)
    _rewrite_tensors(st, lambda t: t.__setitem__(name, integers))
    with pytest.raises(ValueError, match=rf"^{re.escape(st)}: tensor {name} has dtype I32, not a float dtype"):
        load_hf(src)
    _, params = load_hf(src, allow_cast=True)
    np.testing.assert_array_equal(np.asarray(params["layers"]["attn"]["k_bias"][0]).reshape(-1), integers)


def test_load_hf_names_a_truncated_safetensors_file(tmp_path):
    src = save_hf_model(make_hf_model(), tmp_path / "hf")
    st = os.path.join(src, "model.safetensors")
    with open(st, "rb") as f:
        data = f.read()
    with open(st, "wb") as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(ValueError, match=rf"^{re.escape(st)}: cannot read safetensors file \(truncated or corrupt\): "):
        load_hf(src)


def test_config_from_hf_reads_both_rope_layouts(tmp_path):
    base = PRESETS["qwen2.5-7b"].to_hf_dict()
    v4 = dict(base, rope_theta=12345.0)
    v5 = {k: v for k, v in base.items() if k not in ("rope_theta", "rope_scaling")}
    v5["rope_parameters"] = {"rope_type": "default", "rope_theta": 54321.0}
    for hf, theta in ((v4, 12345.0), (v5, 54321.0)):
        (tmp_path / "config.json").write_text(json.dumps(hf))
        cfg = ModelConfig.from_hf(tmp_path)
        assert cfg.rope_theta == theta
        assert cfg.replace(rope_theta=PRESETS["qwen2.5-7b"].rope_theta, param_dtype="bfloat16",
                           dtype="bfloat16") == PRESETS["qwen2.5-7b"]


def test_config_errors_are_clear(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen2",\n "hidden_size": }')
    with pytest.raises(ValueError, match=r"config\.json: invalid JSON at line 2"):
        ModelConfig.from_hf(tmp_path)
    hf = PRESETS["micro"].to_hf_dict()
    del hf["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ValueError, match=r"config\.json: missing required key 'num_hidden_layers'"):
        ModelConfig.from_hf(tmp_path)  # a ValueError (one line at the commands), not a KeyError
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        PRESETS["micro"].replace(num_heads=5)
    with pytest.raises(KeyError, match="unknown model preset"):
        preset("qwen9-1t")


@pytest.mark.parametrize("name,expected", [("qwen2.5-0.5b", 494_032_768), ("qwen2.5-1.5b", 1_543_714_304),
                                           ("qwen2.5-7b", 7_615_616_512), ("qwen2.5-72b", 72_706_203_648)])
def test_presets_match_published_parameter_counts(name, expected):
    cfg = preset(name)
    assert cfg.num_params() == expected
    assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(param_shapes(cfg))) == expected


def test_scan_unrolled_and_remat_agree():
    cfg = preset("micro")
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, cfg.vocab_size)
    ref = forward(cfg, params, tokens)
    for variant in (cfg.replace(scan_layers=False), cfg.replace(remat_policy="full"),
                    cfg.replace(remat_policy="dots_with_no_batch_dims_saveable")):
        np.testing.assert_allclose(forward(variant, params, tokens), ref, atol=1e-5)
    grads = jax.grad(lambda p: forward(cfg.replace(remat_policy="full"), p, tokens).mean())(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_bfloat16_compute_stays_close_to_float32():
    cfg = preset("micro")
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, cfg.vocab_size)
    ref = forward(cfg, params, tokens)
    bf = cfg.replace(param_dtype="bfloat16", dtype="bfloat16")
    out = forward(bf, jax.tree.map(lambda x: x.astype(jnp.bfloat16), params), tokens)
    assert out.dtype == jnp.float32
    assert float(jnp.abs(out - ref).max()) < 0.05


@pytest.mark.slow
def test_sequence_chunked_mlp_equals_one_pass(monkeypatch):
    """The training forward runs the MLP over sequence chunks (`qwen2.MLP_CHUNK_TOKENS`); with a
    chunk of 4 tokens, 9 positions become 3 chunks of 3 (padded to 9): same logits and gradients."""
    from genenv_jax.models import qwen2

    cfg = preset("micro").replace(remat_policy="full")
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, cfg.vocab_size)
    mask = np.ones((2, 9), np.int32)
    mask[1, :3] = 0

    def logits_and_grads(cfg):
        loss = lambda p: jnp.sum(forward(cfg, p, tokens, attention_mask=mask)[:, 3:] ** 2)  # noqa: E731
        return forward(cfg, params, tokens, attention_mask=mask), jax.grad(loss)(params)

    ref, ref_grads = logits_and_grads(cfg)
    monkeypatch.setattr(qwen2, "MLP_CHUNK_TOKENS", 4)
    lengths = []
    mlp = qwen2.primitives.mlp
    monkeypatch.setattr(qwen2.primitives, "mlp",
                        lambda cfg, p, x, c, d=None: lengths.append(x.shape[1]) or mlp(cfg, p, x, c, d))
    jax.clear_caches()  # the forward is jitted on cfg: trace it again with the small chunk
    out, grads = logits_and_grads(cfg)
    jax.clear_caches()
    assert set(lengths) == {3}  # every MLP call saw one chunk of 3 positions
    np.testing.assert_allclose(out, ref, atol=1e-5)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-5)
