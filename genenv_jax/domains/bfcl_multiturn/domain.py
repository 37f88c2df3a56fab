"""BFCL v4's multi-turn categories (base, miss_func, miss_param, long_context) as a GenEnv domain.

An episode (`episode.MultiTurnEnvironment`) sends the user turns one at a time and executes the
agent's `<tool_call>` blocks on the episode's own backend instances (`dispatch.py`); R_agent is
BFCL's multi-turn verdict (`checker.py`). The simulator is shown a seed in BFCL's multi-turn JSON
(ground truth as JSON calls) and writes a new task in that format, which `schema.validate` accepts
only if its ground truth runs cleanly through the dispatcher.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Mapping, Sequence

from genenv_jax.core.config_checks import name_list
from genenv_jax.domains.experience import DomainSupport
from genenv_jax.domains.base import (ChatPrompt, Domain, Invalid, Rejection, ScoreResult, Task, curriculum_line,
                                     next_sibling)
from genenv_jax.domains.bfcl.data import SplitFractions
from genenv_jax.domains.bfcl_multiturn import data, schema
from genenv_jax.domains.bfcl_multiturn.episode import MultiTurnEnvironment, hinted, score_turns
from genenv_jax.domains.bfcl_multiturn.scenario import Scenario
from genenv_jax.domains.generation import extract_json_object
from genenv_jax.text.tokenization import parse_tool_calls, render_tool_calls
from genenv_jax.domains.bfcl_multiturn.synthetic import dreamgym_support

DOMAIN_NAME = "bfcl_multiturn"

# The agent's reply that ends a user turn: after its calls, or when the turn cannot be done.
DONE_TEXT = "Done: I have completed this request."
CANNOT_TEXT = {
    "multi_turn_miss_func": "I cannot do this with the functions available to me.",
    "multi_turn_miss_param": "I need more information to do this: please tell me the missing details.",
}
CANNOT_TEXT_DEFAULT = "I cannot complete this request with the available functions and information."

SIMULATOR_SYSTEM = (
    "You write training tasks for an AI agent that calls functions over several user turns. You are given a "
    "seed task in the JSON format of the Berkeley Function Calling Leaderboard (BFCL) multi-turn categories "
    "and write one new task in the same format, with the correct function calls for every turn.")

_DIFFICULTY_TEXT = {
    "harder": ("Make the new task HARDER than the seed: e.g. more user turns, more calls per turn, requests "
               "that refer back to earlier turns or need a value looked up with one call before another, "
               "values stated indirectly."),
    "easier": ("Make the new task EASIER than the seed: e.g. fewer turns, one or two calls per turn, every "
               "argument value stated explicitly in the request."),
    "similar": "Keep the difficulty about the SAME as the seed, with different requests or different values.",
}

_CATEGORY_RULES = {
    "multi_turn_base": "every turn has a user message and at least one call.",
    "multi_turn_long_context": ("every turn has a user message and at least one call; the backends add "
                                "large extra data (long tool outputs) at run time."),
    "multi_turn_miss_param": ("one turn (not the last) asks for something without a value the call needs: its "
                              "ground truth is [] and the NEXT turn's user message supplies the value, with "
                              "the calls."),
    "multi_turn_miss_func": ("one turn asks for something only a held-out function can do: its ground truth is "
                             "[]. missed_function maps a LATER turn index (as a string) to the held-out "
                             "function names; that turn's question is [] (the functions are revealed then) "
                             "and its ground truth makes the calls."),
}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


class BFCLMultiTurnDomain(Domain):
    """BFCL multi-turn categories; see the module docstring.

    Args:
      categories: which multi-turn categories to use (default: all four).
      split_fractions / split_salt: the deterministic split by scenario (shared by the categories).
    """

    name = DOMAIN_NAME
    rejection_reasons = schema.REJECTION_REASONS

    def __init__(self, categories: Sequence[str] = data.CATEGORIES, split_fractions: SplitFractions = SplitFractions(),
                 split_salt: str = data.DEFAULT_SPLIT_SALT):
        categories = name_list(categories, "bfcl_multiturn: categories")
        unknown = [c for c in categories if c not in data.CATEGORIES]
        if unknown:
            raise ValueError(f"unknown BFCL multi-turn categories {unknown}; expected a subset of {data.CATEGORIES}")
        self.categories = tuple(categories)
        self.split_fractions = SplitFractions.of(split_fractions)
        self.split_salt = split_salt

    # ------------------------------------------------------------------ seeds
    def load_seeds(self) -> list[Task]:
        """Every seed of the configured categories, in category then file order."""
        entries = [e for c in self.categories for e in data.load_category(c)]
        assignment = data.assign_splits(entries, self.split_fractions, self.split_salt)
        return [Task(
            domain=DOMAIN_NAME, task_id=e.id, category=e.category,
            prompt=copy.deepcopy({"question": e.question, "involved_classes": e.involved_classes,
                                  "missed_function": e.missed_function}),
            verifier=copy.deepcopy({"initial_config": e.initial_config, "ground_truth": e.ground_truth}),
            metadata={"source": "bfcl_v4", "split": assignment[e.id], "scenario": e.scenario}) for e in entries]

    def dreamgym(self) -> DomainSupport:
        return dreamgym_support()

    # ------------------------------------------------------------------ agent side
    def environment(self, task: Task) -> MultiTurnEnvironment:
        return MultiTurnEnvironment(task)

    def agent_prompt(self, task: Task) -> ChatPrompt:
        """The first user turn, with the initially shown function docs (BFCL's Python hint) as tools."""
        scenario = Scenario.of(task)
        return ChatPrompt(messages=scenario.user_messages(0), tools=hinted(scenario.initial_docs()) or None)

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """The response as a one-turn episode: the task's first user turn answered by this one reply.

        Its calls (if any) are that turn's only step; the official comparison runs on turn 0's
        ground truth. This is what `reference_response` is scored on; whole episodes are scored by
        the environment.
        """
        scenario = Scenario.of(task)
        first = Scenario(category=scenario.category, question=scenario.question[:1],
                         involved_classes=scenario.involved_classes, initial_config=scenario.initial_config,
                         revealed={}, ground_truth=scenario.ground_truth[:1])
        calls = [c.to_json() for c in parse_tool_calls(response).calls]
        return score_turns(first, [[calls] if calls else []])

    def reference_turns(self, task: Task) -> list[str]:
        """The agent texts of an ideal episode: per user turn, its ground-truth calls in one step and
        then a reply that ends the turn (only that reply for a turn without calls)."""
        texts = []
        for calls in task.verifier["ground_truth"]:
            if calls:
                texts += [render_tool_calls(calls), DONE_TEXT]
            else:
                texts.append(CANNOT_TEXT.get(task.category, CANNOT_TEXT_DEFAULT))
        return texts

    def reference_response(self, task: Task) -> str:
        """The ideal reply to the first prompt (the first of `reference_turns`)."""
        return self.reference_turns(task)[0]

    def summary(self, per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """multi_turn: unweighted mean over the evaluated categories (BFCL's multi-turn overall);
        multi_turn_micro: over all items."""
        rows = [per_category[c] for c in per_category if per_category[c]["n"]]
        if not rows:
            return {}
        return {"multi_turn": sum(r["accuracy"] for r in rows) / len(rows),
                "multi_turn_micro": sum(r["correct"] for r in rows) / sum(r["n"] for r in rows)}

    # ------------------------------------------------------------------ simulator side
    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        """Chat messages (no tools) asking for one new task like `seed`, as BFCL multi-turn JSON."""
        success_line = curriculum_line(recent_success, alpha, difficulty)
        functions = [line for c in seed.prompt["involved_classes"]
                     for line in [f"{c}:"] + [f"  {s}" for s in schema.signature_lines(c)]]
        user = "\n".join([
            f"Seed task (BFCL category: {seed.category}):",
            "```json", json.dumps(schema.task_json(seed), ensure_ascii=False), "```",
            "",
            "Functions of the seed's classes (name(parameter: type, optional: type = default)):",
            *functions,
            "",
            success_line,
            _DIFFICULTY_TEXT[difficulty],
            "",
            "Write ONE new task as a JSON object with these keys:",
            f"- involved_classes: 1 to {schema.MAX_CLASSES} of {', '.join(data.CLASSES)} (use the seed's "
            "classes unless you know another class's functions).",
            "- initial_config: {class: its starting state} in the seed's format (you may change the values).",
            f"- question: 1 to {schema.MAX_TURNS} user turns, each a list of {{\"role\": \"user\", \"content\": ...}} "
            "messages; they must differ from the seed's.",
            f"- ground_truth: one list per turn of the correct calls, in order, each {{\"name\": function, "
            f"\"arguments\": {{parameter: value}}}} (at most {schema.MAX_CALLS_PER_TURN} per turn). Every call must "
            "succeed from the initial_config and the calls before it.",
            f"Category rule ({seed.category}): {_CATEGORY_RULES[seed.category]}",
            "",
            "Reply with the JSON object inside a ```json code block and nothing else.",
        ])
        return ChatPrompt(messages=[{"role": "system", "content": SIMULATOR_SYSTEM},
                                    {"role": "user", "content": user}])

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """Reads the simulator's JSON; returns a Task in the seed's category or a Rejection."""
        try:
            fields = schema.validate(extract_json_object(text), seed.category, seed.prompt["question"])
        except Invalid as e:
            return self.reject(e, seed, text)
        return Task(domain=DOMAIN_NAME, task_id=f"{seed.task_id}~{_digest(fields)}", category=seed.category,
                    prompt=fields["prompt"], verifier=fields["verifier"], parent_id=seed.task_id,
                    difficulty=difficulty, metadata={"source": "simulator"})

    def _suitable_sibling(self, seed: Task, sibling: Task | None) -> Task:
        def fits(t: Task) -> bool:  # same category, other user turns, and accepted by parse_task
            return (t.category == seed.category and t.prompt["question"] != seed.prompt["question"]
                    and isinstance(self.parse_task(schema.as_generation(t), seed), Task))

        if sibling is not None and fits(sibling):
            return sibling
        return next_sibling(self, seed, fits)

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """A sibling task of the seed's category and split, written as the simulator is asked to."""
        return schema.as_generation(self._suitable_sibling(seed, sibling))


__all__ = ["BFCLMultiTurnDomain", "DOMAIN_NAME"]
