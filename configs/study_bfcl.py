"""GenEnv on BFCL with the real Qwen2.5-Coder-0.5B-Instruct: this file is the documented
`--config=configs/study_bfcl.py` path; the config lives in the package (`genenv_jax/configs/study_bfcl.py`)."""

from genenv_jax.configs.study_bfcl import get_config  # noqa: F401
