"""GenEnv on BFCL: this file is the documented `--config=configs/bfcl.py[:7b|:tiny]` path; the
config itself lives in the package (`genenv_jax/configs/bfcl.py`, also `--config=bfcl:tiny`)."""

from genenv_jax.configs.bfcl import get_config  # noqa: F401
