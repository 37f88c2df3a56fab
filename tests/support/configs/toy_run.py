"""The loop tests' toy run as a config file for `python -m genenv_jax.main --config=tests/support/configs/toy_run.py`
(subprocess and multi-process tests; needs the repository root on PYTHONPATH). Registers the toy domain."""

from genenv_jax import domains

domains.DOMAINS.setdefault("toy", "tests.support.toy_domain:ToyDomain")

from tests.support.loop_configs import toy_config_dict  # noqa: E402  (the repository root on PYTHONPATH)


def get_config():
    return toy_config_dict()
