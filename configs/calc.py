"""GenEnv on calc with the real Qwen2.5-Coder-0.5B: this file is the documented
`--config=configs/calc.py[:real|:tiny]` path; the config itself lives in the package
(`genenv_jax/configs/calc.py`, also `--config=calc:real`)."""

from genenv_jax.configs.calc import get_config  # noqa: F401
