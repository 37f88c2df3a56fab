"""BFCL grounding of generated tasks (domains/bfcl/grounding.py): designed cases for grounded,
ungrounded, default and derived values; the three modes of the domain option; the loop's count of
recorded flags; and what the rule costs on the human-written BFCL data (pinned)."""

from __future__ import annotations

import collections
import json
import types

import jax
import pytest

from genenv_jax.configs import bfcl as bfcl_configs
from genenv_jax.configs.run_config import RunConfig
from genenv_jax.loop.context import LoopContext
from genenv_jax.loop.tasks import TaskGenerator
from genenv_jax.sampling import FINISH_STOP, SampleOutput
from genenv_jax.domains.bfcl import BFCLDomain, data as bfcl_data
from genenv_jax.domains.bfcl.grounding import stated_dates, stated_numbers, ungrounded_arguments
from genenv_jax.domains.records import Rejection, Task


def _fn(**properties) -> list[dict]:
    return [{"name": "f", "description": "d", "parameters": {"type": "dict", "properties": properties,
                                                             "required": list(properties)}}]


def _ungrounded(question: str, args: dict, **properties) -> list[str]:
    props = properties or {k: {"type": "string"} for k in args}
    return [u.argument for u in ungrounded_arguments([{"role": "user", "content": question}], _fn(**props),
                                                     [{"f": args}])]


STRING, INT, FLOAT = {"type": "string"}, {"type": "integer"}, {"type": "float"}


@pytest.mark.parametrize("question, args, properties, expected", [
    # Grounded: stated as written, or after the checker's normalisation (case, spaces, ",./-_*^").
    ("Weather in New York City tomorrow?", {"city": ["New York City"]}, {"city": STRING}, []),
    ("weather in new-york", {"city": ["New York"]}, {"city": STRING}, []),
    ("Book 2 tickets for 7.5 dollars each", {"n": [2], "price": [7.5]}, {"n": INT, "price": FLOAT}, []),
    ("It costs $1,250,000.", {"price": [1250000]}, {"price": INT}, []),
    ("Order two pizzas and a dozen eggs", {"pizzas": [2], "eggs": [12]}, {"pizzas": INT, "eggs": INT}, []),
    ("Twenty-five people, 3 million dollars", {"people": [25], "dollars": [3000000]},
     {"people": INT, "dollars": INT}, []),
    ("An interest rate of 5%", {"rate": [0.05]}, {"rate": FLOAT}, []),
    ("Book from July 10, 2022", {"date": ["2022-07-10"]}, {"date": STRING}, []),
    ("Check in on 10 March 2022", {"date": ["03/10/2022"]}, {"date": STRING}, []),
    # One acceptable value stated is enough: the others are alternatives the checker also accepts.
    ("Convert to USD", {"to": ["United States Dollar", "USD"]}, {"to": STRING}, []),
    # Lists: every element; dicts: every value.
    ("Avoid tolls and highways", {"avoid": [["tolls", "highways"]]},
     {"avoid": {"type": "array", "items": STRING}}, []),
    ("Avoid tolls and ferries", {"avoid": [["tolls", "highways"]]},
     {"avoid": {"type": "array", "items": STRING}}, ["avoid"]),
    ("Two adults and one child", {"party": [{"adults": [2], "children": [1]}]},
     {"party": {"type": "dict", "properties": {"adults": INT, "children": INT}}}, []),
    ("Two adults and one child", {"party": [{"adults": [2], "children": [3]}]},
     {"party": {"type": "dict", "properties": {"adults": INT, "children": INT}}}, ["party"]),
    # Exempt: the omission marker, null, booleans, and the parameter's declared default.
    ("Area of a triangle with base 4", {"base": [4], "unit": ["meters", ""]}, {"base": INT, "unit": STRING}, []),
    ("Area of a triangle with base 4", {"base": [4], "exact": [True]}, {"base": INT, "exact": {"type": "boolean"}}, []),
    ("Area of a triangle with base 4", {"base": [4], "unit": ["units"]},
     {"base": INT, "unit": {"type": "string", "default": "units"}}, []),
    ("Area of a triangle with base 4", {"base": [4], "unit": [None]}, {"base": INT, "unit": STRING}, []),
    # Ungrounded: a value the question does not state.
    ("Area of a triangle with base 8 and height 3", {"base": [9], "height": [3]}, {"base": INT, "height": INT},
     ["base"]),
    ("Weather in Paris", {"city": ["London"]}, {"city": STRING}, ["city"]),
    # Derived values are not grounded (decided; docs/bfcl.md): units, dates, codes, world knowledge.
    ("Meet me in 2 hours", {"minutes": [120]}, {"minutes": INT}, ["minutes"]),
    ("Stock price of Apple", {"ticker": ["AAPL"]}, {"ticker": STRING}, ["ticker"]),
    ("Forecast for next week", {"days": [7]}, {"days": INT}, ["days"]),
    ("Capacitance of 100µF", {"farads": [0.0001]}, {"farads": FLOAT}, ["farads"]),
])
def test_designed_cases(question, args, properties, expected):
    assert _ungrounded(question, args, **properties) == expected


def test_stated_numbers_and_dates():
    assert {2.0, 3.5, 1250.0, 0.05, 5.0, 21.0, 12.0} <= stated_numbers("two, 3.5, 1,250, 5% and twenty-one, a dozen")
    assert -4.0 in stated_numbers("a temperature of -4 degrees")
    assert stated_dates("from 2024-05-02 to May 3rd, 2024") == {(2024, 5, 2), (2024, 5, 3)}
    assert stated_dates("on 04/05/2022") == {(2022, 4, 5), (2022, 5, 4)}  # ambiguous: both readings


def _generation(question: str, base: int) -> str:
    seed = {"question": question, "function": _fn(base={"type": "integer"}, height={"type": "integer"}),
            "ground_truth": [{"f": {"base": [base], "height": [3]}}]}
    return "```json\n" + json.dumps(seed) + "\n```"


def test_the_three_modes_of_the_domain_option():
    seed = BFCLDomain(categories=("simple_python",)).seeds("train")[0]
    text = _generation("A triangle with base 8 and height 3", base=9)
    rejected = BFCLDomain(categories=("simple_python",)).parse_task(text, seed)
    assert isinstance(rejected, Rejection) and rejected.reason == "ungrounded_answer"
    assert "call 0 (f).base: none of [9]" in rejected.detail
    recorded = BFCLDomain(categories=("simple_python",), grounding="record").parse_task(text, seed)
    assert isinstance(recorded, Task) and recorded.metadata["flags"] == ["ungrounded_answer"]
    assert recorded.metadata["ungrounded"] == ["call 0 (f).base: none of [9] is stated in the question"]
    off = BFCLDomain(categories=("simple_python",), grounding="off").parse_task(text, seed)
    assert isinstance(off, Task) and "flags" not in off.metadata
    grounded = BFCLDomain(categories=("simple_python",), grounding="record").parse_task(
        _generation("A triangle with base 9 and height 3", base=9), seed)
    assert isinstance(grounded, Task) and "flags" not in grounded.metadata
    with pytest.raises(ValueError, match="grounding 'maybe'"):
        BFCLDomain(grounding="maybe")


class _ScriptedSimulator:
    """A simulator whose generations are given texts (the loop decodes them through `_ScriptedText`)."""

    settings = types.SimpleNamespace(sampling=types.SimpleNamespace(max_prompt_len=100_000))

    def sample(self, weights, prompts, seed, stop_ids, bar):
        return SampleOutput.from_rows([[i] for i in range(len(prompts))], [FINISH_STOP] * len(prompts))


class _ScriptedText:
    stop_ids = (0,)

    def __init__(self, texts):
        self.texts = texts

    def prompt(self, chat_prompt):
        return [1, 2, 3]

    def decode(self, tokens):
        return self.texts[tokens[0]]


def test_the_loop_counts_recorded_flags():
    config = RunConfig.from_config_dict(bfcl_configs.get_config("tiny"), num_devices=jax.device_count())
    domain = BFCLDomain(categories=("simple_python",), grounding="record")
    texts = [_generation("A triangle with base 8 and height 3", 9), _generation("base 9, height 3", 9), "no task"]
    ctx = LoopContext(config, domain, _ScriptedText(texts), domain.seeds("train"))
    gens, counts = TaskGenerator(ctx, _ScriptedSimulator()).generate([ctx.train_seeds[0]] * 3, None, {}, 0)
    assert [type(g.result).__name__ for g in gens] == ["Task", "Task", "Rejection"]
    assert counts == {"flagged/ungrounded_answer": 1, "rejected/no_json": 1}


def test_what_the_rule_costs_on_the_human_written_data():
    """The share of shipped BFCL items whose ground truth holds a value their question does not state
    (derived values: state suffixes, tickers, unit conversions, world knowledge); docs/bfcl.md."""
    failing = collections.Counter()
    for category in ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"):
        for e in bfcl_data.load_category(category):
            failing[category] += bool(ungrounded_arguments(e.question, e.functions, e.ground_truth))
    assert dict(failing) == {"simple_python": 50, "multiple": 22, "parallel": 9, "parallel_multiple": 17,
                             "irrelevance": 0}
