"""A domain's DreamGym support as the loop asks for it: `Domain.dreamgym()` (the contract is in
`domains/experience.py`), with a one-line ConfigError for a domain without it, and the loop's key
for the offline collection's draws."""

from __future__ import annotations

from genenv_jax.core.config_checks import ConfigError
from genenv_jax.domains.base import Domain
from genenv_jax.domains.experience import DomainSupport, OfflineSettings

__all__ = ["DomainSupport", "OfflineSettings", "domain_support", "run_rng_key", "supported_domains"]


def run_rng_key(seed: int) -> str:
    """The loop's offline-collection key for a run seed."""
    return f"dreamgym-offline/{seed}"


def supported_domains() -> list[str]:
    """Registered domains that implement `Domain.dreamgym` (imports each domain's module)."""
    import importlib

    from genenv_jax.domains import DOMAINS

    names = []
    for name, target in sorted(DOMAINS.items()):
        module_name, cls_name = target.split(":")
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except ImportError:
            continue
        if cls.dreamgym is not Domain.dreamgym:
            names.append(name)
    return names


def domain_support(domain: Domain) -> DomainSupport:
    """The domain's DreamGym pieces (`Domain.dreamgym()`); a ConfigError naming the supported
    domains when it has none."""
    support = domain.dreamgym()
    if support is None:
        raise ConfigError(f"config.mode='dreamgym' needs a domain with DreamGym support "
                          f"({', '.join(supported_domains())}); config.domain.name is {domain.name!r}")
    return support
