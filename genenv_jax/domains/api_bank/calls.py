"""Reading an agent's API call from its text, two ways: API-Bank's official bracket text and `<tool_call>` JSON.

Official (`parse_official`): what API-Bank's evaluator accepts, quirks included. It finds
`[Name(...)]` on one line (the arguments run to the LAST ")]" of that line) and reads arguments
left to right with three patterns, trying them in this order at each position:
  1. `key = 'value'` / `key = "value"`: the value ends at the FIRST following quote of either kind,
     so a value holding a quote (an apostrophe, a quoted list such as health_data='[{'name': ...}]')
     is cut short, and an empty value ('') swallows text up to the next quote;
  2. `key = [ ... ]` (unquoted list): kept as its raw text up to the last "]" of the arguments;
  3. `key = word` (unquoted number or name): kept as text.
Every value is a string; text between matches is skipped silently; a repeated key keeps its last
value. No call found -> no call (the item counts as wrong).

Structured (`parse_structured`): the project's `<tool_call>{"name", "arguments"}</tool_call>`
blocks (`genenv_jax.text.tokenization`); argument values keep their JSON types.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Mapping

from genenv_jax.text.tokenization import parse_tool_calls, render_tool_call

CALL_FORMATS = ("official", "structured")

_CALL = re.compile(r"\[(\w+)\((.*)\)\]")  # on one line ('.' stops at a newline); greedy to the last ")]"
_ARGUMENT = re.compile(r"""(\w+)\s*=\s*['"](.+?)['"]"""      # key='value' (value ends at the first quote)
                       r"""|(\w+)\s*=\s*(\[.*\])"""          # key=[...] (raw text to the last ']')
                       r"""|(\w+)\s*=\s*(\w+)""")            # key=word


@dataclasses.dataclass(frozen=True)
class ParsedCall:
    """One API call read from model text: the API's name and its arguments."""

    name: str
    params: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"api_name": self.name, "param_dict": self.params}


def parse_official(text: str) -> ParsedCall | None:
    """The first `[Name(k='v', ...)]` of the text read as API-Bank's evaluator reads it (module docstring)."""
    match = _CALL.search(text)
    if match is None:
        return None
    params: dict[str, Any] = {}
    for arg in _ARGUMENT.finditer(match.group(2)):
        if arg.group(1):
            params[arg.group(1)] = arg.group(2)
        elif arg.group(3):
            params[arg.group(3)] = arg.group(4)
        else:
            params[arg.group(5)] = arg.group(6)
    return ParsedCall(match.group(1), params)


def parse_structured(text: str) -> ParsedCall | None:
    """The first well-formed `<tool_call>` block of the text (None when there is none)."""
    calls = parse_tool_calls(text).calls
    if not calls:
        return None
    return ParsedCall(calls[0].name, dict(calls[0].arguments))


def attempted_call(text: str, call_format: str) -> bool:
    """Whether the text tries to make a call at all (a reply without one ends a level-3 episode)."""
    if call_format == "official":
        return "API-Request:" in text or _CALL.search(text) is not None
    return parse_tool_calls(text).attempted_call


def parse_call(text: str, call_format: str) -> ParsedCall | None:
    """The call in model text in `call_format` ('official' or 'structured'); None when there is none."""
    if call_format == "official":
        return parse_official(text)
    if call_format == "structured":
        return parse_structured(text)
    raise ValueError(f"unknown call_format {call_format!r}; expected one of {CALL_FORMATS}")


def official_text(name: str, params: Mapping[str, Any]) -> str:
    """A call as the official expected output writes it: `API-Request: [Name(k='v', ...)]`."""
    return "API-Request: [" + name + "(" + ", ".join(f"{k}='{v}'" for k, v in params.items()) + ")]"


def render_call(name: str, params: Mapping[str, Any], call_format: str) -> str:
    """A call as the agent should write it in `call_format`."""
    if call_format == "official":
        return official_text(name, params)
    if call_format == "structured":
        return render_tool_call({"name": name, "arguments": dict(params)})
    raise ValueError(f"unknown call_format {call_format!r}; expected one of {CALL_FORMATS}")


def tool_schema(description: Mapping[str, Any]) -> dict[str, Any]:
    """An API description as a JSON-schema tool for the chat template (types from API-Bank's type names)."""
    types = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array", "dict": "object"}
    properties = {}
    for key, spec in (description.get("input_parameters") or {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        properties[key] = {"type": types.get(str(spec.get("type", "str")), "string"),
                           "description": str(spec.get("description", ""))}
    return {"type": "function", "function": {
        "name": description["name"], "description": str(description.get("description", "")),
        "parameters": {"type": "object", "properties": properties}}}


def result_text(output: Any, exception: Any) -> str:
    """What the agent sees back from a call: the output (or the exception) as JSON text."""
    if exception:
        return json.dumps({"exception": str(exception)}, ensure_ascii=False)
    return json.dumps({"output": output}, ensure_ascii=False, default=str)


__all__ = ["CALL_FORMATS", "ParsedCall", "attempted_call", "official_text", "parse_call", "parse_official",
           "parse_structured", "render_call", "result_text", "tool_schema"]
