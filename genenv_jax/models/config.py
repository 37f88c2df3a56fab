"""Qwen2-architecture model configuration: presets and HF config.json conversion."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Any

import jax.numpy as jnp
import numpy as np

# Remat policies accepted by `ModelConfig.remat_policy` (names of `jax.checkpoint_policies`),
# plus "none" (no rematerialisation) and "full" (save nothing, recompute everything).
REMAT_POLICIES = (
    "none",
    "full",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "nothing_saveable",
    "everything_saveable",
)

# Attention kernels accepted by `ModelConfig.attention` (see `genenv_jax/models/attention.py`):
# "auto" picks by backend (TPU: splash, GPU: cudnn where its constraints hold, CPU: query_blocks while
# its probabilities fit, else blockwise);
# "einsum" is the plain reference that materialises the [B, N, T, S] scores.
ATTENTION_KERNELS = ("auto", "einsum", "query_blocks", "blockwise", "splash", "cudnn")

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def dtype_from_name(name: str) -> Any:
    """Maps 'bfloat16' / 'float32' / 'float16' to the jnp dtype, with a clear error otherwise."""
    try:
        return _DTYPES[str(name)]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(_DTYPES)}") from None


def dtype_name(dtype: Any) -> str:
    """The name ('bfloat16', 'float32', 'float16') of a dtype given as a name, a numpy dtype or a
    scalar type (`jnp.float32`, `np.float32`, `ml_dtypes.bfloat16`, ...), as configs store it."""
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}") from None
    dtype_from_name(name)
    return name


_REQUIRED = object()  # from_hf_dict: a key without a default
# ModelConfig's field names -> HF config.json's, for messages about a config.json
_HF_NAMES = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
             "num_kv_heads": "num_key_value_heads"}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a Qwen2 decoder. Frozen and hashable, so it can be a static jit arg.

    `param_dtype` is the storage dtype of the weights, `dtype` the activation/compute dtype;
    norms, softmax and logits are always computed in float32. `attention` names the attention
    kernel of the whole-sequence forward (`ATTENTION_KERNELS`); it is not part of the HF config
    and does not change the param tree.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat_policy: str = "none"
    scan_layers: bool = True
    attention: str = "auto"
    lora_scale: float = 1.0  # alpha / rank: the multiplier of every LoRA delta a param tree carries (models/lora.py)
    bos_token_id: int | None = 151643
    eos_token_id: int | None = 151645

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        for name, low, high in (("rope_theta", 0.0, math.inf), ("rms_norm_eps", 0.0, 1.0), ("lora_scale", 0.0, math.inf)):
            value = getattr(self, name)  # NaN passes every comparison below, so finiteness is asked first
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not low < value < high:
                raise ValueError(f"ModelConfig.{name}={value!r}: must be a finite number in ({low}, {high})")
        if int(self.max_position_embeddings) <= 0:
            raise ValueError(f"ModelConfig.max_position_embeddings must be positive, got {self.max_position_embeddings}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})")
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"ModelConfig.remat_policy {self.remat_policy!r} not in {REMAT_POLICIES}")
        if self.attention not in ATTENTION_KERNELS:
            raise ValueError(f"ModelConfig.attention {self.attention!r} not in {ATTENTION_KERNELS}")
        dtype_from_name(self.param_dtype)
        dtype_from_name(self.dtype)

    @property
    def jnp_dtype(self) -> Any:
        return dtype_from_name(self.dtype)

    @property
    def jnp_param_dtype(self) -> Any:
        return dtype_from_name(self.param_dtype)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Exact parameter count (embeddings included, tied head counted once)."""
        d, h, n, k, f = (self.hidden_size, self.head_dim, self.num_heads, self.num_kv_heads,
                         self.intermediate_size)
        attn = d * n * h + n * h + 2 * (d * k * h + k * h) + n * h * d
        layer = attn + 3 * d * f + 2 * d
        head = 0 if self.tie_word_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.num_layers * layer + d + head

    # ----- HF config.json -----
    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], source: str = "config.json", **overrides: Any) -> "ModelConfig":
        """Builds a config from a HF Qwen2 config dict (transformers 4 or 5 layout). Every value is
        checked where it enters: a missing required key, a value of the wrong type (a string, a
        bool where a number goes), a non-finite or out-of-range float (`rms_norm_eps: NaN` made the
        model emit one token forever) is a ValueError naming `source` and the key."""
        if not isinstance(hf, dict):
            raise ValueError(f"{source}: must hold a JSON object, not {type(hf).__name__}")

        def get(key: str, kind: type, default: Any = _REQUIRED, section: dict | None = None) -> Any:
            raw = (hf if section is None else section).get(key, default)
            if raw is _REQUIRED:
                raise ValueError(f"{source}: missing required key {key!r}")
            if raw is None and default is None:
                return None
            if kind is bool:
                if not isinstance(raw, bool):
                    raise ValueError(f"{source}: {key}={raw!r}: must be true or false")
                return raw
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (kind is int and raw != int(raw)):
                raise ValueError(f"{source}: {key}={raw!r}: must be {'an integer' if kind is int else 'a number'}")
            if not math.isfinite(raw):
                raise ValueError(f"{source}: {key}={raw!r}: must be a finite number")
            return kind(raw)

        model_type = hf.get("model_type", "qwen2")
        if model_type != "qwen2":
            raise ValueError(f"{source}: model_type is {model_type!r}; only 'qwen2' is supported")
        if hf.get("use_sliding_window", False):
            raise ValueError(f"{source}: use_sliding_window=true is not supported (Qwen2.5 checkpoints "
                             "ship it disabled)")
        # transformers 5 moved rope_theta under rope_parameters; Qwen2.5's own files keep it on top.
        rope = hf.get("rope_parameters") or {}
        scaling = hf.get("rope_scaling") or {}
        if not isinstance(rope, dict) or not isinstance(scaling, dict):
            raise ValueError(f"{source}: rope_parameters and rope_scaling must be JSON objects")
        rope_type = rope.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
        if rope_type not in ("default", None):
            raise ValueError(f"{source}: rope_type {rope_type!r} is not supported (only 'default')")
        rope_theta = get("rope_theta", float, get("rope_theta", float, 10000.0), section=rope)
        hidden, heads = get("hidden_size", int), get("num_attention_heads", int)
        eos = hf.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        kwargs = dict(
            vocab_size=get("vocab_size", int),
            hidden_size=hidden,
            intermediate_size=get("intermediate_size", int),
            num_layers=get("num_hidden_layers", int),
            num_heads=heads,
            num_kv_heads=get("num_key_value_heads", int, None) or heads,
            head_dim=get("head_dim", int, None) or (hidden // heads if heads > 0 else 0),
            rope_theta=rope_theta,
            rms_norm_eps=get("rms_norm_eps", float, 1e-6),
            tie_word_embeddings=get("tie_word_embeddings", bool, False),
            max_position_embeddings=get("max_position_embeddings", int, 32768),
            bos_token_id=get("bos_token_id", int, None),
            eos_token_id=get("eos_token_id", int, None, section={"eos_token_id": eos}),
        )
        kwargs.update(overrides)
        try:
            return cls(**kwargs)
        except ValueError as e:  # a value out of range: the file and the key, in HF's names
            text = re.sub(r"ModelConfig\.(\w+)", lambda m: _HF_NAMES.get(m.group(1), m.group(1)), str(e))
            raise ValueError(f"{source}: {text}") from None

    @classmethod
    def from_hf(cls, model_dir: str | os.PathLike, **overrides: Any) -> "ModelConfig":
        """Reads `<model_dir>/config.json` as HF checkpoints write it."""
        path = os.path.join(os.fspath(model_dir), "config.json")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no config.json in model directory")
        with open(path, encoding="utf-8") as f:
            try:
                hf = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from None
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
        return cls.from_hf_dict(hf, source=path, **overrides)

    def to_hf_dict(self, torch_dtype: str | None = None) -> dict[str, Any]:
        """A config.json dict that transformers' Qwen2Config (4.x and 5.x) reads."""
        return {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": self.num_layers,
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
            "use_cache": True,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": torch_dtype or self.param_dtype,
        }


def _qwen25(hidden, inter, layers, heads, kv, tied, eps, vocab):
    return ModelConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                       num_layers=layers, num_heads=heads, num_kv_heads=kv, head_dim=hidden // heads,
                       rope_theta=1_000_000.0, rms_norm_eps=eps, tie_word_embeddings=tied,
                       max_position_embeddings=32768, param_dtype="bfloat16", dtype="bfloat16")


# Values from the published Qwen2.5-*-Instruct config.json files.
PRESETS: dict[str, ModelConfig] = {
    "qwen2.5-0.5b": _qwen25(896, 4864, 24, 14, 2, True, 1e-6, 151936),
    "qwen2.5-1.5b": _qwen25(1536, 8960, 28, 12, 2, True, 1e-6, 151936),
    "qwen2.5-3b": _qwen25(2048, 11008, 36, 16, 2, True, 1e-6, 151936),
    "qwen2.5-7b": _qwen25(3584, 18944, 28, 28, 4, False, 1e-6, 152064),
    "qwen2.5-14b": _qwen25(5120, 13824, 48, 40, 8, False, 1e-5, 152064),
    "qwen2.5-32b": _qwen25(5120, 27648, 64, 40, 8, False, 1e-5, 152064),
    "qwen2.5-72b": _qwen25(8192, 29568, 80, 64, 8, False, 1e-5, 152064),
    # Tiny random models for tests and the CPU demo. `tiny` uses the real Qwen vocabulary size so
    # it works with the real tokenizer; `micro` has a small vocabulary for fast unit tests.
    "tiny": ModelConfig(vocab_size=151936, hidden_size=64, intermediate_size=128, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=16, tie_word_embeddings=True),
    "micro": ModelConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=10000.0,
                         bos_token_id=1, eos_token_id=2),
    # `tiny`'s body over a small tokenizer's 512-piece vocabulary (`genenv_jax/text/small_tokenizer.py`:
    # <|endoftext|> = 1, <|im_end|> = 3): the loop tests' models (tests/support/loop_configs.py), where
    # the 152k-token vocabulary would be nearly all of the work.
    "tiny-512": ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                            num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=10000.0,
                            tie_word_embeddings=True, bos_token_id=1, eos_token_id=3),
    # The miniature study's agent/simulator (docs/reproduction.md): ~3.3M params over the 512-piece study
    # tokenizer (`genenv_jax/text/small_tokenizer.py`: <|endoftext|> = 1, <|im_end|> = 3).
    "study-3m": ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=768, num_layers=4,
                            num_heads=4, num_kv_heads=2, head_dim=64, rope_theta=10000.0,
                            tie_word_embeddings=True, max_position_embeddings=4096,
                            bos_token_id=1, eos_token_id=3),
    # A ~1M-parameter variant: the default study's models (its CPU budget is 20 minutes for 15 runs).
    "study-1m": ModelConfig(vocab_size=512, hidden_size=128, intermediate_size=512, num_layers=4,
                            num_heads=4, num_kv_heads=2, head_dim=32, rope_theta=10000.0,
                            tie_word_embeddings=True, max_position_embeddings=4096,
                            bos_token_id=1, eos_token_id=3),
    # The study's `--scale=large` models (GPU/TPU): same tokenizer, ~10x the parameters.
    "study-30m": ModelConfig(vocab_size=512, hidden_size=512, intermediate_size=2048, num_layers=8,
                             num_heads=8, num_kv_heads=4, head_dim=64, rope_theta=10000.0,
                             tie_word_embeddings=True, max_position_embeddings=4096,
                             bos_token_id=1, eos_token_id=3),
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """Returns a named preset (see `PRESETS`), optionally with fields replaced."""
    key = name.lower()
    if key not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; available: {sorted(PRESETS)}")
    return PRESETS[key].replace(**overrides) if overrides else PRESETS[key]
