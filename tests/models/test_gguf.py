"""GGUF model source: `load_gguf` gives exactly the `gguf` package's dequantised tensors in our
layout, the same params and logits as `load_hf` of the equivalent HF directory, the file's own
tokenizer, and one-line errors for what it cannot read."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from genenv_jax.models import forward, load_gguf, load_hf
from genenv_jax.models.gguf_io import GGUFTensorReader, export_hf_dir, gguf_model_config
from genenv_jax.text.gguf_tokenizer import gguf_tokenizer, matches_bundled_vocabulary
from genenv_jax.models.loading import load_model, model_config, source_tokenizer
from tests.support.gguf_files import GLOBAL_TENSORS, LAYER_TENSORS, TinyShape, write_tiny_gguf

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _direct_dequantisation(path) -> dict[str, np.ndarray]:
    """HF name -> the gguf package's dequantisation of each tensor, reshaped to HF's row-major shape
    (GGUF lists dimensions innermost first); names from the test's own table."""
    table = dict(GLOBAL_TENSORS)
    shape = TinyShape()
    for i in range(shape.layers):
        table.update({f"blk.{i}.{g}": (f"model.layers.{i}.{h}", t) for g, (h, t) in LAYER_TENSORS.items()})
    out = {}
    for tensor in gguf.GGUFReader(str(path)).tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        out[table[tensor.name][0]] = np.asarray(values, np.float32).reshape(tuple(reversed(tensor.shape.tolist())))
    return out


def test_the_tiny_file_holds_every_quantisation_type_the_real_model_uses(tiny_gguf):
    counts = GGUFTensorReader(tiny_gguf).quantisation_counts()
    assert {"Q8_0", "Q4_K", "Q5_0", "Q6_K", "F16", "F32"} <= set(counts)


def test_the_reader_parses_every_field_and_tensor_as_the_packages_own_reader(tiny_gguf):
    """`open_gguf`'s reader slices a plain view of the memory map (fast on a 152k vocabulary); its
    fields (offsets, types, parts, values) and tensor records are the package reader's."""
    from genenv_jax.text.gguf_tokenizer import open_gguf

    ours, theirs = open_gguf(tiny_gguf), gguf.GGUFReader(str(tiny_gguf))
    assert list(ours.fields) == list(theirs.fields) and len(ours.fields) > 10
    for name, field in theirs.fields.items():
        mine = ours.fields[name]
        assert (mine.offset, mine.types, mine.data) == (field.offset, field.types, field.data), name
        assert len(mine.parts) == len(field.parts), name
        for a, b in zip(mine.parts, field.parts):
            assert a.dtype == b.dtype and np.array_equal(a, b), name
        assert mine.contents() == field.contents(), name
    assert len(ours.tensors) == len(theirs.tensors)
    for a, b in zip(ours.tensors, theirs.tensors):
        assert (a.name, a.tensor_type, a.data_offset, a.n_bytes) == (b.name, b.tensor_type, b.data_offset, b.n_bytes)
        assert a.data.dtype == b.data.dtype and np.array_equal(a.data, b.data)


def test_params_equal_the_packages_own_dequantisation(tiny_gguf):
    cfg, params = load_gguf(tiny_gguf)
    direct = _direct_dequantisation(tiny_gguf)
    d, n, h = cfg.hidden_size, cfg.num_heads, cfg.head_dim
    assert cfg.param_dtype == "float32" and not cfg.tie_word_embeddings
    np.testing.assert_array_equal(params["embed"]["embedding"], direct["model.embed_tokens.weight"])
    np.testing.assert_array_equal(params["lm_head"], direct["lm_head.weight"].T)
    for i in range(cfg.num_layers):
        layer = f"model.layers.{i}."
        np.testing.assert_array_equal(params["layers"]["attn"]["q_kernel"][i],
                                      direct[layer + "self_attn.q_proj.weight"].T.reshape(d, n, h))
        np.testing.assert_array_equal(params["layers"]["attn"]["o_kernel"][i],
                                      direct[layer + "self_attn.o_proj.weight"].T.reshape(n, h, d))
        np.testing.assert_array_equal(params["layers"]["mlp"]["up_kernel"][i], direct[layer + "mlp.up_proj.weight"].T)
        np.testing.assert_array_equal(params["layers"]["mlp"]["down_kernel"][i],
                                      direct[layer + "mlp.down_proj.weight"].T)
        np.testing.assert_array_equal(params["layers"]["attn"]["k_bias"][i],
                                      direct[layer + "self_attn.k_proj.bias"].reshape(cfg.num_kv_heads, h))


def test_same_params_and_logits_as_load_hf_of_the_equivalent_directory(tiny_gguf, tmp_path):
    cfg, params = load_gguf(tiny_gguf)
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    save_file(_direct_dequantisation(tiny_gguf), str(hf_dir / "model.safetensors"))
    (hf_dir / "config.json").write_text(json.dumps(cfg.to_hf_dict()))
    hf_cfg, hf_params = load_hf(hf_dir)
    assert hf_cfg == cfg
    jax.tree.map(np.testing.assert_array_equal, params, hf_params)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 12)), jnp.int32)
    np.testing.assert_array_equal(forward(cfg, params, tokens), forward(hf_cfg, hf_params, tokens))


def test_metadata_config_and_the_source_loaders(tiny_gguf):
    shape = TinyShape()
    cfg = gguf_model_config(tiny_gguf)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_layers, cfg.num_heads,
            cfg.num_kv_heads, cfg.head_dim) == (shape.vocab, shape.hidden, shape.intermediate, shape.layers,
                                                shape.heads, shape.kv_heads, shape.head_dim)
    assert cfg.rope_theta == 1e6 and abs(cfg.rms_norm_eps - 1e-6) < 1e-12 and cfg.eos_token_id == 263
    assert model_config(tiny_gguf, dtype="bfloat16").dtype == "bfloat16"
    bf16_cfg, bf16 = load_model(tiny_gguf, dtype="bfloat16")
    assert bf16_cfg.param_dtype == "bfloat16" and bf16["lm_head"].dtype == jnp.bfloat16


def test_a_vocabulary_other_than_qwens_gets_the_files_own_tokenizer(tiny_gguf):
    reader = GGUFTensorReader(tiny_gguf)
    assert not matches_bundled_vocabulary(reader)
    tok = source_tokenizer(tiny_gguf)
    assert len(tok) == TinyShape().vocab
    ids = tok.encode("<|im_start|>user\nthe<|im_end|>", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids) == ["<|im_start|>", "u", "s", "e", "r", "Ċ", "t", "he", "<|im_end|>"]
    assert tok.chat_template and "tool_call" in tok.chat_template  # Qwen2.5's, the file carrying none
    assert gguf_tokenizer(tiny_gguf).eos_token == "<|im_end|>"


def test_export_writes_a_directory_transformers_loads_with_the_same_logits(tiny_gguf, tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest = export_hf_dir(tiny_gguf, tmp_path / "exported")
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= {p.name for p in dest.iterdir()}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    model = AutoModelForCausalLM.from_pretrained(dest, dtype=torch.float32).eval()
    assert AutoTokenizer.from_pretrained(dest).convert_ids_to_tokens([263]) == ["<|im_end|>"]
    cfg, params = load_gguf(tiny_gguf)
    tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, (2, 10))
    with torch.no_grad():
        theirs = model(torch.tensor(tokens)).logits.numpy()
    ours = np.asarray(forward(cfg, params, jnp.asarray(tokens, jnp.int32)))
    np.testing.assert_allclose(ours, theirs, atol=2e-4, rtol=1e-4)
    assert json.loads((dest / "generation_config.json").read_text())["eos_token_id"] == [263, 261]


def test_unsupported_architecture_type_and_broken_files_are_one_line(tmp_path):
    llama = write_tiny_gguf(tmp_path / "llama.gguf", architecture="llama", with_tokenizer=False)
    with pytest.raises(ValueError, match=r"llama\.gguf: GGUF architecture 'llama' is not supported \(supported: qwen2\)"):
        load_gguf(llama)
    q8k = write_tiny_gguf(tmp_path / "q8k.gguf", override_type=("blk.0.ffn_up.weight", "Q8_K"), with_tokenizer=False)
    with pytest.raises(ValueError, match=r"tensor blk\.0\.ffn_up\.weight is quantised as Q8_K, which the installed gguf"):
        load_gguf(q8k)
    good = write_tiny_gguf(tmp_path / "good.gguf", with_tokenizer=False)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[:5000])
    with pytest.raises(ValueError, match=r"truncated\.gguf: cannot read GGUF file") as info:
        load_gguf(truncated)
    assert "\n" not in str(info.value)
    not_gguf = tmp_path / "text.gguf"
    not_gguf.write_text("hello")
    with pytest.raises(ValueError, match=r"text\.gguf: cannot read GGUF file"):
        load_gguf(not_gguf)
    with pytest.raises(FileNotFoundError, match=r"missing\.gguf: no such GGUF file"):
        load_gguf(tmp_path / "missing.gguf")
