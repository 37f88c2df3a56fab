"""Game directories in ALFWorld's official layout: building the generated seed sets, reading them
or the official `json_2.1.1` download.

    <root>/json_2.1.1/{train,valid_seen,valid_unseen}/<task_type>-<Object>-None-<Receptacle>-<scene>/<trial>/
        game.tw-pddl      (pddl_domain, grammar, pddl_problem, walkthrough, solvable)
        traj_data.json    (task_type, pddl_params, scene, turk_annotations; ours add genenv.spec)

Generated splits follow ALFWorld: train and valid_seen use ALFRED's training floor plans,
valid_unseen only its held-out ones. Every generated game is verified on the engine before it is
written; one that fails is replaced by the next sample, and the reasons are counted in
`build.json`. A build goes to a temporary directory that is renamed into place when complete.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from genenv_jax.core.errors import read_json_object
from genenv_jax.domains.alfworld import engine, vocab
from genenv_jax.domains.alfworld.games import GameSpec, compile_game, traj_data
from genenv_jax.domains.alfworld.sampling import sample_spec

# The loop's split names -> ALFWorld's directory names.
OFFICIAL_SPLITS = {"train": "train", "validation": "valid_seen", "test": "valid_unseen"}
SPLIT_SCENES = {"train": vocab.TRAIN_SCENES, "validation": vocab.TRAIN_SCENES, "test": vocab.UNSEEN_SCENES}
BUILD_VERSION = 2   # bump when generation changes what a (split, index) produces (2: lamps are never targets)
MAX_ATTEMPTS = 20   # samples tried per game before the build gives up


@dataclasses.dataclass(frozen=True)
class GameEntry:
    """One game directory: its split, path relative to the data root, traj_data and game JSON."""

    split: str
    path: str
    traj: dict[str, Any]
    game: dict[str, Any]

    @property
    def spec(self) -> GameSpec | None:
        spec = self.traj.get("genenv", {}).get("spec")
        return GameSpec.from_json(spec) if spec else None


def game_dir_name(spec: GameSpec) -> str:
    return f"{spec.task_type}-{spec.object}-None-{spec.receptacle or spec.toggle}-{spec.scene}"


def _generate_one(args: tuple[str, int, str, tuple[str, ...], int]) -> tuple[GameSpec, dict, dict[str, int], float]:
    """(spec, game, rejected reasons, verify seconds) for game `index` of a split; deterministic."""
    split, index, salt, task_types, max_steps = args
    rejected: dict[str, int] = {}
    task_type = task_types[index % len(task_types)]
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"{salt}/{split}/{index}/{attempt}")
        spec = sample_spec(rng, list(SPLIT_SCENES[split]), task_type)
        try:
            game = compile_game(spec)
        except ValueError:
            rejected["unsolvable"] = rejected.get("unsolvable", 0) + 1
            continue
        verdict = engine.verify(game, max_steps=max_steps)
        if verdict.ok:
            return spec, game, rejected, verdict.seconds
        rejected[verdict.reason] = rejected.get(verdict.reason, 0) + 1
    raise RuntimeError(f"no verifiable {task_type} game for {split}[{index}] in {MAX_ATTEMPTS} samples: {rejected}")


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1))


def build(root: str | os.PathLike, counts: Mapping[str, int], salt: str = "genenv", task_types=vocab.TASK_TYPES,
          max_steps: int = 50, workers: int = 0, log=print) -> dict[str, Any]:
    """Generates and verifies `counts[split]` games per split into `root` (see the module docstring);
    returns the build summary (also written to <root>/json_2.1.1/build.json)."""
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root.parent))
    jobs = [(split, i, salt, tuple(task_types), max_steps) for split, n in counts.items() for i in range(n)]
    start, rejected, verify_s = time.monotonic(), {}, 0.0
    workers = workers or max(1, (os.cpu_count() or 1))
    log(f"ALFWorld: generating and verifying {len(jobs)} games into {root} ({workers} processes)")
    spawn = multiprocessing.get_context("spawn")  # never fork: the caller may be running JAX
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) if workers > 1 else _Serial() as pool:
        for (split, index, *_), (spec, game, rej, seconds) in zip(jobs, pool.map(_generate_one, jobs)):
            trial = staging / "json_2.1.1" / OFFICIAL_SPLITS[split] / game_dir_name(spec) / f"trial_genenv_{index:05d}"
            _write_json(trial / "game.tw-pddl", game)
            _write_json(trial / "traj_data.json", traj_data(spec))
            for reason, n in rej.items():
                rejected[reason] = rejected.get(reason, 0) + n
            verify_s += seconds
    summary = {"version": BUILD_VERSION, "salt": salt, "counts": dict(counts), "task_types": list(task_types),
               "max_steps": max_steps, "rejected": rejected, "verify_seconds": round(verify_s, 1),
               "wall_seconds": round(time.monotonic() - start, 1)}
    _write_json(staging / "json_2.1.1" / "build.json", summary)
    try:
        os.rename(staging, root)
    except OSError:  # another process finished the same build first: keep theirs
        shutil.rmtree(staging, ignore_errors=True)
        if not (root / "json_2.1.1" / "build.json").exists():
            raise
    log(f"ALFWorld: {sum(counts.values())} games in {summary['wall_seconds']} s; replaced samples: {rejected or 'none'}")
    return summary


class _Serial:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def map(fn, items):
        return map(fn, items)


def split_root(data_dir: str | os.PathLike) -> Path:
    """The directory holding train/valid_seen/valid_unseen: `data_dir` or its json_2.1.1."""
    data_dir = Path(data_dir)
    nested = data_dir / "json_2.1.1"
    return nested if nested.is_dir() else data_dir


def read_split(data_dir: str | os.PathLike, split: str, task_types=vocab.TASK_TYPES) -> Iterator[GameEntry]:
    """The playable games of a split, in path order, as ALFWorld's loader picks them: a
    traj_data.json beside a game.tw-pddl marked solvable, of a wanted task type, skipping the
    'movable' and 'Sliced' variants it does not support."""
    base = split_root(data_dir)
    folder = base / OFFICIAL_SPLITS[split]
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no {OFFICIAL_SPLITS[split]} directory in the ALFWorld data dir {data_dir}")
    for traj_path in sorted(folder.rglob("traj_data.json")):
        game_path = traj_path.with_name("game.tw-pddl")
        rel = str(game_path.relative_to(base))
        if "movable" in rel or "Sliced" in rel or not game_path.exists():
            continue
        traj, game = read_json_object(traj_path), read_json_object(game_path)  # one line naming the file
        if traj.get("task_type") in task_types and game.get("solvable") is True:
            yield GameEntry(split=split, path=rel, traj=traj, game=game)
