"""ALFWorld's closed vocabularies, read from the installed `alfworld` package (the optional extra).

Everything a game may name comes from here: the six task types, the object and receptacle types,
which object type may sit in which receptacle type (`VAL_RECEPTACLE_OBJECTS`), which types can be
cleaned / heated / cooled / toggled, the goal templates and the PDDL domain and text grammar.
Simulator text is only ever matched against these sets, so nothing it writes reaches a game file.
"""

from __future__ import annotations

import functools
import importlib.resources
from typing import Mapping

import alfworld.gen.constants as _constants
import alfworld.gen.goal_library as _goals

# ALFWorld's numbering (alfworld.agents.environment.alfred_tw_env.TASK_TYPES), in its order.
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
# The short names ALFWorld papers report per task type.
TASK_LABELS = {"pick_and_place_simple": "pick", "look_at_obj_in_light": "look",
               "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
               "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "pick2"}

# Receptacle type that a task type's state change happens in (and the action's verb).
APPLIANCE = {"pick_clean_then_place_in_recep": ("SinkBasin", "clean", "Cleanable"),
             "pick_heat_then_place_in_recep": ("Microwave", "heat", "Heatable"),
             "pick_cool_then_place_in_recep": ("Fridge", "cool", "Coolable")}
LAMPS = ("DeskLamp",)  # look_at_obj_in_light's light source (ALFWorld's games use desk lamps)
# ALFRED's rule table lists no receptacle for a desk lamp (it is a fixture of the scene); ours stand
# on these, and cannot be picked up.
LAMP_HOLDERS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "DiningTable", "CoffeeTable", "TVStand"})

OPENABLE = frozenset(_constants.OPENABLE_CLASS_SET)
MOVABLE_RECEPTACLES = frozenset(_constants.MOVABLE_RECEPTACLES_SET)
# Static receptacles are the `receptacle`s of a game; everything else, movable receptacles
# included, is an `object` (as ALFWorld's own PDDL writer declares them).
STATIC_RECEPTACLES = frozenset(_constants.RECEPTACLES) - MOVABLE_RECEPTACLES
OBJECT_TYPES = frozenset(_constants.OBJECTS_SET) - STATIC_RECEPTACLES
CAN_CONTAIN: Mapping[str, frozenset[str]] = {r: frozenset(objs) for r, objs in
                                             _constants.VAL_RECEPTACLE_OBJECTS.items() if r in STATIC_RECEPTACLES}
# Object types a game may place: those ALFWorld lets lie in some static receptacle, plus the desk
# lamp (no sliced pieces, which ALFWorld's games skip; no windows, chairs or switches).
PLACEABLE = frozenset(o for objs in CAN_CONTAIN.values() for o in objs if not o.endswith("Sliced")) | {"DeskLamp"}
ACTION_OBJECTS: Mapping[str, frozenset[str]] = {k: frozenset(v) for k, v in _constants.VAL_ACTION_OBJECTS.items()}
TRAIN_SCENES = tuple(_constants.TRAIN_SCENE_NUMBERS)
UNSEEN_SCENES = tuple(_constants.TEST_SCENE_NUMBERS)  # ALFRED's held-out floor plans

# Lower-case name (as the agent and the simulator write it) -> type.
TYPE_BY_NAME = {t.lower(): t for t in sorted(OBJECT_TYPES | STATIC_RECEPTACLES)}


def may_hold(rtype: str, otype: str) -> bool:
    """Whether ALFWorld lets an object of type `otype` lie in a receptacle of type `rtype`."""
    if otype in LAMPS:
        return rtype in LAMP_HOLDERS
    return otype in CAN_CONTAIN.get(rtype, ())


def goal_pddl(task_type: str, obj: str, recep: str, toggle: str) -> str:
    """The task's PDDL goal (it also closes the problem's `(define`), `#` written as PDDL's `-`."""
    return _goals.gdict[task_type]["pddl"].format(obj=obj, recep=recep, toggle=toggle, mrecep="").replace("#", "-")


def task_templates(task_type: str) -> tuple[str, ...]:
    """ALFWorld's sentence templates for a task type ({obj}, {recep}, {toggle} lower-case)."""
    return tuple(_goals.gdict[task_type]["templates"])


@functools.lru_cache(maxsize=None)
def data_text(name: str) -> str:
    """A file of alfworld/data: 'alfred.pddl' (the domain) or 'alfred.twl2' (the text grammar)."""
    return importlib.resources.files("alfworld").joinpath("data", name).read_text()


def layouts_dir():
    return importlib.resources.files("alfworld").joinpath("gen", "layouts")


def room_of(scene_number: int) -> str:
    for room, numbers in _constants.SCENE_TYPE.items():
        if scene_number in numbers:
            return room
    raise ValueError(f"FloorPlan{scene_number} is not an ALFRED scene")


def natural_key(name: str) -> tuple[str, int]:
    """Sort key for game names so that "cabinet 2" comes before "cabinet 10"."""
    base, _, number = name.rpartition(" ")
    return (base, int(number)) if number.isdigit() else (name, 0)
