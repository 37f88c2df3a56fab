"""API-Bank's APIs executed deterministically over a private copy of the JSON databases.

`APIBank(init_database_dir)` is the API world of one dialogue: `call(name, params)` converts the
arguments as upstream does (text to the declared int/float/bool/list), runs the API on the state and
returns an `ApiResult` shaped like the recorded results; it never raises on bad model input. Suites:
"level-1-2" (the APIs over init_database/), "level-3" (the planning APIs) and "all" (both; AddMeeting
and QueryMeeting, which exist in both, are told apart by their parameters, and the tool searcher
searches both pools). `replay_dialogue` replays recorded calls and checks them with `is_correct`.

`scoring` chooses how calls run: "strict" (the arguments converted to the declared types, the APIs as
the data implies) or "official" (the original code's argument handling and API behaviours,
`apis/official.py`; a call the original would not run comes back `refused`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from genenv_jax.domains.api_bank.apis import REGISTRY, ApiError, ApiSpec, description
from genenv_jax.domains.api_bank.apis.base import bind, fits, register
from genenv_jax.domains.api_bank.apis.official import Refused, bind_official
from genenv_jax.domains.api_bank.apis.official_apis import OFFICIAL_APIS
from genenv_jax.domains.api_bank.apis.level3 import fresh_level3_table
from genenv_jax.domains.api_bank.database import DEFAULT_TODAY, ApiState, load_tables
from genenv_jax.domains.api_bank.tool_search import ToolSearcher

SUITE_NAMES = ("level-1-2", "level-3", "all")
SCORINGS = ("official", "strict")
EXCLUDED_APIS: Mapping[str, str] = {
    "Dictionary": "needs the network upstream (it queries an online dictionary service)",
    "Translate": "needs the network upstream (it calls an online translation service)",
}


@dataclasses.dataclass(frozen=True)
class ApiResult:
    """One executed call, as API-Bank records it.

    `refused` (official scoring only): why the original evaluator would not score this call at all (an
    undeclared or missing parameter, "abort:..." where its run would stop); such a call is wrong."""

    api_name: str
    input: dict[str, Any] | None
    output: Any
    exception: str | None
    refused: str | None = None

    def to_json(self) -> dict[str, Any]:
        shown = {"api_name": self.api_name, "input": self.input, "output": self.output, "exception": self.exception}
        return dict(shown, refused=self.refused) if self.refused else shown


@register("ToolSearcher", "keywords:str")
def _tool_searcher(state, keywords):
    return state.tool_searcher.search(keywords)


register("ToolSearcher", "keywords:str", suite="level-3")(_tool_searcher)


def _suites(suite: str) -> tuple[str, ...]:
    if suite not in SUITE_NAMES:
        raise ValueError(f"suite must be one of {SUITE_NAMES}: got {suite!r}")
    return ("level-1-2", "level-3") if suite == "all" else (suite,)


@functools.lru_cache(maxsize=None)
def _searcher(suite: str) -> ToolSearcher:
    """The tool searcher over the implemented APIs of `suite` (descriptions as the searcher returns them)."""
    pool = []
    for part in _suites(suite):
        for name in sorted(REGISTRY[part]):
            found = description(name, part, for_searcher=True)
            if name != "ToolSearcher" and found is not None:
                pool.append(found)
    token_api = description("GetUserToken", "level-1-2", for_searcher=True) if "level-1-2" in _suites(suite) else None
    return ToolSearcher(pool, token_api)


class APIBank:
    """The APIs of one dialogue over a private copy of the initial databases (state changes stay in it)."""

    def __init__(self, init_database_dir: str | Path, *, suite: str = "all", today: str = DEFAULT_TODAY,
                 seed: int = 0, scoring: str = "strict"):
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {SCORINGS}: got {scoring!r}")
        self.init_database_dir = str(Path(init_database_dir).expanduser().resolve())
        self.suite, self.today, self.seed, self.scoring = suite, today, seed, scoring
        self._specs: dict[str, list[ApiSpec]] = {}
        for part in _suites(suite):
            overrides = OFFICIAL_APIS[part] if scoring == "official" else {}
            for name, spec in REGISTRY[part].items():
                self._specs.setdefault(name, []).append(overrides.get(name, spec))
        tables = dict(load_tables(self.init_database_dir))
        tables["level3"] = fresh_level3_table()
        self.state = ApiState.fresh(tables, today=today, seed=seed)
        self.state.tool_searcher = _searcher(suite)

    @classmethod
    def names(cls, suite: str = "all") -> tuple[str, ...]:
        """Implemented API names (of `suite`)."""
        return tuple(sorted({name for part in _suites(suite) for name in REGISTRY[part]}))

    def describe(self, name: str) -> dict:
        """{"name", "description", "input_parameters", "output_parameters"} as the prompts show it."""
        for spec in self._specs.get(name, ()):
            found = description(name, spec.suite)
            if found is not None:
                found.pop("desc_for_search", None)
                return found
        raise KeyError(f"no API named {name!r} in suite {self.suite}")

    def call(self, name: str, params: Mapping[str, Any] | None) -> ApiResult:
        """Runs API `name`; failures (unknown API, bad parameters, the API's own) come back as `exception`."""
        raw = dict(params) if isinstance(params, Mapping) else {}
        if params is not None and not isinstance(params, Mapping):
            return ApiResult(str(name), None, None, f"The parameters of {name} must be a mapping of names to values.")
        if not isinstance(name, str):
            return ApiResult(str(name), raw, None, f"API {name} does not exist.")
        if name in EXCLUDED_APIS:
            return ApiResult(name, raw, None, f"API {name} is not available here: {EXCLUDED_APIS[name]}.")
        specs = self._specs.get(name)
        if not specs:
            return ApiResult(str(name), raw, None, f"API {name} does not exist.")
        spec = next((s for s in specs if fits(s, raw)), specs[0])
        try:
            bound = bind_official(spec, raw) if self.scoring == "official" else bind(spec, raw)
        except Refused as refusal:
            return ApiResult(name, raw, None, str(refusal), refused=refusal.reason)
        except ApiError as error:
            return ApiResult(name, raw, None, str(error))
        shown = bound if (bound or spec.params) else None
        try:
            output = json.loads(json.dumps(spec.handler(self.state, **bound)))   # JSON-able, and a copy
        except ApiError as error:
            return ApiResult(name, shown, None, str(error))
        except Exception as error:  # noqa: BLE001 (model input must never crash the environment)
            return ApiResult(name, shown, None, f"{type(error).__name__}: {error}")
        return ApiResult(name, shown, output, None)

    def copy_initial(self) -> "APIBank":
        """A fresh instance from the same initial databases (tables are read once per directory)."""
        return APIBank(self.init_database_dir, suite=self.suite, today=self.today, seed=self.seed,
                       scoring=self.scoring)


@dataclasses.dataclass(frozen=True)
class RecordedCall:
    """A call as a dialogue records it: the API, the parameters given and the recorded result."""

    api_name: str
    params: dict[str, Any]
    result: ApiResult


def _recorded(api_name: str, params: Any, result: Mapping[str, Any]) -> RecordedCall:
    return RecordedCall(api_name, dict(params or {}), ApiResult(
        result.get("api_name") or api_name, result.get("input"), result.get("output"), result.get("exception")))


def calls_from_sample(lines: Iterable[str | Mapping[str, Any]]) -> list[RecordedCall]:
    """The API turns of one lv1-lv2-samples dialogue (JSONL lines or parsed turns), in order."""
    turns = [json.loads(line) if isinstance(line, str) else line for line in lines
             if not isinstance(line, str) or line.strip()]
    return [_recorded(t["api_name"], t.get("param_dict"), t["result"]) for t in turns if t.get("role") == "API"]


def calls_from_level3(dialogue: Mapping[str, Any]) -> list[RecordedCall]:
    """The recorded calls of one test-data/level-3.json dialogue ({requirement, response, apis})."""
    return [_recorded(a["api_name"], a.get("input"), a["output"]) for a in dialogue["apis"]]


@dataclasses.dataclass(frozen=True)
class ReplayRow:
    """One replayed call: the recording, what the APIs answered, correct (by the bank's scoring), identical."""

    recorded: RecordedCall
    replayed: ApiResult
    ok: bool
    exact: bool


def replay_dialogue(calls: Sequence[RecordedCall], bank: APIBank) -> list[ReplayRow]:
    """Replays `calls` in order on `bank` (give it a fresh one per dialogue) and checks each result under
    the bank's scoring."""
    from genenv_jax.domains.api_bank.correctness import is_correct

    rows = []
    for call in calls:
        replayed = bank.call(call.api_name, call.params)
        rows.append(ReplayRow(call, replayed, is_correct(call.result, replayed, bank.scoring, bank.suite),
                              call.result.to_json() == replayed.to_json()))
    return rows


__all__ = ["APIBank", "ApiResult", "EXCLUDED_APIS", "RecordedCall", "ReplayRow", "SCORINGS", "SUITE_NAMES", "calls_from_level3",
           "calls_from_sample", "replay_dialogue"]
