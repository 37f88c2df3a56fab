"""ALFWorld (its real text engine) as a GenEnv domain; needs the optional extra `.[alfworld]`.

Modules: vocab (ALFWorld's rule tables), scenes (the 120 layouts), games (spec -> game file and
the expert's walkthrough), engine (textworld's PDDL engine, verification), specs (the simulator's
JSON specs), sampling (random valid games), dataset (official directory layout), episode (one agent
episode), domain (the Domain), pddl_facts (a game file read back as a spec).
"""

import importlib

for _engine_module in ("alfworld", "textworld", "fast_downward"):  # the optional extra, checked once here
    try:
        importlib.import_module(_engine_module)
    except ImportError as e:
        raise ImportError(f"the ALFWorld domain needs its optional engine ({e}): run `make alfworld` or "
                          "pip install -e '.[alfworld]'") from None

from genenv_jax.domains.alfworld.domain import DOMAIN_NAME, ALFWorldDomain  # noqa: E402

__all__ = ["ALFWorldDomain", "DOMAIN_NAME"]
