"""LoRA adapters on the decoder's projections: the adapter tree, its init and logical axes, and
merging it into (or laying it beside) the base params.

An adapter on projection W (x @ W) adds scale * (x @ A) @ B, with A [in, r], B [r, out] and
scale = alpha / r (`ModelConfig.lora_scale`). The adapter leaves sit beside their kernels in the
layer's dicts (`attn.q_lora_a`, `attn.q_lora_b`, `mlp.gate_lora_a`, ...), stacked on the `layers`
axis like every layer param, so the one model path (training forward, prefill, cached decode)
applies them wherever a tree carries them (`primitives`); a tree without them is the base model.
B starts at zero (PEFT's init): an adapted model starts exactly at its base.

Shapes (L layers, D hidden, N / K heads, H head dim, F MLP width, r rank):

    q: A [L, D, r], B [L, r, N, H]     k, v: A [L, D, r], B [L, r, K, H]     o: A [L, N, H, r], B [L, r, D]
    gate, up: A [L, D, r], B [L, r, F]     down: A [L, F, r], B [L, r, D]

Adapters are float32 whatever the base's dtype.

Dropout (`LoRAConfig.dropout`, PEFT's `lora_dropout`) drops the input of each adapter's low-rank
branch, x -> A, independently per target, in training steps only: `with_dropout` lays a per-layer
key and the rate beside the adapters of the tree a training step differentiates, and
`primitives.lora_input` applies them. Every other tree (sampling, reference and old logprobs,
evaluation) carries none, so it is the adapted model without dropout. The key is a hash of the
micro-batch's tokens, so a step is a pure function of its inputs and a resumed run repeats it bit
for bit.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from genenv_jax.core.config_checks import KeyProblem, check_fields, setting
from genenv_jax.models.config import ModelConfig

Params = Any
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
# target -> the layer block its kernel lives in
BLOCK_OF = {"q": "attn", "k": "attn", "v": "attn", "o": "attn", "gate": "mlp", "up": "mlp", "down": "mlp"}


def _alpha(value: float) -> str | None:
    """a finite number > 0"""
    return None if math.isfinite(value) and value > 0 else "must be a finite number > 0"


def _dropout(value: float) -> str | None:
    """in [0, 1)"""
    return None if math.isfinite(value) and 0.0 <= value < 1.0 else "must lie in [0, 1)"


def _targets(value: tuple[str, ...]) -> str | None:
    """a subset of q, k, v, o, gate, up, down"""
    unknown = sorted(set(value) - set(TARGETS))
    return f"{unknown} are not projections; expected a subset of {list(TARGETS)}" if unknown else None


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """rank 0: no adapters (full fine-tuning). `targets`: which projections get one. Declared as a
    policy's `lora` config section (`--config.agent.lora.rank=16`); a bad value names its key
    (`config.agent.lora.alpha=0.0: must be a finite number > 0`)."""

    rank: int = setting(0, "LoRA rank; 0: full fine-tuning", minimum=0)
    alpha: float = setting(16.0, "the deltas' scale is alpha / rank", check=_alpha)
    targets: tuple[str, ...] = setting(TARGETS, "the projections that get adapters",
                                       check=_targets)
    dropout: float = setting(0.0, "dropout on each adapter's input in training steps (PEFT's lora_dropout)",
                             check=_dropout)

    def __post_init__(self):
        check_fields(self)
        if self.rank and not self.targets:
            raise KeyProblem(self, "targets", "adapters (rank > 0) need at least one target")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        """alpha / rank, the multiplier of every delta (1.0 without adapters)."""
        return self.alpha / self.rank if self.rank else 1.0


def _shapes_and_axes(cfg: ModelConfig, target: str, rank: int) -> tuple[tuple, tuple, tuple, tuple]:
    """(A shape, B shape, A logical axes, B logical axes) of one target, without the layers axis."""
    d, n, k, h, f = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    table = {
        "q": ((d, rank), (rank, n, h), ("embed", None), (None, "q_heads", "head_dim")),
        "k": ((d, rank), (rank, k, h), ("embed", None), (None, "kv_heads", "head_dim")),
        "v": ((d, rank), (rank, k, h), ("embed", None), (None, "kv_heads", "head_dim")),
        "o": ((n, h, rank), (rank, d), ("q_heads", "head_dim", None), (None, "embed")),
        "gate": ((d, rank), (rank, f), ("embed", None), (None, "mlp")),
        "up": ((d, rank), (rank, f), ("embed", None), (None, "mlp")),
        "down": ((f, rank), (rank, d), ("mlp", None), (None, "embed")),
    }
    return table[target]


def adapter_shapes(cfg: ModelConfig, lora: LoRAConfig) -> Params:
    """ShapeDtypeStructs (float32) of the adapter tree."""
    tree: dict[str, dict[str, Any]] = {"attn": {}, "mlp": {}}
    for t in lora.targets:
        a, b, _, _ = _shapes_and_axes(cfg, t, lora.rank)
        tree[BLOCK_OF[t]][f"{t}_lora_a"] = jax.ShapeDtypeStruct((cfg.num_layers, *a), jnp.float32)
        tree[BLOCK_OF[t]][f"{t}_lora_b"] = jax.ShapeDtypeStruct((cfg.num_layers, *b), jnp.float32)
    return {"layers": {k: v for k, v in tree.items() if v}}


def adapter_logical_axes(cfg: ModelConfig, lora: LoRAConfig) -> Params:
    """PartitionSpecs of logical axis names, one per adapter leaf (the tree of `adapter_shapes`)."""
    tree: dict[str, dict[str, Any]] = {"attn": {}, "mlp": {}}
    for t in lora.targets:
        _, _, a_axes, b_axes = _shapes_and_axes(cfg, t, lora.rank)
        tree[BLOCK_OF[t]][f"{t}_lora_a"] = PartitionSpec("layers", *a_axes)
        tree[BLOCK_OF[t]][f"{t}_lora_b"] = PartitionSpec("layers", *b_axes)
    return {"layers": {k: v for k, v in tree.items() if v}}


def init_adapters(cfg: ModelConfig, lora: LoRAConfig, rng: jax.Array) -> Params:
    """A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming-uniform with a = sqrt(5)), B = 0, float32."""
    shapes = adapter_shapes(cfg, lora)
    keys = iter(jax.random.split(rng, len(jax.tree.leaves(shapes))))

    def init(path, leaf):
        key = next(keys)  # one key per leaf, in the tree's order
        if path[-1].key.endswith("_lora_b"):
            return jnp.zeros(leaf.shape, leaf.dtype)
        bound = 1.0 / math.sqrt(math.prod(leaf.shape[1:-1]))  # A [L, in..., r]
        return jax.random.uniform(key, leaf.shape, leaf.dtype, -bound, bound)

    return jax.tree_util.tree_map_with_path(init, shapes)


def with_adapters(params: Params, adapters: Params | None) -> Params:
    """The base tree with the adapter leaves laid beside their kernels (no copy: new dicts, the same
    arrays). `primitives` applies whatever adapters a tree carries."""
    if not adapters:
        return params
    layers = dict(params["layers"])
    for block, leaves in adapters["layers"].items():
        layers[block] = {**layers[block], **leaves}
    return {**params, "layers": layers}


def split_adapters(params: Params) -> tuple[Params, Params]:
    """(base, adapters) of a tree `with_adapters` made."""
    layers, adapters = {}, {}
    for block, leaves in params["layers"].items():
        if isinstance(leaves, Mapping):
            layers[block] = {k: v for k, v in leaves.items() if "_lora_" not in k}
            found = {k: v for k, v in leaves.items() if "_lora_" in k}
            if found:
                adapters[block] = found
        else:
            layers[block] = leaves
    return {**params, "layers": layers}, ({"layers": adapters} if adapters else {})


# Leaves `with_dropout` adds to a block with adapters: raw PRNG key data [L, 2] and the rate [L].
DROPOUT_KEY, DROPOUT_RATE = "lora_dropout_key", "lora_dropout_rate"
DROPOUT_LEAVES = (DROPOUT_KEY, DROPOUT_RATE)


def tokens_key(tokens: jax.Array, seed: int = 0x10AD) -> jax.Array:
    """A PRNG key that is a hash of a token batch (dropout masks that depend only on the step's input)."""
    flat = tokens.astype(jnp.uint32)
    position = jax.lax.broadcasted_iota(jnp.uint32, flat.shape, flat.ndim - 1) + jnp.uint32(1)
    row = jax.lax.broadcasted_iota(jnp.uint32, flat.shape, 0) * jnp.uint32(0x9E3779B1)
    digest = jnp.sum((flat + jnp.uint32(0x7F4A7C15)) * (position * jnp.uint32(0x85EBCA6B) + row), dtype=jnp.uint32)
    return jax.random.fold_in(jax.random.key(seed), digest)


def with_dropout(params: Params, key: jax.Array, rate: float) -> Params:
    """The tree (base with adapters) with a dropout key and rate beside every block's adapters:
    one key per layer and block (`DROPOUT_LEAVES`); `rate` 0 returns the tree as it is."""
    if rate == 0.0:
        return params
    layers = dict(params["layers"])
    for i, (block, leaves) in enumerate(sorted(layers.items())):
        if not isinstance(leaves, Mapping) or not any(k.endswith("_lora_a") for k in leaves):
            continue
        num_layers = next(iter(leaves.values())).shape[0]
        keys = jax.random.split(jax.random.fold_in(key, i), num_layers)
        layers[block] = {**leaves, DROPOUT_KEY: jax.random.key_data(keys),
                         DROPOUT_RATE: jnp.full((num_layers,), rate, jnp.float32)}
    return {**params, "layers": layers}


def dropout_input(block: Params, target: str, x: jax.Array) -> jax.Array:
    """x with `block`'s adapter dropout applied for `target` (its own mask), or x when the block
    carries no dropout leaves (every tree but a training step's)."""
    key = block.get(DROPOUT_KEY)
    if key is None:
        return x
    rate = block[DROPOUT_RATE]
    target_key = jax.random.fold_in(jax.random.wrap_key_data(key), TARGETS.index(target))
    keep = jax.random.bernoulli(target_key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate).astype(x.dtype), jnp.zeros((), x.dtype))


def fold_dropout_key(leaves: Params, index: jax.Array) -> Params:
    """A block's leaves with its dropout key folded with `index` (one mask per chunk of a chunked
    MLP); leaves without dropout are returned as they are."""
    if DROPOUT_KEY not in leaves:
        return leaves
    key = jax.random.fold_in(jax.random.wrap_key_data(leaves[DROPOUT_KEY]), index)
    return {**leaves, DROPOUT_KEY: jax.random.key_data(key)}


def delta(target: str, a: jax.Array, b: jax.Array) -> jax.Array:
    """The weight delta A @ B of one target in its kernel's layout (without the layers axis)."""
    if target in ("q", "k", "v"):
        return jnp.einsum("dr,rkh->dkh", a, b)
    if target == "o":
        return jnp.einsum("nhr,rd->nhd", a, b)
    return a @ b


def merge_layer(layer: Params, adapter_layer: Params, scale: float) -> Params:
    """One layer's blocks (no layers axis) with its adapters folded in: W + scale * A @ B in float32,
    cast back to W's dtype. Used over the stacked layers by `merge` and per layer by the sampler."""
    out = {}
    for block, leaves in layer.items():
        found = adapter_layer.get(block, {})
        merged = {k: v for k, v in leaves.items() if "_lora_" not in k} if isinstance(leaves, Mapping) else leaves
        for name in (n for n in found if n.endswith("_lora_a")):
            target = name[: -len("_lora_a")]
            kernel = merged[f"{target}_kernel"]
            update = delta(target, found[name], found[f"{target}_lora_b"])
            merged[f"{target}_kernel"] = (kernel.astype(jnp.float32) + scale * update).astype(kernel.dtype)
        out[block] = merged
    return out


def merge(params: Params, adapters: Params, scale: float) -> Params:
    """Base params (stacked layers) with every adapter folded in, in the kernels' dtype (for export
    and for sampling from merged weights)."""
    base, _ = split_adapters(params)
    layers = jax.vmap(lambda layer, found: merge_layer(layer, found, scale))(base["layers"], adapters.get("layers", {}))
    return {**base, "layers": layers}


def count_params(cfg: ModelConfig, lora: LoRAConfig) -> int:
    """Trainable adapter parameters."""
    return sum(math.prod(s.shape) for s in jax.tree.leaves(adapter_shapes(cfg, lora))) if lora.enabled else 0


def targets_of(adapters: Params) -> Sequence[str]:
    """The targets an adapter tree adapts, in TARGETS order."""
    found = {n[: -len("_lora_a")] for leaves in adapters.get("layers", {}).values() for n in leaves
             if n.endswith("_lora_a")}
    return [t for t in TARGETS if t in found]
