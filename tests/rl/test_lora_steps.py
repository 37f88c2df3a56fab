"""LoRA training steps (rl.step with LoRA's partition): the adapters are the trained tree and the
base a frozen argument. The base is untouched, only adapters move, the optimizer state is the adapters',
a sharded step equals the single-device one, an SFT step learns, and the compiled step holds no
base-sized gradient (its memory analysis)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import parallel, rl
from genenv_jax.models import ModelConfig, init_params, param_shapes, param_shardings, preset, shard_params
from genenv_jax.models.lora import LoRAConfig, adapter_shapes, init_adapters, with_adapters
from genenv_jax.models.partition import Partition

LORA = LoRAConfig(rank=4, alpha=8.0)
CFG = preset("micro", lora_scale=LORA.scale)
BATCH, LENGTH = 8, 12


def _batch(cfg=CFG, batch=BATCH, length=LENGTH, seed=0):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(3, cfg.vocab_size, (batch, length)).astype(np.int32)
    loss_mask = np.zeros((batch, length), np.float32)
    loss_mask[:, length // 2:] = 1.0
    return {"tokens": tokens, "attention_mask": np.ones((batch, length), np.int32), "loss_mask": loss_mask,
            "old_logprobs": np.full((batch, length), -5.0, np.float32),
            "advantages": rng.normal(size=batch).astype(np.float32), "rewards": np.ones(batch, np.float32)}


def _grpo(cfg=CFG, mesh=None):
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=1e-2, eps=1e-4))
    return rl.make_grpo_step(cfg, optimizer, rl.GRPOConfig(kl_coef=0.0), mesh=mesh, partition=LORA.partition(cfg))


def _keys(batch):
    return {k: batch[k] for k in ("tokens", "attention_mask", "loss_mask", "old_logprobs", "advantages")}


def test_a_lora_step_moves_the_adapters_and_leaves_the_base():
    base = init_params(CFG, jax.random.key(0))
    base_before = jax.tree.map(np.asarray, base)
    adapters = init_adapters(CFG, LORA, jax.random.key(1))
    step = _grpo()
    assert step.partition.has_frozen
    opt_state = step.init_opt_state(adapters)
    assert jax.tree.structure(step.abstract_params()) == jax.tree.structure(adapter_shapes(CFG, LORA))
    new, opt_state, metrics = step(adapters, opt_state, _keys(_batch()), base)
    assert jax.tree.structure(new) == jax.tree.structure(adapter_shapes(CFG, LORA))
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(jax.tree.leaves(base_before), jax.tree.leaves(base)))
    moved = [float(np.abs(np.asarray(leaf)).max()) for path, leaf in jax.tree_util.tree_flatten_with_path(new)[0]
             if path[-1].key.endswith("_lora_b")]
    assert all(m > 0 for m in moved)  # B left zero after the first step
    # Adam's moments exist for the adapters only: no leaf of the base's shape in the state
    base_shapes = {s.shape for s in jax.tree.leaves(param_shapes(CFG))}
    state_shapes = {x.shape for x in jax.tree.leaves(opt_state) if hasattr(x, "shape") and x.ndim}
    assert not (state_shapes & base_shapes)


def test_a_lora_step_needs_its_base_and_a_full_step_refuses_one():
    step = _grpo()
    adapters = init_adapters(CFG, LORA, jax.random.key(1))
    with pytest.raises(ValueError, match="frozen base"):
        step(adapters, step.init_opt_state(adapters), _keys(_batch()))
    full = rl.make_grpo_step(CFG, rl.make_optimizer(rl.OptimizerConfig()), rl.GRPOConfig(kl_coef=0.0))
    params = init_params(CFG, jax.random.key(0))
    with pytest.raises(ValueError, match="no frozen params"):
        full(params, full.init_opt_state(params), _keys(_batch()), params)


def test_sharded_lora_step_equals_the_single_device_one():
    mesh = parallel.make_mesh(parallel.MeshConfig(data=1, fsdp=4, tensor=2))
    base = jax.tree.map(np.asarray, init_params(CFG, jax.random.key(0)))
    adapters = jax.tree.map(np.asarray, init_adapters(CFG, LORA, jax.random.key(1)))
    batch = _keys(_batch())
    single = _grpo()
    out_single, _, m_single = single(jax.tree.map(jnp.asarray, adapters), single.init_opt_state(
        jax.tree.map(jnp.asarray, adapters)), batch, jax.tree.map(jnp.asarray, base))
    sharded = _grpo(mesh=mesh)
    placed = shard_params(jax.tree.map(jnp.asarray, adapters), sharded.param_shardings)
    out_sharded, _, m_sharded = sharded(placed, sharded.init_opt_state(placed), sharded.place_batch(batch),
                                        shard_params(jax.tree.map(jnp.asarray, base), param_shardings(CFG, mesh)))
    np.testing.assert_allclose(float(m_sharded["loss"]), float(m_single["loss"]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(out_single), jax.tree.leaves(out_sharded)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6)


def test_lora_sft_learns_a_fixed_sequence():
    """On a base whose LM head can express a sequence (a random normal(0.02) head caps every logit
    gap near 0.6, so no adapter of the layers gets below ~4.9 nats over 256 tokens), the adapters
    alone memorise one: the loss falls to under a tenth."""
    base = init_params(CFG, jax.random.key(0))
    base = {**base, "lm_head": base["lm_head"] * 30}
    adapters = init_adapters(CFG, LORA, jax.random.key(1))
    step = rl.make_sft_step(CFG, 1e-2, chunk_size=64, partition=LORA.partition(CFG))
    opt_state = step.init_opt_state(adapters)
    batch = {k: v for k, v in _batch().items() if k in ("tokens", "attention_mask", "loss_mask")}
    batch["tokens"][:] = batch["tokens"][0]  # one sequence, eight times
    batch["rewards"] = np.zeros(BATCH, np.float32)
    losses = []
    for _ in range(40):
        adapters, opt_state, metrics = step(adapters, opt_state, batch, base)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.1 * losses[0], losses


def test_the_compiled_lora_step_holds_no_base_gradient():
    """A model whose params dwarf its activations (scanned layers, the training default): the full
    step's temporaries hold the base-sized gradient and update (measured 33.6 MB for a 16.8 MB
    base); the LoRA step's are smaller than one base-sized buffer (7.8 MB: its gradient is the
    adapters'; what remains is activations and XLA's per-layer weight layouts)."""
    cfg = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=1024, num_layers=4, num_heads=4,
                      num_kv_heads=2, head_dim=64, lora_scale=LORA.scale)
    base = param_shapes(cfg)
    base_bytes = sum(int(np.prod(s.shape)) * 4 for s in jax.tree.leaves(base))
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in _keys(_batch(cfg, batch=2, length=8)).items()}
    optimizer = rl.make_optimizer(rl.OptimizerConfig())

    def temp_bytes(step, trained):
        opt = jax.eval_shape(lambda p: optimizer.init(p), trained)
        frozen = base if step.partition.has_frozen else None
        return step.lower(trained, opt, batch, frozen).compile().memory_analysis().temp_size_in_bytes

    lora_step = rl.make_grpo_step(cfg, optimizer, rl.GRPOConfig(kl_coef=0.0), partition=LORA.partition(cfg))
    full_step = rl.make_grpo_step(cfg, optimizer, rl.GRPOConfig(kl_coef=0.0))
    lora_temp = temp_bytes(lora_step, adapter_shapes(cfg, LORA))
    full_temp = temp_bytes(full_step, base)
    assert full_temp >= 2 * base_bytes, (full_temp, base_bytes)
    assert lora_temp < base_bytes, (lora_temp, base_bytes)
    assert full_temp - lora_temp >= base_bytes, (full_temp, lora_temp, base_bytes)


def test_adapters_at_b_zero_give_the_base_logprobs_in_the_step():
    """The step's loss sees with_adapters(base, adapters): at B = 0 its logprobs are the base's."""
    base = init_params(CFG, jax.random.key(0))
    adapters = init_adapters(CFG, LORA, jax.random.key(1))
    logprobs = rl.make_logprobs_fn(CFG)
    batch = {"tokens": _batch()["tokens"], "attention_mask": _batch()["attention_mask"]}
    # The adapter terms are exact zeros, but the adapted tree is another XLA program, whose sums may
    # run in another order on another CPU: equal to float32 rounding (1e-5 is ~20 ulps of logprobs
    # near -5.5), not bit for bit.
    np.testing.assert_allclose(np.asarray(logprobs(with_adapters(base, adapters), batch)),
                               np.asarray(logprobs(base, batch)), atol=1e-5, rtol=0)


# ---------------------------------------------------------------- LoRA dropout (training steps only)
def test_dropout_drops_each_targets_input_at_its_rate_and_keeps_the_expectation():
    """The partition's dropout: a key per layer and adapted block beside the weights (an argument
    of the forward; the adapted tree carries no dropout leaf), a mask per target at the rate."""
    from genenv_jax.models.lora import dropout_input, layer_dropout

    partition = LoRAConfig(rank=4, alpha=8.0, dropout=0.25).partition(CFG)
    tokens = jnp.asarray(_batch()["tokens"])
    dropout = partition.dropout(tokens)
    assert set(dropout) == {"attn", "mlp"} and dropout["attn"]["key"].shape[0] == CFG.num_layers
    block = jax.tree.map(lambda a: a[0], dropout["attn"])  # layer 0's
    x = jnp.ones((16, 64, 32), jnp.float32)
    q, k = np.asarray(dropout_input(block, "q", x)), np.asarray(dropout_input(block, "k", x))
    assert abs((q == 0).mean() - 0.25) < 0.01 and np.allclose(q[q != 0], 1 / 0.75)
    assert (q != k).any()  # each target draws its own mask
    layer1 = jax.tree.map(lambda a: a[1], dropout["attn"])
    assert (np.asarray(dropout_input(layer1, "q", x)) != q).any()  # and each layer
    adapters = init_adapters(CFG, LORA, jax.random.key(1))
    model = partition.model(adapters, init_params(CFG, jax.random.key(0)))
    assert not any("dropout" in k for k in model["layers"]["attn"])  # the weights hold no dropout leaf
    assert set(layer_dropout(LoRAConfig(rank=4, dropout=0.1, targets=("down",)), 3, jax.random.key(0))) == {"mlp"}
    assert partition.dropout(tokens + 1)["attn"]["key"].tolist() != dropout["attn"]["key"].tolist()  # keyed by the batch
    assert LORA.partition(CFG).dropout(tokens) is None and Partition(CFG).dropout(tokens) is None


def _dropout_step(rate):
    lora = LoRAConfig(rank=LORA.rank, alpha=LORA.alpha, dropout=rate)
    optimizer = rl.make_optimizer(rl.OptimizerConfig(learning_rate=1e-2, eps=1e-4))
    return rl.make_grpo_step(CFG, optimizer, rl.GRPOConfig(kl_coef=0.0), partition=lora.partition(CFG), donate=False)


@pytest.mark.slow
def test_a_dropout_step_is_a_pure_function_of_its_batch_and_differs_from_no_dropout():
    from tests.support.random_params import with_random_b

    base = init_params(CFG, jax.random.key(0))
    adapters = with_random_b(init_adapters(CFG, LORA, jax.random.key(1)), seed=2, std=0.5)
    batch = _keys(_batch())
    results = {}
    for name, rate, seed in (("plain", 0.0, 0), ("dropped", 0.3, 0), ("again", 0.3, 0), ("other batch", 0.3, 1),
                             ("tiny rate", 1e-7, 0)):
        step = _dropout_step(rate)
        b = batch if seed == 0 else _keys(_batch(seed=seed))
        new, _, metrics = step(adapters, step.init_opt_state(adapters), b, base)
        results[name] = (float(metrics["loss"]), new)
    assert results["dropped"][0] != results["plain"][0]
    assert results["again"][0] == results["dropped"][0]  # the same batch: the same masks
    assert all(np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(results["again"][1]), jax.tree.leaves(results["dropped"][1])))
    np.testing.assert_allclose(results["tiny rate"][0], results["plain"][0], rtol=1e-5)  # scaling is 1/(1 - p)


def test_dropout_reaches_the_chunked_mlp_with_a_mask_per_chunk():
    from genenv_jax.models import hidden_states
    from genenv_jax.models.primitives import no_constraint
    from genenv_jax.models.qwen2 import MLP_CHUNK_TOKENS, _sequence_chunked_mlp
    from tests.support.random_params import with_random_b

    cfg = CFG.replace(remat_policy="full")
    base = init_params(cfg, jax.random.key(0))
    lora = LoRAConfig(rank=4, alpha=8.0, targets=("down",), dropout=0.5)
    adapters = with_random_b(init_adapters(cfg, lora, jax.random.key(1)), seed=2, std=0.5)
    tokens = jnp.asarray(np.random.RandomState(0).randint(3, cfg.vocab_size, (1, 2 * MLP_CHUNK_TOKENS)))
    partition = lora.partition(cfg)
    plain, dropout = partition.model(adapters, base), partition.dropout(tokens)
    a, b = (np.asarray(hidden_states(cfg, plain, tokens, None, None, d)) for d in (None, dropout))
    assert np.isfinite(b).all() and not np.allclose(a, b)
    # Two chunks of identical input: equal outputs without dropout, different masks with it.
    half = jax.random.normal(jax.random.key(5), (1, MLP_CHUNK_TOKENS, cfg.hidden_size))
    x = jnp.concatenate([half, half], axis=1)
    mlp = jax.tree.map(lambda leaf: leaf[0], plain["layers"]["mlp"])
    for layer_dropout, equal in ((None, True), (jax.tree.map(lambda leaf: leaf[0], dropout["mlp"]), False)):
        out = np.asarray(_sequence_chunked_mlp(cfg, mlp, x, no_constraint, layer_dropout))
        assert np.allclose(out[:, :MLP_CHUNK_TOKENS], out[:, MLP_CHUNK_TOKENS:]) == equal
