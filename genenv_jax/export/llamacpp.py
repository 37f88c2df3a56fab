"""llama.cpp itself decoding an exported GGUF file, to check it against our own greedy decoding.

`llama-cpp-python` has no wheel on the package index these machines reach (compiling its sdist
takes too long on two cores), but `node-llama-cpp` ships llama.cpp as prebuilt CPU binaries on npm
(`@node-llama-cpp/linux-x64`): `make llamacpp` installs both into `.venv/llamacpp` (85 MB). This
module runs `llamacpp_js/greedy.mjs` there under `node`: llama.cpp's own GGUF reader, tokenizer
metadata, dequantisation and CPU kernels, greedy (temperature 0), on token ids we give it, so no
tokenizer stands between the two decodings.

    outputs = greedy("model.gguf", [[151644, 872, ...], ...], max_new_tokens=32)
    first_difference(ours, outputs[i])  # None when the tokens are equal
    second_choice(cfg, params, prompt, ours[:k])  # (our runner-up, its logit gap) where they part, at k

The install directory is `GENENV_LLAMACPP_DIR` if set, else `<the Python environment>/llamacpp`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

SCRIPT = Path(__file__).with_name("llamacpp_js") / "greedy.mjs"
KV_TYPES = ("F32", "F16")  # the KV cache's element types `greedy` offers


class LlamaCppUnavailable(RuntimeError):
    """node or node-llama-cpp is missing (one line: what, and how to install it)."""


class LlamaCppError(RuntimeError):
    """llama.cpp ran and failed (its last line of output)."""


def install_dir() -> Path:
    return Path(os.environ.get("GENENV_LLAMACPP_DIR") or Path(sys.prefix) / "llamacpp")


def unavailable_reason() -> str | None:
    """Why llama.cpp cannot run here (node, or node-llama-cpp and its CPU binary, missing), or None."""
    if shutil.which("node") is None:
        return "llama.cpp checks need node (not on PATH)"
    modules = install_dir() / "node_modules"
    for package in ("node-llama-cpp", "@node-llama-cpp/linux-x64"):
        if not (modules / package / "package.json").is_file():
            return f"llama.cpp checks need {package} in {modules} (`make llamacpp` installs it)"
    return None


def installed_version() -> str:
    """node-llama-cpp's version and the llama.cpp release its binary was built from."""
    modules = install_dir() / "node_modules"
    version = json.loads((modules / "node-llama-cpp" / "package.json").read_text())["version"]
    build = modules / "@node-llama-cpp" / "linux-x64" / "bins" / "linux-x64" / "_nlcBuildMetadata.json"
    release = json.loads(build.read_text()).get("buildOptions", {}).get("llamaCpp", {}) if build.is_file() else {}
    return f"node-llama-cpp {version}, llama.cpp {release.get('release', 'unknown release')}"


def greedy(gguf_path: str | os.PathLike, prompts: Sequence[Sequence[int]], max_new_tokens: int,
           kv_type: str = "F32", threads: int = 2, timeout_s: float = 600.0) -> list[list[int]]:
    """llama.cpp's greedy continuation of each prompt (token ids): `max_new_tokens` ids each,
    end-of-generation tokens included, every prompt in a fresh context, flash attention off.
    `kv_type` is the KV cache's element type: F32 (default) stores keys and values as computed,
    as our sampler does; F16 is llama.cpp's own default, which rounds them."""
    if kv_type not in KV_TYPES:
        raise ValueError(f"kv_type {kv_type!r}: expected one of {KV_TYPES}")
    reason = unavailable_reason()
    if reason:
        raise LlamaCppUnavailable(reason)
    proc = subprocess.run(
        ["node", str(SCRIPT), str(install_dir() / "node_modules"), str(Path(gguf_path).resolve()),
         str(max_new_tokens), str(threads), kv_type],
        input=json.dumps([[int(t) for t in p] for p in prompts]), capture_output=True, text=True,
        timeout=timeout_s)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise LlamaCppError(f"llama.cpp on {gguf_path}: {lines[-1] if lines else f'exit {proc.returncode}'}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    outputs = result["outputs"]
    if len(outputs) != len(prompts) or any(len(o) != max_new_tokens for o in outputs):
        raise LlamaCppError(f"llama.cpp on {gguf_path}: expected {len(prompts)} x {max_new_tokens} tokens, "
                            f"got {[len(o) for o in outputs]}")
    return outputs


def first_difference(ours: Sequence[int], theirs: Sequence[int]) -> int | None:
    """The first position where two token lists differ (a shorter list differs where it ends), or None."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def second_choice(cfg, params, prompt: Sequence[int], generated: Sequence[int]) -> tuple[int, float]:
    """Our runner-up for the next token after `prompt + generated` and its logit's distance below
    our first choice (one float32 forward).

    Where llama.cpp's greedy tokens part from ours, this says whether they parted at a near-tie,
    which a different summation order (another BLAS kernel, another CPU) can flip, or at a real
    difference between the two computations."""
    import jax.numpy as jnp
    import numpy as np

    from genenv_jax.models import forward

    logits = np.asarray(forward(cfg, params, jnp.asarray([list(prompt) + list(generated)])))[0, -1]  # [V]
    runner_up, first = np.argsort(logits)[-2:]
    return int(runner_up), float(logits[first] - logits[runner_up])
