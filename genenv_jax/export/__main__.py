"""`python -m genenv_jax.export`: see `genenv_jax.export.cli`."""

import sys

from genenv_jax.export.cli import main

if __name__ == "__main__":
    sys.exit(main())
