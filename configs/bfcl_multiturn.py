"""GenEnv on BFCL's multi-turn categories: this file is the documented
`--config=configs/bfcl_multiturn.py[:7b|:tiny]` path; the config itself lives in the package
(`genenv_jax/configs/bfcl_multiturn.py`, also `--config=bfcl_multiturn:tiny`)."""

from genenv_jax.configs.bfcl_multiturn import get_config  # noqa: F401
