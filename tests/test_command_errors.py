"""Every entry point over a table of bad inputs (issue #34): missing, empty, truncated, binary and
wrong-layout files, occupied output paths, bad flag values, config files that raise. Each must end
with exactly one line on stderr (`<program>: error: ...`, no traceback), a non-zero exit status,
and no file created or changed under the case's directory.

The table (`CASES`) is meant to grow with each command. argparse commands run in-process (`main(argv)`,
SystemExit caught); absl commands run as a process each (`ABSL`), because absl's flags are
process-global and `app.run` runs once per process; `--help` is checked through the real process
too (absl exits 1 for it by default). Every case fails before any model or download starts."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
TP_EVAL = FIXTURES / "travelplanner" / "eval"
BINARY = b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x01"

# In-process commands: name -> module holding `main(argv)` (tpu/ scripts by file path).
IN_PROCESS = {
    "evaluation": "genenv_jax.evaluation.cli",
    "alfworld": "genenv_jax.domains.alfworld.__main__",
    "bfcl": "genenv_jax.domains.bfcl.__main__",
    "bamboogle": "genenv_jax.domains.bamboogle.__main__",
    "bfcl_multiturn": "genenv_jax.domains.bfcl_multiturn.__main__",
    "api_bank": "genenv_jax.domains.api_bank.__main__",
    "travelplanner": "genenv_jax.domains.travelplanner.evaluate",
    "download": "genenv_jax.data.download",
    "study.report": "genenv_jax.study.report",
    "slurm": REPO / "tpu" / "slurm.py",
    "tpu": REPO / "tpu" / "tpu.py",
}
# absl commands: name -> `python ...` arguments.
ABSL = {
    "main": ["-m", "genenv_jax.main"],
    "fit_experience": ["-m", "genenv_jax.dreamgym.fit_experience"],
    "compare": ["-m", "genenv_jax.tools.dreamgym_compare"],
    "study": ["-m", "genenv_jax.study"],
    "plan": ["-m", "genenv_jax.tools.tpu_memory"],
    "probe": ["-m", "genenv_jax.tools.simulator_probe"],
    "export": ["-m", "genenv_jax.export"],
    "calc_report": ["-m", "genenv_jax.study.calc_report"],
}

# Files a case needs, by name (created under the case's directory): text, bytes, or DIR.
DIR = object()
CONFIGS = {
    "noget.py": "x = 1\n",
    "none.py": "def get_config():\n    return None\n",
    "raises.py": "def get_config():\n    raise RuntimeError('boom')\n",
    "syntax.py": "def get_config(\n",
    "binary.py": BINARY,
    "ok.py": "import ml_collections\n\n\ndef get_config():\n    return ml_collections.ConfigDict({'epochs': 1})\n",
}


def _tp_database(root: Path) -> None:
    """A copy of the TravelPlanner fixture database whose accommodations CSV ends in a cut row."""
    shutil.copytree(TP_EVAL / "database", root / "tp" / "database")
    [csv] = (root / "tp" / "database" / "accommodations").glob("*.csv")
    lines = csv.read_text(encoding="utf-8").splitlines(keepends=True)
    csv.write_text("".join(lines[:3]) + lines[3][:len(lines[3]) // 3], encoding="utf-8")


def _alfworld_game(traj: bytes | str):
    def make(root: Path) -> None:
        trial = root / "alf" / "valid_seen" / "pick_and_place_simple-A-None-B-1" / "trial_1"
        trial.mkdir(parents=True)
        (trial / "traj_data.json").write_bytes(traj if isinstance(traj, bytes) else traj.encode())
        (trial / "game.tw-pddl").write_text('{"solvable": true}')
    return make


# (id, command, argv with {t} for the case directory, files to create (name -> content or a
# function of the case directory), a text the error line must hold)
CASES = [
    # --- genenv_jax.main (absl)
    ("main-missing-config", "main", ["--config={t}/missing.py"], {}, "no such file"),
    ("main-config-is-dir", "main", ["--config={t}/adir"], {"adir": DIR}, "is a directory"),
    ("main-config-without-get_config", "main", ["--config={t}/noget.py"], CONFIGS, "defines no get_config()"),
    ("main-get_config-returns-none", "main", ["--config={t}/none.py"], CONFIGS, "get_config() returned None"),
    ("main-config-raises", "main", ["--config={t}/raises.py"], CONFIGS, "raises.py:2: RuntimeError: boom"),
    ("main-config-syntax-error", "main", ["--config={t}/syntax.py"], CONFIGS, "syntax.py:1: SyntaxError"),
    ("main-config-binary", "main", ["--config={t}/binary.py"], CONFIGS, "cannot load the config"),
    ("main-unknown-key", "main", ["--config={t}/ok.py", "--config.nonsense=1"], CONFIGS, "unknown config key 'nonsense'"),
    ("main-bad-preset", "main", ["--config=bfcl:huge"], {}, "unknown bfcl preset 'huge'"),
    ("main-workdir-occupied", "main", ["--config={t}/ok.py", "--workdir={t}/taken"], {**CONFIGS, "taken": "x"},
     "exists and is not a directory"),
    ("main-extra-argument", "main", ["--config={t}/ok.py", "extra"], CONFIGS, "unexpected arguments"),
    ("main-unknown-flag", "main", ["--config={t}/ok.py", "--bogus=1"], CONFIGS, "Unknown command line flag 'bogus'"),
    # --- dreamgym.fit_experience (absl)
    ("fit-bad-probability-and-count", "fit_experience", ["--invalid_prob=5", "--heldout_games=-1", "--workdir={t}/w"],
     {}, "must be >= 1"),
    ("fit-bad-probability", "fit_experience", ["--invalid_prob=5", "--workdir={t}/w"], {}, "must lie in [0.0, 1.0]"),
    ("fit-not-a-number", "fit_experience", ["--heldout_games=x", "--workdir={t}/w"], {}, "--heldout_games=x"),
    ("fit-no-workdir", "fit_experience", [], {}, "--workdir must have a value"),
    ("fit-workdir-occupied", "fit_experience", ["--workdir={t}/taken"], {"taken": "x"}, "exists and is not a dir"),
    # --- tools.dreamgym_compare (absl)
    ("compare-bogus-arm", "compare", ["--arms=bogus", "--workdir={t}/w"], {}, "unknown arm 'bogus'"),
    ("compare-report-only-empty", "compare", ["--report_only", "--workdir={t}/empty"], {"empty": DIR},
     "no arm of"),
    ("compare-zero-epochs", "compare", ["--epochs=0", "--workdir={t}/w"], {}, "--epochs=0: must be >= 1"),
    # --- study (absl)
    ("study-scale-contradicts", "study", ["--config=study:large", "--scale=small"], {}, "contradicts"),
    ("study-report-only-empty", "study", ["--config=study", "--report_only", "--workdir={t}/nostudy"], {},
     "no study.json"),
    # --- tools.tpu_memory, "plan" (absl)
    ("plan-bad-slice", "plan", ["--config=bfcl:tiny", "--slice=v9-1"], {}, "v9-1"),
    # --- evaluation
    ("eval-missing-run-dir", "evaluation", ["--run_dir={t}/missing", "--out={t}/out"], {}, "no checkpoints/"),
    ("eval-out-occupied", "evaluation", ["--preset=tiny", "--out={t}/taken"], {"taken": "x"},
     "exists and is not a directory"),
    ("eval-out-under-a-file", "evaluation", ["--preset=tiny", "--out={t}/taken/out"], {"taken": "x"},
     "is not a directory"),
    ("eval-out-is-input", "evaluation", ["--model_dir={t}/m", "--out={t}/m"], {"m": DIR}, "is also an input"),
    ("eval-zero-tokens", "evaluation", ["--preset=tiny", "--max_new_tokens=0", "--out={t}/out"], {}, ">= 1"),
    ("eval-adapter-without-base", "evaluation", ["--preset=tiny", "--adapter_dir={t}", "--out={t}/out"], {},
     "needs --model_dir"),
    ("eval-unknown-domain", "evaluation", ["--preset=tiny", "--domain=nope", "--out={t}/out"], {},
     "not a registered domain"),
    ("eval-unknown-preset", "evaluation", ["--preset=huge", "--out={t}/out"], {}, "not a model preset"),
    ("eval-bad-split", "evaluation", ["--preset=tiny", "--split=bogus", "--out={t}/out"], {}, "invalid choice"),
    ("eval-no-out", "evaluation", ["--preset=tiny"], {}, "required: --out"),
    ("eval-bad-domain-option", "evaluation", ["--preset=tiny", "--domain_option=x", "--out={t}/out"], {},
     "expected KEY=VALUE"),
    ("eval-unknown-domain-option", "evaluation", ["--preset=tiny", "--domain_option=nonsense=1", "--out={t}/out"],
     {}, "--domain_option for bfcl"),
    # --- domains.alfworld
    ("alfworld-nothing", "alfworld", [], {}, "exactly one of"),
    ("alfworld-missing-data-dir", "alfworld", ["--data_dir={t}/missing"], {}, "no ALFWorld split"),
    ("alfworld-data-dir-is-file", "alfworld", ["--data_dir={t}/taken"], {"taken": "x"}, "no ALFWorld split"),
    ("alfworld-build-exists", "alfworld", ["--build={t}/taken"], {"taken": "x"}, "already exists"),
    ("alfworld-negative-count", "alfworld", ["--build={t}/new", "--train=-1"], {}, "--train=-1"),
    ("alfworld-binary-game", "alfworld", ["--data_dir={t}/alf"], {"alf": _alfworld_game(BINARY)},
     "unreadable game files"),
    ("alfworld-wrong-layout", "alfworld", ["--data_dir={t}/alf"], {"alf": _alfworld_game("[1, 2]")},
     "must each hold a JSON object"),
    ("alfworld-not-a-number", "alfworld", ["--build={t}/new", "--train=x"], {}, "invalid int value"),
    # --- domains.bfcl
    ("bfcl-nothing", "bfcl", [], {}, "nothing to do"),
    ("bfcl-bad-fractions", "bfcl", ["--stats", "--train=-1"], {}, "SplitFractions"),
    ("bfcl-bad-validation", "bfcl", ["--stats", "--validation=bogus"], {}, "invalid choice"),
    # --- domains.bfcl_multiturn, domains.api_bank
    ("bfcl_multiturn-nothing", "bfcl_multiturn", [], {}, "nothing to do"),
    ("api_bank-no-data-dir", "api_bank", [], {}, "--data_dir"),
    ("api_bank-missing-data", "api_bank", ["--data_dir={t}/missing"], {}, "missing"),
    ("api_bank-bad-scoring", "api_bank", ["--data_dir={t}", "--scoring=lenient"], {}, "invalid choice"),
    # --- domains.bamboogle
    ("bamboogle-missing-data", "bamboogle", ["--data_dir={t}/missing", "--items={t}/items.jsonl"],
     {"items.jsonl": '{"task_id": "test_0", "response": "x"}\n'}, "missing"),
    ("bamboogle-missing-items", "bamboogle", [f"--data_dir={FIXTURES / 'bamboogle'}", "--items={t}/nope.jsonl"], {},
     "no such file"),
    ("bamboogle-empty-items", "bamboogle", [f"--data_dir={FIXTURES / 'bamboogle'}", "--items={t}/items.jsonl"],
     {"items.jsonl": ""}, "no items"),
    ("bamboogle-binary-items", "bamboogle", [f"--data_dir={FIXTURES / 'bamboogle'}", "--items={t}/items.jsonl"],
     {"items.jsonl": BINARY}, "not UTF-8"),
    ("bamboogle-truncated-items", "bamboogle", [f"--data_dir={FIXTURES / 'bamboogle'}", "--items={t}/items.jsonl"],
     {"items.jsonl": '{"task_id": "test_0", "resp'}, "items.jsonl:1"),
    ("bamboogle-foreign-items", "bamboogle", [f"--data_dir={FIXTURES / 'bamboogle'}", "--items={t}/items.jsonl"],
     {"items.jsonl": '{"task_id": "other_7", "response": "x"}\n'}, "unknown task ids"),
    ("bamboogle-no-items-flag", "bamboogle", [f"--data_dir={FIXTURES / 'bamboogle'}"], {}, "required: --items"),
    # --- domains.travelplanner.evaluate
    *[(f"travelplanner-{name}", "travelplanner", ["--data_dir", str(TP_EVAL), "--plans", "{t}/plans.jsonl"],
       {"plans.jsonl": content}, message) for name, content, message in (
        ("empty-plans", "", "no plans"), ("binary-plans", BINARY, "not UTF-8"),
        ("truncated-plans", '{"idx": 1, "plan": [', "plans.jsonl:1: not JSON"),
        ("wrong-layout-plans", "[1, 2]\n", "needs a 'plan' key"))],
    ("travelplanner-missing-plans", "travelplanner", ["--data_dir", str(TP_EVAL), "--plans", "{t}/nope.jsonl"], {},
     "no such file"),
    ("travelplanner-details-is-plans", "travelplanner",
     ["--data_dir", str(TP_EVAL), "--plans", "{t}/plans.jsonl", "--details", "{t}/plans.jsonl"],
     {"plans.jsonl": (TP_EVAL / "plans.jsonl").read_text()}, "is also an input"),
    ("travelplanner-details-is-dir", "travelplanner",
     ["--data_dir", str(TP_EVAL), "--plans", str(TP_EVAL / "plans.jsonl"), "--details", "{t}/adir"],
     {"adir": DIR}, "is a directory"),
    ("travelplanner-truncated-database", "travelplanner",
     ["--data_dir={t}/tp", "--plans", str(TP_EVAL / "plans.jsonl"), "--queries", str(TP_EVAL / "queries.csv")],
     {"tp": _tp_database}, ".csv:"),
    ("travelplanner-binary-queries", "travelplanner",
     ["--data_dir", str(TP_EVAL), "--plans", str(TP_EVAL / "plans.jsonl"), "--queries", "{t}/q.csv"],
     {"q.csv": BINARY}, "not UTF-8"),
    ("travelplanner-missing-split", "travelplanner",
     ["--data_dir", str(TP_EVAL), "--plans", str(TP_EVAL / "plans.jsonl"), "--split", "test"], {}, "test.csv"),
    ("travelplanner-bad-scoring", "travelplanner",
     ["--data_dir", str(TP_EVAL), "--plans", str(TP_EVAL / "plans.jsonl"), "--scoring", "lenient"], {},
     "invalid choice"),
    # --- data.download (every case fails before a byte is fetched)
    ("download-unknown-name", "download", ["nope", "--dest={t}/d"], {}, "invalid choice"),
    ("download-dest-occupied", "download", ["bamboogle", "--dest={t}/taken"], {"taken": "x"},
     "exists and is not a directory"),
    ("download-no-dest", "download", ["bamboogle"], {}, "required: --dest"),
    *[(f"download-{name}-manifest", "download", ["bamboogle", "--dest={t}/d", "--manifest={t}/m.json"],
       {"m.json": content}, "cannot read it") for name, content in (
        ("empty", ""), ("binary", BINARY), ("truncated", '{"name": "x", "files": ['), ("wrong-layout", "[]"))],
    ("download-missing-manifest", "download", ["bamboogle", "--dest={t}/d", "--manifest={t}/nope.json"], {},
     "cannot read it"),
    # --- study.report
    ("report-missing", "study.report", ["{t}/nope"], {}, "no study.json"),
    *[(f"report-{name}-study-json", "study.report", ["{t}/s"], {"s": DIR, "s/study.json": content}, "bad study.json")
      for name, content in (("binary", BINARY), ("truncated", '{"runs": ['), ("wrong-layout", "[]"))],
    # --- tpu/slurm.py (no --dry_run: a refused value must not write logs/<job>.sbatch either)
    ("slurm-bad-time", "slurm", ["--nodes", "1", "--workdir", "w", "--repo_dir={t}", "--time", "banana"], {},
     "--time 'banana'"),
    ("slurm-too-many-gpus", "slurm", ["--nodes", "1", "--workdir", "w", "--repo_dir={t}", "--gpus_per_node",
                                      "100000"], {}, "--gpus_per_node 100000"),
    ("slurm-job-name-escapes", "slurm", ["--nodes", "1", "--workdir", "w", "--repo_dir={t}/repo", "--job_name",
                                         "../../x"], {}, "--job_name '../../x'"),
    ("slurm-zero-nodes", "slurm", ["--nodes", "0", "--workdir", "w", "--dry_run"], {}, "at least 1"),
    ("slurm-not-a-number", "slurm", ["--nodes", "x", "--workdir", "w"], {}, "invalid int value"),
    ("slurm-no-workdir", "slurm", ["--nodes", "1"], {}, "required: --workdir"),
    ("slurm-bad-env", "slurm", ["--nodes", "1", "--workdir", "w", "--env", "=x", "--dry_run"], {},
     "expected NAME=VALUE"),
    # --- tpu/tpu.py
    ("tpu-negative-grace", "tpu", ["stop", "--name", "n", "--zone", "z", "--grace", "-10", "--dry_run"], {},
     "--grace -10"),
    ("tpu-negative-lines", "tpu", ["logs", "--name", "n", "--zone", "z", "--lines", "-1", "--dry_run"], {},
     "--lines -1"),
    ("tpu-bad-accelerator", "tpu", ["create", "--name", "n", "--zone", "z", "--accelerator_type", "v5p",
                                    "--dry_run"], {}, "expected a type like"),
    ("tpu-no-command", "tpu", [], {}, "required: command"),
    ("tpu-unknown-command", "tpu", ["reboot"], {}, "invalid choice"),
    ("tpu-bad-gs-workdir", "tpu", ["launch", "--name", "n", "--zone", "z", "--workdir", "gs://", "--dry_run"], {},
     "expected gs://BUCKET/PATH"),
]


def _make_files(root: Path, files: dict) -> None:
    for name, content in files.items():
        path = root / name
        if content is DIR:
            path.mkdir(parents=True, exist_ok=True)
        elif callable(content):
            content(root)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with its content digest (directories as 'dir')."""
    out = {}
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _module(name: str):
    target = IN_PROCESS[name]
    if isinstance(target, str):
        return importlib.import_module(target)
    spec = importlib.util.spec_from_file_location(f"_command_{target.stem}", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_in_process(name: str, argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = _module(name).main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _run_process(name: str, argv: list[str], cwd: Path) -> tuple[int, str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    env.pop("GENENV_JAX_TRACEBACK", None)
    proc = subprocess.run([sys.executable, *ABSL[name], *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line_a_failure_and_writes_nothing(case, tmp_path, capsys, monkeypatch):
    _, command, argv, files, message = case
    _make_files(tmp_path, files)
    argv = [a.replace("{t}", str(tmp_path)) for a in argv]
    before = snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    if command in ABSL:
        code, _, err = _run_process(command, argv, tmp_path)
    else:
        code, err = _run_in_process(command, argv, capsys)
    lines = err.strip().splitlines()
    assert code not in (0, None), (command, argv, err)
    assert len(lines) == 1 and ": error: " in lines[0], err[-3000:]
    assert message in lines[0], lines[0]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command, flag", [("main", "--help"), ("fit_experience", "--helpfull"),
                                           ("compare", "--help")])
def test_absl_help_exits_zero(command, flag, tmp_path):
    code, out, err = _run_process(command, [flag], tmp_path)
    assert code == 0 and "--" in out, err[-2000:]


@pytest.mark.parametrize("command", sorted(IN_PROCESS))
def test_argparse_help_exits_zero(command, capsys):
    with pytest.raises(SystemExit) as info:
        _module(command).main(["--help"])
    assert info.value.code == 0 and "--" in capsys.readouterr().out


def test_an_expected_error_shows_its_traceback_on_request(tmp_path, monkeypatch):
    from genenv_jax.core.errors import CommandError, command

    @command("prog")
    def fails(argv):
        raise CommandError("refused")

    assert fails([]) == 2
    monkeypatch.setenv("GENENV_JAX_TRACEBACK", "1")
    with pytest.raises(CommandError):
        fails([])


def test_a_bug_keeps_its_traceback():
    from genenv_jax.core.errors import command

    @command("prog")
    def buggy(argv):
        return {}["missing"]

    with pytest.raises(KeyError):
        buggy([])
