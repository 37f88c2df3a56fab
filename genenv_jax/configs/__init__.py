"""Run configs (ml_collections ConfigDicts): `base` plus one module per benchmark, presets by ':name'.

`--config=bfcl:tiny` names a module here; `--config=path/to/file.py:preset` any config file.
"""

import os

CONFIG_DIR = os.path.dirname(os.path.abspath(__file__))


def config_path(name: str) -> str | None:
    """The file of a config named like `bfcl` (this package), or None when there is no such config."""
    if not name.isidentifier() or name in ("base", "__init__"):
        return None
    path = os.path.join(CONFIG_DIR, f"{name}.py")
    return path if os.path.isfile(path) else None

# the schema (run_config, settings, experience_settings) and the packaged configs, each a module named by --config=NAME
__all__ = ["CONFIG_DIR", "config_path", "alfworld", "api_bank", "bamboogle", "base", "bfcl", "bfcl_multiturn", "calc",
           "experience_settings", "run_config", "settings", "study", "study_bfcl", "study_calc_real", "travelplanner"]
