"""A run's policy written in one of three formats, each into a (staging) directory:

- hf: an HF Qwen2 checkpoint directory (config.json, safetensors, the run's tokenizer files with
  its chat template, generation_config.json) that transformers, vLLM and others load; a LoRA
  policy is written merged (base + scale * A @ B).
- peft: a LoRA policy's adapters as a PEFT adapter directory (`models.peft_io`) over the base the
  run trained on, plus the tokenizer files; only for LoRA policies whose base another tool can
  load (an HF directory or GGUF file, not a random init of a preset).
- gguf: one `model.gguf` (llama.cpp, Ollama, LM Studio) in F32, F16 or Q8_0 with the tokenizer
  and chat template (`export.gguf_writer`); a LoRA policy is written merged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genenv_jax.evaluation.run_policy import RANDOM_INIT, RunPolicy

FORMATS = ("hf", "peft", "gguf")
GGUF_FILE = "model.gguf"


def format_problem(name: str, fmt: str, is_lora: bool, model_source: str) -> str | None:
    """Why policy `name` (LoRA or not, its base's source) cannot be exported as `fmt`, or None;
    known from the saved config, before any weights are read."""
    if fmt == "peft" and not is_lora:
        return (f"--format=peft: the {name} was fine-tuned fully (no LoRA adapters); "
                "export it with --format=hf or --format=gguf")
    if fmt == "peft" and model_source.startswith(RANDOM_INIT):
        return (f"--format=peft: the {name}'s LoRA base is a {model_source}, which no other tool "
                "can rebuild; export the merged weights with --format=hf or --format=gguf")
    return None


def run_tokenizer(policy: RunPolicy):
    """The tokenizer the run trained with (with its chat template)."""
    from genenv_jax.text.chat_text import ChatText

    return ChatText.load(policy.tokenizer_source).tokenizer


def _write_tokenizer_files(tokenizer: Any, directory: Path) -> None:
    tokenizer.save_pretrained(str(directory))


def write_hf(policy: RunPolicy, tokenizer: Any, directory: Path) -> list[str]:
    """The merged weights as an HF checkpoint directory in `directory` (which exists)."""
    from genenv_jax.models.gguf_io import generation_config
    from genenv_jax.models.hf_io import save_hf

    cfg = policy.cfg
    save_hf(cfg, policy.merged(), directory)  # replaces the (empty) staging directory atomically
    _write_tokenizer_files(tokenizer, directory)
    generation = generation_config(cfg, tokenizer.pad_token_id)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in generation["eos_token_id"]:
        generation["eos_token_id"].insert(0, int(tokenizer.eos_token_id))  # the chat turn's end (<|im_end|>)
    (directory / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    return sorted(p.name for p in directory.iterdir())


def write_peft(policy: RunPolicy, tokenizer: Any, directory: Path) -> list[str]:
    """The adapters as a PEFT LoRA directory naming the run's base model source."""
    from genenv_jax.models.peft_io import save_peft_adapters

    save_peft_adapters(directory, policy.cfg, policy.trainable, policy.partition.lora, base_model=policy.model_source)
    _write_tokenizer_files(tokenizer, directory)
    return sorted(p.name for p in directory.iterdir())


def write_gguf_file(policy: RunPolicy, tokenizer: Any, directory: Path, gguf_type: str) -> list[str]:
    """The merged weights as `directory/model.gguf` of `gguf_type`."""
    from genenv_jax.export.gguf_writer import write_gguf

    write_gguf(policy.cfg, policy.merged(), tokenizer, directory / GGUF_FILE, gguf_type,
               name=f"genenv_jax {policy.name} epoch {policy.epoch}")
    return [GGUF_FILE]


def export_policy(policy: RunPolicy, fmt: str, directory: Path, gguf_type: str = "f16") -> dict[str, Any]:
    """Writes `policy` as `fmt` into `directory`; returns a summary for the export manifest."""
    problem = format_problem(policy.name, fmt, policy.partition.has_frozen, policy.model_source)
    if problem:
        raise ValueError(problem)
    tokenizer = run_tokenizer(policy)
    if fmt == "hf":
        files = write_hf(policy, tokenizer, directory)
    elif fmt == "peft":
        files = write_peft(policy, tokenizer, directory)
    else:
        files = write_gguf_file(policy, tokenizer, directory, gguf_type)
    summary = {"policy": policy.name, "epoch": policy.epoch, "format": fmt, "model_source": policy.model_source,
               "lora": None if not policy.partition.has_frozen else {**policy.partition.record(),
                                                                     "merged": fmt != "peft"},
               "files": files}
    if fmt == "gguf":
        summary["gguf_type"] = gguf_type
    return summary
