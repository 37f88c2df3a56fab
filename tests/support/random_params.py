"""Random model params drawn in numpy, shared by the RL tests."""

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.models import param_shapes


def random_params(cfg, seed):
    """Params distributed like `init_params` (normal(0.02) weights and biases, unit norm scales), drawn
    in numpy from `param_shapes`, so each test controls its values with a plain integer seed."""
    rng = np.random.RandomState(seed)

    def leaf(path, shape):
        if str(path[-1].key) == "scale":
            return jnp.ones(shape.shape, jnp.float32)
        return jnp.asarray(rng.normal(0.0, 0.02, shape.shape), jnp.float32)

    return jax.tree_util.tree_map_with_path(leaf, param_shapes(cfg))


def with_random_b(adapters, seed: int = 1, std: float = 0.05):
    """LoRA adapters with every B drawn from normal(0, std) (at init B = 0, so the deltas would be
    zero); A unchanged."""
    leaves = jax.tree_util.tree_flatten_with_path(adapters)[0]
    keys = iter(jax.random.split(jax.random.key(seed), len(leaves)))

    def draw(path, leaf):
        key = next(keys)
        return jax.random.normal(key, leaf.shape) * std if path[-1].key.endswith("_lora_b") else leaf

    return jax.tree_util.tree_map_with_path(draw, adapters)
