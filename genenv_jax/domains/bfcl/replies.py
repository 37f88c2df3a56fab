"""A reply read and judged as BFCL reads and judges it (bfcl-eval 2026.3.23), quirks included.

Reading (the handler's `_parse_query_response_prompting`, then its `decode_ast`):
- both modes first keep only the text after the last `</think>` (left newlines stripped);
- function-calling mode: `QwenFCHandler._extract_tool_calls`, the regex
  `<tool_call>\\n(.*?)\\n</tool_call>` (DOTALL), `json.loads` of each match, dropping what fails; then
  `{call["name"]: call["arguments"]}` per call, where a match that is not an object, lacks a key or
  has non-object arguments fails the whole reply;
- prompting mode: BFCL's own `default_decode_ast_prompting` (Python call syntax, `[f(a=1), g()]`).
Judging (eval_runner's `_evaluate_single_ast_entry` / `_evaluate_single_relevance_entry`): a reply
that fails to decode scores 0 (`ast_decoder:decoder_failed`), one that decodes to something other
than a list of `{name: {arguments}}` scores 0 (`ast_decoder:decoder_wrong_output_format`), else the
official `ast_checker` decides. Irrelevance: 1 unless the reply decodes to a non-empty call list.

One deliberate difference: BFCL's decoder `eval`s binary operations it finds in an argument
(`f(a=1+2)`), which runs model text as code. We evaluate only the ones that cannot do harm
(numbers with + - * / // %, strings with +) and refuse the rest (`ast_decoder:refused_expression`,
a decode failure); docs/bfcl.md lists every difference from our lenient reading.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from typing import Any, Mapping, Sequence

from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

from genenv_jax.domains.bfcl import official
from genenv_jax.domains.bfcl.checker import check_calls

TOOL_CALL_PATTERN = r"<tool_call>\n(.*?)\n</tool_call>"  # QwenFCHandler's; `tool_call_bodies` matches it
_OPEN, _CLOSE = "<tool_call>\n", "\n</tool_call>"
MAX_DETAIL_CHARS = 10_000  # a decoded reply kept in score details beyond this is cut (as its repr)
DECODINGS = ("bfcl", "lenient")
_SAFE_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A reply as BFCL's decoder leaves it: `output` (what `decode_ast` returned) or the `error` it
    raised; `refused`: we did not run the decoder, the reply holds an expression it would `eval`."""

    output: Any = None
    error: str | None = None
    refused: bool = False


def after_think(text: str) -> str:
    """The reply BFCL decodes: the text after the last `</think>`, left newlines stripped (if there is one)."""
    return text.split("</think>")[-1].lstrip("\n") if "</think>" in text else text


def tool_call_bodies(text: str) -> list[str]:
    """`re.findall(TOOL_CALL_PATTERN, text, re.DOTALL)` in linear time (the regex itself is quadratic
    on many unclosed openings): from each opening, the body runs to the first `\n</tool_call>` after
    it, and the next match starts after that; with no closing left, no later opening matches either."""
    bodies, pos = [], 0
    while (start := text.find(_OPEN, pos)) >= 0 and (end := text.find(_CLOSE, start + len(_OPEN))) >= 0:
        bodies.append(text[start + len(_OPEN):end])
        pos = end + len(_CLOSE)
    return bodies


def extract_tool_calls(text: str) -> list[Any]:
    """`QwenFCHandler._extract_tool_calls`: each regex match that `json.loads` reads, in order."""
    out = []
    for match in tool_call_bodies(text):
        try:
            out.append(json.loads(match))
        except Exception:  # noqa: BLE001 - BFCL drops whatever fails to load
            pass
    return out


def _decode_fc(text: str) -> list[dict[Any, Any]]:
    calls = extract_tool_calls(text)
    if any(type(item) is not dict for item in calls):
        raise ValueError(f"Model did not return a list of function calls: {text}")
    return [{call["name"]: {k: v for k, v in call["arguments"].items()}} for call in calls]


def _evaluated(node: ast.AST) -> list[ast.AST]:
    """The BinOp nodes BFCL's `resolve_ast_by_type` would `eval` in one argument value."""
    if isinstance(node, ast.BinOp):
        return [node]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [b for e in node.elts for b in _evaluated(e)]
    if isinstance(node, ast.Dict):
        return [b for e in [*node.keys, *node.values] if e is not None for b in _evaluated(e)]
    if isinstance(node, ast.Call) and node.keywords:
        return [b for k in node.keywords for b in _evaluated(k.value)]
    return []


def _harmless(node: ast.AST, kind: type | None = None) -> type | None:
    """The type (int/float or str) of an expression safe to `eval`, or None: numbers under + - * / // %,
    strings under + only (no names, calls, attributes, powers or shifts, nothing that grows unbounded)."""
    if isinstance(node, ast.Constant) and type(node.value) in (bool, int, float, str):
        return str if isinstance(node.value, str) else float
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return float if _harmless(node.operand) is float else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, _SAFE_OPERATORS):
        left, right = _harmless(node.left), _harmless(node.right)
        if left is float and right is float or left is str and right is str and isinstance(node.op, ast.Add):
            return left
    return None


def refused_expression(text: str) -> str | None:
    """The first argument expression BFCL would `eval` that is not harmless, as source text, or None.

    Reads the reply as `default_decode_ast_prompting` does (strip, bracket, parse); a reply that
    does not parse is left for BFCL's decoder to fail on."""
    cleaned = text.strip("`\n ")
    cleaned = ("" if cleaned.startswith("[") else "[") + cleaned + ("" if cleaned.endswith("]") else "]")
    try:
        body = ast.parse(cleaned.strip().strip("'"), mode="eval").body
    except Exception:  # noqa: BLE001 - SyntaxError, RecursionError, MemoryError: BFCL fails the same way
        return None
    calls = [body] if isinstance(body, ast.Call) else [e for e in getattr(body, "elts", []) if isinstance(e, ast.Call)]
    for call in calls:
        for node in _evaluated(call):
            if _harmless(node) is None:
                return ast.unparse(node)[:200]
    return None


def decode(text: str, mode: str) -> Decoded:
    """A reply through BFCL's reading for `mode` ("fc" or "prompting"); never raises."""
    text = after_think(text)
    if mode == "prompting":
        refused = refused_expression(text)
        if refused is not None:
            return Decoded(error=f"refused_expression: {refused}", refused=True)
    try:
        if mode == "fc":
            return Decoded(output=_decode_fc(text))
        return Decoded(output=official.handler_utils().default_decode_ast_prompting(text))
    except Exception as e:  # noqa: BLE001 - BFCL counts any decoder exception as a failed decode
        return Decoded(error=f"{type(e).__name__}: {str(e)[:300]}")


def made_a_call(decoded: Decoded) -> bool:
    """The relevance runner's `contain_func_call`: decoded to a non-empty call list (`is_empty_output`).
    A refused reply counts as a call: it holds one, with an argument BFCL would have run."""
    if decoded.refused:
        return True
    return decoded.error is None and not is_empty_output(decoded.output)


def judge(decoded: Decoded, functions: Sequence[Mapping[str, Any]], ground_truth: Sequence[Mapping[str, Any]],
          category: str, irrelevance: bool) -> tuple[bool, str | None, list[Any]]:
    """(valid, error_type, errors) as BFCL's eval runner gives them for one decoded reply."""
    if irrelevance:
        call = made_a_call(decoded)
        return (not call, "irrelevance_error:decoder_success" if call else None, [])
    if decoded.error is not None:
        return False, "ast_decoder:" + ("refused_expression" if decoded.refused else "decoder_failed"), [decoded.error]
    if not is_function_calling_format_output(decoded.output):
        return False, "ast_decoder:decoder_wrong_output_format", [str(decoded.output)[:300]]
    calls = [{"name": name, "arguments": args} for item in decoded.output for name, args in item.items()]
    result = check_calls(functions, calls, ground_truth, category)
    return result.valid, result.error_type, list(result.errors)


def json_safe(value: Any) -> Any:
    """`value` as JSON data that writes as UTF-8, for score details (a decoded reply may hold tuples,
    odd keys, NaN, lone surrogates or a megabyte string): the JSON round trip where it works and is
    short, else the start of its repr."""
    try:
        dumped = json.dumps(value, allow_nan=False, ensure_ascii=False, default=repr)
        dumped.encode("utf-8")
        if len(dumped) <= MAX_DETAIL_CHARS:
            return json.loads(dumped)
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        pass
    return repr(value)[:MAX_DETAIL_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


def python_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call in the prompting mode's syntax, `name(a=1, b='x')`, which BFCL's decoder reads back."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def python_calls(calls: Sequence[Any]) -> str:
    """A prompting-mode reply, `[f(a=1), g(b='x')]`, from ToolCalls or {"name", "arguments"} dicts."""
    pairs = [(c.name, c.arguments) if hasattr(c, "arguments") else (c["name"], c.get("arguments", {})) for c in calls]
    return "[" + ", ".join(python_call(name, arguments) for name, arguments in pairs) + "]"
