"""An ALFWorld game from a small spec: scene, task type, targets and where every object lies.

`compile_game` writes what ALFWorld's game files hold (`game.tw-pddl`: the PDDL domain, the text
grammar with the task sentence, the PDDL problem, the walkthrough; `traj_data.json`'s task fields).
The problem is built only from vocabulary sets and ids this module makes itself (`vocab`,
`scenes`), never from spec text. `walkthrough` is the expert: the moves that solve the game,
read off the placements (no planner search), and `engine.verify` replays it on the real engine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Mapping

from genenv_jax.domains.alfworld import vocab
from genenv_jax.domains.alfworld.scenes import engine_names, load_scene, mangle


@dataclasses.dataclass(frozen=True)
class GameSpec:
    """What defines a game. `placements` lists every object instance as (object type, receptacle
    id); instances are numbered by the engine. `toggle` is the lamp of look_at_obj_in_light."""

    scene: int
    task_type: str
    object: str
    receptacle: str | None
    toggle: str | None
    placements: tuple[tuple[str, str], ...]
    template: int = 0  # which of ALFWorld's two sentence templates states the task

    def to_json(self) -> dict[str, Any]:
        return {"scene": self.scene, "task_type": self.task_type, "object": self.object,
                "receptacle": self.receptacle, "toggle": self.toggle,
                "placements": [list(p) for p in self.placements], "template": self.template}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GameSpec":
        return cls(scene=int(data["scene"]), task_type=data["task_type"], object=data["object"],
                   receptacle=data.get("receptacle"), toggle=data.get("toggle"),
                   placements=tuple((o, r) for o, r in data["placements"]), template=int(data.get("template", 0)))

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Instance:
    id: str            # ALFRED-style id, unique in the game
    type: str
    receptacle: str    # ALFRED id of the receptacle it starts in


def instances(spec: GameSpec) -> list[Instance]:
    """The spec's objects with ids of their own ('Mug|+01.00|+00.00|+00.00' is the first mug)."""
    counts: dict[str, int] = {}
    out = []
    for otype, rid in spec.placements:
        counts[otype] = counts.get(otype, 0) + 1
        out.append(Instance(id=f"{otype}|+{counts[otype]:02d}.00|+00.00|+00.00", type=otype, receptacle=rid))
    return out


def task_sentence(spec: GameSpec) -> str:
    """ALFWorld's templated task description, e.g. 'put a clean mug in countertop'."""
    template = vocab.task_templates(spec.task_type)[spec.template % 2]
    return template.format(obj=spec.object.lower(), recep=(spec.receptacle or "").lower(),
                           toggle=(spec.toggle or "").lower(), mrecep="")


def names(spec: GameSpec) -> dict[str, str]:
    """ALFRED id -> engine name ('mug 1', 'cabinet 3') for every receptacle and object of the game."""
    scene = load_scene(spec.scene)
    return engine_names([r.id for r in scene.receptacles] + [i.id for i in instances(spec)])


def problem_pddl(spec: GameSpec) -> str:
    """The PDDL problem: ALFWorld's type constants, the scene's receptacles at their locations, the
    placed objects with their properties, the agent at a point with no receptacle, the goal."""
    scene = load_scene(spec.scene)
    objs = instances(spec)
    recep_by_id = {r.id: r for r in scene.receptacles}
    locations = sorted({r.location for r in scene.receptacles} | {scene.start})
    rtypes, otypes = sorted(vocab.STATIC_RECEPTACLES), sorted(vocab.OBJECT_TYPES)
    declarations = (["agent1 - agent"] + [f"{mangle(loc)} - location" for loc in locations]
                    + [f"{mangle(r.id)} - receptacle" for r in scene.receptacles]
                    + [f"{mangle(o.id)} - object" for o in objs]
                    + [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes])
    facts = [f"(atLocation agent1 {mangle(scene.start)})"]
    facts += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in sorted(vocab.CAN_CONTAIN.get(r, ()))
              if o in vocab.OBJECT_TYPES]
    for r in scene.receptacles:
        facts += [f"(receptacleType {mangle(r.id)} {r.type}Type)", f"(receptacleAtLocation {mangle(r.id)} {mangle(r.location)})"]
        if r.openable:
            facts.append(f"(openable {mangle(r.id)})")
    for o in objs:
        name, where = mangle(o.id), recep_by_id[o.receptacle]
        facts += [f"(objectType {name} {o.type}Type)", f"(inReceptacle {name} {mangle(where.id)})",
                  f"(objectAtLocation {name} {mangle(where.location)})"]
        if o.type not in vocab.LAMPS:
            facts.append(f"(pickupable {name})")
        if o.type in vocab.MOVABLE_RECEPTACLES:
            facts.append(f"(isReceptacleObject {name})")
        for prop, group in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                            ("toggleable", "Toggleable"), ("sliceable", "Sliceable")):
            if o.type in vocab.ACTION_OBJECTS[group]:
                facts.append(f"({prop} {name})")
    goal = vocab.goal_pddl(spec.task_type, spec.object, spec.receptacle or "", spec.toggle or "")
    return "\n".join([f"(define (problem {spec.task_type}_{spec.digest()})", "    (:domain alfred)",
                      "    (:objects", *(f"        {d}" for d in declarations), "    )",
                      "    (:init", *(f"        {f}" for f in facts), "    )", goal])


def walkthrough(spec: GameSpec) -> list[str]:
    """The expert's commands for the game, read off the placements: for each target, go to it (open
    its receptacle if needed), take it, use the appliance or lamp, go to the goal receptacle (open
    it if needed) and move it there. Targets already in a goal receptacle are never taken; for the
    pick tasks they count towards the goal (a game they already win gets no walkthrough)."""
    scene = load_scene(spec.scene)
    named = names(spec)
    recep = {r.id: r for r in scene.receptacles}
    opened: set[str] = set()
    commands: list[str] = []
    here = [scene.start]

    def go(r) -> None:  # receptacles can share a location; "go to" where the agent stands is not a move
        if r.location != here[0]:
            commands.append(f"go to {named[r.id]}")
            here[0] = r.location

    def go_and_open(r) -> None:
        go(r)
        if r.openable and r.id not in opened:
            commands.append(f"open {named[r.id]}")
            opened.add(r.id)

    objs = instances(spec)
    targets = [o for o in objs if o.type == spec.object and recep[o.receptacle].type != spec.receptacle]
    count = 2 if spec.task_type == "pick_two_obj_and_place" else 1
    if spec.task_type in ("pick_and_place_simple", "pick_two_obj_and_place"):  # targets already in place count
        count -= min(count, sum(o.type == spec.object and recep[o.receptacle].type == spec.receptacle
                                for o in objs))
    if len(targets) < count:
        raise ValueError(f"{spec.task_type} needs {count} {spec.object} outside any {spec.receptacle}")
    goal = (scene.receptacles_of(spec.receptacle) or [None])[0] if spec.receptacle else None
    for target in targets[:count]:
        source = recep[target.receptacle]
        go_and_open(source)
        commands.append(f"take {named[target.id]} from {named[source.id]}")
        if spec.task_type in vocab.APPLIANCE:
            rtype, verb, _ = vocab.APPLIANCE[spec.task_type]
            appliance = scene.receptacles_of(rtype)[0]
            go(appliance)
            commands.append(f"{verb} {named[target.id]} with {named[appliance.id]}")
        if spec.task_type == "look_at_obj_in_light":
            lamp = next(o for o in objs if o.type == spec.toggle)
            go(recep[lamp.receptacle])
            commands.append(f"use {named[lamp.id]}")
            continue
        go_and_open(goal)
        commands.append(f"move {named[target.id]} to {named[goal.id]}")
    return commands


def traj_data(spec: GameSpec) -> dict[str, Any]:
    """The traj_data.json fields ALFWorld's wrappers and loaders read."""
    return {"task_type": spec.task_type, "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene},
            "pddl_params": {"object_target": spec.object, "parent_target": spec.receptacle or "",
                            "toggle_target": spec.toggle or "", "mrecep_target": "", "object_sliced": False},
            "turk_annotations": {"anns": [{"task_desc": task_sentence(spec)}]},
            "genenv": {"spec": spec.to_json()}}


def compile_game(spec: GameSpec, solvable: bool = True) -> dict[str, Any]:
    """game.tw-pddl's JSON for the spec (what `PddlEnv.load` reads), with its walkthrough."""
    grammar = vocab.data_text("alfred.twl2").replace("UNKNOWN GOAL", task_sentence(spec))
    return {"pddl_domain": vocab.data_text("alfred.pddl"), "grammar": grammar, "pddl_problem": problem_pddl(spec),
            "walkthrough": walkthrough(spec), "solvable": solvable}

