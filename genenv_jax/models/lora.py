"""LoRA adapters on the decoder's projections: the adapter tree, its init and logical axes,
merging it into (or laying it beside) the base params, and `AdapterPartition`, LoRA as a
partition of the weights (`models.partition`: the adapters trainable, the base frozen), the one
place the training step, the policy, its state, checkpoints and the sampler learn about LoRA.

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
branch, x -> A, independently per target, in training steps only: `AdapterPartition.dropout` makes
a key per layer and adapted block and the rate (`layer_dropout`), an argument of the training
forward scanned beside the layers (never a leaf of the weights), and `projection_delta` applies
it. Every other forward (sampling, reference and old logprobs, evaluation) gets none, so it is the
adapted model without dropout. The key is a hash of the micro-batch's tokens, so a step is a pure
function of its inputs and a resumed run repeats it bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from genenv_jax.core.config_checks import KeyProblem, check_fields, setting
from genenv_jax.models.config import ModelConfig
from genenv_jax.models.partition import Partition
from genenv_jax.models.params import param_shapes
from genenv_jax.models.partitioning import param_shardings, shardings_of

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

    def partition(self, cfg: ModelConfig) -> Partition:
        """How a policy of model `cfg` splits its weights: the adapters trainable over a frozen base,
        or (rank 0) everything trainable (`models.partition`)."""
        return AdapterPartition(cfg, self) if self.enabled else Partition(cfg)


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


def adapter_shardings(cfg: ModelConfig, lora: LoRAConfig, mesh: Mesh,
                      rules: Sequence[tuple[str, Any]] | None = None) -> Params:
    """A NamedSharding per adapter leaf (the tree of `adapter_shapes`), by the params' rules."""
    return shardings_of(adapter_logical_axes(cfg, lora), adapter_shapes(cfg, lora), mesh, rules)


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


# The training forward's dropout (`AdapterPartition.dropout`): per adapted block, a PRNG key and the
# rate per layer, {"attn" | "mlp": {"key": [L, 2] uint32, "rate": [L] float32}}. It is an argument
# of the forward (`models.qwen2.hidden_states(..., dropout=)`), scanned with the layers, never a
# leaf of the weights. A block's key is folded with its index among the layer's sorted blocks
# (attn 0, input_norm 1, mlp 2, post_attn_norm 3), so the masks are those of runs whose steps laid
# the keys inside the weights, and such a run resumes bit for bit.
DROPOUT_BLOCKS = {"attn": 0, "mlp": 2}


def tokens_key(tokens: jax.Array, seed: int = 0x10AD) -> jax.Array:
    """A PRNG key that is a hash of a token batch (dropout masks that depend only on the step's input)."""
    flat = tokens.astype(jnp.uint32)
    position = jax.lax.broadcasted_iota(jnp.uint32, flat.shape, flat.ndim - 1) + jnp.uint32(1)
    row = jax.lax.broadcasted_iota(jnp.uint32, flat.shape, 0) * jnp.uint32(0x9E3779B1)
    digest = jnp.sum((flat + jnp.uint32(0x7F4A7C15)) * (position * jnp.uint32(0x85EBCA6B) + row), dtype=jnp.uint32)
    return jax.random.fold_in(jax.random.key(seed), digest)


def layer_dropout(lora: LoRAConfig, num_layers: int, key: jax.Array) -> Params | None:
    """The dropout of one training forward: a key per layer and adapted block, and the rate
    (None when `lora.dropout` is 0 or nothing is adapted)."""
    if not lora.dropout:
        return None
    blocks = [b for b in DROPOUT_BLOCKS if any(BLOCK_OF[t] == b for t in lora.targets)]
    out = {}
    for block in blocks:
        keys = jax.random.split(jax.random.fold_in(key, DROPOUT_BLOCKS[block]), num_layers)
        out[block] = {"key": jax.random.key_data(keys), "rate": jnp.full((num_layers,), lora.dropout, jnp.float32)}
    return out or None


def dropout_input(dropout: Params | None, target: str, x: jax.Array) -> jax.Array:
    """x with one layer's block `dropout` ({"key", "rate"}) applied for `target` (its own mask), or
    x when there is none (every forward but a training step's)."""
    if dropout is None:
        return x
    rate = dropout["rate"]
    target_key = jax.random.fold_in(jax.random.wrap_key_data(dropout["key"]), TARGETS.index(target))
    keep = jax.random.bernoulli(target_key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate).astype(x.dtype), jnp.zeros((), x.dtype))


@jax.custom_vjp
def low_rank_product(x: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """(x @ a) @ b for x [M, I], a [I, r], b [r, O] -> [M, O], with a backward pass written out.

    Autodiff's own backward forms the gradients of a and b as contractions over the M rows of the
    big [M, I] / [M, O] arrays, and XLA's CPU backend then transposes those arrays (fused into the
    elementwise backward that produces them, at ~30 ns an element): measured on the real 0.5B, the
    LoRA backward cost twice a frozen base's. Here each contraction over M puts the rank-r operand
    first and transposes only the [r, I] result, with the same sums."""
    return (x @ a) @ b


def _low_rank_forward(x, a, b):
    low = x @ a  # [M, r]
    return low @ b, (x, a, b, low)


def _low_rank_backward(residuals, d_out):
    x, a, b, low = residuals
    d_low = jnp.einsum("mo,ro->mr", d_out, b)  # [M, r]
    d_b = jnp.einsum("mr,mo->ro", low, d_out)  # [r, O]
    d_a = jnp.einsum("mr,mi->ri", d_low, x).T  # [I, r]: the [r, I] product, then a small transpose
    d_x = jnp.einsum("mr,ir->mi", d_low, a)  # [M, I]
    return d_x, d_a, d_b


low_rank_product.defvjp(_low_rank_forward, _low_rank_backward)


def projection_delta(cfg: ModelConfig, block: Params, target: str, x: jax.Array,
                     dropout: Params | None = None) -> jax.Array | float:
    """scale * (dropout(x) @ A) @ B of `target`'s adapter in `block`, or 0.0 when the tree carries
    none (the base model). x [..., *in] with `in` A's leading dims ([D], or [N, H] for o); returns
    [..., *out] with `out` B's trailing dims. `dropout`: this layer's block dropout, or None."""
    a = block.get(f"{target}_lora_a")
    if a is None:
        return 0.0
    dt, b = cfg.jnp_dtype, block[f"{target}_lora_b"]
    x = dropout_input(dropout, target, x)
    lead = x.shape[:x.ndim - (a.ndim - 1)]
    rows = x.reshape(-1, math.prod(a.shape[:-1]))  # [M, I]
    out = low_rank_product(rows, a.reshape(-1, a.shape[-1]).astype(dt), b.reshape(b.shape[0], -1).astype(dt))
    return cfg.lora_scale * out.reshape(*lead, *b.shape[1:])


def output_delta(cfg: ModelConfig, attn: Params, out: jax.Array, dropout: Params | None = None) -> jax.Array | float:
    """The o projection's adapter delta for attention output `out` [B, K, G, T, H] -> [B, T, D]
    (0.0 without one). The dropout mask is drawn in `out`'s layout, then the heads are laid out
    [B, T, N, H] for A [N, H, r]."""
    if "o_lora_a" not in attn:
        return 0.0
    batch, kv_heads, groups, length, head_dim = out.shape
    dropped = dropout_input(dropout, "o", out)
    heads = dropped.transpose(0, 3, 1, 2, 4).reshape(batch, length, kv_heads * groups, head_dim)  # [B, T, N, H]
    return projection_delta(cfg, attn, "o", heads)


def weight_delta(target: str, a: jax.Array, b: jax.Array) -> jax.Array:
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
            update = weight_delta(target, found[name], found[f"{target}_lora_b"])
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
    """Trainable adapter parameters (0 without adapters)."""
    return lora.partition(cfg).trainable_params() if lora.enabled else 0


@dataclasses.dataclass(frozen=True)
class AdapterPartition(Partition):
    """LoRA: the adapters are the trainable part (float32, `init_adapters`), the base model is the
    frozen part (in its param dtype, never updated, donated or saved). The forward runs the base
    with the adapters laid beside its kernels; the sampler places each layer merged
    (W + scale * A @ B); the KL anchor of a run that was not warm-started is the base itself."""

    lora: LoRAConfig = LoRAConfig()

    @property
    def has_frozen(self) -> bool:
        return True

    @property
    def starts_at_frozen(self) -> bool:
        return True  # B = 0: fresh adapters leave the base as it is

    def describe(self) -> str:
        return (f"LoRA rank {self.lora.rank} on {','.join(self.lora.targets)}: "
                f"{self.trainable_params() / 1e6:.2f}M trained")

    def record(self) -> dict[str, Any]:
        return {"rank": self.lora.rank, "alpha": self.lora.alpha, "targets": list(self.lora.targets)}

    def trainable_shapes(self) -> Params:
        return adapter_shapes(self.cfg, self.lora)

    def frozen_shapes(self) -> Params:
        return param_shapes(self.cfg)

    def trainable_shardings(self, mesh: Mesh, rules: Sequence[tuple[str, Any]] | None = None) -> Params:
        return adapter_shardings(self.cfg, self.lora, mesh, rules)

    def frozen_shardings(self, mesh: Mesh, rules: Sequence[tuple[str, Any]] | None = None) -> Params:
        return param_shardings(self.cfg, mesh, rules)

    def initial_trainable(self, weights: Params, key: jax.Array, shardings: Params | None = None) -> Params:
        del weights
        return jax.jit(lambda k: init_adapters(self.cfg, self.lora, k), out_shardings=shardings)(key)

    def frozen_of(self, weights: Params) -> Params:
        return weights

    def model(self, trainable: Params | None, frozen: Params) -> Params:
        return with_adapters(frozen, trainable)

    def dropout(self, tokens: jax.Array) -> Params | None:
        return layer_dropout(self.lora, self.cfg.num_layers, tokens_key(tokens))

    def merged(self, trainable: Params, frozen: Params) -> Params:
        return merge(frozen, trainable, self.cfg.lora_scale)

    def place(self, sampler: Any, trainable: Params, frozen: Params) -> Any:
        return sampler.prepare_params(frozen, layer_update=(merge_layer_update(self.cfg.lora_scale),
                                                            trainable["layers"]))


@functools.cache
def merge_layer_update(scale: float):
    """`Sampler.prepare_params`'s per-layer update that folds a layer's adapters into its kernels
    (one function per scale, so the sampler compiles its program once)."""
    return functools.partial(merge_layer, scale=scale)


def targets_of(adapters: Params) -> Sequence[str]:
    """The targets an adapter tree adapts, in TARGETS order."""
    found = {n[: -len("_lora_a")] for leaves in adapters.get("layers", {}).values() for n in leaves
             if n.endswith("_lora_a")}
    return [t for t in TARGETS if t in found]
