"""Every entry point over a table of bad inputs (issue #34): missing, empty, truncated, binary and
wrong-layout files, occupied output paths, bad flag values, config files that raise. Each must end
with exactly the expected line on stderr (`<program>: error: <cause>`, naming the flag, file, key or
line; nothing else, so no traceback), exit status 2, and no file created or changed under the case's
directory.

The table (`CASES`) is meant to grow with each command; `{t}` in a row stands for the case's
directory. How a case runs and what is asserted is shared with tests/integration/test_careless_input.py
(tests/support/command_runs.py): argparse commands run in-process, absl commands as a process each. `--help`
is checked through the real process too (absl exits 1 for it by default). Every case fails before
any model or download starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.command_runs import (BINARY, DIR, DOWNLOAD, EVAL, FIXTURES, IN_PROCESS, MAIN, REPO, TP, TP_EVAL,
                                check_case, module, run_process)

FIT = "genenv_jax.dreamgym.fit_experience: error: "
COMPARE = "genenv_jax.tools.dreamgym_compare: error: "
STUDY = "genenv_jax.study: error: "
PLAN = "genenv_jax.tools.tpu_memory: error: "
ALFWORLD = "python -m genenv_jax.domains.alfworld: error: "
BFCL = "python -m genenv_jax.domains.bfcl: error: "
BFCL_MT = "python -m genenv_jax.domains.bfcl_multiturn: error: "
API_BANK = "python -m genenv_jax.domains.api_bank: error: "
BAMBOOGLE = "python -m genenv_jax.domains.bamboogle: error: "
REPORT = "genenv_jax.study.report: error: "
SLURM = "slurm.py: error: "
TPU = "tpu.py: error: "

BAMBOOGLE_DATA = FIXTURES / "bamboogle"
TRIAL = "{t}/alf/valid_seen/pick_and_place_simple-A-None-B-1/trial_1"
ALFWORLD_SPLITS = "no ALFWorld split directory in it (train, valid_seen, valid_unseen, or json_2.1.1/ holding them)"
ARMS = "real_grpo, dreamgym, dreamgym_s2r, no_replay, no_reasoning, no_taskgen"
SLICES = ("v4-8, v4-16, v4-32, v4-64, v4-128, v5p-8, v5p-16, v5p-32, v5p-64, v5p-128, v5litepod-1, v5litepod-4, "
          "v5litepod-8, v5litepod-16, v5litepod-32, v5litepod-64, v6e-1, v6e-4, v6e-8, v6e-16, v6e-32, v6e-64")
SCORINGS = "(choose from 'official', 'strict', 'both') (see --help)"

# Files a case needs, by name (created under the case's directory): text, bytes, or DIR.
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


TP_FIXTURE = ["--data_dir", str(TP_EVAL), "--plans", str(TP_EVAL / "plans.jsonl")]
BAMBOOGLE_ITEMS = [f"--data_dir={BAMBOOGLE_DATA}", "--items={t}/items.jsonl"]
MANIFEST_ARGS = ["bamboogle", "--dest={t}/d", "--manifest={t}/m.json"]

# (id, command, argv with {t} for the case directory, files to create (name -> content or a
# function of the case directory), the exact error line)
CASES = [
    # --- genenv_jax.main (absl)
    ("main-missing-config", "main", ["--config={t}/missing.py"], {},
     f"{MAIN}--config {{t}}/missing.py: no such file (a config file, e.g. configs/bfcl.py:tiny, or a packaged name, "
     "e.g. bfcl:tiny)"),
    ("main-config-is-dir", "main", ["--config={t}/adir"], {"adir": DIR},
     f"{MAIN}--config {{t}}/adir: is a directory, not a config file (e.g. configs/bfcl.py)"),
    ("main-config-without-get_config", "main", ["--config={t}/noget.py"], CONFIGS,
     f"{MAIN}--config {{t}}/noget.py: defines no get_config() function"),
    ("main-get_config-returns-none", "main", ["--config={t}/none.py"], CONFIGS,
     f"{MAIN}--config {{t}}/none.py: get_config() returned None (a missing return statement?)"),
    ("main-config-raises", "main", ["--config={t}/raises.py"], CONFIGS,
     f"{MAIN}cannot load the config: {{t}}/raises.py:2: RuntimeError: boom"),
    ("main-config-syntax-error", "main", ["--config={t}/syntax.py"], CONFIGS,
     f"{MAIN}cannot load the config: {{t}}/syntax.py:1: SyntaxError: '(' was never closed (syntax.py, line 1)"),
    ("main-config-binary", "main", ["--config={t}/binary.py"], CONFIGS,
     f"{MAIN}cannot load the config: {{t}}/binary.py: SyntaxError: source code string cannot contain null bytes"),
    ("main-unknown-key", "main", ["--config={t}/ok.py", "--config.nonsense=1"], CONFIGS,
     f"{MAIN}unknown config key 'nonsense' in an override (run with --config=... only to see the valid keys in the "
     "config file)"),
    ("main-bad-preset", "main", ["--config=bfcl:huge"], {},
     f"{MAIN}cannot load the config: {REPO}/genenv_jax/configs/bfcl.py: ValueError: unknown bfcl "
     "preset 'huge'; expected '7b' or 'tiny' or 'coder_lora' or 'real' or 'reference'"),
    ("main-workdir-occupied", "main", ["--config={t}/ok.py", "--workdir={t}/taken"], {**CONFIGS, "taken": "x"},
     f"{MAIN}--workdir {{t}}/taken: exists and is not a directory"),
    ("main-extra-argument", "main", ["--config={t}/ok.py", "extra"], CONFIGS,
     f"{MAIN}unexpected arguments: ['extra'] (flags are --name=value; see --help)"),
    ("main-unknown-flag", "main", ["--config={t}/ok.py", "--bogus=1"], CONFIGS,
     f"{MAIN}--bogus: no such flag (see --help)"),
    # --- dreamgym.fit_experience (absl)
    ("fit-bad-probability-and-count", "fit_experience", ["--invalid_prob=5", "--heldout_games=-1", "--workdir={t}/w"],
     {}, f"{FIT}--heldout_games=-1: must be >= 1"),
    ("fit-bad-probability", "fit_experience", ["--invalid_prob=5", "--workdir={t}/w"], {},
     f"{FIT}--invalid_prob=5.0: must lie in [0.0, 1.0]"),
    ("fit-not-a-number", "fit_experience", ["--heldout_games=x", "--workdir={t}/w"], {},
     f"{FIT}--heldout_games=x: expected an integer"),
    ("fit-no-workdir", "fit_experience", [], {}, f"{FIT}--workdir is required; give a value (see --help)"),
    ("fit-workdir-occupied", "fit_experience", ["--workdir={t}/taken"], {"taken": "x"},
     f"{FIT}--workdir {{t}}/taken: exists and is not a directory"),
    # --- tools.dreamgym_compare (absl)
    ("compare-bogus-arm", "compare", ["--arms=bogus", "--workdir={t}/w"], {},
     f"{COMPARE}--arms: unknown arm 'bogus' (known: {ARMS})"),
    ("compare-report-only-empty", "compare", ["--report_only", "--workdir={t}/empty"], {"empty": DIR},
     f"{COMPARE}--report_only: no arm of {ARMS} has metrics under {{t}}/empty/runs (run the comparison first)"),
    ("compare-zero-epochs", "compare", ["--epochs=0", "--workdir={t}/w"], {}, f"{COMPARE}--epochs=0: must be >= 1"),
    # --- study (absl)
    ("study-scale-contradicts", "study", ["--config=study:large", "--scale=small"], {},
     f"{STUDY}--scale=small contradicts the config's preset :large"),
    ("study-report-only-empty", "study", ["--config=study", "--report_only", "--workdir={t}/nostudy"], {},
     f"{STUDY}no study.json in {{t}}/nostudy (check --workdir; a rerun of the same command resumes)"),
    # --- tools.tpu_memory, "plan" (absl)
    ("plan-bad-slice", "plan", ["--config=bfcl:tiny", "--slice=v9-1"], {},
     f"{PLAN}--slice=v9-1: unknown slice 'v9-1'; known: {SLICES}"),
    # --- evaluation
    ("eval-missing-run-dir", "evaluation", ["--run_dir={t}/missing", "--out={t}/out"], {},
     f"{EVAL}--run_dir {{t}}/missing: no checkpoints/ in it (a GenEnv run's workdir)"),
    ("eval-out-occupied", "evaluation", ["--preset=tiny", "--out={t}/taken"], {"taken": "x"},
     f"{EVAL}--out {{t}}/taken: exists and is not a directory"),
    ("eval-out-under-a-file", "evaluation", ["--preset=tiny", "--out={t}/taken/out"], {"taken": "x"},
     f"{EVAL}--out {{t}}/taken/out: {{t}}/taken is not a directory"),
    ("eval-out-is-input", "evaluation", ["--model_dir={t}/m", "--out={t}/m"], {"m": DIR},
     f"{EVAL}--out {{t}}/m is also an input (--model_dir {{t}}/m); give another path"),
    ("eval-zero-tokens", "evaluation", ["--preset=tiny", "--max_new_tokens=0", "--out={t}/out"], {},
     f"{EVAL}--max_new_tokens=0: must be >= 1"),
    ("eval-adapter-without-base", "evaluation", ["--preset=tiny", "--adapter_dir={t}", "--out={t}/out"], {},
     f"{EVAL}--adapter_dir needs --model_dir (the base the adapters apply to)"),
    ("eval-unknown-domain", "evaluation", ["--preset=tiny", "--domain=nope", "--out={t}/out"], {},
     f"{EVAL}--domain 'nope': not a registered domain (alfworld, api_bank, bamboogle, bfcl, bfcl_multiturn, calc, "
     "travelplanner)"),
    ("eval-unknown-preset", "evaluation", ["--preset=huge", "--out={t}/out"], {},
     f"{EVAL}--preset 'huge': not a model preset (micro, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-14b, qwen2.5-32b, "
     "qwen2.5-3b, qwen2.5-72b, qwen2.5-7b, study-1m, study-30m, study-3m, tiny, tiny-512)"),
    ("eval-bad-split", "evaluation", ["--preset=tiny", "--split=bogus", "--out={t}/out"], {},
     f"{EVAL}argument --split: invalid choice: 'bogus' (choose from 'train', 'validation', 'test', 'all') "
     "(see --help)"),
    ("eval-no-out", "evaluation", ["--preset=tiny"], {},
     f"{EVAL}the following arguments are required: --out (see --help)"),
    ("eval-bad-domain-option", "evaluation", ["--preset=tiny", "--domain_option=x", "--out={t}/out"], {},
     f"{EVAL}--domain_option 'x': expected KEY=VALUE"),
    ("eval-unknown-domain-option", "evaluation", ["--preset=tiny", "--domain_option=nonsense=1", "--out={t}/out"],
     {}, f"{EVAL}--domain_option nonsense: bfcl has no such option (it has categories, split_fractions, split_salt, "
         "validation, grounding, mode, prompt_format, decoding)"),
    # --- domains.alfworld
    ("alfworld-nothing", "alfworld", [], {}, f"{ALFWORLD}give exactly one of --build and --data_dir (see --help)"),
    ("alfworld-missing-data-dir", "alfworld", ["--data_dir={t}/missing"], {},
     f"{ALFWORLD}--data_dir {{t}}/missing: {ALFWORLD_SPLITS}"),
    ("alfworld-data-dir-is-file", "alfworld", ["--data_dir={t}/taken"], {"taken": "x"},
     f"{ALFWORLD}--data_dir {{t}}/taken: {ALFWORLD_SPLITS}"),
    ("alfworld-build-exists", "alfworld", ["--build={t}/taken"], {"taken": "x"},
     f"{ALFWORLD}--build {{t}}/taken: already exists; give a new directory"),
    ("alfworld-negative-count", "alfworld", ["--build={t}/new", "--train=-1"], {}, f"{ALFWORLD}--train=-1: must be >= 0"),
    ("alfworld-binary-game", "alfworld", ["--data_dir={t}/alf"], {"alf": _alfworld_game(BINARY)},
     f"{ALFWORLD}{TRIAL}/traj_data.json: not UTF-8 text (invalid start byte at byte 0)"),
    ("alfworld-wrong-layout", "alfworld", ["--data_dir={t}/alf"], {"alf": _alfworld_game("[1, 2]")},
     f"{ALFWORLD}{TRIAL}/traj_data.json: expected a JSON object, not list"),
    ("alfworld-not-a-number", "alfworld", ["--build={t}/new", "--train=x"], {},
     f"{ALFWORLD}argument --train: invalid int value: 'x' (see --help)"),
    # --- domains.bfcl
    ("bfcl-nothing", "bfcl", [], {}, f"{BFCL}nothing to do: pass --stats and/or --check (see --help)"),
    ("bfcl-bad-fractions", "bfcl", ["--stats", "--train=-1"], {}, f"{BFCL}--train=-1.0: must lie in [0.0, 1.0]"),
    ("bfcl-fractions-not-summing-to-one", "bfcl", ["--stats", "--train=0.5"], {},
     f"{BFCL}--train 0.5 + --val 0.1 + --test 0.2 = 0.8; the split fractions must sum to 1"),
    ("bfcl-bad-validation", "bfcl", ["--stats", "--validation=bogus"], {},
     f"{BFCL}argument --validation: invalid choice: 'bogus' (choose from 'strict', 'lenient') (see --help)"),
    # --- domains.bfcl_multiturn, domains.api_bank
    ("bfcl_multiturn-nothing", "bfcl_multiturn", [], {},
     f"{BFCL_MT}nothing to do: pass --stats and/or --check (see --help)"),
    ("api_bank-no-data-dir", "api_bank", [], {},
     f"{API_BANK}the following arguments are required: --data_dir (see --help)"),
    ("api_bank-missing-data", "api_bank", ["--data_dir={t}/missing"], {},
     f"{API_BANK}--data_dir {{t}}/missing: no such directory (python -m genenv_jax.data.download api_bank --dest DIR)"),
    ("api_bank-not-a-download", "api_bank", ["--data_dir={t}"], {},
     f"{API_BANK}{{t}}/init_database: no such init_database directory (download API-Bank first)"),
    ("api_bank-bad-scoring", "api_bank", ["--data_dir={t}", "--scoring=lenient"], {},
     f"{API_BANK}argument --scoring: invalid choice: 'lenient' {SCORINGS}"),
    # --- domains.bamboogle
    ("bamboogle-missing-data", "bamboogle", ["--data_dir={t}/missing", "--items={t}/items.jsonl"],
     {"items.jsonl": '{"task_id": "test_0", "response": "x"}\n'},
     f"{BAMBOOGLE}--data_dir {{t}}/missing: no such directory (python -m genenv_jax.data.download bamboogle --dest DIR)"),
    ("bamboogle-missing-items", "bamboogle", [f"--data_dir={BAMBOOGLE_DATA}", "--items={t}/nope.jsonl"], {},
     f"{BAMBOOGLE}{{t}}/nope.jsonl: no such file or directory"),
    ("bamboogle-empty-items", "bamboogle", BAMBOOGLE_ITEMS, {"items.jsonl": ""},
     f"{BAMBOOGLE}{{t}}/items.jsonl: no items (an evaluation's items.jsonl has one JSON object a line)"),
    ("bamboogle-binary-items", "bamboogle", BAMBOOGLE_ITEMS, {"items.jsonl": BINARY},
     f"{BAMBOOGLE}{{t}}/items.jsonl: not UTF-8 text (invalid start byte at byte 0)"),
    ("bamboogle-truncated-items", "bamboogle", BAMBOOGLE_ITEMS, {"items.jsonl": '{"task_id": "test_0", "resp'},
     f"{BAMBOOGLE}{{t}}/items.jsonl:1: expected an object with task_id and response (Unterminated string starting "
     "at: line 1 column 23 (char 22))"),
    ("bamboogle-foreign-items", "bamboogle", BAMBOOGLE_ITEMS, {"items.jsonl": '{"task_id": "other_7", "response": "x"}\n'},
     f"{BAMBOOGLE}{{t}}/items.jsonl: bamboogle: responses for unknown task ids ['other_7'] (not in --data_dir "
     f"{BAMBOOGLE_DATA})"),
    ("bamboogle-no-items-flag", "bamboogle", [f"--data_dir={BAMBOOGLE_DATA}"], {},
     f"{BAMBOOGLE}the following arguments are required: --items (see --help)"),
    # --- domains.travelplanner.evaluate
    ("travelplanner-empty-plans", "travelplanner", ["--data_dir", str(TP_EVAL), "--plans", "{t}/plans.jsonl"],
     {"plans.jsonl": ""}, f"{TP}{{t}}/plans.jsonl: no plans (one JSON record {{idx, query, plan}} a line)"),
    ("travelplanner-binary-plans", "travelplanner", ["--data_dir", str(TP_EVAL), "--plans", "{t}/plans.jsonl"],
     {"plans.jsonl": BINARY}, f"{TP}{{t}}/plans.jsonl:1: not UTF-8 text (invalid start byte)"),
    ("travelplanner-truncated-plans", "travelplanner", ["--data_dir", str(TP_EVAL), "--plans", "{t}/plans.jsonl"],
     {"plans.jsonl": '{"idx": 1, "plan": ['}, f"{TP}{{t}}/plans.jsonl:1: not JSON (Expecting value)"),
    ("travelplanner-wrong-layout-plans", "travelplanner", ["--data_dir", str(TP_EVAL), "--plans", "{t}/plans.jsonl"],
     {"plans.jsonl": "[1, 2]\n"}, f"{TP}{{t}}/plans.jsonl:1: a record needs a 'plan' key"),
    ("travelplanner-missing-plans", "travelplanner", ["--data_dir", str(TP_EVAL), "--plans", "{t}/nope.jsonl"], {},
     f"{TP}{{t}}/nope.jsonl: no such file or directory"),
    ("travelplanner-details-is-plans", "travelplanner",
     ["--data_dir", str(TP_EVAL), "--plans", "{t}/plans.jsonl", "--details", "{t}/plans.jsonl"],
     {"plans.jsonl": (TP_EVAL / "plans.jsonl").read_text()},
     f"{TP}--details {{t}}/plans.jsonl is also an input (--plans {{t}}/plans.jsonl); give another path"),
    ("travelplanner-details-is-dir", "travelplanner", [*TP_FIXTURE, "--details", "{t}/adir"], {"adir": DIR},
     f"{TP}--details {{t}}/adir: is a directory, expected a file path"),
    ("travelplanner-truncated-database", "travelplanner",
     ["--data_dir={t}/tp", "--plans", str(TP_EVAL / "plans.jsonl"), "--queries", str(TP_EVAL / "queries.csv")],
     {"tp": _tp_database},
     f"{TP}{{t}}/tp/database/accommodations/clean_accommodations_2022.csv:4: a short row (truncated file?): 2 of 9 "
     "cells"),
    ("travelplanner-binary-queries", "travelplanner", [*TP_FIXTURE, "--queries", "{t}/q.csv"], {"q.csv": BINARY},
     f"{TP}{{t}}/q.csv:1: not UTF-8 text (invalid start byte)"),
    ("travelplanner-missing-split", "travelplanner", [*TP_FIXTURE, "--split", "test"], {},
     f"{TP}{TP_EVAL}/test.csv: no such file or directory"),
    ("travelplanner-bad-scoring", "travelplanner", [*TP_FIXTURE, "--scoring", "lenient"], {},
     f"{TP}argument --scoring: invalid choice: 'lenient' {SCORINGS}"),
    # --- data.download (every case fails before a byte is fetched)
    ("download-unknown-name", "download", ["nope", "--dest={t}/d"], {},
     f"{DOWNLOAD}argument name: invalid choice: 'nope' (choose from 'api_bank', 'bamboogle', 'travelplanner', "
     "'qwen2.5-coder-0.5b-instruct') (see --help)"),
    ("download-dest-occupied", "download", ["bamboogle", "--dest={t}/taken"], {"taken": "x"},
     f"{DOWNLOAD}--dest {{t}}/taken: exists and is not a directory"),
    ("download-no-dest", "download", ["bamboogle"], {},
     f"{DOWNLOAD}the following arguments are required: --dest (see --help)"),
    ("download-empty-manifest", "download", MANIFEST_ARGS, {"m.json": ""},
     f"{DOWNLOAD}{{t}}/m.json: not JSON (Expecting value at line 1 column 1)"),
    ("download-binary-manifest", "download", MANIFEST_ARGS, {"m.json": BINARY},
     f"{DOWNLOAD}{{t}}/m.json: not UTF-8 text (invalid start byte at byte 0)"),
    ("download-truncated-manifest", "download", MANIFEST_ARGS, {"m.json": '{"name": "x", "files": ['},
     f"{DOWNLOAD}{{t}}/m.json: not JSON (Expecting value at line 1 column 25)"),
    ("download-wrong-layout-manifest", "download", MANIFEST_ARGS, {"m.json": "[]"},
     f"{DOWNLOAD}{{t}}/m.json: expected a JSON object, not list"),
    ("download-missing-manifest", "download", ["bamboogle", "--dest={t}/d", "--manifest={t}/nope.json"], {},
     f"{DOWNLOAD}{{t}}/nope.json: no such file or directory"),
    # --- study.report
    ("report-missing", "study.report", ["{t}/nope"], {}, f"{REPORT}no study.json in {{t}}/nope"),
    ("report-binary-study-json", "study.report", ["{t}/s"], {"s": DIR, "s/study.json": BINARY},
     f"{REPORT}{{t}}/s/study.json: not UTF-8 text (invalid start byte at byte 0)"),
    ("report-truncated-study-json", "study.report", ["{t}/s"], {"s": DIR, "s/study.json": '{"runs": ['},
     f"{REPORT}{{t}}/s/study.json: not JSON (Expecting value at line 1 column 11)"),
    ("report-wrong-layout-study-json", "study.report", ["{t}/s"], {"s": DIR, "s/study.json": "[]"},
     f"{REPORT}{{t}}/s/study.json: expected a JSON object, not list"),
    # --- tpu/slurm.py (no --dry_run: a refused value must not write logs/<job>.sbatch either)
    ("slurm-bad-time", "slurm", ["--nodes", "1", "--workdir", "w", "--repo_dir={t}", "--time", "banana"], {},
     f"{SLURM}--time 'banana': expected minutes, HH:MM:SS or D-HH:MM:SS (sbatch's --time)"),
    ("slurm-too-many-gpus", "slurm", ["--nodes", "1", "--workdir", "w", "--repo_dir={t}", "--gpus_per_node",
                                      "100000"], {}, f"{SLURM}--gpus_per_node 100000: must lie in [1, 64]"),
    ("slurm-job-name-escapes", "slurm", ["--nodes", "1", "--workdir", "w", "--repo_dir={t}/repo", "--job_name",
                                         "../../x"], {},
     f"{SLURM}--job_name '../../x': letters, digits and _.+- only, not starting with a dot (it names "
     "logs/<job>.sbatch)"),
    ("slurm-zero-nodes", "slurm", ["--nodes", "0", "--workdir", "w", "--dry_run"], {},
     f"{SLURM}--nodes 0: must lie in [1, 10000]"),
    ("slurm-not-a-number", "slurm", ["--nodes", "x", "--workdir", "w"], {},
     f"{SLURM}argument --nodes: invalid int value: 'x' (see --help)"),
    ("slurm-no-workdir", "slurm", ["--nodes", "1"], {},
     f"{SLURM}the following arguments are required: --workdir (see --help)"),
    ("slurm-bad-env", "slurm", ["--nodes", "1", "--workdir", "w", "--env", "=x", "--dry_run"], {},
     f"{SLURM}--env '=x': expected NAME=VALUE"),
    # --- tpu/tpu.py
    ("tpu-negative-grace", "tpu", ["stop", "--name", "n", "--zone", "z", "--grace", "-10", "--dry_run"], {},
     f"{TPU}--grace -10: must be >= 0 (seconds between SIGTERM and SIGKILL) (see --help)"),
    ("tpu-negative-lines", "tpu", ["logs", "--name", "n", "--zone", "z", "--lines", "-1", "--dry_run"], {},
     f"{TPU}--lines -1: must be >= 0 (see --help)"),
    ("tpu-bad-accelerator", "tpu", ["create", "--name", "n", "--zone", "z", "--accelerator_type", "v5p",
                                    "--dry_run"], {},
     f"{TPU}--accelerator_type 'v5p': expected a type like v5p-8, v4-32 or v5litepod-16"),
    ("tpu-no-command", "tpu", [], {}, f"{TPU}the following arguments are required: command (see --help)"),
    ("tpu-unknown-command", "tpu", ["reboot"], {},
     f"{TPU}argument command: invalid choice: 'reboot' (choose from 'create', 'install', 'launch', 'logs', 'stop', "
     "'delete') (see --help)"),
    ("tpu-bad-gs-workdir", "tpu", ["launch", "--name", "n", "--zone", "z", "--workdir", "gs://", "--dry_run"], {},
     f"{TPU}--workdir 'gs://': expected gs://BUCKET/PATH or a path on the workers"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_the_exact_line_a_failure_and_writes_nothing(case, tmp_path, capsys, monkeypatch):
    check_case(case, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("command, flag", [("main", "--help"), ("fit_experience", "--helpfull"),
                                           ("compare", "--help")])
def test_absl_help_exits_zero(command, flag, tmp_path):
    code, out, err = run_process(command, [flag], tmp_path)
    assert code == 0 and "--" in out, err[-2000:]


@pytest.mark.parametrize("command", sorted(IN_PROCESS))
def test_argparse_help_exits_zero(command, capsys):
    with pytest.raises(SystemExit) as info:
        module(command).main(["--help"])
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
