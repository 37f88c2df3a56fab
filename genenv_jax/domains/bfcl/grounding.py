"""Grounding of a BFCL task's ground truth in its question: every literal value the answer needs must
be stated by the user.

Why: in BFCL single-turn tasks the simulator writes the question **and** the ground truth.
`schema.validate_ground_truth` proves the ground truth well-formed and satisfiable, not that it
answers the question, so a simulator rewarded for ~50% agent success could reach it with wrong
answers (a correct agent then "fails" half the time). This check is a rule the simulator cannot
train: it reads only the task's text.

The rule (docs/bfcl.md, "Grounding of generated tasks"):
- Every argument of every ground-truth call must be grounded; an argument is grounded when one of
  its acceptable values is (the others are alternatives the checker also accepts).
- Exempt, and so grounded: the omission marker `""`, `null`, booleans (yes/no choices are
  expressed, not spelled), and a value equal to the parameter's declared `default` (an optional
  default is the function's, not the user's).
- A string is grounded when, after the official checker's normalisation (lower case; spaces and
  `,./-_*^` removed), it occurs in the question's text normalised the same way.
- A number is grounded when it equals a number stated in the question: digits (with thousands
  separators, decimals, exponents, a sign), number words ("two", "twenty-five", "a dozen",
  "3 million"), and a percentage's fraction ("5%" also states 0.05).
- A date string ("2022-07-10", "07/10/2022", "Jul.10,2022") is grounded when it names a date the
  question states in any of those forms or in words ("July 10, 2022", "10 July 2022"): the same
  day written another way is a restatement, not a derivation.
- A list is grounded when each element is; a dict when each value is (keys are the schema's).

Derived values are **not** grounded: a unit conversion ("2 hours" for `minutes=120`), a computed
date ("tomorrow" for "2024-05-02"), an inferred code ("New York" for "JFK") or a value taken from
the function's enum or description without the user naming it. The rule rejects them, since a
simulator could pass off wrong values the same way; what this costs on human-written data is
measured over every shipped BFCL item (docs/bfcl.md).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable, Mapping, Sequence

from genenv_jax.domains.bfcl.checker import official_checker_module

REASON = "ungrounded_answer"


@dataclasses.dataclass(frozen=True)
class Ungrounded:
    """One argument of the ground truth none of whose acceptable values the question states."""

    call: int
    function: str
    argument: str
    values: tuple  # the argument's acceptable values, as written

    def describe(self) -> str:
        shown = ", ".join(repr(v) for v in self.values[:4]) + (", ..." if len(self.values) > 4 else "")
        return f"call {self.call} ({self.function}).{self.argument}: none of [{shown}] is stated in the question"


def normalise(text: str) -> str:
    """The official checker's string normalisation (`ast_checker.standardize_string`)."""
    return official_checker_module().standardize_string(text)


# ----------------------------------------------------------------------------------------------
# Numbers stated in a text
# ----------------------------------------------------------------------------------------------
_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i >= 2}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000,
           "trillion": 1_000_000_000_000}
_WORDS = {"a dozen": 12, "dozen": 12, "half": 0.5, "quarter": 0.25, "once": 1, "twice": 2, "thrice": 3,
          "single": 1, "double": 2, "triple": 3, "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5}
_DIGITS = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORD_NUMBER = re.compile(r"\b(?:(?:" + "|".join(sorted(_TENS, key=len, reverse=True)) + r")(?:[- ](?:"
                          + "|".join(sorted(_UNITS, key=len, reverse=True)) + r"))?|"
                          + "|".join(sorted(_UNITS, key=len, reverse=True)) + r")\b")
_SCALED = re.compile(r"(\d+(?:\.\d+)?)\s*(" + "|".join(_SCALES) + r"|[kmb])\b", re.IGNORECASE)


def _word_value(word: str) -> int:
    parts = re.split(r"[- ]", word)
    return sum(_TENS.get(p, _UNITS.get(p, 0)) for p in parts)


def stated_numbers(text: str) -> set[float]:
    """Every number `text` states (see the module docstring), as floats."""
    lowered = text.lower()
    found: set[float] = set()
    for match in _DIGITS.finditer(lowered):
        token = match.group(0).replace(",", "").replace("−", "-")
        if not any(ch.isdigit() for ch in token):
            continue
        try:
            value = float(token)
        except ValueError:
            continue
        found.update({value, abs(value)})
        end = match.end()
        if lowered[end:end + 1] == "%" or lowered[end:end + 8].strip().startswith("percent"):
            found.add(value / 100)
    for match in _WORD_NUMBER.finditer(lowered):
        found.add(float(_word_value(match.group(0))))
    for word, value in _WORDS.items():
        if re.search(rf"\b{word}\b", lowered):
            found.add(float(value))
    for match in _SCALED.finditer(lowered):  # "3 million", "2.5k"
        scale = _SCALES.get(match.group(2).lower(), {"k": 1e3, "m": 1e6, "b": 1e9}.get(match.group(2).lower(), 1))
        found.add(float(match.group(1)) * scale)
    for match in re.finditer(r"\b(" + _WORD_NUMBER.pattern[2:-2] + r")\s+(" + "|".join(_SCALES) + r")\b", lowered):
        found.add(float(_word_value(match.group(1)) * _SCALES[match.group(2)]))
    return found


_MONTHS = {m: i + 1 for i, m in enumerate("january february march april may june july august september october "
                                           "november december".split())}
_MONTH = r"(?P<month>" + "|".join(sorted({*_MONTHS, *(m[:3] for m in _MONTHS), "sept"}, key=len, reverse=True)) + r")\.?"
_DATE_FORMS = (
    re.compile(r"\b(?P<year>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})\b"),           # 2022-07-10
    re.compile(r"\b(?P<a>\d{1,2})[-/.](?P<b>\d{1,2})[-/.](?P<year>\d{4})\b"),           # 07/10/2022 or 10/07/2022
    re.compile(r"\b" + _MONTH + r"\s*(?P<d>\d{1,2})(?:st|nd|rd|th)?(?:\s*,\s*|\s+)(?P<year>\d{4})\b"),  # July 10, 2022
    re.compile(r"\b(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH + r",?\s+(?P<year>\d{4})\b"),  # 10 July 2022
)


def stated_dates(text: str) -> set[tuple[int, int, int]]:
    """Every (year, month, day) `text` writes in a form of `_DATE_FORMS` (an ambiguous 07/10/2022 gives both)."""
    lowered, found = text.lower(), set()
    for form in _DATE_FORMS:
        for m in form.finditer(lowered):
            g = m.groupdict()
            year = int(g["year"])
            if g.get("a"):
                pairs = [(int(g["a"]), int(g["b"])), (int(g["b"]), int(g["a"]))]
            else:
                month = int(g["m"]) if g.get("m") else _MONTHS.get(g["month"]) or next(
                    v for k, v in _MONTHS.items() if k.startswith(g["month"][:3]))
                pairs = [(month, int(g["d"]))]
            found.update((year, mo, d) for mo, d in pairs if 1 <= mo <= 12 and 1 <= d <= 31)
    return found


def _same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# ----------------------------------------------------------------------------------------------
# The rule
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Question:
    """A question's text prepared for lookups: normalised, and the numbers it states."""

    normalised: str
    numbers: frozenset
    dates: frozenset

    @staticmethod
    def of(messages: Sequence[Mapping[str, str]]) -> "Question":
        text = "\n".join(m.get("content", "") for m in messages if m.get("role") in ("user", "system"))
        return Question(normalise(text), frozenset(stated_numbers(text)), frozenset(stated_dates(text)))


def _is_exempt(value: Any, schema: Mapping[str, Any] | None) -> bool:
    if value is None or value == "" or isinstance(value, bool):
        return True
    if schema and "default" in schema:
        default = schema["default"]
        if isinstance(value, str) and isinstance(default, str):
            return normalise(value) == normalise(default)
        return value == default and type(value) is type(default)
    return False


def value_grounded(value: Any, question: Question, schema: Mapping[str, Any] | None = None) -> bool:
    """Whether one acceptable value is stated in the question (exempt values are)."""
    if _is_exempt(value, schema):
        return True
    if isinstance(value, str):
        needle = normalise(value)
        if not needle or needle in question.normalised:
            return True
        dates = stated_dates(value)
        return bool(dates) and bool(dates & question.dates)
    if isinstance(value, (int, float)):
        return any(_same_number(float(value), n) for n in question.numbers) or (
            float(value).is_integer() and normalise(str(int(value))) in question.normalised)
    if isinstance(value, list):
        items = (schema or {}).get("items") if isinstance(schema, Mapping) else None
        return all(value_grounded(v, question, items) for v in value)
    if isinstance(value, dict):
        props = (schema or {}).get("properties") or {}
        return all(_argument_grounded(v if isinstance(v, list) else [v], question, props.get(k)) for k, v in value.items())
    return True


def _argument_grounded(values: Iterable[Any], question: Question, schema: Mapping[str, Any] | None) -> bool:
    values = list(values)
    return not values or any(value_grounded(v, question, schema) for v in values)


def ungrounded_arguments(question: Sequence[Mapping[str, str]], functions: Sequence[Mapping[str, Any]],
                         ground_truth: Sequence[Mapping[str, Any]]) -> list[Ungrounded]:
    """The ground truth's arguments that the question does not state (empty: the task is grounded).

    `question` is BFCL messages, `functions` the function docs, `ground_truth` BFCL's possible answers
    ([{name: {argument: [acceptable values]}}]), already validated by `schema.validate_ground_truth`.
    """
    q = Question.of(question)
    docs = {f.get("name"): f for f in functions}
    out = []
    for i, call in enumerate(ground_truth):
        for name, args in call.items():
            props = (docs.get(name, {}).get("parameters") or {}).get("properties") or {}
            for argument, values in args.items():
                values = values if isinstance(values, list) else [values]
                if not _argument_grounded(values, q, props.get(argument)):
                    out.append(Ungrounded(i, name, argument, tuple(values)))
    return out
