"""Random tiny HF transformers Qwen2 checkpoints, the independent reference for parity tests."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def make_hf_model(*, vocab: int = 101, hidden: int = 48, intermediate: int = 72, layers: int = 2,
                  heads: int = 4, kv_heads: int = 2, head_dim: int | None = None, tied: bool = False,
                  rope_theta: float = 10000.0, std: float = 0.2, seed: int = 0) -> Qwen2ForCausalLM:
    """A float32 Qwen2ForCausalLM with normal(0, std) weights (biases and norms included).

    A std well above HF's 0.02 default spreads the logits so greedy choices are not near-ties.
    """
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim or hidden // heads, tie_word_embeddings=tied, rope_theta=rope_theta,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, std)
    return model


def save_hf_model(model: Qwen2ForCausalLM, directory, max_shard_size: str | None = None) -> str:
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(directory), safe_serialization=True, **kwargs)
    return str(directory)
