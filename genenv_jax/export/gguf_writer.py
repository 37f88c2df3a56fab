"""Our params -> a qwen2 GGUF file (llama.cpp's format) in F32, F16 or Q8_0, with the tokenizer and
the chat template, written by the `gguf` package's own writer and quantiser.

What llama.cpp's `convert_hf_to_gguf.py` does for a Qwen2 checkpoint, and no more:
- tensor names from the `gguf` package's own table for the qwen2 architecture
  (`gguf.get_tensor_name_map`: token_embd, blk.N.attn_q/k/v (+ biases), attn_output, attn_norm,
  ffn_gate/up/down, ffn_norm, output_norm, output; a tied head has no `output` tensor);
- 1-D tensors (norm scales, q/k/v biases) stay F32 whatever the file type, as llama.cpp keeps them;
  Q8_0 blocks hold 32 values of a row, so a matrix whose rows are not a multiple of 32 long is
  stored as F16 instead (llama.cpp's fallback);
- the tokenizer as `tokenizer.ggml.*`: model "gpt2" (byte-level BPE), pre "qwen2", every token by
  id, padded with unused `[PADi]` entries to the embedding's rows, token types (CONTROL for special
  added tokens and `<|...|>` ones, USER_DEFINED for other added tokens), the merges, bos / eos /
  pad ids, and `tokenizer.chat_template`.
Tensors are written one at a time (tensor infos first, then each tensor gathered, converted and
appended), so the host never holds the whole model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.hf_io import hf_tensor_shapes, hf_tensors

GGUF_TYPES = ("f32", "f16", "q8_0")
ARCHITECTURE = "qwen2"


def _types():
    from gguf import GGMLQuantizationType as Q, LlamaFileType as F

    return {"f32": (Q.F32, F.ALL_F32), "f16": (Q.F16, F.MOSTLY_F16), "q8_0": (Q.Q8_0, F.MOSTLY_Q8_0)}


def gguf_names(cfg: ModelConfig) -> dict[str, str]:
    """HF tensor name -> GGUF tensor name, from the `gguf` package's qwen2 table (not ours: the
    reader `models.gguf_io` keeps its own, so a round trip checks one against the other)."""
    import gguf

    table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, cfg.num_layers)
    out = {}
    for hf in hf_tensor_shapes(cfg):
        name = table.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ValueError(f"the gguf package has no qwen2 tensor name for {hf}")
        out[hf] = name
    return out


def stored_type(shape: tuple[int, ...], gguf_type: str):
    """The GGML type a tensor of this HF shape is stored as in a file of `gguf_type`."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

    qtype = _types()[gguf_type][0]
    if len(shape) < 2:
        return Q.F32
    if qtype == Q.Q8_0 and shape[-1] % GGML_QUANT_SIZES[Q.Q8_0][0]:
        return Q.F16
    return qtype


def encode_tensor(values: np.ndarray, qtype) -> np.ndarray:
    """The bytes (as an array) GGUF stores for float `values` as `qtype`: float32 / float16 values,
    or the `gguf` package's own Q8_0 quantisation (uint8 blocks)."""
    from gguf import GGMLQuantizationType as Q, quants

    values = np.ascontiguousarray(values, dtype=np.float32)
    if qtype == Q.F32:
        return values
    if qtype == Q.F16:
        return values.astype(np.float16)
    return quants.quantize(values, qtype)


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------
def _looks_special(token: str) -> bool:
    """llama.cpp's `does_token_look_special` for Qwen-style tokens: `<|...|>` and the usual names."""
    return token in ("<pad>", "<mask>", "<unk>") or (token.startswith("<|") and token.endswith("|>"))


def tokenizer_fields(tokenizer: Any, vocab_size: int) -> dict[str, Any]:
    """The `tokenizer.ggml.*` values of a byte-level BPE tokenizer (transformers' fast tokenizer)
    for an embedding of `vocab_size` rows; a ValueError in one line for another kind of tokenizer
    or one with more tokens than the embedding has rows."""
    from gguf import TokenType

    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else {}
    model, decoder = spec.get("model") or {}, spec.get("decoder") or {}
    if model.get("type") != "BPE" or decoder.get("type") != "ByteLevel" or model.get("byte_fallback"):
        kind = f"{model.get('type')} with a {decoder.get('type')} decoder" if spec else type(tokenizer).__name__
        raise ValueError(f"the run's tokenizer is a {kind}, not a byte-level BPE; GGUF export writes Qwen2's "
                         "gpt2-style tokenizer only (export --format=hf instead)")
    count = len(tokenizer)
    if count > vocab_size:
        raise ValueError(f"the run's tokenizer has {count} tokens but the model's embedding only {vocab_size} rows")
    added = {int(i): t for i, t in tokenizer.added_tokens_decoder.items()}
    tokens, types = [], []
    for i, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(count)))):
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif i in added:
            tokens.append(token)
            types.append(TokenType.CONTROL if added[i].special or _looks_special(token) else TokenType.USER_DEFINED)
        else:
            tokens.append(token)
            types.append(TokenType.NORMAL)
    tokens += [f"[PAD{i}]" for i in range(count, vocab_size)]
    types += [TokenType.UNUSED] * (vocab_size - count)
    return {"tokens": tokens, "types": [int(t) for t in types],
            "merges": [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]}


def _add_tokenizer(writer, cfg: ModelConfig, tokenizer: Any) -> None:
    fields = tokenizer_fields(tokenizer, cfg.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(fields["tokens"])
    writer.add_token_types(fields["types"])
    writer.add_token_merges(fields["merges"])
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else cfg.bos_token_id
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else cfg.eos_token_id
    for token_id, add in ((bos, writer.add_bos_token_id), (eos, writer.add_eos_token_id),
                          (tokenizer.pad_token_id, writer.add_pad_token_id)):
        if token_id is not None:
            add(int(token_id))
    writer.add_add_bos_token(bool(getattr(tokenizer, "add_bos_token", False)))
    if getattr(tokenizer, "chat_template", None):
        writer.add_chat_template(tokenizer.chat_template)


# ----------------------------------------------------------------------------------------------
# The file
# ----------------------------------------------------------------------------------------------
def _add_hparams(writer, cfg: ModelConfig, file_type, name: str) -> None:
    writer.add_name(name)
    writer.add_file_type(file_type)
    writer.add_block_count(cfg.num_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_heads)
    writer.add_head_count_kv(cfg.num_kv_heads)
    if cfg.head_dim * cfg.num_heads != cfg.hidden_size:  # llama.cpp's default is hidden / heads
        writer.add_key_length(cfg.head_dim)
        writer.add_value_length(cfg.head_dim)
    writer.add_rope_freq_base(float(cfg.rope_theta))
    writer.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))


def write_gguf(cfg: ModelConfig, params: Any, tokenizer: Any, path: str | os.PathLike, gguf_type: str = "f16",
               name: str = "genenv_jax export") -> Path:
    """Writes `params` (a Qwen2 param tree of `cfg`) with `tokenizer` as a qwen2 GGUF file of
    `gguf_type` (f32, f16 or q8_0) at `path`; returns the path. The caller makes `path` atomic
    (the export command writes into a staging directory)."""
    import gguf

    if gguf_type not in GGUF_TYPES:
        raise ValueError(f"GGUF type {gguf_type!r}: expected one of {', '.join(GGUF_TYPES)}")
    names, shapes = gguf_names(cfg), hf_tensor_shapes(cfg)
    writer = gguf.GGUFWriter(str(path), ARCHITECTURE)
    try:
        _add_hparams(writer, cfg, _types()[gguf_type][1], name)
        _add_tokenizer(writer, cfg, tokenizer)
        for hf, shape in shapes.items():
            qtype = stored_type(shape, gguf_type)
            nbytes = int(np.prod(gguf.quant_shape_to_byte_shape(shape, qtype)))
            writer.add_tensor_info(names[hf], shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        order = iter(shapes)
        for hf, values in hf_tensors(cfg, params):
            expected = next(order)
            if hf != expected:  # the infos above fix the order the data must follow
                raise RuntimeError(f"GGUF export: tensor {hf} came where {expected} was announced")
            writer.write_tensor_data(encode_tensor(values, stored_type(values.shape, gguf_type)))
    finally:
        writer.close()
    return Path(path)
