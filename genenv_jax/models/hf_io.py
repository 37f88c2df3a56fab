"""HF safetensors checkpoints <-> our params, both ways.

Loading reads one HF tensor at a time and places it straight into its target `NamedSharding`
(`jax.make_array_from_callback`), so no host ever holds the whole model. Saving gathers one
param at a time and writes config.json + (sharded) safetensors that `transformers` loads.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from safetensors.numpy import save_file
from tqdm import tqdm

from genenv_jax.models.config import ModelConfig, dtype_name
from genenv_jax.models.params import Params, param_shapes
from genenv_jax.models.partitioning import param_shardings
from genenv_jax.models.safetensors_reader import FLOAT_CODES, SafetensorsReader
from genenv_jax.parallel.arrays import to_host
from genenv_jax.parallel.mesh import MeshConfig, make_mesh

_NP_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
_EMBED = "model.embed_tokens.weight"


@dataclasses.dataclass(frozen=True)
class _Mapping:
    """One of our params and the HF tensor(s) it comes from.

    `hf_name` takes a layer index (or None for unstacked params); `to_ours` turns one HF tensor into
    our per-layer layout, `to_hf` turns it back.
    """

    path: tuple[str, ...]
    hf_name: Callable[[int | None], str]
    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]
    stacked: bool = True


def _mappings(cfg: ModelConfig) -> list[_Mapping]:
    d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    ident = lambda a: a  # noqa: E731
    layer = lambda suffix: (lambda i: f"model.layers.{i}.{suffix}")  # noqa: E731

    def proj_in(heads):  # HF [heads*H, D] <-> ours [D, heads, H]
        return (lambda a: a.T.reshape(d, heads, h), lambda a: a.reshape(d, heads * h).T)

    def bias(heads):  # HF [heads*H] <-> ours [heads, H]
        return (lambda a: a.reshape(heads, h), lambda a: a.reshape(heads * h))

    maps = [_Mapping(("embed", "embedding"), lambda i: _EMBED, ident, ident, False)]
    for ours, hf, heads in (("q", "q_proj", n), ("k", "k_proj", k), ("v", "v_proj", k)):
        maps.append(_Mapping(("layers", "attn", f"{ours}_kernel"), layer(f"self_attn.{hf}.weight"),
                             *proj_in(heads)))
        maps.append(_Mapping(("layers", "attn", f"{ours}_bias"), layer(f"self_attn.{hf}.bias"), *bias(heads)))
    maps += [
        _Mapping(("layers", "attn", "o_kernel"), layer("self_attn.o_proj.weight"),
                 lambda a: a.T.reshape(n, h, d), lambda a: a.reshape(n * h, d).T),
        _Mapping(("layers", "mlp", "gate_kernel"), layer("mlp.gate_proj.weight"), np.transpose, np.transpose),
        _Mapping(("layers", "mlp", "up_kernel"), layer("mlp.up_proj.weight"), np.transpose, np.transpose),
        _Mapping(("layers", "mlp", "down_kernel"), layer("mlp.down_proj.weight"), np.transpose, np.transpose),
        _Mapping(("layers", "input_norm", "scale"), layer("input_layernorm.weight"), ident, ident),
        _Mapping(("layers", "post_attn_norm", "scale"), layer("post_attention_layernorm.weight"), ident, ident),
        _Mapping(("final_norm", "scale"), lambda i: "model.norm.weight", ident, ident, False),
    ]
    if not cfg.tie_word_embeddings:
        maps.append(_Mapping(("lm_head",), lambda i: "lm_head.weight", np.transpose, np.transpose, False))
    return maps


def _hf_names(cfg: ModelConfig, m: _Mapping) -> list[str]:
    return [m.hf_name(i) for i in range(cfg.num_layers)] if m.stacked else [m.hf_name(None)]


def _get(tree: dict, path: tuple[str, ...]):
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def hf_tensor_shapes(cfg: ModelConfig, maps: list[_Mapping] | None = None) -> dict[str, tuple[int, ...]]:
    """HF name -> HF shape of every tensor of `cfg`'s checkpoint, in the order `hf_tensors` yields them."""
    shapes = param_shapes(cfg)
    expected: dict[str, tuple[int, ...]] = {}
    for m in maps or _mappings(cfg):
        ours = _get(shapes, m.path).shape
        per_layer = ours[1:] if m.stacked else ours
        hf_shape = m.to_hf(np.empty(per_layer, np.int8)).shape
        for name in _hf_names(cfg, m):
            expected[name] = tuple(hf_shape)
    return expected


def _check_tensors(cfg: ModelConfig, reader: SafetensorsReader, maps: list[_Mapping], allow_cast: bool) -> None:
    """Every expected tensor present with its HF shape and a float dtype (integer / bool only with
    `allow_cast`); nothing unexpected. Errors name the tensor and its file."""
    expected = hf_tensor_shapes(cfg, maps)
    where = reader.model_dir
    missing = sorted(set(expected) - set(reader.file_of))
    if missing:
        raise ValueError(f"{where}: missing tensor(s) {missing[:8]}{' ...' if len(missing) > 8 else ''} "
                         f"(expected shape of the first: {expected[missing[0]]})")
    allowed_extra = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    unexpected = sorted(set(reader.file_of) - set(expected) - allowed_extra)
    if unexpected:
        shown = [f"{u} {reader.shape(u)}" for u in unexpected[:8]]
        raise ValueError(f"{where}: unexpected tensor(s) {shown} for {cfg.num_layers}-layer Qwen2 config")
    for name, shape in expected.items():
        got = reader.shape(name)
        if got != shape:
            raise ValueError(f"{where}: tensor {name} has shape {got}, the model config implies {shape}")
        code = reader.dtype_code(name)
        if code not in FLOAT_CODES and not (allow_cast and (code.startswith(("I", "U")) or code == "BOOL")):
            raise ValueError(f"{reader.file_of[name]}: tensor {name} has dtype {code}, not a float dtype "
                             "(load_hf(..., allow_cast=True) casts integer tensors)")


def load_hf(model_dir: str | os.PathLike, mesh: jax.sharding.Mesh | None = None, dtype: Any = None,
            rules=None, *, allow_cast: bool = False, **config_overrides: Any) -> tuple[ModelConfig, Params]:
    """Loads a HF Qwen2 checkpoint directory into (cfg, params).

    With a mesh, each param lands directly in its `NamedSharding` from the logical-axis rules;
    without one, on the default device. `dtype` sets the param dtype, as a name ('bfloat16') or a
    dtype (`jnp.float32`, `np.float32`, `ml_dtypes.bfloat16`); by default the checkpoint's own.
    Tensors must hold finite floats; `allow_cast=True` also accepts (and casts) integer tensors.
    Extra keyword args override `ModelConfig` fields.
    """
    model_dir = os.fspath(model_dir)
    reader = SafetensorsReader(model_dir)
    if dtype is None:
        own = reader.dtype_name(_EMBED) if _EMBED in reader.file_of else "float32"
        dtype = own if own in _NP_DTYPES else "float32"
    dtype = dtype_name(dtype)
    config_overrides.setdefault("param_dtype", dtype)
    config_overrides.setdefault("dtype", dtype)
    cfg = ModelConfig.from_hf(model_dir, **config_overrides)
    return cfg, load_tensors(cfg, reader, mesh, rules, allow_cast=allow_cast)


def load_tensors(cfg: ModelConfig, reader, mesh: jax.sharding.Mesh | None = None, rules=None, *,
                 allow_cast: bool = False) -> Params:
    """Our params from any reader of HF-named tensors (`SafetensorsReader`, `gguf_io.GGUFTensorReader`):
    every tensor shape-checked against `cfg`, converted to our layout and `cfg.param_dtype`, and placed
    straight into its `NamedSharding` (default: one device)."""
    maps = _mappings(cfg)
    _check_tensors(cfg, reader, maps, allow_cast)
    np_dtype = _NP_DTYPES[cfg.param_dtype]
    if mesh is None:
        mesh = make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])
    shardings = param_shardings(cfg, mesh, rules)
    shapes = param_shapes(cfg)
    progress = tqdm(total=sum(len(_hf_names(cfg, m)) for m in maps), desc=f"loading {reader.model_dir}",
                    unit="tensor", disable=not sys.stderr.isatty())

    @functools.lru_cache(maxsize=2)
    def converted(name: str, m: _Mapping) -> np.ndarray:
        tensor = reader.read(name)
        if not np.isfinite(tensor).all():
            raise ValueError(f"{reader.file_of[name]}: tensor {name} has non-finite values (NaN or inf)")
        progress.update(1)
        return np.ascontiguousarray(m.to_ours(tensor).astype(np_dtype))

    params: dict = {}
    with progress:
        for m in maps:
            sharding, shape = _get(shardings, m.path), _get(shapes, m.path).shape
            if not m.stacked:
                name = m.hf_name(None)
                value = jax.make_array_from_callback(shape, sharding, lambda idx: converted(name, m)[idx])
            else:
                value = _load_stacked(cfg, m, shape, sharding, np_dtype, converted)
            _set(params, m.path, value)
            converted.cache_clear()
    return params


def _load_stacked(cfg, m: _Mapping, shape, sharding, np_dtype, converted) -> jax.Array:
    """Builds a [L, ...] param layer by layer in place (the layers axis is never sharded)."""
    spec = sharding.spec
    layer_sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*spec[1:]))

    @functools.partial(jax.jit, out_shardings=sharding)
    def zeros():
        return jnp.zeros(shape, np_dtype)

    @functools.partial(jax.jit, donate_argnums=0, out_shardings=sharding)
    def put(stacked, layer_value, i):
        return jax.lax.dynamic_update_index_in_dim(stacked, layer_value, i, 0)

    stacked = zeros()
    for i in range(cfg.num_layers):
        name = m.hf_name(i)
        layer_value = jax.make_array_from_callback(shape[1:], layer_sharding, lambda idx: converted(name, m)[idx])
        stacked = put(stacked, layer_value, i)
    return stacked


def hf_tensors(cfg: ModelConfig, params: Params) -> Iterator[tuple[str, np.ndarray]]:
    """(HF name, tensor) pairs in HF layout, one param on the host at a time (save_hf writes them
    as safetensors, `export.gguf_writer` as GGUF)."""
    for m in _mappings(cfg):
        value = to_host(_get(params, m.path))
        if m.stacked:
            for i in range(cfg.num_layers):
                yield m.hf_name(i), np.ascontiguousarray(m.to_hf(value[i]))
        else:
            yield m.hf_name(None), np.ascontiguousarray(m.to_hf(value))


def save_hf(cfg: ModelConfig, params: Params, model_dir: str | os.PathLike,
            max_shard_bytes: int = 5 * 1024**3) -> None:
    """Writes config.json + safetensors (sharded with an index above `max_shard_bytes`).

    The directory is written next to its destination and renamed into place, so a crash never
    leaves a half-written checkpoint; an existing directory of that name is replaced.
    """
    model_dir = os.path.abspath(os.fspath(model_dir))
    is_writer = jax.process_index() == 0
    parent = os.path.dirname(model_dir)
    tmp = tempfile.mkdtemp(prefix=".tmp-" + os.path.basename(model_dir) + "-", dir=parent) if is_writer else None
    shards: list[dict[str, np.ndarray]] = [{}]
    sizes = [0]
    files: list[str] = []
    weight_map: dict[str, str] = {}

    def flush():
        if shards[-1] and is_writer:
            fn = f"model-{len(files) + 1:05d}.safetensors"
            save_file(shards[-1], os.path.join(tmp, fn), metadata={"format": "pt"})
            files.append(fn)
            weight_map.update({name: fn for name in shards[-1]})
        shards[-1], sizes[-1] = {}, 0

    total = 0
    for name, tensor in hf_tensors(cfg, params):
        if sizes[-1] and sizes[-1] + tensor.nbytes > max_shard_bytes:
            flush()
        shards[-1][name] = tensor
        sizes[-1] += tensor.nbytes
        total += tensor.nbytes
    flush()
    if not is_writer:
        return
    if len(files) == 1:
        os.rename(os.path.join(tmp, files[0]), os.path.join(tmp, "model.safetensors"))
    else:
        n = len(files)
        renames = {fn: f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i, fn in enumerate(files)}
        for old, new in renames.items():
            os.rename(os.path.join(tmp, old), os.path.join(tmp, new))
        index = {"metadata": {"total_size": total},
                 "weight_map": {k: renames[v] for k, v in sorted(weight_map.items())}}
        with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg.to_hf_dict(), f, indent=2)
    if os.path.exists(model_dir):
        old = model_dir + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(model_dir, old)
        os.rename(tmp, model_dir)
        shutil.rmtree(old)
    else:
        os.rename(tmp, model_dir)
