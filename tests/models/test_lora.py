"""LoRA adapters on the one model path (models/lora.py, models/primitives.py): B = 0 leaves the
base model (to float32 rounding: another XLA program), an adapted tree equals its merged weights,
the cached decode path applies the adapters as the training forward does, and gradients reach the
adapters only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.decode_reference import _forced_logits
from tests.support.random_params import with_random_b
from genenv_jax.models import forward, init_params, preset
from genenv_jax.models.decode import unstack_layers
from genenv_jax.models.lora import (TARGETS, LoRAConfig, adapter_logical_axes, adapter_shapes, count_params,
                                    init_adapters, merge, split_adapters, with_adapters)

LORA = LoRAConfig(rank=4, alpha=8.0)


@pytest.fixture(scope="module")
def model():
    cfg = preset("micro", lora_scale=LORA.scale)
    return cfg, init_params(cfg, jax.random.key(0))


def _tokens(cfg, batch=2, length=10, seed=0):
    return jax.random.randint(jax.random.key(seed), (batch, length), 3, cfg.vocab_size)


def test_adapter_tree_shapes_axes_and_count(model):
    cfg, _ = model
    shapes, axes = adapter_shapes(cfg, LORA), adapter_logical_axes(cfg, LORA)
    assert jax.tree.structure(shapes) == jax.tree.structure(axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    attn = shapes["layers"]["attn"]
    assert attn["q_lora_a"].shape == (cfg.num_layers, cfg.hidden_size, 4)
    assert attn["q_lora_b"].shape == (cfg.num_layers, 4, cfg.num_heads, cfg.head_dim)
    assert attn["o_lora_a"].shape == (cfg.num_layers, cfg.num_heads, cfg.head_dim, 4)
    assert shapes["layers"]["mlp"]["down_lora_a"].shape == (cfg.num_layers, cfg.intermediate_size, 4)
    assert all(len(a) == len(s.shape) for a, s in zip(jax.tree.leaves(
        axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec)), jax.tree.leaves(shapes)))
    assert count_params(cfg, LORA) == sum(int(np.prod(s.shape)) for s in jax.tree.leaves(shapes))
    assert count_params(cfg, LoRAConfig()) == 0


@pytest.mark.parametrize("bad", [dict(rank=-1), dict(rank=4, targets=("q", "wq")), dict(rank=4, targets=()),
                                 dict(rank=4, alpha=0.0), dict(rank=4, dropout=1.0),
                                 dict(rank=4, dropout=-0.1)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        LoRAConfig(**bad)


def test_b_zero_gives_the_base_logits(model):
    cfg, params = model
    adapters = init_adapters(cfg, LORA, jax.random.key(1))
    assert all(not np.any(np.asarray(b)) for n, b in jax.tree_util.tree_flatten_with_path(adapters)[0]
               if n[-1].key.endswith("_lora_b"))
    tokens = _tokens(cfg)
    # Every adapter term is an exact zero, but the adapted tree compiles to another XLA program than
    # the base's, which may order the base matmuls' sums differently on another CPU: equal to float32
    # rounding (1e-6 is ~30 ulps of these logits, all below 1), not bit for bit.
    np.testing.assert_allclose(np.asarray(forward(cfg, with_adapters(params, adapters), tokens)),
                               np.asarray(forward(cfg, params, tokens)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("targets", [TARGETS, ("q", "v"), ("o", "down")])
def test_adapted_logits_equal_the_merged_weights(model, targets):
    cfg, params = model
    lora = LoRAConfig(rank=4, alpha=8.0, targets=targets)
    adapters = with_random_b(init_adapters(cfg, lora, jax.random.key(2)))
    tokens = _tokens(cfg)
    adapted = np.asarray(forward(cfg, with_adapters(params, adapters), tokens))
    merged = np.asarray(forward(cfg, merge(with_adapters(params, adapters), adapters, lora.scale), tokens))
    base = np.asarray(forward(cfg, params, tokens))
    assert np.abs(adapted - base).max() > 1e-3  # the adapters do something
    np.testing.assert_allclose(adapted, merged, atol=1e-5, rtol=0)


def test_split_undoes_with_adapters(model):
    cfg, params = model
    adapters = init_adapters(cfg, LORA, jax.random.key(3))
    base, found = split_adapters(with_adapters(params, adapters))
    assert jax.tree.structure(base) == jax.tree.structure(params)
    assert jax.tree.structure(found) == jax.tree.structure(adapters)


def test_cached_decode_applies_the_adapters_like_the_forward(model):
    cfg, params = model
    adapters = with_random_b(init_adapters(cfg, LORA, jax.random.key(4)))
    tree = with_adapters(params, adapters)
    prompt_len, new = 6, 4
    tokens = _tokens(cfg, length=prompt_len + new, seed=5)
    prompt = tokens[:, :prompt_len]
    mask = jnp.ones(prompt.shape, bool)
    lengths = jnp.full((prompt.shape[0],), prompt_len, jnp.int32)
    cached = _forced_logits(cfg, unstack_layers(tree), prompt, mask, lengths, tokens[:, prompt_len:],
                            prompt_len + new)  # [B, new, V]
    full = forward(cfg, tree, tokens)[:, prompt_len - 1:prompt_len + new - 1]
    np.testing.assert_allclose(np.asarray(cached), np.asarray(full), atol=1e-4, rtol=0)


def test_gradients_reach_the_adapters_only(model):
    cfg, params = model
    adapters = with_random_b(init_adapters(cfg, LORA, jax.random.key(6)))
    tokens = _tokens(cfg)

    def loss(trainable):
        logits = forward(cfg, with_adapters(params, trainable), tokens[:, :-1])
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1).mean()

    grads = jax.grad(loss)(adapters)
    assert jax.tree.structure(grads) == jax.tree.structure(adapters)
    assert all(np.abs(np.asarray(g)).max() > 0 for g in jax.tree.leaves(grads))
    # with B = 0 the gradient of every A is zero and of every B is not (LoRA's start)
    fresh = init_adapters(cfg, LORA, jax.random.key(7))
    g0 = jax.grad(loss)(fresh)
    for path, g in jax.tree_util.tree_flatten_with_path(g0)[0]:
        name = path[-1].key
        assert (np.abs(np.asarray(g)).max() > 0) == name.endswith("_lora_b"), name


def test_adapted_mlp_matches_a_numpy_rederivation(model):
    """SwiGLU with every MLP projection adapted, written out in numpy: down(silu(x Wg') * x Wu') with
    W' = W + scale * A @ B, against `primitives.mlp` on the tree that carries the adapters."""
    from genenv_jax.models import primitives

    cfg, params = model
    adapters = with_random_b(init_adapters(cfg, LORA, jax.random.key(8)))
    block = with_adapters(params, adapters)["layers"]["mlp"]
    layer0 = {k: np.asarray(v[0], np.float64) for k, v in block.items()}
    x = np.asarray(jax.random.normal(jax.random.key(9), (2, 5, cfg.hidden_size)), np.float32)

    def w(name):
        return layer0[f"{name}_kernel"] + LORA.scale * layer0[f"{name}_lora_a"] @ layer0[f"{name}_lora_b"]

    gate, up = x @ w("gate"), x @ w("up")
    want = (gate / (1 + np.exp(-gate)) * up) @ w("down")
    got = primitives.mlp(cfg, {k: v[0] for k, v in block.items()}, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=1e-5)


def test_the_sampler_places_merged_adapters(model):
    """The LoRA partition places the base on a sampler with the adapters folded in layer by layer
    (`Sampler.prepare_params(base, layer_update=...)`): the cached
    decode path's logits equal the training forward of the adapted tree, and greedy tokens equal
    those of the weights merged by `lora.merge`."""
    from tests.support.decode_reference import teacher_forced_logits
    from genenv_jax.sampling import Sampler

    cfg, params = model
    adapters = with_random_b(init_adapters(cfg, LORA, jax.random.key(10)))
    sampler = Sampler(cfg, pad_id=0)
    placed = LORA.partition(cfg).place(sampler, adapters, params)
    tokens = np.asarray(_tokens(cfg, batch=2, length=9, seed=11))
    prompts, continuations = [list(tokens[0, :5]), list(tokens[1, :3])], [list(tokens[0, 5:]), list(tokens[1, 3:])]
    got = teacher_forced_logits(sampler, placed, prompts, continuations)
    full = np.asarray(forward(cfg, with_adapters(params, adapters), jnp.asarray(tokens)))
    np.testing.assert_allclose(got[0], full[0, 4:8], atol=1e-4, rtol=0)
    np.testing.assert_allclose(got[1], full[1, 2:8], atol=1e-4, rtol=0)
    greedy = dict(max_new_tokens=6, temperature=0.0, seed=0, stop_tokens=())
    a = sampler.generate(placed, prompts, **greedy).token_lists()
    b = sampler.generate(merge(with_adapters(params, adapters), adapters, LORA.scale), prompts, **greedy).token_lists()
    assert a == b


def test_low_rank_backward_equals_autodiff():
    """`lora.low_rank_product` writes its backward out (CPU layouts): the same gradients as
    autodiff of (x @ a) @ b, for x, a and b."""
    from genenv_jax.models.lora import low_rank_product

    rng = np.random.RandomState(3)
    x, a, b, cot = (jnp.asarray(rng.randn(*shape), jnp.float32) for shape in ((37, 11), (11, 3), (3, 13), (37, 13)))

    def loss(f):
        return lambda x, a, b: jnp.sum(f(x, a, b) * cot)

    ours = jax.grad(loss(low_rank_product), argnums=(0, 1, 2))(x, a, b)
    plain = jax.grad(loss(lambda x, a, b: (x @ a) @ b), argnums=(0, 1, 2))(x, a, b)
    np.testing.assert_array_equal(low_rank_product(x, a, b), (x @ a) @ b)
    for got, want in zip(ours, plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

