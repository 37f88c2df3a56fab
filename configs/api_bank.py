"""GenEnv on API-Bank: this file is the documented `--config=configs/api_bank.py[:7b|:tiny]` path; the
config itself lives in the package (`genenv_jax/configs/api_bank.py`, also `--config=api_bank:tiny`)."""

from genenv_jax.configs.api_bank import get_config

__all__ = ["get_config"]
