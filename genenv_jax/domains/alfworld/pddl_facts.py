"""A game file read back as a spec: the scene, targets and placements of an ALFWorld game's PDDL
problem, so that official games can be shown to the simulator as seeds like generated ones.

A spec is a view of the game for the simulator, not the game the agent plays (that is the file):
objects a spec cannot express (types no receptacle may hold in ALFWorld's rule table, objects
inside movable receptacles, receptacles outside the shipped layout) are left out of it."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from genenv_jax.domains.alfworld import specs, vocab
from genenv_jax.domains.alfworld.games import GameSpec, task_sentence
from genenv_jax.domains.alfworld.scenes import load_scene, mangle, scene_numbers
from genenv_jax.domains.records import Invalid

_FACT = re.compile(r"\((inReceptacle|objectType)\s+(\S+)\s+(\S+)\)", re.IGNORECASE)


def spec_from_game(game: Mapping[str, Any], traj: Mapping[str, Any]) -> GameSpec | None:
    """The spec view of a game file (see the module docstring), or None when the task itself cannot
    be said as a spec (a scene without a shipped layout, a sliced target, a movable-receptacle goal,
    targets that are left out)."""
    try:
        scene_number = int(traj["scene"]["scene_num"])
        params = traj["pddl_params"]
    except (KeyError, TypeError, ValueError):
        return None
    if scene_number not in scene_numbers() or params.get("object_sliced") or params.get("mrecep_target"):
        return None
    scene = load_scene(scene_number)
    receptacle_by_pddl = {mangle(r.id).lower(): r.id for r in scene.receptacles}
    types, where = {}, {}
    for kind, first, second in _FACT.findall(game.get("pddl_problem", "")):
        if first.startswith("?"):  # the goal's variables
            continue
        if kind.lower() == "objecttype":
            types[first.lower()] = second[:-4] if second.lower().endswith("type") else second
        else:
            where[first.lower()] = second.lower()
    rtype_of = {r.id: r.type for r in scene.receptacles}
    placements = []
    for obj, recep in sorted(where.items()):
        otype = vocab.TYPE_BY_NAME.get(types.get(obj, "").lower())
        rid = receptacle_by_pddl.get(recep)
        if (otype in vocab.PLACEABLE and otype in scene.object_types and rid is not None
                and vocab.may_hold(rtype_of[rid], otype)):
            placements.append((otype, rid))
    spec = GameSpec(scene=scene_number, task_type=traj.get("task_type", ""),
                    object=vocab.TYPE_BY_NAME.get(str(params.get("object_target", "")).lower(), ""),
                    receptacle=vocab.TYPE_BY_NAME.get(str(params.get("parent_target", "")).lower()) or None,
                    toggle=vocab.TYPE_BY_NAME.get(str(params.get("toggle_target", "")).lower()) or None,
                    placements=tuple(sorted(placements)))
    if spec.task_type == "look_at_obj_in_light":
        spec = dataclasses.replace(spec, receptacle=None)
    try:
        spec = specs.read_spec(specs.write_spec(spec))
    except (Invalid, KeyError):
        return None
    # The template whose sentence the game's grammar states (0 when it states neither).
    stated = [t for t in (0, 1) if f"Your task is to: {task_sentence(dataclasses.replace(spec, template=t))}." in game.get("grammar", "")]
    return dataclasses.replace(spec, template=stated[0] if stated else 0)
