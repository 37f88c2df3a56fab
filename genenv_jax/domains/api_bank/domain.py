"""API-Bank (levels 1-3) as a GenEnv domain: seeds from a user's download, calls scored by execution.

Categories: level-1-api / level-2-api (the next API call of a dialogue, scored by replay and
execution), level-1-response / level-2-response (the AI's reply after a call, ROUGE-L F) and
level-3 (a whole dialogue from a requirement with the tool searcher, `episode.Level3Environment`).
`call_format` chooses how the agent writes calls: "structured" (`<tool_call>` JSON, the project's
format; the default) or "official" (API-Bank's `API-Request: [Name(k='v')]` text and parser).
`scoring` chooses how calls are run and judged: "official" (the default: the original evaluator's
argument handling, API behaviours and per-API rules, its bugs' verdicts included, so numbers compare
with published ones) or "strict" (the paper's definitions; docs/api_bank.md lists every difference).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from genenv_jax.core.config_checks import name_list
from genenv_jax.data.prepared import DataMissing, load_records
from genenv_jax.domains.api_bank import data, generation, metrics
from genenv_jax.domains.api_bank.calls import CALL_FORMATS, parse_call, render_call
from genenv_jax.domains.api_bank.correctness import SCORINGS
from genenv_jax.domains.api_bank.episode import DEFAULT_MAX_CALLS, Level3Environment, agent_calls, score_dialogue
from genenv_jax.domains.api_bank.prompts import item_prompt, level3_prompt
from genenv_jax.domains.api_bank.summary import summarize
from genenv_jax.domains.base import (ChatPrompt, Domain, Environment, Invalid, Rejection, ScoreResult,
                                     SingleTurnEnvironment, Task, curriculum_line, next_sibling)

DOMAIN_NAME = "api_bank"

SIMULATOR_SYSTEM = (
    "You write training tasks for an AI assistant that calls APIs in dialogues with users (the API-Bank "
    "benchmark). You are given a seed task and the descriptions of the APIs it uses, and write one new task in "
    "the same JSON format: a new dialogue and its target.")
_DIFFICULTY_TEXT = {
    "harder": "Make the new task HARDER than the seed: more turns before the target, values stated indirectly, "
              "or a call that needs a value from an earlier call's result.",
    "easier": "Make the new task EASIER than the seed: fewer turns, every argument value stated plainly.",
    "similar": "Keep the difficulty about the SAME as the seed, with a different request or different values.",
}


class APIBankDomain(Domain):
    """API-Bank; see the module docstring and docs/api_bank.md.

    Args:
      data_dir: the download directory (official layout; `python -m genenv_jax.data.download api_bank`).
      call_format: "structured" or "official" (how the agent writes calls and how they are read).
      categories: a subset of data.CATEGORIES. validation_fraction / split_salt: the split of the
        source dialogues into train and validation. cache_dir: the prepared-data cache (default
        $GENENV_CACHE/tfds). max_level3_calls: the call cap of a level-3 episode.
      scoring: "official" (default) or "strict" (module docstring). Official call items and level-3
        episodes also report the strict verdict (`strict_correct`, `metric/strict_correct`).
      replay_history: replay the dialogue's earlier gold calls before executing a level-1/2 prediction
        (a call that depends on an earlier state change can be right). False is API-Bank's own
        evaluator: a fresh state per scored call, earlier calls not replayed. None (default): as the
        scoring's evaluator does, False for "official" and True for "strict" (docs/api_bank.md).
    """

    name = DOMAIN_NAME
    rejection_reasons = generation.REJECTION_REASONS + ("level3_not_generated",)

    def __init__(self, data_dir: str = "", call_format: str = "structured",
                 categories: Sequence[str] = data.CATEGORIES,
                 validation_fraction: float = data.DEFAULT_VALIDATION_FRACTION,
                 split_salt: str = data.DEFAULT_SPLIT_SALT, cache_dir: str = "",
                 max_level3_calls: int = DEFAULT_MAX_CALLS, replay_history: bool | None = None,
                 scoring: str = "official"):
        if call_format not in CALL_FORMATS:
            raise ValueError(f"api_bank: call_format {call_format!r} not in {CALL_FORMATS}")
        if scoring not in SCORINGS:
            raise ValueError(f"api_bank: scoring {scoring!r} not in {SCORINGS}")
        categories = name_list(categories, "api_bank: categories")
        unknown = [c for c in categories if c not in data.CATEGORIES]
        if unknown:
            raise ValueError(f"api_bank: unknown categories {unknown}; expected a subset of {data.CATEGORIES}")
        self.data_dir, self.call_format, self.categories = str(data_dir), call_format, tuple(categories)
        self.source = data.api_source(validation_fraction, split_salt)
        self.cache_dir, self.max_level3_calls = cache_dir or None, max_level3_calls
        self.scoring = scoring
        self.replay_history_option = replay_history
        self.replay_history = self._replays(scoring)

    def _replays(self, scoring: str) -> bool:
        """Whether `scoring` replays a dialogue's earlier calls (the option, else the scoring's evaluator)."""
        if self.replay_history_option is not None:
            return bool(self.replay_history_option)
        return scoring == "strict"

    # ------------------------------------------------------------------ seeds
    @property
    def init_database_dir(self) -> str:
        if not self.data_dir:
            raise DataMissing(f"api_bank: no data_dir given ({data.INSTRUCTIONS})")
        return str(Path(self.data_dir).expanduser().resolve() / "init_database")

    def _task(self, record: Mapping[str, Any], searcher: Mapping[str, Any]) -> Task:
        metadata = {"split": record["split"], "file": record["file"], "source_id": record["source_id"],
                    "expected_output": record["expected_output"], "source": "api_bank"}
        if record["level"] == 3:
            return Task(domain=DOMAIN_NAME, task_id=record["item_id"], category="level-3",
                        prompt={"level": 3, "kind": "dialogue", "requirement": record["requirement"],
                                "searcher": dict(searcher)},
                        verifier={"calls": record["calls"], "expected": record["expected_output"]}, metadata=metadata)
        target = {"gold": record["gold"]} if record["kind"] == "api" else {"expected": record["expected"]}
        prompt = {k: record[k] for k in ("level", "kind", "history", "apis", "instruction", "input")}
        return Task(domain=DOMAIN_NAME, task_id=f"{record['split']}/{record['item_id']}", category=record["category"],
                    prompt=prompt, verifier=target, metadata=metadata)

    def load_seeds(self) -> list[Task]:
        """Tasks of 'train' / 'validation' (source dialogues, split by dialogue) and 'test' (official)."""
        self.init_database_dir  # noqa: B018 (a clear error when data_dir is unset)
        searcher = metrics.initial_bank(self.init_database_dir, "level-3").describe("ToolSearcher")
        return [self._task(r, searcher) for split in ("train", "validation", "test")
                for r in load_records(self.source, self.data_dir, split, self.cache_dir)
                if data.is_item(r) and r["category"] in self.categories]

    # ------------------------------------------------------------------ agent side
    def agent_prompt(self, task: Task) -> ChatPrompt:
        if task.category == "level-3":
            return level3_prompt(task.prompt["requirement"], task.prompt["searcher"], self.call_format)
        return item_prompt(task.prompt, self.call_format)

    def environment(self, task: Task) -> Environment:
        if task.category == "level-3":
            return Level3Environment(task.prompt, task.verifier, self.init_database_dir, self.call_format,
                                     self.max_level3_calls, self.scoring)
        return SingleTurnEnvironment(self, task)

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """Call items: replay + execute + is_correct under `scoring` (official: the strict verdict too);
        reply items: ROUGE-L F; level 3: the response as the episode's first (and only) agent turn."""
        details: dict[str, Any] = {"call_format": self.call_format, "scoring": self.scoring}
        if task.category == "level-3":
            calls = agent_calls([{"role": "assistant", "content": response}], self.call_format, self.max_level3_calls)
            return score_dialogue(self.init_database_dir, task.verifier["calls"], calls, self.scoring)
        if task.prompt["kind"] == "response":
            score = metrics.rouge_l(task.verifier["expected"], response)
            return ScoreResult(score, dict(details, rouge_l=score, error_type=None if score > 0 else "no_overlap"))
        predicted = parse_call(response, self.call_format)
        verdict = self._verdict(task, predicted, self.scoring)
        details.update(verdict.to_details(), **{"metric/correct": float(verdict.correct)})
        if self.scoring == "official":
            strict = self._verdict(task, predicted, "strict")
            details.update({"strict_correct": strict.correct, "strict_error_type": strict.to_details()["error_type"],
                            "metric/strict_correct": float(strict.correct)})
        return ScoreResult(float(verdict.correct), details)

    def _verdict(self, task: Task, predicted, scoring: str) -> metrics.CallVerdict:
        return metrics.score_call(self.init_database_dir, task.prompt["history"], task.verifier["gold"], predicted,
                                  replay_history=self._replays(scoring), scoring=scoring)

    def reference_turns(self, task: Task) -> list[str]:
        if task.category == "level-3":
            return [render_call(c["api_name"], c["param_dict"], self.call_format) for c in task.verifier["calls"]] \
                + [task.verifier["expected"]]
        return [self.reference_response(task)]

    def reference_response(self, task: Task) -> str:
        """The gold call in `call_format`, or the gold reply (level 3: the first gold call)."""
        if task.category == "level-3":
            return self.reference_turns(task)[0]
        if task.prompt["kind"] == "response":
            return task.verifier["expected"]
        gold = task.verifier["gold"]
        return render_call(gold["api_name"], gold["param_dict"], self.call_format)

    def summary(self, per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        return summarize(per_category)

    # ------------------------------------------------------------------ simulator side
    def _descriptions(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The descriptions of the implemented APIs among `names` (excluded ones have none)."""
        bank = metrics.initial_bank(self.init_database_dir, "level-1-2", self.scoring)
        return [bank.describe(n) for n in sorted(set(names) & set(bank.names()))]

    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        """Chat messages asking for one new task like `seed` (levels 1-2; level 3 is not generated)."""
        rate = curriculum_line(recent_success, alpha, difficulty, solver="The assistant", count=False)
        if seed.category == "level-3":
            raise ValueError("api_bank: level-3 dialogues are evaluated only; the simulator writes levels 1-2")
        kind, level = seed.prompt["kind"], seed.prompt["level"]
        gold = seed.verifier.get("gold")
        names = [t["api_name"] for t in seed.prompt["history"] if t["role"] == "API"] + ([gold["api_name"]] if gold else [])
        target = ("- expected_call: {\"api_name\", \"param_dict\"}: the assistant's correct next API call. It must "
                  "succeed on the initial database after the dialogue's earlier calls." if kind == "api" else
                  "- expected_reply: the assistant's reply to the user after the dialogue's last API call, "
                  "stating its result; the dialogue must end with that API turn.")
        level_rule = ("Level 2: the assistant sees only ToolSearcher's description, so the expected call is a "
                      "ToolSearcher call or an API that an earlier ToolSearcher call in the dialogue found."
                      if level == 2 else "Level 1: the assistant sees the descriptions of the APIs the dialogue uses.")
        user = "\n".join([
            f"Seed task ({seed.category}):",
            generation.as_generation(seed.prompt["history"], gold, seed.verifier.get("expected")),
            "", "API descriptions:", *[json.dumps(d, ensure_ascii=False) for d in self._descriptions(names)],
            "", rate, _DIFFICULTY_TEXT[difficulty], "",
            "Write ONE new task as a JSON object with these keys:",
            "- dialogue: the turns so far, each {\"role\": \"User\" or \"AI\", \"text\": ...} or an earlier call "
            "{\"role\": \"API\", \"api_name\": ..., \"param_dict\": {parameter: value}}; it opens with the User.",
            target, level_rule,
            "Use only APIs and parameter names from the descriptions; values are text as in the seed.",
            "", "Reply with the JSON object inside a ```json code block and nothing else."])
        return ChatPrompt(messages=[{"role": "system", "content": SIMULATOR_SYSTEM}, {"role": "user", "content": user}])

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """Reads and executes the simulator's task; a Task in the seed's category or a Rejection."""
        if seed.category == "level-3":
            return self.reject(Invalid("level3_not_generated", "level 3 is evaluated only"), seed, text)
        kind, level = seed.prompt["kind"], seed.prompt["level"]
        try:
            fields = generation.validate(text, kind, level, self.init_database_dir,
                                         {"history": seed.prompt["history"], **seed.verifier}, scoring=self.scoring)
        except Invalid as e:
            return self.reject(e, seed, text)
        history = fields["history"]
        names = [t["api_name"] for t in history if t["role"] == "API"] + (
            [fields["gold"]["api_name"]] if kind == "api" else [])
        apis = self._descriptions(names if level == 1 else ["ToolSearcher"])
        api_lines = "\n".join(json.dumps(a, ensure_ascii=False) for a in apis)
        header, end = (data.API_INSTRUCTION, data.API_INPUT_END) if kind == "api" else \
            (data.RESPONSE_INSTRUCTION, data.RESPONSE_INPUT_END)
        prompt = {"level": level, "kind": kind, "history": history, "apis": apis, "instruction": header + api_lines,
                  "input": data.render_history(history) + end}
        verifier = {"gold": fields["gold"]} if kind == "api" else {"expected": fields["expected"]}
        digest = hashlib.sha256(json.dumps([prompt["history"], verifier], sort_keys=True).encode()).hexdigest()[:16]
        return Task(domain=DOMAIN_NAME, task_id=f"{seed.task_id}~{digest}", category=seed.category, prompt=prompt,
                    verifier=verifier, parent_id=seed.task_id, difficulty=difficulty, metadata={"source": "simulator"})

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """A sibling item of the seed's category and split, written as the simulator is asked to."""
        def write(t: Task) -> str:
            return generation.as_generation(t.prompt["history"], t.verifier.get("gold"), t.verifier.get("expected"))

        def fits(t: Task) -> bool:
            return t.category == seed.category and isinstance(self.parse_task(write(t), seed), Task)

        return write(sibling if sibling is not None and fits(sibling) else next_sibling(self, seed, fits))


__all__ = ["APIBankDomain", "DOMAIN_NAME"]
