"""Why an ALFWorld step did what it did, from the engine's PDDL facts: DreamGym's reasoning
targets, standing in for the paper's teacher LLM. For an admissible command, the facts that
changed (read with AlfredDemangler's names, "mug 1", through `engine.Game(want_facts=True)`); for
an inadmissible one, the failed precondition of the PDDL action it names; on the winning step,
that the goal now holds. Pure functions of fact sets, plus `inadmissible_command`, which builds a
command the engine refuses in a given state (for random episodes that show the invalid path).
"""

from __future__ import annotations

import random
import re
from typing import AbstractSet, Callable, Iterable, Sequence

from genenv_jax.domains.alfworld.engine import Fact
from genenv_jax.domains.alfworld.vocab import OBJECT_TYPES, natural_key

Facts = AbstractSet[Fact]
ROOM_MIDDLE = "the middle of the room"  # the start point: the only location without a receptacle
OBSERVING = ("look", "inventory", "help", "examine ")  # commands whose PDDL effects are bookkeeping only
APPLIANCES = {"heat": ("microwave", "heatable", "hot"), "cool": ("fridge", "coolable", "cool"),
              "clean": ("sinkbasin", "cleanable", "clean")}
KNOWN_VERBS = ("look", "inventory", "help", "examine", "go", "open", "close", "take", "move", "use", "heat",
               "cool", "clean", "slice")
# Predicates a step can change that the reasoning states, in the order it states them. The rest of
# the changes are bookkeeping (checked, holdsany, objectatlocation) or Fast Downward's negated
# copies of atoms (not_*), which repeat what these say.
_SHOWN = ("atlocation", "holds", "inreceptacle", "opened", "isclean", "ishot", "iscool", "istoggled", "ison",
          "issliced")
_SENTENCE = re.compile(r"^(.+?)[.!?](?:\s|$)", re.DOTALL)


# ------------------------------------------------------------------------ reading a fact set
class _World:
    """Look-ups over one state's facts (names as the text prints them)."""

    def __init__(self, facts: Facts):
        self.facts = facts
        self.receptacles = {f[1] for f in facts if f[0] == "receptacletype"}
        self.objects = {f[1] for f in facts if f[0] == "objecttype"}
        self.type_of = {f[1]: _type_name(f[2]) for f in facts if f[0] in ("receptacletype", "objecttype")}
        self.location_of = {f[1]: f[2] for f in facts if f[0] == "receptacleatlocation"}
        self.inside = {f[1]: f[2] for f in facts if f[0] == "inreceptacle"}
        self.held = sorted(f[2] for f in facts if f[0] == "holds")
        self.here = next((f[2] for f in facts if f[0] == "atlocation"), "")

    def has(self, *fact: str) -> bool:
        return tuple(fact) in self.facts

    def place(self, location: str) -> str:
        """'at sinkbasin 1' for a location (every receptacle there), or 'in the middle of the room'."""
        there = sorted((r for r, loc in self.location_of.items() if loc == location), key=natural_key)
        return "at " + " and ".join(there) if there else "in " + ROOM_MIDDLE

    def reachable(self, receptacle: str) -> bool:
        return self.location_of.get(receptacle) == self.here

    def closed(self, receptacle: str) -> bool:
        return self.has("openable", receptacle) and not self.has("opened", receptacle)

    def can_hold(self, receptacle: str, obj: str) -> bool:
        return self.has("cancontain", self.type_of[receptacle] + "type", self.type_of[obj] + "type")


def _type_name(pddl_type: str) -> str:
    return pddl_type[:-len("type")] if pddl_type.endswith("type") else pddl_type



# ------------------------------------------------------------------------ reasoning
def change_clauses(before: Facts, after: Facts) -> list[str]:
    """The changed facts of a step as short clauses ('now holding mug 1', 'mug 1 is no longer in
    countertop 1'), predicates in `_SHOWN` order, facts gained before facts lost."""
    world = _World(after)
    gained, lost = set(after) - set(before), set(before) - set(after)
    clauses = []
    for predicate in _SHOWN:
        for fact in sorted(f for f in gained if f[0] == predicate):
            clauses.append(_clause(fact, True, world))
        for fact in sorted(f for f in lost if f[0] == predicate):
            clauses.append(_clause(fact, False, world))
    return clauses


def _clause(fact: Fact, holds: bool, world: _World) -> str:
    """One changed fact in words; `holds` says whether it became true (else false)."""
    name, args = fact[0], fact[1:]
    now = "now" if holds else "no longer"
    if name == "atlocation":
        return f"{now} {world.place(args[1])}"
    if name == "holds":
        return f"{now} holding {args[1]}"
    if name == "inreceptacle":
        return f"{args[0]} is {now} in {args[1]}"
    if name == "opened":
        return f"{args[0]} is now {'open' if holds else 'closed'}"
    if name == "istoggled":
        return f"{args[0]} is {'now' if holds else 'no longer'} switched on"
    if name == "ison":
        return f"{args[0]} is now {'on' if holds else 'off'}"
    adjective = {"isclean": "clean", "ishot": "hot", "iscool": "cool", "issliced": "sliced"}[name]
    return f"{args[0]} is {now} {adjective}"


def valid_reasoning(before: Facts, after: Facts, action: str, feedback: str) -> str:
    """Why an admissible command leads where it does: the engine's first sentence, then the facts it
    changed; a command that changes none says so (look, inventory, examine, help)."""
    clauses = change_clauses(before, after)
    match = _SENTENCE.match(feedback.strip())
    said = match.group(1) if match else f"'{action}'"
    if clauses:
        return f"{said}: {'; '.join(clauses)}."
    if action.startswith(OBSERVING):
        return f"'{action}' only gives information; nothing in the room changes."
    return f"{said}: no fact of the room changes."


def why_inadmissible(facts: Facts, action: str) -> str:
    """The reason an inadmissible command does nothing in the state `facts` (`unmet_precondition`, or
    a plain 'the engine does not accept it' when every checked precondition holds)."""
    return unmet_precondition(facts, action) or "the engine does not accept it in this state"


def unmet_precondition(facts: Facts, action: str) -> str:
    """What stops a command in the state `facts`: no command, an unknown verb, a malformed command, a
    name the game does not have, or the first unmet precondition of its PDDL action; "" if none."""
    world = _World(facts)
    words = action.split()
    if not words:
        return "the reply names no command"
    if words[0] == "put":
        return "objects are placed with 'move (object) to (receptacle)', not 'put'"
    if words[0] not in KNOWN_VERBS:
        return f"'{words[0]}' is not a known command (known: {', '.join(KNOWN_VERBS)})"
    if action in ("look", "inventory", "help"):
        return ""
    for pattern, check in _CHECKS:
        match = re.fullmatch(pattern, action)
        if match:
            unknown = [n for n in match.groups() if n not in world.receptacles | world.objects]
            return f"there is no {unknown[0]} in this game" if unknown else check(world, *match.groups())
    return f"that is not the form of a '{words[0]}' command (names read like 'mug 1')"


def _why_go(world: _World, target: str) -> str:
    if target not in world.receptacles:
        return f"{target} is not a receptacle; only receptacles can be gone to"
    return f"the agent is already at {target}" if world.reachable(target) else ""


def _why_open_close(opening: bool) -> Callable[[_World, str], str]:
    def why(world: _World, target: str) -> str:
        if not world.has("openable", target):
            return f"{target} cannot be opened or closed"
        if not world.reachable(target):
            return f"the agent is not at {target}"
        if opening and world.has("opened", target):
            return f"{target} is already open"
        if not opening and not world.has("opened", target):
            return f"{target} is already closed"
        return ""
    return why


def _why_take(world: _World, obj: str, receptacle: str) -> str:
    if receptacle not in world.receptacles:
        return f"{receptacle} is not a receptacle"
    if obj in world.held:
        return f"the agent is already holding {obj}"
    if not world.reachable(receptacle):
        return f"the agent is not at {receptacle}, so {obj} is not in view"
    if world.closed(receptacle):
        return f"{receptacle} is closed"
    if world.inside.get(obj) != receptacle:
        return f"{obj} is not in {receptacle}"
    if world.held:
        return f"the agent's hands are full: it is holding {world.held[0]}"
    if not world.has("pickupable", obj):
        return f"{obj} cannot be picked up"
    return ""


def _why_move(world: _World, obj: str, receptacle: str) -> str:
    if receptacle not in world.receptacles:
        return f"{receptacle} is not a receptacle"
    if obj not in world.held:
        return f"the agent is not holding {obj}"
    if not world.reachable(receptacle):
        return f"the agent is not at {receptacle}"
    if world.closed(receptacle):
        return f"{receptacle} is closed"
    if not world.can_hold(receptacle, obj):
        return f"a {world.type_of[receptacle]} cannot hold a {world.type_of[obj]}"
    return ""


def _why_appliance(verb: str) -> Callable[[_World, str, str], str]:
    appliance, able, adjective = APPLIANCES[verb]

    def why(world: _World, obj: str, receptacle: str) -> str:
        if world.type_of.get(receptacle) != appliance:
            return f"{receptacle} is not a {appliance}; only a {appliance} can {verb} things"
        if obj not in world.held:
            return f"the agent is not holding {obj}"
        if not world.reachable(receptacle):
            return f"the agent is not at {receptacle}"
        if not world.has(able, obj):
            return f"{obj} cannot be made {adjective}"
        return ""
    return why


def _why_use(world: _World, obj: str) -> str:
    if not world.has("toggleable", obj):
        return f"{obj} cannot be used (switched on or off)"
    if obj not in world.inside or not world.reachable(world.inside[obj]):
        return f"{obj} is not here"
    return ""


def _why_slice(world: _World, obj: str, knife: str) -> str:
    if world.type_of.get(knife) not in ("knife", "butterknife"):
        return f"{knife} is not a knife"
    if knife not in world.held:
        return f"the agent is not holding {knife}"
    if not world.has("sliceable", obj):
        return f"{obj} cannot be sliced"
    if not world.has("objectatlocation", obj, world.here):
        return f"{obj} is not here"
    return ""


def _why_examine(world: _World, thing: str) -> str:
    """Receptacles are examined where they stand; the engine grounds 'examine (object)' only for a
    held object (the PDDL's other branch, an object in view, is never admissible)."""
    if thing in world.receptacles:
        return "" if world.reachable(thing) else f"the agent is not at {thing}"
    return "" if thing in world.held else f"the agent is not holding {thing}; only a held object can be examined"


_NAME = r"([a-z]+(?: [a-z]+)* \d+)"  # an engine name: 'mug 1', 'sinkbasin 1'
_CHECKS: tuple[tuple[str, Callable[..., str]], ...] = (
    (rf"go to {_NAME}", _why_go),
    (rf"open {_NAME}", _why_open_close(True)),
    (rf"close {_NAME}", _why_open_close(False)),
    (rf"take {_NAME} from {_NAME}", _why_take),
    (rf"move {_NAME} to {_NAME}", _why_move),
    *((rf"{verb} {_NAME} with {_NAME}", _why_appliance(verb)) for verb in APPLIANCES),
    (rf"use {_NAME}", _why_use),
    (rf"slice {_NAME} with {_NAME}", _why_slice),
    (rf"examine {_NAME}", _why_examine),
)


def step_reasoning(before: Facts, after: Facts, action: str, admissible: Sequence[str], feedback: str,
                   won: bool, task: str = "") -> str:
    """The reasoning of one step: the facts an admissible command changed, or why an inadmissible
    one does nothing; on the winning step, that the task's goal now holds."""
    if action in admissible:
        text = valid_reasoning(before, after, action, feedback)
    elif not action.strip():
        text = "The reply names no command. Nothing happens."
    else:
        text = f"'{action}' is not possible here: {why_inadmissible(before, action)}. Nothing happens."
    if won:
        text += f" The goal now holds: {task}." if task else " The goal of the task now holds."
    return text


def inadmissible_command(facts: Facts, admissible: Sequence[str], seen: Iterable[str], rng: random.Random) -> str:
    """A command the engine does not accept now, of one of three kinds picked at random: one that was
    admissible earlier in the episode (`seen`), taking a game object from a receptacle it is not in
    (or not in view), or taking an object of a type the game does not have."""
    world, allowed = _World(facts), set(admissible)
    receptacles = sorted(world.receptacles, key=natural_key)
    if not receptacles:
        raise ValueError("the facts hold no receptacle to build an inadmissible command with")
    present = {world.type_of[o] for o in world.objects}
    stale = sorted(set(seen) - allowed)
    elsewhere = sorted(c for c in (f"take {o} from {r}" for o in world.objects for r in receptacles)
                       if c not in allowed)
    absent = [t.lower() for t in sorted(OBJECT_TYPES) if t.lower() not in present]
    kind = rng.choice([options for options in (stale, elsewhere, absent) if options])
    if kind is absent:
        return f"take {rng.choice(absent)} 1 from {rng.choice(receptacles)}"
    return rng.choice(kind)


__all__ = ["change_clauses", "inadmissible_command", "step_reasoning", "unmet_precondition", "valid_reasoning",
           "why_inadmissible"]
