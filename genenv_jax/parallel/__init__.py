"""Parallelism without model knowledge: the (data, fsdp, tensor) mesh, logical-axis rules, batch
shardings, multi-host start-up, and small array helpers. Imports nothing from `genenv_jax.models`
(param shardings live in `genenv_jax.models.partitioning`)."""

from genenv_jax.parallel.arrays import abstract_like, split_micro_batches, to_host
from genenv_jax.parallel.mesh import (BATCH_AXES, LOGICAL_RULES, MESH_AXES, MeshConfig, batch_sharding,
                                      initialize_distributed, logical_to_spec, make_mesh, mesh_context,
                                      shard_batch)

__all__ = ["BATCH_AXES", "LOGICAL_RULES", "MESH_AXES", "MeshConfig", "abstract_like", "batch_sharding",
           "initialize_distributed", "logical_to_spec", "make_mesh", "mesh_context", "shard_batch",
           "split_micro_batches", "to_host"]
