"""The simulator's side of ALFWorld: a game written as a small JSON spec, read and checked.

The spec names everything the way the agent sees it (scene 'FloorPlan1', 'mug', 'cabinet 3'):

    {"scene": "FloorPlan1", "task_type": "pick_heat_then_place_in_recep", "object": "mug",
     "receptacle": "countertop", "toggle": null,
     "placements": {"cabinet 3": ["mug"], "fridge 1": ["apple", "egg"]}}

`read_spec` maps every name onto ALFWorld's vocabulary and the scene's receptacles or rejects the
spec with a reason code; only the mapped ids reach the game file, never the text itself.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from genenv_jax.domains.alfworld import vocab
from genenv_jax.domains.alfworld.games import GameSpec
from genenv_jax.domains.alfworld.scenes import engine_names, load_scene, scene_numbers
from genenv_jax.domains.records import Invalid

MAX_OBJECTS = 40    # object instances per game (ALFWorld kitchens show ~20-40)
MAX_TARGETS = 4     # instances of the target type

SPEC_REASONS = (
    "missing_field",        # scene / task_type / object / receptacle / placements absent
    "unknown_field",        # a key the spec format does not have
    "bad_value",            # a field of the wrong JSON type
    "unknown_scene",        # not one of the 120 ALFRED floor plans
    "unknown_task_type",    # not one of ALFWorld's six task types
    "unknown_object",       # not an ALFWorld object type that can be picked up
    "object_not_in_scene",  # an object type ALFRED never puts in this scene
    "unknown_receptacle",   # not a receptacle of this scene (or the goal names no receptacle type in it)
    "object_not_allowed",   # ALFWorld does not allow that object there / that task on that object
    "scene_lacks",          # the task needs a sink basin, microwave, fridge or desk lamp the scene lacks
    "too_few_targets",      # fewer targets outside a goal receptacle than the task needs
    "too_many_objects",     # more than MAX_OBJECTS instances, or more than MAX_TARGETS targets
)
_SCENE = re.compile(r"FloorPlan([0-9]{1,4})", re.ASCII)
FIELDS = ("scene", "task_type", "object", "receptacle", "toggle", "placements")


def _quoted(value: Any) -> str:
    return repr(value)[:60]


def _type_named(name: Any, allowed: frozenset[str], reason: str, what: str) -> str:
    if not isinstance(name, str):
        raise Invalid("bad_value", f"{what} must be a string, got {_quoted(name)}")
    found = vocab.TYPE_BY_NAME.get(name.strip().lower())
    if found is None or found not in allowed:
        raise Invalid(reason, f"{what} {_quoted(name)}")
    return found


def receptacle_names(scene_number: int) -> dict[str, str]:
    """Engine name ('cabinet 3') -> ALFRED receptacle id, for a scene."""
    scene = load_scene(scene_number)
    return {name: rid for rid, name in engine_names([r.id for r in scene.receptacles]).items()}


def read_spec(obj: Any) -> GameSpec:
    """The GameSpec a JSON spec describes; raises Invalid (see SPEC_REASONS)."""
    if not isinstance(obj, Mapping):
        raise Invalid("not_an_object", "the spec must be a JSON object")
    unknown = sorted(str(k)[:30] for k in obj if k not in FIELDS and k != "template")
    if unknown:
        raise Invalid("unknown_field", f"{unknown[:5]}")
    missing = [f for f in FIELDS if f not in obj and f != "toggle"]
    if missing:
        raise Invalid("missing_field", f"{missing}")
    scene_field = obj["scene"]
    found = _SCENE.fullmatch(scene_field) if isinstance(scene_field, str) else None
    if found is None or int(found.group(1)) not in scene_numbers():
        raise Invalid("unknown_scene", f"scene {_quoted(scene_field)}")
    scene = load_scene(int(found.group(1)))
    task_type = obj["task_type"]
    if task_type not in vocab.TASK_TYPES:
        raise Invalid("unknown_task_type", f"task_type {_quoted(task_type)}")
    target = _type_named(obj["object"], vocab.PLACEABLE, "unknown_object", "object")
    if target not in scene.object_types:
        raise Invalid("object_not_in_scene", f"{target} is not in {scene.name}")
    if target in vocab.LAMPS:
        raise Invalid("object_not_allowed", f"a {target} stands where it is: it cannot be the target")

    toggle = goal = None
    if task_type == "look_at_obj_in_light":
        if obj.get("toggle") in (None, ""):
            raise Invalid("missing_field", "look_at_obj_in_light needs a toggle (\"desklamp\")")
        toggle = _type_named(obj["toggle"], frozenset(vocab.LAMPS), "object_not_allowed", "toggle")
        if toggle not in scene.object_types:
            raise Invalid("scene_lacks", f"{scene.name} has no {toggle}")
        if obj.get("receptacle") not in (None, ""):
            raise Invalid("bad_value", "look_at_obj_in_light takes no receptacle (null)")
    else:
        goal = _type_named(obj["receptacle"], vocab.STATIC_RECEPTACLES, "unknown_receptacle", "receptacle")
        if goal not in scene.receptacle_types:
            raise Invalid("unknown_receptacle", f"{scene.name} has no {goal}")
        if not vocab.may_hold(goal, target):
            raise Invalid("object_not_allowed", f"ALFWorld does not put a {target} in a {goal}")
        if obj.get("toggle") not in (None, ""):
            raise Invalid("bad_value", f"{task_type} takes no toggle (null)")
    if task_type in vocab.APPLIANCE:
        appliance, verb, group = vocab.APPLIANCE[task_type]
        if appliance not in scene.receptacle_types:
            raise Invalid("scene_lacks", f"{scene.name} has no {appliance} to {verb} in")
        if target not in vocab.ACTION_OBJECTS[group]:
            raise Invalid("object_not_allowed", f"a {target} cannot be {verb}ed in ALFWorld")

    placements = _read_placements(obj["placements"], scene.number)
    targets = [r for o, r in placements if o == target and load_type(scene.number, r) != goal]
    needed = 2 if task_type == "pick_two_obj_and_place" else 1
    if len(targets) < needed:
        raise Invalid("too_few_targets", f"{task_type} needs {needed} {target} outside any {goal}")
    if sum(o == target for o, _ in placements) > MAX_TARGETS:
        raise Invalid("too_many_objects", f"more than {MAX_TARGETS} {target}")
    if toggle is not None and not any(o == toggle for o, _ in placements):
        raise Invalid("too_few_targets", f"look_at_obj_in_light needs a {toggle.lower()} placed")
    template = obj.get("template", 0)
    if type(template) is not int or template not in (0, 1):  # not True / 1.0
        raise Invalid("bad_value", "template must be 0 or 1")
    return GameSpec(scene=scene.number, task_type=task_type, object=target, receptacle=goal, toggle=toggle,
                    placements=tuple(sorted(placements)), template=template)


def load_type(scene_number: int, receptacle_id: str) -> str:
    return next(r.type for r in load_scene(scene_number).receptacles if r.id == receptacle_id)


def _read_placements(value: Any, scene_number: int) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping):
        raise Invalid("bad_value", "placements must map receptacle names to lists of objects")
    by_name = receptacle_names(scene_number)
    scene = load_scene(scene_number)
    out: list[tuple[str, str]] = []
    for name, objects in value.items():
        rid = by_name.get(name.strip().lower()) if isinstance(name, str) else None
        if rid is None:
            raise Invalid("unknown_receptacle", f"{_quoted(name)} is not a receptacle of {scene.name}")
        if not isinstance(objects, list):
            raise Invalid("bad_value", f"placements[{_quoted(name)}] must be a list of objects")
        rtype = load_type(scene_number, rid)
        for item in objects:
            otype = _type_named(item, vocab.PLACEABLE, "unknown_object", "object")
            if otype not in scene.object_types:
                raise Invalid("object_not_in_scene", f"{otype} is not in {scene.name}")
            if not vocab.may_hold(rtype, otype):
                raise Invalid("object_not_allowed", f"ALFWorld does not put a {otype} in a {rtype}")
            out.append((otype, rid))
            if len(out) > MAX_OBJECTS:
                raise Invalid("too_many_objects", f"more than {MAX_OBJECTS} objects")
    return tuple(out)


def write_spec(spec: GameSpec) -> dict[str, Any]:
    """The JSON spec of a GameSpec (what the simulator is shown and asked to write); `read_spec`
    of it gives the spec back."""
    names = {rid: name for name, rid in receptacle_names(spec.scene).items()}
    placements: dict[str, list[str]] = {}
    for otype, rid in spec.placements:
        placements.setdefault(names[rid], []).append(otype.lower())
    return {"scene": f"FloorPlan{spec.scene}", "task_type": spec.task_type, "object": spec.object.lower(),
            "receptacle": spec.receptacle.lower() if spec.receptacle else None,
            "toggle": spec.toggle.lower() if spec.toggle else None, "placements": placements,
            "template": spec.template}
