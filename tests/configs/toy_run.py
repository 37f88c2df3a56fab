"""The loop tests' toy run as a config file for `python -m genenv_jax.main --config=tests/configs/toy_run.py`
(subprocess and multi-process tests; needs tests/ on PYTHONPATH). Registers the toy domain."""

from genenv_jax import domains

domains.DOMAINS.setdefault("toy", "toy_domain:ToyDomain")

from loop_configs import toy_config_dict  # noqa: E402  (tests/ on PYTHONPATH)


def get_config():
    return toy_config_dict()
