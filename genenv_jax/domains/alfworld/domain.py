"""ALFWorld on its real engine as a GenEnv domain.

Seeds are game directories in ALFWorld's official layout (`dataset.py`): the official
`json_2.1.1` download when `data_dir` is given, else a generated set (real scenes, grammar, goals
and engine; synthetic placements) built and verified once into a cache directory. The agent
plays a game over many turns (`episode.py`) and is rewarded with the engine's `won`. The simulator
writes a new game as a JSON spec (`specs.py`), accepted only once the engine has loaded it and the
expert's walkthrough has reached `won` on it (`engine.verify`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from genenv_jax.core.config_checks import name_list
from genenv_jax.core.config_checks import ConfigError
from genenv_jax.domains.alfworld import dataset, engine, specs, vocab
from genenv_jax.domains.alfworld.episode import ADMISSIBLE_MODES, ALFWorldEnvironment
from genenv_jax.domains.alfworld.games import compile_game, task_sentence
from genenv_jax.domains.alfworld.pddl_facts import spec_from_game
from genenv_jax.domains.alfworld.sampling import sample_spec
from genenv_jax.domains.alfworld.scenes import load_scene, scene_numbers
from genenv_jax.domains.experience import DomainSupport
from genenv_jax.domains.base import ChatPrompt, Domain, Invalid, Rejection, ScoreResult, Task, curriculum_line
from genenv_jax.domains.generation import JSON_REASONS, extract_json_object
from genenv_jax.domains.alfworld.synthetic import dreamgym_support

DOMAIN_NAME = "alfworld"
DEFAULT_GAMES = {"train": 600, "validation": 140, "test": 134}  # ALFWorld's valid_seen / valid_unseen sizes
REJECTION_REASONS = (*JSON_REASONS, "not_an_object", *specs.SPEC_REASONS, "same_as_seed", *engine.VERIFY_REASONS)

SIMULATOR_SYSTEM = (
    "You design games for an agent in ALFWorld, a household text game played on a real engine. You are given a "
    "seed game as a JSON spec and the scene it is set in, and write one new game spec. The engine checks "
    "every game: it must use only the scene's receptacles and objects, and be solvable.")
_DIFFICULTY_TEXT = {
    "harder": ("Make the new game HARDER than the seed: a task type with more steps (pick_and_place_simple < "
               "look_at_obj_in_light < clean / heat / cool < pick_two_obj_and_place), targets inside closed "
               "receptacles (cabinet, drawer, fridge, safe) and more objects of other types around them."),
    "easier": ("Make the new game EASIER than the seed: fewer steps (pick_and_place_simple or "
               "look_at_obj_in_light), the target on an open surface (countertop, table, shelf), few other objects."),
    "similar": "Keep the difficulty about the SAME as the seed, with a different target, goal or placements.",
}
_TASK_RULES = (
    "Task types: pick_and_place_simple (put the object in a receptacle of the goal type), look_at_obj_in_light "
    "(hold the object and turn on a desklamp: set toggle to \"desklamp\", receptacle to null, and place the "
    "desklamp on a desk, sidetable, dresser, shelf or table), pick_clean_then_place_in_recep (clean it in the "
    "sinkbasin first), pick_heat_then_place_in_recep (heat it in the microwave first), "
    "pick_cool_then_place_in_recep (cool it in the fridge first), pick_two_obj_and_place (two of the object). "
    "At least one target (two for pick_two) must start outside every receptacle of the goal type.")
_TASK_LINE = re.compile(r"Your task is to: (.*?)\.\"", re.DOTALL)


def default_cache_root() -> Path:
    """Where generated game sets are kept: $GENENV_CACHE/alfworld (default ~/.cache/genenv_jax)."""
    return Path(os.environ.get("GENENV_CACHE") or Path.home() / ".cache" / "genenv_jax") / "alfworld"


class ALFWorldDomain(Domain):
    """ALFWorld's six task types on textworld's PDDL engine; see the module docstring.

    Args:
      data_dir: an ALFWorld data directory (holding json_2.1.1, or train/valid_seen/valid_unseen);
        "" -> the generated set, built on first use into `cache_dir`.
      games: generated games per split ('train', 'validation' = valid_seen, 'test' = valid_unseen).
      task_types: which of the six task types to use.
      max_steps: agent steps per episode (ALFWorld's 50).
      admissible: show the available commands 'every_turn', on the 'first_turn' only, or 'never'.
      salt: generation seed of the generated set. build_workers: processes for building it (0: all cores).
    """

    name = DOMAIN_NAME
    rejection_reasons = REJECTION_REASONS

    def __init__(self, data_dir: str = "", games: Mapping[str, int] | None = None,
                 task_types: Sequence[str] = vocab.TASK_TYPES, max_steps: int = 50, admissible: str = "every_turn",
                 salt: str = "genenv", cache_dir: str = "", build_workers: int = 0):
        task_types = name_list(task_types, "alfworld: task_types")
        unknown = [t for t in task_types if t not in vocab.TASK_TYPES]
        if unknown:
            raise ValueError(f"unknown ALFWorld task types {unknown}; expected a subset of {vocab.TASK_TYPES}")
        if admissible not in ADMISSIBLE_MODES:
            raise ValueError(f"admissible={admissible!r}; expected one of {ADMISSIBLE_MODES}")
        self.games = dict(DEFAULT_GAMES if games is None else games)
        bad = sorted(set(self.games) - set(dataset.OFFICIAL_SPLITS))
        if bad or any(not isinstance(n, int) or n < 0 for n in self.games.values()):
            raise ValueError(f"games={self.games}: expected counts >= 0 for splits {sorted(dataset.OFFICIAL_SPLITS)}")
        self.data_dir, self.task_types, self.max_steps = data_dir, tuple(task_types), max_steps
        self.admissible, self.salt, self.build_workers = admissible, salt, build_workers
        self.cache_dir = cache_dir

    # ------------------------------------------------------------------ seeds
    @property
    def root(self) -> Path:
        """The data root: `data_dir`, or the generated set's directory (keyed by what builds it)."""
        if self.data_dir:
            return Path(self.data_dir)
        key = json.dumps([dataset.BUILD_VERSION, self.salt, sorted(self.games.items()), list(self.task_types),
                          self.max_steps])
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return Path(self.cache_dir or default_cache_root()) / f"generated-{digest}"

    def _ensure_built(self) -> None:
        if not self.data_dir and not (self.root / "json_2.1.1" / "build.json").exists():
            dataset.build(self.root, self.games, salt=self.salt, task_types=self.task_types,
                          max_steps=self.max_steps, workers=self.build_workers)

    def load_seeds(self) -> list[Task]:
        """Games of 'train', 'validation' (valid_seen) and 'test' (valid_unseen), in path order."""
        if self.data_dir:
            base = dataset.split_root(self.data_dir)
            if not any((base / d).is_dir() for d in dataset.OFFICIAL_SPLITS.values()):
                raise FileNotFoundError(f"ALFWorld data_dir {self.data_dir}: holds neither json_2.1.1/ nor "
                                        f"{'/'.join(dataset.OFFICIAL_SPLITS.values())} directories")
        self._ensure_built()
        tasks = []
        for split in dataset.OFFICIAL_SPLITS:
            if not self.data_dir and not self.games.get(split):
                continue
            folder = dataset.split_root(self.root) / dataset.OFFICIAL_SPLITS[split]
            if self.data_dir and not folder.is_dir():
                continue
            tasks += [self._task_of(e) for e in dataset.read_split(self.root, split, self.task_types)]
        return tasks

    def _task_of(self, entry: dataset.GameEntry) -> Task:
        spec = entry.spec or spec_from_game(entry.game, entry.traj)
        match = _TASK_LINE.search(entry.game["grammar"])
        sentence = match.group(1) if match else (task_sentence(spec) if spec else "")
        scene = entry.traj.get("scene", {}).get("floor_plan") or (f"FloorPlan{spec.scene}" if spec else "")
        return Task(domain=DOMAIN_NAME, task_id=str(Path(entry.path).parent), category=entry.traj["task_type"],
                    prompt={"task": sentence, "scene": scene},
                    verifier={"gamefile": entry.path, "walkthrough": entry.game.get("walkthrough"),
                              "spec": specs.write_spec(spec) if spec else None},
                    metadata={"split": entry.split, "alfworld_split": dataset.OFFICIAL_SPLITS[entry.split],
                              "source": "generated" if entry.spec else "data_dir"})

    def dreamgym(self) -> DomainSupport:
        if self.admissible != "first_turn":
            raise ConfigError(f"config.domain.options.admissible={self.admissible!r}: mode='dreamgym' on ALFWorld "
                              "needs 'first_turn' (the experience model predicts the engine's text without the "
                              "command list, so real episodes must look like synthetic ones)")
        return dreamgym_support()

    # ------------------------------------------------------------------ agent side
    def game_json(self, task: Task) -> dict[str, Any]:
        """The game.tw-pddl JSON of a task: its file under the data root, or compiled from its spec."""
        if task.verifier.get("gamefile"):
            return json.loads((dataset.split_root(self.root) / task.verifier["gamefile"]).read_text())
        return compile_game(specs.read_spec(task.verifier["spec"]))

    def environment(self, task: Task) -> ALFWorldEnvironment:
        return ALFWorldEnvironment(task, self.game_json(task), max_steps=self.max_steps, admissible=self.admissible)

    def agent_prompt(self, task: Task) -> ChatPrompt:
        """The first prompt (the engine's opening text and commands): one engine reset, memoised."""
        return self._first_prompt(task.dumps())

    @functools.lru_cache(maxsize=256)
    def _first_prompt(self, task_json: str) -> ChatPrompt:
        return self.environment(Task.loads(task_json)).reset()

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """The response as a one-step episode (won only if one command solves the game)."""
        env = self.environment(task)
        return env.score([{"role": "assistant", "content": response}])

    def reference_turns(self, task: Task) -> list[str]:
        """The walkthrough's commands, one `Action:` reply per step (Fast Downward plans a game that
        was stored without one)."""
        commands = task.verifier.get("walkthrough") or engine.planner_walkthrough(self.game_json(task))
        return [f"Action: {c}" for c in commands]

    def reference_response(self, task: Task) -> str:
        return self.reference_turns(task)[0]

    def summary(self, per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """alfworld: success over all games (ALFWorld's 'All'); alfworld_type_mean: over task types;
        alfworld/<pick|look|clean|heat|cool|pick2>: per task type, as ALFWorld papers label them."""
        rows = {c: per_category[c] for c in per_category if per_category[c]["n"]}
        if not rows:
            return {}
        out = {"alfworld": sum(r["correct"] for r in rows.values()) / sum(r["n"] for r in rows.values()),
               "alfworld_type_mean": sum(r["accuracy"] for r in rows.values()) / len(rows)}
        out.update({f"alfworld/{vocab.TASK_LABELS[c]}": r["accuracy"] for c, r in rows.items() if c in vocab.TASK_LABELS})
        return out

    # ------------------------------------------------------------------ simulator side
    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        """The seed's spec, its scene's receptacles and object types, the task rules and the
        difficulty asked for; the reply is one JSON spec."""
        success = curriculum_line(recent_success, alpha, difficulty, doing="solves games")
        shown = seed.verifier.get("spec") or {"scene": seed.prompt["scene"], "task_type": seed.category,
                                              "task": seed.prompt["task"]}  # a game no spec can express
        scene = _scene_number(seed)
        receptacles = sorted(specs.receptacle_names(scene), key=vocab.natural_key)
        objects = sorted(t.lower() for t in load_scene(scene).object_types)
        user = "\n".join([
            "Seed game:", "```json", json.dumps(shown, ensure_ascii=False), "```",
            f"Scene FloorPlan{scene} receptacles: {', '.join(receptacles)}",
            f"Objects that can appear in it: {', '.join(objects)}",
            "", success, _DIFFICULTY_TEXT[difficulty], "", _TASK_RULES, "",
            "Write ONE new game in the seed's scene as a JSON object with the keys scene, task_type, object, "
            "receptacle (a receptacle type such as \"countertop\", or null), toggle (\"desklamp\" or null) and "
            "placements (receptacle name -> list of the objects in it, every object of the game). "
            "Reply with the JSON object inside a ```json code block and nothing else.",
        ])
        return ChatPrompt(messages=[{"role": "system", "content": SIMULATOR_SYSTEM}, {"role": "user", "content": user}])

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """Reads the simulator's spec and builds its game; a Task only if the engine verifies it."""
        def rejected(reason: str, detail: str) -> Rejection:
            return self.reject(Invalid(reason, detail), seed, text)

        try:
            spec = specs.read_spec(extract_json_object(text))
        except Invalid as e:
            return self.reject(e, seed, text)
        if spec.task_type not in self.task_types:
            return rejected("unknown_task_type", f"{spec.task_type} is not used in this run")
        written = specs.write_spec(spec)
        if seed.verifier.get("spec") is not None and written == specs.write_spec(specs.read_spec(seed.verifier["spec"])):
            return rejected("same_as_seed", "the spec is the seed's")
        try:
            game = compile_game(spec)
        except ValueError as e:
            return rejected("unsolvable", str(e)[:200])
        verdict = engine.verify(game, max_steps=self.max_steps)
        if not verdict.ok:
            return rejected(verdict.reason, verdict.detail)
        return Task(domain=DOMAIN_NAME, task_id=f"{seed.task_id}~{spec.digest()}", category=spec.task_type,
                    prompt={"task": task_sentence(spec), "scene": f"FloorPlan{spec.scene}"},
                    verifier={"gamefile": None, "walkthrough": game["walkthrough"], "spec": written},
                    parent_id=seed.task_id, difficulty=difficulty, metadata={"source": "simulator"})

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """A new game of the seed's task type in the seed's scene, as the simulator is asked to write
        it: `sibling` when it is one, else one sampled within ALFWorld's rules (parse_task accepts it)."""
        seed_spec = seed.verifier.get("spec")
        scene = _scene_number(seed)
        if (sibling is not None and sibling.verifier.get("spec") not in (None, seed_spec)
                and sibling.verifier["spec"]["scene"] == f"FloorPlan{scene}"):
            return _fenced(sibling.verifier["spec"])
        for attempt in range(20):
            spec = sample_spec(random.Random(f"reference/{seed.task_id}/{attempt}"), [scene], seed.category)
            if specs.write_spec(spec) != seed_spec:
                return _fenced(specs.write_spec(spec))
        raise ValueError(f"{seed.task_id}: no new game of its type could be sampled in its scene")


def _scene_number(task: Task) -> int:
    """The ALFRED floor plan a task is set in (a scene with a shipped layout)."""
    name = task.prompt.get("scene", "")
    number = int(name[len("FloorPlan"):]) if name.startswith("FloorPlan") and name[9:].isdigit() else -1
    if number not in scene_numbers():
        raise ValueError(f"{task.task_id}: scene {name!r} has no shipped ALFRED layout")
    return number


def _fenced(spec: Mapping[str, Any]) -> str:
    return "```json\n" + json.dumps(spec, ensure_ascii=False) + "\n```"


__all__ = ["ALFWorldDomain", "DOMAIN_NAME"]
