"""ALFWorld on its real engine (the optional extra; the whole module skips without it).

Generated games of all six task types on the seen and unseen splits (a walkthrough reaches `won`
on the engine at its last command and not before; wrong sequences never do), the splits' scenes,
the expert's success rate and the engine's verdicts, Fast Downward as an independent expert, the
simulator's specs (tests/fixtures/alfworld_specs.json: accepted games, every rejection reason,
hostile text that is always a Rejection and never reaches a game file), ALFWorld's official
directory layout (a second domain over the built directory, the evaluator with an oracle and a
no-op agent, skipped and missing games), game files read back as specs, action parsing and
episodes, environments in worker processes, the summary and reference generations.

One small generated set (6 games per split) is built once for the module.
"""

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

EXTRA = "needs the optional ALFWorld extra: pip install -e '.[alfworld]'"
pytest.importorskip("alfworld", reason=EXTRA)
pytest.importorskip("textworld", reason=EXTRA)
pytest.importorskip("fast_downward", reason=EXTRA)
pytestmark = pytest.mark.alfworld  # needs the optional engine (make alfworld)

from genenv_jax import evaluation  # noqa: E402
from genenv_jax.text import tokenization  # noqa: E402
from genenv_jax.domains.alfworld import ALFWorldDomain, dataset, engine, specs, vocab  # noqa: E402
from genenv_jax.domains.alfworld.domain import REJECTION_REASONS  # noqa: E402
from genenv_jax.domains.alfworld.episode import NOTHING, ALFWorldEnvironment, parse_action  # noqa: E402
from genenv_jax.domains.alfworld.games import compile_game, instances  # noqa: E402
from genenv_jax.domains.alfworld.pddl_facts import spec_from_game  # noqa: E402
from genenv_jax.domains.alfworld.sampling import sample_spec  # noqa: E402
from genenv_jax.domains.alfworld.scenes import load_scene, mangle  # noqa: E402
from genenv_jax.domains.base import Rejection, Task  # noqa: E402
from genenv_jax.domains.generation import extract_json_object  # noqa: E402
from genenv_jax.episodes.environments import LocalEnvironments, WorkerEnvironments  # noqa: E402
from genenv_jax.domains.requests import Close, Reset, Score, Step  # noqa: E402
from tests.support import TESTS  # noqa: E402

GAMES = {"train": 6, "validation": 6, "test": 6}  # task types cycle by index: each split has all six
DOMAIN_REF = "genenv_jax.domains.alfworld:ALFWorldDomain"
FIXTURES = json.loads((TESTS / "fixtures" / "alfworld_specs.json").read_text())
APPLIANCE_VERBS = {"pick_clean_then_place_in_recep": "clean ", "pick_heat_then_place_in_recep": "heat ",
                   "pick_cool_then_place_in_recep": "cool "}
# A small bathroom game (3 receptacles: the engine loads it in well under a second).
SMALL_SPEC = {"scene": "FloorPlan419", "task_type": "pick_and_place_simple", "object": "handtowel",
              "receptacle": "sidetable", "toggle": None,
              "placements": {"sinkbasin 1": ["handtowel"], "sidetable 1": ["soapbottle"]}, "template": 0}


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    """The generated domain's options (the worker processes build their domain from these)."""
    return {"games": dict(GAMES), "cache_dir": str(tmp_path_factory.mktemp("alfworld_cache")), "build_workers": 2}


@pytest.fixture(scope="module")
def domain(options):
    d = ALFWorldDomain(**options)
    d.seeds("all")  # builds and verifies the set once
    return d


@pytest.fixture(scope="module")
def seeds(domain):
    return domain.seeds("all")


@pytest.fixture(scope="module")
def fixture_seed(seeds):
    return seeds[0]


def _fenced(spec) -> str:
    return "```json\n" + json.dumps(spec, ensure_ascii=False) + "\n```"


def _scene(task: Task) -> int:
    return int(task.prompt["scene"].removeprefix("FloorPlan"))


def _task(game_spec: dict, walkthrough=None) -> Task:
    return Task(domain="alfworld", task_id="hand-made", category=game_spec["task_type"], prompt={},
                verifier={"gamefile": None, "walkthrough": walkthrough, "spec": game_spec})


# ------------------------------------------------------------------------ generated games
@pytest.mark.slow
def test_generated_splits_cover_every_task_type(seeds):
    for split in GAMES:
        assert sorted(t.category for t in seeds if t.metadata["split"] == split) == sorted(vocab.TASK_TYPES)
    assert all(t.metadata["source"] == "generated" and t.verifier["spec"] and t.verifier["walkthrough"]
               for t in seeds)


@pytest.mark.slow
def test_walkthroughs_win_only_at_their_last_command(domain):
    """Seen (train) games: no prefix of the walkthrough is won, a final command aimed at another
    receptacle is not, the walkthrough is. Unseen (test) games: the walkthrough without its state
    change (clean / heat / cool, or taking the object to the lamp) is not won. (Every built game's
    walkthrough was also replayed to `won` at its last command by the build's `engine.verify`.)"""
    for task in domain.seeds("train") + domain.seeds("test"):
        game = domain.game_json(task)
        commands = task.verifier["walkthrough"]
        assert commands == game["walkthrough"] and game["solvable"] is True
        engine_game = engine.Game(game)
        engine_game.reset()
        assert not engine_game.won
        if task.metadata["split"] == "test":
            verb = APPLIANCE_VERBS.get(task.category, "take " if task.category == "look_at_obj_in_light" else None)
            if verb is not None:
                skipped = [c for c in commands if not c.startswith(verb)]
                assert len(skipped) < len(commands)
                for command in skipped:
                    engine_game.step(command)
                assert not engine_game.won, (task.task_id, skipped)
            engine_game.close()
            continue
        for command in commands[:-1]:
            assert command in engine_game.admissible, (task.task_id, command)
            engine_game.step(command)
            assert not engine_game.won, (task.task_id, command)
        last = commands[-1]
        target = last.rpartition(" to ")[2] if last.startswith("move ") else last.removeprefix("use ")
        other = next(name for name in sorted(specs.receptacle_names(_scene(task)))
                     if name.rpartition(" ")[0] != target.rpartition(" ")[0])
        wrong = last[:len(last) - len(target)] + other
        assert wrong != last
        engine_game.step(wrong)
        assert not engine_game.won, (task.task_id, wrong)
        engine_game.step(last)
        assert engine_game.won, task.task_id
        engine_game.close()


def test_unseen_split_uses_only_held_out_scenes(domain, seeds):
    assert not set(vocab.TRAIN_SCENES) & set(vocab.UNSEEN_SCENES)
    root = dataset.split_root(domain.root)
    for task in seeds:
        traj = json.loads((root / task.verifier["gamefile"]).with_name("traj_data.json").read_text())
        scene = _scene(task)
        assert traj["scene"]["scene_num"] == scene and task.verifier["spec"]["scene"] == f"FloorPlan{scene}"
        assert task.task_id.split("/")[1].endswith(f"-{scene}")
        allowed = vocab.UNSEEN_SCENES if task.metadata["split"] == "test" else vocab.TRAIN_SCENES
        assert scene in allowed, (task.task_id, task.metadata["split"])
    assert {t.metadata["alfworld_split"] for t in seeds} == {"train", "valid_seen", "valid_unseen"}


@pytest.mark.slow
def test_expert_success_rate(domain):
    """The build is itself a sample of the expert (sampled specs, compiled, verified; failures are
    replaced and counted in build.json); six more sampled specs over the training scenes."""
    summary = json.loads((dataset.split_root(domain.root) / "build.json").read_text())
    rejected = summary["rejected"]
    assert isinstance(rejected, dict) and set(rejected) <= set(engine.VERIFY_REASONS)
    assert all(isinstance(n, int) and n > 0 for n in rejected.values())
    assert summary["counts"] == GAMES and summary["version"] == dataset.BUILD_VERSION
    verdicts = []
    for task_type in vocab.TASK_TYPES:
        spec = sample_spec(random.Random(f"expert-check/{task_type}"), list(vocab.TRAIN_SCENES), task_type)
        verdicts.append(engine.verify(compile_game(spec)))
    failures = [v for v in verdicts if not v.ok]
    assert all(v.reason in engine.VERIFY_REASONS for v in failures)
    wins = sum(GAMES.values()) + len(verdicts) - len(failures)
    assert wins / (sum(GAMES.values()) + sum(rejected.values()) + len(verdicts)) >= 0.95
    assert len(failures) / len(verdicts) <= 0.05, [(v.reason, v.detail) for v in failures]


def test_engine_verdicts():
    game = compile_game(specs.read_spec(SMALL_SPEC))
    commands = game["walkthrough"]
    assert commands == ["go to sinkbasin 1", "take handtowel 1 from sinkbasin 1", "go to sidetable 1",
                        "move handtowel 1 to sidetable 1"]
    ok = engine.verify(game)
    assert ok.ok and "Your task is to: put a handtowel in sidetable." in ok.intro
    assert engine.verify(dict(game, walkthrough=[])).reason == "unsolvable"
    assert engine.verify(game, max_steps=3).reason == "too_long"
    short = engine.verify(dict(game, walkthrough=commands[:-1]))
    assert (short.reason, short.detail) == ("unsolvable", "won=False after step 3 of 3")
    longer = engine.verify(dict(game, walkthrough=commands + ["look"]))
    assert (longer.reason, longer.detail) == ("unsolvable", "won=True after step 4 of 5")
    skipping = engine.verify(dict(game, walkthrough=commands[1:]))
    assert skipping.reason == "unsolvable" and "not admissible" in skipping.detail
    assert engine.verify(game, time_limit_s=0.0).reason == "expert_timeout"
    broken = engine.verify(dict(game, pddl_problem="(define (problem broken)"))
    assert broken.reason == "engine_error" and len(broken.detail) <= 300


def test_fast_downward_solves_a_small_game_independently(domain):
    smallest = min(vocab.TRAIN_SCENES, key=lambda n: (len(load_scene(n).receptacles), n))
    spec = sample_spec(random.Random("planner"), [smallest], "pick_and_place_simple")
    game = compile_game(spec)
    plan = engine.planner_walkthrough(game)
    assert plan
    replay = engine.Game(game)
    replay.reset()
    for command in plan:
        assert not replay.won and command in replay.admissible, command
        replay.step(command)
    assert replay.won
    # A task stored without a walkthrough gets the planner's as its reference turns.
    assert domain.reference_turns(_task(specs.write_spec(spec))) == [f"Action: {c}" for c in plan]


# ------------------------------------------------------------------------ simulator specs
def _fixture_text(entry) -> str:
    pad = entry.get("pad")
    return entry["text"].replace("{PAD}", pad["unit"] * pad["times"]) if pad else entry["text"]


def _hostile(entry) -> list[str]:
    pad = entry.get("pad")
    return [h.replace("{PAD}", pad["unit"] * pad["times"]) if pad else h for h in entry.get("hostile", [])]


def _fixture_param(entry):
    return pytest.param(entry, id=entry["name"])


ACCEPTED = [e for e in FIXTURES if e["expect"] == "ok"]


def test_fixture_file_covers_every_reason():
    names = [e["name"] for e in FIXTURES]
    assert len(names) == len(set(names))
    assert {e["category"] for e in ACCEPTED} == set(vocab.TASK_TYPES)
    expected = {e["expect"] for e in FIXTURES} - {"ok"}
    assert expected <= set(REJECTION_REASONS)
    # Every reason a spec can get, except those tested elsewhere: same_as_seed (it needs the seed),
    # too_long (a domain with a small step cap), expert_timeout and engine_error (test_engine_verdicts:
    # no spec reaches them), unsolvable (likewise: the expert solves every spec read_spec accepts;
    # test_engine_verdicts builds one by hand).
    assert set(REJECTION_REASONS) - expected == {"same_as_seed", "too_long", "expert_timeout", "engine_error",
                                                 "unsolvable"}


@pytest.mark.parametrize("entry", [_fixture_param(e) for e in FIXTURES])
def test_simulator_spec_fixture(domain, fixture_seed, entry):
    text = _fixture_text(entry)
    result = domain.parse_task(text, fixture_seed, difficulty="harder")
    if entry["expect"] != "ok":
        assert isinstance(result, Rejection), f"accepted: {result.verifier['spec']}"
        assert result.reason == entry["expect"], result.detail
        assert result.seed_id == fixture_seed.task_id and result.raw_text == text and result.domain == "alfworld"
        assert len(result.detail) <= 300
        assert Rejection.loads(result.dumps()) == result
        return
    assert isinstance(result, Task), (result.reason, result.detail)
    assert Task.loads(result.dumps()) == result
    assert result.category == entry["category"] and result.parent_id == fixture_seed.task_id
    assert result.difficulty == "harder" and result.metadata == {"source": "simulator"}
    assert result.verifier["gamefile"] is None and result.task_id.startswith(fixture_seed.task_id + "~")
    spec = specs.read_spec(result.verifier["spec"])
    assert result.prompt["scene"] == f"FloorPlan{spec.scene}"
    game = compile_game(spec)
    assert game["walkthrough"] == result.verifier["walkthrough"]
    for raw in _hostile(entry):
        assert raw not in game["pddl_problem"] and raw not in game["grammar"]
    # The environment compiles the game from the spec (no game file) and the walkthrough wins.
    env = domain.environment(result)
    first = env.reset()
    assert f"Your task is to: {result.prompt['task']}." in first.messages[-1]["content"]
    turns = domain.reference_turns(result)
    for i, turn in enumerate(turns):
        outcome = env.step(turn)
        assert outcome.info["won"] == (i == len(turns) - 1) and outcome.done == (i == len(turns) - 1)
        assert outcome.info["errors"] == {}
    score = env.score([])
    assert score.reward == 1.0 and score.details["steps"] == len(turns)


_PDDL_WORDS = {"define", "problem", ":domain", "alfred", ":objects", ":init", ":goal", "and", "exists", "not", "=",
               "-", "agent", "location", "receptacle", "object", "otype", "rtype", "agent1"}


def _allowed_tokens(spec) -> set[str]:
    """Every token a problem of this spec may hold, from vocabulary and ids alone (never spec text)."""
    scene = load_scene(spec.scene)
    predicates = set(re.findall(r"\(([A-Za-z]+)[\s)]", vocab.data_text("alfred.pddl")))
    return (_PDDL_WORDS | predicates | {f"{t}Type" for t in vocab.OBJECT_TYPES | vocab.STATIC_RECEPTACLES}
            | {"?r", "?o", "?o1", "?o2", "?ot", "?a", "?l"} | {f"{spec.task_type}_{spec.digest()}"}
            | {mangle(r.id) for r in scene.receptacles} | {mangle(r.location) for r in scene.receptacles}
            | {mangle(scene.start)} | {mangle(i.id) for i in instances(spec)})


@pytest.mark.parametrize("entry", [pytest.param(e, id=e["name"]) for e in ACCEPTED])
def test_accepted_spec_text_reaches_the_problem_only_as_vocabulary(entry):
    """What parse_task compiles (read_spec of the extracted JSON): the problem is one well-formed
    PDDL problem whose every token is vocabulary or an id the compiler made."""
    text = _fixture_text(entry)
    spec = specs.read_spec(extract_json_object(text))
    pddl = compile_game(spec)["pddl_problem"]
    for section in ("(define", "(:domain", "(:objects", "(:init", "(:goal"):
        assert pddl.count(section) == 1, section
    assert pddl.isascii() and ";" not in pddl and '"' not in pddl and "\\" not in pddl
    depth = 0
    for char in pddl:
        depth += {"(": 1, ")": -1}.get(char, 0)
        assert depth >= 0
    assert depth == 0
    allowed = _allowed_tokens(spec)
    tokens = set(re.findall(r"[^\s()]+", pddl))
    assert tokens <= allowed, tokens - allowed
    # No word of the raw text outside the vocabulary (the prose around the spec, PDDL written in
    # it) appears in the problem, even as part of a token.
    known = ({t.lower().lstrip(":?") for t in allowed} | set(vocab.TYPE_BY_NAME) | set(vocab.TASK_TYPES)
             | set(specs.FIELDS) | {"template", "json", "null"})
    strangers = {w for w in re.findall(r"\w+", text.lower()) if w not in known}
    assert strangers and not strangers & set(re.findall(r"\w+", pddl.lower()))


HOSTILE_CHARS = "()[]{};:\"'\\`#.,!?-=*&|<>/\n\t\x00\x7f\u200b\u202e\u00a0\u2028\ufeff\U0001f600\u00e9\u4e2d\u0301\ud7ff"


def test_hostile_text_in_any_field_is_rejected_and_never_raises(domain, fixture_seed):
    """Random non-alphanumeric, non-blank text added to each name of two valid specs: always a
    Rejection with a known reason (before the engine runs), never an exception."""
    rng = random.Random(0)
    look = {"scene": "FloorPlan316", "task_type": "look_at_obj_in_light", "object": "book", "receptacle": None,
            "toggle": "desklamp", "placements": {"bed 1": ["book"], "desk 1": ["desklamp"]}}
    tried = 0
    for base in (SMALL_SPEC, look):
        paths = [(k,) for k, v in base.items() if isinstance(v, str)]
        paths += [("placements", name) for name in base["placements"]]
        paths += [("placements", name, i) for name, items in base["placements"].items() for i in range(len(items))]
        for path in paths:
            for _ in range(6):
                payload = "".join(rng.choice(HOSTILE_CHARS) for _ in range(rng.randint(1, 12)))
                if not payload.strip():
                    continue
                spec = json.loads(json.dumps(base))
                front = rng.random() < 0.5
                if len(path) == 1:
                    spec[path[0]] = payload + spec[path[0]] if front else spec[path[0]] + payload
                elif len(path) == 2:
                    key = payload + path[1] if front else path[1] + payload
                    spec["placements"] = {(key if k == path[1] else k): v for k, v in spec["placements"].items()}
                else:
                    items = spec["placements"][path[1]]
                    items[path[2]] = payload + items[path[2]] if front else items[path[2]] + payload
                for text in (_fenced(spec), json.dumps(spec), "Here:\n" + _fenced(spec)[:-3]):
                    result = domain.parse_task(text, fixture_seed)
                    assert isinstance(result, Rejection), (path, payload)
                    assert result.reason in REJECTION_REASONS and result.reason not in engine.VERIFY_REASONS
                    tried += 1
    assert tried > 100


def test_same_as_seed_and_run_limits(domain, fixture_seed, options):
    spec = fixture_seed.verifier["spec"]
    assert domain.parse_task(_fenced(spec), fixture_seed).reason == "same_as_seed"
    # The same game written differently (key order, case, spacing, placement order) is still the seed.
    variant = {k: spec[k] for k in reversed(list(spec))}
    variant["object"] = f"  {spec['object'].upper()} "
    variant["placements"] = {name.upper(): list(reversed(items)) for name, items in reversed(spec["placements"].items())}
    assert domain.parse_task("Sure!\n" + _fenced(variant), fixture_seed).reason == "same_as_seed"
    # A run's task types and step cap apply to generations (both rejected before the engine runs).
    picks_only = ALFWorldDomain(**dict(options, task_types=("pick_and_place_simple",)))
    look = next(e for e in ACCEPTED if e["category"] == "look_at_obj_in_light")
    assert picks_only.parse_task(_fixture_text(look), fixture_seed).reason == "unknown_task_type"
    short = ALFWorldDomain(**dict(options, max_steps=3))
    too_long = short.parse_task(_fenced(SMALL_SPEC), fixture_seed)
    assert (too_long.reason, too_long.detail) == ("too_long", "walkthrough has 4 steps; the cap is 3")


# ------------------------------------------------------------------------ official directory layout
def test_built_set_is_in_the_official_layout_and_reads_back_as_data_dir(domain, seeds):
    root = dataset.split_root(domain.root)
    assert root == Path(domain.root) / "json_2.1.1"
    for task in seeds:
        split_dir, game_dir, trial = Path(task.verifier["gamefile"]).parts[:3]
        spec = task.verifier["spec"]
        assert split_dir == dataset.OFFICIAL_SPLITS[task.metadata["split"]] and trial.startswith("trial_")
        obj = vocab.TYPE_BY_NAME[spec["object"]]
        goal = vocab.TYPE_BY_NAME[spec["receptacle"] or spec["toggle"]]
        assert game_dir == f"{task.category}-{obj}-None-{goal}-{_scene(task)}"
        assert (root / split_dir / game_dir / trial / "traj_data.json").is_file()
    key = [(t.task_id, t.category, t.metadata["split"], t.verifier["walkthrough"], t.verifier["spec"]) for t in seeds]
    for data_dir in (domain.root, root):  # the data root, or its json_2.1.1 itself
        official = ALFWorldDomain(data_dir=str(data_dir))
        assert [(t.task_id, t.category, t.metadata["split"], t.verifier["walkthrough"], t.verifier["spec"])
                for t in official.seeds("all")] == key
        assert [t.task_id for t in official.seeds("test")] == [t.task_id for t in domain.seeds("test")]
    with pytest.raises(ValueError, match="unknown split"):
        domain.seeds("valid_seen")


@pytest.mark.slow
def test_evaluator_on_the_official_layout(domain):
    """The evaluator plays the validation games with an oracle agent (the reference turns: every
    game won) and a no-op agent (`look` until the step cap ends the episode: none won)."""
    official = ALFWorldDomain(data_dir=str(domain.root))
    tasks = official.seeds("validation")
    tok = tokenization.load_tokenizer()
    turns = {t.prompt["task"]: official.reference_turns(t) for t in tasks}
    assert len(turns) == len(tasks) == 6

    def oracle(prompts, max_new_tokens):
        out = []
        for ids in prompts:
            text = tokenization.decode(tok, ids)
            sentence = re.search(r"Your task is to: (.*?)\.\n", text).group(1)
            out.append(tokenization.encode(tok, turns[sentence][text.count("<|im_start|>assistant") - 1]))
        return out

    report = evaluation.evaluate(official, tasks, oracle, tok, max_new_tokens=32, batch_size=8, max_turns=20,
                                 progress=False)
    assert report.per_category == {c: {"n": 1, "correct": 1.0, "accuracy": 1.0} for c in vocab.TASK_TYPES}
    assert report.summary == {"alfworld": 1.0, "alfworld_type_mean": 1.0,
                              **{f"alfworld/{label}": 1.0 for label in vocab.TASK_LABELS.values()}}

    look = tokenization.encode(tok, "Action: look")
    capped = ALFWorldDomain(data_dir=str(domain.root), max_steps=5)
    noop = evaluation.evaluate(capped, tasks[:1], lambda prompts, n: [look] * len(prompts), tok,
                               max_new_tokens=16, max_turns=20, progress=False)
    assert [it.reward for it in noop.items] == [0.0]
    assert [it.response_tokens for it in noop.items] == [5 * len(look)]  # ended by the step cap
    assert noop.summary == {"alfworld": 0.0, "alfworld_type_mean": 0.0,
                            f"alfworld/{vocab.TASK_LABELS[tasks[0].category]}": 0.0}


def test_data_dir_reads_official_games_and_skips_the_unplayable(domain, tmp_path):
    """A data dir laid out like ALFWorld's download (here without json_2.1.1): a game whose
    traj_data has no genenv spec is read back from its PDDL, one marked unsolvable and a 'movable'
    variant are skipped, a missing split is empty for the domain and an error for read_split; a
    data dir without any split is an error."""
    root = dataset.split_root(domain.root)
    originals = domain.seeds("validation")[:3]
    data = tmp_path / "alfworld_data"
    for i, task in enumerate(originals):
        source = (root / task.verifier["gamefile"]).parent
        rel = source.relative_to(root)
        if i == 2:
            rel = rel.parent.with_name("pick_and_place_with_movable_recep-" + rel.parent.name) / rel.name
        shutil.copytree(source, data / rel)
    plain = data / Path(originals[0].verifier["gamefile"]).parent / "traj_data.json"
    traj = json.loads(plain.read_text())
    del traj["genenv"]
    plain.write_text(json.dumps(traj))
    unsolvable = data / originals[1].verifier["gamefile"]
    unsolvable.write_text(json.dumps(dict(json.loads(unsolvable.read_text()), solvable=False)))

    official = ALFWorldDomain(data_dir=str(data))
    (seed,) = official.seeds("all")
    assert seed.task_id == originals[0].task_id and seed.metadata == {
        "split": "validation", "alfworld_split": "valid_seen", "source": "data_dir"}
    assert seed.verifier["spec"] == originals[0].verifier["spec"]  # read back from the game's PDDL
    assert seed.prompt == originals[0].prompt and seed.category == originals[0].category
    assert seed.verifier["walkthrough"] == originals[0].verifier["walkthrough"]
    assert seed.verifier["gamefile"] == originals[0].verifier["gamefile"]
    assert official.seeds("train") == [] and official.seeds("test") == []
    with pytest.raises(FileNotFoundError, match="valid_unseen"):
        list(dataset.read_split(data, "test"))
    # A data dir with no split directory at all (a wrong path) is an error, not an empty set.
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds neither json_2.1.1"):
        ALFWorldDomain(data_dir=str(tmp_path / "empty")).seeds("all")


def test_game_files_read_back_as_their_specs(domain):
    entries = [e for split in GAMES for e in dataset.read_split(domain.root, split)]
    assert len(entries) == sum(GAMES.values())
    for entry in entries:
        assert entry.spec is not None and spec_from_game(entry.game, entry.traj) == entry.spec, entry.path
    entry = entries[0]
    assert spec_from_game(entry.game, {}) is None
    assert spec_from_game(entry.game, dict(entry.traj, scene={"scene_num": 999})) is None
    assert spec_from_game(entry.game, dict(entry.traj, pddl_params=dict(entry.traj["pddl_params"],
                                                                        object_sliced=True))) is None
    # Objects a spec cannot express are left out of the simulator's view of the game.
    unknown = entry.game["pddl_problem"].replace("inReceptacle ", "inReceptacle Unicorn_bar_1 x) (inReceptacle ", 1)
    assert spec_from_game(dict(entry.game, pddl_problem=unknown), entry.traj) == entry.spec


def test_a_game_no_spec_can_express_still_seeds_the_simulator(domain, tmp_path):
    """An official game whose task a spec cannot say (here: marked sliced) keeps serving the agent,
    and the simulator is shown its scene, task type and sentence instead of a spec."""
    original = domain.seeds("train")[0]
    source = (dataset.split_root(domain.root) / original.verifier["gamefile"]).parent
    target = tmp_path / "data" / source.relative_to(dataset.split_root(domain.root))
    shutil.copytree(source, target)
    traj = json.loads((target / "traj_data.json").read_text())
    del traj["genenv"]
    traj["pddl_params"]["object_sliced"] = True
    (target / "traj_data.json").write_text(json.dumps(traj))
    official = ALFWorldDomain(data_dir=str(tmp_path / "data"))
    (seed,) = official.seeds("train")
    assert seed.verifier["spec"] is None and seed.verifier["walkthrough"] == original.verifier["walkthrough"]
    prompt = official.simulator_prompt(seed, [0.25], "easier").messages[1]["content"]
    assert seed.prompt["task"] in prompt and seed.prompt["scene"] in prompt and seed.category in prompt
    generated = official.parse_task(official.reference_generation(seed), seed)
    assert isinstance(generated, Task) and generated.category == seed.category
    assert generated.verifier["spec"]["scene"] == seed.prompt["scene"]


# ------------------------------------------------------------------------ episodes
def test_parse_action():
    assert parse_action("Action: go to cabinet 1") == "go to cabinet 1"
    assert parse_action("Think: the mug is usually in a cabinet.\nAction: Take Mug 1 from Cabinet 2.") == \
        "take mug 1 from cabinet 2"
    assert parse_action("> open drawer 1") == "open drawer 1"
    assert parse_action("look") == "look"
    assert parse_action("  `inventory`  \n") == "inventory"
    assert parse_action("Action: look\nAction:   go   to   desk 1 ") == "go to desk 1"  # the last one
    assert parse_action("I should look around.\nThen open the fridge.") is None
    assert parse_action("") is None and parse_action("  \n ") is None
    assert parse_action("Action: .") is None


def test_environment_episode_rules():
    spec = specs.read_spec(SMALL_SPEC)
    game = compile_game(spec)
    task = _task(specs.write_spec(spec), game["walkthrough"])
    with pytest.raises(ValueError, match="admissible"):
        ALFWorldEnvironment(task, game, admissible="sometimes")

    env = ALFWorldEnvironment(task, game, max_steps=5)
    with pytest.raises(RuntimeError):
        env.step("Action: look")
    first = env.reset()
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert "Your task is to: put a handtowel in sidetable." in first.messages[1]["content"]
    assert "Available commands: go to bathtubbasin 1" in first.messages[1]["content"]
    outcome = env.step("I should look around first.\nMaybe the towel is by the sink.")
    assert outcome.info["errors"] == {"no_action": 1} and outcome.info["command"] is None and not outcome.done
    assert outcome.observation[0]["content"].startswith(NOTHING)
    outcome = env.step("Action: take mug 1 from cabinet 9")
    assert outcome.info["errors"] == {"inadmissible": 1} and not outcome.done
    outcome = env.step("Think: the sink.\nAction: Go to SinkBasin 1.")
    assert outcome.info["command"] == "go to sinkbasin 1" and outcome.info["errors"] == {}
    assert "handtowel 1" in outcome.observation[0]["content"]
    assert not env.step("Action: look").done
    last = env.step("look")
    assert last.done and last.observation == [] and last.info["won"] is False
    assert env.step("Action: look").info["errors"] == {"step_after_done": 1}
    score = env.score([])
    assert score.reward == 0.0 and score.details == {"won": False, "steps": 5, "task_type": "pick_and_place_simple",
                                                     "no_action": 1, "inadmissible": 1}

    # The walkthrough wins at its last step; commands are listed on the first turn only.
    env = ALFWorldEnvironment(task, game, admissible="first_turn")
    assert "Available commands:" in env.reset().messages[1]["content"]
    transcript = []
    for i, command in enumerate(game["walkthrough"]):
        outcome = env.step(f"Action: {command}")
        transcript.append({"role": "assistant", "content": f"Action: {command}"})
        assert outcome.done == (i == len(game["walkthrough"]) - 1) and outcome.info["won"] == outcome.done
        assert all("Available commands:" not in m["content"] for m in outcome.observation)
    assert env.score(transcript).details == {"won": True, "steps": 4, "task_type": "pick_and_place_simple",
                                             "no_action": 0, "inadmissible": 0}
    # A stored rollout is scored by replaying its actions on a fresh environment.
    fresh = ALFWorldEnvironment(task, game, admissible="never")
    assert fresh.score([{"role": "user", "content": "hi"}] + transcript).reward == 1.0
    assert ALFWorldEnvironment(task, game).score(transcript[:-1]).reward == 0.0


@pytest.mark.slow
def test_environments_in_worker_processes_match_in_process(domain, options, seeds):
    """Two games stepped by their walkthroughs in spawned workers (each building the domain from
    its registry reference and options: they read the built set, they never build) and in this
    process: the same prompts, observations and rewards."""
    cache = Path(options["cache_dir"])
    before = sorted(p.name for p in cache.iterdir())
    games = sorted(domain.seeds("validation"), key=lambda t: len(domain.game_json(t)["pddl_problem"]))[:2]
    turns = [domain.reference_turns(t) for t in games]
    hosts = {"local": LocalEnvironments(domain), "workers": WorkerEnvironments(DOMAIN_REF, options, num_workers=2)}
    answers = {}
    try:
        for name, host in hosts.items():
            got = [host.call([Reset(ep, t) for ep, t in enumerate(games)])]
            for step in range(max(len(t) for t in turns)):
                got.append(host.call([Step(ep, t[step]) for ep, t in enumerate(turns) if step < len(t)]))
            got.append(host.call([Score(ep, []) for ep in range(len(games))]))
            host.call([Close(ep) for ep in range(len(games))])
            answers[name] = got
    finally:
        for host in hosts.values():
            host.close()
    assert answers["workers"] == answers["local"]
    assert [s.reward for s in answers["local"][-1]] == [1.0, 1.0]
    assert all(type(a).__name__ == "ChatPrompt" for a in answers["local"][0])
    assert all(type(a).__name__ == "StepOutcome" for batch in answers["local"][1:-1] for a in batch)
    assert sorted(p.name for p in cache.iterdir()) == before


# ------------------------------------------------------------------------ domain API
def test_warm_start_demonstration_is_the_walkthrough_with_the_engines_observations(domain):
    """The agent's SFT row of a seed: its `Action:` turns in the loss, the engine's real answers
    between them out of it, ending on the winning command."""
    from types import SimpleNamespace

    from genenv_jax.text.chat_text import ChatText
    from genenv_jax.loop.learning import demonstration_row

    text = ChatText.load(None)
    seed = next(t for t in domain.seeds("train") if t.category == "pick_heat_then_place_in_recep")
    config = SimpleNamespace(warmstart=SimpleNamespace(spell_added_tokens=False))
    row = demonstration_row(SimpleNamespace(text=text, domain=domain, config=config), seed)
    assert text.decode(row.prompt).count("Welcome to TextWorld, ALFRED!") == 1
    mask = np.asarray(row.loss_mask)
    agent = text.decode([t for t, m in zip(row.response, mask) if m])
    observed = text.decode([t for t, m in zip(row.response, mask) if not m])
    assert agent == "".join(domain.reference_turns(seed))
    assert "You heat the" in observed and "Available commands:" in observed
    assert row.response[-1] == text.end_id and mask[-1] == 1.0  # ends on the winning command's turn


def test_summary_prompts_and_reference_generations(domain, seeds):
    per_category = {"pick_and_place_simple": {"n": 2, "correct": 2.0, "accuracy": 1.0},
                    "look_at_obj_in_light": {"n": 4, "correct": 1.0, "accuracy": 0.25},
                    "pick_two_obj_and_place": {"n": 0, "correct": 0.0, "accuracy": 0.0}}
    assert domain.summary(per_category) == {"alfworld": 0.5, "alfworld_type_mean": 0.625, "alfworld/pick": 1.0,
                                            "alfworld/look": 0.25}  # a task type with no games is left out
    assert domain.summary({}) == {}

    by_size = sorted(domain.seeds("train"), key=lambda t: len(load_scene(_scene(t)).receptacles))
    chosen = []
    for seed in by_size:
        if seed.category not in {s.category for s in chosen}:
            chosen.append(seed)
    for seed in chosen[:3]:
        prompt = domain.simulator_prompt(seed, recent_success=[0.9, 1.0], difficulty="harder")
        user = prompt.messages[1]["content"]
        assert json.dumps(seed.verifier["spec"], ensure_ascii=False) in user and "HARDER" in user
        assert all(name in user for name in specs.receptacle_names(_scene(seed)))
        text = domain.reference_generation(seed)
        task = domain.parse_task(text, seed, difficulty="harder")
        assert isinstance(task, Task), (seed.task_id, task.reason, task.detail)
        assert task.category == seed.category and task.prompt["scene"] == seed.prompt["scene"]
        assert task.verifier["spec"] != seed.verifier["spec"] and task.parent_id == seed.task_id
        # A sibling in the seed's scene is written as it stands.
        assert extract_json_object(domain.reference_generation(seed, sibling=task)) == task.verifier["spec"]
    with pytest.raises(ValueError, match="difficulty"):
        domain.simulator_prompt(seeds[0], difficulty="impossible")


def test_constructor_checks():
    with pytest.raises(ValueError, match="unknown ALFWorld task types"):
        ALFWorldDomain(task_types=("pick_and_slice",))
    with pytest.raises(ValueError, match="admissible"):
        ALFWorldDomain(admissible="always")
    with pytest.raises(ValueError, match="games="):
        ALFWorldDomain(games={"valid_seen": 3})
    with pytest.raises(ValueError, match="games="):
        ALFWorldDomain(games={"train": -1})


@pytest.mark.slow
def test_transcripts_are_token_identical_with_prefix_reuse(domain, seeds, chat_text):
    """Greedy episodes of a random tiny agent on the engine (every reply an unknown command, so
    episodes run to the turn cap): the same tokens with and without the sampler's prefix pool, and
    each turn prefills only what it added."""
    from tests.support.reuse_episodes import run_both, transcript_new_tokens

    runs = run_both(domain, seeds[:2], chat_text)
    (plain, plain_stats), (reused, stats) = runs["off"], runs["on"]
    assert [e.tokens for e in plain] == [e.tokens for e in reused] and len(reused[0].turns) >= 4
    assert [e.transcript for e in plain] == [e.transcript for e in reused]
    assert stats.prefill.computed <= 1.1 * transcript_new_tokens(reused, 2) < plain_stats.prefill.computed
