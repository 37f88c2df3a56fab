"""Runs the study: one co-evolution run per (arm, alpha, seed), each in its own workdir, then the
report. Resumable at every level: a finished run is skipped, a killed one resumes from its last
checkpoint, the tokenizer, the base model's evaluation and the warm-started weights are made once
and reused.

An arm is a mode (`config.modes`: genenv, random, static) or a named variant of one with config
overrides (`config.arms`, e.g. genenv with BFCL's grounding check recorded instead of applied).

Layout of the study directory:
    study.json            the plan (runs, alpha, levels, command) the report reads
    tokenizer/            the study's SentencePiece tokenizer (trained once on the train seeds; only
                          when `config.tokenizer_vocab_size` > 0, else the model's own)
    base/                 with `config.base_evaluation`: the evaluation command on the untrained agent
                          over the runs' held-out set (results.json, results.md, items.jsonl)
    warmstart_cache/      warm-started weights per (policy, seed, alpha-dependent prompts)
    runs/<name>/          each run's workdir (metrics.jsonl, heldout/, checkpoints, pools, samples, done.json)
    report/               report.md, summary.json and the PNG plots
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from absl import flags, logging
from ml_collections import ConfigDict
from tqdm.auto import tqdm

from genenv_jax.workdir import storage
from genenv_jax.core.compilation_cache import persistent_compilation_cache
from genenv_jax.core.config_checks import ConfigError
from genenv_jax.core.errors import check_output_outside
from genenv_jax.cli import command, command_line_parser, config_flag, die, error_text, one_line, workdir_flag
from genenv_jax.cli import run as run_command
from genenv_jax.configs import base
from genenv_jax.configs.run_config import MODES

PROGRAM = "genenv_jax.study"
_CONFIG = config_flag()
_WORKDIR = workdir_flag("The study directory (one workdir per run, the report); default runs/study-<scale>.")
_SCALE = flags.DEFINE_enum("scale", None, ["small", "large"], "The config's preset: small (2 CPU cores, "
                           "the default) or large (GPU/TPU). Same as configs/study.py:large.")
_REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Only rebuild the report from the runs' metrics.")
_RUNS = flags.DEFINE_list("runs", [], "Run only these runs of the plan (names as in study.json, e.g. "
                          "genenv_ungrounded-a0.5-s0), leaving the others as they are; the report covers "
                          "the whole plan. Default: every run.")


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """One co-evolution run of the study: a mode (or a named arm over one, with config overrides as
    (dotted key, value) pairs), an alpha and a seed."""

    mode: str
    alpha: float
    seed: int
    arm: str = ""
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        """The arm's name: the mode, or the named variant."""
        return self.arm or self.mode

    @property
    def name(self) -> str:
        return f"{self.label}-a{self.alpha:g}-s{self.seed}"

    @property
    def workdir(self) -> str:
        return f"runs/{self.name}"


def check_study(study: ConfigDict) -> None:
    """The study-level keys, with the key named in the error (each run config is checked by RunConfig)."""
    modes = tuple(study.modes)
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        raise ConfigError(f"config.modes={modes!r}: must be distinct names from {MODES}")
    for key, values in (("alpha", [study.alpha]), ("sweep_alphas", list(study.sweep_alphas))):
        if any(not isinstance(a, (int, float)) or not 0 < a < 1 for a in values):
            raise ConfigError(f"config.{key}={values!r}: every alpha must lie in (0, 1)")
    seeds = tuple(study.seeds)
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"config.seeds={seeds!r}: must be distinct integers")
    if not set(study.sweep_seeds) <= set(seeds):
        raise ConfigError(f"config.sweep_seeds={tuple(study.sweep_seeds)!r}: must be among config.seeds={seeds!r}")
    for name, arm in study_arms(study).items():
        if name in MODES or arm.get("mode") not in MODES:
            raise ConfigError(f"config.arms.{name}: an arm needs a name that is not a mode and a mode among {MODES}")
        for pair in arm.get("overrides", ()):
            if len(pair) != 2 or not isinstance(pair[0], str):
                raise ConfigError(f"config.arms.{name}.overrides: {pair!r} is not a (dotted key, value) pair")


def study_arms(study: ConfigDict) -> dict[str, dict]:
    """`config.arms` as {name: {"mode", "overrides"}} ({} when the study has none)."""
    arms = study.get("arms") or {}
    return {name: dict(arm) for name, arm in (arms.to_dict() if isinstance(arms, ConfigDict) else arms).items()}


def plan_runs(study: ConfigDict) -> list[StudyRun]:
    """Seed by seed (a partial study already compares modes): every mode at `alpha`, then, for the
    `sweep_seeds`, genenv at the sweep's other alphas."""
    runs = []
    for seed in study.seeds:
        runs += [StudyRun(mode, float(study.alpha), seed) for mode in study.modes]
        runs += [StudyRun(arm["mode"], float(study.alpha), seed, name,
                          tuple((str(k), v) for k, v in arm.get("overrides", ())))
                 for name, arm in study_arms(study).items()]
        if seed in study.sweep_seeds:
            runs += [StudyRun("genenv", float(a), seed) for a in study.sweep_alphas if float(a) != float(study.alpha)]
    return runs


def run_config(study: ConfigDict, run: StudyRun, study_dir: Path) -> ConfigDict:
    """The study's run config with this run's mode, alpha and seed, and the study's shared dirs."""
    c = ConfigDict(study.run.to_dict())
    c.mode, c.seed = run.mode, run.seed
    c.curriculum.alpha = run.alpha
    if study.tokenizer_vocab_size:
        c.tokenizer_dir = str(study_dir / "tokenizer")
    c.warmstart.cache_dir = str(study_dir / "warmstart_cache")
    try:
        return base.apply(c, dict(run.overrides))
    except KeyError as e:
        raise ConfigError(f"config.arms.{run.arm}.overrides: {e.args[0]}") from None


def prepare_tokenizer(study: ConfigDict, domain, study_dir: Path) -> Path:
    """The study tokenizer, trained once on the domain's train seeds (atomic: a temp dir renamed)."""
    from genenv_jax.text.small_tokenizer import domain_training_texts, small_tokenizer_once

    return small_tokenizer_once(lambda: domain_training_texts(domain), study_dir / "tokenizer",
                                vocab_size=study.tokenizer_vocab_size)


def write_plan(study: ConfigDict, domain, runs: Sequence[StudyRun], study_dir: Path, command: str) -> None:
    categories = sorted({t.category for t in domain.seeds(study.run.evaluation.split or "all")})
    plan = {"alpha": float(study.alpha), "levels": categories, "epochs": int(study.run.epochs),
            "scale": study.scale, "command": command, "base": "base" if study.get("base_evaluation") else None,
            "sweep_alphas": [float(a) for a in study.sweep_alphas],
            "runs": [{"name": r.name, "mode": r.mode, "arm": r.label, "alpha": r.alpha, "seed": r.seed,
                      "workdir": r.workdir, "overrides": [list(p) for p in r.overrides]} for r in runs]}
    storage.write_atomic(study_dir / "study.json", json.dumps(plan, indent=1) + "\n")


def selected_runs(runs: Sequence[StudyRun], only: Sequence[str]) -> list[StudyRun]:
    """The runs named in `only` (all when empty), in plan order; a name not in the plan is an error."""
    unknown = sorted(set(only) - {r.name for r in runs})
    if unknown:
        raise ConfigError(f"--runs={','.join(only)}: {', '.join(unknown)} not in the plan "
                          f"(runs: {', '.join(r.name for r in runs)})")
    return [r for r in runs if not only or r.name in only]


def run_study(study: ConfigDict, study_dir: str | os.PathLike, command: str = "",
              only: Sequence[str] = ()) -> Path:
    """Every run of the study (finished ones skipped; only those named in `only` when it is given),
    then the report over the whole plan; returns the report's path."""
    import jax

    from genenv_jax.domains import get_domain
    from genenv_jax.loop import CoEvolution
    from genenv_jax.configs.run_config import RunConfig
    from genenv_jax.study.report import write_report

    check_study(study)
    study_dir = Path(study_dir).absolute()
    runs = plan_runs(study)
    chosen = selected_runs(runs, only)
    domain = get_domain(study.run.domain.name, **study.run.domain.options)
    if study.tokenizer_vocab_size:
        study_dir.mkdir(parents=True, exist_ok=True)
        prepare_tokenizer(study, domain, study_dir)  # before validation: each run config names its directory
    configs = {r.name: RunConfig.from_config_dict(run_config(study, r, study_dir), num_devices=jax.device_count())
               for r in runs}  # every run's config checked, chosen or not
    for config in configs.values():  # before the plan is written: not into a model or data directory
        check_output_outside(study_dir, "--workdir", config.input_paths())
    study_dir.mkdir(parents=True, exist_ok=True)
    write_plan(study, domain, runs, study_dir, command)
    persistent_compilation_cache(study_dir / "xla_cache")  # runs 2..n reload what run 1 compiled
    if study.get("base_evaluation"):
        evaluate_base(configs[runs[0].name], study_dir / "base")
    bar = tqdm(chosen, desc="study", unit="run")
    for run in bar:
        bar.set_postfix_str(run.name)
        done = study_dir / run.workdir / "done.json"
        snapshot = portable_snapshot(configs[run.name].snapshot, study_dir)
        if finished_unchanged(done, run.name, snapshot, configs[run.name].epochs):
            continue
        t0 = time.time()
        CoEvolution(configs[run.name], study_dir / run.workdir).run()
        storage.write_atomic(done, json.dumps({"epochs": configs[run.name].epochs, "seconds": time.time() - t0,
                                               "config": snapshot}, indent=1) + "\n")
        tqdm.write(f"study: {run.name} done in {time.time() - t0:.0f} s")
    bar.close()
    return write_report(study_dir)


def portable_snapshot(snapshot: Mapping[str, Any], study_dir: Path) -> dict[str, Any]:
    """A run's config snapshot with paths inside the study directory written `<study>/...`, so a
    study directory that was moved or copied compares equal to itself."""
    prefix = str(study_dir)

    def portable(value: Any) -> Any:
        if isinstance(value, str) and (value == prefix or value.startswith(prefix + os.sep)):
            return "<study>" + value[len(prefix):]
        if isinstance(value, Mapping):
            return {k: portable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [portable(v) for v in value]
        return value

    return portable(dict(snapshot))


def finished_unchanged(done: Path, name: str, snapshot: Mapping[str, Any], epochs: int) -> bool:
    """Whether run `name` finished (its `done.json`) under this config: True to skip it, False when
    it has not finished or finished fewer epochs (it resumes). A run that finished under a config
    that differs in a key that changes what the run means is refused in one line naming the keys,
    as a resume under another config is (`loop.persistence.config_changes`); so is a finished run
    whose done.json records no config (written before configs were recorded)."""
    from genenv_jax.loop.persistence import config_changes

    if not done.is_file():
        return False
    try:
        record = json.loads(done.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{done}: unreadable ({one_line(e)}); delete it to rerun {name}") from None
    if "config" not in record:
        raise ConfigError(f"{done}: run {name} finished without a recorded config, so a rerun cannot tell whether "
                          f"it is the same run; delete {done.parent} to rerun it or use another --workdir")
    unsafe = [(key, old, new) for key, old, new, safe in config_changes(record["config"], snapshot)
              if not safe]
    if unsafe:
        shown = "; ".join(f"config.{key}: {old!r} -> {new!r}" for key, old, new in unsafe[:3])
        more = f" (and {len(unsafe) - 3} more)" if len(unsafe) > 3 else ""
        raise ConfigError(f"run {name} finished under another config ({shown}{more}); its results would be "
                          f"reported under this command: use another --workdir or delete {done.parent}")
    return record.get("epochs") == epochs


def base_evaluation_args(config, out: Path) -> list[str]:
    """The evaluation command's arguments that score the run's untrained agent (`agent.model_dir`) on
    the run's held-out set exactly as the loop's held-out evaluation does: the same split, per-category
    sample, reply cap, turns and decode slots (`loop/heldout.py` runs the command's code)."""
    e, agent = config.evaluation, config.agent
    if not (e.split and agent.model_dir):
        raise ConfigError("config.base_evaluation needs run.evaluation.split and run.agent.model_dir")
    args = [f"--model_dir={agent.model_dir}", f"--domain={config.domain.name}", f"--split={e.split}",
            f"--max_new_tokens={agent.sampling.max_new_tokens}", f"--max_turns={config.episodes.max_turns}",
            f"--max_prompt_tokens={agent.sampling.max_prompt_len}", f"--batch_size={agent.sampling.batch_size}",
            f"--dtype={agent.param_dtype}", f"--out={out}", "--no_progress"]
    args += [f"--domain_option={k}={json.dumps(v)}" for k, v in config.domain.options.items()]
    if e.max_per_category:
        args.append(f"--max_per_category={e.max_per_category}")
        if e.sample_seed >= 0:
            args.append(f"--sample_seed={e.sample_seed}")
    return args


def evaluate_base(config, out: Path) -> None:
    """The evaluation command on the untrained agent over the held-out set, once (kept in `out`)."""
    from genenv_jax.evaluation.cli import main as evaluation_main

    if (out / "results.json").is_file():
        return
    staging = out.with_name(out.name + ".partial")
    t0 = time.time()
    if evaluation_main(base_evaluation_args(config, staging)) != 0:
        raise ConfigError("the base model's evaluation failed (see the line above)")
    staging.rename(out)
    tqdm.write(f"study: base model evaluated in {time.time() - t0:.0f} s")


def _with_scale(argv: list[str]) -> list[str]:
    """`--scale=X` selects the config's preset X (`--config=configs/study.py:X`); the parser then
    resolves a packaged name such as `study:X` as usual."""
    scale = next((a.split("=", 1)[1] for a in argv if a.startswith("--scale=")), None)
    if scale is None:
        return argv
    out = []
    for arg in argv:
        if arg.startswith("--config="):
            path, sep, preset = arg.partition("=")[2].partition(":")
            if sep and preset != scale:
                die(f"--scale={scale} contradicts the config's preset :{preset}", PROGRAM)
            arg = f"--config={path}:{scale}"
        out.append(arg)
    return out


@command(PROGRAM)
def main(argv) -> None:
    from genenv_jax.study.report import write_report

    if len(argv) > 1:
        die(f"unexpected arguments: {argv[1:]} (flags are --name=value; see --help)", PROGRAM)
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    study = _CONFIG.value
    study_dir = Path(_WORKDIR.value or f"runs/study-{study.scale}")  # --workdir: the study directory
    command = "python -m genenv_jax.study " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        path = write_report(study_dir) if _REPORT_ONLY.value else run_study(study, study_dir, command, _RUNS.value)
    except ConfigError as e:
        die(one_line(e), PROGRAM)
    except OSError as e:
        die(f"{error_text(e)} (check --workdir; a rerun of the same command resumes)", PROGRAM)
    print(f"\nstudy report: {path}")


def run_main() -> None:
    flags.mark_flag_as_required("config")
    parse = command_line_parser(PROGRAM)
    run_command(main, PROGRAM, lambda argv: parse(_with_scale(list(argv))))
