"""Reading a simulator's output: the JSON value a generation carries, found linearly and within
`core.json_text`'s limits. Every domain whose simulator writes JSON reads it here; a failure is an
`Invalid` with one of JSON_REASONS, which such a domain lists among its `rejection_reasons`."""

from __future__ import annotations

import itertools
import re
from typing import Any, Iterator

from genenv_jax.core.json_text import (JSON_TEXT_ERRORS, MAX_JSON_CANDIDATES, JSONTextError, json_value_end,
                                       load_json_text)
from genenv_jax.domains.records import Invalid

# The reasons `extract_json_object` gives: no JSON value at all, or `load_json_text`'s own.
JSON_REASONS = ("no_json",) + JSON_TEXT_ERRORS

# A ``` fence, its optional language tag and the whitespace after it (the JSON value opens next).
_FENCE = re.compile(r"```[A-Za-z]*\s*")


def _fenced_value_starts(text: str) -> Iterator[int]:
    """Positions of the `{` or `[` that opens a ``` fenced block, in order (one regex pass)."""
    for fence in _FENCE.finditer(text):
        if text[fence.end():fence.end() + 1] in ("{", "["):
            yield fence.end()


def _brace_starts(text: str) -> Iterator[int]:
    """Positions of every `{` in the text, in order."""
    start = text.find("{")
    while start != -1:
        yield start
        start = text.find("{", start + 1)


def _first_readable_value(text: str, starts: Iterator[int]) -> tuple[bool, Any, JSONTextError | None]:
    """(found, value, first error) for the first of at most MAX_JSON_CANDIDATES starts that reads as JSON.

    Each try reads only the bracket-matched slice of its value (at most MAX_JSON_CHARS), so a
    failed try costs its own length and never the rest of the text. A value over a limit ends the
    search: the later starts lie inside it, and what they hold is a fragment, not the task.
    """
    first_error: JSONTextError | None = None
    for start in itertools.islice(starts, MAX_JSON_CANDIDATES):
        try:
            return True, load_json_text(text[start:json_value_end(text, start)]), None
        except JSONTextError as e:
            first_error = first_error or e
            if e.reason in ("too_large", "too_deep"):
                break
    return False, None, first_error


def extract_json_object(text: str) -> Any:
    """The JSON value that opens a ``` fenced block, or else the first decodable `{...}` in the text.

    Values are bracket-matched from the block's start, so a "```" inside a JSON string (questions
    quoting code) does not cut the block short. Linear in the text; limits and reason codes come
    from `json_text.load_json_text` (too_large, too_deep, invalid_json, invalid_unicode).
    """
    found, value, error = _first_readable_value(text, _fenced_value_starts(text))
    if found:
        return value
    if error is not None:
        raise Invalid(error.reason, f"fenced block does not parse: {error.detail}")
    found, value, error = _first_readable_value(text, _brace_starts(text))
    if found:
        return value
    if error is None:
        raise Invalid("no_json", "no JSON object in the generation")
    raise Invalid(error.reason, f"no decodable JSON object: {error.detail}")
