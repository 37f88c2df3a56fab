"""notebooks/genenv_colab_tpu.ipynb: committed without outputs, and executed headless on a shrunken tiny preset.

The notebook runs in a Jupyter kernel of this interpreter (`sys.executable`, through a kernelspec written
into the test's tmp dir, so no kernel needs to be registered on the machine), on CPU, where its
parameters cell falls back to the tiny preset, on one CPU device. Two environment variables shrink the run
(see the notebook's parameters cell): one epoch after a 2-step warm-start, 2 seeds, 2 rollouts, short
generations, and an evaluation of 2 held-out seeds. The fast tests check the committed file and the
parameters / overrides handling of its cells without a kernel. docs/colab.md has the measured time.
"""

import ast
import json
import os
import re
import sys

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from tests.support import REPO

NOTEBOOK = REPO / "notebooks" / "genenv_colab_tpu.ipynb"
KERNEL_NAME = "genenv-test-python"

SHRINK = {  # config overrides on top of bfcl:tiny (JSON of dotted keys, as the notebook reads them)
    "warmstart.agent_steps": 2, "warmstart.simulator_steps": 2, "warmstart.batch_size": 2,
    "domain.max_seeds": 2, "seeds_per_epoch": 2, "rollouts_per_task": 2, "replay.tasks_per_epoch": 2,
    "agent.train.tasks_per_step": 2, "simulator.train.tasks_per_step": 2,
    "agent.sampling.max_new_tokens": 8, "simulator.sampling.max_new_tokens": 32,
    "log.progress_bars": False, "log.samples_per_epoch": 2,
}


def _read():
    return nbformat.read(NOTEBOOK, as_version=4)


def _text(cell) -> str:
    """A code cell's stream and text/plain outputs, joined."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def _cell(nb, marker: str):
    matches = [c for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith(marker)]
    assert len(matches) == 1, f"expected one code cell starting with {marker!r}"
    return matches[0]


def test_notebook_is_committed_clean():
    nb = _read()
    nbformat.validate(nb)
    assert nb.nbformat == 4
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "clear the outputs before committing"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "PRESET" in tagged[0].source and "GENENV_NOTEBOOK_OVERRIDES" in tagged[0].source
    assert 'MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"' in tagged[0].source
    for cell in code:
        compile(cell.source, "<cell>", "exec")  # every cell is plain Python (no shell or magic lines)


def _exec_parameters_cell(monkeypatch, params: dict, overrides: dict) -> dict:
    monkeypatch.setenv("GENENV_NOTEBOOK_PARAMS", json.dumps(params))
    monkeypatch.setenv("GENENV_NOTEBOOK_OVERRIDES", json.dumps(overrides))
    namespace: dict = {}
    exec(_cell(_read(), "# 2. Parameters").source, namespace)
    return namespace


def test_parameters_from_the_environment_are_checked(monkeypatch):
    ns = _exec_parameters_cell(monkeypatch, {"EPOCHS": 1, "WORKDIR": "/tmp/x"}, {"seeds_per_epoch": 3})
    assert (ns["EPOCHS"], ns["WORKDIR"], ns["PRESET"]) == (1, "/tmp/x", "auto")
    assert ns["OVERRIDES"] == {"seeds_per_epoch": 3}
    with pytest.raises(TypeError, match="EPOCHS='2' must be of type int"):
        _exec_parameters_cell(monkeypatch, {"EPOCHS": "2"}, {})
    with pytest.raises(KeyError, match="'os' is not a parameter"):
        _exec_parameters_cell(monkeypatch, {"os": 1}, {})
    with pytest.raises(KeyError, match="'NOPE' is not a parameter"):
        _exec_parameters_cell(monkeypatch, {"NOPE": 1}, {})


def test_config_overrides_are_typed_and_known():
    """The run cell's `apply_overrides`, taken from the notebook: ConfigDict refuses bad keys and types."""
    from ml_collections import ConfigDict

    from genenv_jax.configs import bfcl

    tree = ast.parse(_cell(_read(), "# 5.").source)
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "apply_overrides"]
    namespace = {"ConfigDict": ConfigDict}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "<cell 5>", "exec"), namespace)
    apply_overrides = namespace["apply_overrides"]

    config = bfcl.get_config("tiny")
    apply_overrides(config, {"warmstart.agent_steps": 2, "agent.optimizer.learning_rate": 1,
                             "domain.options.categories": ["simple_python", "multiple"]})
    assert config.warmstart.agent_steps == 2 and config.agent.optimizer.learning_rate == 1.0
    assert config.domain.options.categories == ("simple_python", "multiple")
    with pytest.raises(KeyError, match="no key 'agent_stepz'"):
        apply_overrides(config, {"warmstart.agent_stepz": 2})
    with pytest.raises(KeyError, match="no key 'nope'"):
        apply_overrides(config, {"nope.x": 2})
    with pytest.raises(TypeError):
        apply_overrides(config, {"epochs": "3"})
    with pytest.raises(TypeError):
        apply_overrides(config, {"warmstart.enabled": 1.5})


@pytest.mark.slow
def test_notebook_executes_on_the_tiny_preset(tmp_path, monkeypatch):
    workdir = tmp_path / "run"
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    # One CPU device, like a one-chip Colab TPU: 8 virtual devices (the suite's default) compile more slowly.
    monkeypatch.setenv("XLA_FLAGS", re.sub(r"--xla_force_host_platform_device_count=\S+", "",
                                           os.environ.get("XLA_FLAGS", "")).strip())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))  # connection files
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # the kernel's history database
    monkeypatch.setenv("GENENV_NOTEBOOK_PARAMS", json.dumps(
        {"EPOCHS": 1, "WORKDIR": str(workdir), "EVAL_MAX_PER_CATEGORY": 2, "EVAL_MAX_NEW_TOKENS": 8}))
    monkeypatch.setenv("GENENV_NOTEBOOK_OVERRIDES", json.dumps(SHRINK))

    kernels = tmp_path / "kernels" / KERNEL_NAME
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "genenv_jax test", "language": "python"}))
    km = KernelManager(kernel_name=KERNEL_NAME,
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]))

    nb = _read()
    client = NotebookClient(nb, km=km, timeout=600, kernel_name=KERNEL_NAME,
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()  # CellExecutionError (with the cell's traceback) if any cell fails
    finally:
        nbformat.write(nb, tmp_path / "executed.ipynb")  # kept for a look when something fails

    install = _text(_cell(nb, "# 1. Install"))
    assert install.count("already installed") == 3 and "pip install" not in install, install
    assert "falling back to the tiny preset: no accelerator" in _text(_cell(nb, "# 4."))
    assert "backend cpu, 1 device(s)" in _text(_cell(nb, "# 3. Devices"))

    # The run: a warm-start row and one row per epoch in metrics.jsonl, and a checkpoint.
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["epoch"] for r in rows] == [-1, 0]
    assert isinstance(rows[1]["agent/loss"], float) and rows[1]["replayed_tasks"] == 2
    assert (workdir / "checkpoints").is_dir()
    assert "1 epoch(s) in" in _text(_cell(nb, "# 5."))

    # The curves: a PNG displayed by the plot cell.
    plot = _cell(nb, "# 6.")
    images = [o for o in plot.outputs if o["output_type"] == "display_data" and "image/png" in o["data"]]
    assert len(images) == 1 and len(images[0]["data"]["image/png"]) > 1000
    assert (workdir / "notebook_curves.png").stat().st_size > 1000
    assert re.search(r"agent/loss: epoch 0: -?\d", _text(plot))

    # The evaluation: per-category accuracy of the final checkpoint on 2 held-out seeds.
    evaluation = _text(_cell(nb, "# 7."))
    assert re.search(r"simple_python: accuracy \d\.\d{3} \(\d+/2\)", evaluation), evaluation
    assert re.search(r"overall: \d\.\d{3}", evaluation), evaluation
    report = json.loads((workdir / "eval" / "results.json").read_text())
    assert report["per_category"]["simple_python"]["n"] == 2
    assert report["config"]["split"] == "test" and report["config"]["epoch"] == 0
