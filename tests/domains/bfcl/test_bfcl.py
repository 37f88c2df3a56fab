"""BFCL domain: seeds and split, official-checker rewards, prompts, parse_task, records."""

import json
import sys

import pytest

from genenv_jax.domains import Rejection, StepOutcome, Task, get_domain
from genenv_jax.domains.bfcl import __main__ as bfcl_cli, domain as bfcl_mod
from genenv_jax.domains.bfcl import checker as bfcl_checker, data as bfcl_data, schema as bfcl_schema
from genenv_jax.domains.bfcl.domain import BFCLDomain
from genenv_jax.domains.bfcl.generation import task_as_generation
from genenv_jax.text.tokenization import ToolCall, render_tool_calls
from tests.support import FIXTURES

# Shipped entries whose possible answer no output can satisfy (see docs/bfcl.md).
UNSATISFIABLE = {
    "live_simple_106-63-0": "empty_answer_values",
    "live_simple_112-68-0": "empty_answer_values",
    "live_multiple_507-149-4": "missing_required_argument",
    "live_multiple_862-181-3": "unknown_argument",
    "live_multiple_964-207-0": "unknown_argument",
}
SHIPPED_COUNTS = {"simple_python": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200,
                  "live_simple": 258, "live_multiple": 1053, "live_parallel": 16, "live_parallel_multiple": 24,
                  "irrelevance": 240, "live_irrelevance": 884}
# The default split (0.7 / 0.1 / 0.2, salt genenv-bfcl-split-v1), pinned: it must not drift.
SPLIT_COUNTS = {"simple_python": (280, 40, 80), "multiple": (140, 20, 40), "parallel": (140, 20, 40),
                "parallel_multiple": (140, 20, 40), "live_simple": (181, 26, 51), "live_multiple": (737, 108, 208),
                "live_parallel": (11, 2, 3), "live_parallel_multiple": (17, 2, 5), "irrelevance": (168, 24, 48),
                "live_irrelevance": (619, 96, 169)}
SPLIT_DIGEST = "cc459937909fb3f6aed860f4705b5383046b8ab7cc0f70627248a65191201c09"


@pytest.fixture(scope="module")
def domain():
    return BFCLDomain()


@pytest.fixture(scope="module")
def seeds(domain):
    return {t.task_id: t for t in domain.seeds("all")}


# ------------------------------------------------------------------------ seeds and split
def test_seed_counts_and_pinned_split(domain):
    counts = domain.split_counts()
    assert {c: sum(v.values()) for c, v in counts.items()} == SHIPPED_COUNTS
    assert {c: (v["train"], v["validation"], v["test"]) for c, v in counts.items()} == SPLIT_COUNTS
    assignment = {t.task_id: t.metadata["split"] for t in domain.seeds("all")}
    assert bfcl_data.split_digest(assignment) == SPLIT_DIGEST


def test_split_is_disjoint_stratified_and_keeps_live_groups_together(domain):
    splits = {s: {t.task_id for t in domain.seeds(s)} for s in bfcl_data.SPLITS}
    assert not (splits["train"] & splits["validation"] or splits["train"] & splits["test"]
                or splits["validation"] & splits["test"])
    assert sum(map(len, splits.values())) == sum(SHIPPED_COUNTS.values())
    for category, (train, val, test) in SPLIT_COUNTS.items():
        n = SHIPPED_COUNTS[category]
        assert abs(train / n - 0.7) < 0.05 and abs(test / n - 0.2) < 0.07, category
    group_split = {}
    for t in domain.seeds("all"):
        unit = bfcl_data.split_unit(t.task_id, t.category)
        assert group_split.setdefault(unit, t.metadata["split"]) == t.metadata["split"], unit
    assert bfcl_data.split_unit("live_multiple_12-3-4", "live_multiple") == "live_multiple/group-3"


def test_split_fractions_and_salt_are_configurable():
    entries = bfcl_data.load_category("simple_python")
    a = bfcl_data.assign_splits(entries, bfcl_data.SplitFractions(0.5, 0.25, 0.25))
    assert sorted(list(a.values()).count(s) for s in bfcl_data.SPLITS) == [100, 100, 200]
    b = bfcl_data.assign_splits(entries, bfcl_data.SplitFractions(0.5, 0.25, 0.25), salt="other")
    assert a != b and sorted(a.values()) == sorted(b.values())
    with pytest.raises(ValueError, match="sum to 1"):
        bfcl_data.SplitFractions(0.5, 0.5, 0.5)


def test_stats_cli(capsys):
    assert bfcl_cli.main(["--stats"]) == 0
    out = capsys.readouterr().out
    assert "| live_multiple | 737 | 108 | 208 | 1053 |" in out
    assert "| **all** | 2433 | 358 | 684 | 3475 |" in out
    assert SPLIT_DIGEST in out


def test_get_domain_and_unknown_names():
    assert isinstance(get_domain("bfcl", categories=("irrelevance",)), BFCLDomain)
    with pytest.raises(ValueError, match="unknown domain"):
        get_domain("nope")
    with pytest.raises(ValueError, match="unknown BFCL categories"):
        BFCLDomain(categories=("simple_java",))
    with pytest.raises(ValueError, match="unknown split"):
        BFCLDomain(categories=("irrelevance",)).seeds("dev")


# ------------------------------------------------------------------------ official checker
def test_checker_adapter_leaves_sys_modules_clean():
    module = bfcl_checker.official_checker_module()
    assert module.__file__.endswith("bfcl_eval/eval_checker/ast_eval/ast_checker.py")
    assert "bfcl_eval.constants.model_config" not in sys.modules
    assert bfcl_checker._CHECKER_MODULE not in sys.modules


def test_reward_on_every_shipped_possible_answer(domain):
    """Reference response (first acceptable values) -> text -> parsed -> official checker."""
    report = bfcl_cli.shipped_answer_check(domain)
    assert {c: r["total"] for c, r in report.items()} == SHIPPED_COUNTS
    for category, r in report.items():
        assert r["passed"] / r["total"] >= 0.99, (category, r["failures"])
    failures = {task_id for r in report.values() for task_id, _ in r["failures"]}
    assert failures == set(UNSATISFIABLE)


def _other_value(value, candidates):
    """A value of the same type that is not acceptable, or None when unsure."""
    std = bfcl_checker.official_checker_module().standardize_string
    if isinstance(value, bool):
        new = not value
        return None if new in candidates else new
    if isinstance(value, (int, float)):
        return value + 7919
    if isinstance(value, str):
        new = value + " zqxj"
        return None if std(new) in {std(c) for c in candidates if isinstance(c, str)} else new
    if isinstance(value, list):
        return value + (value[-1:] if value else ["zqxj"])
    return None


def _wrong_type(value, schema):
    if schema.get("type") in ("any",) or value is None:
        return None
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, (int, float)):
        return str(value) + "x"
    if isinstance(value, str):
        return 4242
    if isinstance(value, (list, dict)):
        return 4242
    return None


def _perturbations(task):
    """(name, calls) wrong answers derived from the reference calls; plus the reordered parallel answer."""
    functions = {f["name"]: f for f in task.prompt["functions"]}
    calls = bfcl_schema.reference_calls(task.prompt["functions"], task.verifier["ground_truth"])
    out = [("wrong_function", [ToolCall(calls[0].name + "_v2", calls[0].arguments)] + calls[1:])]
    first = calls[0]
    gt_args = list(task.verifier["ground_truth"][0].values())[0]
    props = functions[first.name]["parameters"]["properties"]
    required = functions[first.name]["parameters"]["required"]
    out.append(("extra_argument", [ToolCall(first.name, {**first.arguments, "zqxj_unexpected": 1})] + calls[1:]))
    for pname in required:
        if pname in first.arguments:
            args = {k: v for k, v in first.arguments.items() if k != pname}
            out.append((f"missing_required:{pname}", [ToolCall(first.name, args)] + calls[1:]))
            break
    for pname, value in first.arguments.items():
        candidates = [c for c in gt_args[pname] if c != ""]
        declared = bfcl_checker.official_checker_module().PYTHON_TYPE_MAPPING.get(props[pname]["type"])
        if any(type(c) is not declared for c in candidates) or props[pname]["type"] in ("dict", "any"):
            continue  # BFCL "variable" answers or dict answers: skip, the perturbation is ambiguous
        wrong = _other_value(value, candidates)
        if wrong is not None:
            out.append((f"wrong_value:{pname}", [ToolCall(first.name, {**first.arguments, pname: wrong})] + calls[1:]))
        wrong = _wrong_type(value, props[pname])
        if wrong is not None:
            out.append((f"wrong_type:{pname}", [ToolCall(first.name, {**first.arguments, pname: wrong})] + calls[1:]))
        break
    if len(calls) > 1:
        out.append(("dropped_call", calls[:-1]))
    out.append(("duplicated_call", calls + calls[:1]))
    return calls, out


def test_perturbed_answers_score_zero(domain):
    tried, reorder_failures = 0, []
    for task in domain.seeds("all"):
        if task.category in bfcl_data.IRRELEVANCE_CATEGORIES or task.task_id in UNSATISFIABLE:
            continue
        calls, perturbed = _perturbations(task)
        for name, wrong in perturbed:
            tried += 1
            assert domain.score(task, render_tool_calls(wrong)) == 0.0, (task.task_id, name)
        if "parallel" in task.category and len(calls) > 1:  # the checker ignores call order ...
            if domain.score(task, render_tool_calls(calls[::-1])) != 1.0:
                reorder_failures.append(task.task_id)
    assert tried > 14000
    # ... but matches greedily: parallel_178's first possible answer accepts two of the calls.
    assert reorder_failures == ["parallel_178"]


def test_irrelevance_scores_on_absence_of_calls(domain, seeds):
    task = seeds["irrelevance_0"]
    assert domain.score(task, "None of the functions fit.") == 1.0
    assert domain.score(task, domain.reference_response(task)) == 1.0
    call = '{"name": "determine_body_mass_index", "arguments": {"weight": 70.0, "height": 1.8}}'
    details = domain.score_details(task, f"<tool_call>\n{call}\n</tool_call>").details
    assert details["error_type"] == "irrelevance_error:decoder_success"
    # BFCL reads only `<tool_call>\n...\n</tool_call>` and drops what is not JSON: neither is a call.
    assert domain.score(task, f"<tool_call>{call}</tool_call>") == 1.0
    assert domain.score(task, '<tool_call>\n{"name": oops}\n</tool_call>') == 1.0
    lenient = BFCLDomain(decoding="lenient")  # this project's reading: any block attempts a call
    assert lenient.score_details(task, f"<tool_call>{call}</tool_call>").details["error_type"] == \
        "irrelevance:made_a_call"
    assert lenient.score(task, '<tool_call>{"name": oops}</tool_call>') == 0.0  # malformed still attempts


def test_score_details_explain_failures(domain, seeds):
    task = seeds["simple_python_0"]
    good = '<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}\n</tool_call>'
    assert domain.score(task, good) == 1.0
    assert domain.score(task, "Sure, " + good.replace("10", "10.0")) == 0.0  # float for an integer
    malformed = good + '<tool_call>{"name": </tool_call>'
    assert domain.score(task, malformed) == 1.0  # BFCL does not read the second block
    broken = domain.score_details(task, '<tool_call>\n{"name": "calculate_triangle_area"}\n</tool_call>')
    assert broken.reward == 0.0 and broken.details["error_type"] == "ast_decoder:decoder_failed"
    wrong = domain.score_details(task, good.replace('"base": 10', '"base": 11'))
    assert wrong.reward == 0.0 and wrong.details["error_type"] == "value_error:others"
    assert domain.score_details(task, "no call").details["error_type"] == "simple_function_checker:wrong_count"
    lenient = BFCLDomain(decoding="lenient").score_details(task, malformed)
    assert lenient.reward == 0.0 and lenient.details["error_type"] == "parse_error:invalid_json"


# ------------------------------------------------------------------------ agent side
def test_agent_prompt_and_step(domain, seeds):
    task = seeds["live_multiple_1-0-1"]
    prompt = domain.agent_prompt(task)
    assert prompt.messages == task.prompt["question"] and prompt.messages[0]["role"] == "system"
    assert [t["name"] for t in prompt.tools] == [f["name"] for f in task.prompt["functions"]]
    assert all(t["description"].endswith(bfcl_mod.PYTHON_HINT) for t in prompt.tools)
    assert not task.prompt["functions"][0]["description"].endswith(bfcl_mod.PYTHON_HINT)  # task untouched
    env = domain.environment(task)  # single-turn: one agent turn, scored by score_details
    assert env.reset() == prompt
    answer = domain.reference_response(task)
    assert env.step(answer) == StepOutcome(observation=[], done=True)
    transcript = prompt.messages + [{"role": "assistant", "content": answer}]
    assert env.score(transcript) == domain.score_details(task, answer) and env.score(transcript).reward == 1.0


def test_agent_prompt_renders_with_tokenizer(domain, seeds):
    from genenv_jax.text import tokenization as tk
    tok = tk.load_tokenizer()
    task = seeds["multiple_0"]
    for p in (domain.agent_prompt(task), BFCLDomain(prompt_format="qwen25_template").agent_prompt(task)):
        text = p.text if p.text is not None else tk.render_chat(tok, p.messages, p.tools)
        system = text.split("<|im_end|>")[0]
        assert '"name": "triangle_properties.get"' in system and '"name": "circle_properties.get"' in system
        assert text.endswith("<|im_start|>user\n" + task.prompt["question"][0]["content"]
                             + "<|im_end|>\n<|im_start|>assistant\n")


# ------------------------------------------------------------------------ simulator side
def test_simulator_prompt(domain, seeds):
    seed = seeds["parallel_0"]
    p = domain.simulator_prompt(seed, recent_success=[0.9, 1.0], difficulty="harder")
    assert p.tools is None and [m["role"] for m in p.messages] == ["system", "user"]
    user = p.messages[1]["content"]
    assert seed.prompt["question"][0]["content"] in user and '"spotify.play"' in user
    assert '"ground_truth"' in user and "HARDER" in user and "95%" in user
    assert "two or more calls" in user and "```json" in user
    assert "SAME" in domain.simulator_prompt(seed).messages[1]["content"]  # the default difficulty
    irr = domain.simulator_prompt(seeds["irrelevance_0"]).messages[1]["content"]
    assert "ground_truth: [] (an empty list)" in irr
    with pytest.raises(ValueError, match="difficulty"):
        domain.simulator_prompt(seed, difficulty="much harder")


@pytest.mark.parametrize("difficulty, text", sorted(bfcl_mod._DIFFICULTY_TEXT.items()))
def test_simulator_prompt_states_the_callers_alpha_and_difficulty(domain, seeds, difficulty, text):
    """The loop owns the curriculum: the prompt shows the alpha and difficulty it is given, whatever p_hat is."""
    seed = seeds["simple_python_0"]
    measured = domain.simulator_prompt(seed, [1.0, 1.0], difficulty=difficulty, alpha=0.3).messages[1]["content"]
    assert text in measured and "100% of the time" in measured and "the target is 30%." in measured
    assert sum(t in measured for t in bfcl_mod._DIFFICULTY_TEXT.values()) == 1
    unmeasured = domain.simulator_prompt(seed, (), difficulty=difficulty, alpha=0.75).messages[1]["content"]
    assert text in unmeasured and "not been measured yet; the target is 75%." in unmeasured


def test_domain_constructor_takes_no_curriculum_options():
    with pytest.raises(TypeError, match="alpha"):
        BFCLDomain(categories=("simple_python",), alpha=0.3)


def test_parse_task_accepts_a_valid_generation(domain, seeds):
    seed = seeds["simple_python_0"]
    text = ('Here you go:\n```json\n{"question": "What is the area of a triangle with base 7 and height 2?", '
            '"function": ' + json.dumps(seed.prompt["functions"]) + ', '
            '"ground_truth": [{"calculate_triangle_area": {"base": [7], "height": [2], "unit": ["units", ""]}}]}\n```')
    task = domain.parse_task(text, seed, difficulty="easier")
    assert isinstance(task, Task)
    assert task.parent_id == "simple_python_0" and task.category == "simple_python" and task.difficulty == "easier"
    assert task.task_id.startswith("simple_python_0~") and task.task_id == domain.parse_task(text, seed).task_id
    assert task.prompt["question"] == [{"role": "user", "content": "What is the area of a triangle with base 7 and height 2?"}]
    assert domain.score(task, domain.reference_response(task)) == 1.0
    # Unfenced JSON after prose is read too.
    assert isinstance(domain.parse_task(text.replace("```json", "").replace("```", ""), seed), Task)


def test_parse_task_rejects_broken_generations_with_reasons(seeds):
    domains = {"strict": BFCLDomain(), "lenient": BFCLDomain(validation="lenient")}
    cases = [json.loads(line) for line in (FIXTURES / "bfcl_broken_generations.jsonl").read_text().splitlines()]
    for case in cases:
        out = domains[case["validation"]].parse_task(case["text"], seeds[case["seed_id"]])
        assert isinstance(out, Rejection), case["case"]
        assert out.reason == case["reason"], (case["case"], out.detail)
        assert out.seed_id == case["seed_id"] and out.raw_text == case["text"] and out.detail
    # Every reason code has a fixture, but too_large: its input (over MAX_JSON_CHARS characters) is
    # built in tests/text/test_hostile_text.py rather than stored.
    assert {c["reason"] for c in cases} == set(bfcl_schema.REJECTION_REASONS) - {"too_large"}


def test_parse_task_on_every_shipped_entry(domain):
    lenient = bfcl_cli.shipped_parse_check(BFCLDomain(validation="lenient", grounding="off"))
    rejected = {c: {k: v for k, v in counter.items() if k != "accepted"} for c, counter in lenient.items()}
    assert sum(sum(r.values()) for r in rejected.values()) == len(UNSATISFIABLE)
    assert set().union(*rejected.values()) == set(UNSATISFIABLE.values())
    strict = bfcl_cli.shipped_parse_check(BFCLDomain(grounding="off"))
    assert sum(c["accepted"] for c in strict.values()) == 3394  # 76 data quirks refused (docs/bfcl.md)
    for category, counter in strict.items():
        assert counter["accepted"] <= lenient[category]["accepted"]
        extra = set(counter) - {"accepted"} - set(rejected[category])
        assert extra <= {"type_mismatch", "enum_violation", "unknown_argument"}, (category, counter)
    # The default also refuses answers with values the question does not state (grounding.py): 557
    # human-written items, mostly derived values (docs/bfcl.md, "Grounding of generated tasks").
    grounded = bfcl_cli.shipped_parse_check(domain)
    assert sum(c["accepted"] for c in grounded.values()) == 2837
    assert sum(c["ungrounded_answer"] for c in grounded.values()) == 557


def test_task_as_generation_round_trip(domain, seeds):
    seed, other = seeds["live_parallel_multiple_0-0-0"], seeds["live_parallel_multiple_1-1-0"]
    task = domain.parse_task(task_as_generation(seed), other)
    assert isinstance(task, Task)
    assert task.prompt == seed.prompt and task.verifier == seed.verifier and task.parent_id == other.task_id


# ------------------------------------------------------------------------ records
def test_records_round_trip_json(domain, seeds):
    task = seeds["live_simple_0-0-0"]
    assert Task.loads(task.dumps()) == task
    rejection = domain.parse_task("nothing here", task)
    assert Rejection.loads(rejection.dumps()) == rejection
    data = task.to_json()
    with pytest.raises(ValueError, match="schema_version 99"):
        Task.from_json({**data, "schema_version": 99})
    with pytest.raises(ValueError, match="unknown fields"):
        Task.from_json({**data, "extra": 1})
    with pytest.raises(ValueError, match="missing fields"):
        Task.from_json({k: v for k, v in data.items() if k != "verifier"})
    with pytest.raises(ValueError, match="difficulty"):
        Task(domain="bfcl", task_id="x", category="c", prompt={}, verifier={}, difficulty="hard")
    with pytest.raises(ValueError, match="needs an observation"):
        StepOutcome(observation=[], done=False)


def test_seeds_do_not_share_state_with_the_data_cache():
    fresh = BFCLDomain(categories=("simple_python",))
    task = fresh.seeds("all")[0]
    task.prompt["question"][0]["content"] = "changed"
    task.verifier["ground_truth"].clear()
    entry = bfcl_data.load_category("simple_python")[0]
    assert entry.question[0]["content"] != "changed" and entry.ground_truth
    assert BFCLDomain(categories=("simple_python",)).seeds("all")[0].verifier["ground_truth"]
    assert [t.task_id for t in fresh.seeds("all")[:3]] == ["simple_python_0", "simple_python_1", "simple_python_2"]


def test_summary_is_bfcl_style(domain):
    table = {"simple_python": {"n": 10, "correct": 5, "accuracy": 0.5},
             "multiple": {"n": 10, "correct": 10, "accuracy": 1.0},
             "live_simple": {"n": 30, "correct": 3, "accuracy": 0.1},
             "live_multiple": {"n": 10, "correct": 9, "accuracy": 0.9},
             "irrelevance": {"n": 4, "correct": 4, "accuracy": 1.0}}
    s = domain.summary(table)
    assert s["non_live_ast"] == pytest.approx(0.75)
    assert s["live_ast"] == pytest.approx(12 / 40)  # weighted by items
    assert s["irrelevance"] == pytest.approx(1.0)
    assert s["overall"] == pytest.approx((0.5 + 1.0 + 0.1 + 0.9 + 1.0) / 5)
    assert s["overall_micro"] == pytest.approx(31 / 64)


def test_reference_generation_is_a_valid_generation_from_the_same_split(domain, seeds):
    train = domain.seeds("train")
    for i, seed in enumerate(train[::7]):
        text = domain.reference_generation(seed, train[(7 * i + 1) % len(train)])
        task = domain.parse_task(text, seed)
        assert isinstance(task, Task), (seed.task_id, task)
        sibling = seeds[next(t.task_id for t in train if t.prompt == {"question": task.prompt["question"],
                                                                     "functions": task.prompt["functions"]})]
        assert sibling.category == seed.category and sibling.metadata["split"] == "train"
    # A sibling from another category is replaced by one of the seed's category and split.
    seed = domain.seeds("test")[0]
    text = domain.reference_generation(seed, seeds["irrelevance_0"])
    chosen = json.loads(text.removeprefix("```json\n").removesuffix("\n```"))
    match = [t for t in domain.seeds("all") if t.prompt["functions"] == chosen["function"]
             and t.verifier["ground_truth"] == chosen["ground_truth"]]
    assert match and all(t.category == seed.category and t.metadata["split"] == "test" for t in match)
    assert isinstance(domain.parse_task(text, seed), Task)
