"""Qwen2-architecture models: config presets, the param tree, the forward pass over whole sequences,
the KV-cache decoder, param shardings, what a policy trains of them (`Partition`: everything, or
LoRA's adapters over a frozen base), HF safetensors I/O and GGUF loading."""

from genenv_jax.models.config import PRESETS, ModelConfig, preset
from genenv_jax.models.gguf_io import load_gguf
from genenv_jax.models.hf_io import load_hf, save_hf
from genenv_jax.models.params import init_params, param_logical_axes, param_shapes
from genenv_jax.models.partition import Partition
from genenv_jax.models.partitioning import param_shardings, shard_params
from genenv_jax.models.qwen2 import forward, hidden_states, logits_from_hidden

__all__ = ["PRESETS", "ModelConfig", "Partition", "forward", "hidden_states", "init_params", "load_gguf", "load_hf", "logits_from_hidden",
           "param_logical_axes", "param_shapes", "param_shardings", "preset", "save_hf", "shard_params"]
