"""BFCL, exactly (issue 50): our BFCL prompts are the bytes and token ids BFCL's own Qwen handlers
write, and our default verdict on a reply is the one BFCL's own pipeline gives (the handler's
response parsing and `decode_ast`, then eval_runner's per-entry judge and `ast_checker`).

The references are BFCL's code, not rewrites: bfcl-eval 2026.3.23's `QwenFCHandler` and
`QwenHandler` (installed; imported through `official.py`'s stand-ins for `openai`, `overrides`,
`tenacity` and the tree-sitter parsers, packages bfcl-eval is installed without and whose code none
of this runs), and gorilla commit 7dfa6747's handlers, copied verbatim in tests/fixtures/bfcl_7dfa6747.py.
"""

import copy
import importlib.util
import json
import types

import pytest
from bfcl_eval.constants.enums import Language, ReturnFormat
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

from genenv_jax.domains.bfcl import official, replies
from genenv_jax.domains.bfcl.data import CATEGORIES
from genenv_jax.domains.bfcl.domain import BFCLDomain
from genenv_jax.text.chat_text import ChatText
from tests.support import TESTS

_spec = importlib.util.spec_from_file_location("bfcl_7dfa6747", TESTS / "fixtures" / "bfcl_7dfa6747.py")
old = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(old)

AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_irrelevance")
PER_CATEGORY = 24


def _non_ascii(entry) -> bool:
    return json.dumps(entry["function"]) != json.dumps(entry["function"], ensure_ascii=False)


@pytest.fixture(scope="module")
def entries():
    """BFCL's own test entries (its loader, its Python hint; `hinted`) and the raw ones 7dfa6747's
    handlers hinted themselves (`raw`): 24 spread over each AST category and irrelevance, every entry
    whose docs hold non-ASCII, every tool-less one and every one with a system or assistant message."""
    hinted, raw = {}, {}
    for category in CATEGORIES:
        with_hint = load_dataset_entry(category, include_prereq=False)
        without = {e["id"]: e for e in load_dataset_entry(category, include_prereq=False,
                                                          include_language_specific_hint=False)}
        step = max(1, len(with_hint) // PER_CATEGORY)
        for i, e in enumerate(with_hint):
            roles = {m["role"] for m in e["question"][0]}
            spread = category in AST_CATEGORIES and i % step == 0 and i // step < PER_CATEGORY
            if spread or _non_ascii(e) or not e["function"] or roles != {"user"}:
                hinted[e["id"]], raw[e["id"]] = e, without[e["id"]]
    return hinted, raw


@pytest.fixture(scope="module")
def seeds():
    return {t.task_id: t for t in BFCLDomain().seeds("all")}


def _current(class_name, entry):
    """The prompt bfcl-eval 2026.3.23 sends: `inference_single_turn_prompting` up to `_format_prompt`."""
    handler = official.handler(class_name)
    entry = copy.deepcopy(entry)
    data = handler._pre_query_processing_prompting(entry)
    data = handler.add_first_turn_message_prompting(data, entry["question"][0])
    return handler._format_prompt(data["message"], data["function"])


def _qwen25(fc: bool, entry):
    """The prompt 7dfa6747 sent: its `_pre_query_processing_prompting` (FC handler's, or OSSHandler's
    with the system prompt), `add_first_turn_message_prompting`, then `_format_prompt`."""
    entry = copy.deepcopy(entry)
    category = entry["id"].rsplit("_", 1)[0]
    functions = old.func_doc_language_specific_pre_processing(entry["function"], category)
    if fc:
        return old.qwen_fc_format_prompt(None, list(entry["question"][0]), functions)
    question = old.system_prompt_pre_processing_chat_model(entry["question"][0], functions, category)
    return old.qwen_format_prompt(None, list(question), functions)


REFERENCES = {
    ("fc", "bfcl_fc"): lambda hinted, raw: _current("QwenFCHandler", hinted),
    ("prompting", "bfcl_prompting"): lambda hinted, raw: _current("QwenHandler", hinted),
    ("fc", "bfcl_fc_qwen25"): lambda hinted, raw: _qwen25(True, raw),
    ("prompting", "bfcl_prompting_qwen25"): lambda hinted, raw: _qwen25(False, raw),
}


@pytest.mark.parametrize("mode,prompt_format", list(REFERENCES))
def test_prompt_ids_equal_the_handlers_own(entries, seeds, qwen_tokenizer, mode, prompt_format):
    hinted, raw = entries
    text = ChatText.of(qwen_tokenizer)
    domain = BFCLDomain(mode=mode, prompt_format=prompt_format)
    by_category = {}
    for entry_id, entry in hinted.items():
        expected = REFERENCES[mode, prompt_format](entry, raw[entry_id])
        prompt = domain.agent_prompt(seeds[entry_id])
        assert prompt.text == expected, entry_id
        assert text.prompt(prompt) == qwen_tokenizer.encode(expected, add_special_tokens=False), entry_id
        by_category.setdefault(seeds[entry_id].category, []).append(entry_id)
    assert all(len(by_category[c]) >= 20 for c in AST_CATEGORIES), {c: len(v) for c, v in by_category.items()}
    assert sum(_non_ascii(e) for e in hinted.values()) == 49
    assert sum(not e["function"] for e in hinted.values()) == 4


def test_the_formats_differ_where_the_issue_says(seeds):
    """What separates the formats on one entry (docs/bfcl.md, "Prompt formats")."""
    task = seeds["simple_python_0"]
    fc, qwen25 = (BFCLDomain(prompt_format=f).agent_prompt(task).text for f in ("bfcl_fc", "bfcl_fc_qwen25"))
    persona = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert persona not in fc and qwen25.startswith("<|im_start|>system\n" + persona + "\n\n# Tools")
    assert '<tools>\n{"name": "calculate_triangle_area", "description"' in fc
    assert '<tools>\n{\n    "name": "calculate_triangle_area",\n' in qwen25
    template = BFCLDomain(prompt_format="qwen25_template").agent_prompt(task)
    assert template.text is None and template.tools[0]["name"] == "calculate_triangle_area"
    assert BFCLDomain().prompt_format == "bfcl_fc_qwen25"
    assert BFCLDomain(mode="prompting").prompt_format == "bfcl_prompting_qwen25"


# ------------------------------------------------------------------ verdicts
def _bfcl_verdict(mode, entry, ground_truth, reply):
    """BFCL's own pipeline on one reply: the handler's `_parse_query_response_prompting`, then
    eval_runner's judge for the entry's category (which calls the handler's `decode_ast`)."""
    handler = official.handler("QwenFCHandler" if mode == "fc" else "QwenHandler")
    response = types.SimpleNamespace(choices=[types.SimpleNamespace(text=reply)],
                                     usage=types.SimpleNamespace(prompt_tokens=0, completion_tokens=0))
    result = handler._parse_query_response_prompting(response)["model_responses"]
    runner = official.eval_runner()
    category = entry["id"].rsplit("_", 1)[0]
    if "irrelevance" in category:
        return runner._evaluate_single_relevance_entry(handler, entry["id"], result, entry, "m", category)["valid"]
    return runner._evaluate_single_ast_entry(handler, entry["id"], result, ground_truth, entry, "m", category,
                                             Language.PYTHON, ReturnFormat.PYTHON)["valid"]


def _block(name, arguments, newline=True):
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call>" if newline else f"<tool_call>{body}</tool_call>"


AREA = {"base": 10, "height": 5}
SWIFT, MAROON = {"artist": "Taylor Swift", "duration": 20}, {"artist": "Maroon 5", "duration": 15}
# (entry, label, reply, BFCL's verdict, the lenient reading's verdict)
FC_REPLIES = [
    ("simple_python_0", "good", _block("calculate_triangle_area", AREA), True, True),
    ("simple_python_0", "stray space in the name", _block("calculate_triangle_area ", AREA), False, True),
    ("parallel_0", "first block closed without a newline",
     _block("spotify.play", SWIFT).replace("\n</tool_call>", "</tool_call>") + "\n" + _block("spotify.play", MAROON),
     False, True),
    ("simple_python_0", "draft call inside <think>",
     "<think>\nMaybe " + _block("calculate_triangle_area", {"base": 5, "height": 5}) + "\n</think>\n\n"
     + _block("calculate_triangle_area", AREA), True, False),
    ("simple_python_0", "no newlines inside the tags", _block("calculate_triangle_area", AREA, newline=False),
     False, True),
    ("simple_python_0", "a malformed block after a good one",
     _block("calculate_triangle_area", AREA) + '\n<tool_call>\n{"name": \n</tool_call>', True, False),
    ("simple_python_0", '"parameters" for "arguments"',
     '<tool_call>\n{"name": "calculate_triangle_area", "parameters": {"base": 10, "height": 5}}\n</tool_call>',
     False, True),
    ("simple_python_0", "a JSON list in the block", "<tool_call>\n[1, 2]\n</tool_call>", False, False),
    ("simple_python_0", "text around the call", "Sure.\n" + _block("calculate_triangle_area", AREA) + "\nDone.",
     True, True),
    ("simple_python_0", "float for an integer", _block("calculate_triangle_area", {"base": 10.0, "height": 5}),
     False, False),
    ("simple_python_0", "a name that is a number", _block(5, AREA), False, False),
    ("simple_python_0", "no call", "The area is 25 square units.", False, False),
    ("parallel_0", "both calls, reversed", _block("spotify.play", MAROON) + "\n" + _block("spotify.play", SWIFT),
     True, True),
    ("irrelevance_0", "no call", "None of the functions fit.", True, True),
    ("irrelevance_0", "a call", _block("determine_body_mass_index", {"weight": 70, "height": 1.8}), False, False),
    ("irrelevance_0", "a call without newlines",
     _block("determine_body_mass_index", {"weight": 70, "height": 1.8}, newline=False), True, False),
    ("irrelevance_0", "a JSON list in the block", "<tool_call>\n[]\n</tool_call>", True, False),
    ("irrelevance_0", "a call only inside <think>",
     "<think>\n" + _block("determine_body_mass_index", {"weight": 70}) + "\n</think>\n\nNo function fits.",
     True, False),
]
PROMPTING_REPLIES = [
    ("simple_python_0", "good", "[calculate_triangle_area(base=10, height=5)]", True),
    ("simple_python_0", "no brackets", "calculate_triangle_area(base=10, height=5)", True),
    ("simple_python_0", "in a fence", "```\n[calculate_triangle_area(base=10, height=5)]\n```", True),
    ("simple_python_0", "in a python fence", "```python\n[calculate_triangle_area(base=10, height=5)]\n```", False),
    ("simple_python_0", "a harmless sum", "[calculate_triangle_area(base=5+5, height=5)]", True),
    ("simple_python_0", "float for an integer", "[calculate_triangle_area(base=10.0, height=5)]", False),
    ("simple_python_0", "draft call inside <think>",
     "<think>\n[calculate_triangle_area(base=1, height=1)]\n</think>\n\n[calculate_triangle_area(base=10, height=5)]",
     True),
    ("simple_python_0", "prose", "The area is 25.", False),
    ("simple_python_0", "a tool_call block", _block("calculate_triangle_area", AREA), False),
    ("parallel_0", "two calls", "[spotify.play(artist='Maroon 5', duration=15), "
                                "spotify.play(artist='Taylor Swift', duration=20)]", True),
    ("irrelevance_0", "prose", "None of the functions fit.", True),
    ("irrelevance_0", "an empty list", "[]", True),
    ("irrelevance_0", "a call", "[determine_body_mass_index(weight=70, height=1.8)]", False),
]


@pytest.fixture(scope="module")
def answers():
    return {a["id"]: a["ground_truth"] for c in ("simple_python", "parallel") for a in load_ground_truth_entry(c)}


@pytest.fixture(scope="module")
def bfcl_entries():
    return {e["id"]: e for c in ("simple_python", "parallel", "irrelevance")
            for e in load_dataset_entry(c, include_prereq=False)}


@pytest.mark.parametrize("entry_id,label,reply,bfcl,lenient", FC_REPLIES, ids=[r[1] + "/" + r[0] for r in FC_REPLIES])
def test_fc_verdicts_equal_bfcls_own_pipeline(seeds, answers, bfcl_entries, entry_id, label, reply, bfcl, lenient):
    assert _bfcl_verdict("fc", bfcl_entries[entry_id], answers.get(entry_id, []), reply) is bfcl
    task = seeds[entry_id]
    assert BFCLDomain().score(task, reply) == float(bfcl), label
    assert BFCLDomain(decoding="lenient").score(task, reply) == float(lenient), label


@pytest.mark.parametrize("entry_id,label,reply,bfcl", PROMPTING_REPLIES,
                         ids=[r[1] + "/" + r[0] for r in PROMPTING_REPLIES])
def test_prompting_verdicts_equal_bfcls_own_pipeline(seeds, answers, bfcl_entries, entry_id, label, reply, bfcl):
    assert _bfcl_verdict("prompting", bfcl_entries[entry_id], answers.get(entry_id, []), reply) is bfcl
    assert BFCLDomain(mode="prompting").score(seeds[entry_id], reply) == float(bfcl), label


def test_prompting_never_evaluates_a_harmful_argument(seeds, answers, bfcl_entries):
    """The one deliberate difference: BFCL `eval`s `len('abcdefghij')+0` (and would run any code
    there) and scores 1; we refuse to run it, and the reply scores 0 (an irrelevance reply holding
    one counts as a call)."""
    reply = "[calculate_triangle_area(base=len('abcdefghij')+0, height=5)]"
    assert _bfcl_verdict("prompting", bfcl_entries["simple_python_0"], answers["simple_python_0"], reply) is True
    details = BFCLDomain(mode="prompting").score_details(seeds["simple_python_0"], reply)
    assert details.reward == 0.0 and details.details["error_type"] == "ast_decoder:refused_expression"
    assert BFCLDomain(mode="prompting").score(seeds["irrelevance_0"], "[f(a=__import__('os').getpid()+1)]") == 0.0


def test_reference_replies_score_one_in_both_modes(seeds):
    for mode in ("fc", "prompting"):
        domain = BFCLDomain(mode=mode)
        for task_id in ("simple_python_0", "parallel_0", "irrelevance_0", "live_multiple_1-0-1"):
            assert domain.score(seeds[task_id], domain.reference_response(seeds[task_id])) == 1.0, (mode, task_id)
    assert BFCLDomain(mode="prompting").reference_response(seeds["simple_python_0"]) == \
        "[calculate_triangle_area(base=10, height=5, unit='units')]"


@pytest.mark.parametrize("options,message", [
    ({"mode": "chat"}, "bfcl mode 'chat'"),
    ({"prompt_format": "bfcl_prompting"}, "bfcl prompt_format 'bfcl_prompting': mode 'fc' takes"),
    ({"mode": "prompting", "prompt_format": "bfcl_fc"}, "bfcl prompt_format 'bfcl_fc': mode 'prompting' takes"),
    ({"decoding": "loose"}, "bfcl decoding 'loose'"),
    ({"mode": "prompting", "decoding": "lenient"}, "bfcl decoding 'lenient' reads <tool_call> blocks"),
])
def test_bad_options_fail_in_one_line_naming_the_option(options, message):
    with pytest.raises(ValueError, match=message) as err:
        BFCLDomain(**options)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ BFCL's reading on hostile replies
def test_tool_call_bodies_equal_the_handlers_regex():
    """Our linear scan finds exactly what `re.findall(r"<tool_call>\\n(.*?)\\n</tool_call>", DOTALL)` finds."""
    import random
    import re

    pieces = ["<tool_call>", "</tool_call>", "\n", "{}", "x", "<tool_call>\n", "\n</tool_call>", " "]
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        assert replies.tool_call_bodies(text) == re.findall(replies.TOOL_CALL_PATTERN, text, re.DOTALL), repr(text)


GOOD_BODY = '{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}'


@pytest.mark.parametrize("label,reply,reward", [
    ("nesting bomb in a block", "<tool_call>\n" + "[" * 100_000 + "\n</tool_call>", 0.0),
    ("nesting bomb, then the call", "<tool_call>\n" + "{" * 100_000 + "\n</tool_call>\n<tool_call>\n"
     + GOOD_BODY + "\n</tool_call>", 1.0),
    ("100,000 unclosed openings, then the call", "<tool_call>\n" * 100_000 + GOOD_BODY + "\n</tool_call>", 0.0),
    ("100,000 stray closings before the call", "\n</tool_call>" * 100_000 + "<tool_call>\n" + GOOD_BODY
     + "\n</tool_call>", 1.0),
    ("a megabyte string argument", "<tool_call>\n" + GOOD_BODY.replace("}}", ', "unit": "' + "u" * 1_100_000
                                                                          + '"}}') + "\n</tool_call>", 0.0),
    ("a lone surrogate", "<tool_call>\n" + GOOD_BODY.replace("}}", ', "unit": "cm\\ud800"}}') + "\n</tool_call>", 0.0),
    ("NaN", "<tool_call>\n" + GOOD_BODY.replace("10", "NaN") + "\n</tool_call>", 0.0),
    ("a 5,000-digit number", "<tool_call>\n" + GOOD_BODY.replace("10", "9" * 5_000) + "\n</tool_call>", 0.0),
])
def test_hostile_fc_replies_get_a_verdict_and_writable_details(seeds, label, reply, reward):
    import time

    start = time.perf_counter()
    result = BFCLDomain().score_details(seeds["simple_python_0"], reply)
    assert time.perf_counter() - start < 5.0, label
    assert result.reward == reward, label
    json.dumps(result.details, ensure_ascii=False, allow_nan=False).encode("utf-8")  # writes as UTF-8 JSON


@pytest.mark.parametrize("reply", ["[" * 100_000, "[f(a=" + "[" * 150 + "]" * 150 + ")]", "[f(a=1)]" * 20_000,
                                   "[calculate_triangle_area(base=10**10**10, height=5)]",
                                   "[calculate_triangle_area(base='a'*10**9, height=5)]"])
def test_hostile_prompting_replies_score_zero_without_running_them(seeds, reply):
    import time

    start = time.perf_counter()
    result = BFCLDomain(mode="prompting").score_details(seeds["simple_python_0"], reply)
    assert time.perf_counter() - start < 5.0 and result.reward == 0.0
    json.dumps(result.details, ensure_ascii=False, allow_nan=False).encode("utf-8")


# ------------------------------------------------------------------ the options reach the loop and the evaluator
@pytest.mark.parametrize("options", [{"mode": "prompting"}, {"prompt_format": "bfcl_fc", "decoding": "lenient"}])
def test_a_tiny_loop_config_with_the_options_validates_and_builds_prompts(chat_text, options):
    """The loop builds its domain from `config.domain.options`, its agent prompts with `ChatText.prompt`
    and its rewards with the environment's `score`: all three follow the options."""
    import jax

    from genenv_jax.configs import bfcl as bfcl_configs
    from genenv_jax.configs.run_config import RunConfig
    from genenv_jax.domains import get_domain
    from genenv_jax.text.tokenization import decode

    c = bfcl_configs.get_config("tiny")
    c.domain.options.update(options)
    config = RunConfig.from_config_dict(c, num_devices=jax.device_count())
    domain = get_domain(config.domain.name, **config.domain.options)
    assert (domain.mode, domain.prompt_format) == (options.get("mode", "fc"), options.get(
        "prompt_format", "bfcl_prompting_qwen25"))
    task = domain.seeds("train")[0]
    env = domain.environment(task)
    prompt = env.reset()
    ids = chat_text.prompt(prompt)
    assert ids == chat_text.encode(prompt.text) and decode(chat_text.tokenizer, ids) == prompt.text
    assert prompt.text.endswith("<|im_start|>assistant\n")
    answer = domain.reference_response(task)
    assert env.score(list(prompt.messages) + [{"role": "assistant", "content": answer}]).reward == 1.0


def test_the_evaluation_flag_sets_the_options():
    from genenv_jax.evaluation.cli import build_domain

    domain = build_domain("bfcl", ["mode=prompting", "prompt_format=bfcl_prompting"], None)
    assert (domain.mode, domain.prompt_format, domain.decoding) == ("prompting", "bfcl_prompting", "bfcl")
