"""GenEnv on TravelPlanner: this file is the documented `--config=configs/travelplanner.py[:7b|:7b_two_stage|:tiny]`
path; the config itself lives in the package (`genenv_jax/configs/travelplanner.py`, also `--config=travelplanner:tiny`)."""

from genenv_jax.configs.travelplanner import get_config

__all__ = ["get_config"]
