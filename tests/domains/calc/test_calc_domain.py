"""The study's tool-call arithmetic domain: seeds, verifier, parse_task, levels, hostile text."""

from __future__ import annotations

import collections
import json
import time

import pytest

from genenv_jax.domains import DOMAINS, Rejection, Task, get_domain
from genenv_jax.domains.calc import domain as calc
from genenv_jax.domains.calc.domain import CalcDomain, LEVELS, NUM_LEVELS, REJECTION_REASONS
from genenv_jax.text.tokenization import render_tool_call


@pytest.fixture(scope="module")
def domain() -> CalcDomain:
    return CalcDomain()


def _call(name, a, b) -> str:
    return render_tool_call({"name": name, "arguments": {"a": a, "b": b}})


def test_registered_and_seeds_span_every_level_in_every_split(domain):
    assert "calc" in DOMAINS and isinstance(get_domain("calc"), CalcDomain)
    assert NUM_LEVELS >= 6
    counts = collections.Counter((t.metadata["split"], t.metadata["level"]) for t in domain.seeds("all"))
    for split, n in domain.per_level.items():
        for level in range(1, NUM_LEVELS + 1):
            assert counts[(split, level)] == n
    expressions = [t.prompt["expression"] for t in domain.seeds("all")]
    assert len(set(expressions)) == len(expressions)  # no expression in two splits
    ids = [t.task_id for t in domain.seeds("all")]
    assert len(set(ids)) == len(ids)


def test_seeds_are_deterministic():
    a, b = CalcDomain().seeds("all"), CalcDomain().seeds("all")
    assert [t.dumps() for t in a] == [t.dumps() for t in b]
    assert [t.dumps() for t in CalcDomain(seed=14).seeds("test")] != [t.dumps() for t in CalcDomain().seeds("test")]
    with pytest.raises(ValueError):
        CalcDomain().seeds("dev")


def test_reference_response_scores_one_on_every_seed(domain):
    for t in domain.seeds("all"):
        assert domain.score(t, domain.reference_response(t)) == 1.0, t.task_id
        assert Task.loads(t.dumps()) == t


@pytest.mark.parametrize("level", range(1, 7))
def test_verifier_exact_on_every_level(domain, level):
    task = next(t for t in domain.seeds("validation") if t.metadata["level"] == level)
    call = task.verifier["call"]
    name, a, b = call["name"], call["arguments"]["a"], call["arguments"]["b"]
    assert domain.score(task, "Sure.\n" + _call(name, a, b)) == 1.0
    other = next(f for f in ("add", "sub", "mul") if f != name)
    wrong = {
        "wrong_function": _call(other, a, b),
        "wrong_arguments": _call(name, a, b + 1),
        "no_call": str(task.verifier["value"]),
        "multiple_calls": _call(name, a, b) + "\n" + _call(name, a, b),
        "parse_error:invalid_json": "<tool_call>{not json}</tool_call>",
    }
    for error, text in wrong.items():
        result = domain.score_details(task, text)
        assert result.reward == 0.0 and result.details["error_type"] == error, (error, result.details)
    # Arguments must be exactly {"a": int, "b": int}: no floats, strings, bools or extra keys.
    for args in ({"a": float(a), "b": b}, {"a": str(a), "b": b}, {"a": a, "b": b, "c": 1}, {"a": a}):
        text = f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'
        assert domain.score(task, text) == 0.0, args


def test_outermost_operation_is_the_call():
    tree = calc.parse_expression("3 + 4 * 5")
    assert calc.expected_call(tree) == {"name": "add", "arguments": {"a": 3, "b": 20}}
    tree = calc.parse_expression("(7 - 2) * (1 + 1) - 4")
    assert calc.expected_call(tree) == {"name": "sub", "arguments": {"a": 10, "b": 4}}
    assert calc.expected_call(calc.parse_expression("10 - 3 - 2")) == {"name": "sub", "arguments": {"a": 7, "b": 2}}
    for text in ("1 - (2 - 3)", "2 * (3 * 4)", "(1 + 2) * 3", "1 + 2 * 3 - 4", "((5))  *  6"):
        tree = calc.parse_expression(text)
        assert calc.parse_expression(calc.render_expression(tree)) == tree


def test_levels_measured_from_content(domain):
    seed = domain.seeds("train")[0]
    cases = {
        "question: 3 + 4\nfunctions: add": 1,
        "question: 3 + 4\nfunctions: add, max": 2,
        "question: 31 + 4\nfunctions: add": 2,
        "question: 3 + 4 * 2\nfunctions: add, mul": 3,
        "question: 13 + 4 * 2\nfunctions: add, mul, pow": 4,
        "question: (13 + 4) * (2 - 1)\nfunctions: add, mul, sub, min": 5,
        "question: (130 + 4) * (2 - 1) + 5\nfunctions: add, mul, sub, min, pow": 6,
        "question: 3 + 4\nfunctions: add, sub, mul, max, min, mod": 6,
    }
    for text, level in cases.items():
        task = domain.parse_task(text, seed, "harder")
        assert isinstance(task, Task), (text, task)
        assert task.metadata["level"] == level and task.category == f"level_{level}", text
        assert task.difficulty == "harder" and task.parent_id == seed.task_id
    assert [lv.number for lv in LEVELS] == list(range(1, NUM_LEVELS + 1))


def test_stated_wrong_answer_is_ignored(domain):
    seed = domain.seeds("train")[0]
    task = domain.parse_task("question: 6 * 7\nfunctions: mul, add\nanswer: 41", seed)
    assert isinstance(task, Task)
    assert task.verifier == {"call": {"name": "mul", "arguments": {"a": 6, "b": 7}}, "value": 42}
    assert task.metadata["stated_answer_ok"] is False
    assert domain.score(task, _call("mul", 6, 7)) == 1.0
    right = domain.parse_task("question: 6 * 7\nfunctions: mul, add\nanswer: 42", seed)
    assert right.metadata["stated_answer_ok"] is True and right.verifier == task.verifier
    assert "stated_answer_ok" not in domain.parse_task("question: 6 * 7\nfunctions: mul", seed).metadata


def test_reference_generation_round_trips(domain):
    for seed in domain.seeds("train")[::7] + domain.seeds("test")[::5]:
        text = domain.reference_generation(seed)
        task = domain.parse_task(text, seed, "similar")
        assert isinstance(task, Task), (seed.task_id, text, task)
        assert task.category == seed.category
        sibling = next(t for t in domain.seeds(seed.metadata["split"])
                       if t.prompt["expression"] == task.prompt["expression"])
        assert sibling.verifier == task.verifier and sibling.task_id != seed.task_id
        assert domain.score(task, domain.reference_response(sibling)) == 1.0


def test_simulator_prompt_phrases_direction_and_alpha(domain):
    seed = next(t for t in domain.seeds("train") if t.metadata["level"] == 3)
    text = domain.simulator_prompt(seed, [0.9, 0.7], "harder", alpha=0.5).messages[-1]["content"]
    assert "HARDER" in text and "level 4" in text and "80%" in text and "50%" in text
    assert seed.prompt["expression"] in text
    assert "level 2" in domain.simulator_prompt(seed, (), "easier").messages[-1]["content"]
    with pytest.raises(ValueError):
        domain.simulator_prompt(seed, (), "much harder")


def test_agent_prompt_lists_the_functions(domain):
    task = domain.seeds("test")[-1]
    prompt = domain.agent_prompt(task)
    assert [t["function"]["name"] for t in prompt.tools] == task.prompt["functions"]
    assert prompt.messages == [{"role": "user", "content": task.prompt["question"]}]


def test_compact_prompts_say_the_same_in_a_few_words():
    compact = CalcDomain(prompt_style="compact")
    task = next(t for t in compact.seeds("test") if t.metadata["level"] == 4)
    prompt = compact.agent_prompt(task)
    assert prompt.tools is None and prompt.messages[0]["role"] == "system"
    assert prompt.messages[1]["content"] == f"{task.prompt['question']}\nFunctions: {', '.join(task.prompt['functions'])}"
    text = compact.simulator_prompt(task, [1.0, 0.0], "easier", alpha=0.3).messages[-1]["content"]
    assert "EASIER" in text and "level 3" in text and "50%" in text and task.prompt["expression"] in text
    with pytest.raises(ValueError, match="prompt_style"):
        CalcDomain(prompt_style="verbose")


def test_complete_functions_adds_what_the_expression_needs_and_measures_the_result():
    lenient = CalcDomain(complete_functions=True)
    seed = lenient.seeds("train")[0]
    task = lenient.parse_task("question: (3 + 4) * 5\nfunctions: max, max", seed)
    assert isinstance(task, Task) and task.prompt["functions"] == ["max", "add", "mul"]
    assert task.metadata["functions_completed"] == 2 and task.metadata["distractors"] == 1
    assert task.verifier["call"] == {"name": "mul", "arguments": {"a": 7, "b": 5}}
    bare = lenient.parse_task("question: 12 - 3", seed)
    assert bare.prompt["functions"] == ["sub"] and bare.category == "level_2"
    strict = CalcDomain()
    assert strict.parse_task("question: 12 - 3", seed).reason == "no_functions"
    assert strict.parse_task("question: 12 - 3\nfunctions: add", seed).reason == "missing_function"
    for text, reason in (("question: 1 +\nfunctions: add", "bad_expression"),
                         ("question: 1 + 2\nfunctions: eval", "unknown_function")):
        assert lenient.parse_task(text, seed).reason == reason


HOSTILE = {
    "too_large": ["question: 1 + 1\nfunctions: add\n" + "x" * 1_000_000,
                  "question: " + " + ".join(["1"] * 100) + "\nfunctions: add",
                  "question: " + "(" * 500 + "\nfunctions: add"],
    "too_deep": ["question: " + "(" * 12 + "1 + 1" + ")" * 12 + "\nfunctions: add",
                 "question: " + "(" * 20 + "\nfunctions: add"],
    "out_of_range": ["question: 123456789012345678901234567890 * 2\nfunctions: mul",
                     "question: 1 + 2 + 3 + 4 + 5 + 6\nfunctions: add",
                     "question: 1 + 2\nfunctions: add, sub, mul, max, min, mod, pow"],
    "bad_expression": ["question: __import__('os').system('echo hi')\nfunctions: add",
                       "question: 2 ** 3\nfunctions: mul", "question: -3 + 4\nfunctions: add",
                       "question: 7\nfunctions: add", "question: ٣ + ٤\nfunctions: add",
                       "question: \nfunctions: add", "question: (1 + 2\nfunctions: add",
                       'question: {"a": [[[[[[[[1]]]]]]]]}\nfunctions: add'],
    "no_question": ["", "functions: add", '{"question": "1 + 2", "functions": ["add"]}' * 3, "[" * 1000],
    "no_functions": ["question: 1 + 2"],
    "unknown_function": ["question: 1 + 2\nfunctions: add, exec"],
    "duplicate_function": ["question: 1 + 2\nfunctions: add, add"],
    "missing_function": ["question: 1 + 2 * 3\nfunctions: add, max"],
}


def test_hostile_text_is_a_counted_rejection(domain):
    seed = domain.seeds("train")[0]
    counts = collections.Counter()
    start = time.perf_counter()
    for reason, texts in HOSTILE.items():
        assert reason in REJECTION_REASONS
        for text in texts:
            out = domain.parse_task(text, seed)
            assert isinstance(out, Rejection), (reason, text[:80], out)
            assert out.reason == reason, (reason, text[:80], out.reason, out.detail)
            counts[out.reason] += 1
    copy = f"question: {seed.prompt['expression']}\nfunctions: {', '.join(seed.prompt['functions'])}"
    assert domain.parse_task(copy, seed).reason == "copy_of_seed"
    assert time.perf_counter() - start < 2.0
    assert sum(counts.values()) == sum(len(v) for v in HOSTILE.values())


def test_hostile_agent_text_scores_zero(domain):
    task = domain.seeds("train")[0]
    for text in ("", "[" * 100_000, "<tool_call>" + "[" * 10_000 + "</tool_call>",
                 '<tool_call>{"name": "add", "arguments": {"a": ' + "9" * 5000 + ', "b": 1}}</tool_call>',
                 "<tool_call>" * 1000, "x" * 1_000_000):
        assert domain.score(task, text) == 0.0


def test_fenced_generation_and_compute_prefix_are_read(domain):
    seed = domain.seeds("train")[0]
    task = domain.parse_task("```\nQuestion: Compute 12 - 5.\nFunctions: sub , max\n```", seed)
    assert isinstance(task, Task) and task.prompt["expression"] == "12 - 5"
    assert task.prompt["functions"] == ["sub", "max"] and task.metadata["level"] == 2


def test_a_stated_answer_after_equals_is_ignored_and_anything_else_after_it_is_not_an_expression():
    read = calc.read_generation
    assert read("question: 2 + 3 = 5\nfunctions: add")["expression"] == "2 + 3"
    assert read("question: (4 - 1) * 2 =\nfunctions: sub, mul")["expression"] == "(4 - 1) * 2"
    for text in ("question: 2 + 3 = x\nfunctions: add", "question: 2 = 3 + 1\nfunctions: add"):
        with pytest.raises(calc.Invalid):
            read(text)


def test_the_instruct_prompts_state_the_format_the_levels_and_what_the_agent_did():
    d = CalcDomain(prompt_style="instruct", complete_functions=True)
    seed = [t for t in d.seeds("train") if t.category == "level_3"][0]
    informed = d.simulator_prompt(seed, [1.0, 0.0, 1.0], "harder", 0.5).messages
    blind = d.simulator_prompt(seed, None, "harder", 0.5).messages
    assert informed[0]["role"] == "system" and "level 4" in informed[1]["content"].splitlines()[-1]
    assert calc.write_generation(seed.prompt["expression"], seed.prompt["functions"]) in informed[1]["content"]
    assert "67%" in informed[1]["content"] and "%" not in blind[1]["content"].replace("%, sqrt", "")
    agent = d.agent_prompt(seed).messages
    assert agent[0]["content"].startswith(calc.INSTRUCT_AGENT_SYSTEM)
    assert agent[0]["content"].endswith("Functions: " + ", ".join(f"{n}(a, b)" for n in seed.prompt["functions"]))
    assert agent[1] == {"role": "user", "content": seed.prompt["question"]}


def test_a_seventh_level_is_an_option_that_leaves_the_six_level_seeds_alone():
    six, seven = CalcDomain(), CalcDomain(num_levels=7)
    assert [t.task_id for t in six.seeds("test")] == [t.task_id for t in CalcDomain(num_levels=6).seeds("test")]
    assert {t.category for t in seven.seeds("test")} == {f"level_{n}" for n in range(1, 8)}
    hard = [t for t in seven.seeds("train") if t.category == "level_7"]
    assert hard and all(t.metadata["ops"] > 4 for t in hard)  # beyond level 6's four operations
    six_ops = "question: 1 + 2 + 3 + 4 + 5 + 6 + 7\nfunctions: add"
    seed = six.seeds("train")[0]
    assert isinstance(six.parse_task(six_ops, seed), Rejection)  # beyond level 6: out of range
    assert seven.parse_task(six_ops, seed).category == "level_7"
    assert "L7 6,3,5" in seven.simulator_prompt(seed, (), "harder").messages[-1]["content"]
    instruct = CalcDomain(num_levels=7, prompt_style="instruct")
    assert "level 7: at most 6 operations" in instruct.simulator_prompt(seed, None, "similar").messages[1]["content"]
    with pytest.raises(ValueError, match="num_levels=9: expected an integer from 2 to 7"):
        CalcDomain(num_levels=9)
