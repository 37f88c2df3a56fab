"""Hostile model text: every reader of model text returns a counted outcome, in linear time.

Generation is replayed exactly on resume, so an exception (or a parse that takes minutes) on one
generated text would stop a run at the same epoch forever. Each case pins its exact outcome: a
Rejection reason of `parse_task`, a parse-error reason of `parse_tool_calls`, or reward 0 with
the reason in `score_details`. Time is checked as a ratio (10x the input may take at most 30x the
time, plus a little slack for timer noise), which a quadratic parser fails by far: before the
parsers were made linear, 100,000 stray `</tool_call>` took about 25 s.
"""

import json
import time

import pytest

from genenv_jax.core import json_text as jt
from genenv_jax.text import tokenization as tk
from genenv_jax.domains import Rejection, Task, get_domain
from genenv_jax.domains.bfcl import checker as bfcl_checker, schema as bfcl_schema
from genenv_jax.text.tokenization import ToolCall, parse_tool_calls

SEED_ID = "simple_python_0"        # calculate_triangle_area(base: integer, height: integer, unit: string)
ARRAY_SEED_ID = "simple_python_82"  # calculate_average(numbers: array of float)
GOOD_CALL = '{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}'


@pytest.fixture(scope="module")
def domain():
    """The lenient reading (`decoding="lenient"`, this project's `parse_tool_calls`), whose reasons these
    tests pin; BFCL's own reading, the default, meets hostile replies in test_bfcl_exact.py."""
    return get_domain("bfcl", categories=("simple_python",), decoding="lenient")


@pytest.fixture(scope="module")
def seeds(domain):
    return {t.task_id: t for t in domain.seeds("all")}


@pytest.fixture(scope="module")
def seed(seeds):
    return seeds[SEED_ID]


def _best_time(fn, text: str, repeats: int = 3) -> float:
    """Fastest of a few runs of fn(text), in seconds (the minimum is the least noisy estimate)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - start)
    return best


def _assert_linear(fn, make_text, small: int, big: int) -> None:
    """fn on make_text(big) (big = 10 * small) takes at most 30x its time on make_text(small)."""
    assert big == 10 * small
    t_small, t_big = _best_time(fn, make_text(small)), _best_time(fn, make_text(big))
    assert t_big <= 30 * t_small + 0.05, (t_small, t_big)


def _nested(bracket: str, levels: int) -> str:
    closing = {"[": "]", "{": "}"}[bracket]
    return bracket * levels + closing * levels


def _placed(placement: str, payload: str) -> str:
    return {"fence": "Here it is.\n```json\n" + payload + "\n```",
            "tool_call": "<tool_call>\n" + payload + "\n</tool_call>",
            "whole": payload}[placement]


# A question stating every ground-truth value of `_task_json` (the grounding check refuses any other).
GROUNDED_QUESTION = "Area of a triangle with base 7 and height 2"


def _task_json(question: str, seed: Task) -> dict:
    return {"question": question, "function": seed.prompt["functions"],
            "ground_truth": [{"calculate_triangle_area": {"base": [7], "height": [2]}}]}


# ------------------------------------------------------------------------ nesting bombs
# What parse_task makes of a bomb: inside a fence it is the generation's JSON; as the whole text
# (or in a tool-call block) only `{` can start the unfenced object parse_task looks for.
PARSE_TASK_OUTCOME = {("fence", "["): "too_deep", ("fence", "{"): "too_deep",
                      ("tool_call", "["): "no_json", ("tool_call", "{"): "too_deep",
                      ("whole", "["): "no_json", ("whole", "{"): "too_deep"}


@pytest.mark.parametrize("levels", [1_000, 100_000])
@pytest.mark.parametrize("bracket", ["[", "{"])
@pytest.mark.parametrize("placement", ["fence", "tool_call", "whole"])
def test_nesting_bomb_in_a_generation_is_a_counted_rejection(domain, seed, placement, bracket, levels):
    text = _placed(placement, _nested(bracket, levels))
    out = domain.parse_task(text, seed)
    assert isinstance(out, Rejection) and out.reason == PARSE_TASK_OUTCOME[placement, bracket], out.detail
    assert out.reason in domain.rejection_reasons and out.raw_text == text


@pytest.mark.parametrize("levels", [1_000, 100_000])
@pytest.mark.parametrize("bracket", ["[", "{"])
def test_nesting_bomb_in_a_tool_call_is_a_parse_error_and_reward_zero(domain, seed, bracket, levels):
    text = _placed("tool_call", _nested(bracket, levels))
    parsed = parse_tool_calls(text)
    assert parsed.calls == [] and [e.reason for e in parsed.errors] == ["too_deep"]
    result = domain.score_details(seed, text)
    assert result.reward == 0.0 and result.details["error_type"] == "parse_error:too_deep"


@pytest.mark.parametrize("levels", [1_000, 100_000])
@pytest.mark.parametrize("placement", ["fence", "whole"])
def test_nesting_bomb_outside_tool_calls_is_no_call(domain, seed, placement, levels):
    text = _placed(placement, _nested("[", levels))
    parsed = parse_tool_calls(text)
    assert parsed.ok and not parsed.attempted_call and parsed.content == text.strip()
    result = domain.score_details(seed, text)
    assert result.reward == 0.0 and result.details["error_type"] == "simple_function_checker:wrong_count"


def test_nesting_bomb_costs_the_same_at_any_size(domain, seed):
    _assert_linear(lambda t: domain.parse_task(t, seed), lambda n: _placed("fence", _nested("[", n)), 10_000, 100_000)
    _assert_linear(parse_tool_calls, lambda n: _placed("tool_call", _nested("{", n)), 10_000, 100_000)


# ------------------------------------------------------------------------ tag and fence floods
def test_stray_closing_tags(domain, seed):
    text = tk.TOOL_CALL_CLOSE * 100_000
    parsed = parse_tool_calls(text)
    limit = tk.MAX_TOOL_CALL_BLOCKS
    assert [e.reason for e in parsed.errors] == ["unopened_tag"] * limit + ["too_many_blocks"]
    assert parsed.errors[-1].index == limit and parsed.calls == [] and parsed.content == ""
    result = domain.score_details(seed, text)
    assert result.reward == 0.0 and result.details["error_type"] == "parse_error:unopened_tag"
    assert domain.parse_task(text, seed).reason == "no_json"
    _assert_linear(parse_tool_calls, lambda n: tk.TOOL_CALL_CLOSE * n, 10_000, 100_000)


def test_stray_closing_tags_before_a_call_still_count(domain, seed):
    text = tk.TOOL_CALL_CLOSE * 3 + f"{tk.TOOL_CALL_OPEN}{GOOD_CALL}{tk.TOOL_CALL_CLOSE}"
    parsed = parse_tool_calls(text)
    assert [c.name for c in parsed.calls] == ["calculate_triangle_area"]
    assert [(e.index, e.reason) for e in parsed.errors] == [(0, "unopened_tag"), (1, "unopened_tag"),
                                                            (2, "unopened_tag")]
    assert domain.score_details(seed, text).details["error_type"] == "parse_error:unopened_tag"


def test_unclosed_opening_tags(domain, seed):
    text = tk.TOOL_CALL_OPEN * 100_000
    parsed = parse_tool_calls(text)
    # No closing tag follows anywhere, so the first block runs to the end of the text.
    assert [(e.index, e.reason) for e in parsed.errors] == [(0, "unclosed_tag")]
    assert parsed.errors[0].block == text and parsed.content == ""
    result = domain.score_details(seed, text)
    assert result.reward == 0.0 and result.details["error_type"] == "parse_error:unclosed_tag"
    assert domain.parse_task(text, seed).reason == "no_json"
    _assert_linear(parse_tool_calls, lambda n: tk.TOOL_CALL_OPEN * n, 10_000, 100_000)


def test_unclosed_tags_then_one_closing_tag():
    """Each opening tag ends where the next opens: a flood before a late `</tool_call>` is capped."""
    text = tk.TOOL_CALL_OPEN * 100_000 + GOOD_CALL + tk.TOOL_CALL_CLOSE
    parsed = parse_tool_calls(text)
    limit = tk.MAX_TOOL_CALL_BLOCKS
    assert [e.reason for e in parsed.errors] == ["unclosed_tag"] * limit + ["too_many_blocks"]
    _assert_linear(parse_tool_calls, lambda n: tk.TOOL_CALL_OPEN * n + GOOD_CALL + tk.TOOL_CALL_CLOSE,
                   10_000, 100_000)


@pytest.mark.parametrize("fence, reason", [
    ("```", "no_json"),            # fences that open no JSON value
    ("```json\n", "no_json"),
    ("```json\n{", "too_deep"),    # each opens an object; together they nest past the limit
    ("```json\n[", "too_deep"),
])
def test_fence_floods(domain, seed, fence, reason):
    out = domain.parse_task(fence * 100_000, seed)
    assert isinstance(out, Rejection) and out.reason == reason, out.detail
    # `fence * 20_000` took 1.1 s before (every failed try counted the lines up to its start).
    _assert_linear(lambda t: domain.parse_task(t, seed), lambda n: fence * n, 10_000, 100_000)


def test_fence_flood_before_a_valid_generation_is_still_read(domain, seed):
    good = "```json\n" + json.dumps(_task_json(GROUNDED_QUESTION + "?", seed)) + "\n```"
    assert isinstance(domain.parse_task("```" * 100_000 + "\n" + good, seed), Task)


def test_failed_fences_are_tried_at_most_max_candidates_times(domain, seed):
    """A valid block after more than MAX_JSON_CANDIDATES broken ones is not looked for."""
    good = "```json\n" + json.dumps(_task_json(GROUNDED_QUESTION + "?", seed)) + "\n```\n"
    broken = '```json\n{"question": }\n```\n'
    near = broken * (jt.MAX_JSON_CANDIDATES - 1) + good
    assert isinstance(domain.parse_task(near, seed), Task)
    assert domain.parse_task(broken * jt.MAX_JSON_CANDIDATES + good, seed).reason == "invalid_json"


# ------------------------------------------------------------------------ size
def test_megabyte_json_string_in_a_generation_is_too_large(domain, seed):
    question = "x" * 1_100_000
    fenced = "```json\n" + json.dumps(_task_json(question, seed)) + "\n```"
    assert domain.parse_task(fenced, seed).reason == "too_large"
    unfenced = "Task: " + json.dumps(_task_json(question, seed))
    assert domain.parse_task(unfenced, seed).reason == "too_large"
    _assert_linear(lambda t: domain.parse_task(t, seed),
                   lambda n: "```json\n" + json.dumps(_task_json("y" * n, seed)) + "\n```", 110_000, 1_100_000)


def test_megabyte_json_string_in_a_tool_call_is_too_large(domain, seed):
    body = json.dumps({"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5,
                                                                       "unit": "u" * 1_100_000}})
    text = tk.TOOL_CALL_OPEN + body + tk.TOOL_CALL_CLOSE
    assert [e.reason for e in parse_tool_calls(text).errors] == ["too_large"]
    result = domain.score_details(seed, text)
    assert result.reward == 0.0 and result.details["error_type"] == "parse_error:too_large"


def test_generation_just_under_the_size_limit_is_read(domain, seed):
    overhead = len(json.dumps(_task_json("", seed)))
    question = GROUNDED_QUESTION + "? " + "z" * (jt.MAX_JSON_CHARS - overhead - 60)
    text = "```json\n" + json.dumps(_task_json(question, seed)) + "\n```"
    assert isinstance(domain.parse_task(text, seed), Task)


# ------------------------------------------------------------------------ deep arguments and the checker
def test_deep_arguments_in_an_otherwise_valid_call_score_zero(domain, seed):
    deep = "<tool_call>" + GOOD_CALL.replace('"base": 10', '"base": ' + _nested("[", 1_000)) + "</tool_call>"
    assert domain.score(seed, deep) == 0.0
    assert domain.score_details(seed, deep).details["error_type"] == "parse_error:too_deep"
    good = "<tool_call>" + GOOD_CALL + "</tool_call>"
    assert domain.score(seed, good) == 1.0


def test_arguments_at_the_depth_limit_reach_the_official_checker(domain, seeds):
    """The deepest body the parser accepts (object, arguments, then nested lists) is checked safely."""
    task = seeds[ARRAY_SEED_ID]
    levels = jt.MAX_JSON_DEPTH - 2
    text = ('<tool_call>{"name": "calculate_average", "arguments": {"numbers": '
            + _nested("[", levels) + "}}</tool_call>")
    parsed = parse_tool_calls(text)
    assert parsed.ok and jt.json_nesting_depth(parsed.calls[0].arguments) == levels + 1
    result = domain.score_details(task, text)
    assert result.reward == 0.0 and result.details["error_type"] == "type_error:nested"


def test_checker_refuses_deep_calls_before_running(seed):
    deep: list = []
    for _ in range(2_000):
        deep = [deep]
    result = bfcl_checker.check_calls(seed.prompt["functions"], [ToolCall("calculate_triangle_area", {"base": deep})],
                                      seed.verifier["ground_truth"], seed.category)
    assert not result.valid and result.error_type == "too_deep" and "calls" in result.errors[0]


def test_checker_exception_is_a_failed_check(seed):
    broken_docs = [{"name": "calculate_triangle_area"}]  # no "parameters": the official checker raises
    result = bfcl_checker.check_calls(broken_docs, [ToolCall("calculate_triangle_area", {"base": 10})],
                                      seed.verifier["ground_truth"], seed.category)
    assert not result.valid and result.error_type == "checker_exception:KeyError"


# ------------------------------------------------------------------------ odd characters
@pytest.mark.parametrize("surrogate", ["\\ud800", "\ud800", "\\udfff"])
def test_lone_surrogates(domain, seed, surrogate):
    call = GOOD_CALL.replace('"height": 5', f'"height": 5, "unit": "cm{surrogate}"')
    text = tk.TOOL_CALL_OPEN + call + tk.TOOL_CALL_CLOSE
    assert [e.reason for e in parse_tool_calls(text).errors] == ["invalid_unicode"]
    assert domain.score_details(seed, text).details["error_type"] == "parse_error:invalid_unicode"
    generation = "```json\n" + json.dumps(_task_json("Area of a triangle QQ?", seed)).replace("QQ", surrogate) + "\n```"
    out = domain.parse_task(generation, seed)
    assert isinstance(out, Rejection) and out.reason == "invalid_unicode"


def test_surrogate_pair_escape_is_a_character(domain, seed):
    question = GROUNDED_QUESTION + " \U0001F4D0?"
    generation = "```json\n" + json.dumps(_task_json(question, seed), ensure_ascii=True) + "\n```"
    assert "\\ud83d\\udcd0" in generation
    task = domain.parse_task(generation, seed)
    assert isinstance(task, Task) and task.prompt["question"][0]["content"] == question


def test_nul_bytes(domain, seed):
    raw_in_string = tk.TOOL_CALL_OPEN + GOOD_CALL.replace('"height": 5', '"height": 5, "unit": "c\x00m"') \
        + tk.TOOL_CALL_CLOSE
    assert [e.reason for e in parse_tool_calls(raw_in_string).errors] == ["invalid_json"]  # a control character
    around = "\x00" + tk.TOOL_CALL_OPEN + GOOD_CALL + tk.TOOL_CALL_CLOSE + "\x00"
    assert domain.score(seed, around) == 1.0 and parse_tool_calls(around).content == "\x00\x00"
    raw_question = "```json\n" + json.dumps(_task_json("Area of a triangle QQ?", seed)).replace("QQ", "\x00") + "\n```"
    assert domain.parse_task(raw_question, seed).reason == "invalid_json"
    escaped = "```json\n" + json.dumps(_task_json(GROUNDED_QUESTION + " \x00?", seed)) + "\n```"
    assert "\\u0000" in escaped
    task = domain.parse_task(escaped, seed)
    assert isinstance(task, Task) and Task.loads(task.dumps()) == task


@pytest.mark.parametrize("value", ["NaN", "-Infinity", "1e400", "9" * 5_000])
def test_numbers_json_cannot_carry(domain, seed, value):
    text = tk.TOOL_CALL_OPEN + GOOD_CALL.replace('"base": 10', f'"base": {value}') + tk.TOOL_CALL_CLOSE
    result = domain.score_details(seed, text)
    assert result.reward == 0.0 and result.details["error_type"] == "parse_error:invalid_json"


# ------------------------------------------------------------------------ reason codes
def test_every_limit_reason_is_a_counted_rejection_reason(domain):
    assert set(jt.JSON_TEXT_ERRORS) <= set(domain.rejection_reasons) == set(bfcl_schema.REJECTION_REASONS)
