"""BFCL (Berkeley Function Calling Leaderboard) v4 single-turn categories as a GenEnv domain.

Seeds come from the data shipped in `bfcl-eval`; the agent sees the question with the function
docs in the prompt format of one of BFCL's Qwen handlers (`prompts.py`; mode "fc": tools in the
system turn, calls in `<tool_call>` blocks; mode "prompting": BFCL's system prompt, calls as
`[func(a=v)]`), and R_agent is BFCL's verdict on the reply: its own decoding (`replies.py`) and
official AST checker (irrelevance categories: success means no call). The
simulator is shown one seed in BFCL's own JSON format and asked for a variant in the same format,
which `parse_task` validates (bfcl_schema.py) before it becomes a task.

CLI (`__main__.py`): `python -m genenv_jax.domains.bfcl --stats` prints seed counts per category and
split; `--check` runs the reward check on every shipped possible answer and `parse_task` on every entry.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Mapping, Sequence

from genenv_jax.core.config_checks import name_list
from genenv_jax.domains.bfcl import data as bfcl_data, grounding, prompts, replies, schema as bfcl_schema
from genenv_jax.domains.base import (ChatPrompt, Domain, Invalid, Rejection, ScoreResult, Task, curriculum_line,
                                     next_sibling)
from genenv_jax.domains.bfcl.checker import check_calls
from genenv_jax.domains.bfcl.data import CATEGORIES, IRRELEVANCE_CATEGORIES, SPLITS, SplitFractions
from genenv_jax.domains.bfcl.generation import as_generation, seed_json
from genenv_jax.domains.bfcl.schema import REJECTION_REASONS
from genenv_jax.domains.generation import extract_json_object
from genenv_jax.text.tokenization import parse_tool_calls, render_tool_calls

DOMAIN_NAME = "bfcl"
# BFCL appends this to every Python function description in its prompts (bfcl_eval.utils).
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
GROUNDING_MODES = ("reject", "record", "off")
# The ideal response to an irrelevance task: plain text, no call.
NO_CALL_RESPONSE = ("None of the provided functions can be used to answer this request, "
                    "so I will not call any of them.")

SIMULATOR_SYSTEM = (
    "You write training tasks for an AI agent that calls functions. You are given a seed task in the "
    "JSON format of the Berkeley Function Calling Leaderboard (BFCL) and write one new task in the "
    "same format, with its correct answer.")

_DIFFICULTY_TEXT = {
    "harder": ("Make the new task HARDER than the seed: e.g. more arguments to fill, values the user "
               "states indirectly (units, dates, names to infer), longer wording with distracting "
               "details, or (where the category allows several functions) similar-looking functions "
               "to choose from."),
    "easier": ("Make the new task EASIER than the seed: e.g. a short direct request that states every "
               "argument value explicitly, fewer arguments, clearly distinct functions."),
    "similar": ("Keep the difficulty about the SAME as the seed, with a different topic or different "
                "argument values."),
}


def _python_hinted(functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    functions = copy.deepcopy(list(functions))
    for f in functions:
        f["description"] = f.get("description", "") + PYTHON_HINT
    return functions


def _task_digest(question: Any, functions: Any, ground_truth: Any) -> str:
    canonical = json.dumps([question, functions, ground_truth], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


class BFCLDomain(Domain):
    """BFCL single-turn categories; see the module docstring.

    Args:
      categories: which BFCL categories to use (default: all ten single-turn ones).
      split_fractions / split_salt: the deterministic train/validation/test split.
      validation: "strict" (default) or "lenient" checking of generated tasks (bfcl_schema.py).
      grounding: what happens to a generated task whose ground truth holds a value the question
        does not state (`grounding.py`): "reject" (default; reason `ungrounded_answer`), "record"
        (accepted, flagged in its metadata and counted by the loop as `flagged/ungrounded_answer`:
        measures the rule without applying it) or "off".
      mode: "fc" (default; BFCL's function-calling handler) or "prompting" (BFCL's prompting
        handler: the calls as Python syntax in the text).
      prompt_format: a format of `prompts.FORMATS[mode]`; default the one behind the published
        Qwen2.5 figures (`bfcl_fc_qwen25`, `bfcl_prompting_qwen25`; docs/bfcl.md says why).
      decoding: "bfcl" (default; BFCL's own reading of the reply, quirks included: `replies.py`) or
        "lenient" (fc only: every `<tool_call>` block read, a malformed one fails the reply).
    """

    name = DOMAIN_NAME
    rejection_reasons = REJECTION_REASONS

    def __init__(self, categories: Sequence[str] = CATEGORIES,
                 split_fractions: SplitFractions = SplitFractions(),
                 split_salt: str = bfcl_data.DEFAULT_SPLIT_SALT, validation: str = "strict",
                 grounding: str = "reject", mode: str = "fc", prompt_format: str | None = None,
                 decoding: str = "bfcl"):
        categories = name_list(categories, "bfcl: categories")
        unknown = [c for c in categories if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown BFCL categories {unknown}; expected a subset of {CATEGORIES}")
        if validation not in bfcl_schema.VALIDATION_LEVELS:
            raise ValueError(f"validation {validation!r} not in {bfcl_schema.VALIDATION_LEVELS}")
        if grounding not in GROUNDING_MODES:
            raise ValueError(f"grounding {grounding!r} not in {GROUNDING_MODES}")
        if mode not in prompts.MODES:
            raise ValueError(f"bfcl mode {mode!r}: expected one of {prompts.MODES}")
        prompt_format = prompts.DEFAULT_FORMATS[mode] if prompt_format is None else prompt_format
        if prompt_format not in prompts.FORMATS[mode]:
            raise ValueError(f"bfcl prompt_format {prompt_format!r}: mode {mode!r} takes one of {prompts.FORMATS[mode]}")
        if decoding not in replies.DECODINGS:
            raise ValueError(f"bfcl decoding {decoding!r}: expected one of {replies.DECODINGS}")
        if decoding == "lenient" and mode != "fc":
            raise ValueError("bfcl decoding 'lenient' reads <tool_call> blocks: it needs mode 'fc'")
        self.grounding = grounding
        self.mode, self.prompt_format, self.decoding = mode, prompt_format, decoding
        self.categories = tuple(categories)
        self.split_fractions = SplitFractions.of(split_fractions)
        self.split_salt = split_salt
        self.validation = validation

    # ------------------------------------------------------------------ seeds
    def load_seeds(self) -> list[Task]:
        """Every seed of the configured categories, in category then file order."""
        entries = [e for c in self.categories for e in bfcl_data.load_category(c)]
        assignment = bfcl_data.assign_splits(entries, self.split_fractions, self.split_salt)
        return [Task(
            domain=DOMAIN_NAME, task_id=e.id, category=e.category,
            prompt={"question": copy.deepcopy(e.question), "functions": copy.deepcopy(e.functions)},
            verifier={"ground_truth": copy.deepcopy(e.ground_truth)},
            metadata={"source": "bfcl_v4", "split": assignment[e.id]}) for e in entries]

    def split_counts(self) -> dict[str, dict[str, int]]:
        """{category: {split: count}} for the configured split."""
        counts = {c: {s: 0 for s in SPLITS} for c in self.categories}
        for t in self.seeds("all"):
            counts[t.category][t.metadata["split"]] += 1
        return counts

    # ------------------------------------------------------------------ agent side
    def agent_prompt(self, task: Task) -> ChatPrompt:
        """The question with its function docs (BFCL's Python hint appended) in this domain's prompt format."""
        return prompts.agent_prompt(self.prompt_format, task.prompt["question"],
                                    _python_hinted(task.prompt["functions"]), task.task_id)

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """1.0 if BFCL's pipeline accepts the reply (irrelevance: if it makes no call); `decoding="lenient"`
        reads it with this project's own tool-call parser instead."""
        if self.decoding == "lenient":
            return self._lenient_score(task, response)
        decoded = replies.decode(response, self.mode)
        valid, error_type, errors = replies.judge(decoded, task.prompt["functions"], task.verifier["ground_truth"],
                                                  task.category, task.category in IRRELEVANCE_CATEGORIES)
        details: dict[str, Any] = {"decoded": replies.json_safe(decoded.output),
                                   "decode_error": replies.json_safe(decoded.error), "error_type": error_type}
        if not valid and errors:
            details["checker_errors"] = replies.json_safe(errors[:5])
        return ScoreResult(float(valid), details)

    def _lenient_score(self, task: Task, response: str) -> ScoreResult:
        """This project's reading before issue 50: every `<tool_call>` block parsed (whitespace and
        newlines optional, names stripped), a malformed block fails the reply, `</think>` not special."""
        parsed = parse_tool_calls(response)
        details: dict[str, Any] = {
            "calls": [c.to_json() for c in parsed.calls],
            "parse_errors": [{"index": e.index, "reason": e.reason, "detail": e.detail} for e in parsed.errors],
        }
        if task.category in IRRELEVANCE_CATEGORIES:
            ok = not parsed.attempted_call
            details["error_type"] = None if ok else "irrelevance:made_a_call"
            return ScoreResult(float(ok), details)
        if parsed.errors:
            details["error_type"] = f"parse_error:{parsed.errors[0].reason}"
            return ScoreResult(0.0, details)
        result = check_calls(task.prompt["functions"], parsed.calls, task.verifier["ground_truth"], task.category)
        details["error_type"] = result.error_type
        if not result.valid:
            details["checker_errors"] = json.loads(json.dumps(result.errors, default=repr))[:5]
        return ScoreResult(float(result.valid), details)

    def reference_response(self, task: Task) -> str:
        """The ground truth (first acceptable values) as `<tool_call>` blocks, or in prompting mode as
        `[func(a=v)]`; a no-call reply for irrelevance."""
        if task.category in IRRELEVANCE_CATEGORIES or not task.verifier["ground_truth"]:
            return NO_CALL_RESPONSE
        return self.render_calls(bfcl_schema.reference_calls(task.prompt["functions"], task.verifier["ground_truth"]))

    def render_calls(self, calls: Sequence[Any]) -> str:
        """Calls (ToolCalls or {"name", "arguments"} dicts) written as this mode's reply asks for them:
        `<tool_call>` blocks (fc) or `[f(a=v)]` (prompting)."""
        return replies.python_calls(calls) if self.mode == "prompting" else render_tool_calls(calls)

    def summary(self, per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """BFCL-style aggregates of {category: {"n", "correct", "accuracy"}}.

        non_live_ast: unweighted mean over the non-live AST categories (as BFCL's leaderboard);
        live_ast: mean over live AST items (BFCL weights live categories by size);
        irrelevance: unweighted mean of the two irrelevance categories;
        overall: unweighted mean over all evaluated categories; overall_micro: over all items.
        """
        def present(cats):
            return [per_category[c] for c in cats if c in per_category and per_category[c]["n"]]

        out: dict[str, float] = {}
        if rows := present(bfcl_data.NON_LIVE_AST_CATEGORIES):
            out["non_live_ast"] = sum(r["accuracy"] for r in rows) / len(rows)
        if rows := present(bfcl_data.LIVE_AST_CATEGORIES):
            out["live_ast"] = sum(r["correct"] for r in rows) / sum(r["n"] for r in rows)
        if rows := present(IRRELEVANCE_CATEGORIES):
            out["irrelevance"] = sum(r["accuracy"] for r in rows) / len(rows)
        if rows := present(per_category):
            out["overall"] = sum(r["accuracy"] for r in rows) / len(rows)
            out["overall_micro"] = sum(r["correct"] for r in rows) / sum(r["n"] for r in rows)
        return out

    # ------------------------------------------------------------------ simulator side
    def _suitable_sibling(self, seed: Task, sibling: Task | None) -> Task:
        key = bfcl_schema.question_key(seed.prompt["question"])

        def fits(t: Task) -> bool:  # same category, new question, and valid under this domain's rules
            return (t.category == seed.category and bfcl_schema.question_key(t.prompt["question"]) != key
                    and isinstance(self.parse_task(as_generation(t), seed), Task))

        if sibling is not None and fits(sibling):
            return sibling
        return next_sibling(self, seed, fits)  # another question of the seed's split and category

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """A sibling task of the seed's category written as the simulator is asked to (fenced JSON)."""
        return as_generation(self._suitable_sibling(seed, sibling))

    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        """Chat messages (no tools) asking for one variant of `seed` as BFCL JSON.

        States the agent's recent success on the seed against the target `alpha` and asks for the
        given difficulty; both come from the caller's curriculum, so they cannot drift apart.
        """
        success_line = curriculum_line(recent_success, alpha, difficulty)
        irrelevance = seed.category in IRRELEVANCE_CATEGORIES
        answer_rule = (
            'ground_truth: [] (an empty list): the question must be one that none of the functions can '
            'answer.' if irrelevance else
            'ground_truth: the correct call(s) as a list of {"function_name": {"argument": [acceptable '
            'values]}} objects. List every acceptable value of an argument (e.g. ["NYC", "New York"]); '
            'put "" in the list of an optional argument that may be left out; leave out optional '
            'arguments the user does not mention or give them ["", default]. Use JSON types that '
            'match the declared parameter types and enums.')
        user = "\n".join([
            f"Seed task (BFCL category: {seed.category}):",
            "```json", seed_json(seed), "```",
            "",
            success_line,
            _DIFFICULTY_TEXT[difficulty],
            "",
            "Write ONE new task as a JSON object with exactly these keys:",
            "- question: the new user request (a string). It must differ from the seed's question.",
            '- function: the function docs in the seed\'s schema: {"name", "description", "parameters": '
            '{"type": "dict", "properties": {...}, "required": [...]}}, parameter types among '
            f"{', '.join(bfcl_schema.CHECKER_TYPES)}; arrays need \"items\". You may edit, add or remove functions.",
            f"- {answer_rule}",
            f"Category rule ({seed.category}): {bfcl_schema.count_rule_text(seed.category)}.",
            "",
            "Reply with the JSON object inside a ```json code block and nothing else.",
        ])
        return ChatPrompt(messages=[{"role": "system", "content": SIMULATOR_SYSTEM},
                                    {"role": "user", "content": user}])

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """Reads the simulator's JSON; returns a Task in the seed's category or a Rejection."""
        try:
            obj = extract_json_object(text)
            if not isinstance(obj, dict):
                raise Invalid("not_an_object", f"top-level JSON is a {type(obj).__name__}")
            functions_key = "function" if "function" in obj else "functions"
            missing = [k for k in ("question", functions_key, "ground_truth") if k not in obj]
            if missing:
                raise Invalid("missing_field", f"missing {missing}; keys are {sorted(obj)}")
            question = bfcl_schema.normalize_question(obj["question"])
            if bfcl_schema.question_key(question) == bfcl_schema.question_key(seed.prompt["question"]):
                raise Invalid("copied_question", "the question repeats the seed's question")
            functions = bfcl_schema.validate_functions(obj[functions_key])
            ground_truth = bfcl_schema.validate_ground_truth(obj["ground_truth"], functions, seed.category,
                                                             self.validation)
            ungrounded = ([] if self.grounding == "off" else
                          [u.describe() for u in grounding.ungrounded_arguments(question, functions, ground_truth)])
            if ungrounded and self.grounding == "reject":
                raise Invalid(grounding.REASON, "; ".join(ungrounded))
        except Invalid as e:
            return self.reject(e, seed, text)
        digest = _task_digest(question, functions, ground_truth)
        metadata: dict[str, Any] = {"source": "simulator"}
        if ungrounded:  # grounding="record": accepted, and said so
            metadata |= {"flags": [grounding.REASON], "ungrounded": ungrounded}
        return Task(domain=DOMAIN_NAME, task_id=f"{seed.task_id}~{digest}", category=seed.category,
                    prompt={"question": question, "functions": functions},
                    verifier={"ground_truth": ground_truth}, parent_id=seed.task_id,
                    difficulty=difficulty, metadata=metadata)
