"""Benchmarks as GenEnv domains: the contract and records (base.py) and one module per benchmark.

Domain modules are imported on demand (`get_domain("bfcl")`), so importing the records does not
load a benchmark's data or the tokenizer.
"""

from __future__ import annotations

import importlib
from typing import Any

from genenv_jax.domains.base import (
    DIFFICULTY_DIRECTIONS, SCHEMA_VERSION, ChatPrompt, Domain, Environment, Rejection, Rollout, ScoreResult,
    SingleTurnEnvironment, StepOutcome, Task, difficulty_direction)

# name -> "module:class"
DOMAINS = {"alfworld": "genenv_jax.domains.alfworld:ALFWorldDomain",
           "api_bank": "genenv_jax.domains.api_bank:APIBankDomain",
           "bamboogle": "genenv_jax.domains.bamboogle:BamboogleDomain",
           "bfcl": "genenv_jax.domains.bfcl:BFCLDomain",
           "bfcl_multiturn": "genenv_jax.domains.bfcl_multiturn:BFCLMultiTurnDomain",
           "calc": "genenv_jax.domains.calc:CalcDomain",
           "travelplanner": "genenv_jax.domains.travelplanner:TravelPlannerDomain"}


def get_domain(name: str, **kwargs: Any) -> Domain:
    """Builds a registered domain by name (kwargs go to its constructor)."""
    if name not in DOMAINS:
        raise KeyError(f"unknown domain {name!r}; available: {sorted(DOMAINS)}")
    module_name, cls_name = DOMAINS[name].split(":")
    return getattr(importlib.import_module(module_name), cls_name)(**kwargs)


__all__ = ["DIFFICULTY_DIRECTIONS", "DOMAINS", "SCHEMA_VERSION", "ChatPrompt", "Domain", "Environment",
           "Rejection", "Rollout", "ScoreResult", "SingleTurnEnvironment", "StepOutcome", "Task",
           "difficulty_direction", "get_domain"]
