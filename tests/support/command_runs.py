"""Running a command on a careless input and checking its refusal, shared by the two tables of
careless inputs (tests/integration/test_command_errors.py, issue #34; tests/integration/test_careless_input.py,
issue #47).

A case is `(id, command, argv, files, line)`: `argv` and `line` hold `{t}` for the case's directory,
`files` maps a name under it to text, bytes, `DIR` or a function of the directory that makes it.
argparse commands run in-process (`main(argv)`, SystemExit caught); absl commands run as one process
each, because absl's flags are process-global and `app.run` runs once per process. A refusal is
exactly `line` on stderr and nothing else, exit status 2, and every file under the case's directory
unchanged (sha256 before and after: nothing overwritten, nothing created)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from tests.support import FIXTURES, REPO

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
    "api_docs": "genenv_jax.tools.api_docs",
    "config_docs": "genenv_jax.tools.config_docs",
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

DIR = object()  # a `files` value: an empty directory

# The start of each command's error line (`<program>: error: `).
MAIN = "genenv_jax: error: "
EVAL = "python -m genenv_jax.evaluation: error: "
TP = "python -m genenv_jax.domains.travelplanner.evaluate: error: "
DOWNLOAD = "python -m genenv_jax.data.download: error: "


def make_files(root: Path, files: dict) -> None:
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


def module(name: str):
    """The module of an in-process command."""
    target = IN_PROCESS[name]
    if isinstance(target, str):
        return importlib.import_module(target)
    spec = importlib.util.spec_from_file_location(f"_command_{target.stem}", target)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def run_in_process(name: str, argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, stderr) of an in-process command."""
    try:
        code = module(name).main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def run_process(name: str, argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of an absl command run as its own process."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    env.pop("GENENV_JAX_TRACEBACK", None)
    proc = subprocess.run([sys.executable, *ABSL[name], *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def assert_refused(code, err: str, line: str, root: Path, before: dict) -> None:
    """Exit status 2, stderr exactly `line` (`{t}`: `root`), and nothing under `root` changed."""
    assert code == 2, err[-3000:]
    assert err.strip().splitlines() == [line.replace("{t}", str(root))], err[-3000:]
    assert snapshot(root) == before  # no input changed, nothing created


def check_case(case: tuple, root: Path, capsys, monkeypatch) -> None:
    """Runs a case in the directory `root` (its files made there, the working directory) and asserts
    its refusal (`assert_refused`)."""
    _, command, argv, files, line = case
    make_files(root, files)
    before = snapshot(root)
    monkeypatch.chdir(root)
    monkeypatch.delenv("GENENV_JAX_TRACEBACK", raising=False)
    argv = [a.replace("{t}", str(root)) for a in argv]
    if command in ABSL:
        code, _, err = run_process(command, argv, root)
    else:
        code, err = run_in_process(command, argv, capsys)
    assert_refused(code, err, line, root, before)
