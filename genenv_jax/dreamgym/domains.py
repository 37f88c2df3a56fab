"""What DreamGym needs from a domain, by domain name: the synthetic-episode adapter, the offline
real transitions of its training seeds, an agent episode's real transitions, and the description
of the environment the experience model stands in for."""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Sequence

from genenv_jax.core.config_checks import ConfigError
from genenv_jax.domains.base import Domain, Message, Task
from genenv_jax.dreamgym.environments import SyntheticAdapter
from genenv_jax.dreamgym.experience_model import GAME
from genenv_jax.dreamgym.transitions import Transition


@dataclasses.dataclass(frozen=True)
class OfflineSettings:
    """Offline data per training seed: the expert episode and `random_per_task` random (ALFWorld:
    random commands, inadmissible with probability `invalid_prob`) or perturbed (BFCL multi-turn:
    each turn's calls perturbed with probability `invalid_prob`) episodes of at most `random_steps`
    agent replies. `rng_key` seeds the draws (the loop: `run_rng_key(config.seed)`)."""

    random_per_task: int
    random_steps: int
    invalid_prob: float
    rng_key: str

    def rng(self) -> random.Random:
        return random.Random(self.rng_key)


def run_rng_key(seed: int) -> str:
    """The loop's offline-collection key for a run seed."""
    return f"dreamgym-offline/{seed}"


@dataclasses.dataclass(frozen=True)
class DomainSupport:
    adapter: Callable[[Domain], SyntheticAdapter]
    offline: Callable[[Domain, Sequence[Task], OfflineSettings], list[Transition]]
    episode: Callable[[Domain, Task, Sequence[Message]], list[Transition]]
    environment: str   # the experience model's system prompt: "You are the environment of <environment>."


def _alfworld() -> DomainSupport:
    from genenv_jax.domains.alfworld import transitions
    from genenv_jax.domains.alfworld.synthetic import ALFWorldSynthetic

    def offline(domain, tasks, s: OfflineSettings):
        return transitions.collect(domain, tasks, random_per_task=s.random_per_task, rng=s.rng(),
                                   random_steps=s.random_steps, invalid_prob=s.invalid_prob)

    def episode(domain, task, transcript):
        return transitions.episode_transitions(domain, task, transcript, source="agent")

    return DomainSupport(adapter=ALFWorldSynthetic, offline=offline, episode=episode, environment=GAME)


def _bfcl_multiturn() -> DomainSupport:
    from genenv_jax.domains.bfcl_multiturn import transitions
    from genenv_jax.domains.bfcl_multiturn.experience_text import ENVIRONMENT
    from genenv_jax.domains.bfcl_multiturn.synthetic import BFCLMultiTurnSynthetic

    def offline(domain, tasks, s: OfflineSettings):
        return transitions.collect(domain, tasks, random_per_task=s.random_per_task, rng=s.rng(),
                                   max_replies=s.random_steps, perturb_prob=s.invalid_prob)

    def episode(domain, task, transcript):
        return transitions.episode_transitions(task, transcript, source="agent")

    return DomainSupport(adapter=BFCLMultiTurnSynthetic, offline=offline, episode=episode, environment=ENVIRONMENT)


SUPPORTED = {"alfworld": _alfworld, "bfcl_multiturn": _bfcl_multiturn}


def domain_support(domain: Domain) -> DomainSupport:
    """The domain's DreamGym pieces; a ConfigError naming the supported domains otherwise."""
    if domain.name not in SUPPORTED:
        raise ConfigError(f"config.mode='dreamgym' needs a domain with DreamGym support "
                          f"({', '.join(sorted(SUPPORTED))}); config.domain.name is {domain.name!r}")
    if domain.name == "alfworld" and getattr(domain, "admissible", "first_turn") != "first_turn":
        raise ConfigError(f"config.domain.options.admissible={domain.admissible!r}: mode='dreamgym' on ALFWorld "
                          "needs 'first_turn' (the experience model predicts the engine's text without the "
                          "command list, so real episodes must look like synthetic ones)")
    return SUPPORTED[domain.name]()
