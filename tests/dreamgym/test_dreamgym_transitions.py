"""DreamGym's real ALFWorld transitions (the optional extra; the whole module skips without it: the
alfworld package cannot be imported without its engine).

Two small generated games (a clean task in a 3-receptacle bathroom, a heat task in a 9-receptacle
kitchen with a fridge): expert, random and replayed agent episodes checked against the engine's own
feedback, `won` and admissible commands; the reasons given for inadmissible commands checked
against the engine's admissible list over every well-formed command of several states; the
reasoning functions on hand-made fact sets; `collect` deterministic per seed.
"""

import dataclasses
import random

import pytest

EXTRA = "needs the optional ALFWorld extra: pip install -e '.[alfworld]'"
pytest.importorskip("alfworld", reason=EXTRA)
pytest.importorskip("textworld", reason=EXTRA)
pytest.importorskip("fast_downward", reason=EXTRA)
pytestmark = pytest.mark.alfworld  # needs the optional engine (make alfworld)

from genenv_jax.domains.alfworld import ALFWorldDomain, engine, specs  # noqa: E402
from genenv_jax.domains.alfworld import reasoning as rs  # noqa: E402
from genenv_jax.domains.alfworld import transitions as tr  # noqa: E402
from genenv_jax.domains.alfworld.episode import NOTHING, ALFWorldEnvironment  # noqa: E402
from genenv_jax.domains.alfworld.games import compile_game  # noqa: E402
from genenv_jax.domains.base import Task  # noqa: E402
from genenv_jax.domains.experience import Transition  # noqa: E402

CLEAN_SPEC = {"scene": "FloorPlan419", "task_type": "pick_clean_then_place_in_recep", "object": "soapbar",
              "receptacle": "sidetable", "toggle": None,
              "placements": {"sinkbasin 1": ["soapbar"], "sidetable 1": ["candle"]}, "template": 0}
HEAT_SPEC = {"scene": "FloorPlan14", "task_type": "pick_heat_then_place_in_recep", "object": "bread",
             "receptacle": "countertop", "toggle": None,
             "placements": {"fridge 1": ["bread"], "countertop 2": ["mug"], "cabinet 3": ["ladle"]}, "template": 0}
FALLBACK = "the engine does not accept it in this state"


def _task(spec: dict, task_id: str) -> Task:
    game_spec = specs.read_spec(spec)
    return Task(domain="alfworld", task_id=task_id, category=game_spec.task_type, prompt={},
                verifier={"gamefile": None, "walkthrough": compile_game(game_spec)["walkthrough"],
                          "spec": specs.write_spec(game_spec)})


@pytest.fixture(scope="module")
def domain(tmp_path_factory):
    """A domain with no generated set: its tasks are compiled from their specs."""
    return ALFWorldDomain(games={"train": 0, "validation": 0, "test": 0},
                          cache_dir=str(tmp_path_factory.mktemp("alfworld_cache")))


@pytest.fixture(scope="module")
def clean_task():
    return _task(CLEAN_SPEC, "clean-419")


@pytest.fixture(scope="module")
def clean_expert(domain, clean_task):
    return tr.expert_transitions(domain, clean_task)


def _env_transcript(domain, task, replies):
    """The transcript the agent loop would record for these replies (ALFWorldEnvironment's own)."""
    env = ALFWorldEnvironment(task, domain.game_json(task), max_steps=domain.max_steps)
    transcript = [dict(m) for m in env.reset().messages]
    for reply in replies:
        transcript.append({"role": "assistant", "content": reply})
        outcome = env.step(reply)
        transcript += [dict(m) for m in outcome.observation]
        if outcome.done:
            break
    return transcript


# ------------------------------------------------------------------------ expert episodes
def test_expert_transitions_follow_the_engine(domain, clean_task, clean_expert):
    commands = clean_task.verifier["walkthrough"]
    game = engine.Game(domain.game_json(clean_task))
    state = game.reset().strip()
    assert [t.action for t in clean_expert] == commands
    for t, step in enumerate(clean_expert):
        assert (step.state, step.metadata["admissible"]) == (state, game.admissible)
        feedback = game.step(step.action).strip()
        assert (step.next_state, step.reward, step.done) == (feedback, float(game.won), game.won)
        assert step.valid and step.step == t and step.source == "expert" and step.real
        assert step.task == "put a clean soapbar in sidetable" and step.task_id == "clean-419"
        assert step.history == [[s.state, s.action] for s in clean_expert[:t]]
        assert "Available commands" not in step.state + step.next_state
        state = feedback
    assert game.won and [t.reward for t in clean_expert].count(1.0) == 1 and clean_expert[-1].reward == 1.0
    assert [t.done for t in clean_expert] == [False] * (len(commands) - 1) + [True]
    assert all(a.next_state == b.state for a, b in zip(clean_expert, clean_expert[1:]))
    assert clean_expert[0].state.endswith("Your task is to: put a clean soapbar in sidetable.")


def test_expert_reasoning_names_the_changes(domain, clean_expert):
    by_verb = {t.action.split()[0]: t for t in clean_expert}
    take = by_verb["take"]
    assert take.reasoning == ("You pick up the soapbar 1 from the sinkbasin 1: now holding soapbar 1; "
                              "soapbar 1 is no longer in sinkbasin 1.")
    assert by_verb["clean"].reasoning.endswith(": soapbar 1 is now clean.")
    assert clean_expert[0].reasoning == ("You arrive at sinkbasin 1: now at sinkbasin 1; "
                                         "no longer in the middle of the room.")
    won = clean_expert[-1].reasoning
    assert "soapbar 1 is now in sidetable 1" in won
    assert won.endswith(" The goal now holds: put a clean soapbar in sidetable.")
    assert not any("goal" in t.reasoning for t in clean_expert[:-1])
    for step in clean_expert:
        assert Transition.loads(step.dumps()) == step


def test_heat_game_opens_heats_and_explains_every_refusal(domain):
    """Every well-formed command over the game's names, at each state of the expert episode:
    `unmet_precondition` finds no reason exactly for the engine's admissible commands."""
    task = _task(HEAT_SPEC, "heat-14")
    steps = tr.expert_transitions(domain, task)
    reasons = {t.action: t.reasoning for t in steps}
    assert reasons["open fridge 1"] == "You open the fridge 1: fridge 1 is now open."
    assert reasons["heat bread 1 with microwave 1"] == "You heat the bread 1 using the microwave 1: bread 1 is now hot."
    game = engine.Game(domain.game_json(task), want_facts=True)
    game.reset()
    checked = 0
    for step in steps:
        world = rs._World(game.facts)
        names = sorted(world.receptacles | world.objects)
        commands = {"look", "inventory", "help"}
        for x in names:
            commands |= {f"{verb} {x}" for verb in ("go to", "open", "close", "use", "examine")}
            commands |= {f"{verb} {x} {word} {y}" for y in names for verb, word in
                         (("take", "from"), ("move", "to"), ("heat", "with"), ("cool", "with"),
                          ("clean", "with"), ("slice", "with"))}
        assert set(game.admissible) <= commands
        for command in sorted(commands):
            reason = rs.unmet_precondition(game.facts, command)
            assert (reason == "") == (command in game.admissible), (step.step, command, reason)
            checked += 1
        game.step(step.action)
    assert game.won and checked > 5000


# ------------------------------------------------------------------------ agent episodes
def test_inadmissible_and_unparseable_replies(domain, clean_task):
    walkthrough = clean_task.verifier["walkthrough"]
    replies = ["Action: take apple 1 from sidetable 1", "I am not sure what to do.\nMaybe the towel is by the sink.",
               "Action: take soapbar 1 from sinkbasin 1", "Action: put candle 1 in sinkbasin 1"]
    replies += [f"Think: next.\nAction: {c}" for c in walkthrough]
    steps = tr.episode_transitions(domain, clean_task, _env_transcript(domain, clean_task, replies))
    assert [t.action for t in steps] == ["take apple 1 from sidetable 1", "", "take soapbar 1 from sinkbasin 1",
                                         "put candle 1 in sinkbasin 1", *walkthrough]
    game = engine.Game(domain.game_json(clean_task))
    game.reset()
    engine_answer = game.step("take apple 1 from sidetable 1")
    assert engine_answer == NOTHING
    for step in steps[:4]:
        assert (step.next_state, step.valid, step.reward, step.done) == (NOTHING, False, 0.0, False)
        assert step.source == "agent"
        assert step.reasoning.endswith(" Nothing happens.")
    assert steps[0].reasoning == ("'take apple 1 from sidetable 1' is not possible here: there is no apple 1 in "
                                  "this game. Nothing happens.")
    assert steps[1].reasoning == "The reply names no command. Nothing happens."
    assert "the agent is not at sinkbasin 1, so soapbar 1 is not in view" in steps[2].reasoning
    assert "'move (object) to (receptacle)', not 'put'" in steps[3].reasoning
    assert all(t.valid for t in steps[4:]) and steps[-1].reward == 1.0 and steps[-1].done
    assert steps[4].history[1] == [NOTHING, ""] and steps[4].state == NOTHING


def test_replayed_transcript_equals_the_expert(domain, clean_task, clean_expert):
    replies = [f"Action: {c}" for c in clean_task.verifier["walkthrough"]]
    transcript = _env_transcript(domain, clean_task, replies)
    replayed = tr.episode_transitions(domain, clean_task, transcript)
    assert {t.source for t in replayed} == {"agent"}
    assert [dataclasses.replace(t, source="expert") for t in replayed] == clean_expert
    forged = [dict(m) for m in transcript]
    forged[3] = {"role": "user", "content": "You pick up the candle 1 from the sidetable 1."}
    with pytest.raises(ValueError, match="observation after reply 0"):
        tr.episode_transitions(domain, clean_task, forged)
    relabelled = tr.episode_transitions(domain, clean_task, forged, source="synthetic", check=False)
    assert [t.next_state for t in relabelled] == [t.next_state for t in clean_expert]
    with pytest.raises(TypeError, match=r"transcript\[1\] is a str"):
        tr.episode_transitions(domain, clean_task, [transcript[0], "Action: look"])


# ------------------------------------------------------------------------ random episodes, collect
def test_random_transitions_and_collect(domain, clean_task):
    refused = tr.random_transitions(domain, clean_task, random.Random(5), steps=4, invalid_prob=1.0)
    assert len(refused) == 4 and [t.done for t in refused] == [False, False, False, True]
    for step in refused:
        assert not step.valid and step.action not in step.metadata["admissible"] and step.next_state == NOTHING
        assert FALLBACK not in step.reasoning and step.source == "random"

    first = tr.collect(domain, [clean_task], random_per_task=2, rng=random.Random(3), random_steps=6, invalid_prob=0.5)
    again = tr.collect(domain, [clean_task], random_per_task=2, rng=random.Random(3), random_steps=6, invalid_prob=0.5)
    assert first == again
    walk = len(clean_task.verifier["walkthrough"])
    assert [t.source for t in first[:walk]] == ["expert"] * walk and {t.source for t in first[walk:]} == {"random"}
    episodes = [t.step for t in first[walk:]].count(0)
    assert episodes == 2 and len(first) - walk <= 12
    for step in first[walk:]:
        assert step.valid == (step.action in step.metadata["admissible"]) and step.action != "help"
        assert step.done == (step.reward == 1.0 or step.step == 5)
    assert {t.valid for t in first[walk:]} == {True, False}
    episode = first[walk:walk + next(i for i, t in enumerate(first[walk:]) if t.done) + 1]
    game = engine.Game(domain.game_json(clean_task))
    assert episode[0].state == game.reset().strip()
    for step in episode:  # the engine's own answers, replayed
        assert step.metadata["admissible"] == game.admissible
        assert (step.next_state, step.reward) == (game.step(step.action).strip(), float(game.won))
        assert step.valid or step.next_state == NOTHING
    other = tr.collect(domain, [clean_task], random_per_task=2, rng=random.Random(4), random_steps=6, invalid_prob=0.5)
    assert other != first

    with pytest.raises(ValueError, match="invalid_prob"):
        tr.random_transitions(domain, clean_task, random.Random(0), steps=3, invalid_prob=1.5)
    with pytest.raises(TypeError, match="random.Random"):
        tr.collect(domain, [clean_task], random_per_task=1, rng=3)
    with pytest.raises(ValueError, match="not an ALFWorld"):
        tr.expert_transitions(domain, dataclasses.replace(clean_task, domain="calc"))


# ------------------------------------------------------------------------ pure reasoning
KITCHEN = frozenset({
    ("atlocation", "agent1", "loc 1"), ("receptacleatlocation", "countertop 1", "loc 2"),
    ("receptacleatlocation", "fridge 1", "loc 3"), ("receptacleatlocation", "microwave 1", "loc 4"),
    ("receptacletype", "countertop 1", "countertoptype"), ("receptacletype", "fridge 1", "fridgetype"),
    ("receptacletype", "microwave 1", "microwavetype"), ("openable", "fridge 1"), ("openable", "microwave 1"),
    ("objecttype", "mug 1", "mugtype"), ("objecttype", "apple 1", "appletype"),
    ("objecttype", "desklamp 1", "desklamptype"),
    ("inreceptacle", "mug 1", "countertop 1"), ("inreceptacle", "apple 1", "fridge 1"),
    ("inreceptacle", "desklamp 1", "countertop 1"), ("pickupable", "mug 1"), ("pickupable", "apple 1"),
    ("heatable", "mug 1"), ("iscool", "mug 1"), ("toggleable", "desklamp 1"),
    ("cancontain", "countertoptype", "mugtype"), ("cancontain", "fridgetype", "mugtype"),
})


def _with(facts, add=(), remove=()):
    return frozenset(facts - set(remove)) | set(add)


def test_change_reasoning_on_hand_made_facts():
    at_counter = _with(KITCHEN, [("atlocation", "agent1", "loc 2")], [("atlocation", "agent1", "loc 1")])
    assert rs.change_clauses(KITCHEN, at_counter) == ["now at countertop 1", "no longer in the middle of the room"]
    holding = _with(at_counter, [("holds", "agent1", "mug 1"), ("holdsany", "agent1")],
                    [("inreceptacle", "mug 1", "countertop 1"), ("objectatlocation", "mug 1", "loc 2")])
    assert (rs.valid_reasoning(at_counter, holding, "take mug 1 from countertop 1",
                               "You pick up the mug 1 from the countertop 1.")
            == "You pick up the mug 1 from the countertop 1: now holding mug 1; mug 1 is no longer in countertop 1.")
    hot = _with(holding, [("ishot", "mug 1"), ("not_iscool", "mug 1")], [("iscool", "mug 1")])
    assert rs.change_clauses(holding, hot) == ["mug 1 is now hot", "mug 1 is no longer cool"]
    opened = _with(KITCHEN, [("opened", "fridge 1"), ("checked", "fridge 1")])
    assert rs.change_clauses(KITCHEN, opened) == ["fridge 1 is now open"]
    assert rs.change_clauses(opened, KITCHEN) == ["fridge 1 is now closed"]
    lit = _with(KITCHEN, [("istoggled", "desklamp 1")])
    assert rs.change_clauses(KITCHEN, lit) == ["desklamp 1 is now switched on"]
    assert rs.valid_reasoning(KITCHEN, KITCHEN, "look", "You are in the middle of a room.") == (
        "'look' only gives information; nothing in the room changes.")
    placed = _with(holding, [("inreceptacle", "mug 1", "countertop 1")], [("holds", "agent1", "mug 1")])
    won = rs.step_reasoning(holding, placed, "move mug 1 to countertop 1", ["move mug 1 to countertop 1"],
                            "You move the mug 1 to the countertop 1.", True, "put a mug in countertop")
    assert won == ("You move the mug 1 to the countertop 1: no longer holding mug 1; mug 1 is now in countertop 1. "
                   "The goal now holds: put a mug in countertop.")
    untold = rs.step_reasoning(holding, placed, "move mug 1 to countertop 1", ["move mug 1 to countertop 1"],
                               "You move the mug 1 to the countertop 1.", True)
    assert untold.endswith(" The goal of the task now holds.")


def test_refusal_reasons_on_hand_made_facts():
    at_fridge = _with(KITCHEN, [("atlocation", "agent1", "loc 3")], [("atlocation", "agent1", "loc 1")])
    holding = _with(at_fridge, [("holds", "agent1", "mug 1"), ("holdsany", "agent1")],
                    [("inreceptacle", "mug 1", "countertop 1")])
    why = rs.why_inadmissible
    assert why(KITCHEN, "take banana 1 from countertop 1") == "there is no banana 1 in this game"
    assert why(KITCHEN, "take mug 1 from countertop 1") == "the agent is not at countertop 1, so mug 1 is not in view"
    assert why(at_fridge, "take apple 1 from fridge 1") == "fridge 1 is closed"
    assert why(at_fridge, "take mug 1 from fridge 1") == "fridge 1 is closed"
    opened = _with(holding, [("opened", "fridge 1")])
    assert why(opened, "take apple 1 from fridge 1") == "the agent's hands are full: it is holding mug 1"
    assert why(opened, "take mug 1 from fridge 1") == "the agent is already holding mug 1"
    assert why(at_fridge, "move mug 1 to fridge 1") == "the agent is not holding mug 1"
    assert why(holding, "move mug 1 to countertop 1") == "the agent is not at countertop 1"
    assert why(holding, "move mug 1 to fridge 1") == "fridge 1 is closed"
    assert why(opened, "move mug 1 to fridge 1") == FALLBACK  # every checked precondition holds
    assert why(_with(opened, remove=[("cancontain", "fridgetype", "mugtype")]), "move mug 1 to fridge 1") == (
        "a fridge cannot hold a mug")
    assert why(holding, "heat mug 1 with fridge 1") == "fridge 1 is not a microwave; only a microwave can heat things"
    assert why(holding, "heat mug 1 with microwave 1") == "the agent is not at microwave 1"
    assert why(KITCHEN, "open countertop 1") == "countertop 1 cannot be opened or closed"
    assert why(opened, "open fridge 1") == "fridge 1 is already open"
    assert why(at_fridge, "close fridge 1") == "fridge 1 is already closed"
    assert why(at_fridge, "go to fridge 1") == "the agent is already at fridge 1"
    assert why(KITCHEN, "go to mug 1") == "mug 1 is not a receptacle; only receptacles can be gone to"
    assert why(KITCHEN, "use desklamp 1") == "desklamp 1 is not here"
    assert why(KITCHEN, "use mug 1") == "mug 1 cannot be used (switched on or off)"
    assert why(KITCHEN, "examine mug 1") == "the agent is not holding mug 1; only a held object can be examined"
    assert why(holding, "slice apple 1 with mug 1") == "mug 1 is not a knife"
    assert why(KITCHEN, "put mug 1 in fridge 1") == "objects are placed with 'move (object) to (receptacle)', not 'put'"
    assert why(KITCHEN, "jump").startswith("'jump' is not a known command (known: look, inventory")
    assert why(KITCHEN, "take mug from countertop 1") == (
        "that is not the form of a 'take' command (names read like 'mug 1')")
    assert rs.unmet_precondition(KITCHEN, "look") == "" == rs.unmet_precondition(opened, "move mug 1 to fridge 1")
    assert rs.step_reasoning(KITCHEN, KITCHEN, "", ["look"], NOTHING, False) == (
        "The reply names no command. Nothing happens.")
    rng = random.Random(0)
    made = {rs.inadmissible_command(KITCHEN, ["look", "go to fridge 1"], {"go to fridge 1", "open fridge 1"}, rng)
            for _ in range(30)}
    assert "open fridge 1" in made and any(c.startswith("take mug 1 from") for c in made)
    assert all(rs.why_inadmissible(KITCHEN, c) != FALLBACK for c in made) and "go to fridge 1" not in made
