"""Careless and hostile inputs, per command (issue #47): each must end with exactly the expected
line `<program>: error: <cause>` naming the flag, file, key or line, exit status 2, and every file
under the case's directory unchanged (sha256 before and after: nothing overwritten, nothing
created).

The tables hold the exact line; `{t}` stands for the case's directory. argparse commands run
in-process (`main(argv)`); absl commands (main, the TPU memory planner) run as one process each,
because absl's flags are process-global (tests/support/command_runs.py, shared with test_command_errors.py).
Values read from user files (a model's config.json, a
PEFT adapter config) are also checked in a table of their own, through the function that reads
them. Every case fails before any model is loaded or any byte is downloaded."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.command_runs import DIR, DOWNLOAD, EVAL, MAIN, TP, TP_EVAL, check_case, run_in_process, snapshot

API_DOCS = "python -m genenv_jax.tools.api_docs: error: "
CONFIG_DOCS = "python -m genenv_jax.tools.config_docs: error: "
ACCOMMODATIONS = "tp/database/accommodations/clean_accommodations_2022.csv"


def _tiny_model_config(**changes) -> str:
    """The tiny preset's config.json with `changes` (a value of None removes the key)."""
    from genenv_jax.models import preset

    hf = preset("tiny").to_hf_dict()
    for key, value in changes.items():
        if value is None:
            hf.pop(key, None)
        else:
            hf[key] = value
    return json.dumps(hf)


def _travelplanner(edit=None):
    """A copy of the TravelPlanner fixture (database, plans, queries) under {t}/tp, `edit(root)` applied."""
    def make(root: Path) -> None:
        shutil.copytree(TP_EVAL, root / "tp")
        if edit is not None:
            edit(root / "tp")
    return make


def _queries_with(column: str, value: str):
    def edit(tp: Path) -> None:
        import csv

        with (tp / "queries.csv").open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        rows[0][column] = value
        with (tp / "queries.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return edit


def _header_only(tp: Path) -> None:
    table = tp / "database" / "accommodations" / "clean_accommodations_2022.csv"
    table.write_text(table.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")


def _not_utf8(tp: Path) -> None:
    table = tp / "database" / "accommodations" / "clean_accommodations_2022.csv"
    table.write_bytes(table.read_bytes() + b"\xff\xfe broken\n")


def _model_with_config(**changes):
    """{t}/m: a config.json with `changes` and a model.safetensors that opens (the config is read first)."""
    def make(root: Path) -> None:
        from safetensors.numpy import save_file

        (root / "m").mkdir()
        (root / "m" / "config.json").write_text(_tiny_model_config(**changes))
        save_file({"model.norm.weight": np.ones(64, np.float32)}, str(root / "m" / "model.safetensors"))
    return make


TP_ARGS = ["--data_dir={t}/tp", "--plans={t}/tp/plans.jsonl", "--queries={t}/tp/queries.csv"]
MODEL = {"m/config.json": _tiny_model_config()}

# (id, command, argv, files, the exact error line)
CASES = [
    # --- domains.travelplanner.evaluate: outputs never land on inputs; values checked where they enter
    ("tp-details-inside-the-database", "travelplanner", [*TP_ARGS, f"--details={{t}}/{ACCOMMODATIONS}"],
     {"tp": _travelplanner()},
     f"{TP}--details {{t}}/{ACCOMMODATIONS} lies inside an input (--data_dir {{t}}/tp); give a path outside it"),
    ("tp-details-is-the-queries", "travelplanner", [*TP_ARGS, "--details={t}/tp/queries.csv"],
     {"tp": _travelplanner()},
     f"{TP}--details {{t}}/tp/queries.csv is also an input (--queries {{t}}/tp/queries.csv); give another path"),
    ("tp-query-constraints-a-list", "travelplanner", TP_ARGS, {"tp": _travelplanner(_queries_with(
        "local_constraint", "['a', 'b']"))},
     f"{TP}{{t}}/tp/queries.csv: row 1 (for {{t}}/tp/plans.jsonl:1): local_constraint is a list; expected a dict "
     "of constraints (house rule, cuisine, room type, transportation)"),
    ("tp-query-dates-a-dict", "travelplanner", TP_ARGS, {"tp": _travelplanner(_queries_with("date", "{'a': 1}"))},
     f"{TP}{{t}}/tp/queries.csv: row 1 (for {{t}}/tp/plans.jsonl:1): date is dict {{'a': 1}}; expected a list of "
     "dates ('YYYY-MM-DD' texts)"),
    ("tp-plans-deeply-nested", "travelplanner", ["--data_dir={t}/tp", "--plans={t}/brackets.jsonl"],
     {"tp": _travelplanner(), "brackets.jsonl": "[" * 5_000_000 + "\n"},
     f"{TP}{{t}}/brackets.jsonl:1: not JSON (nested too deeply)"),
    ("tp-header-only-table", "travelplanner", TP_ARGS, {"tp": _travelplanner(_header_only)},
     f"{TP}{{t}}/{ACCOMMODATIONS}: no rows, only a header; the table cannot be empty"),
    ("tp-non-utf8-table", "travelplanner", TP_ARGS, {"tp": _travelplanner(_not_utf8)},
     f"{TP}{{t}}/{ACCOMMODATIONS}: not UTF-8 text (invalid start byte)"),
    # --- evaluation: --out never inside the model, a run's checkpoints or a data dir; flags named
    ("eval-out-inside-the-model", "evaluation", ["--model_dir={t}/m", "--out={t}/m/eval"], MODEL,
     f"{EVAL}--out {{t}}/m/eval lies inside an input (--model_dir {{t}}/m); give a path outside it"),
    ("eval-out-inside-the-checkpoints", "evaluation", ["--run_dir={t}/run", "--out={t}/run/checkpoints/eval"],
     {"run/checkpoints/5/x": "x"},
     f"{EVAL}--out {{t}}/run/checkpoints/eval lies inside an input (--run_dir's checkpoints {{t}}/run/checkpoints); "
     "give a path outside it"),
    ("eval-out-is-the-run", "evaluation", ["--run_dir={t}/run", "--out={t}/run"], {"run/checkpoints/5/x": "x"},
     f"{EVAL}--out {{t}}/run is --run_dir itself; give a directory of its own (e.g. {{t}}/run/eval)"),
    ("eval-out-inside-the-data", "evaluation", ["--preset=tiny", "--domain=api_bank",
                                                "--domain_option=data_dir={t}/data", "--out={t}/data/eval"],
     {"data/x.json": "{}"},
     f"{EVAL}--out {{t}}/data/eval lies inside an input (--domain_option data_dir {{t}}/data); give a path outside it"),
    ("eval-no-such-epoch", "evaluation", ["--run_dir={t}/run", "--epoch=3", "--out={t}/out"],
     {"run/checkpoints": DIR},
     f"{EVAL}--epoch=3: {{t}}/run has no checkpoint of that epoch (it has none)"),
    ("eval-negative-seed", "evaluation", ["--preset=tiny", "--seed=-1", "--out={t}/out"], {},
     f"{EVAL}--seed=-1: must be >= 0"),
    ("eval-negative-sample-seed", "evaluation", ["--preset=tiny", "--sample_seed=-3", "--out={t}/out"], {},
     f"{EVAL}--sample_seed=-3: must be >= 0"),
    ("eval-processes-without-coordinator", "evaluation", ["--preset=tiny", "--num_processes=2", "--out={t}/out"], {},
     f"{EVAL}--num_processes=2 needs --coordinator_address=HOST:PORT (process 0's address); without it JAX runs "
     "one process"),
    ("eval-coordinator-not-host-port", "evaluation", ["--preset=tiny", "--coordinator_address=nohost",
                                                      "--num_processes=2", "--process_id=1", "--out={t}/out"], {},
     f"{EVAL}--coordinator_address=nohost: expected HOST:PORT (e.g. 10.0.0.2:8476)"),
    ("eval-process-id-out-of-range", "evaluation", ["--preset=tiny", "--coordinator_address=localhost:1234",
                                                    "--num_processes=2", "--process_id=2", "--out={t}/out"], {},
     f"{EVAL}--process_id=2: must lie in [0, 2) (--num_processes=2)"),
    ("eval-infinite-coordinator-timeout", "evaluation", ["--preset=tiny", "--coordinator_timeout_s=inf",
                                                         "--out={t}/out"], {},
     f"{EVAL}--coordinator_timeout_s=inf: must be a finite number > 0"),
    ("eval-nan-model-config", "evaluation", ["--model_dir={t}/m", "--out={t}/out"],
     {"m": _model_with_config(rms_norm_eps=float("nan"))},
     f"{EVAL}{{t}}/m/config.json: rms_norm_eps=nan: must be a finite number"),
    # --- data.download: --dest never inside its own inputs
    ("download-dest-inside-find-links", "download", ["qwen2.5-coder-0.5b-instruct", "--dest={t}/wheels/model",
                                                     "--find_links={t}/wheels"], {"wheels/a.whl": "x"},
     f"{DOWNLOAD}--dest {{t}}/wheels/model lies inside an input (--find_links {{t}}/wheels); give a path outside it"),
    # --- tpu/tpu.py, tpu/slurm.py: conflicting or empty values, before any command is printed
    ("tpu-workdir-twice", "tpu", ["launch", "--name=n", "--zone=z", "--workdir=a", "--workdir=b", "--dry_run"], {},
     "tpu.py launch: error: --workdir given twice ('a' and 'b'); give it once (see --help)"),
    ("tpu-empty-zone", "tpu", ["launch", "--name=n", "--zone=", "--workdir=a", "--dry_run"], {},
     "tpu.py: error: --zone is empty; give a value"),
    ("tpu-empty-remote-dir", "tpu", ["stop", "--name=n", "--zone=z", "--remote_dir= ", "--dry_run"], {},
     "tpu.py: error: --remote_dir is empty; give a value"),
    ("tpu-model-copied-then-overridden", "tpu", ["launch", "--name=n", "--zone=z", "--workdir=a",
                                                 "--model_gcs=gs://b/m", "--dry_run", "--",
                                                 "--config.agent.model_dir=/other"], {},
     "tpu.py: error: --config.agent.model_dir=/other after -- would override the copy of --model_gcs gs://b/m; "
     "give one of them"),
    ("tpu-model-local-without-gcs", "tpu", ["launch", "--name=n", "--zone=z", "--workdir=a", "--model_local=/m",
                                            "--dry_run"], {},
     "tpu.py: error: --model_local is where --model_gcs is copied to; give --model_gcs too (or pass -- "
     "--config.agent.model_dir=PATH for a model already on the workers)"),
    ("tpu-workdir-after-dashes", "tpu", ["launch", "--name=n", "--zone=z", "--workdir=a", "--dry_run", "--",
                                         "--workdir=b"], {},
     "tpu.py: error: --workdir=b after -- contradicts launch's own --workdir; give --workdir once, before --"),
    ("tpu-slice-too-large", "tpu", ["create", "--name=n", "--zone=z", "--accelerator_type=v5litepod-1024",
                                    "--dry_run"], {},
     "tpu.py: error: --accelerator_type 'v5litepod-1024': no v5litepod slice has 1024 (the largest is "
     "v5litepod-256)"),
    ("slurm-too-many-nodes", "slurm", ["--nodes=100000", "--workdir=w", "--repo_dir={t}"], {},
     "slurm.py: error: --nodes 100000: must lie in [1, 10000] (more nodes than any cluster has)"),
    ("slurm-workdir-twice", "slurm", ["--nodes=1", "--workdir=w", "--workdir=v", "--repo_dir={t}"], {},
     "slurm.py: error: --workdir given twice ('w' and 'v'); give it once (see --help)"),
    ("slurm-empty-workdir", "slurm", ["--nodes=1", "--workdir=", "--repo_dir={t}"], {},
     "slurm.py: error: --workdir is empty; give a value"),
    # --- tools.api_docs: --out checked before the page is rendered, the old page kept
    ("api-docs-out-in-a-missing-directory", "api_docs", ["--out={t}/missing/api.md"], {},
     f"{API_DOCS}--out {{t}}/missing/api.md: no directory {{t}}/missing; create it first"),
    ("api-docs-out-is-a-directory", "api_docs", ["--out={t}/docs"], {"docs/api.md": "old page\n"},
     f"{API_DOCS}--out {{t}}/docs: is a directory, expected a file path"),
    ("api-docs-out-under-a-file", "api_docs", ["--out={t}/api.md/api.md"], {"api.md": "old page\n"},
     f"{API_DOCS}--out {{t}}/api.md/api.md: {{t}}/api.md is not a directory"),
    ("api-docs-empty-out", "api_docs", ["--out="], {}, f"{API_DOCS}--out is empty; give a value"),
    ("api-docs-unknown-flag", "api_docs", ["--out={t}/api.md", "--bogus"], {"api.md": "old page\n"},
     f"{API_DOCS}unrecognized arguments: --bogus (see --help)"),
    # --- tools.config_docs: the same command line as api_docs
    ("config-docs-out-in-a-missing-directory", "config_docs", ["--out={t}/missing/config.md"], {},
     f"{CONFIG_DOCS}--out {{t}}/missing/config.md: no directory {{t}}/missing; create it first"),
    ("config-docs-out-is-a-directory", "config_docs", ["--out={t}/docs"], {"docs/config.md": "old page\n"},
     f"{CONFIG_DOCS}--out {{t}}/docs: is a directory, expected a file path"),
    ("config-docs-unknown-flag", "config_docs", ["--out={t}/config.md", "--bogus"], {"config.md": "old page\n"},
     f"{CONFIG_DOCS}unrecognized arguments: --bogus (see --help)"),
]

KEYERROR_CONFIG = "import ml_collections\n\n\ndef get_config():\n    d = {}\n    return ml_collections.ConfigDict({'x': d['y']})\n"
# absl commands, one process each: (id, command, argv, files, the exact error line)
ABSL_CASES = [
    ("main-workdir-is-the-model", "main", ["--config=bfcl:tiny", "--config.agent.model_dir={t}/m", "--workdir={t}/m"],
     MODEL, f"{MAIN}--workdir {{t}}/m is also an input (config.agent.model_dir {{t}}/m); give another path"),
    ("main-processes-without-coordinator", "main", ["--config=bfcl:tiny", "--num_processes=2", "--workdir={t}/w"], {},
     f"{MAIN}--num_processes=2 needs --coordinator_address=HOST:PORT (process 0's address); without it JAX runs "
     "one process"),
    ("main-config-with-a-space", "main", ["--config", "bfcl:tiny", "--config.epochs=0", "--workdir={t}/w"], {},
     f"{MAIN}config.epochs=0: must be >= 1"),
    ("main-keyerror-in-get_config", "main", ["--config={t}/keyerror.py", "--config.x=1"],
     {"keyerror.py": KEYERROR_CONFIG}, f"{MAIN}cannot load the config: {{t}}/keyerror.py:6: KeyError: 'y'"),
    ("main-unknown-domain", "main", ["--config=bfcl:tiny", "--config.domain.name=bogus", "--workdir={t}/w"], {},
     f"{MAIN}config.domain.name='bogus': not a registered domain (alfworld, api_bank, bamboogle, bfcl, "
     "bfcl_multiturn, calc, travelplanner)"),
    ("main-negative-seed", "main", ["--config=bfcl:tiny", "--config.seed=-1", "--workdir={t}/w"], {},
     f"{MAIN}config.seed=-1: must be >= 0"),
    ("probe-out-inside-the-model", "probe", ["--config=bfcl:tiny", "--config.agent.model_dir={t}/m",
                                             "--out={t}/m/probe"], MODEL,
     "genenv_jax.tools.simulator_probe: error: --out {t}/m/probe lies inside an input (config.agent.model_dir "
     "{t}/m); give a path outside it"),
    ("export-run-dir-without-checkpoints", "export", ["--run_dir={t}/r", "--policy=agent", "--format=hf",
                                                      "--out={t}/out"], {"r/metrics.jsonl": "{}\n"},
     "genenv_jax.export: error: --run_dir {t}/r: no checkpoints/ in it (a GenEnv run's workdir)"),
    ("calc-report-without-a-study", "calc_report", ["{t}/r"], {"r/metrics.jsonl": "{}\n"},
     "genenv_jax.study.calc_report: error: no study.json in {t}/r"),
    ("plan-infinite-hbm", "plan", ["--config=bfcl:tiny", "--slice=v5p-8", "--hbm_gib=inf"], {},
     "genenv_jax.tools.tpu_memory: error: --hbm_gib=inf must be a finite number > 0"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_careless_input_is_the_exact_line_and_changes_nothing(case, tmp_path, capsys, monkeypatch):
    check_case(case, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("case", ABSL_CASES, ids=[c[0] for c in ABSL_CASES])
def test_an_absl_command_gives_the_exact_line_and_changes_nothing(case, tmp_path, capsys, monkeypatch):
    check_case(case, tmp_path, capsys, monkeypatch)


def test_api_docs_replaces_its_page_only_once_the_new_one_is_rendered(tmp_path, monkeypatch, capsys):
    """A package without `__all__` fails the rendering: the page already at --out stays as it was
    (it used to be opened for writing first), and a page rendered whole replaces it, no temp file left."""
    from genenv_jax.tools import api_docs

    page = tmp_path / "api.md"
    page.write_text("old page\n")
    monkeypatch.setattr(api_docs, "packages", lambda: ["genenv_jax.core", "tests.support.command_runs"])
    assert api_docs.main([f"--out={page}"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{API_DOCS}tests.support.command_runs has no __all__: declare its public names (objects or modules) in "
        "tests.support.command_runs/__init__.py"]
    assert page.read_text() == "old page\n" and [p.name for p in tmp_path.iterdir()] == ["api.md"]
    monkeypatch.setattr(api_docs, "packages", lambda: ["genenv_jax.core"])
    assert api_docs.main([f"--out={page}"]) == 0
    assert page.read_text() == api_docs.render() and "## `genenv_jax.core`" in page.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["api.md"]


def test_an_unreachable_coordinator_fails_in_the_stated_time_naming_the_address(tmp_path, capsys):
    """JAX waits 300 s for a coordinator and then aborts the process with a C++ stack dump; the
    evaluation now gives up after --coordinator_timeout_s with one line naming the address."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    started = time.monotonic()
    code, err = run_in_process("evaluation", ["--preset=tiny", f"--coordinator_address={address}", "--num_processes=2",
                                              "--process_id=1", "--coordinator_timeout_s=1.5",
                                              f"--out={tmp_path}/out"], capsys)
    assert 1.5 <= time.monotonic() - started < 10
    assert code == 2
    assert err.strip().splitlines() == [
        f"{EVAL}--coordinator_address={address}: no coordinator reachable within 1.5 s (connection refused); "
        "is process 0 running there? (--coordinator_timeout_s waits longer)"]
    assert not (tmp_path / "out").exists()


# ----- values read from user files, through the function that reads them: (id, file, exact message)
MODEL_CONFIGS = [
    ("nan-eps", {"rms_norm_eps": float("nan")}, "rms_norm_eps=nan: must be a finite number"),
    ("eps-out-of-range", {"rms_norm_eps": 2.0}, "rms_norm_eps=2.0: must be a finite number in (0.0, 1.0)"),
    ("negative-rope-theta", {"rope_theta": -1}, "rope_theta=-1.0: must be a finite number in (0.0, inf)"),
    ("infinite-rope-theta", {"rope_theta": float("inf")}, "rope_theta=inf: must be a finite number"),
    ("no-vocab-size", {"vocab_size": None}, "missing required key 'vocab_size'"),
    ("vocab-size-a-string", {"vocab_size": "100"}, "vocab_size='100': must be an integer"),
    ("tie-a-string", {"tie_word_embeddings": "false"}, "tie_word_embeddings='false': must be true or false"),
    ("zero-heads", {"num_attention_heads": 0}, "num_attention_heads must be positive, got 0"),
    ("zero-positions", {"max_position_embeddings": 0}, "max_position_embeddings must be positive, got 0"),
]


@pytest.mark.parametrize("case", MODEL_CONFIGS, ids=[c[0] for c in MODEL_CONFIGS])
def test_a_model_config_value_is_checked_where_it_enters(case, tmp_path):
    from genenv_jax.models.config import ModelConfig

    _, changes, message = case
    (tmp_path / "config.json").write_text(_tiny_model_config(**changes))
    with pytest.raises(ValueError) as info:
        ModelConfig.from_hf(tmp_path)
    assert str(info.value) == f"{tmp_path}/config.json: {message}"


def test_a_model_config_that_is_not_utf8_names_its_file(tmp_path):
    from genenv_jax.models.config import ModelConfig

    (tmp_path / "config.json").write_bytes(b'{"vocab_size": "\xff"}')
    with pytest.raises(ValueError, match=r"config\.json: not UTF-8 text \(byte 16\)$"):
        ModelConfig.from_hf(tmp_path)


PEFT = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
ADAPTER_CONFIGS = [
    ("no-rank", {"r": None}, "missing required key 'r'"),
    ("rank-a-string", {"r": "4"}, "r='4': must be an integer"),
    ("zero-rank", {"r": 0}, "r=0: must be >= 1 (the adapters' rank)"),
    ("nan-alpha", {"lora_alpha": float("nan")}, "lora_alpha=nan: must be a finite number"),
    ("negative-alpha", {"lora_alpha": -1}, "lora_alpha=-1.0: must be a finite number > 0"),
    ("dropout-one", {"lora_dropout": 1.0}, "lora_dropout=1.0: must lie in [0, 1)"),
    ("modules-a-regex", {"target_modules": "q_proj"},
     "target_modules='q_proj': expected a list of projection names ['down_proj', 'gate_proj', 'k_proj', 'o_proj', "
     "'q_proj', 'up_proj', 'v_proj'] or \"all-linear\""),
    ("not-an-object", [1, 2], "must hold a JSON object, not list"),
]


def _adapter_dir(root: Path, config) -> Path:
    from safetensors.numpy import save_file

    from genenv_jax.models.peft_io import CONFIG_FILE, WEIGHTS_FILE

    root.mkdir(parents=True, exist_ok=True)
    (root / CONFIG_FILE).write_text(json.dumps(config))
    save_file({"unused": np.zeros(1, np.float32)}, str(root / WEIGHTS_FILE))
    return root


@pytest.mark.parametrize("case", ADAPTER_CONFIGS, ids=[c[0] for c in ADAPTER_CONFIGS])
def test_an_adapter_config_value_is_checked_where_it_enters(case, tmp_path):
    from genenv_jax.models import preset
    from genenv_jax.models.peft_io import load_peft_adapters

    _, changes, message = case
    config = changes if isinstance(changes, list) else {k: v for k, v in {**PEFT, **changes}.items() if v is not None}
    directory = _adapter_dir(tmp_path / "adapter", config)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError) as info:
        load_peft_adapters(directory, preset("tiny"))
    assert str(info.value) == f"{directory}/adapter_config.json: {message}"
    assert snapshot(tmp_path) == before


def test_all_linear_adapts_every_projection_and_is_not_split_into_characters(tmp_path):
    """PEFT's `target_modules: "all-linear"` used to be iterated as a string (a, l, l, ...)."""
    from genenv_jax.models import lora, preset
    from genenv_jax.models.peft_io import load_peft_adapters, save_peft_adapters

    import jax

    cfg = preset("tiny")
    settings = lora.LoRAConfig(rank=2, alpha=4.0)
    adapters = lora.init_adapters(cfg, settings, jax.random.key(0))
    directory = save_peft_adapters(tmp_path / "a", cfg, adapters, settings)
    config = json.loads((directory / "adapter_config.json").read_text())
    config["target_modules"] = "all-linear"
    (directory / "adapter_config.json").write_text(json.dumps(config))
    loaded, _ = load_peft_adapters(directory, cfg)
    assert loaded.targets == lora.TARGETS


@pytest.mark.parametrize("domain, key, value, expected", [
    ("bfcl", "categories", "simple_python", ("simple_python",)),
    ("bfcl", "categories", "simple_python, multiple", ("simple_python", "multiple")),
    ("bfcl_multiturn", "categories", "multi_turn_base", ("multi_turn_base",)),
    ("travelplanner", "levels", "easy", ("easy",)),
])
def test_a_list_option_given_as_a_string_is_split_at_commas_not_into_characters(domain, key, value, expected):
    from genenv_jax.domains import get_domain

    built = get_domain(domain, **{key: value})
    assert getattr(built, key) == expected


def test_a_list_option_of_another_kind_names_the_option():
    from genenv_jax.domains import get_domain

    with pytest.raises(ValueError, match=r"^bfcl: categories=7: expected a list of names or a comma-separated"):
        get_domain("bfcl", categories=7)
    with pytest.raises(ValueError, match=r"^unknown domain 'bogus'"):
        get_domain("bogus")
