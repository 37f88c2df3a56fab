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
