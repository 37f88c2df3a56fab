"""A BFCL evaluation run of ours, checked against HF transformers on the identical prompt token ids.

Reads an evaluation run's output (`python -m genenv_jax.evaluation ... --out RUN`), rebuilds its
task selection and every item's prompt ids exactly as the evaluator built them, decodes each with
HF transformers greedy (float32, left-padded batches sorted by length, the same stop tokens and
token cap), scores HF's text with the same official checker, and reports:

- per-category accuracy of ours with 95% Wilson intervals, and HF's;
- per-item agreement of the verdicts (and of the exact response text);
- for every item where the texts differ: the first differing token and both models' top-2 logits
  there (a near-tie between two tokens explains a greedy divergence);
- how often the model answered in another format than `<tool_call>` blocks (JSON calls in a
  fenced block or as the whole reply), and, as a separately labelled diagnostic that is never the
  score, what the checker would say if those calls were read as calls.

    python benchmarks/bfcl_hf_agreement.py --run RUN --model_dir DIR --out OUT [--batch_size 16]
    python benchmarks/bfcl_hf_agreement.py --run RUN --out OUT --no_hf      # the table only
    python benchmarks/bfcl_hf_agreement.py --run RUN --out OUT --reuse_hf   # again, from OUT/hf_items.jsonl

The prompts are rebuilt with the domain options the run recorded (`config.domain_options`: mode,
prompt_format, decoding); a run from before they were recorded names them with `--domain_option`.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

from genenv_jax.text import tokenization
from genenv_jax.text.chat_text import ChatText
from genenv_jax.domains import get_domain
from genenv_jax.evaluation import domain_options, select_tasks
from genenv_jax.core.json_text import JSONTextError, load_json_text

FENCED = re.compile(r"```(?:json|python|tool_call)?\s*\n(.*?)\n?```", re.S)


def wilson(correct: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 0.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def json_calls(text: str) -> list[dict] | None:
    """Calls written as JSON outside `<tool_call>` tags — fenced blocks, or the whole reply being
    one JSON value — of `{"name", "arguments"}` objects (or lists of them); None if there are none."""
    if tokenization.TOOL_CALL_OPEN in text:
        return None
    calls = []
    for body in FENCED.findall(text) or [text.strip()]:
        try:
            value = load_json_text(body.strip())
        except JSONTextError:
            continue
        for obj in value if isinstance(value, list) else [value]:
            if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(
                    obj.get("arguments", obj.get("parameters", {})), dict):
                calls.append({"name": obj["name"], "arguments": obj.get("arguments", obj.get("parameters", {}))})
    return calls or None


def _items(run: Path) -> tuple[dict, list[dict]]:
    config = json.loads((run / "results.json").read_text())["config"]
    items = [json.loads(line) for line in (run / "items.jsonl").read_text().splitlines() if line.strip()]
    return config, items


def _domain(config: dict, pairs: list[str]):
    """The bfcl domain as the run evaluated it: its recorded `domain_options` (every option,
    defaults resolved), else the `--domain_option` flags over today's defaults."""
    recorded = config.get("domain_options")
    if recorded is not None and pairs:
        raise SystemExit("--domain_option: the run records its domain options; they are used as recorded")
    return get_domain("bfcl", **(recorded if recorded is not None else domain_options(pairs)))


def _tasks(config: dict, items: list[dict], domain):
    categories = list(dict.fromkeys(it["category"] for it in items))
    tasks = select_tasks(domain.seeds(config["split"]), config.get("max_per_category"), categories,
                         config.get("sample_seed"))
    if [t.task_id for t in tasks] != [it["task_id"] for it in items]:
        raise SystemExit(f"the rebuilt task selection does not match {len(items)} items of the run")
    return tasks


def _hf_batch(model, prompts: list[list[int]], cap: int, stops: tuple[int, ...], pad_id: int) -> list[list[int]]:
    """One left-padded HF greedy batch: each row's tokens up to (not including) its first stop token,
    or all `cap` tokens when it did not stop."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    with torch.no_grad():
        gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=cap, do_sample=False,
                             eos_token_id=list(stops), pad_token_id=pad_id, temperature=None, top_p=None, top_k=None)
    rows = []
    for row in range(len(prompts)):
        new = gen[row, width:].tolist()
        rows.append(next((new[:k] + [new[k]] for k, t in enumerate(new) if t in stops), new))
    return rows


def hf_greedy(model_dir: str, prompts: list[list[int]], max_new_tokens: int, stops: tuple[int, ...], pad_id: int,
              batch_size: int, expected: list[int] | None = None) -> tuple[list[list[int]], float]:
    """HF greedy continuations (up to, not including, the first stop token) and the seconds taken.

    `expected`: our run's length of each reply, its stop token included. Batches then group rows of
    similar expected length and decode only to the batch's longest expected length, so a batch does
    not run to the cap for one long row; a row that had not stopped when its batch ended (it runs
    longer than ours) is decoded again alone to the full `max_new_tokens`. The tokens are the same
    as decoding every row to the cap (greedy decoding of a row does not depend on how far the
    others run); only the time changes.
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    expected = expected or [max_new_tokens] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (min(expected[i], max_new_tokens), len(prompts[i])))
    out: dict[int, list[int]] = {}
    start = time.time()
    redo = []
    for b in range(0, len(order), batch_size):
        chunk = order[b:b + batch_size]
        cap = min(max_new_tokens, max(expected[i] for i in chunk))
        for i, row in zip(chunk, _hf_batch(model, [prompts[i] for i in chunk], cap, stops, pad_id)):
            stopped = bool(row) and row[-1] in stops
            if stopped or cap == max_new_tokens:
                out[i] = row[:-1] if stopped else row
            else:
                redo.append(i)
        print(f"  hf: {min(b + batch_size, len(order))}/{len(order)} prompts ({len(redo)} to redo), "
              f"{time.time() - start:.0f}s", flush=True)
    for i in redo:
        row = _hf_batch(model, [prompts[i]], max_new_tokens, stops, pad_id)[0]
        out[i] = row[:-1] if row and row[-1] in stops else row
    return [out[i] for i in range(len(prompts))], time.time() - start


def _divergence(model_dir: str, prompt: list[int], ours: list[int], theirs: list[int]) -> dict:
    """The first differing response token and both models' top-2 logits there."""
    import jax.numpy as jnp
    import torch
    from transformers import AutoModelForCausalLM

    from genenv_jax.models import forward
    from genenv_jax.models.loading import load_model

    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    context = prompt + ours[:k]
    if not hasattr(_divergence, "models"):
        _divergence.models = (load_model(model_dir, dtype="float32"),
                              AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval())
    (cfg, params), hf = _divergence.models
    our_logits = np.asarray(forward(cfg, params, jnp.asarray([context], jnp.int32))[0, -1])
    with torch.no_grad():
        hf_logits = hf(torch.tensor([context])).logits[0, -1].numpy()

    def top2(logits):
        idx = np.argsort(-logits)[:2]
        return [[int(i), float(logits[i])] for i in idx]
    return {"position": k, "ours_token": ours[k] if k < len(ours) else None,
            "hf_token": theirs[k] if k < len(theirs) else None, "ours_top2": top2(our_logits), "hf_top2": top2(hf_logits),
            "ours_margin": float(np.diff(np.sort(our_logits)[-2:])[0]),
            "hf_margin": float(np.diff(np.sort(hf_logits)[-2:])[0])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="an evaluation run's --out directory")
    p.add_argument("--model_dir", help="the HF directory the run evaluated (default: the run's model_dir)")
    p.add_argument("--out", required=True)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--domain_option", action="append", default=[], metavar="KEY=VALUE",
                   help="bfcl options of a run that did not record them (runs before 2026-12-06 ran with "
                        "prompt_format=qwen25_template and decoding=lenient); a recorded run needs none")
    p.add_argument("--no_hf", action="store_true", help="only the table of the run (no HF decoding)")
    p.add_argument("--reuse_hf", action="store_true", help="read OUT/hf_items.jsonl of an earlier run instead of "
                                                           "decoding again")
    args = p.parse_args(argv)
    run, out = Path(args.run), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config, items = _items(run)
    model_dir = args.model_dir or config.get("model_dir")
    domain = _domain(config, args.domain_option)
    tasks = _tasks(config, items, domain)
    text = ChatText.load(model_dir if model_dir and os.path.isdir(model_dir) else None)
    prompts = [text.prompt(domain.agent_prompt(t)) for t in tasks]
    mismatched = [it["task_id"] for it, pr in zip(items, prompts) if it["prompt_tokens"] != len(pr)]
    if mismatched:
        hint = "" if "domain_options" in config else " (the run records no domain options: pass its --domain_option flags)"
        raise SystemExit(f"prompt lengths differ from the run's for {mismatched[:5]}{hint}")
    report: dict = {"run": str(run), "model_dir": model_dir, "n": len(items), "machine": platform.processor() or
                    platform.machine(), "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}
    hf_rows = None
    if args.reuse_hf:
        hf_rows = [json.loads(line) for line in (out / "hf_items.jsonl").read_text().splitlines() if line.strip()]
        report["hf_seconds"] = json.loads((out / "agreement.json").read_text()).get("hf_seconds")
    elif not args.no_hf:
        cap = int(config["max_new_tokens"])
        expected = [min(cap, it["response_tokens"] + 1) for it in items]  # + its stop token, when it stopped
        hf_ids, seconds = hf_greedy(model_dir, prompts, cap, text.stop_ids, text.pad_id, args.batch_size, expected)
        report["hf_seconds"] = seconds
        hf_rows = []
        for task, ids in zip(tasks, hf_ids):
            response = text.decode(ids)
            score = domain.score_details(task, response)
            hf_rows.append({"task_id": task.task_id, "reward": score.reward, "response": response,
                            "error_type": score.details.get("error_type"), "ids": ids})
        with (out / "hf_items.jsonl").open("w", encoding="utf-8") as f:
            for row in hf_rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    per_category: dict = collections.OrderedDict()
    disagreements = []
    for i, (task, it) in enumerate(zip(tasks, items)):
        row = per_category.setdefault(it["category"], collections.Counter())
        row["n"] += 1
        row["ours"] += it["reward"]
        calls = json_calls(it["response"])
        row["fenced"] += calls is not None
        # Diagnostic only: JSON calls read as calls, scored by the same checker (on irrelevance such
        # a call then counts as a call, so this can be lower than the score).
        row["lenient"] += it["reward"] if calls is None else domain.score(task, domain.render_calls(calls))
        if hf_rows is not None:
            hf = hf_rows[i]
            row["hf"] += hf["reward"]
            row["verdict_agree"] += hf["reward"] == it["reward"]
            row["text_agree"] += hf["response"] == it["response"]
            if hf["response"] != it["response"]:
                ours_ids = text.encode(it["response"])
                disagreements.append({"task_id": it["task_id"], "ours_reward": it["reward"], "hf_reward": hf["reward"],
                                      "ours": it["response"][:300], "hf": hf["response"][:300],
                                      **_divergence(model_dir, prompts[i], ours_ids, hf["ids"])})
    table = {}
    for category, row in per_category.items():
        n = row["n"]
        low, high = wilson(row["ours"], n)
        table[category] = {"n": n, "ours": row["ours"] / n, "ours_ci95": [low, high],
                           "json_call_rate": row["fenced"] / n, "lenient_diagnostic": row["lenient"] / n}
        if hf_rows is not None:
            table[category].update(hf=row["hf"] / n, verdict_agreement=row["verdict_agree"] / n,
                                   text_agreement=row["text_agree"] / n)
    report["per_category"] = table
    report["disagreements"] = disagreements
    if hf_rows is not None:
        agree = sum(r["verdict_agree"] for r in per_category.values())
        report["verdict_agreement"] = agree / len(items)
        report["text_agreement"] = sum(r["text_agree"] for r in per_category.values()) / len(items)
    (out / "agreement.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["| category | n | ours | 95% CI | HF | verdicts agree | texts agree | JSON calls outside <tool_call> | "
             "lenient (diagnostic) |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for category, r in table.items():
        ci = f"{r['ours_ci95'][0]:.1%} - {r['ours_ci95'][1]:.1%}"
        hf = (f"{r['hf']:.1%} | {r['verdict_agreement']:.1%} | {r['text_agreement']:.1%}" if hf_rows is not None
              else "- | - | -")
        lines.append(f"| {category} | {r['n']} | {r['ours']:.1%} | {ci} | {hf} | {r['json_call_rate']:.1%} | "
                     f"{r['lenient_diagnostic']:.1%} |")
    for d in disagreements:
        lines.append(f"- {d['task_id']}: ours {d['ours_reward']:g} / HF {d['hf_reward']:g}; first different token at "
                     f"{d['position']}: ours top-2 {d['ours_top2']} (margin {d['ours_margin']:.4f}), HF top-2 "
                     f"{d['hf_top2']} (margin {d['hf_margin']:.4f})")
    (out / "agreement.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
