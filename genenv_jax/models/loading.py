"""Loading a model from a local source, whatever its format: an HF checkpoint directory or a
GGUF file. `genenv_jax.data.model_sources.resolve_model_source` turns any model_dir string (a
directory, a .gguf file, a model name, a hub id) into such a local path first.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.gguf_io import gguf_model_config, load_gguf
from genenv_jax.models.hf_io import load_hf
from genenv_jax.text.gguf_tokenizer import gguf_tokenizer, is_gguf_path
from genenv_jax.text.tokenization import has_tokenizer_files, load_tokenizer

if TYPE_CHECKING:
    import jax
    from transformers import PreTrainedTokenizerBase

    from genenv_jax.models.params import Params


def initial_params(cfg: ModelConfig, mesh: "jax.sharding.Mesh | None", *, model_dir: str, seed: int) -> "Params":
    """A policy's starting weights in `cfg.param_dtype`, on the mesh: the resolved source
    `model_dir` (an HF directory or a GGUF file; `cfg`'s layout), or a random init of `cfg` from
    `seed` when it is ''. A random init is drawn in float32 and then cast, so a bfloat16 LoRA base
    is exactly the rounding of the float32 weights full fine-tuning would start from."""
    import jax

    from genenv_jax.models.params import init_params
    from genenv_jax.models.partitioning import param_shardings

    if model_dir:
        _, params = load_model(model_dir, mesh=mesh, dtype=cfg.param_dtype, remat_policy=cfg.remat_policy,
                               scan_layers=cfg.scan_layers)
        return params
    drawn = cfg.replace(param_dtype="float32")
    dtype = cfg.jnp_param_dtype

    def init(rng):
        return jax.tree.map(lambda x: x.astype(dtype), init_params(drawn, rng))
    out = None if mesh is None else param_shardings(cfg, mesh)
    return jax.jit(init, out_shardings=out)(jax.random.key(seed))


# ----------------------------------------------------------------------------------------------
def model_config(path: str | os.PathLike, **overrides: Any) -> ModelConfig:
    """The `ModelConfig` of a resolved source: config.json of a directory, or a GGUF file's metadata."""
    return gguf_model_config(path, **overrides) if is_gguf_path(path) else ModelConfig.from_hf(path, **overrides)


def load_model(path: str | os.PathLike, mesh: "jax.sharding.Mesh | None" = None, dtype: Any = None, rules=None,
               **config_overrides: Any) -> "tuple[ModelConfig, Params]":
    """(cfg, params) of a resolved source: `load_gguf` for a .gguf file, `load_hf` for a directory."""
    loader = load_gguf if is_gguf_path(path) else load_hf
    return loader(path, mesh=mesh, dtype=dtype, rules=rules, **config_overrides)


def has_own_tokenizer(path: str | os.PathLike) -> bool:
    """Whether a resolved source carries its tokenizer (a GGUF file always does)."""
    return is_gguf_path(path) or has_tokenizer_files(path)


def source_tokenizer(path: str | os.PathLike | None) -> "PreTrainedTokenizerBase":
    """The tokenizer of a resolved source (a GGUF file's own, a directory's files), or the bundled
    Qwen2.5 tokenizer for None or a directory without tokenizer files."""
    if path is None:
        return load_tokenizer()
    if is_gguf_path(path):
        return gguf_tokenizer(path)
    return load_tokenizer(path if has_own_tokenizer(path) else None)
