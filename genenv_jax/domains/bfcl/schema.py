"""BFCL task schema: validation of (question, function docs, possible answers) and the ideal answer.

Used by `parse_task` on simulator generations. Two levels:
- "strict" (default for generated tasks): BFCL's schema, every ground-truth call names a provided
  function with all required arguments, every acceptable value fits its declared type (null allowed,
  as an explicit default) and enum, and the official checker scores the ideal answer 1.0.
- "lenient": BFCL's own data conventions (variables written as strings, enums not enforced); only
  the structure and the official-checker solvability are required.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from genenv_jax.domains.bfcl.checker import check_calls, official_checker_module
from genenv_jax.domains.records import Invalid
from genenv_jax.text.tokenization import ToolCall

VALIDATION_LEVELS = ("strict", "lenient")

# Reason codes of a rejected generation, in the order the checks run.
REJECTION_REASONS = (
    "no_json",                    # no JSON object in the text
    "too_large",                  # the JSON value is longer than json_text.MAX_JSON_CHARS characters
    "too_deep",                   # the JSON value nests deeper than json_text.MAX_JSON_DEPTH levels
    "invalid_json",               # a JSON block that does not parse (NaN, Infinity, unclosed values included)
    "invalid_unicode",            # a JSON string holds a lone UTF-16 surrogate, which no UTF-8 file can hold
    "not_an_object",              # top-level JSON is not an object
    "missing_field",              # question / function / ground_truth absent
    "bad_question",               # question is not a string or a list of chat messages ending with a user turn
    "empty_question",             # the final user message is empty
    "copied_question",            # same question as the seed
    "bad_function_schema",        # function docs do not follow BFCL's schema
    "duplicate_function",         # two function docs with one name
    "wrong_function_count",       # function count does not fit the category
    "bad_ground_truth",           # ground truth is not [{name: {param: [values]}}]
    "wrong_call_count",           # call count does not fit the category
    "unknown_function",           # a ground-truth call names a function that is not provided
    "missing_required_argument",  # a required parameter has no acceptable value
    "unknown_argument",           # a ground-truth parameter the function does not declare
    "empty_answer_values",        # a parameter with an empty list of acceptable values
    "type_mismatch",              # an acceptable value does not fit the declared type (strict)
    "enum_violation",             # an acceptable value outside the declared enum (strict)
    "unsolvable",                 # the official checker rejects the ground truth's ideal answer
    "ungrounded_answer",          # a ground-truth value the question does not state (grounding.py; domain.py)
)

# Types the official Python checker understands (its PYTHON_TYPE_MAPPING keys).
CHECKER_TYPES = ("string", "integer", "float", "boolean", "array", "tuple", "dict", "any")


def category_kind(category: str) -> str:
    """'irrelevance', 'parallel_multiple', 'parallel', 'multiple' or 'simple' (the checker's modes)."""
    if "irrelevance" in category:
        return "irrelevance"
    if "parallel" in category and "multiple" in category:
        return "parallel_multiple"
    if "parallel" in category:
        return "parallel"
    if "multiple" in category:
        return "multiple"
    return "simple"


# (min functions, max functions, min calls, max calls) per kind; None = unbounded.
_COUNT_RULES = {
    "simple": (1, 1, 1, 1),
    "multiple": (2, None, 1, 1),
    "parallel": (1, None, 2, None),
    "parallel_multiple": (2, None, 2, None),
    "irrelevance": (0, None, 0, 0),
}


def count_rule_text(category: str) -> str:
    """The category's shape rule in words (used in the simulator prompt)."""
    return {
        "simple": "exactly one function doc, and the ground truth is exactly one call to it",
        "multiple": "two or more function docs, and the ground truth is exactly one call to one of them",
        "parallel": "the ground truth is two or more calls (the same function called with different arguments)",
        "parallel_multiple": "two or more function docs, and the ground truth is two or more calls across them",
        "irrelevance": "none of the functions can answer the question, so the ground truth is an empty list []",
    }[category_kind(category)]


# ----------------------------------------------------------------------------------------------
# Question
# ----------------------------------------------------------------------------------------------
def normalize_question(question: Any) -> list[dict[str, str]]:
    """A question as BFCL messages: a string, a message list, or BFCL's [[messages]] turn list."""
    if isinstance(question, str):
        question = [{"role": "user", "content": question}]
    if isinstance(question, list) and len(question) == 1 and isinstance(question[0], list):
        question = question[0]  # BFCL's list of turns with a single turn
    if not isinstance(question, list) or not question:
        raise Invalid("bad_question", f"expected a string or a list of messages, got {type(question).__name__}")
    messages = []
    for i, m in enumerate(question):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise Invalid("bad_question", f"message {i} is not {{'role': str, 'content': str}}")
        if m["role"] not in ("system", "user", "assistant"):
            raise Invalid("bad_question", f"message {i} has role {m['role']!r}")
        messages.append({"role": m["role"], "content": m["content"]})
    if messages[-1]["role"] != "user":
        raise Invalid("bad_question", f"last message has role {messages[-1]['role']!r}, expected 'user'")
    if not messages[-1]["content"].strip():
        raise Invalid("empty_question", "the final user message is empty")
    return messages


def question_key(messages: Sequence[Mapping[str, str]]) -> str:
    """The final user message, case-folded with whitespace collapsed (for the copy check)."""
    return " ".join(messages[-1]["content"].casefold().split())


# ----------------------------------------------------------------------------------------------
# Function docs
# ----------------------------------------------------------------------------------------------
def _check_param_schema(where: str, schema: Any) -> None:
    if not isinstance(schema, dict):
        raise Invalid("bad_function_schema", f"{where}: parameter schema is not an object")
    t = schema.get("type")
    if t not in CHECKER_TYPES:
        raise Invalid("bad_function_schema", f"{where}: type {t!r} not in {CHECKER_TYPES}")
    if "description" in schema and not isinstance(schema["description"], str):
        raise Invalid("bad_function_schema", f"{where}: description is not a string")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise Invalid("bad_function_schema", f"{where}: enum is not a list")
    if t in ("array", "tuple"):
        items = schema.get("items")
        if not isinstance(items, dict) or items.get("type") not in CHECKER_TYPES:
            raise Invalid("bad_function_schema", f"{where}: {t} needs 'items' with a type in {CHECKER_TYPES}")
        _check_param_schema(f"{where}.items", items)
    if t == "dict" and "properties" in schema:
        props = schema["properties"]
        if not isinstance(props, dict):
            raise Invalid("bad_function_schema", f"{where}: properties is not an object")
        for name, sub in props.items():
            _check_param_schema(f"{where}.{name}", sub)


def validate_functions(functions: Any) -> list[dict[str, Any]]:
    """Checks BFCL function docs: name, description, parameters {type: dict, properties, required}."""
    if not isinstance(functions, list):
        raise Invalid("bad_function_schema", f"function must be a list, got {type(functions).__name__}")
    seen = set()
    for i, f in enumerate(functions):
        if not isinstance(f, dict):
            raise Invalid("bad_function_schema", f"function {i} is not an object")
        name = f.get("name")
        if not isinstance(name, str) or not name.strip():
            raise Invalid("bad_function_schema", f"function {i} has no name")
        if name in seen:
            raise Invalid("duplicate_function", f"function {name!r} is listed twice")
        seen.add(name)
        if not isinstance(f.get("description"), str):
            raise Invalid("bad_function_schema", f"function {name!r}: description must be a string")
        params = f.get("parameters")
        if not isinstance(params, dict) or params.get("type") != "dict":
            raise Invalid("bad_function_schema", f"function {name!r}: parameters must be {{'type': 'dict', ...}}")
        props, required = params.get("properties"), params.get("required")
        if not isinstance(props, dict):
            raise Invalid("bad_function_schema", f"function {name!r}: parameters.properties must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise Invalid("bad_function_schema", f"function {name!r}: parameters.required must be a list of names")
        undeclared = [r for r in required if r not in props]
        if undeclared:
            raise Invalid("bad_function_schema", f"function {name!r}: required {undeclared} not in properties")
        for pname, schema in props.items():
            _check_param_schema(f"{name}.{pname}", schema)
    return functions


# ----------------------------------------------------------------------------------------------
# Ground truth
# ----------------------------------------------------------------------------------------------
def _standardize(value: str) -> str:
    # The checker's own string normalisation (case, spaces and ",./-_*^" ignored).
    return official_checker_module().standardize_string(value)


def _fits_type(value: Any, schema: Mapping[str, Any]) -> bool:
    t = schema.get("type")
    if value is None or t == "any":
        return True
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    if t in ("array", "tuple"):
        items = schema.get("items", {})
        if not isinstance(value, list):
            return False
        if items.get("type") == "dict":
            return all(isinstance(v, dict) for v in value)
        return all(_fits_type(v, items) for v in value)
    if t == "dict":
        return isinstance(value, dict)
    return False


def _in_enum(value: Any, enum: list) -> bool:
    if isinstance(value, list):
        return all(_in_enum(v, enum) for v in value)
    if isinstance(value, str):
        return _standardize(value) in {_standardize(e) for e in enum if isinstance(e, str)}
    return value in enum


def _check_values(where: str, values: Any, schema: Mapping[str, Any] | None, strict: bool,
                  literal: bool = False) -> None:
    """`values` is a param's list of acceptable values ("" = may be omitted).

    `literal` marks values nested inside a dict answer, which are compared as they are.
    """
    if not isinstance(values, list):
        raise Invalid("bad_ground_truth", f"{where}: acceptable values must be a list, got {values!r}")
    if not values:
        raise Invalid("empty_answer_values", f"{where}: no acceptable value")
    if schema is None or not strict:
        return
    for v in values:
        if v == "":
            continue
        if not _fits_type(v, schema):
            raise Invalid("type_mismatch", f"{where}: {v!r} does not fit type {schema.get('type')!r}")
        if v is not None and "enum" in schema and not _in_enum(v, schema["enum"]):
            raise Invalid("enum_violation", f"{where}: {v!r} not in enum {schema['enum']}")
        if literal:
            continue
        if schema.get("type") == "dict" and isinstance(v, dict):
            _check_dict_answer(where, v, schema, strict)
        if schema.get("type") in ("array", "tuple") and schema.get("items", {}).get("type") == "dict":
            for j, d in enumerate(v):
                _check_dict_answer(f"{where}[{j}]", d, schema["items"], strict)


def _check_dict_answer(where: str, answer: Mapping[str, Any], schema: Mapping[str, Any], strict: bool) -> None:
    """A dict value in possible-answer form: {key: [acceptable values]} (the checker's dict format).

    The checker reads this form one level deep only: the acceptable values of a key are literals,
    even when the key is itself declared as a dict.
    """
    props = schema.get("properties")
    for key, values in answer.items():
        if props is not None and key not in props:
            raise Invalid("unknown_argument", f"{where}: key {key!r} not in the declared properties")
        _check_values(f"{where}.{key}", values, props.get(key) if props else None, strict, literal=True)


def validate_ground_truth(ground_truth: Any, functions: Sequence[Mapping[str, Any]], category: str,
                          level: str = "strict") -> list[dict[str, Any]]:
    """Checks possible answers against the function docs and the category's shape."""
    if level not in VALIDATION_LEVELS:
        raise ValueError(f"validation level {level!r} not in {VALIDATION_LEVELS}")
    strict = level == "strict"
    if not isinstance(ground_truth, list):
        raise Invalid("bad_ground_truth", f"ground_truth must be a list, got {type(ground_truth).__name__}")
    min_f, max_f, min_c, max_c = _COUNT_RULES[category_kind(category)]
    if len(functions) < min_f or (max_f is not None and len(functions) > max_f):
        raise Invalid("wrong_function_count", f"{len(functions)} function docs; {category}: {count_rule_text(category)}")
    if len(ground_truth) < min_c or (max_c is not None and len(ground_truth) > max_c):
        raise Invalid("wrong_call_count", f"{len(ground_truth)} calls; {category}: {count_rule_text(category)}")
    docs = {f["name"]: f for f in functions}
    for i, call in enumerate(ground_truth):
        if not isinstance(call, dict) or len(call) != 1:
            raise Invalid("bad_ground_truth", f"call {i} must be a one-key object {{function_name: {{...}}}}")
        (name, args), = call.items()
        if not isinstance(args, dict):
            raise Invalid("bad_ground_truth", f"call {i} ({name}): arguments must be an object of value lists")
        if name not in docs:
            raise Invalid("unknown_function", f"call {i} names {name!r}; provided: {sorted(docs)}")
        props = docs[name]["parameters"]["properties"]
        for pname, values in args.items():
            where = f"call {i} ({name}).{pname}"
            if not isinstance(values, list):
                raise Invalid("bad_ground_truth", f"{where}: acceptable values must be a list, got {values!r}")
            if pname not in props and "" not in values:
                raise Invalid("unknown_argument", f"{where}: not a declared parameter of {name!r}")
            _check_values(where, values, props.get(pname), strict)
        for required in docs[name]["parameters"]["required"]:
            if required not in args or all(v == "" for v in args[required]):
                raise Invalid("missing_required_argument", f"call {i} ({name}): required {required!r} has no value")
    if ground_truth:
        result = check_calls(functions, reference_calls(functions, ground_truth), ground_truth, category)
        if not result.valid:
            raise Invalid("unsolvable", f"official checker rejects the ideal answer: {result.error_type}: "
                                        f"{str(result.errors)[:300]}")
    return ground_truth


# ----------------------------------------------------------------------------------------------
# The ideal answer
# ----------------------------------------------------------------------------------------------
def _first_value(values: list) -> Any:
    for v in values:
        if v != "":
            return v
    return ""


def _collapse_dict_answer(answer: Mapping[str, Any]) -> dict[str, Any]:
    # {key: [acceptable literals]} -> {key: first literal}; keys whose first value is "" are omitted.
    return {k: _first_value(vs) for k, vs in answer.items() if isinstance(vs, list) and vs and vs[0] != ""}


def _render_value(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """A possible-answer value as a model would write it (dict answers collapsed to first values)."""
    if not schema:
        return value
    t = schema.get("type")
    if t == "dict" and isinstance(value, dict):
        return _collapse_dict_answer(value)
    if t in ("array", "tuple") and isinstance(value, list) and schema.get("items", {}).get("type") == "dict":
        return [_collapse_dict_answer(d) if isinstance(d, dict) else d for d in value]
    return value


def reference_calls(functions: Sequence[Mapping[str, Any]], ground_truth: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """The ideal answer: each call with the first acceptable value of every argument.

    An argument whose first acceptable value is "" (may be omitted) is left out, and so is an
    optional one the function does not declare; a required argument takes its first non-"" value.
    """
    docs = {f["name"]: f for f in functions}
    calls = []
    for call in ground_truth:
        (name, args), = call.items()
        params = docs.get(name, {}).get("parameters", {})
        props, required = params.get("properties", {}), set(params.get("required", []))
        rendered = {}
        for pname, values in args.items():
            if not values:
                continue
            optional = "" in values and pname not in required
            if optional and (values[0] == "" or pname not in props):
                continue
            first = _first_value(values)
            if first == "":
                continue
            rendered[pname] = _render_value(first, props.get(pname))
        calls.append(ToolCall(name=name, arguments=rendered))
    return calls
