"""What a policy trains: its model's weights as a trainable part and a frozen part.

Every consumer of a policy's weights (the update step, the reference and old logprobs, the
sampler's placement, the policy state, checkpoints, export and evaluation) sees the weights as
the pair `(trainable, frozen)` and asks the partition what the pair means:

- `model(trainable, frozen)` is the tree the forward pass runs on;
- `dropout(tokens)` is the training forward's noise (None: none), an argument of the forward,
  never a leaf of the weights;
- `merged(trainable, frozen)` is one plain param tree (export, evaluation);
- `place(sampler, trainable, frozen)` puts the weights on a sampler.

This class is full fine-tuning: everything is trainable and the frozen part is the empty tree
`{}` (a pytree with no leaves, so a step's fourth argument costs nothing). LoRA is the other
partition, `models.lora.AdapterPartition`: the adapters trainable, the base frozen. A step, a
policy state and a checkpoint are the same code for both; only the partition differs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
from jax.sharding import Mesh

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.params import param_shapes
from genenv_jax.models.partitioning import param_shardings

Params = Any
EMPTY: Params = {}  # the frozen part of full fine-tuning: no leaves


@dataclasses.dataclass(frozen=True)
class Partition:
    """Full fine-tuning of `cfg`'s model: the trainable part is the whole param tree."""

    cfg: ModelConfig

    @property
    def has_frozen(self) -> bool:
        """Whether part of the weights is frozen (held outside the trained tree, never saved)."""
        return False

    @property
    def starts_at_frozen(self) -> bool:
        """Whether the untrained trainable part leaves the frozen model unchanged, so the KL anchor
        of a run that was not warm-started is the frozen part alone (no copy: `reference` None)."""
        return False

    def describe(self) -> str:
        return "full fine-tuning"

    def record(self) -> dict[str, Any]:
        """What an export records of the partition beside the weights (nothing for whole weights)."""
        return {}

    def trainable_params(self) -> int:
        return sum(int(s.size) for s in jax.tree.leaves(self.trainable_shapes()))

    # ----- shapes and shardings -----
    def trainable_shapes(self) -> Params:
        """ShapeDtypeStructs of the trained tree."""
        return param_shapes(self.cfg)

    def frozen_shapes(self) -> Params:
        """ShapeDtypeStructs of the frozen part (`{}`: none)."""
        return EMPTY

    def trainable_shardings(self, mesh: Mesh, rules: Sequence[tuple[str, Any]] | None = None) -> Params:
        return param_shardings(self.cfg, mesh, rules)

    def frozen_shardings(self, mesh: Mesh, rules: Sequence[tuple[str, Any]] | None = None) -> Params:
        return EMPTY

    # ----- the weights as the pair -----
    def initial_trainable(self, weights: Params, key: jax.Array, shardings: Params | None = None) -> Params:
        """What training starts from, given the model's initial `weights` (`key`: a fresh part's
        draw, placed on `shardings` when given)."""
        del key, shardings
        return weights

    def frozen_of(self, weights: Params) -> Params:
        """The frozen part of the model's initial `weights`."""
        del weights
        return EMPTY

    def model(self, trainable: Params | None, frozen: Params) -> Params:
        """The param tree the forward pass runs on (`trainable` None: the frozen part alone, only
        meaningful where `starts_at_frozen`)."""
        if trainable is None:
            raise ValueError("full fine-tuning has no frozen model to run without the trained params")
        return trainable

    def dropout(self, tokens: jax.Array) -> Params | None:
        """The training forward's dropout for one micro-batch of `tokens` [B, T] (None: none)."""
        del tokens
        return None

    def merged(self, trainable: Params, frozen: Params) -> Params:
        """The weights as one plain param tree (export, evaluation)."""
        return self.model(trainable, frozen)

    def place(self, sampler: Any, trainable: Params, frozen: Params) -> Any:
        """The weights placed on `sampler` (`sampling.Sampler.prepare_params`) for decoding."""
        return sampler.prepare_params(self.model(trainable, frozen))


def fold_dropout(dropout: Params | None, index: jax.Array) -> Params | None:
    """One layer's block dropout ({"key": [2] uint32 key data, "rate": []}) with its key folded with
    `index`, so each chunk of a chunked forward draws its own mask; None stays None."""
    if dropout is None:
        return None
    key = jax.random.fold_in(jax.random.wrap_key_data(dropout["key"]), index)
    return {**dropout, "key": jax.random.key_data(key)}
