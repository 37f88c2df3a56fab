"""Tensor-by-name reads from a HF safetensors checkpoint directory (one file, or shards listed in
`model.safetensors.index.json`). Every failure names the file: a truncated or corrupt file raises
`ValueError: <file>: cannot read safetensors file (truncated or corrupt): <cause>`."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

# safetensors dtype codes of floating-point tensors.
FLOAT_CODES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")
_CODE_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def _unreadable(path: str, error: Exception) -> ValueError:
    return ValueError(f"{path}: cannot read safetensors file (truncated or corrupt): {error}")


class SafetensorsReader:
    """Shapes, dtypes and values of a checkpoint's tensors; files are opened once, lazily."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        index = os.path.join(model_dir, "model.safetensors.index.json")
        single = os.path.join(model_dir, "model.safetensors")
        self._handles: dict[str, Any] = {}
        if os.path.exists(index):
            with open(index) as f:
                try:
                    weight_map = json.load(f)["weight_map"]
                except (json.JSONDecodeError, KeyError) as e:
                    raise ValueError(f"{index}: not a safetensors index ({e})") from None
            self.file_of = {name: os.path.join(model_dir, fn) for name, fn in weight_map.items()}
        elif os.path.exists(single):
            self.file_of = {name: single for name in self._handle(single).keys()}
        else:
            raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")

    def _handle(self, path: str):
        if path not in self._handles:
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path}: listed in the safetensors index but missing")
            try:
                self._handles[path] = safe_open(path, framework="numpy")
            except (SafetensorError, OSError) as e:
                raise _unreadable(path, e) from None
        return self._handles[path]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._handle(self.file_of[name]).get_slice(name).get_shape())

    def dtype_code(self, name: str) -> str:
        """The safetensors dtype code of a tensor: 'F32', 'BF16', 'I64', 'BOOL', ..."""
        return self._handle(self.file_of[name]).get_slice(name).get_dtype()

    def dtype_name(self, name: str) -> str:
        """'float32' / 'bfloat16' / 'float16' for those codes, else the code itself."""
        code = self.dtype_code(name)
        return _CODE_NAMES.get(code, code)

    def read(self, name: str) -> np.ndarray:
        path = self.file_of[name]
        try:
            return self._handle(path).get_tensor(name)
        except (SafetensorError, OSError) as e:
            raise _unreadable(path, e) from None
