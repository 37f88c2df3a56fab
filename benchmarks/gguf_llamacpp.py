"""A trained run's policy exported to GGUF, decoded by llama.cpp itself and by us: equal greedy tokens?

The script reads the policy once (`load_run_policy`, as the export command does) and for each GGUF
type (F32, F16, Q8_0) exports it as that command's `--format=gguf --gguf_type=T` does, takes the agent prompts of a few
test tasks of the run's own domain (one per category, seeded), and greedy-decodes `--max_new_tokens`
after each prompt twice:

- ours: our sampler on the params our loader reads back from the exported file;
- llama.cpp: node-llama-cpp's prebuilt CPU binary (`make llamacpp`; export/llamacpp.py) on the
  same file and the same prompt ids, with an F32 KV cache (as ours) and with llama.cpp's default
  F16 one.

Where the tokens differ it reports the first differing position and our own top-2 logit margin
there (a near-tie that the other side's rounding can flip). Q8_0 is expected to differ: llama.cpp
rounds the activations to 8 bits for its Q8_0 dot products; we dequantise the weights and compute
in float32.

    python benchmarks/gguf_llamacpp.py --run_dir RUN --out OUT [--policy agent] [--epoch N]
        [--prompts 4] [--max_new_tokens 32] [--types f32,f16,q8_0]

OUT gets llamacpp.json and llamacpp.md; the exported files go to OUT/<policy>-<type>/ (delete them
after: an F32 export of a 0.5B model is 2 GB).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from genenv_jax.evaluation import select_tasks
from genenv_jax.evaluation.cli import build_domain, run_domain
from genenv_jax.evaluation.evaluate import make_generate_fn
from genenv_jax.evaluation.run_policy import RunPolicy, load_run_policy
from genenv_jax.export import llamacpp
from genenv_jax.export.cli import staged_export
from genenv_jax.export.policy_formats import export_policy
from genenv_jax.models import load_gguf
from genenv_jax.text.chat_text import ChatText


def prompt_ids(run_dir: str, policy: RunPolicy, n: int) -> tuple[list[str], list[list[int]]]:
    """(task ids, prompt token ids) of `n` test tasks of the run's domain, rendered with its tokenizer."""
    name, options = run_domain(run_dir, policy.epoch)
    domain = build_domain(name, [], options)
    tasks = select_tasks(domain.seeds("test"), 1, None, 0)
    tasks = tasks[::max(1, len(tasks) // n)][:n]
    text = ChatText.load(policy.tokenizer_source)
    return [t.task_id for t in tasks], [list(text.prompt(domain.agent_prompt(t))) for t in tasks]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run_dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--policy", default="agent", choices=("agent", "simulator"))
    p.add_argument("--epoch", type=int, default=None)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max_new_tokens", type=int, default=32)
    p.add_argument("--types", default="f32,f16,q8_0")
    args = p.parse_args(argv)
    reason = llamacpp.unavailable_reason()
    if reason:
        raise SystemExit(reason)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policy = load_run_policy(args.run_dir, args.policy, args.epoch)
    task_ids, prompts = prompt_ids(args.run_dir, policy, args.prompts)
    report = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
              "command": " ".join(["python", "benchmarks/gguf_llamacpp.py", *(argv or sys.argv[1:])]),
              "llama_cpp": llamacpp.installed_version(), "tasks": task_ids,
              "prompt_tokens": [len(x) for x in prompts], "max_new_tokens": args.max_new_tokens, "types": {}}
    for gguf_type in args.types.split(","):
        target = out / f"{args.policy}-{gguf_type}"
        if not (target / "model.gguf").is_file():
            staged_export(str(target), lambda staging, t=gguf_type: {"run_dir": args.run_dir, "what": "policy",
                                                                      **export_policy(policy, "gguf", staging, t)})
        cfg, params = load_gguf(target / "model.gguf")
        t0 = time.time()
        ours = make_generate_fn(cfg, params, [], 0, len(prompts))(prompts, args.max_new_tokens)
        row = {"ours_seconds": time.time() - t0, "file_bytes": (target / "model.gguf").stat().st_size}
        for kv_type in llamacpp.KV_TYPES:
            t0 = time.time()
            theirs = llamacpp.greedy(target / "model.gguf", prompts, args.max_new_tokens, kv_type=kv_type)
            per_prompt = []
            for prompt, a, b in zip(prompts, ours, theirs):
                at = llamacpp.first_difference(a, b)
                per_prompt.append({"equal": at is None, "first_difference": at,
                                   "our_margin_there": None if at is None else llamacpp.second_choice(cfg, params, prompt, a[:at])[1]})
            row[f"kv_{kv_type.lower()}"] = {"equal_prompts": sum(x["equal"] for x in per_prompt),
                                            "per_prompt": per_prompt, "seconds": time.time() - t0}
        report["types"][gguf_type] = row
        del params, ours  # one type's params at a time (an F32 0.5B holds 2 GB)
        print(gguf_type, json.dumps({k: v["equal_prompts"] for k, v in row.items() if k.startswith("kv_")}), flush=True)
    (out / "llamacpp.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [f"{report['llama_cpp']}; {len(prompts)} prompts of {report['prompt_tokens']} tokens "
             f"({', '.join(task_ids)}), {args.max_new_tokens} greedy tokens each", "",
             "| GGUF type | file | llama.cpp, F32 KV cache: prompts equal to ours | first differences (our top-2 margin) "
             "| llama.cpp, F16 KV cache (its default): equal | first differences (our top-2 margin) |",
             "|---|---:|---:|---|---:|---|"]
    for gguf_type, row in report["types"].items():
        cells = [gguf_type.upper(), f"{row['file_bytes'] / 2**20:.0f} MiB"]
        for kv in ("kv_f32", "kv_f16"):
            diffs = [f"{x['first_difference']} ({x['our_margin_there']:.3g})" for x in row[kv]["per_prompt"]
                     if not x["equal"]]
            cells += [f"{row[kv]['equal_prompts']} of {len(prompts)}", ", ".join(diffs) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    (out / "llamacpp.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
