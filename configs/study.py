"""The miniature reproduction study: this file is the documented `--config=configs/study.py[:large]`
path of `python -m genenv_jax.study`; the config lives in the package (`genenv_jax/configs/study.py`)."""

from genenv_jax.configs.study import get_config  # noqa: F401
