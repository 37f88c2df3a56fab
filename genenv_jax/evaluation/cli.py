"""The evaluation command: `python -m genenv_jax.evaluation` (argparse; `--help` lists the flags).

    python -m genenv_jax.evaluation --model_dir=/ckpt/qwen2.5-7b-instruct --split=test --out=/tmp/eval
    python -m genenv_jax.evaluation --preset=tiny --max_per_category=2 --max_new_tokens=16 --out=/tmp/eval
    python -m genenv_jax.evaluation --run_dir=RUN --out=OUT     # a run's agent on the run's own domain
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import os
import time
from typing import Any, Mapping, Sequence

import jax

from genenv_jax.core.errors import ArgumentParser, CommandError, check_at_least, check_output_path, command
from genenv_jax.workdir import storage
from genenv_jax.text.chat_text import ChatText
from genenv_jax.evaluation.evaluate import (evaluate_params, format_markdown, select_tasks,
                                            write_report)
from genenv_jax.parallel import (DEFAULT_COORDINATOR_TIMEOUT_S, check_distributed_flags, initialize_distributed,
                                 is_writer)

PROGRAM = "python -m genenv_jax.evaluation"
SPLITS = ("train", "validation", "test", "all")


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ArgumentParser(prog=PROGRAM, description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model_dir", help="an HF Qwen2 directory, .gguf file, model name or hub id (docs/models.md)")
    src.add_argument("--preset", help="random-init model preset for smoke runs (e.g. 'tiny')")
    src.add_argument("--run_dir", help="a GenEnv run's workdir: evaluate its checkpointed agent")
    p.add_argument("--epoch", type=int, default=None, help="with --run_dir: which epoch (default: the latest)")
    p.add_argument("--adapter_dir", default=None,
                   help="with --model_dir: a PEFT LoRA adapter directory, evaluated merged into that base")
    p.add_argument("--tokenizer_dir", default=None,
                   help="default: the run's tokenizer (--run_dir), --model_dir's own, else the bundled one")
    p.add_argument("--domain", default=None, help="a registered domain (default: the run's with --run_dir, else bfcl)")
    p.add_argument("--domain_option", action="append", default=[], metavar="KEY=VALUE",
                   help="a domain option, repeatable (e.g. data_dir=/data/api-bank); VALUE as JSON when it parses, "
                        "else text. With --run_dir the run's own domain options are the defaults")
    p.add_argument("--split", default="test", choices=SPLITS)
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
    p.add_argument("--coordinator_timeout_s", type=float, default=DEFAULT_COORDINATOR_TIMEOUT_S,
                   help="seconds to wait for the coordinator and every process before failing in one line")
    return p.parse_args(argv)


def merged_peft_adapters(cfg, params, adapter_dir: str):
    """`params` with a PEFT LoRA directory's adapters folded in (`models.peft_io`); a directory
    that is not one for this base exits with its one-line reason."""
    from genenv_jax.models import lora
    from genenv_jax.models.peft_io import load_peft_adapters

    try:
        settings, adapters = load_peft_adapters(adapter_dir, cfg)
    except (ValueError, FileNotFoundError) as err:
        raise CommandError(f"--adapter_dir: {err}") from None
    return lora.merge(params, adapters, settings.scale)


def domain_options(pairs: Sequence[str], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`--domain_option KEY=VALUE` pairs over `defaults`: VALUE as JSON when it parses, else as text."""
    options = dict(defaults or {})
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--domain_option {pair!r}: expected KEY=VALUE")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def check_arguments(args: argparse.Namespace) -> None:
    """Refuses, before any model is loaded, what would fail later: flag values out of range, an
    adapter without its base, a run dir without checkpoints (never created by looking), a domain
    that is not registered, and an `--out` that is an input or cannot be written (found only after
    the whole evaluation otherwise)."""
    from genenv_jax.domains import DOMAINS
    from genenv_jax.models import PRESETS

    check_distributed_flags(args.coordinator_address, args.num_processes, args.process_id, args.coordinator_timeout_s)
    if args.adapter_dir and not args.model_dir:
        raise CommandError("--adapter_dir needs --model_dir (the base the adapters apply to)")
    for flag, low in (("max_new_tokens", 1), ("max_turns", 1), ("batch_size", 1), ("max_per_category", 1),
                      ("max_prompt_tokens", 1), ("epoch", 0), ("seed", 0), ("sample_seed", 0)):
        check_at_least(getattr(args, flag), f"--{flag}", low)
    if args.preset and args.preset not in PRESETS:
        raise CommandError(f"--preset {args.preset!r}: not a model preset ({', '.join(sorted(PRESETS))})")
    if args.domain is not None and args.domain not in DOMAINS:
        raise CommandError(f"--domain {args.domain!r}: not a registered domain ({', '.join(sorted(DOMAINS))})")
    if args.run_dir and not storage.exists(storage.as_path(args.run_dir) / "checkpoints"):
        raise CommandError(f"--run_dir {args.run_dir}: no checkpoints/ in it (a GenEnv run's workdir)")
    inputs = {"--model_dir": args.model_dir, "--adapter_dir": args.adapter_dir, "--tokenizer_dir": args.tokenizer_dir,
              **{f"--domain_option {key}": value for key, value in domain_options(args.domain_option).items()
                 if isinstance(value, str) and value and key.endswith(("_dir", "_path", "_file"))}}
    if args.run_dir:  # beside the checkpoints is fine (RUN/eval); inside them, their rotation deletes it
        if os.path.realpath(storage.absolute(args.out)) == os.path.realpath(storage.absolute(args.run_dir)):
            raise CommandError(f"--out {args.out} is --run_dir itself; give a directory of its own "
                               f"(e.g. {args.run_dir.rstrip('/')}/eval)")
        inputs["--run_dir's checkpoints"] = str(storage.as_path(args.run_dir) / "checkpoints")
    check_output_path(args.out, "--out", directory=True, inputs=inputs)


def build_domain(name: str, pairs: Sequence[str], defaults: Mapping[str, Any] | None):
    """The evaluated domain; an option its constructor does not take is a bad `--domain_option`."""
    from genenv_jax.domains import DOMAINS, get_domain

    options = domain_options(pairs, defaults)
    if name in DOMAINS:  # an option the domain does not have, named before its constructor runs
        module_name, cls_name = DOMAINS[name].split(":")
        known = inspect.signature(getattr(importlib.import_module(module_name), cls_name)).parameters
        unknown = [key for key in domain_options(pairs) if key not in known]
        if unknown and not any(p.kind is p.VAR_KEYWORD for p in known.values()):
            raise CommandError(f"--domain_option {unknown[0]}: {name} has no such option "
                               f"(it has {', '.join(known)})")
    try:
        return get_domain(name, **options)
    except TypeError as err:  # an unknown keyword, or a value of the wrong kind
        raise CommandError(f"--domain_option for {name}: {err}") from None


def effective_options(domain) -> dict[str, Any]:
    """The options the evaluated domain actually ran with, defaults resolved (bfcl's `mode`,
    `prompt_format`, `decoding`, ...): each constructor parameter the domain keeps as an attribute
    of the same name, as JSON. Recorded in the report so a run says which prompt and which reading
    of the reply produced its numbers, and a later check can rebuild the same prompts."""
    options: dict[str, Any] = {}
    for name in inspect.signature(type(domain)).parameters:
        if not hasattr(domain, name):  # kept under another name, or only used in the constructor
            continue
        value = getattr(domain, name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        try:
            options[name] = json.loads(json.dumps(value))
        except (TypeError, ValueError):  # not JSON (an object the domain was handed): not recorded
            continue
    return options


def run_agent(run_dir: str, epoch: int | None):
    """(cfg, merged params, epoch, the run's tokenizer source) of a run's agent (`load_run_policy`),
    with an unreadable checkpoint as an expected error (one line)."""
    from genenv_jax.evaluation.run_policy import load_run_policy
    from genenv_jax.workdir.checkpoints import CheckpointError

    try:
        policy = load_run_policy(run_dir, "agent", epoch)
    except CheckpointError as err:
        raise CommandError(f"--run_dir {run_dir}: {err}") from None
    return policy.cfg, policy.merged(), policy.epoch, policy.tokenizer_source


def run_domain(run_dir: str, epoch: int | None) -> tuple[str, dict[str, Any]]:
    """The domain name and options a run was trained with (from its checkpoint's config snapshot)."""
    from genenv_jax.workdir.checkpoints import CheckpointError, Checkpointer

    ckpt = Checkpointer(storage.as_path(run_dir) / "checkpoints", async_save=False)
    try:
        if epoch is not None and epoch not in ckpt.all_epochs():  # before any model is built
            raise CommandError(f"--epoch={epoch}: {run_dir} has no checkpoint of that epoch "
                               f"(it has {ckpt.all_epochs() or 'none'})")
        epoch = ckpt.latest_epoch() if epoch is None else epoch
        domain = ckpt.metadata(epoch)["config"].get("domain", {}) if epoch is not None else {}
    except CheckpointError as err:
        raise CommandError(f"--run_dir {run_dir}: {err}") from None
    finally:
        ckpt.close()
    return domain.get("name", "bfcl"), dict(domain.get("options") or {})


def evaluated_tasks(args: argparse.Namespace):
    """(domain, tasks): the domain the flags name (a run's own by default) and its selected tasks,
    built before any model is loaded so that a bad option or an empty selection costs nothing."""
    run_name, run_options = run_domain(args.run_dir, args.epoch) if args.run_dir else ("bfcl", {})
    name = args.domain or run_name
    domain = build_domain(name, args.domain_option, run_options if name == run_name else None)
    categories = args.categories.split(",") if args.categories else None
    tasks = select_tasks(domain.seeds(args.split), args.max_per_category, categories, args.sample_seed)
    if not tasks:
        raise CommandError(f"no tasks selected (split={args.split}, categories={categories})")
    return domain, tasks


def evaluated_model(args: argparse.Namespace):
    """(cfg, params, source, tokenizer directory or None) of the model the flags name."""
    from genenv_jax.data.model_sources import ModelSourceError, resolve_model_source
    from genenv_jax.models import init_params, preset
    from genenv_jax.models.loading import has_own_tokenizer, load_model

    if args.run_dir:  # the run's own tokenizer unless --tokenizer_dir names another
        cfg, params, epoch, run_tokenizer = run_agent(args.run_dir, args.epoch)
        tokenizer = run_tokenizer if args.tokenizer_dir is None else args.tokenizer_dir
        return cfg, params, {"run_dir": storage.absolute(args.run_dir), "epoch": epoch}, tokenizer
    if args.preset:
        cfg = preset(args.preset)
        params = init_params(cfg, jax.random.key(args.seed))
        return cfg, params, {"preset": args.preset, "seed": args.seed}, args.tokenizer_dir
    try:
        model_path = resolve_model_source(args.model_dir).path
    except ModelSourceError as err:
        raise CommandError(f"--model_dir: {err}") from None
    cfg, params = load_model(model_path, dtype=args.dtype)
    source = {"model_dir": model_path}
    if args.adapter_dir:
        params = merged_peft_adapters(cfg, params, args.adapter_dir)
        source["adapter_dir"] = storage.absolute(args.adapter_dir)
    own = args.tokenizer_dir is None and has_own_tokenizer(model_path)
    return cfg, params, source, model_path if own else args.tokenizer_dir


@command(PROGRAM)
def main(argv: Sequence[str] | None = None) -> int:
    """Evaluates one model (a run's agent, a checkpoint, a random preset) and writes the report; an
    expected failure is one line and exit status 2 (`core.errors.command`)."""
    args = _parse_args(argv)
    check_arguments(args)
    initialize_distributed(args.coordinator_address, args.num_processes, args.process_id, args.coordinator_timeout_s)
    t0 = time.time()
    domain, tasks = evaluated_tasks(args)
    cfg, params, source, tok_dir = evaluated_model(args)
    tokenizer = ChatText.load(tok_dir).tokenizer
    report = evaluate_params(
        cfg, params, domain, tasks, tokenizer, max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size, max_prompt_tokens=args.max_prompt_tokens, max_turns=args.max_turns,
        progress=not args.no_progress,
        config=dict(source, split=args.split, max_per_category=args.max_per_category, sample_seed=args.sample_seed,
                    tokenizer=tok_dir or "bundled-qwen2.5", domain_options=effective_options(domain)))
    if not is_writer():  # process 0 writes the report
        return 0
    paths = write_report(report, args.out)
    print(format_markdown(report))
    print(f"wrote {', '.join(str(p) for p in paths.values())} in {time.time() - t0:.1f}s")
    return 0
