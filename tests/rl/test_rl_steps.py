"""GRPO / RWR train steps: sharded on 8 CPU devices == single device, micro-batched == full batch,
the KL threshold gate, the reference-logprob function, batch validation."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from genenv_jax import parallel, rl
from genenv_jax.models import param_shardings, preset, shard_params
from tests.support.random_params import random_params

CFG = preset("micro")
BATCH, LENGTH, ROLLOUTS = 16, 12, 4
MESHES = {"fsdp8": (1, 8, 1), "fsdp4_tensor2": (1, 4, 2), "data2_fsdp2_tensor2": (2, 2, 2)}
# Adam's first step is g / (|g| + eps): a larger eps keeps it Lipschitz in g, so float32 summation
# order (sharded vs single device) moves the params by ~1e-7, not by a sign flip of a ~0 gradient.
ADAMW = rl.OptimizerConfig(learning_rate=1e-3, eps=1e-4, weight_decay=0.01)


@functools.lru_cache(maxsize=None)
def _initial_params():
    return host(random_params(CFG, 0))


def fresh_params():
    """A new copy of the initial params on device (steps donate their inputs)."""
    return jax.tree.map(jnp.array, _initial_params())


def make_mesh(name):
    data, fsdp, tensor = MESHES[name]
    return parallel.make_mesh(parallel.MeshConfig(data=data, fsdp=fsdp, tensor=tensor))


def host(tree):
    return jax.tree.map(np.asarray, tree)


@pytest.fixture(scope="module")
def batch():
    """A GRPO / RWR batch: left-padded prompts, responses with a tool-observation span, padding."""
    rng = np.random.RandomState(0)
    tokens = rng.randint(3, CFG.vocab_size, (BATCH, LENGTH)).astype(np.int32)
    pad = rng.randint(0, 3, BATCH)
    prompt = rng.randint(2, 4, BATCH)
    response = rng.randint(1, LENGTH - 6, BATCH)
    attention_mask = (np.arange(LENGTH)[None] >= pad[:, None]) & (np.arange(LENGTH)[None] < (pad + prompt + response)[:, None])
    spans = [[(int(pad[i] + prompt[i] + 1), int(pad[i] + prompt[i] + 2))] if response[i] > 2 else []
             for i in range(BATCH)]
    loss_mask = rl.build_loss_mask(prompt, response, LENGTH, observation_spans=spans, prompt_offsets=pad)
    tokens = np.where(attention_mask, tokens, 0)
    logprobs_fn = rl.make_logprobs_fn(CFG)
    initial = np.asarray(logprobs_fn(fresh_params(), {"tokens": tokens, "attention_mask": attention_mask}))
    rewards = (rng.uniform(size=BATCH) > 0.5).astype(np.float32)
    return {
        "initial_logprobs": initial,
        "tokens": tokens,
        "attention_mask": attention_mask.astype(np.int32),
        "loss_mask": loss_mask,
        "old_logprobs": (initial + rng.normal(0, 0.2, initial.shape)).astype(np.float32),
        "ref_logprobs": (initial + rng.normal(0, 0.3, initial.shape)).astype(np.float32),
        "advantages": np.asarray(rl.grpo_advantages(rewards, ROLLOUTS)),
        "rewards": rng.uniform(size=BATCH).astype(np.float32),
    }


GRPO_KEYS = ("tokens", "attention_mask", "loss_mask", "old_logprobs", "ref_logprobs", "advantages")
RWR_KEYS = ("tokens", "attention_mask", "loss_mask", "ref_logprobs", "rewards")
GRPO_CONFIG = rl.GRPOConfig(kl_coef=0.05, entropy_coef=0.01, aggregation="seq_mean_token_mean")


def pick(batch, keys):
    return {k: batch[k] for k in keys}


def run_steps(step, batch, num_steps=2):
    params = step.place_params(fresh_params())
    opt_state = step.init_opt_state(params)
    placed = step.place_batch(batch)
    history = []
    for _ in range(num_steps):
        params, opt_state, metrics = step(params, opt_state, placed)
        history.append(host(metrics))
    return host(params), opt_state, history


def assert_trees_close(a, b, atol):
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(x, y, atol=atol, rtol=0, err_msg=jax.tree_util.keystr(path))


@pytest.fixture(scope="module")
def grpo_reference(batch):
    step = rl.make_grpo_step(CFG, rl.make_optimizer(ADAMW), GRPO_CONFIG)
    return run_steps(step, pick(batch, GRPO_KEYS))


def test_grpo_step_metrics_and_update(grpo_reference, batch):
    params, opt_state, history = grpo_reference
    first = history[0]
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "tokens", "grad_norm", "learning_rate"):
        assert np.isfinite(first[key]), key
    assert first["tokens"] == batch["loss_mask"].sum()
    assert 0 < first["clip_frac"] < 1 and first["kl"] > 0 and first["grad_norm"] > 0
    assert np.isclose(first["learning_rate"], ADAMW.learning_rate)
    # The loss the step reports is the pure loss on the recomputed logprobs.
    start = fresh_params()
    logprobs, entropy = rl.token_logprobs(CFG, start, batch["tokens"], batch["attention_mask"], with_entropy=True)
    want, _ = rl.grpo_loss(logprobs, batch["old_logprobs"], batch["advantages"], batch["loss_mask"], GRPO_CONFIG,
                           ref_logprobs=batch["ref_logprobs"], entropy=entropy)
    np.testing.assert_allclose(first["loss"], float(want), rtol=1e-5)
    assert history[1]["loss"] < first["loss"]  # one AdamW step on this batch lowers its loss
    moved = [np.abs(a - np.asarray(b)).max() for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(start))]
    assert min(moved) > 0
    assert int(optax.tree_utils.tree_get(opt_state, "count", filtering=lambda path, _: "inner_state" in
                                         jax.tree_util.keystr(path))) == 2


def assert_matches_reference(params, history, reference):
    """Params and every per-step metric equal the single-device full-batch reference run."""
    ref_params, _, ref_history = reference
    assert_trees_close(params, ref_params, 1e-5)
    for got, want in zip(history, ref_history):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_grpo_micro_batched_equals_full_batch(grpo_reference, batch):
    step = rl.make_grpo_step(CFG, rl.make_optimizer(ADAMW), GRPO_CONFIG, micro_batches=4)
    params, _, history = run_steps(step, pick(batch, GRPO_KEYS))
    assert_matches_reference(params, history, grpo_reference)


def test_a_micro_batch_without_loss_tokens_is_skipped_and_changes_nothing(batch):
    """Empty rows (all masks 0) interleaved so that micro-batch 1 of 2 holds only them: the step skips
    it (a `cond` in the program) and matches the same batch in one micro-batch."""
    grpo = pick(batch, GRPO_KEYS)
    padded = {k: np.zeros((2 * BATCH, *v.shape[1:]), v.dtype) for k, v in grpo.items()}
    for k, v in grpo.items():
        padded[k][0::2] = v  # micro-batch m of 2 holds rows m, m + 2, ...: micro-batch 1 is all empty rows
    whole = run_steps(rl.make_grpo_step(CFG, rl.make_optimizer(ADAMW), GRPO_CONFIG), padded)
    step = rl.make_grpo_step(CFG, rl.make_optimizer(ADAMW), GRPO_CONFIG, micro_batches=2)
    params, _, history = run_steps(step, padded)
    assert_matches_reference(params, history, whole)
    assert history[0]["tokens"] == batch["loss_mask"].sum()
    placed = step.place_params(fresh_params())
    jaxpr = str(jax.make_jaxpr(step.fn)(placed, step.init_opt_state(placed), padded, {}))
    assert " cond[" in jaxpr


@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_grpo_sharded_equals_single_device(grpo_reference, batch, mesh_name):
    mesh = make_mesh(mesh_name)
    step = rl.make_grpo_step(CFG, rl.make_optimizer(ADAMW), GRPO_CONFIG, mesh=mesh, micro_batches=2)
    params, opt_state, history = run_steps(step, pick(batch, GRPO_KEYS))
    assert_matches_reference(params, history, grpo_reference)
    # Adam moments are sharded like their params.
    mu = optax.tree_utils.tree_get(opt_state, "mu")
    assert mu["lm_head"].sharding == step.param_shardings["lm_head"]
    if MESHES[mesh_name][1] > 1:
        assert not mu["lm_head"].sharding.is_fully_replicated
    # The step's restore targets describe exactly the state it produces.
    target = step.abstract_opt_state()
    assert jax.tree.structure(target) == jax.tree.structure(opt_state)
    for want, got in zip(jax.tree.leaves(target), jax.tree.leaves(opt_state)):
        assert (want.shape, want.dtype, want.sharding) == (got.shape, got.dtype, got.sharding)
    for want, got in zip(jax.tree.leaves(step.abstract_params()), jax.tree.leaves(step.place_params(fresh_params()))):
        assert (want.shape, want.dtype, want.sharding) == (got.shape, got.dtype, got.sharding)


# ---------------------------------------------------------------- RWR
SGD = optax.sgd(0.5)  # linear in the gradient, so a scaled update is exactly a scaled delta


def initial_kl(batch):
    """Token-mean k3 KL between the initial params and the batch's ref_logprobs (numpy float64)."""
    x = np.float64(batch["ref_logprobs"]) - np.float64(batch["initial_logprobs"])
    return float(((np.exp(x) - x - 1) * batch["loss_mask"]).sum() / batch["loss_mask"].sum())


@pytest.fixture(scope="module")
def rwr_skip_step(batch):
    """Single device, KL threshold in "skip" mode at twice the batch's KL: does not fire on `batch`."""
    config = rl.RWRConfig(reward_lambda=2.0, kl_coef=0.1, kl_threshold=2 * initial_kl(batch),
                          kl_threshold_mode="skip")
    step = rl.make_rwr_step(CFG, SGD, config, donate=False)
    params, _, (metrics,) = run_steps(step, pick(batch, RWR_KEYS), num_steps=1)
    return step, params, metrics


def test_rwr_sharded_micro_batched_scaled_update(rwr_skip_step, batch):
    """data2 x fsdp2 x tensor2, 2 micro-batches, KL threshold in "scale" mode that fires, against
    the single-device full-batch step whose threshold does not fire."""
    _, ref_params, ref_metrics = rwr_skip_step
    assert ref_metrics["kl_threshold_fired"] == 0.0 and ref_metrics["update_scale"] == 1.0
    np.testing.assert_allclose(ref_metrics["kl"], initial_kl(batch), rtol=1e-5)
    np.testing.assert_allclose(ref_metrics["weight_mean"], 1.0, rtol=1e-6)  # "mean" normalisation
    threshold = 0.5 * initial_kl(batch)
    config = rl.RWRConfig(reward_lambda=2.0, kl_coef=0.1, kl_threshold=threshold, kl_threshold_mode="scale")
    step = rl.make_rwr_step(CFG, SGD, config, mesh=make_mesh("data2_fsdp2_tensor2"), micro_batches=2)
    params, _, (metrics,) = run_steps(step, pick(batch, RWR_KEYS), num_steps=1)
    assert metrics["kl_threshold_fired"] == 1.0
    np.testing.assert_allclose(metrics["update_scale"], threshold / ref_metrics["kl"], rtol=1e-5)
    for key in ("loss", "weighted_nll", "nll", "kl", "grad_norm", "tokens", "weight_mean", "weight_ess",
                "weight_min", "weight_max"):
        np.testing.assert_allclose(metrics[key], ref_metrics[key], rtol=1e-5, err_msg=key)
    start = host(fresh_params())
    scaled_delta = jax.tree.map(lambda r, s: metrics["update_scale"] * (r - s), ref_params, start)
    assert_trees_close(jax.tree.map(np.subtract, params, start), scaled_delta, 1e-6)
    assert max(np.abs(d).max() for d in jax.tree.leaves(scaled_delta)) > 1e-4


def test_rwr_kl_threshold_skip_leaves_state_unchanged(rwr_skip_step, batch):
    step, _, _ = rwr_skip_step
    drifted = pick(batch, RWR_KEYS)
    drifted["ref_logprobs"] = batch["initial_logprobs"] - 2.0  # KL far above the threshold
    params = fresh_params()
    opt_state = step.init_opt_state(params)
    new_params, new_opt_state, metrics = step(params, opt_state, drifted)
    assert float(metrics["kl"]) > step_threshold(batch)
    assert float(metrics["kl_threshold_fired"]) == 1.0 and float(metrics["update_scale"]) == 0.0
    assert float(metrics["grad_norm"]) > 0
    assert_trees_close(host(new_params), host(params), 0.0)
    assert_trees_close(host(new_opt_state), host(opt_state), 0.0)


def step_threshold(batch):
    return 2 * initial_kl(batch)


# ---------------------------------------------------------------- reference logprobs, validation
def test_logprobs_fn_sharded_and_micro_batched(batch):
    params = fresh_params()
    rows = pick(batch, ("tokens", "attention_mask"))
    want = np.asarray(rl.make_logprobs_fn(CFG)(params, rows))
    mesh = make_mesh("fsdp4_tensor2")
    fn = rl.make_logprobs_fn(CFG, mesh, micro_batches=2, chunk_size=5)
    got = fn(shard_params(params, param_shardings(CFG, mesh)), parallel.shard_batch(rows, mesh))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)
    full, _ = rl.token_logprobs(CFG, params, batch["tokens"], batch["attention_mask"])
    np.testing.assert_allclose(want, np.asarray(full), atol=1e-6)


def test_step_rejects_bad_batches(batch):
    step = rl.make_grpo_step(CFG, rl.make_optimizer(ADAMW), GRPO_CONFIG, micro_batches=3, donate=False)
    params = fresh_params()
    opt_state = step.init_opt_state(params)
    with pytest.raises(KeyError, match="ref_logprobs"):
        step(params, opt_state, pick(batch, GRPO_KEYS[:-2] + ("advantages",)))
    with pytest.raises(ValueError, match="micro_batches"):
        step(params, opt_state, pick(batch, GRPO_KEYS))
    bad = pick(batch, GRPO_KEYS)
    bad["advantages"] = bad["advantages"][:8]
    with pytest.raises(ValueError, match="disagree"):
        step(params, opt_state, bad)
