"""Qwen2-architecture models: config presets, the Flax decoder, HF safetensors I/O."""

from genenv_jax.models.config import PRESETS, ModelConfig, preset
from genenv_jax.models.qwen2 import (
    forward,
    hidden_states,
    init_params,
    logits_from_hidden,
    param_logical_axes,
    param_shapes,
)
from genenv_jax.models.hf_io import load_hf, save_hf
