"""GGUF files (llama.cpp's format, quantised or not) -> our params and config (the file's tokenizer:
`text.gguf_tokenizer`).

A GGUF file holds the model's metadata, its tokenizer and its tensors, most of them quantised in
blocks (Q4_K, Q5_0, Q6_K, Q8_0, ...). `GGUFTensorReader` presents those tensors under their HF
names and HF shapes, dequantised to float32 by the `gguf` package's own numpy dequantisers (no
block decoding is written here), so `load_gguf` maps, shape-checks and shards them with exactly
the code `load_hf` uses. Only the qwen2 architecture is read; anything else, or a quantisation type
the `gguf` package cannot dequantise, is one line that names it.

`export_hf_dir` writes the same weights as an HF checkpoint directory that transformers loads
(config.json, model.safetensors, tokenizer files with the chat template, generation_config.json).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np

from genenv_jax.models.config import ModelConfig, dtype_name
from genenv_jax.models.hf_io import load_tensors
from genenv_jax.models.params import Params
from genenv_jax.text.gguf_tokenizer import GGUFFields, gguf_tokenizer

SUPPORTED_ARCHITECTURES = ("qwen2",)

# GGUF tensor name -> HF name ("{i}": the layer index).
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(.+)")


def hf_name(gguf_name: str) -> str | None:
    """The HF name of a GGUF tensor name, or None for one a Qwen2 checkpoint does not have."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"
    return None


def _dequantisable(qtype) -> bool:
    """Whether the `gguf` package dequantises this tensor type (F32 / F16 natively, others by a
    block class of `gguf.quants` that defines its own dequantisation)."""
    from gguf import GGMLQuantizationType, quants

    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return True
    block_class = getattr(quants, qtype.name, None)
    return isinstance(block_class, type) and "dequantize_blocks" in vars(block_class)


class GGUFTensorReader(GGUFFields):
    """A GGUF file's tensors under HF names and shapes, dequantised to float32 on read; also its
    metadata (`field`, from `text.gguf_tokenizer.GGUFFields`). Quacks like `SafetensorsReader`
    (`model_dir`, `file_of`, `shape`, `dtype_code`, `read`), so `hf_io.load_tensors` loads it."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(path)
        self.model_dir = self.path  # named in every error, as SafetensorsReader names its directory
        self.architecture = str(self.field("general.architecture", ""))
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"{self.path}: GGUF architecture {self.architecture!r} is not supported "
                             f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
        self._tensors = {}
        for tensor in self.reader.tensors:
            if not _dequantisable(tensor.tensor_type):
                raise ValueError(f"{self.path}: tensor {tensor.name} is quantised as {tensor.tensor_type.name}, "
                                 "which the installed gguf package cannot dequantise")
            self._tensors[hf_name(tensor.name) or tensor.name] = tensor  # unknown names stay: reported as unexpected
        self.file_of = {name: self.path for name in self._tensors}

    # ----- metadata -----
    def arch_field(self, key: str, default: Any = None) -> Any:
        return self.field(f"{self.architecture}.{key}", default)

    def need(self, key: str) -> Any:
        value = self.arch_field(key)
        if value is None:
            raise ValueError(f"{self.path}: GGUF metadata has no {self.architecture}.{key}")
        return value

    def quantisation_counts(self) -> dict[str, int]:
        """How many tensors of each stored type ({'Q5_0': 133, 'F32': 121, ...})."""
        counts: dict[str, int] = {}
        for tensor in self._tensors.values():
            counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    # ----- tensors -----
    def shape(self, name: str) -> tuple[int, ...]:
        """The HF (row-major) shape: GGUF lists dimensions innermost first."""
        return tuple(int(d) for d in reversed(self._tensors[name].shape.tolist()))

    def dtype_code(self, name: str) -> str:
        return "F32"  # every tensor is read as float32

    def dtype_name(self, name: str) -> str:
        return "float32"

    def stored_type(self, name: str) -> str:
        return self._tensors[name].tensor_type.name

    def read(self, name: str) -> np.ndarray:
        from gguf import quants

        tensor = self._tensors[name]
        values = np.asarray(quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        return values.reshape(self.shape(name))


def gguf_model_config(reader: GGUFTensorReader | str | os.PathLike, **overrides: Any) -> ModelConfig:
    """`ModelConfig` from a GGUF file's metadata (float32 params unless overridden)."""
    r = reader if isinstance(reader, GGUFTensorReader) else GGUFTensorReader(reader)
    scaling = r.arch_field("rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(f"{r.path}: rope scaling {scaling!r} is not supported (only none)")
    hidden, heads = int(r.need("embedding_length")), int(r.need("attention.head_count"))
    tokens = r.field("tokenizer.ggml.tokens")
    vocab = len(tokens) if tokens else r.shape("model.embed_tokens.weight")[0]
    eos, bos = r.field("tokenizer.ggml.eos_token_id"), r.field("tokenizer.ggml.bos_token_id")
    kwargs = dict(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(r.need("feed_forward_length")),
        num_layers=int(r.need("block_count")),
        num_heads=heads,
        num_kv_heads=int(r.arch_field("attention.head_count_kv", heads)),
        head_dim=int(r.arch_field("attention.key_length", hidden // heads)),
        rope_theta=float(r.arch_field("rope.freq_base", 10000.0)),
        rms_norm_eps=float(r.arch_field("attention.layer_norm_rms_epsilon", 1e-6)),
        tie_word_embeddings="lm_head.weight" not in r.file_of,
        max_position_embeddings=int(r.arch_field("context_length", 32768)),
        bos_token_id=None if bos is None else int(bos),
        eos_token_id=None if eos is None else int(eos),
        param_dtype="float32", dtype="float32",
    )
    kwargs.update(overrides)
    return ModelConfig(**kwargs)


def load_gguf(path: str | os.PathLike, mesh: jax.sharding.Mesh | None = None, dtype: Any = None, rules=None,
              **config_overrides: Any) -> tuple[ModelConfig, Params]:
    """Loads a qwen2 GGUF file into (cfg, params), as `load_hf` loads a directory.

    Tensors are dequantised to float32 by the `gguf` package, then cast to `dtype` (default
    float32: the dequantised values are exact there). With a mesh, each param lands in its
    `NamedSharding`; extra keyword args override `ModelConfig` fields.
    """
    reader = GGUFTensorReader(path)
    dtype = dtype_name(dtype or "float32")
    config_overrides.setdefault("param_dtype", dtype)
    config_overrides.setdefault("dtype", dtype)
    cfg = gguf_model_config(reader, **config_overrides)
    return cfg, load_tensors(cfg, reader, mesh, rules)


# ----------------------------------------------------------------------------------------------
# GGUF -> HF checkpoint directory
# ----------------------------------------------------------------------------------------------
_SAFETENSORS_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}


def generation_config(cfg: ModelConfig, pad_token_id: int | None) -> dict[str, Any]:
    """generation_config.json from the file's special tokens: stop on `<|im_end|>` and `<|endoftext|>`.
    Sampling settings are left to the caller (the file does not carry them)."""
    eos = [t for t in (cfg.eos_token_id, cfg.bos_token_id) if t is not None]
    return {"bos_token_id": cfg.bos_token_id, "eos_token_id": list(dict.fromkeys(eos)),
            "pad_token_id": pad_token_id, "transformers_version": "4.45.0"}


def write_hf_files(reader: GGUFTensorReader, directory: str | os.PathLike, dtype: str = "float32",
                   progress: bool = False) -> None:
    """Writes the GGUF file's weights (dequantised, stored as `dtype`), config.json, tokenizer files
    with the chat template and generation_config.json into an existing `directory`."""
    from safetensors.numpy import save_file
    from tqdm import tqdm

    if dtype not in _SAFETENSORS_DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {sorted(_SAFETENSORS_DTYPES)}")
    cfg = gguf_model_config(reader, param_dtype=dtype, dtype=dtype)
    unexpected = sorted(name for name in reader.file_of if not name.startswith(("model.", "lm_head.")))
    if unexpected:
        raise ValueError(f"{reader.path}: tensor(s) {unexpected[:8]} have no HF Qwen2 name")
    directory = Path(directory)
    tensors = {}
    for name in tqdm(sorted(reader.file_of), desc="dequantising", unit="tensor", disable=not progress):
        tensors[name] = np.ascontiguousarray(reader.read(name).astype(_SAFETENSORS_DTYPES[dtype]))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    del tensors
    (directory / "config.json").write_text(json.dumps(cfg.to_hf_dict(), indent=2) + "\n", encoding="utf-8")
    tok = gguf_tokenizer(reader)  # the file already open, not read again
    tok.save_pretrained(str(directory))
    (directory / "generation_config.json").write_text(
        json.dumps(generation_config(cfg, tok.pad_token_id), indent=2) + "\n", encoding="utf-8")


def export_hf_dir(gguf_path: str | os.PathLike, dest: str | os.PathLike, dtype: str = "float32",
                  progress: bool = False) -> Path:
    """`write_hf_files` into `dest`, atomically (a temporary sibling renamed into place; an existing
    `dest` is replaced). Returns `dest`."""
    reader = GGUFTensorReader(gguf_path)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
    try:
        write_hf_files(reader, tmp, dtype, progress)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
