"""GenEnv on ALFWorld: this file is the documented `--config=configs/alfworld.py[:7b|:tiny]` path; the
config itself lives in the package (`genenv_jax/configs/alfworld.py`, also `--config=alfworld:tiny`)."""

from genenv_jax.configs.alfworld import get_config  # noqa: F401
