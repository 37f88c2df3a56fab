"""Our BFCL evaluation runs in both modes next to the published figures of the nearest model.

Reads an evaluation run per BFCL mode, of the same model and sample (either or both:
`python -m genenv_jax.evaluation ... --domain_option mode=fc|prompting --out RUN`), checks that
each ran in the mode it is given as (the `domain_options` the report records) and that both scored
the same items, and writes:

- per category and mode: our accuracy with its 95% Wilson interval, the published figure where
  one exists, and what the failures were (BFCL's own error types, counted);
- how the model wrote its replies in each mode (a `<tool_call>` block, a `[f(a=v)]` list, JSON
  calls outside `<tool_call>`, prose), which is where a small model's score is won or lost;
- BFCL's non-live AST summary over the categories we ran (BFCL's own is the unweighted mean of
  simple, multiple, parallel and parallel-multiple, its simple being the mean of the Python, Java
  and JavaScript simple categories; `simple` here is Python only, and the table says so).

    python benchmarks/bfcl_published.py --fc RUN-fc --prompting RUN-prompting --out OUT
    python benchmarks/bfcl_published.py --prompting RUN-prompting --out OUT     # one mode

OUT gets `table.json` and `table.md`. The published figures are BFCL v3's for Qwen2.5-0.5B-Instruct
(bf16, the FC handler of gorilla 7dfa6747 and the prompting handler of its time).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

from genenv_jax.study.details import Proportion

# BFCL v3 leaderboard, Qwen2.5-0.5B-Instruct (FC) and Qwen2.5-0.5B-Instruct (Prompt): AST accuracy
# in percent. BFCL publishes no per-category irrelevance figure beside these in the source we compare
# with, so none is given for it.
PUBLISHED = {
    "fc": {"simple": 61.2, "multiple": 78.0, "parallel": 60.0, "parallel_multiple": 50.0, "overall": 27.1},
    "prompting": {"simple": 58.2, "multiple": 68.0, "parallel": 53.5, "parallel_multiple": 33.0, "overall": 21.0},
}
MODES = ("fc", "prompting")
AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
PUBLISHED_NAME = {"simple_python": "simple", "multiple": "multiple", "parallel": "parallel",
                  "parallel_multiple": "parallel_multiple"}
TOOL_CALL = re.compile(r"<tool_call>")
PYTHON_LIST = re.compile(r"^\s*\[\s*[A-Za-z_][\w.]*\s*\(", re.S)
FENCE = re.compile(r"```[\w-]*")  # a code fence and its language tag
JSON_OBJECT = re.compile(r"\{\s*\"name\"\s*:", re.S)


def reply_shape(text: str) -> str:
    """How a reply is written: `tool_call` (a `<tool_call>` tag), `python_list` (`[f(a=v)...`),
    `json_call` (a `{"name": ...}` object outside tags, fenced or bare) or `prose`."""
    if TOOL_CALL.search(text):
        return "tool_call"
    body = FENCE.sub("", text.split("</think>")[-1])
    if PYTHON_LIST.match(body):
        return "python_list"
    if JSON_OBJECT.search(text):
        return "json_call"
    return "prose"


def read_run(run: Path, mode: str) -> tuple[dict, list[dict]]:
    report = json.loads((run / "results.json").read_text(encoding="utf-8"))
    options = report["config"].get("domain_options")
    if options is None:
        raise SystemExit(f"{run}: the report records no domain options, so its mode is unknown; rerun it "
                         "with a genenv_jax that records them")
    if options.get("mode") != mode:
        raise SystemExit(f"{run}: ran in mode {options.get('mode')!r}, given as --{mode}")
    items = [json.loads(line) for line in (run / "items.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return report, items


def mode_table(items: list[dict]) -> dict:
    """{category: n, correct, accuracy, ci95, errors (error type -> count), shapes (reply shape -> count)}."""
    rows: dict = collections.OrderedDict()
    for it in items:
        row = rows.setdefault(it["category"], {"n": 0, "correct": 0.0, "errors": collections.Counter(),
                                               "shapes": collections.Counter(), "capped": 0})
        row["n"] += 1
        row["correct"] += it["reward"]
        if it["reward"] < 1.0:
            row["errors"][it.get("error_type") or "unknown"] += 1
        row["shapes"][reply_shape(it["response"])] += 1
    for row in rows.values():
        row["accuracy"] = row["correct"] / row["n"]
        row["ci95"] = list(Proportion(row["correct"], row["n"]).interval())
        row["errors"] = dict(row["errors"].most_common())
        row["shapes"] = dict(row["shapes"].most_common())
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fc", help="the evaluation run in mode fc")
    p.add_argument("--prompting", help="the evaluation run in mode prompting")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    modes = [mode for mode in MODES if getattr(args, mode)]
    if not modes:
        p.error("give --fc, --prompting or both")
    runs = {mode: read_run(Path(getattr(args, mode)), mode) for mode in modes}
    ids = {mode: [it["task_id"] for it in items] for mode, (_, items) in runs.items()}
    if len(modes) == 2 and ids["fc"] != ids["prompting"]:
        raise SystemExit("the two runs scored different items; give runs of the same --categories, "
                         "--max_per_category and --sample_seed")
    tables = {mode: mode_table(items) for mode, (_, items) in runs.items()}
    summary = {}
    for mode in modes:
        ast = [tables[mode][c]["accuracy"] for c in AST_CATEGORIES if c in tables[mode]]
        summary[mode] = {"non_live_ast_mean": sum(ast) / len(ast) if len(ast) == len(AST_CATEGORIES) else None,
                         "prompt_format": runs[mode][0]["config"]["domain_options"].get("prompt_format"),
                         "decoding": runs[mode][0]["config"]["domain_options"].get("decoding"),
                         "model_dir": runs[mode][0]["config"].get("model_dir")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", "benchmarks/bfcl_published.py",
                                                                       *(argv if argv is not None else sys.argv[1:])]),
              "published": PUBLISHED, "tables": tables, "summary": summary}
    (out / "table.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    label = {"fc": "FC", "prompting": "prompting"}
    first = tables[modes[0]]
    lines = ["| category | n | " + " | ".join(f"ours, {label[m]} | 95% CI | published, {label[m]}" for m in modes) + " |",
             "|---|---:|" + "---:|---|---:|" * len(modes)]
    for category in first:
        cells = [category, str(first[category]["n"])]
        for mode in modes:
            row = tables[mode][category]
            published = PUBLISHED[mode].get(PUBLISHED_NAME.get(category, ""), None)
            cells += [f"{100 * row['accuracy']:.1f}", f"{100 * row['ci95'][0]:.1f} - {100 * row['ci95'][1]:.1f}",
                      "-" if published is None else f"{published:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    if all(summary[m]["non_live_ast_mean"] is not None for m in modes):
        cells = ["non-live AST, mean of the four", ""]
        for mode in modes:
            published = sum(PUBLISHED[mode][PUBLISHED_NAME[c]] for c in AST_CATEGORIES) / len(AST_CATEGORIES)
            cells += [f"{100 * summary[mode]['non_live_ast_mean']:.1f}", "", f"{published:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| category | mode | reply shapes | failures (BFCL error type: count) |", "|---|---|---|---|"]
    for category in first:
        for mode in modes:
            row = tables[mode][category]
            shapes = ", ".join(f"{k} {v}" for k, v in row["shapes"].items())
            errors = ", ".join(f"{k} {v}" for k, v in row["errors"].items()) or "-"
            lines.append(f"| {category} | {mode} | {shapes} | {errors} |")
    (out / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
