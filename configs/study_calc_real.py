"""The calc study with the real Qwen2.5-Coder-0.5B: this file is the documented
`--config=configs/study_calc_real.py` path; the config itself lives in the package
(`genenv_jax/configs/study_calc_real.py`, also `--config=study_calc_real`)."""

from genenv_jax.configs.study_calc_real import get_config  # noqa: F401
