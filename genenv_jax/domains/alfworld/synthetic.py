"""ALFWorld's side of DreamGym's synthetic episodes: the real first prompt of a game, its state
text as the experience model sees it (the engine's text without the command list), the agent's
command, and predicted states shown to the agent as the engine's text would be."""

from __future__ import annotations

import dataclasses

from genenv_jax.domains.base import ChatPrompt, Message, Task
from genenv_jax.domains.experience import DomainSupport, Move, OfflineSettings
from genenv_jax.domains.alfworld import transitions
from genenv_jax.domains.alfworld.episode import COMMANDS_SUFFIX, parse_action
from genenv_jax.domains.alfworld.transitions import ALFWorldGames


def state_text(observation: str) -> str:
    """An observation without the list of available commands the environment may append."""
    return observation.split(COMMANDS_SUFFIX, 1)[0].strip()


@dataclasses.dataclass
class ALFWorldSyntheticEpisode:
    """A `domains.experience.SyntheticEpisode`: every parsed command is predicted; a predicted
    reward of 1 (the game won) ends the episode."""

    first: ChatPrompt
    state: str
    task_text: str
    max_steps: int

    def move(self, agent_text: str) -> Move:
        return Move(action=parse_action(agent_text))

    def observation(self, next_state: str) -> list[Message]:
        return [{"role": "user", "content": next_state}]


class ALFWorldSynthetic:
    """A `domains.experience.SyntheticAdapter` for ALFWorld. The first prompt is the engine's
    own (memoised by the domain); later observations are predicted states, shown without a command
    list (the experience model does not predict one: run DreamGym with `admissible="first_turn"`
    so real and synthetic episodes look alike)."""

    def __init__(self, domain: ALFWorldGames):
        self.domain = domain

    def start(self, task: Task) -> ALFWorldSyntheticEpisode:
        first = self.domain.agent_prompt(task)
        return ALFWorldSyntheticEpisode(first, state_text(first.messages[-1]["content"]), task.prompt.get("task", ""),
                                        self.domain.max_steps)


ENVIRONMENT = "a text game that an agent plays"  # "You are the environment of <ENVIRONMENT>."


def dreamgym_support() -> DomainSupport:
    """ALFWorld's DreamGym pieces (`ALFWorldDomain.dreamgym`)."""
    def offline(domain, tasks, s: OfflineSettings):
        return transitions.collect(domain, tasks, random_per_task=s.random_per_task, rng=s.rng(),
                                   random_steps=s.random_steps, invalid_prob=s.invalid_prob)

    def episode(domain, task, transcript):
        return transitions.episode_transitions(domain, task, transcript, source="agent")

    return DomainSupport(adapter=ALFWorldSynthetic, offline=offline, episode=episode, environment=ENVIRONMENT)
