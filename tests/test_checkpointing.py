"""Checkpoints: bit-exact round trips, sharded restore, keep-last-N, and resume with pool rollback."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from genenv_jax import sharding
from genenv_jax.checkpointing import Checkpointer, CoevolveState, abstract_state, resume
from genenv_jax.models import param_shapes, preset
from genenv_jax.pools import Pool

OPTIMIZER = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=0.01))


def _small_params(seed):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"w": jax.random.normal(k1, (8, 4), jnp.float32).astype(jnp.bfloat16),
            "layer": {"b": jax.random.normal(k2, (4,), jnp.float32), "step": jnp.int32(seed)}}


def _trained_opt_state(params):
    """An optax state with non-trivial moments and counts (one update applied)."""
    float_params = jax.tree.map(lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                                params)
    trainable = {"w": float_params["w"], "b": float_params["layer"]["b"]}
    state = OPTIMIZER.init(trainable)
    grads = jax.tree.map(lambda x: jnp.cos(x) * 3.0, trainable)
    _, state = OPTIMIZER.update(grads, state, trainable)
    return state


def _state(epoch=0, seed=0, rng=None, refs=None):
    agent, env = _small_params(seed), _small_params(seed + 100)
    return CoevolveState(epoch=epoch, agent_params=agent, env_params=env,
                         agent_opt_state=_trained_opt_state(agent), env_opt_state=_trained_opt_state(env),
                         rng=jax.random.key(seed + 7) if rng is None else rng,
                         pool_manifests={"d_train": {"pool": "d_train", "shards": []}},
                         config={"alpha": 0.5, "beta": 2.0, "name": "tiny"}, extra={"seed_variance": {"s1": 0.25}},
                         reference_params=refs)


def _assert_trees_bit_equal(a, b):
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b):
        assert x.dtype == y.dtype and x.shape == y.shape
        bytes_x, bytes_y = (np.atleast_1d(np.asarray(v)).view(np.uint8) for v in (x, y))
        np.testing.assert_array_equal(bytes_x, bytes_y)


def _assert_states_equal(a: CoevolveState, b: CoevolveState):
    for name in ("agent_params", "env_params", "agent_opt_state", "env_opt_state", "reference_params"):
        _assert_trees_bit_equal(getattr(a, name), getattr(b, name))
    assert a.rng.dtype == b.rng.dtype
    np.testing.assert_array_equal(jax.random.key_data(a.rng), jax.random.key_data(b.rng))
    assert (a.epoch, a.pool_manifests, a.config, a.extra) == (b.epoch, b.pool_manifests, b.config, b.extra)


@pytest.mark.parametrize("async_save", [False, True])
def test_round_trip_is_bit_exact(tmp_path, async_save):
    state = _state(epoch=3, seed=1)
    with Checkpointer(tmp_path / "ckpt", async_save=async_save) as ckpt:
        assert ckpt.restore_latest(abstract_state(state)) is None  # empty directory
        ckpt.save(state)
        ckpt.wait_until_finished()
        assert ckpt.latest_epoch() == 3
        restored = ckpt.restore_latest(abstract_state(_state(seed=9)))  # target: shapes only
    _assert_states_equal(restored, state)
    assert isinstance(restored.agent_opt_state[1][0], optax.ScaleByAdamState)
    assert int(restored.agent_opt_state[1][0].count) == 1
    assert restored.reference_params is None
    # The restored key draws the same numbers as the saved one.
    np.testing.assert_array_equal(jax.random.uniform(restored.rng, (3,)), jax.random.uniform(state.rng, (3,)))


def test_keys_and_reference_params_variants(tmp_path):
    raw = _state(seed=2, rng=jax.random.PRNGKey(5), refs={"agent": _small_params(50)})
    rbg = _state(seed=3, rng=jax.random.key(11, impl="rbg"))
    with Checkpointer(tmp_path, async_save=False) as ckpt:
        ckpt.save(dataclasses.replace(raw, epoch=0))
        ckpt.save(dataclasses.replace(rbg, epoch=1))
        got_raw = ckpt.restore(0, abstract_state(raw))
        assert got_raw.rng.dtype == jnp.uint32
        np.testing.assert_array_equal(got_raw.rng, raw.rng)
        _assert_trees_bit_equal(got_raw.reference_params, raw.reference_params)
        got_rbg = ckpt.restore(1, abstract_state(rbg))
        assert str(jax.random.key_impl(got_rbg.rng)) == "rbg"
        np.testing.assert_array_equal(jax.random.key_data(got_rbg.rng), jax.random.key_data(rbg.rng))
        with pytest.raises(ValueError, match="no reference params"):
            ckpt.restore(1, abstract_state(dataclasses.replace(rbg, reference_params=raw.reference_params)))
        with pytest.raises(ValueError, match="raw uint32"):
            ckpt.restore(0, abstract_state(rbg))
        with pytest.raises(FileNotFoundError, match="epoch 7"):
            ckpt.restore(7, abstract_state(rbg))


def test_keep_last_n(tmp_path):
    with Checkpointer(tmp_path, max_to_keep=2, async_save=True) as ckpt:
        for epoch in range(5):
            ckpt.save(_state(epoch=epoch, seed=epoch))
        ckpt.wait_until_finished()
        assert ckpt.all_epochs() == [3, 4]
        restored = ckpt.restore_latest(abstract_state(_state()))
    assert restored.epoch == 4
    _assert_trees_bit_equal(restored.agent_params, _small_params(4))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["3", "4"]


def _opt_state_shardings(opt_state, param_shardings, mesh):
    replicated = NamedSharding(mesh, P())
    return optax.tree_map_params(OPTIMIZER, lambda _, s: s, opt_state, param_shardings,
                                 transform_non_params=lambda _: replicated)


def test_restore_into_eight_device_sharded_layout(tmp_path):
    assert jax.device_count() == 8
    cfg = preset("micro")
    np_rng = np.random.default_rng(0)  # random values in the model's param tree, on one device
    params = jax.tree.map(lambda s: jnp.asarray(np_rng.standard_normal(s.shape), s.dtype), param_shapes(cfg))
    opt_state = OPTIMIZER.init(params)
    state = CoevolveState(epoch=0, agent_params=params, env_params=params, agent_opt_state=opt_state,
                          env_opt_state=opt_state, rng=jax.random.key(1))
    with Checkpointer(tmp_path, async_save=False) as ckpt:
        ckpt.save(state)

    mesh = sharding.make_mesh(sharding.MeshConfig(data=1, fsdp=4, tensor=2))
    param_sh = sharding.param_shardings(cfg, mesh)
    abstract_params = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                                   jax.eval_shape(lambda: params), param_sh)
    opt_sh = _opt_state_shardings(jax.eval_shape(OPTIMIZER.init, abstract_params), param_sh, mesh)
    abstract_opt = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                                jax.eval_shape(OPTIMIZER.init, abstract_params), opt_sh)
    target = CoevolveState(epoch=0, agent_params=abstract_params, env_params=abstract_params,
                           agent_opt_state=abstract_opt, env_opt_state=abstract_opt,
                           rng=jax.ShapeDtypeStruct((), jax.random.key(0).dtype))
    with Checkpointer(tmp_path) as ckpt:
        restored = ckpt.restore_latest(target)

    _assert_trees_bit_equal(restored.agent_params, params)
    _assert_trees_bit_equal(restored.env_opt_state, opt_state)
    for got, want in zip(jax.tree.leaves(restored.agent_params), jax.tree.leaves(param_sh)):
        assert got.sharding == want
    sharded = [x for x in jax.tree.leaves(restored.agent_params) if len(x.sharding.device_set) == 8
               and not x.sharding.is_fully_replicated]
    assert sharded, "expected some params split over the 8 devices"
    mu = restored.agent_opt_state[1][0].mu
    assert jax.tree.leaves(mu)[0].sharding == jax.tree.leaves(param_sh)[0]


# ----------------------------------------------------------------------------------------------
# Resume: a toy deterministic loop with the same write order as coevolve (pools, then checkpoint).

TOY_OPT = optax.adam(0.1)


def _toy_epoch(state: CoevolveState, pools: dict) -> CoevolveState:
    """One epoch: draw 'rollouts' from the state's RNG, commit them to the pools, take a train step."""
    epoch = state.epoch + 1
    rng, sample_key = jax.random.split(state.rng)
    rewards = np.asarray(jax.random.bernoulli(sample_key, 0.5, (6,)), np.float32)
    pools["d_train"].append_epoch(epoch, [{"epoch": epoch, "i": i, "reward": float(r)}
                                          for i, r in enumerate(rewards)])
    pools["d_env"].append_epoch(epoch, [{"epoch": epoch, "weight": float(rewards.mean())}])
    target = jnp.asarray(rewards.mean())
    grads = jax.grad(lambda p: jnp.sum(jnp.square(p["w"] - target)))(state.agent_params)
    updates, opt_state = TOY_OPT.update(grads, state.agent_opt_state, state.agent_params)
    agent = optax.apply_updates(state.agent_params, updates)
    return dataclasses.replace(state, epoch=epoch, agent_params=agent, agent_opt_state=opt_state, rng=rng,
                               env_params=jax.tree.map(lambda x: x * 0.5 + target, state.env_params),
                               pool_manifests={n: p.manifest for n, p in pools.items()})


def _toy_run(workdir, num_epochs, crash_after_pool_commit_of=None) -> CoevolveState | None:
    """Runs (or resumes) the toy loop to `num_epochs`; optionally 'crashes' after a pool commit."""
    pools = {name: Pool(workdir / "pools", name) for name in ("d_train", "d_env")}
    params = {"w": jnp.zeros((3,), jnp.float32)}
    fresh = CoevolveState(epoch=-1, agent_params=params, env_params={"w": jnp.ones((2,))},
                          agent_opt_state=TOY_OPT.init(params), env_opt_state=TOY_OPT.init({"w": jnp.ones((2,))}),
                          rng=jax.random.key(42), config={"seed": 42})
    with Checkpointer(workdir / "ckpt", max_to_keep=2) as ckpt:
        state = resume(ckpt, abstract_state(fresh), pools) or fresh
        while state.epoch + 1 < num_epochs:
            state = _toy_epoch(state, pools)
            if state.epoch == crash_after_pool_commit_of:
                return None  # pools committed, checkpoint never written
            ckpt.save(state)
    return state


def test_resume_after_crash_between_pool_commit_and_checkpoint(tmp_path):
    uninterrupted = _toy_run(tmp_path / "a", num_epochs=4)

    assert _toy_run(tmp_path / "b", num_epochs=4, crash_after_pool_commit_of=2) is None
    assert Pool(tmp_path / "b" / "pools", "d_train").epochs == [0, 1, 2]  # pool ahead of checkpoint 1
    resumed = _toy_run(tmp_path / "b", num_epochs=4)

    assert resumed.epoch == uninterrupted.epoch == 3
    _assert_states_equal(resumed, uninterrupted)
    # A clean stop after epoch 1, restarted, ends the same way too.
    assert _toy_run(tmp_path / "c", num_epochs=2).epoch == 1
    _assert_states_equal(_toy_run(tmp_path / "c", num_epochs=4), uninterrupted)
    for name in ("d_train", "d_env"):
        pools = [Pool(tmp_path / run / "pools", name) for run in "abc"]
        assert pools[0].records() == pools[1].records() == pools[2].records()
        assert pools[0].epochs == pools[1].epochs == pools[2].epochs == [0, 1, 2, 3]


def test_resume_rejects_a_foreign_pool(tmp_path):
    pool = Pool(tmp_path / "pools", "d_train")
    pool.append_epoch(0, [{"x": 1}])
    state = dataclasses.replace(_state(epoch=0), pool_manifests={"d_train": pool.manifest})
    with Checkpointer(tmp_path / "ckpt", async_save=False) as ckpt:
        ckpt.save(state)
        other = Pool(tmp_path / "other_pools", "d_train")
        other.append_epoch(0, [{"x": 2}, {"x": 3}])
        with pytest.raises(ValueError, match="does not match the checkpoint"):
            resume(ckpt, abstract_state(state), {"d_train": other})
        with pytest.raises(ValueError, match="no manifest for pool 'd_env'"):
            resume(ckpt, abstract_state(state), {"d_train": pool, "d_env": Pool(tmp_path / "pools", "d_env")})
