"""Benchmarks as GenEnv domains: the contract (base.py), its records (records.py), the shared reading
of simulator JSON (generation.py), DreamGym's domain-side contract (experience.py), and one
subpackage per benchmark.

Domain modules are imported on demand (`get_domain("bfcl")`), so importing the records does not
load a benchmark's data or the tokenizer.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from genenv_jax.domains.base import (DIFFICULTY_DIRECTIONS, SCHEMA_VERSION, ChatPrompt, Domain, Environment, Invalid,
                                     Rejection, ScoreResult, SingleTurnEnvironment, StepOutcome, Task)

# name -> "module:class"
DOMAINS = {"alfworld": "genenv_jax.domains.alfworld:ALFWorldDomain",
           "api_bank": "genenv_jax.domains.api_bank:APIBankDomain",
           "bamboogle": "genenv_jax.domains.bamboogle:BamboogleDomain",
           "bfcl": "genenv_jax.domains.bfcl:BFCLDomain",
           "bfcl_multiturn": "genenv_jax.domains.bfcl_multiturn:BFCLMultiTurnDomain",
           "calc": "genenv_jax.domains.calc:CalcDomain",
           "travelplanner": "genenv_jax.domains.travelplanner:TravelPlannerDomain"}


def get_domain(name: str, **kwargs: Any) -> Domain:
    """Builds a registered domain by name (kwargs go to its constructor); an unknown name is a
    ValueError (a bad value from a user's config or flag, reported in one line)."""
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; available: {sorted(DOMAINS)}")
    return build_domain(DOMAINS[name], kwargs)


def build_domain(ref: str, options: Mapping[str, Any]) -> Domain:
    """A domain from its registry reference "module:Class" and constructor options (what an
    environment worker process receives: a fresh process has only what it imports)."""
    module_name, cls_name = ref.split(":")
    return getattr(importlib.import_module(module_name), cls_name)(**options)


__all__ = ["DIFFICULTY_DIRECTIONS", "DOMAINS", "SCHEMA_VERSION", "ChatPrompt", "Domain", "Environment", "Invalid",
           "Rejection", "ScoreResult", "SingleTurnEnvironment", "StepOutcome", "Task", "build_domain", "get_domain"]
