"""Tokenizer loading (bundled Qwen2.5 vocabulary), chat template with tools, tool-call parsing."""

import json

import pytest

from genenv_jax.core import json_text as jt
from genenv_jax.text import tokenization as tk
from genenv_jax.text.tokenization import ToolCall, parse_tool_calls, render_tool_call, render_tool_calls

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def tok(qwen_tokenizer):
    return qwen_tokenizer


def test_bundled_tokenizer_is_qwen25(tok):
    assert len(tok) == tk.QWEN25_NUM_TOKENS == 151665
    assert tk.encode(tok, "Hello world") == [9707, 1879]  # Qwen's BPE ids
    assert tk.im_end_id(tok) == 151645 == tk.eos_id(tok)
    assert tk.pad_id(tok) == 151643
    assert tok.convert_tokens_to_ids("<|im_start|>") == 151644
    assert tk.stop_ids(tok) == (151645, 151643)
    assert tk.encode(tok, "<tool_call>") == [151657]
    # Qwen3-only added tokens are dropped: `<think>` is plain text for Qwen2.5.
    assert len(tk.encode(tok, "<think>")) > 1
    assert "You are Qwen, created by Alibaba Cloud" in tok.chat_template


@pytest.mark.parametrize("text", [
    "plain ascii, with punctuation!?",
    "  leading and trailing spaces \n\n tabs\tand newlines\r\n",
    "unicode: 你好，世界 — café naïve Ωμέγα עברית 🤖🚀 \u200b zero-width",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    '<tool_call>\n{"name": "f", "arguments": {"x": "ü"}}\n</tool_call><|endoftext|>',
])
def test_text_round_trips(tok, text):
    ids = tk.encode(tok, text)
    assert tk.decode(tok, ids) == text


def test_special_tokens_are_single_ids(tok):
    ids = tk.encode(tok, "<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 151644 and ids[-1] == 151645
    assert tk.decode(tok, ids, skip_special_tokens=True) == "user\nhi"


def test_chat_with_tools_renders_and_tokenizes(tok):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    text = tk.render_chat(tok, messages, tools=[WEATHER_TOOL])
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    assert "# Tools" in system and "<tools>" in system
    assert json.dumps(WEATHER_TOOL) in system  # tools are listed in the system turn
    assert rest == "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
    assert text.endswith(tk.GENERATION_PROMPT)
    ids = tk.encode_chat(tok, messages, tools=[WEATHER_TOOL])
    assert ids[-3:] == [151644] + tk.encode(tok, "assistant\n")
    assert tk.decode(tok, ids) == text


def test_system_message_precedes_tools(tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tk.render_chat(tok, messages, tools=[WEATHER_TOOL])
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    no_tools = tk.render_chat(tok, messages)
    assert no_tools.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and "# Tools" not in no_tools


def test_template_tool_calls_match_render_tool_calls(tok):
    """The SFT target text equals what the chat template writes for an assistant tool-call turn."""
    calls = [ToolCall("get_weather", {"city": "Zürich", "days": [1, 2]}), ToolCall("a.b", {})]
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": c.to_json()} for c in calls]}]
    text = tk.render_chat(tok, messages, tools=[WEATHER_TOOL], add_generation_prompt=False)
    assert text.endswith(tk.GENERATION_PROMPT + render_tool_calls(calls) + "<|im_end|>\n")


def test_render_chat_rejects_bad_messages(tok):
    with pytest.raises(ValueError, match="no messages"):
        tk.render_chat(tok, [])
    with pytest.raises(ValueError, match="message 0 needs 'role' and 'content'"):
        tk.render_chat(tok, [{"role": "user"}])


def test_load_from_model_dir(tok, tmp_path):
    tok.save_pretrained(tmp_path / "with_template")
    loaded = tk.load_tokenizer(tmp_path / "with_template")
    text = "Hola 🌍 <|im_end|>"
    assert tk.encode(loaded, text) == tk.encode(tok, text)
    assert loaded.chat_template == tok.chat_template

    # A directory without a chat template gets Qwen2.5-Instruct's.
    d = tmp_path / "no_template"
    tok.save_pretrained(d)
    config = json.loads((d / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in d.glob("chat_template.*"):
        extra.unlink()
    assert tk.load_tokenizer(d).chat_template == tk.qwen25_chat_template()

    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        tk.load_tokenizer(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tk.load_tokenizer(tmp_path / "missing")


# ------------------------------------------------------------------------ tool-call parsing
def test_parse_one_call():
    r = parse_tool_calls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    assert r.ok and r.attempted_call and r.content == ""
    assert r.calls == [ToolCall("get_weather", {"city": "Paris"})]


def test_parse_several_calls_with_text_and_parameters_alias():
    text = ("Let me check both.\n"
            '<tool_call>{"name": "get_weather", "arguments": {"city": "東京"}}</tool_call>\n'
            '<tool_call>\n{"name": "spotify.play", "parameters": {"artist": "Maroon 5", "duration": 15}}\n</tool_call>\n'
            "Done.")
    r = parse_tool_calls(text)
    assert r.ok
    assert r.calls == [ToolCall("get_weather", {"city": "東京"}),
                       ToolCall("spotify.play", {"artist": "Maroon 5", "duration": 15})]
    assert r.content == "Let me check both.\n\n\nDone."


def test_parse_no_calls():
    r = parse_tool_calls("I cannot help with that.")
    assert r.ok and not r.attempted_call and r.calls == [] and r.content == "I cannot help with that."


def test_parse_call_without_arguments_means_empty_arguments():
    assert parse_tool_calls('<tool_call>{"name": "now"}</tool_call>').calls == [ToolCall("now", {})]


@pytest.mark.parametrize("block, reason", [
    ('<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call>', "invalid_json"),
    ('<tool_call>{"arguments": {"x": 1}}</tool_call>', "missing_name"),
    ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', "name_not_string"),
    ('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>', "arguments_not_object"),
    ('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>', "arguments_not_object"),
    ('<tool_call>["f", {"x": 1}]</tool_call>', "not_an_object"),
    ('<tool_call>{"name": "f", "arguments": {}}', "unclosed_tag"),
    ('{"name": "f", "arguments": {}}</tool_call>', "unopened_tag"),
])
def test_parse_malformed_block_is_reported(block, reason):
    r = parse_tool_calls(block)
    assert not r.ok and r.attempted_call and r.calls == []
    assert [e.reason for e in r.errors] == [reason]
    assert r.errors[0].index == 0 and r.errors[0].block in block
    assert reason in str(r.errors[0])


def test_malformed_block_among_good_ones_keeps_positions():
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "b", "arguments": {}'            # unclosed: the next block opens first
            '<tool_call>{"name": "c", "arguments": {"k": [1]}}</tool_call>'
            '<tool_call>not json</tool_call>')
    r = parse_tool_calls(text)
    assert [c.name for c in r.calls] == ["a", "c"]
    assert [(e.index, e.reason) for e in r.errors] == [(1, "unclosed_tag"), (3, "invalid_json")]
    assert r.errors[0].block == '<tool_call>{"name": "b", "arguments": {}'


def test_render_parse_round_trip():
    calls = [ToolCall("math.hypot", {"x": 4, "y": 5.5, "z": None}),
             ToolCall("search", {"query": "café \"quoted\" \n newline", "filters": {"lang": ["fr", "de"], "n": True}})]
    text = render_tool_calls(calls, content="Calling tools.")
    assert text.startswith("Calling tools.\n<tool_call>\n{\"name\": \"math.hypot\", \"arguments\": ")
    r = parse_tool_calls(text)
    assert r.ok and r.calls == calls and r.content == "Calling tools."
    assert render_tool_call({"name": "f", "arguments": {"a": 1}}) == \
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'


# ------------------------------------------------------------------------ JSON within the limits
def test_json_value_end_skips_brackets_and_escaped_quotes_inside_strings():
    text = 'Task: {"a": "]}\\"[", "b": [1, {"c": "}"}], "d": "\\\\"} trailing ] }'
    start = text.index("{")
    end = jt.json_value_end(text, start)
    assert text[end:] == " trailing ] }"
    assert jt.load_json_text(text[start:end]) == {"a": ']}"[', "b": [1, {"c": "}"}], "d": "\\"}


def test_json_value_end_reports_a_value_that_never_closes():
    with pytest.raises(jt.JSONTextError, match="never closed") as e:
        jt.json_value_end('{"a": [1, 2', 0)
    assert e.value.reason == "invalid_json"


def test_json_limits_are_inclusive():
    depth = jt.MAX_JSON_DEPTH
    assert jt.json_nesting_depth(jt.load_json_text("[" * depth + "]" * depth)) == depth
    with pytest.raises(jt.JSONTextError) as e:
        jt.load_json_text("[" * (depth + 1) + "]" * (depth + 1))
    assert e.value.reason == "too_deep"
    longest = '"' + "x" * (jt.MAX_JSON_CHARS - 2) + '"'
    assert len(jt.load_json_text(longest)) == jt.MAX_JSON_CHARS - 2
    with pytest.raises(jt.JSONTextError) as e:
        jt.load_json_text(longest + " ")
    assert e.value.reason == "too_large"


@pytest.mark.parametrize("text, reason", [
    ('{"x": NaN}', "invalid_json"),        # not JSON; strict writers (allow_nan=False) refuse it
    ('[-Infinity]', "invalid_json"),
    ('[1e400]', "invalid_json"),           # overflows to infinity
    ("9" * 5000, "invalid_json"),          # more digits than Python converts to an int
    ('["\\ud800"]', "invalid_unicode"),    # a lone surrogate escape
    ('["\ud800"]', "invalid_unicode"),     # a lone surrogate character
    ('{"a": 1} {"b": 2}', "invalid_json"),  # extra data after the value
])
def test_load_json_text_refuses_values_that_cannot_be_written_back(text, reason):
    with pytest.raises(jt.JSONTextError) as e:
        jt.load_json_text(text)
    assert e.value.reason == reason


def test_surrogate_pair_escapes_are_one_character():
    assert jt.load_json_text('["\\ud83d\\ude00"]') == ["\U0001F600"]


def test_json_nesting_depth_is_iterative():
    deep: list = []
    for _ in range(5000):  # far past Python's recursion limit
        deep = [deep]
    assert jt.json_nesting_depth(deep) > jt.MAX_JSON_DEPTH
    assert jt.json_nesting_depth(3) == 0 and jt.json_nesting_depth({"a": [1, {}]}) == 3


def test_limit_reason_codes_are_tool_call_reasons():
    assert set(jt.JSON_TEXT_ERRORS) <= set(tk.TOOL_CALL_ERRORS)


def test_blocks_past_the_limit_are_reported_once():
    call = render_tool_call(ToolCall("f", {"i": 1}))
    r = parse_tool_calls("intro " + call * (tk.MAX_TOOL_CALL_BLOCKS + 5) + " outro")
    assert len(r.calls) == tk.MAX_TOOL_CALL_BLOCKS
    assert [(e.index, e.reason) for e in r.errors] == [(tk.MAX_TOOL_CALL_BLOCKS, "too_many_blocks")]
    assert r.errors[0].block == call and r.content == "intro"
