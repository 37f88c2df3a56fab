"""`calc`: generated arithmetic tasks for the miniature study (docs/study_domain.md).

Modules: expressions (the task grammar, levels, evaluation and validation), domain (the Domain).
"""

from genenv_jax.domains.calc.domain import DOMAIN_NAME, CalcDomain

__all__ = ["CalcDomain", "DOMAIN_NAME"]
