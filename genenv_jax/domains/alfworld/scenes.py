"""ALFRED's 120 scene layouts as ALFWorld games see them: the static receptacles (ids, types,
where the agent stands to reach them), the object types present, and the names the text engine
gives them ("cabinet 3"), from the layouts shipped in the `alfworld` package."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import types

import numpy as np
from alfworld.agents.utils.misc import Demangler

from genenv_jax.domains.alfworld import vocab

_SCENE_FILE = re.compile(r"FloorPlan(\d+)-openable\.json$")
GRID = 0.25  # metres per ALFRED navigation step: locations are written in grid units, as ALFRED does


def mangle(alfred_id: str) -> str:
    """An ALFRED id as a PDDL name (ALFRED's own character map): 'Mug|+0.1' -> 'Mug_bar__plus_0_dot_1'."""
    for char, word in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        alfred_id = alfred_id.replace(char, word)
    return alfred_id


def location_id(x: float, z: float, rotation: float, horizon: float) -> str:
    """ALFRED's location name for a pose: 'loc|x|z|rotation|horizon' in grid units."""
    return "loc|%d|%d|%d|%d" % (round(x / GRID), round(z / GRID), round(rotation), round(horizon))


def engine_names(ids: list[str]) -> dict[str, str]:
    """ALFRED id -> the name the engine prints ('cabinet 3'): ALFWorld's own Demangler numbering
    (over every entity of a game, so it is computed on the game's full id list)."""
    mangled = {mangle(i).lower(): i for i in ids}  # the PDDL translator lower-cases every name
    infos = {m: types.SimpleNamespace(id=m) for m in mangled}
    demangler = Demangler(game_infos=infos)
    return {original: demangler.demangle_alfred_name(m).strip().lower() for m, original in mangled.items()}


@dataclasses.dataclass(frozen=True)
class Receptacle:
    id: str         # ALFRED id, e.g. 'Cabinet|+00.68|+00.50|-02.20' ('Sink|...|SinkBasin' for a sink)
    type: str       # e.g. 'Cabinet', 'SinkBasin'
    location: str   # where the agent stands to use it

    @property
    def openable(self) -> bool:
        return self.type in vocab.OPENABLE


@dataclasses.dataclass(frozen=True)
class Scene:
    number: int
    room: str
    receptacles: tuple[Receptacle, ...]
    object_types: frozenset[str]   # placeable object types ALFRED puts in this scene
    start: str                     # the agent's first location: a navigable point with no receptacle

    @property
    def name(self) -> str:
        return f"FloorPlan{self.number}"

    def receptacles_of(self, rtype: str) -> list[Receptacle]:
        return [r for r in self.receptacles if r.type == rtype]

    @property
    def receptacle_types(self) -> frozenset[str]:
        return frozenset(r.type for r in self.receptacles)


def _receptacle_type(alfred_id: str) -> str:
    parts = alfred_id.split("|")
    return parts[-1] if len(parts) == 5 else parts[0]  # 'Sink|x|y|z|SinkBasin' -> SinkBasin


@functools.lru_cache(maxsize=None)
def load_scene(number: int) -> Scene:
    """A scene from alfworld/gen/layouts (FloorPlan{number}-{openable,objects}.json, -layout.npy)."""
    root = vocab.layouts_dir()
    poses = json.loads(root.joinpath(f"FloorPlan{number}-openable.json").read_text())
    present = set(json.loads(root.joinpath(f"FloorPlan{number}-objects.json").read_text()))
    receptacles = tuple(Receptacle(id=rid, type=_receptacle_type(rid), location=location_id(*pose))
                        for rid, pose in sorted(poses.items())
                        if _receptacle_type(rid) in vocab.STATIC_RECEPTACLES)
    taken = {r.location for r in receptacles}
    with root.joinpath(f"FloorPlan{number}-layout.npy").open("rb") as f:
        points = np.load(f)  # [P, 2] navigable (x, z) in metres
    start = next(loc for loc in (location_id(float(x), float(z), 0, 30) for x, z in points) if loc not in taken)
    return Scene(number=number, room=vocab.room_of(number), receptacles=receptacles,
                 object_types=frozenset(present) & vocab.PLACEABLE, start=start)


@functools.lru_cache(maxsize=None)
def scene_numbers() -> tuple[int, ...]:
    """Every scene with a shipped layout, in number order."""
    found = (_SCENE_FILE.match(p.name) for p in vocab.layouts_dir().iterdir())
    return tuple(sorted(int(m.group(1)) for m in found if m))
