"""Parallelism without model knowledge: the (data, fsdp, tensor) mesh, logical-axis rules, batch
shardings, multi-host start-up and coordination, and small array helpers. Imports nothing from `genenv_jax.models`
(param shardings live in `genenv_jax.models.partitioning`)."""

from genenv_jax.parallel.arrays import abstract_like, split_micro_batches, to_host
from genenv_jax.parallel.mesh import (BATCH_AXES, DEFAULT_COORDINATOR_TIMEOUT_S, LOGICAL_RULES, MESH_AXES,
                                      DistributedSetupError, MeshConfig, batch_sharding, check_distributed_flags,
                                      initialize_distributed, logical_to_spec, make_mesh, mesh_context,
                                      shard_batch)
from genenv_jax.parallel.processes import (barrier, broadcast_object, check_same_on_all, is_multiprocess,
                                           is_writer)

__all__ = ["BATCH_AXES", "DEFAULT_COORDINATOR_TIMEOUT_S", "DistributedSetupError", "LOGICAL_RULES", "MESH_AXES",
           "MeshConfig", "abstract_like", "barrier", "batch_sharding", "broadcast_object", "check_distributed_flags",
           "check_same_on_all", "initialize_distributed", "is_multiprocess", "is_writer", "logical_to_spec", "make_mesh", "mesh_context", "shard_batch",
           "split_micro_batches", "to_host"]
