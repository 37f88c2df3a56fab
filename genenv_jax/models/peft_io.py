"""LoRA adapters in the PEFT library's format: a directory with `adapter_config.json` and
`adapter_model.safetensors`, which `peft.PeftModel.from_pretrained(hf_base, directory)` loads onto
the HF base (and which we read back). Merged weights go through `hf_io.save_hf(cfg, lora.merge(...))`.

PEFT's layout for Qwen2 (`transformers.Qwen2ForCausalLM`): per layer i and projection p,
`base_model.model.model.layers.{i}.{self_attn|mlp}.{p}_proj.lora_A.weight` [r, in] and
`...lora_B.weight` [out, r] (nn.Linear's [out, in] convention), scale lora_alpha / r.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from genenv_jax.core.config_checks import KeyProblem
from genenv_jax.models.config import ModelConfig
from genenv_jax.models.lora import BLOCK_OF, TARGETS, LoRAConfig, adapter_shapes, targets_of

Params = Any
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
# LoRAConfig's fields under the names adapter_config.json gives them
_PEFT_KEY = {"rank": "r", "alpha": "lora_alpha", "targets": "target_modules", "dropout": "lora_dropout"}
_MODULE = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
           "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def _key(layer: int, target: str, which: str) -> str:
    return f"base_model.model.model.layers.{layer}.{_MODULE[target]}.lora_{which}.weight"


def _to_peft(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Our A [in..., r], B [r, out...] of one layer -> PEFT's lora_A [r, in], lora_B [out, r]."""
    rank = a.shape[-1]
    return a.reshape(-1, rank).T, b.reshape(rank, -1).T


def save_peft_adapters(directory: str | os.PathLike, cfg: ModelConfig, adapters: Params, lora: LoRAConfig,
                       base_model: str = "") -> Path:
    """Writes `adapters` as a PEFT LoRA directory (float32), staged beside `directory` and renamed
    into place. `base_model` goes to `base_model_name_or_path` (the HF base they apply to)."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    targets = list(targets_of(adapters))
    if not targets:
        raise ValueError("save_peft_adapters: the adapter tree adapts nothing")
    tensors = {}
    for t in targets:
        a_all = np.asarray(adapters["layers"][BLOCK_OF[t]][f"{t}_lora_a"], np.float32)
        b_all = np.asarray(adapters["layers"][BLOCK_OF[t]][f"{t}_lora_b"], np.float32)
        for i in range(cfg.num_layers):
            a, b = _to_peft(a_all[i], b_all[i])
            tensors[_key(i, t, "A")], tensors[_key(i, t, "B")] = np.ascontiguousarray(a), np.ascontiguousarray(b)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank, "lora_alpha": lora.alpha,
              "lora_dropout": lora.dropout, "target_modules": [_MODULE[t].split(".")[1] for t in targets],
              "bias": "none", "fan_in_fan_out": False, "inference_mode": True, "use_rslora": False,
              "use_dora": False, "modules_to_save": None, "init_lora_weights": True,
              "base_model_name_or_path": base_model}
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{directory.name}-", dir=directory.parent))
    try:
        save_file(tensors, str(staging / WEIGHTS_FILE))
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _number(config: dict, key: str, kind: type, path: Path, default: Any = None) -> Any:
    """`config[key]` as an int or a finite float (a missing key without `default`, a string, a bool,
    NaN or a fractional rank: a ValueError naming the file and the key, not a KeyError)."""
    raw = config.get(key)
    raw = default if raw is None else raw
    if raw is None:
        raise ValueError(f"{path}: missing required key {key!r}")
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not np.isfinite(raw) \
            or (kind is int and raw != int(raw)):
        raise ValueError(f"{path}: {key}={raw!r}: must be {'an integer' if kind is int else 'a finite number'}")
    return kind(raw)


def _targets(modules: Any, path: Path) -> tuple[str, ...]:
    """Our targets for PEFT's `target_modules`: a list of projection names, or "all-linear" (every
    projection; PEFT leaves out only the output head, which has no adapter here). Another string
    is a regular expression in PEFT, which is not read here: refused, never split into characters."""
    by_module = {m.split(".")[1]: t for t, m in _MODULE.items()}
    if modules == "all-linear":
        return TARGETS
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise ValueError(f"{path}: target_modules={modules!r}: expected a list of projection names "
                         f"{sorted(by_module)} or \"all-linear\"")
    unknown = [m for m in modules if m not in by_module]
    if unknown:
        raise ValueError(f"{path}: target_modules {unknown} are not Qwen2 projections {sorted(by_module)}")
    return tuple(t for t in TARGETS if _MODULE[t].split(".")[1] in modules)


def load_peft_adapters(directory: str | os.PathLike, cfg: ModelConfig) -> tuple[LoRAConfig, Params]:
    """(LoRAConfig, adapter tree) of a PEFT LoRA directory for a base of config `cfg`; one line
    naming the file and the problem when it is not one (missing file, another PEFT type, bias or
    module, a shape that does not fit `cfg`)."""
    from safetensors.numpy import load_file

    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing (a PEFT adapter directory holds {CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{config_path}: not JSON ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: must hold a JSON object, not {type(config).__name__}")
    if config.get("peft_type") != "LORA" or config.get("bias", "none") != "none" or config.get("use_dora"):
        raise ValueError(f"{config_path}: only plain LoRA adapters without bias are read "
                         f"(peft_type {config.get('peft_type')!r}, bias {config.get('bias')!r})")
    rank = _number(config, "r", int, config_path)
    if rank < 1:
        raise ValueError(f"{config_path}: r={rank}: must be >= 1 (the adapters' rank)")
    targets = _targets(config.get("target_modules"), config_path)
    alpha = _number(config, "lora_alpha", float, config_path)
    dropout = _number(config, "lora_dropout", float, config_path, default=0.0)
    try:
        lora = LoRAConfig(rank=rank, alpha=alpha, targets=targets, dropout=dropout)
    except KeyProblem as e:  # LoRAConfig's ranges (alpha > 0, dropout in [0, 1)), under PEFT's key names
        raise ValueError(f"{config_path}: {_PEFT_KEY[e.key]}={e.value!r}: {e.problem}") from None
    tensors = load_file(str(weights_path))
    tree: dict[str, dict[str, Any]] = {"attn": {}, "mlp": {}}
    expected = adapter_shapes(cfg, lora)["layers"]
    for t in targets:
        a_shape = expected[BLOCK_OF[t]][f"{t}_lora_a"].shape[1:]  # ours, without the layers axis
        b_shape = expected[BLOCK_OF[t]][f"{t}_lora_b"].shape[1:]
        a_layers, b_layers = [], []
        for i in range(cfg.num_layers):
            try:
                a, b = tensors[_key(i, t, "A")], tensors[_key(i, t, "B")]
            except KeyError as e:
                raise ValueError(f"{weights_path}: no tensor {e.args[0]}") from None
            if a.size != np.prod(a_shape) or b.size != np.prod(b_shape):
                raise ValueError(f"{weights_path}: {_key(i, t, 'A')} / B of shapes {a.shape} / {b.shape} do not "
                                 f"fit the base (rank {lora.rank})")
            a_layers.append(a.T.reshape(a_shape))  # PEFT's lora_A [r, in] -> A [in..., r]
            b_layers.append(b.T.reshape(b_shape))  # lora_B [out, r] -> B [r, out...]
        tree[BLOCK_OF[t]][f"{t}_lora_a"] = np.stack(a_layers).astype(np.float32)
        tree[BLOCK_OF[t]][f"{t}_lora_b"] = np.stack(b_layers).astype(np.float32)
    return lora, {"layers": {k: v for k, v in tree.items() if v}}
