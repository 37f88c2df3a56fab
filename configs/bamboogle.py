"""GenEnv on Bamboogle: this file is the documented `--config=configs/bamboogle.py[:7b|:tiny]` path; the
config itself lives in the package (`genenv_jax/configs/bamboogle.py`, also `--config=bamboogle:tiny`)."""

from genenv_jax.configs.bamboogle import get_config

__all__ = ["get_config"]
