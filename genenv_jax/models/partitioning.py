"""Where each param of a `ModelConfig` lives on a mesh: its logical axes through the rules."""

from __future__ import annotations

from typing import Any, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from genenv_jax.models.config import ModelConfig
from genenv_jax.models.params import Params, param_logical_axes, param_shapes
from genenv_jax.parallel.mesh import logical_to_spec


def param_shardings(cfg: ModelConfig, mesh: Mesh, rules: Sequence[tuple[str, Any]] | None = None) -> Params:
    """A NamedSharding per param (same tree as `init_params`), from its logical axes and `rules`
    (default `parallel.LOGICAL_RULES`); mesh axes that do not divide a dimension are dropped."""
    return shardings_of(param_logical_axes(cfg), param_shapes(cfg), mesh, rules)


def shardings_of(logical: Params, shapes: Params, mesh: Mesh, rules: Sequence[tuple[str, Any]] | None = None) -> Params:
    """NamedShardings of a tree from its logical PartitionSpecs and shapes."""
    return jax.tree.map(lambda spec, s: NamedSharding(mesh, logical_to_spec(spec, s.shape, mesh, rules)),
                        logical, shapes, is_leaf=lambda x: isinstance(x, P))


def shard_params(params: Params, shardings: Params) -> Params:
    """Places (or reshards) a param tree onto the given shardings."""
    return jax.device_put(params, shardings)
