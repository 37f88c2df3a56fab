"""Random games within ALFWorld's rules, for the seed sets: a scene that supports the task type, a
target type ALFRED puts in that scene, a goal receptacle type that may hold it, and placements
(targets, the lamp, distractors) only where ALFWorld allows each object."""

from __future__ import annotations

import random

from genenv_jax.domains.alfworld import vocab
from genenv_jax.domains.alfworld.games import GameSpec
from genenv_jax.domains.alfworld.scenes import Scene, load_scene


def _holders(scene: Scene, otype: str, exclude_type: str | None = None) -> list[str]:
    """Receptacle ids of the scene that may hold an object type (not of `exclude_type`)."""
    return [r.id for r in scene.receptacles
            if vocab.may_hold(r.type, otype) and r.type != exclude_type]


def _options(scene: Scene, task_type: str) -> list[tuple[str, str | None, str | None]]:
    """(object, goal receptacle type, toggle) triples this scene supports for the task type."""
    if task_type in vocab.APPLIANCE:
        appliance, _, group = vocab.APPLIANCE[task_type]
        if appliance not in scene.receptacle_types:
            return []
        objects = [o for o in sorted(scene.object_types) if o in vocab.ACTION_OBJECTS[group]]
    else:
        objects = [o for o in sorted(scene.object_types) if o not in vocab.LAMPS]  # lamps are not picked up
    if task_type == "look_at_obj_in_light":
        lamps = [t for t in vocab.LAMPS if t in scene.object_types and _holders(scene, t)]
        return [(o, None, lamp) for lamp in lamps for o in objects if _holders(scene, o)]
    appliances = {a for a, _, _ in vocab.APPLIANCE.values()}
    return [(o, g, None) for o in objects for g in sorted(scene.receptacle_types - appliances)
            if vocab.may_hold(g, o) and _holders(scene, o, exclude_type=g)]


def supports(scene: Scene, task_type: str) -> bool:
    return bool(_options(scene, task_type))


def sample_spec(rng: random.Random, scene_pool: list[int], task_type: str,
                distractors: tuple[int, int] = (4, 12)) -> GameSpec:
    """A random valid game of `task_type` in one of the scenes (see the module docstring)."""
    candidates = [n for n in scene_pool if supports(load_scene(n), task_type)]
    if not candidates:
        raise ValueError(f"no scene in the pool supports {task_type}")
    scene = load_scene(rng.choice(candidates))
    obj, goal, toggle = rng.choice(_options(scene, task_type))
    count = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    placements = [(obj, rng.choice(_holders(scene, obj, exclude_type=goal))) for _ in range(count)]
    if toggle:
        placements.append((toggle, rng.choice(_holders(scene, toggle))))
    others = [o for o in sorted(scene.object_types) if o not in (obj, toggle) and _holders(scene, o)]
    for _ in range(rng.randint(*distractors)):
        other = rng.choice(others)
        placements.append((other, rng.choice(_holders(scene, other))))
    return GameSpec(scene=scene.number, task_type=task_type, object=obj, receptacle=goal, toggle=toggle,
                    placements=tuple(sorted(placements)), template=rng.randint(0, 1))
