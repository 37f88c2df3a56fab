"""`python -m genenv_jax.study --config=configs/study.py [--scale=large] --workdir=DIR`."""

from genenv_jax.study.runner import run_main

if __name__ == "__main__":
    run_main()
