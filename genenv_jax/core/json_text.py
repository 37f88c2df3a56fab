"""Reading JSON out of model text within fixed limits, in linear time and without recursion.

Model text is data of any shape. About 1,000 nested brackets (some 500 tokens) overflow Python's
recursion in `json.loads` (and in BFCL's checker, which recurses on values too), and a parser that
rescans the text at every tag is quadratic. Every reader of model text (`parse_tool_calls`, the
BFCL domain's `parse_task` and `score`) checks these limits first and turns what it cannot read
into a reason code; docs/bfcl.md lists what each becomes.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_JSON_DEPTH = 64          # nested `[` / `{` in one JSON value (shipped BFCL tasks reach 10)
MAX_JSON_CHARS = 100_000     # characters of one JSON value or tool-call body (largest shipped BFCL task: 24,013)
MAX_JSON_CANDIDATES = 64     # places a generation's JSON is looked for: fenced blocks, then `{` characters

# Reason codes of model text that is not a JSON value within the limits.
JSON_TEXT_ERRORS = (
    "too_large",        # longer than MAX_JSON_CHARS characters
    "too_deep",         # nested deeper than MAX_JSON_DEPTH levels
    "invalid_json",     # not JSON (or a value that is never closed)
    "invalid_unicode",  # a string holds a lone UTF-16 surrogate, which UTF-8 (and so any file) cannot hold
)

_JSON_WHITESPACE = " \t\n\r"
# One JSON string (skipped whole, so brackets inside it do not count; its closing quote may be
# missing) or one bracket. The string part is an unrolled loop: it cannot backtrack catastrophically.
_JSON_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONTextError(ValueError):
    """Model text that is not a JSON value within the limits; `reason` is one of JSON_TEXT_ERRORS."""

    def __init__(self, reason: str, detail: str):
        assert reason in JSON_TEXT_ERRORS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _scan_json_value(text: str, start: int, stop: int) -> int | None:
    """End (exclusive) of the array/object opening at `text[start]`, or None if it is still open at `stop`.

    Counts brackets outside strings in one regex pass: linear, no recursion. Raises `too_deep`
    as soon as the nesting passes MAX_JSON_DEPTH, so a bracket bomb costs MAX_JSON_DEPTH steps.
    """
    depth = 0
    for token in _JSON_STRING_OR_BRACKET.finditer(text, start, stop):
        char = text[token.start()]
        if char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise JSONTextError("too_deep", f"JSON nested deeper than {MAX_JSON_DEPTH} levels "
                                                f"(character {token.start()})")
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def json_value_end(text: str, start: int) -> int:
    """End (exclusive) of the JSON array/object that opens at `text[start]` (a `[` or `{`).

    Found by bracket counting within MAX_JSON_CHARS characters, so the caller can hand exactly
    that slice to `load_json_text`. Raises JSONTextError: too_deep, too_large, or invalid_json
    when the text ends before the value closes.
    """
    if text[start:start + 1] not in ("[", "{"):
        raise ValueError(f"json_value_end: character {start} does not open an array or object")
    stop = min(len(text), start + MAX_JSON_CHARS)
    end = _scan_json_value(text, start, stop)
    if end is not None:
        return end
    if stop < len(text):
        raise JSONTextError("too_large", f"the JSON value at character {start} is longer than "
                                         f"{MAX_JSON_CHARS} characters")
    raise JSONTextError("invalid_json", f"the JSON value at character {start} is never closed")


def _refuse_constant(name: str) -> Any:
    """`json.loads` hook for NaN / Infinity: not JSON, and strict writers (allow_nan=False) refuse them."""
    raise JSONTextError("invalid_json", f"{name} is not a JSON number")


def _finite_float(literal: str) -> float:
    """`json.loads` hook for non-integers: a number that overflows to infinity is refused like Infinity."""
    value = float(literal)
    if not math.isfinite(value):
        raise JSONTextError("invalid_json", f"number {literal[:40]} is out of float range")
    return value


def load_json_text(text: str) -> Any:
    """`json.loads` for model text, within the limits; anything else raises JSONTextError.

    Nesting depth is checked first, by a linear pre-scan of the first MAX_JSON_CHARS characters
    (only the first value matters: `json.loads` stops at extra data without reading it), then the
    size, as `json_value_end` does; then the text is parsed (NaN, Infinity and integers too long
    to convert are refused) and its strings checked for lone surrogates.
    """
    start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    if text[start:start + 1] in ("[", "{"):
        _scan_json_value(text, start, min(len(text), MAX_JSON_CHARS))
    if len(text) > MAX_JSON_CHARS:
        raise JSONTextError("too_large", f"{len(text)} characters; the limit is {MAX_JSON_CHARS}")
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except JSONTextError:
        raise
    except json.JSONDecodeError as e:
        raise JSONTextError("invalid_json", f"{e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:  # an integer longer than Python converts (sys.get_int_max_str_digits)
        raise JSONTextError("invalid_json", str(e)[:200]) from None
    except RecursionError:  # the pre-scan bounds the depth; this guards a caller already deep in the stack
        raise JSONTextError("too_deep", "JSON nesting exhausted the Python stack") from None
    if _LONE_SURROGATE.search(json.dumps(value, ensure_ascii=False)):
        raise JSONTextError("invalid_unicode", "a string holds a lone UTF-16 surrogate (U+D800-U+DFFF)")
    return value


def json_nesting_depth(value: Any) -> int:
    """Nesting depth of parsed JSON-like data (a scalar is 0, `[]` is 1), computed without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:  # deep enough to refuse; no need to walk the rest
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest
