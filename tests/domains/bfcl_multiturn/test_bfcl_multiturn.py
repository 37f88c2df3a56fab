"""BFCL multi-turn domain: seeds and split, episodes, the dispatcher under hostile calls, official
checker agreement on shipped ground truths and perturbations, parse_task, configs."""

import builtins
import collections
import copy
import json
import os
import subprocess
import time

import pytest

from genenv_jax.configs import bfcl_multiturn as config_module
from genenv_jax.domains import Rejection, Task, get_domain
from genenv_jax.domains.bfcl import data as bfcl_data
from genenv_jax.domains.bfcl_multiturn import BFCLMultiTurnDomain, data, schema, verify
from genenv_jax.domains.bfcl_multiturn.dispatch import COST_LIMITS
from genenv_jax.domains.bfcl_multiturn.domain import DONE_TEXT
from genenv_jax.domains.bfcl_multiturn.scenario import Scenario
from genenv_jax.configs.run_config import RunConfig
from genenv_jax.text.tokenization import render_tool_call, render_tool_calls

SPLIT_DIGEST = "5f0f1cbf223134e30e4d8e7be6994f9115bb639174ab39ed84ed92f505380aba"
# Shipped entries parse_task refuses as generations (see docs/bfcl_multiturn.md).
REFUSED_AS_GENERATION = {"multi_turn_miss_func_49": "bad_missed_function"}


@pytest.fixture(scope="module")
def domain():
    return BFCLMultiTurnDomain()


@pytest.fixture(scope="module")
def seeds(domain):
    return {t.task_id: t for t in domain.seeds("all")}


def _call(name, **arguments):
    return render_tool_call({"name": name, "arguments": arguments})


# ------------------------------------------------------------------------ seeds and split
def test_seeds_split_by_scenario_and_registered(domain, seeds):
    counts = collections.Counter((t.category, t.metadata["split"]) for t in seeds.values())
    assert counts == {(c, s): n for c in data.CATEGORIES for s, n in (("train", 140), ("validation", 20), ("test", 40))}
    assert bfcl_data.split_digest({t.task_id: t.metadata["split"] for t in seeds.values()}) == SPLIT_DIGEST
    side = collections.defaultdict(set)  # the four variants of a scenario never straddle splits
    for t in seeds.values():
        side[t.metadata["scenario"]].add(t.metadata["split"])
    assert all(len(s) == 1 for s in side.values()) and len(side) == 200
    assert isinstance(get_domain("bfcl_multiturn"), BFCLMultiTurnDomain)
    task = seeds["multi_turn_miss_func_0"]
    assert Task.loads(task.dumps()) == task
    assert task.prompt["missed_function"] == {"3": ["sort"]}
    assert task.verifier["ground_truth"][3] == [{"name": "sort", "arguments": {"file_name": "final_report.pdf"}}]


def test_ground_truth_strings_are_read_as_literals_never_run():
    assert data.call_from_source("sort('a.pdf')", ["GorillaFileSystem"]) == {
        "name": "sort", "arguments": {"file_name": "a.pdf"}}
    for source in ("cd(folder=__import__('os').getcwd())", "os.system('ls')", "cd(*args)", "nope(x=1)"):
        with pytest.raises(ValueError):
            data.call_from_source(source, ["GorillaFileSystem"])


# ------------------------------------------------------------------------ episodes
def test_episode_sends_turns_reveals_held_out_functions_and_ends(domain, seeds):
    task = seeds["multi_turn_miss_func_0"]  # 5 turns; turn 2 needs `sort`, revealed at turn 3
    env = domain.environment(task)
    first = env.reset()
    assert first == domain.agent_prompt(task)
    assert first.messages == task.prompt["question"][0]
    names = {t["name"] for t in first.tools}
    assert "sort" not in names and {"cd", "mv", "post_tweet"} <= names
    assert all(t["description"].endswith("Note that the provided function is in Python 3 syntax.") for t in first.tools)
    texts = domain.reference_turns(task)
    transcript, outcomes = verify.run_episode(domain, task, texts)
    assert [o.done for o in outcomes] == [False] * (len(texts) - 1) + [True]
    tool_step = outcomes[0]
    assert tool_step.info == {"errors": {}, "turn": 0, "calls": 3}
    assert [m["role"] for m in tool_step.observation] == ["tool"] * 3
    reveal = next(o for o in outcomes if "new_tools" in o.info)
    assert [d["name"] for d in reveal.info["new_tools"]] == ["sort"]
    assert reveal.observation[0]["role"] == "user" and '"name": "sort"' in reveal.observation[0]["content"]
    assert "I have updated some more functions" in reveal.observation[0]["content"]
    result = domain.environment(task).score(transcript)
    assert result.reward == 1.0 and result.details["error_type"] is None and result.details["turns"] == 5
    # Only the agent's texts matter, and a cut episode is BFCL's force_terminated.
    agent_only = [m for m in transcript if m["role"] == "assistant"]
    assert domain.environment(task).score(agent_only).reward == 1.0
    cut = domain.environment(task).score(agent_only[:4])
    assert cut.reward == 0.0 and cut.details["error_type"] == "multi_turn:force_terminated"


def test_wrong_and_missing_calls_score_zero_with_the_checker_error(domain, seeds):
    task = seeds["multi_turn_base_0"]
    turns = copy.deepcopy(task.verifier["ground_truth"])
    turns[0][1]["arguments"]["dir_name"] = "tmp"  # mkdir(dir_name='temp') -> 'tmp'
    transcript, _ = verify.run_episode(domain, task, verify.episode_texts(task, turns))
    result = domain.environment(task).score(transcript)
    assert result.reward == 0.0 and result.details["error_type"] == "multi_turn:instance_state_mismatch"
    assert result.details["turn"] == 0 and result.details["differences"] == ["root"]
    silent = [DONE_TEXT] * len(turns)
    transcript, _ = verify.run_episode(domain, task, silent)
    assert domain.environment(task).score(transcript).details["error_type"] == "multi_turn:empty_turn_model_response"


def test_calls_spread_over_steps_score_the_same(domain, seeds):
    for task in list(seeds.values())[3::40]:
        texts = []
        for calls in task.verifier["ground_truth"]:
            texts += [render_tool_calls([c]) for c in calls] + [DONE_TEXT]
        transcript, outcomes = verify.run_episode(domain, task, texts)
        assert outcomes[-1].done and domain.environment(task).score(transcript).reward == 1.0, task.task_id


def test_cli_prints_the_split(capsys):
    from genenv_jax.domains.bfcl_multiturn.__main__ import main
    assert main(["--stats"]) == 0
    assert "| multi_turn_miss_param | 140 | 20 | 40 |" in capsys.readouterr().out


def test_score_details_is_a_one_turn_episode(domain, seeds):
    for task in list(seeds.values())[::25]:
        assert domain.score_details(task, domain.reference_response(task)).reward == 1.0, task.task_id
    task = seeds["multi_turn_base_0"]
    assert domain.score_details(task, "I will not do that.").details["error_type"] == (
        "multi_turn:empty_turn_model_response")
    wrong = render_tool_calls([{"name": "mkdir", "arguments": {"dir_name": "temp"}}])
    assert domain.score_details(task, wrong).reward == 0.0
    miss = next(t for t in seeds.values()
                if t.category == "multi_turn_miss_param" and not t.verifier["ground_truth"][0])
    assert domain.score_details(miss, domain.reference_response(miss)).reward == 1.0


def test_force_quit_after_bfcls_step_limit(domain, seeds):
    task = seeds["multi_turn_base_0"]
    env = domain.environment(task)
    env.reset()
    outcomes = [env.step(_call("pwd")) for _ in range(21)]
    assert not any(o.done for o in outcomes[:20]) and outcomes[20].done and outcomes[20].info["force_quit"]
    assert env.step("anything").info["errors"] == {"step_after_done": 1}
    transcript = [{"role": "assistant", "content": _call("pwd")}] * 21
    result = domain.environment(task).score(transcript)
    assert result.reward == 0.0 and result.details["force_quit"]


# ------------------------------------------------------------------------ hostile calls
HOSTILE_NAMES = ["__class__", "__init__", "__dict__", "eval", "exec", "__import__", "os.system", "system",
                 "GorillaFileSystem.cd", "cd.__globals__", "_load_scenario", "_navigate_to_directory", "root",
                 "long_context", "subprocess.run", "open", "getattr", "cd()", "cd; rm -rf /", "🙂", "a" * 5000]


def test_hostile_calls_run_nothing_outside_the_listed_methods(domain, seeds, monkeypatch, tmp_path):
    task = seeds["multi_turn_base_0"]  # TwitterAPI + GorillaFileSystem
    tripped = []

    def trap(name):
        def refuse(*args, **kwargs):
            tripped.append(name)
            raise AssertionError(f"{name} called")
        return refuse

    for owner, attr in ((builtins, "eval"), (builtins, "exec"), (os, "system"),
                        (os, "popen"), (subprocess, "Popen"), (subprocess, "run")):
        monkeypatch.setattr(owner, attr, trap(f"{owner.__name__}.{attr}"))
    marker = tmp_path / "pwned"
    code = f"__import__('os').system('touch {marker}')"
    texts = [_call(name, folder=".") for name in HOSTILE_NAMES] + [
        _call("cd", folder=code),                                # code is data: a folder name that does not exist
        _call("cd", folder=".", self="x"),                       # not a parameter
        _call("cd"),                                             # missing required argument
        _call("mkdir", dir_name=".", extra={"__class__": 1}),    # unknown argument
        _call("cd", folder=None),                                # the backend raises
        _call("cd", folder="x" * 1_000_000),                     # 1 MB string: over the tool-call limit
        '<tool_call>{"name": "cd", "arguments": {"folder": ' + "[" * 5000 + "]" * 5000 + "}}</tool_call>",
        "<tool_call>" + "{" * 100_000,                           # unclosed, deep
        render_tool_calls([{"name": "pwd", "arguments": {}}] * 70),  # more blocks than read
        "<tool_call>not json</tool_call><tool_call>[1, 2]</tool_call>",
    ]
    errors = collections.Counter()
    for start in range(0, len(texts), 10):  # BFCL force-quits a user turn after 20 steps
        env = domain.environment(task)
        env.reset()
        before = env.dispatcher.backends.public_state()
        for text in texts[start:start + 10]:
            outcome = env.step(text)
            assert not outcome.done and outcome.observation
            assert all(m["role"] == "tool" and isinstance(m["content"], str) for m in outcome.observation)
            errors.update(outcome.info["errors"])
        assert env.dispatcher.backends.public_state() == before
    assert not tripped and not marker.exists()
    assert errors == {"unknown_function": len(HOSTILE_NAMES), "bad_arguments": 3, "backend_exception": 1,
                      "malformed_call": 6}
    # Code-like argument values reach the backend as plain strings and stay strings.
    payload = "'); __import__('os').system('id') #"
    env.step(render_tool_calls([{"name": "touch", "arguments": {"file_name": "note.txt"}},
                                {"name": "echo", "arguments": {"content": payload, "file_name": "note.txt"}}]))
    assert env.dispatcher.backends.instances["GorillaFileSystem"]._current_dir._get_item("note.txt").content == payload
    assert not tripped


def test_dispatcher_refuses_oversized_deep_or_non_json_arguments(seeds):
    dispatcher = Scenario.of(seeds["multi_turn_base_0"]).execution()
    deep = cur = []
    for _ in range(100):
        cur.append([])
        cur = cur[0]
    cases = {"big": {"folder": "x" * 200_000}, "deep": {"folder": deep}, "nan": {"folder": float("nan")},
             "object": {"folder": object()}, "tuple": {"folder": (1, 2)}, "key": {"folder": {1: 2}}}
    for label, arguments in cases.items():
        outcome = dispatcher.call("cd", arguments)
        assert outcome.error == "bad_arguments", label
        assert json.loads(outcome.observation)["error"]
    assert dispatcher.call("cd", ["folder"]).error == "bad_arguments"
    assert dispatcher.call(None, {}).error == "unknown_function"
    assert dispatcher.call(["cd"], {}).error == "unknown_function"


def test_unbounded_math_is_refused_and_precision_does_not_leak(seeds):
    import decimal

    import mpmath
    task = next(t for t in seeds.values() if "MathAPI" in t.prompt["involved_classes"])
    dispatcher = Scenario.of(task).execution()
    t0 = time.perf_counter()
    assert dispatcher.call("power", {"base": 10, "exponent": 10 ** 9}).error == "bad_arguments"
    limit = COST_LIMITS["MathAPI", "logarithm", "precision"]
    assert dispatcher.call("logarithm", {"value": 2, "base": 10, "precision": limit + 1}).error == "bad_arguments"
    assert dispatcher.call("square_root", {"number": 2, "precision": 10 ** 9}).error == "bad_arguments"
    assert dispatcher.call("round_number", {"number": 5, "decimal_places": -10 ** 9}).error == "bad_arguments"
    assert dispatcher.call("multiply", {"a": "x", "b": 10 ** 9}).error == "bad_arguments"
    assert dispatcher.call("multiply", {"a": [1], "b": 10 ** 9}).error == "bad_arguments"
    assert dispatcher.call("mean", {"numbers": [[1]] * 3}).error == "bad_arguments"
    assert time.perf_counter() - t0 < 1.0
    dps, prec = mpmath.mp.dps, decimal.getcontext().prec
    assert dispatcher.call("logarithm", {"value": 2, "base": 10, "precision": 50}).error is None
    assert dispatcher.call("square_root", {"number": 2, "precision": 60}).result.count("1") >= 1
    assert (mpmath.mp.dps, decimal.getcontext().prec) == (dps, prec)
    assert json.loads(dispatcher.call("power", {"base": 2, "exponent": 10}).result) == {"result": 1024}


def test_episodes_never_share_state(domain, seeds):
    task = seeds["multi_turn_long_context_0"]
    snapshot = verify._long_context_snapshot()
    first, second = domain.environment(task), domain.environment(task)
    for env in (first, second):
        env.reset()
    first.step(render_tool_calls(task.verifier["ground_truth"][0]))
    assert first.dispatcher.backends.public_state() != second.dispatcher.backends.public_state()
    assert second.dispatcher.backends.public_state() == domain.environment(task).dispatcher.backends.public_state()
    long_context = verify.long_context
    assert all(getattr(long_context, k) == v for k, v in snapshot.items() if k != "LONG_WEATHER_EXTENSION")


# ------------------------------------------------------------------------ official checker agreement
def _assert_agreement(report, n_tasks):
    for case in ("replay",) + verify.PERTURBATIONS:
        assert report.n[case] == n_tasks, case
    replay = report.ours_valid["replay"] / report.n["replay"]
    agreement = sum(report.agree[c] for c in verify.PERTURBATIONS) / sum(report.n[c] for c in verify.PERTURBATIONS)
    assert replay >= 0.99 and report.agree["replay"] == report.n["replay"], report.replay_failures
    assert agreement >= 0.995, report.disagreements
    assert report.official_valid["dropped_call"] < report.n["dropped_call"] // 10  # perturbations do fail
    return replay, agreement


def test_sample_replay_and_perturbations_agree_with_official_checker(domain):
    tasks = domain.seeds("all")[::20]
    report = verify.check_tasks(domain, tasks)
    _assert_agreement(report, len(tasks))
    assert not report.disagreements and not report.replay_failures


@pytest.mark.slow
def test_every_shipped_entry_replays_and_perturbations_agree_with_official_checker(domain):
    """All 800 entries x (replay + 4 perturbations), 25-45 s on 2 cores (docs/bfcl_multiturn.md)."""
    report = verify.check_tasks(domain, domain.seeds("all"))
    replay, agreement = _assert_agreement(report, 800)
    assert replay == 1.0 and agreement == 1.0


def test_python_call_refuses_anything_but_plain_calls():
    assert verify.python_call({"name": "cd", "arguments": {"folder": "a'b"}}) == "cd(folder=\"a'b\")"
    for bad in ({"name": "os.system", "arguments": {}}, {"name": "cd", "arguments": {"x)": 1}},
                {"name": "cd", "arguments": {"folder": object()}}):
        with pytest.raises(ValueError):
            verify.python_call(bad)


# ------------------------------------------------------------------------ simulator side
def _generation(task, **changes):
    obj = schema.task_json(task)
    obj.update(changes)
    return "```json\n" + json.dumps(obj) + "\n```"


def test_parse_task_accepts_shipped_entries_and_reference_generations(domain, seeds):
    by_category = collections.defaultdict(list)
    for t in seeds.values():
        by_category[t.category].append(t)
    for group in by_category.values():
        for i in range(0, len(group), 7):
            task = group[i]
            if task.task_id in REFUSED_AS_GENERATION:
                continue
            out = domain.parse_task(schema.as_generation(task), group[(i + 1) % len(group)], "harder")
            assert isinstance(out, Task), (task.task_id, out)
            assert out.category == task.category and out.difficulty == "harder"
            assert out.prompt == task.prompt and out.verifier == task.verifier
            transcript, _ = verify.run_episode(domain, out, domain.reference_turns(out))
            assert domain.environment(out).score(transcript).reward == 1.0
    out = domain.parse_task(schema.as_generation(seeds["multi_turn_miss_func_49"]), seeds["multi_turn_miss_func_0"])
    assert isinstance(out, Rejection) and out.reason == REFUSED_AS_GENERATION["multi_turn_miss_func_49"]
    for seed in (seeds["multi_turn_base_0"], seeds["multi_turn_miss_func_1"], seeds["multi_turn_long_context_7"]):
        text = domain.reference_generation(seed)
        sibling = domain.parse_task(text, seed)
        assert isinstance(sibling, Task) and sibling.category == seed.category
        assert sibling.prompt["question"] != seed.prompt["question"]
        same = [t for t in seeds.values() if t.category == seed.category and t.prompt == sibling.prompt]
        assert same and same[0].metadata["split"] == seed.metadata["split"]


def test_parse_task_rejection_reasons(domain, seeds):
    seed, task = seeds["multi_turn_base_0"], seeds["multi_turn_base_1"]
    gt = task.verifier["ground_truth"]
    n = len(gt)
    cases = {
        "no_json": "I cannot write a task.",
        "too_large": "```json\n{\"question\": \"" + "x" * 200_000 + "\"}\n```",
        "too_deep": "```json\n" + "[" * 200 + "]" * 200 + "\n```",
        "invalid_json": "```json\n{\"question\": [1, }\n```",
        "not_an_object": "```json\n[1, 2]\n```",
        "missing_field": "```json\n" + json.dumps({"question": [["hi"]]}) + "\n```",
        "unknown_class": _generation(task, involved_classes=["os"]),
        "bad_question": _generation(task, question=[[{"role": "system", "content": "x"}]] * n),
        "copied_question": _generation(task, question=seed.prompt["question"],
                                       ground_truth=seed.verifier["ground_truth"]),
        "bad_initial_config": _generation(task, initial_config={"GorillaFileSystem": 5}),
        "bad_missed_function": _generation(task, missed_function={"1": ["cd"]}),
        "bad_ground_truth": _generation(task, ground_truth=gt[:-1]),
        "unknown_function": _generation(task, ground_truth=[[{"name": "__init__", "arguments": {}}]] + gt[1:]),
        "bad_arguments": _generation(task, ground_truth=[[{"name": "cd", "arguments": {"dir": "x"}}]] + gt[1:]),
        "ground_truth_error": _generation(task, ground_truth=[[{"name": "cd", "arguments": {"folder": "nowhere"}}]]
                                          + gt[1:]),
        "no_effect": _generation(task, ground_truth=[[] for _ in gt]),
    }
    assert set(cases) | {"invalid_unicode"} == set(domain.rejection_reasons)
    for reason, text in cases.items():
        out = domain.parse_task(text, seed)
        assert isinstance(out, Rejection) and out.reason == reason, (reason, out)
    broken_config = _generation(task, initial_config={"GorillaFileSystem": {"root": {"a": {"type": "file"}}}})
    assert domain.parse_task(broken_config, seed).reason == "ground_truth_error"
    miss_func = seeds["multi_turn_miss_func_0"]
    early = copy.deepcopy(miss_func.verifier["ground_truth"])
    early[0].append({"name": "sort", "arguments": {"file_name": "final_report.pdf"}})
    out = domain.parse_task(_generation(miss_func, ground_truth=early), seeds["multi_turn_miss_func_1"])
    assert out.reason == "bad_missed_function"
    miss_param = next(t for t in seeds.values() if t.category == "multi_turn_miss_param")
    full = [turn or [{"name": "pwd", "arguments": {}}] for turn in miss_param.verifier["ground_truth"]]
    out = domain.parse_task(_generation(miss_param, ground_truth=full), seeds["multi_turn_miss_param_5"])
    assert out.reason == "bad_ground_truth"


def test_simulator_prompt_shows_seed_functions_target_and_direction(domain, seeds):
    seed = seeds["multi_turn_miss_func_0"]
    prompt = domain.simulator_prompt(seed, [1.0, 0.75], "harder", alpha=0.5)
    assert prompt.tools is None and [m["role"] for m in prompt.messages] == ["system", "user"]
    user = prompt.messages[1]["content"]
    assert "88% of the time" in user and "the target is 50%" in user and "HARDER" in user
    assert json.dumps(schema.task_json(seed), ensure_ascii=False) in user
    assert "mv(source: string, destination: string)" in user and "post_tweet(content: string" in user
    assert "missed_function maps a LATER turn" in user
    assert "EASIER" in domain.simulator_prompt(seed, (), "easier").messages[1]["content"]
    with pytest.raises(ValueError):
        domain.simulator_prompt(seed, (), "sideways")


def test_summary_is_bfcls_unweighted_multi_turn_mean(domain):
    per = {"multi_turn_base": {"n": 10, "correct": 5, "accuracy": 0.5},
           "multi_turn_long_context": {"n": 30, "correct": 3, "accuracy": 0.1}}
    assert domain.summary(per) == pytest.approx({"multi_turn": 0.3, "multi_turn_micro": 0.2})


def test_configs_validate():
    tiny = RunConfig.from_config_dict(config_module.get_config("tiny"), num_devices=1)  # a CPU preset
    assert tiny.domain.name == "bfcl_multiturn" and tiny.domain.options == {"categories": ("multi_turn_base",)}
    assert tiny.episodes.max_total_tokens >= tiny.agent.sampling.max_prompt_len + tiny.agent.sampling.max_new_tokens
    seven = config_module.get_config("7b")
    seven.agent.allow_random_init = seven.simulator.allow_random_init = True
    big = RunConfig.from_config_dict(seven, num_devices=8)
    assert big.episodes.max_turns >= 15 and big.agent.sampling.max_prompt_len >= 7566
    with pytest.raises(ValueError):
        config_module.get_config("huge")
