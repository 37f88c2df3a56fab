"""BFCL v4 single-turn categories as a GenEnv domain (data and official checker from `bfcl-eval`).

Modules: data (the shipped entries, categories and the loop's split), checker (the official AST
checker on parsed calls), schema (validation of generated tasks), grounding (their answers' values
stated in the question), generation (the simulator's BFCL JSON format), domain (the Domain),
__main__ (seed counts and checker self-checks).
"""

from genenv_jax.domains.bfcl.domain import DOMAIN_NAME, BFCLDomain

__all__ = ["BFCLDomain", "DOMAIN_NAME"]
