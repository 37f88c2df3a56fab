"""Checkpoints: bit-exact round trips of named array items + JSON, sharded restore, keep-last-N,
target mismatches, and the leaf digests that verification relies on."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from genenv_jax.workdir.checkpoints import (CheckpointError, CheckpointMismatchError, Checkpointer, Restored,
                                            abstract_tree, leaf_records, resume)

OPTIMIZER = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=0.01))


def _small_params(seed):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"w": jax.random.normal(k1, (8, 4), jnp.float32).astype(jnp.bfloat16),
            "layer": {"b": jax.random.normal(k2, (4,), jnp.float32), "step": jnp.int32(seed)}}


def _trained_opt_state(params):
    """An optax state with non-trivial moments and counts (one update applied)."""
    trainable = {"w": params["w"].astype(jnp.float32), "b": params["layer"]["b"]}
    state = OPTIMIZER.init(trainable)
    grads = jax.tree.map(lambda x: jnp.cos(x) * 3.0, trainable)
    _, state = OPTIMIZER.update(grads, state, trainable)
    return state


def _arrays(seed=0):
    params = _small_params(seed)
    return {"agent_params": params, "agent_opt_state": _trained_opt_state(params),
            "env_params": _small_params(seed + 100),
            "rng": {"typed": jax.random.key(seed + 7), "rbg": jax.random.key(seed, impl="rbg"),
                    "raw": jax.random.PRNGKey(seed)}}


META = {"pool_manifests": {"d_train": {"pool": "d_train", "shards": []}}, "config": {"alpha": 0.5, "name": "tiny"},
        "seeds": {"s1": {"reward_variance": 0.25}}}


def _assert_trees_bit_equal(a, b):
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b):
        assert x.dtype == y.dtype and x.shape == y.shape
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        bytes_x, bytes_y = (np.atleast_1d(np.asarray(v)).view(np.uint8) for v in (x, y))
        np.testing.assert_array_equal(bytes_x, bytes_y)


@pytest.mark.parametrize("async_save", [False, True])
def test_round_trip_is_bit_exact(tmp_path, async_save):
    arrays = _arrays(seed=1)
    with Checkpointer(tmp_path / "ckpt", async_save=async_save) as ckpt:
        assert ckpt.latest_epoch() is None and ckpt.all_epochs() == []
        ckpt.save(3, {**arrays, "reference": None}, META)  # None items are not saved
        ckpt.wait_until_finished()
        assert ckpt.latest_epoch() == 3
        targets = {name: abstract_tree(tree) for name, tree in _arrays(seed=9).items()}  # shapes only
        restored = ckpt.restore(3, {**targets, "reference": targets["agent_params"]})
        assert ckpt.metadata(3) == {**META, "saved_items": sorted(arrays)}
    assert isinstance(restored, Restored) and restored.epoch == 3 and restored.meta == META
    assert sorted(restored.arrays) == sorted(arrays)  # "reference" was asked for but not saved: left out
    _assert_trees_bit_equal(restored.arrays, arrays)
    adam = restored.arrays["agent_opt_state"][1][0]
    assert isinstance(adam, optax.ScaleByAdamState) and int(adam.count) == 1
    rng = restored.arrays["rng"]
    assert str(jax.random.key_impl(rng["rbg"])) == "rbg" and rng["raw"].dtype == jnp.uint32
    # The restored key draws the same numbers as the saved one.
    np.testing.assert_array_equal(jax.random.uniform(rng["typed"], (3,)),
                                  jax.random.uniform(arrays["rng"]["typed"], (3,)))


def test_restore_item_and_missing_epochs(tmp_path):
    arrays = _arrays(seed=2)
    with Checkpointer(tmp_path, async_save=False) as ckpt:
        ckpt.save(0, arrays, META)
        got = ckpt.restore_item(0, "env_params", abstract_tree(arrays["env_params"]))
        _assert_trees_bit_equal(got, arrays["env_params"])
        with pytest.raises(CheckpointError, match=r"holds no item 'reference' \(it has \['agent_opt_state'"):
            ckpt.restore_item(0, "reference", abstract_tree(arrays["env_params"]))
        with pytest.raises(CheckpointError, match=r"no checkpoint of epoch 7 in .* \(have \[0\]\)"):
            ckpt.restore(7, {})
        with pytest.raises(ValueError, match="reserved"):
            ckpt.save(1, {"meta": arrays["env_params"]}, META)
        with pytest.raises(ValueError, match="not JSON"):
            ckpt.save(1, arrays, {"loss": float("nan")})
        assert ckpt.all_epochs() == [0]


def test_target_mismatch_is_a_caller_error_not_a_broken_checkpoint(tmp_path):
    arrays = {"agent_params": _small_params(0)}
    with Checkpointer(tmp_path, async_save=False) as ckpt:
        ckpt.save(0, arrays, META)
        wrong_dtype = abstract_tree(arrays)
        wrong_dtype["agent_params"]["w"] = jax.ShapeDtypeStruct((8, 4), jnp.float32)
        with pytest.raises(CheckpointMismatchError, match=r"leaf w is bfloat16\[8, 4\] in the checkpoint but "
                                                          r"float32\[8, 4\] in the target"):
            ckpt.restore(0, wrong_dtype)
        extra_leaf = {"agent_params": {**arrays["agent_params"], "new": jnp.zeros(2)}}
        with pytest.raises(CheckpointMismatchError, match=r"target only: \['new'\]"):
            ckpt.restore(0, extra_leaf)
    meta_file = tmp_path / "0" / "meta" / "metadata"
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()), "schema_version": 1}))
    with Checkpointer(tmp_path) as ckpt:  # written by another version of this code
        with pytest.raises(CheckpointMismatchError, match="has checkpoint schema 1; this code reads 2"):
            resume(ckpt, abstract_tree(arrays), {})


def test_keep_last_n_and_a_plain_message_for_keep_0(tmp_path):
    with Checkpointer(tmp_path, max_to_keep=2, async_save=True) as ckpt:
        for epoch in range(5):
            ckpt.save(epoch, {"agent_params": _small_params(epoch)}, META)
        ckpt.wait_until_finished()
        assert ckpt.all_epochs() == [3, 4]
        restored = ckpt.restore(4, {"agent_params": abstract_tree(_small_params(0))})
    _assert_trees_bit_equal(restored.arrays["agent_params"], _small_params(4))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["3", "4"]
    with pytest.raises(ValueError, match=r"^keep must be >= 1 \(checkpoints to keep\), or None to keep all; got 0$"):
        Checkpointer(tmp_path / "other", max_to_keep=0)


def _opt_state_shardings(opt_state, param_shardings, mesh):
    replicated = NamedSharding(mesh, P())
    return optax.tree_map_params(OPTIMIZER, lambda _, s: s, opt_state, param_shardings,
                                 transform_non_params=lambda _: replicated)


def test_restore_into_eight_device_sharded_layout(tmp_path):
    """Saved from one device, restored straight into an fsdp x tensor layout (and verified there)."""
    assert jax.device_count() == 8
    np_rng = np.random.default_rng(0)
    params = {"embed": jnp.asarray(np_rng.standard_normal((64, 32)), jnp.bfloat16),
              "layers": {"wq": jnp.asarray(np_rng.standard_normal((32, 48)), jnp.float32),
                         "norm": jnp.asarray(np_rng.standard_normal((32,)), jnp.float32)}}
    opt_state = OPTIMIZER.init(params)
    with Checkpointer(tmp_path, async_save=False) as ckpt:
        ckpt.save(0, {"params": params, "opt_state": opt_state}, META)

    mesh = jax.make_mesh((4, 2), ("fsdp", "tensor"))
    param_sh = {"embed": NamedSharding(mesh, P("fsdp", "tensor")),
                "layers": {"wq": NamedSharding(mesh, P("fsdp", "tensor")), "norm": NamedSharding(mesh, P())}}
    abstract_params = jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh), params, param_sh)
    abstract_opt_shapes = jax.eval_shape(OPTIMIZER.init, abstract_params)
    abstract_opt = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), abstract_opt_shapes,
                                _opt_state_shardings(abstract_opt_shapes, param_sh, mesh))
    with Checkpointer(tmp_path) as ckpt:
        restored = ckpt.restore(0, {"params": abstract_params, "opt_state": abstract_opt}).arrays

    _assert_trees_bit_equal(restored["params"], params)
    _assert_trees_bit_equal(restored["opt_state"], opt_state)
    for got, want in zip(jax.tree.leaves(restored["params"]), jax.tree.leaves(param_sh)):
        assert got.sharding == want
    assert len(restored["params"]["embed"].sharding.device_set) == 8
    assert not restored["params"]["embed"].sharding.is_fully_replicated
    mu = restored["opt_state"][1][0].mu
    assert mu["embed"].sharding == param_sh["embed"]


def test_leaf_digests_do_not_depend_on_layout_and_see_one_flipped_bit():
    x = jnp.asarray(np.random.default_rng(1).standard_normal((16, 8)), jnp.float32)
    mesh = jax.make_mesh((4, 2), ("a", "b"))
    layouts = [x, jax.device_put(x, NamedSharding(mesh, P("a", "b"))), jax.device_put(x, NamedSharding(mesh, P("b")))]
    digests = {leaf_records({"x": v})["x"].digest for v in layouts}
    assert len(digests) == 1
    bits = np.asarray(x).view(np.uint32).copy()
    bits[5, 3] ^= 1 << 7
    flipped = jnp.asarray(bits.view(np.float32))
    assert leaf_records({"x": flipped})["x"].digest not in digests
    swapped = x.at[0, 0].set(x[0, 1]).at[0, 1].set(x[0, 0])  # same values, other positions
    assert leaf_records({"x": swapped})["x"].digest not in digests
    records = leaf_records({"x": x.at[2, 2].set(jnp.inf).at[3, 3].set(jnp.nan), "n": jnp.arange(3)})
    assert records["x"].nonfinite == 2 and records["n"].nonfinite == 0 and records["n"].dtype == "int32"
