"""How a BFCL multi-turn episode reads to DreamGym's experience model: the task, states and actions
as plain text, the same for real transitions (played on the backends) and synthetic episodes.

- task: the user's requests by turn, the involved backends and their initial state (clipped): what
  an environment needs to answer calls, which the agent is not shown.
- state: a user turn ("User: ..."), or the results of the agent's last calls, one line per call in
  call order (a result's own line breaks become spaces so the lines stay countable).
- action: the agent's calls, one line each as `name({"argument": value})`, or END_TURN for a reply
  without a call (which ends the user turn; after the last turn it ends the episode).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from genenv_jax.domains.bfcl_multiturn.scenario import Scenario

# What the experience model is told it stands in for (its system prompt).
ENVIRONMENT = ("Python API backends (a file system, messaging, ticketing, trading, travel booking, a car, a math "
               "library) that an agent calls functions on over several user turns; a state is the user's request "
               "or the results of the agent's calls, one line per call in call order, and the reward is 1 only "
               "when the agent ends the last turn with every request done as asked")
END_TURN = "(a reply without a function call: the agent ends its turn)"
EPISODE_OVER = "The episode is over."
MAX_REQUEST_CHARS = 240
MAX_CONFIG_CHARS = 600    # over all involved backends, shared equally


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 4] + " ..."


def _request(scenario: Scenario, turn: int) -> str:
    """The user's words at `turn`, whitespace-normalised."""
    return " ".join(" ".join(str(m.get("content", "")) for m in scenario.question[turn]).split())


def task_text(scenario: Scenario) -> str:
    """The task as the experience model reads it (see the module docstring)."""
    requests = []
    for turn in range(scenario.n_turns):
        line = (f"(new functions become available: {', '.join(scenario.revealed[turn])})"
                if turn in scenario.revealed else _request(scenario, turn))
        requests.append(f"{turn + 1}. {_clip(line, MAX_REQUEST_CHARS)}")
    share = MAX_CONFIG_CHARS // max(1, len(scenario.involved_classes))
    states = [f"{c}: {_clip(json.dumps(scenario.initial_config.get(c, {}), ensure_ascii=False), share)}"
              for c in scenario.involved_classes]
    return "\n".join(["User requests, one per turn:", *requests, "Initial backend states:", *states])


def user_state(scenario: Scenario, turn: int) -> str:
    """The state at the start of `turn`: the user's message (the names of revealed functions)."""
    if turn in scenario.revealed:
        return f"User: I have updated some more functions you can choose from: {', '.join(scenario.revealed[turn])}"
    return "User: " + _request(scenario, turn)


def call_line(call: Mapping[str, Any]) -> str:
    return f"{call['name']}({json.dumps(call.get('arguments', {}), ensure_ascii=False)})"


def action_text(calls: Sequence[Mapping[str, Any]]) -> str:
    """A step's calls, one line each (END_TURN for none)."""
    return "\n".join(call_line(c) for c in calls) if calls else END_TURN


def results_state(results: Sequence[str]) -> str:
    """The calls' results as one state, a line per call."""
    return "\n".join(" ".join(r.split("\n")) if r.strip() else "(empty result)" for r in results)


def result_lines(state: str) -> list[str]:
    """A results state back as one result per line (blank lines dropped)."""
    return [line.strip() for line in state.split("\n") if line.strip()]
