"""Calculator: + - * / and parentheses over numbers, parsed by a small recursive-descent parser (no eval)."""

from __future__ import annotations

import re

from genenv_jax.domains.api_bank.apis.base import ApiError, register

_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(.))")
_MAX_LENGTH = 1000


def evaluate(formula: str) -> float:
    """The value of `formula` as a float; ValueError when it is not a well-formed arithmetic formula."""
    if len(formula) > _MAX_LENGTH:
        raise ValueError("formula too long")
    tokens = []
    for number, symbol in _TOKEN.findall(formula):
        if number:
            tokens.append(float(number))
        elif symbol.strip():
            if symbol not in "+-*/()":
                raise ValueError(f"unexpected {symbol!r}")
            tokens.append(symbol)
    position = 0

    def peek():
        return tokens[position] if position < len(tokens) else None

    def take():
        nonlocal position
        position += 1
        return tokens[position - 1]

    def expression():
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term():
        value = factor()
        while peek() in ("*", "/"):
            if take() == "*":
                value *= factor()
            else:
                divisor = factor()
                if divisor == 0:
                    raise ValueError("division by zero")
                value /= divisor
        return value

    def factor():
        token = peek()
        if token in ("+", "-"):
            take()
            return factor() if token == "+" else -factor()
        if token == "(":
            take()
            value = expression()
            if peek() != ")":
                raise ValueError("unbalanced parentheses")
            take()
            return value
        if isinstance(token, float):
            return take()
        raise ValueError("expected a number")

    value = expression()
    if position != len(tokens):
        raise ValueError("trailing text")
    return float(value)


def calculate(formula) -> float:
    try:
        return evaluate(str(formula))
    except (ValueError, RecursionError):
        raise ApiError("invalid formula") from None


@register("Calculator", "formula:str")
def calculator(state, formula):
    return calculate(formula)


@register("Calculator", "formula:str", suite="level-3")
def calculator_level3(state, formula):
    return calculate(formula)
