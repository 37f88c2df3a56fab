"""Tiny qwen2 GGUF files for tests, written with the `gguf` package's own writer.

Tensors are quantised by the package's own quantisers where it has one (Q8_0, Q5_0, F16, F32).
gguf 0.19 has no quantiser for the K-quants, so Q4_K and Q6_K tensors hold random blocks whose
scale fields are set to small finite float16 values: valid blocks, whose values come only from
the package's dequantiser, which is what the loader must reproduce.

`toy_vocabulary` is a byte-level BPE small enough for a tiny embedding (the 256 byte symbols,
a few merges, Qwen's special tokens, padding), so the file's tokenizer is not the bundled Qwen2.5
one and transformers builds it from the file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

# HF name of each GGUF tensor of a layer, and the type the tiny files store it as.
LAYER_TENSORS = {
    "attn_q.weight": ("self_attn.q_proj.weight", "F16"), "attn_q.bias": ("self_attn.q_proj.bias", "F32"),
    "attn_k.weight": ("self_attn.k_proj.weight", "Q5_0"), "attn_k.bias": ("self_attn.k_proj.bias", "F32"),
    "attn_v.weight": ("self_attn.v_proj.weight", "Q8_0"), "attn_v.bias": ("self_attn.v_proj.bias", "F32"),
    "attn_output.weight": ("self_attn.o_proj.weight", "Q4_K"),
    "ffn_gate.weight": ("mlp.gate_proj.weight", "Q5_0"), "ffn_up.weight": ("mlp.up_proj.weight", "Q6_K"),
    "ffn_down.weight": ("mlp.down_proj.weight", "Q4_K"),
    "attn_norm.weight": ("input_layernorm.weight", "F32"), "ffn_norm.weight": ("post_attention_layernorm.weight", "F32"),
}
GLOBAL_TENSORS = {"token_embd.weight": ("model.embed_tokens.weight", "Q8_0"),
                  "output_norm.weight": ("model.norm.weight", "F32"),
                  "output.weight": ("lm_head.weight", "Q6_K")}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")


@dataclasses.dataclass(frozen=True)
class TinyShape:
    vocab: int = 320
    hidden: int = 256      # K-quant rows are 256 values long, so every K-quant tensor's rows fit
    intermediate: int = 512
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte-level alphabet: one printable symbol per byte, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def toy_vocabulary(size: int) -> tuple[list[str], list[str], list[int]]:
    """(tokens, merges, token types) of a byte-level BPE padded to `size` entries."""
    from gguf import TokenType

    tokens = _bytes_to_unicode()
    merges = ["Ġ t", "Ġ a", "h e", "i n", "Ġt he"]
    tokens += ["Ġt", "Ġa", "he", "in", "Ġthe"]
    types = [TokenType.NORMAL] * len(tokens)
    tokens += list(SPECIAL_TOKENS)
    types += [TokenType.CONTROL] * len(SPECIAL_TOKENS)
    pad = size - len(tokens)
    tokens += [f"[PAD{len(tokens) + i}]" for i in range(pad)]
    types += [TokenType.UNUSED] * pad
    return tokens, merges, [int(t) for t in types]


def hf_tensor_shapes(shape: TinyShape) -> dict[str, tuple[int, ...]]:
    """HF name -> HF shape of every tensor of the tiny model (untied head)."""
    d, f, n, k, h, v = shape.hidden, shape.intermediate, shape.heads, shape.kv_heads, shape.head_dim, shape.vocab
    per_layer = {"self_attn.q_proj.weight": (n * h, d), "self_attn.q_proj.bias": (n * h,),
                 "self_attn.k_proj.weight": (k * h, d), "self_attn.k_proj.bias": (k * h,),
                 "self_attn.v_proj.weight": (k * h, d), "self_attn.v_proj.bias": (k * h,),
                 "self_attn.o_proj.weight": (d, n * h), "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d),
                 "mlp.down_proj.weight": (d, f), "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,)}
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "lm_head.weight": (v, d)}
    for i in range(shape.layers):
        shapes.update({f"model.layers.{i}.{name}": s for name, s in per_layer.items()})
    return shapes


def _random_k_blocks(qtype, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random Q4_K / Q6_K blocks for a [rows, cols] tensor, with finite float16 scales."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block_values, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows, cols // block_values, block_bytes), dtype=np.uint8)
    scale = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    if qtype == GGMLQuantizationType.Q4_K:  # d, dmin (f16) lead the block
        blocks[..., 0:2] = scale
        blocks[..., 2:4] = scale
    else:  # Q6_K: d (f16) ends the block
        blocks[..., -2:] = scale
    return blocks.reshape(rows, -1)


def write_tiny_gguf(path: str | Path, seed: int = 0, shape: TinyShape = TinyShape(), architecture: str = "qwen2",
                    override_type: tuple[str, str] | None = None, with_tokenizer: bool = True) -> Path:
    """Writes a tiny qwen2 GGUF file of random weights (see the module docstring); returns its path.
    `override_type=(gguf_name, type_name)` stores one tensor as another type (raw random bytes)."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    rng = np.random.default_rng(seed)
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny test qwen2")
    writer.add_block_count(shape.layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    if with_tokenizer:
        tokens, merges, types = toy_vocabulary(shape.vocab)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("qwen2")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(tokens.index("<|endoftext|>"))
        writer.add_eos_token_id(tokens.index("<|im_end|>"))
        writer.add_pad_token_id(tokens.index("<|endoftext|>"))
        writer.add_add_bos_token(False)
    shapes = hf_tensor_shapes(shape)
    names = dict(GLOBAL_TENSORS)
    for i in range(shape.layers):
        names.update({f"blk.{i}.{g}": (f"model.layers.{i}.{h}", t) for g, (h, t) in LAYER_TENSORS.items()})
    for gguf_name, (hf, type_name) in names.items():
        if override_type and override_type[0] == gguf_name:
            type_name = override_type[1]
        qtype = Q[type_name]
        values = rng.normal(0.0, 0.05, size=shapes[hf]).astype(np.float32)
        if hf.endswith("layernorm.weight") or hf == "model.norm.weight":
            values = 1.0 + values
        if qtype in (Q.Q4_K, Q.Q6_K):
            data = _random_k_blocks(qtype, *values.shape, rng)
        elif override_type and override_type[0] == gguf_name:
            block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            data = rng.integers(0, 256, size=(values.shape[0], values.shape[-1] // block_values * block_bytes),
                                dtype=np.uint8)
        else:
            data = gguf.quants.quantize(values, qtype)
        writer.add_tensor(gguf_name, data, raw_dtype=qtype)  # uint8 data: its shape is in bytes per row
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
