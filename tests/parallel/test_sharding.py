"""Meshes, logical-axis rules and sharded forward passes on 8 virtual CPU devices."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from genenv_jax import parallel
from genenv_jax.models import forward, init_params, load_hf, param_shardings, preset, save_hf, shard_params

MESHES = [dict(fsdp=8, tensor=1), dict(fsdp=4, tensor=2), dict(fsdp=2, tensor=4)]


def test_eight_devices_available():
    assert jax.device_count() == 8, "tests expect --xla_force_host_platform_device_count=8"


def test_mesh_config_resolves_minus_one_and_rejects_bad_shapes():
    assert parallel.MeshConfig(data=2, fsdp=-1, tensor=2).resolve(8) == (2, 2, 2)
    assert parallel.make_mesh(parallel.MeshConfig(data=1, fsdp=-1, tensor=4)).shape == {
        "data": 1, "fsdp": 2, "tensor": 4}
    with pytest.raises(ValueError, match="not divisible by 3"):
        parallel.MeshConfig(data=3, fsdp=-1).resolve(8)
    with pytest.raises(ValueError, match="needs 4 devices, 8 are available"):
        parallel.MeshConfig(data=2, fsdp=2, tensor=1).resolve(8)
    with pytest.raises(ValueError, match="at most one axis"):
        parallel.MeshConfig(data=-1, fsdp=-1).resolve(8)


def test_logical_rules_drop_axes_that_do_not_divide():
    mesh = parallel.make_mesh(parallel.MeshConfig(fsdp=2, tensor=4))
    assert parallel.logical_to_spec(P("embed", "q_heads", "head_dim"), (32, 4, 8), mesh) == P("fsdp", "tensor", None)
    # 2 kv heads cannot be split 4 ways: replicated along `tensor` instead of failing.
    assert parallel.logical_to_spec(P("embed", "kv_heads", "head_dim"), (32, 2, 8), mesh) == P("fsdp", None, None)
    assert parallel.logical_to_spec(P("batch", None), (8, 5), mesh) == P("fsdp", None)


@pytest.mark.parametrize("mesh_shape", MESHES, ids=lambda m: f"fsdp{m['fsdp']}xtensor{m['tensor']}")
def test_sharded_forward_equals_single_device(mesh_shape):
    cfg = preset("micro").replace(num_heads=8, num_kv_heads=4, head_dim=4)
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (8, 12), 0, cfg.vocab_size)
    mask = np.ones((8, 12), np.int32)
    mask[::3, :5] = 0
    ref = np.asarray(forward(cfg, params, tokens, attention_mask=mask))

    mesh = parallel.make_mesh(parallel.MeshConfig(data=1, **mesh_shape))
    shardings = param_shardings(cfg, mesh)
    sharded = shard_params(params, shardings)
    q = sharded["layers"]["attn"]["q_kernel"]
    fsdp = "fsdp" if mesh_shape["fsdp"] > 1 else None
    tensor = "tensor" if mesh_shape["tensor"] > 1 else None
    assert q.sharding.spec == P(None, fsdp, tensor, None)
    assert sharded["layers"]["mlp"]["down_kernel"].sharding.spec == P(None, tensor, fsdp)
    assert sharded["embed"]["embedding"].sharding.spec == P(tensor, fsdp)
    assert len(q.addressable_shards) == 8 and q.addressable_shards[0].data.shape == (
        cfg.num_layers, cfg.hidden_size // mesh_shape["fsdp"], cfg.num_heads // mesh_shape["tensor"], cfg.head_dim)

    batch = parallel.shard_batch({"tokens": np.asarray(tokens), "mask": mask}, mesh)
    assert batch["tokens"].sharding.spec == P(("data", "fsdp"), None)
    with parallel.mesh_context(mesh):
        out = forward(cfg, sharded, batch["tokens"], attention_mask=batch["mask"])
    np.testing.assert_allclose(np.asarray(out), ref, atol=1e-5)


def test_load_hf_places_params_in_target_shardings(tmp_path):
    cfg = preset("micro").replace(num_heads=8, num_kv_heads=4, head_dim=4)
    params = init_params(cfg, jax.random.key(3))
    save_hf(cfg, params, tmp_path / "m")
    mesh = parallel.make_mesh(parallel.MeshConfig(fsdp=4, tensor=2))
    _, loaded = load_hf(tmp_path / "m", mesh=mesh)
    expected = param_shardings(cfg, mesh)
    for got, want, orig in zip(jax.tree.leaves(loaded), jax.tree.leaves(expected), jax.tree.leaves(params)):
        assert got.sharding == want
        np.testing.assert_array_equal(np.asarray(got), np.asarray(orig))


def test_shard_batch_rejects_indivisible_batch():
    mesh = parallel.make_mesh(parallel.MeshConfig(fsdp=8))
    with pytest.raises(ValueError, match="batch dimension 6"):
        parallel.shard_batch({"tokens": np.zeros((6, 4), np.int32)}, mesh)


def test_initialize_distributed_is_a_noop_on_one_host(monkeypatch):
    for var in ("JAX_COORDINATOR_ADDRESS", "MEGASCALE_COORDINATOR_ADDRESS", "TPU_WORKER_HOSTNAMES",
                "SLURM_JOB_NUM_NODES"):
        monkeypatch.delenv(var, raising=False)
    parallel.initialize_distributed()
    assert jax.process_count() == 1
