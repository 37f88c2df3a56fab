"""ALFWorld's side of DreamGym's synthetic episodes: the real first prompt of a game, its state
text as the experience model sees it (the engine's text without the command list), the agent's
command, and predicted states shown to the agent as the engine's text would be."""

from __future__ import annotations

from genenv_jax.domains.base import ChatPrompt, Message, Task
from genenv_jax.domains.alfworld.domain import ALFWorldDomain
from genenv_jax.domains.alfworld.episode import COMMANDS_SUFFIX, parse_action


def state_text(observation: str) -> str:
    """An observation without the list of available commands the environment may append."""
    return observation.split(COMMANDS_SUFFIX, 1)[0].strip()


class ALFWorldSynthetic:
    """A `dreamgym.environments.SyntheticAdapter` for ALFWorld. The first prompt is the engine's
    own (memoised by the domain); later observations are predicted states, shown without a command
    list (the experience model does not predict one: run DreamGym with `admissible="first_turn"`
    so real and synthetic episodes look alike)."""

    def __init__(self, domain: ALFWorldDomain):
        self.domain = domain
        self.max_steps = domain.max_steps

    def start(self, task: Task) -> tuple[ChatPrompt, str, str]:
        first = self.domain.agent_prompt(task)
        return first, state_text(first.messages[-1]["content"]), task.prompt.get("task", "")

    def action(self, agent_text: str) -> str | None:
        return parse_action(agent_text)

    def observation(self, next_state: str) -> list[Message]:
        return [{"role": "user", "content": next_state}]
