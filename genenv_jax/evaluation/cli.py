"""The evaluation command: `python -m genenv_jax.evaluation` (argparse; `--help` lists the flags).

    python -m genenv_jax.evaluation --model_dir=/ckpt/qwen2.5-7b-instruct --split=test --out=/tmp/eval
    python -m genenv_jax.evaluation --preset=tiny --max_per_category=2 --max_new_tokens=16 --out=/tmp/eval
    python -m genenv_jax.evaluation --run_dir=RUN --out=OUT     # a run's agent on the run's own domain
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Mapping, Sequence

import jax

from genenv_jax.workdir import storage
from genenv_jax.text.chat_text import ChatText
from genenv_jax.evaluation.evaluate import (evaluate_params, format_markdown, load_run_agent, select_tasks,
                                            write_report)
from genenv_jax.parallel import initialize_distributed, is_writer

def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m genenv_jax.evaluation", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model_dir", help="an HF Qwen2 directory, .gguf file, model name or hub id (docs/models.md)")
    src.add_argument("--preset", help="random-init model preset for smoke runs (e.g. 'tiny')")
    src.add_argument("--run_dir", help="a GenEnv run's workdir: evaluate its checkpointed agent")
    p.add_argument("--epoch", type=int, default=None, help="with --run_dir: which epoch (default: the latest)")
    p.add_argument("--adapter_dir", default=None,
                   help="with --model_dir: a PEFT LoRA adapter directory, evaluated merged into that base")
    p.add_argument("--tokenizer_dir", default=None, help="default: --model_dir's own tokenizer, else the bundled one")
    p.add_argument("--domain", default=None, help="a registered domain (default: the run's with --run_dir, else bfcl)")
    p.add_argument("--domain_option", action="append", default=[], metavar="KEY=VALUE",
                   help="a domain option, repeatable (e.g. data_dir=/data/api-bank); VALUE as JSON when it parses, "
                        "else text. With --run_dir the run's own domain options are the defaults")
    p.add_argument("--split", default="test", help="train | validation | test | all")
    p.add_argument("--categories", default=None, help="comma-separated subset of categories")
    p.add_argument("--max_per_category", type=int, default=None)
    p.add_argument("--sample_seed", type=int, default=None, help="with --max_per_category: a seeded sample")
    p.add_argument("--max_new_tokens", type=int, default=256)
    p.add_argument("--max_prompt_tokens", type=int, default=None)
    p.add_argument("--max_turns", type=int, default=8, help="agent turns per episode (BFCL uses one)")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--dtype", default=None, help="param dtype for --model_dir (default: the checkpoint's)")
    p.add_argument("--seed", type=int, default=0, help="init seed for --preset")
    p.add_argument("--out", required=True, help="output directory for results.json / results.md / items.jsonl")
    p.add_argument("--no_progress", action="store_true")
    p.add_argument("--coordinator_address", default=None,
                   help="multi-process runs JAX cannot detect: process 0's host:port (with the next two)")
    p.add_argument("--num_processes", type=int, default=None)
    p.add_argument("--process_id", type=int, default=None)
    return p.parse_args(argv)


def merged_peft_adapters(cfg, params, adapter_dir: str):
    """`params` with a PEFT LoRA directory's adapters folded in (`models.peft_io`); a directory
    that is not one for this base exits with its one-line reason."""
    from genenv_jax.models import lora
    from genenv_jax.models.peft_io import load_peft_adapters

    try:
        settings, adapters = load_peft_adapters(adapter_dir, cfg)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"error: --adapter_dir: {err}") from None
    return lora.merge(params, adapters, settings.scale)


def domain_options(pairs: Sequence[str], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`--domain_option KEY=VALUE` pairs over `defaults`: VALUE as JSON when it parses, else as text."""
    options = dict(defaults or {})
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--domain_option {pair!r}: expected KEY=VALUE")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def _run_domain(run_dir: str, epoch: int | None) -> tuple[str, dict[str, Any]]:
    """The domain name and options a run was trained with (from its checkpoint's config snapshot)."""
    from genenv_jax.workdir.checkpoints import Checkpointer

    ckpt = Checkpointer(storage.as_path(run_dir) / "checkpoints", async_save=False)
    try:
        epoch = ckpt.latest_epoch() if epoch is None else epoch
        domain = ckpt.metadata(epoch)["config"].get("domain", {}) if epoch is not None else {}
    finally:
        ckpt.close()
    return domain.get("name", "bfcl"), dict(domain.get("options") or {})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.adapter_dir and not args.model_dir:
        raise SystemExit("error: --adapter_dir needs --model_dir (the base the adapters apply to)")
    initialize_distributed(args.coordinator_address, args.num_processes, args.process_id)
    from genenv_jax.domains import get_domain
    from genenv_jax.data.model_sources import ModelSourceError, resolve_model_source
    from genenv_jax.models import init_params, preset
    from genenv_jax.models.loading import has_own_tokenizer, load_model

    t0 = time.time()
    if args.run_dir:
        cfg, params, epoch = load_run_agent(args.run_dir, args.epoch)
        source = {"run_dir": storage.absolute(args.run_dir), "epoch": epoch}
    elif args.model_dir:
        try:
            model_path = resolve_model_source(args.model_dir).path
        except ModelSourceError as err:
            raise SystemExit(f"error: --model_dir: {err}") from None
        cfg, params = load_model(model_path, dtype=args.dtype)
        source = {"model_dir": model_path}
        if args.adapter_dir:
            params = merged_peft_adapters(cfg, params, args.adapter_dir)
            source["adapter_dir"] = storage.absolute(args.adapter_dir)
    else:
        cfg = preset(args.preset)
        params = init_params(cfg, jax.random.key(args.seed))
        source = {"preset": args.preset, "seed": args.seed}
    tok_dir = args.tokenizer_dir
    if tok_dir is None and args.model_dir and has_own_tokenizer(model_path):
        tok_dir = model_path
    tokenizer = ChatText.load(tok_dir).tokenizer
    run_domain, run_options = _run_domain(args.run_dir, args.epoch) if args.run_dir else ("bfcl", {})
    name = args.domain or run_domain
    domain = get_domain(name, **domain_options(args.domain_option, run_options if name == run_domain else None))
    categories = args.categories.split(",") if args.categories else None
    tasks = select_tasks(domain.seeds(args.split), args.max_per_category, categories, args.sample_seed)
    if not tasks:
        raise SystemExit(f"no tasks selected (split={args.split}, categories={categories})")
    report = evaluate_params(
        cfg, params, domain, tasks, tokenizer, max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size, max_prompt_tokens=args.max_prompt_tokens, max_turns=args.max_turns,
        progress=not args.no_progress,
        config=dict(source, split=args.split, max_per_category=args.max_per_category, sample_seed=args.sample_seed,
                    tokenizer=tok_dir or "bundled-qwen2.5"))
    if not is_writer():  # process 0 writes the report
        return 0
    paths = write_report(report, args.out)
    print(format_markdown(report))
    print(f"wrote {', '.join(str(p) for p in paths.values())} in {time.time() - t0:.1f}s")
    return 0
