"""`python -m genenv_jax.evaluation ...`: the evaluation command (`cli.py`)."""

import sys

from genenv_jax.evaluation.cli import main

sys.exit(main())
