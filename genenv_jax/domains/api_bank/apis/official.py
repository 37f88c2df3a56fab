"""How API-Bank's original code runs a call, for `scoring="official"`: its argument handling and the APIs
whose original behaviour differs from ours in a way its recordings and verdicts show.

Argument handling (the original `ToolManager.api_call` at upstream 483554ea), applied to text values:
  - a parameter the API does not declare: the original stops with "invalid parameter name"; the
    evaluator counts the call wrong;
  - int: the text must pass `str.isdigit()` (so " 3", "-3" and "3.0" do not): otherwise the original
    raises an AssertionError its evaluator re-raises, ending the whole run. We never crash: the call is
    refused and scored wrong (`Refused.abort` marks it; docs/api_bank.md);
  - float: the text without its first "." must pass `isdigit()` (no sign, no padding), same handling;
  - bool: True exactly when the text is "True";
  - list / dict: passed on as the raw text, unparsed (since upstream commit 5c38bb7, 2023-11-17). So an
    API that stores a list stores the text and one that reads it fails, and the recorded inputs, which
    hold real lists, are never reproduced from text;
  - a required parameter left out: the original call fails with a TypeError the evaluator counts wrong.
Non-text values (the structured call format) have no original counterpart: they are converted as in
strict mode, except lists and dicts, which pass unchanged.

The APIs that behave differently in official scoring are in `official_apis.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from genenv_jax.domains.api_bank.apis.base import ApiSpec, convert


@dataclasses.dataclass
class Refused(Exception):
    """The original evaluator would not score this call's result: `reason` says why.

    `abort`: the original's evaluator_by_json.py re-raises here and its run stops (a padded integer);
    official scoring counts the call wrong instead, as the original's evaluator.py does."""

    reason: str
    message: str
    abort: bool = False

    def __str__(self) -> str:
        return self.message


def _convert_text(value: str, type_: str) -> Any:
    if type_ == "int":
        if not value.isdigit():
            raise Refused("abort:invalid_int", f"invalid parameter type. parameter: {value}", abort=True)
        try:
            return int(value)
        except ValueError:     # digits int() does not read (superscripts): the original raises too
            raise Refused("abort:invalid_int", f"invalid literal for int(): {value!r}", abort=True) from None
    if type_ == "float":
        if not value.replace(".", "", 1).isdigit():
            raise Refused("abort:invalid_float", "invalid parameter type.", abort=True)
        try:
            return float(value)
        except ValueError:
            raise Refused("abort:invalid_float", f"could not convert string to float: {value!r}", abort=True) from None
    if type_ == "bool":
        return value == "True"
    return value                 # str, list and dict: the raw text


def bind_official(spec: ApiSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments the original's ToolManager passes to the API (module docstring), or `Refused`."""
    bound: dict[str, Any] = {}
    for key, value in params.items():
        param = spec.param(key)
        if param is None:
            raise Refused("invalid_parameter_name", f"invalid parameter name. parameter: {key}")
        if isinstance(value, str):
            bound[key] = _convert_text(value, param.type)
        elif param.type in ("list", "dict"):
            bound[key] = value
        else:
            try:
                bound[key] = convert(value, param.type)
            except (ValueError, TypeError) as error:
                raise Refused("abort:invalid_type", f"invalid parameter type: {error}", abort=True) from None
    missing = [p.name for p in spec.params if p.required and p.name not in bound]
    if missing:
        raise Refused("missing_argument", f"{spec.name}.call() missing required positional argument(s): "
                                          + ", ".join(missing))
    return bound


__all__ = ["Refused", "bind_official"]
