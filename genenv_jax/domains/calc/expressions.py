"""The calc domain's expressions and difficulty levels: a bounded parser for the integer
expressions the simulator writes (digits, `+ - *`, parentheses; never eval'd), their value, the
features a level is measured from, and the call the agent must make."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from genenv_jax.domains.records import Invalid

# Functions the agent may be shown. Operators of the expression map to the first three.
FUNCTIONS: dict[str, str] = {
    "add": "Adds two integers. Returns a + b.",
    "sub": "Subtracts b from a. Returns a - b.",
    "mul": "Multiplies two integers. Returns a * b.",
    "max": "Returns the larger of two integers.",
    "min": "Returns the smaller of two integers.",
    "mod": "Returns the remainder of a divided by b.",
    "pow": "Returns a raised to the power b.",
    "div": "Returns a divided by b, rounded down.",
}
OPERATOR_FUNCTION = {"+": "add", "-": "sub", "*": "mul"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2}


@dataclasses.dataclass(frozen=True)
class Level:
    """Caps of one difficulty level: a task is at the first level whose caps it fits."""

    number: int
    max_ops: int
    max_digits: int
    max_distractors: int


LEVELS = (
    Level(1, max_ops=1, max_digits=1, max_distractors=0),
    Level(2, max_ops=1, max_digits=2, max_distractors=2),
    Level(3, max_ops=2, max_digits=1, max_distractors=2),
    Level(4, max_ops=2, max_digits=2, max_distractors=3),
    Level(5, max_ops=3, max_digits=2, max_distractors=4),
    Level(6, max_ops=4, max_digits=3, max_distractors=5),
)
NUM_LEVELS = len(LEVELS)
# Levels beyond the default six, chosen with the domain's `num_levels`: for agents the six do not
# challenge (after its format warm-start the real Qwen2.5-Coder-0.5B still solves ~21% of level 6).
EXTRA_LEVELS = (Level(7, max_ops=6, max_digits=3, max_distractors=5),)
ALL_LEVELS = LEVELS + EXTRA_LEVELS

# Bounds on simulator text (checked before anything else is read).
MAX_GENERATION_CHARS = 2000
MAX_EXPRESSION_CHARS = 120
MAX_PAREN_DEPTH = 8

REJECTION_REASONS = (
    "too_large",          # generation longer than MAX_GENERATION_CHARS, or expression longer than MAX_EXPRESSION_CHARS
    "no_question",        # no `question:` line
    "no_functions",       # no `functions:` line
    "bad_expression",     # the question is not an integer expression over + - * and parentheses
    "too_deep",           # parentheses nested deeper than MAX_PAREN_DEPTH
    "unknown_function",   # a listed function is not one of FUNCTIONS
    "duplicate_function",  # a function listed twice
    "missing_function",   # the expression uses an operator whose function is not listed
    "out_of_range",       # beyond the caps of the hardest level (digits, operations, distractors)
    "copy_of_seed",       # the same expression as the seed
)


# ----------------------------------------------------------------------------------------------
# Expressions: a tree of ("num", int) | (op, left, right)
# ----------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"[ \t]*(?:([0-9]+)|([-+*()]))")  # ASCII digits only: int() also reads other scripts' digits


def _tokenize(text: str) -> list[str]:
    tokens, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise Invalid("bad_expression", f"unexpected character {text[pos:pos + 1]!r} at {pos}")
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    if not tokens:
        raise Invalid("bad_expression", "empty expression")
    return tokens


def parse_expression(text: str) -> tuple:
    """The expression tree of `text` (standard precedence, left-associative), bounded in length and
    parenthesis depth so the recursion stays shallow. Raises Invalid."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise Invalid("too_large", f"expression of {len(text)} characters; the limit is {MAX_EXPRESSION_CHARS}")
    tokens = _tokenize(text)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def expr(depth):
        node = term(depth)
        while peek() in ("+", "-"):
            op = take()
            node = (op, node, term(depth))
        return node

    def term(depth):
        node = atom(depth)
        while peek() == "*":
            take()
            node = ("*", node, atom(depth))
        return node

    def atom(depth):
        tok = peek()
        if tok is None:
            raise Invalid("bad_expression", "the expression ends early")
        if tok == "(":
            if depth >= MAX_PAREN_DEPTH:
                raise Invalid("too_deep", f"parentheses nested deeper than {MAX_PAREN_DEPTH}")
            take()
            node = expr(depth + 1)
            if peek() != ")":
                raise Invalid("bad_expression", "unclosed parenthesis")
            take()
            return node
        if tok[0] in "0123456789":
            take()
            if len(tok) > LEVELS[-1].max_digits:
                raise Invalid("out_of_range", f"operand with {len(tok)} digits; the limit is "
                                              f"{LEVELS[-1].max_digits}")
            return ("num", int(tok))
        raise Invalid("bad_expression", f"unexpected {tok!r}")

    tree = expr(0)
    if pos != len(tokens):
        raise Invalid("bad_expression", f"unexpected {tokens[pos]!r} after the expression")
    return tree


def walk(tree: tuple):
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if node[0] != "num":
            stack.extend(node[1:])


def evaluate(tree: tuple) -> int:
    """The integer value of a tree (non-recursive; trees here are small anyway)."""
    out: dict[int, int] = {}
    order = list(walk(tree))
    for node in reversed(order):  # children come after their parent in `order`
        if node[0] == "num":
            out[id(node)] = node[1]
        else:
            a, b = out[id(node[1])], out[id(node[2])]
            out[id(node)] = a + b if node[0] == "+" else a - b if node[0] == "-" else a * b
    return out[id(tree)]


def render_expression(tree: tuple) -> str:
    """Canonical text of a tree; parse_expression(render_expression(t)) == t (a right operand of
    the same precedence keeps its parentheses, so the tree's shape is preserved)."""
    if tree[0] == "num":
        return str(tree[1])
    op, left, right = tree
    lt, rt = render_expression(left), render_expression(right)
    if left[0] != "num" and _PRECEDENCE[left[0]] < _PRECEDENCE[op]:
        lt = f"({lt})"
    if right[0] != "num" and _PRECEDENCE[right[0]] <= _PRECEDENCE[op]:
        rt = f"({rt})"
    return f"{lt} {op} {rt}"


@dataclasses.dataclass(frozen=True)
class Features:
    ops: int
    digits: int
    distractors: int
    depth: int


def measure(tree: tuple, functions: Sequence[str]) -> Features:
    """The difficulty features of a task (expression tree + listed functions)."""
    nodes = list(walk(tree))
    used = {OPERATOR_FUNCTION[n[0]] for n in nodes if n[0] != "num"}
    depth, stack = 0, [(tree, 0)]
    while stack:
        node, d = stack.pop()
        depth = max(depth, d)
        if node[0] != "num":
            stack.extend((child, d + 1) for child in node[1:])
    return Features(ops=sum(n[0] != "num" for n in nodes),
                    digits=max(len(str(n[1])) for n in nodes if n[0] == "num"),
                    distractors=len([f for f in functions if f not in used]), depth=depth)


def level_of(features: Features, levels: Sequence[Level] = LEVELS) -> int | None:
    """The first of `levels` whose caps hold, or None if the task is beyond the hardest of them."""
    for level in levels:
        if (features.ops <= level.max_ops and features.digits <= level.max_digits
                and features.distractors <= level.max_distractors):
            return level.number
    return None


def expected_call(tree: tuple) -> dict[str, Any]:
    """The one correct call: the outermost operation with both operands evaluated."""
    if tree[0] == "num":
        raise ValueError("a task needs at least one operation")
    return {"name": OPERATOR_FUNCTION[tree[0]], "arguments": {"a": evaluate(tree[1]), "b": evaluate(tree[2])}}
