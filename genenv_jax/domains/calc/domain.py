"""A synthetic tool-call arithmetic domain for the miniature reproduction study (docs/study_domain.md).

The agent sees an integer expression ("Compute (3 + 4) * 5.") and a few function docs (add, sub,
mul and distractors) and answers with ONE `<tool_call>`: the expression's outermost operation
with both operands evaluated to integers, e.g.
`<tool_call>\\n{"name": "mul", "arguments": {"a": 7, "b": 5}}\\n</tool_call>`.
The verifier is exact: one well-formed call, the right function name, and arguments exactly
{"a": int, "b": int} with the right values.

The simulator writes a task as two lines (optionally inside a code fence):

    question: (3 + 4) * 5
    functions: add, mul, max

`parse_task` parses the expression itself (a bounded recursive-descent parser over digits,
`+ - * ( )`; model text is never eval'd), recomputes the answer from it, and measures the task's
level from its content. An `answer:` line, if the simulator writes one, is ignored (the verifier
never trusts it); whether it was right is kept in the task's metadata (`stated_answer_ok`).

Difficulty knobs, all read from the text: operand digits, number of operations (operands - 1,
which also sets the nesting), and distractor functions (listed functions the expression does not
use). The level is the first row of the domain's levels (LEVELS, or with `num_levels=7` also
EXTRA_LEVELS) whose caps the task fits; a task beyond the last row is rejected (`out_of_range`).
The task's category is its measured level ("level_3").
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from typing import Any, Sequence

from genenv_jax.domains.base import (SPLITS, ChatPrompt, Domain, Invalid, Rejection, ScoreResult, Task,
                                     check_difficulty, curriculum_line, next_sibling)
from genenv_jax.domains.calc.expressions import (ALL_LEVELS, FUNCTIONS, LEVELS, MAX_GENERATION_CHARS, NUM_LEVELS,
                                                 OPERATOR_FUNCTION, REJECTION_REASONS, Level, evaluate,
                                                 expected_call, level_of, measure, parse_expression,
                                                 render_expression, walk)
from genenv_jax.text.tokenization import parse_tool_calls, render_tool_call

DOMAIN_NAME = "calc"
PROMPT_STYLES = ("tools", "compact", "instruct")
COMPACT_SYSTEM = "Call one function."
# prompt_style="instruct": for pretrained instruct models (Qwen2.5-Instruct) that must follow the task
# and write tasks from their prior, with no warm-start of the simulator. The agent's turn names the
# listed functions and the call to make, with one worked example; the simulator's asks for a task in
# the two-line format, shows the seed as an example, and states the level it should be.
INSTRUCT_AGENT_SYSTEM = (
    "Answer by calling ONE function: the operation evaluated last in the expression (parentheses first, * before "
    "+ and -, left to right), with its two operands computed to integers as a and b. Example: for (3 + 4) * 5 "
    "call mul with a = 7 and b = 5:\n"
    "<tool_call>\n{\"name\": \"mul\", \"arguments\": {\"a\": 7, \"b\": 5}}\n</tool_call>\n"
    "Reply with the call only.")
INSTRUCT_SIMULATOR_SYSTEM = ("You write arithmetic tasks for a calculator agent. You reply with exactly two lines: "
                             "a question line and a functions line.")
# Format examples in the instruct simulator prompt (levels 1 and 4), beside the seed of the level asked for.
INSTRUCT_FORMAT_EXAMPLES = ("question: 7 + 2", "functions: add", "", "question: (38 - 12) * 7",
                            "functions: sub, mul, max, pow")

# ----------------------------------------------------------------------------------------------
# Reading and writing tasks as text
# ----------------------------------------------------------------------------------------------
_LINE = re.compile(r"^[ \t]*(question|functions|answer)[ \t]*:(.*)$", re.IGNORECASE | re.MULTILINE)


def read_generation(text: str, complete_functions: bool = False) -> dict[str, Any]:
    """The task a simulator generation states: {"expression", "tree", "functions", "stated_answer",
    "completed"}.

    Looks at the first `question:`, `functions:` and `answer:` lines. Raises Invalid. With
    `complete_functions`, the functions line only adds distractors: a missing line means none, a
    repeated name counts once, and the functions the expression needs are appended when absent
    (`completed` counts them); the level is measured on the completed list.
    """
    if len(text) > MAX_GENERATION_CHARS:
        raise Invalid("too_large", f"{len(text)} characters; the limit is {MAX_GENERATION_CHARS}")
    fields: dict[str, str] = {}
    for m in _LINE.finditer(text):
        fields.setdefault(m.group(1).lower(), m.group(2).strip())
    if "question" not in fields:
        raise Invalid("no_question", "no 'question:' line")
    if "functions" not in fields and not complete_functions:
        raise Invalid("no_functions", "no 'functions:' line")
    question = fields["question"]
    question = question[len("Compute"):].strip() if question.lower().startswith("compute") else question
    question = question.split("=", 1)[0] if re.fullmatch(r"[^=]*=\s*-?[0-9]*\s*\.?", question) else question
    question = question.rstrip(".?= ").strip()  # "2 + 3 = 5" or "2 + 3 =" states an answer: ignored
    tree = parse_expression(question)
    if tree[0] == "num":
        raise Invalid("bad_expression", "the expression has no operation")
    names = [n.strip() for n in fields.get("functions", "").split(",") if n.strip()]
    if complete_functions:
        names = list(dict.fromkeys(names))
    if len(names) > len(FUNCTIONS):
        raise Invalid("out_of_range", f"{len(names)} functions listed; there are only {len(FUNCTIONS)}")
    unknown = [n for n in names if n not in FUNCTIONS]
    if unknown:
        raise Invalid("unknown_function", f"unknown functions {[u[:40] for u in unknown]}")
    if len(set(names)) != len(names):
        raise Invalid("duplicate_function", f"functions {names} list one twice")
    missing = sorted({OPERATOR_FUNCTION[n[0]] for n in walk(tree) if n[0] != "num"} - set(names))
    if missing and not complete_functions:
        raise Invalid("missing_function", f"the expression needs {missing}, which are not listed")
    names += missing if complete_functions else []
    stated = fields.get("answer")
    stated_value = int(stated) if stated is not None and re.fullmatch(r"-?[0-9]{1,12}", stated) else None
    return {"expression": render_expression(tree), "tree": tree, "functions": names,
            "stated_answer": stated, "stated_value": stated_value, "completed": len(missing)}


def write_generation(expression: str, functions: Sequence[str]) -> str:
    """A task in the format the simulator is asked for."""
    return f"question: {expression}\nfunctions: {', '.join(functions)}"


def function_docs(names: Sequence[str]) -> list[dict[str, Any]]:
    """Tool schemas (listed in the agent's system turn) of the named functions."""
    return [{"type": "function", "function": {
        "name": n, "description": FUNCTIONS[n],
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}} for n in names]


def _make_task(task_id: str, expression: str, tree: tuple, functions: Sequence[str], *, parent: str | None,
               difficulty: str | None, metadata: dict[str, Any], levels: Sequence[Level] = LEVELS) -> Task:
    feats = measure(tree, functions)
    level = level_of(feats, levels)
    if level is None:
        raise Invalid("out_of_range", f"beyond level {len(levels)}: {dataclasses.asdict(feats)}")
    return Task(domain=DOMAIN_NAME, task_id=task_id, category=f"level_{level}",
                prompt={"question": f"Compute {expression}.", "expression": expression, "functions": list(functions)},
                verifier={"call": expected_call(tree), "value": evaluate(tree)},
                parent_id=parent, difficulty=difficulty,
                metadata={**metadata, "level": level, **dataclasses.asdict(feats)})


# ----------------------------------------------------------------------------------------------
# Seeds
# ----------------------------------------------------------------------------------------------
def _random_tree(rng: random.Random, ops: int, digits: int) -> tuple:
    def number():
        d = rng.randint(1, digits)
        return ("num", rng.randint(0 if d == 1 else 10 ** (d - 1), 10 ** d - 1))

    nodes = [number() for _ in range(ops + 1)]
    while len(nodes) > 1:  # combine two random neighbours: a random tree shape with operands in order
        i = rng.randrange(len(nodes) - 1)
        nodes[i:i + 2] = [(rng.choice("+-*"), nodes[i], nodes[i + 1])]
    return nodes[0]


def _random_task_text(rng: random.Random, level: Level, levels: Sequence[Level] = LEVELS
                      ) -> tuple[str, tuple, list[str]]:
    """A task measured at exactly `level` (rejection sampling within its caps)."""
    while True:
        tree = _random_tree(rng, rng.randint(1, level.max_ops), rng.randint(1, level.max_digits))
        used = sorted({OPERATOR_FUNCTION[n[0]] for n in walk(tree) if n[0] != "num"})
        others = [f for f in FUNCTIONS if f not in used]
        functions = used + rng.sample(others, rng.randint(0, min(level.max_distractors, len(others))))
        rng.shuffle(functions)
        if level_of(measure(tree, functions), levels) == level.number:
            return render_expression(tree), tree, functions


class CalcDomain(Domain):
    """Tool-call arithmetic at `num_levels` difficulty levels; see the module docstring.

    Args:
      per_level: seeds per level and split, {"train": n, "validation": n, "test": n}.
      seed: the generator seed of the seed set (the sets are a pure function of it).
      prompt_style: "tools": the functions as tool schemas in the system turn (Qwen's tool format);
        "compact": one line `Functions: add, mul, ...` under the question and a one-line system
        turn (~45 prompt tokens with the study tokenizer instead of ~350: for miniature models).
      complete_functions: the simulator's `functions:` line only adds distractors; the functions
        its expression needs are added when missing (`read_generation`). For small simulators,
        which write valid expressions long before consistent function lists.
      num_levels: 6 (LEVELS, the default: the seed sets of earlier runs) or 7 (also EXTRA_LEVELS'
        six-operation level, for agents that solve a fifth of level 6). Seeds differ between the two
        (one random stream draws every split's levels in turn).
    """

    name = DOMAIN_NAME
    rejection_reasons = REJECTION_REASONS

    def __init__(self, per_level: dict[str, int] | None = None, seed: int = 13, prompt_style: str = "tools",
                 complete_functions: bool = False, num_levels: int = NUM_LEVELS):
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style={prompt_style!r}: expected one of {PROMPT_STYLES}")
        if not isinstance(num_levels, int) or isinstance(num_levels, bool) or not 2 <= num_levels <= len(ALL_LEVELS):
            raise ValueError(f"num_levels={num_levels!r}: expected an integer from 2 to {len(ALL_LEVELS)}")
        self.levels = ALL_LEVELS[:num_levels]
        self.prompt_style = prompt_style
        self.complete_functions = complete_functions
        self.per_level = dict(per_level or {"train": 40, "validation": 8, "test": 16})
        unknown = sorted(set(self.per_level) - set(SPLITS))
        if unknown:
            raise ValueError(f"per_level: unknown splits {unknown}; expected {SPLITS}")
        self.seed = seed

    def load_seeds(self) -> list[Task]:
        """Every seed, split by split and level by level; no expression appears twice."""
        rng = random.Random(f"calc-seeds-{self.seed}")
        seen: set[str] = set()
        tasks = []
        for split in SPLITS:
            for level in self.levels:
                made = 0
                while made < self.per_level.get(split, 0):
                    expression, tree, functions = _random_task_text(rng, level, self.levels)
                    if expression in seen:
                        continue
                    seen.add(expression)
                    tasks.append(_make_task(f"calc/{split}/L{level.number}/{made:03d}", expression, tree,
                                            functions, parent=None, difficulty=None,
                                            metadata={"source": "calc_seed", "split": split}, levels=self.levels))
                    made += 1
        return tasks

    # ------------------------------------------------------------------ agent side
    def agent_prompt(self, task: Task) -> ChatPrompt:
        if self.prompt_style == "instruct":
            listed = ", ".join(f"{n}(a, b)" for n in task.prompt["functions"])  # each named for what it does
            return ChatPrompt(messages=[{"role": "system", "content": f"{INSTRUCT_AGENT_SYSTEM}\nFunctions: {listed}"},
                                        {"role": "user", "content": task.prompt["question"]}])
        if self.prompt_style == "compact":
            listed = ", ".join(task.prompt["functions"])
            return ChatPrompt(messages=[{"role": "system", "content": COMPACT_SYSTEM},
                                        {"role": "user", "content": f"{task.prompt['question']}\nFunctions: {listed}"}])
        return ChatPrompt(messages=[{"role": "user", "content": task.prompt["question"]}],
                          tools=function_docs(task.prompt["functions"]))

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """1.0 iff the response holds exactly one well-formed call equal to the expected call
        (same name; arguments exactly {"a", "b"}, both JSON integers with the right values)."""
        parsed = parse_tool_calls(response)
        expected = task.verifier["call"]
        details: dict[str, Any] = {"calls": [c.to_json() for c in parsed.calls], "expected": expected}
        if parsed.errors:
            details["error_type"] = f"parse_error:{parsed.errors[0].reason}"
        elif not parsed.calls:
            details["error_type"] = "no_call"
        elif len(parsed.calls) > 1:
            details["error_type"] = "multiple_calls"
        elif parsed.calls[0].name != expected["name"]:
            details["error_type"] = "wrong_function"
        elif not _same_arguments(parsed.calls[0].arguments, expected["arguments"]):
            details["error_type"] = "wrong_arguments"
        else:
            details["error_type"] = None
        return ScoreResult(float(details["error_type"] is None), details)

    def reference_response(self, task: Task) -> str:
        return render_tool_call(task.verifier["call"])

    # ------------------------------------------------------------------ simulator side
    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        check_difficulty(difficulty)
        level = seed.metadata.get("level", 1)
        if recent_success:
            rate = sum(recent_success) / len(recent_success)
            success = f"The agent solves tasks like this {rate:.0%} of the time; the target is {alpha:.0%}."
        else:
            success = f"The agent's success rate is not measured yet; the target is {alpha:.0%}."
        target = {"harder": min(level + 1, len(self.levels)), "easier": max(level - 1, 1), "similar": level}[difficulty]
        if self.prompt_style == "instruct":
            return self._instruct_simulator_prompt(seed, recent_success, difficulty, alpha, level, target)
        if self.prompt_style == "compact":  # no format help (learned in warm-start); alpha acts via `difficulty`
            rate = f"{sum(recent_success) / len(recent_success):.0%}" if recent_success else "unknown"
            return ChatPrompt(messages=[{"role": "system", "content": "Write one task."},
                                        {"role": "user", "content": "\n".join([
                f"Seed, level {level}:", write_generation(seed.prompt["expression"], seed.prompt["functions"]),
                f"Success {rate}. Write a {difficulty.upper()} task, level {target}."])}])
        user = "\n".join([
            f"Seed task (level {level} of {len(self.levels)}):",
            write_generation(seed.prompt["expression"], seed.prompt["functions"]),
            success,
            f"Write a {difficulty.upper()} task: level {target}. Level caps (operations, digits, distractors): "
            + "; ".join(f"L{lv.number} {lv.max_ops},{lv.max_digits},{lv.max_distractors}" for lv in self.levels) + ".",
            "Use integers and + - * ( ). List the functions the expression needs (+ add, - sub, * mul) and "
            f"any distractors from: {', '.join(FUNCTIONS)}.",
            "Reply with exactly two lines: 'question: <expression>' and 'functions: <names>'.",
        ])
        return ChatPrompt(messages=[{"role": "user", "content": user}])

    def _instruct_simulator_prompt(self, seed: Task, recent_success: Sequence[float] | None, difficulty: str,
                                   alpha: float, level: int, target: int) -> ChatPrompt:
        """The "instruct" style's simulator prompt: the format, the level caps, the seed as an example,
        what the agent did on it (unless `recent_success` is None: nothing of the agent), and the level
        asked for."""
        caps = "\n".join(f"level {lv.number}: at most {lv.max_ops} operation{'s' * (lv.max_ops > 1)}, numbers of at "
                         f"most {lv.max_digits} digit{'s' * (lv.max_digits > 1)}, at most {lv.max_distractors} extra "
                         "function" + "s" * (lv.max_distractors != 1) for lv in self.levels)
        extras = ", ".join(n for n in FUNCTIONS if n not in OPERATOR_FUNCTION.values())
        lines = [
            "Write one new arithmetic task for the agent, in exactly this format:",
            "question: <an expression of non-negative integers with +, -, * and parentheses only>",
            f"functions: <comma-separated names from: {', '.join(FUNCTIONS)}>",
            "List every function the expression needs (add for +, sub for -, mul for *), then any extra ones "
            f"({extras}) as distractors: they are listed, never used in the question. The question has only "
            "whole numbers, +, -, * and parentheses: no /, ^, %, sqrt, decimals, negative numbers or words.",
            "", "Levels:", caps, "", "Examples of the format:", *INSTRUCT_FORMAT_EXAMPLES, "",
            f"The seed task, level {level}:", write_generation(seed.prompt["expression"], seed.prompt["functions"]), ""]
        if recent_success is not None:
            lines.append(curriculum_line(recent_success, alpha, difficulty))
        wanted = {"similar": "a different task of the same level", "harder": "a HARDER task",
                  "easier": "an EASIER task"}[difficulty]
        lines.append(f"Write {wanted}: level {target}. Use other numbers than the seed. Reply with the two "
                     "lines only.")
        return ChatPrompt(messages=[{"role": "system", "content": INSTRUCT_SIMULATOR_SYSTEM},
                                    {"role": "user", "content": "\n".join(lines)}])

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """Reads the two-line task; recomputes its answer and level. A stated answer is ignored."""
        try:
            g = read_generation(text, self.complete_functions)
            if g["expression"] == seed.prompt.get("expression"):
                raise Invalid("copy_of_seed", "the expression repeats the seed's")
            digest = hashlib.sha256(write_generation(g["expression"], g["functions"]).encode()).hexdigest()[:12]
            meta: dict[str, Any] = {"source": "simulator", "seed_level": seed.metadata.get("level"),
                                    "functions_completed": g["completed"]}
            if g["stated_answer"] is not None:
                meta["stated_answer_ok"] = g["stated_value"] == evaluate(g["tree"])
            return _make_task(f"{seed.task_id}~{digest}", g["expression"], g["tree"], g["functions"],
                              parent=seed.task_id, difficulty=difficulty, metadata=meta, levels=self.levels)
        except Invalid as e:
            return self.reject(e, seed, text)

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """A sibling of the seed's split and level, written in the simulator's format."""
        def fits(t: Task) -> bool:
            return t.category == seed.category and t.prompt["expression"] != seed.prompt["expression"]

        if sibling is None or not fits(sibling):
            sibling = next_sibling(self, seed, fits)
        return write_generation(sibling.prompt["expression"], sibling.prompt["functions"])


def _same_arguments(got: Any, want: dict[str, int]) -> bool:
    return (isinstance(got, dict) and set(got) == set(want)
            and all(type(got[k]) is int and got[k] == v for k, v in want.items()))
