"""Multi-host correctness on one machine: the loop and the evaluator as 2 and 4 JAX processes
(`jax.distributed` over 127.0.0.1, 2 / 1 virtual CPU devices each) give the results of one
process with 4 devices, including after every process is killed mid-run and the run resumed.
Four devices in all: the toy run's 8 GRPO rows still split over every device, and each process
compiles and steps fewer device programs than with 8 on 2 cores.
(The session's persistent compilation cache, set in conftest.py, spares the resumed run and the
processes of one run most recompiles.)"""

import json
import math
from pathlib import Path

import pytest

from tests.support import multihost_harness
from tests.support.loop_configs import TOY_TOKENIZER
from genenv_jax.workdir.pools import Pool

pytestmark = pytest.mark.slow

RUN = ("genenv_jax.main", "--config=tests/support/configs/toy_run.py")
TIMING = ("time/", "tokens_per_s", "env_steps_per_s")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The toy run as one process with 4 devices."""
    workdir = tmp_path_factory.mktemp("one_process") / "run"
    multihost_harness.run([*RUN, f"--workdir={workdir}"], 1, 4, workdir.parent / "logs")
    return workdir


def _metrics(workdir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(TIMING)} for row in rows]


def _assert_same_results(got: Path, want: Path, epochs: tuple[int, ...] = (0, 1)) -> None:
    """Same metrics (floats to 1e-4: cross-process reductions add in another order), the same
    pool records, one metrics row per epoch and one samples file per epoch (a single writer), over
    `epochs` (the reference run has two)."""
    got_rows, want_rows = _metrics(got), _metrics(want)
    assert [r["epoch"] for r in want_rows] == [0, 1]
    want_rows = [r for r in want_rows if r["epoch"] in epochs]
    assert [r["epoch"] for r in got_rows] == [r["epoch"] for r in want_rows] == list(epochs)
    for g, w in zip(got_rows, want_rows):
        assert sorted(g) == sorted(w)
        for key in w:
            if isinstance(w[key], float):
                assert math.isclose(g[key], w[key], rel_tol=1e-4, abs_tol=1e-7), (g["epoch"], key, g[key], w[key])
            else:
                assert g[key] == w[key], (g["epoch"], key)
    assert any(w["simulator/steps"] > 0 for w in want_rows)  # every stage ran
    for name in ("d_train", "d_env"):
        assert Pool(got / "pools", name, writable=False).records() == Pool(want / "pools", name,
                                                                           writable=False).records(epochs), name
    assert sorted(p.name for p in (got / "samples").iterdir()) == [f"epoch_{e:04d}.jsonl" for e in epochs]
    assert (got / "curves.png").exists() and (got / "summary.md").exists()


def test_two_processes_killed_after_a_checkpoint_resume_to_the_same_result(reference, tmp_path):
    """2 processes x 2 devices, FSDP across both, environments in a worker process of process 0:
    every process is SIGKILLed once epoch 0's checkpoint is on disk (mid-epoch 1), then the same
    command resumes, to 1 x 4's result."""
    workdir, logs = tmp_path / "run", tmp_path / "logs"
    args = [*RUN, f"--workdir={workdir}", "--config.episodes.env_workers=1"]
    procs = multihost_harness.start(args, 2, 2, logs)
    codes = multihost_harness.wait(procs, timeout=900, kill_when=lambda: (workdir / "checkpoints" / "0").is_dir())
    assert all(code != 0 for code in codes), f"the run ended before the kill: {codes}"
    assert not (workdir / "checkpoints" / "1").exists()
    multihost_harness.run(args, 2, 2, tmp_path / "logs_resumed")
    _assert_same_results(workdir, reference)
    assert "epoch 1:" in (tmp_path / "logs_resumed" / "process_0.log").read_text()
    assert "epoch 1:" not in (tmp_path / "logs_resumed" / "process_1.log").read_text()  # process 0 reports


def test_four_processes_equal_one(reference, tmp_path):
    """4 processes x 1 device, environments in a worker process of process 0, over the first
    epoch (every stage runs in it; the two-process test covers two epochs and a resume). The mesh
    is data-parallel here (params replicated): FSDP over 4 processes on 2 cores would gather
    weights over loopback TCP at every decode step (the two-process tests cover FSDP across hosts)."""
    workdir = tmp_path / "run"
    multihost_harness.run([*RUN, f"--workdir={workdir}", "--config.episodes.env_workers=1", "--config.mesh.data=-1",
                      "--config.mesh.fsdp=1", "--config.epochs=1"], 4, 1, tmp_path / "logs")
    _assert_same_results(workdir, reference, epochs=(0,))


def test_evaluation_on_two_processes_equals_one(reference, tmp_path):
    """The evaluator on the run's checkpointed agent (BFCL tasks, the run's own toy tokenizer;
    process 0 writes the report)."""
    args = ["genenv_jax.evaluation", f"--run_dir={reference}", "--domain=bfcl", "--split=test",
            "--categories=simple_python,multiple", "--max_per_category=2", "--max_new_tokens=8", "--no_progress"]
    multihost_harness.run([*args, f"--out={tmp_path / 'one'}"], 1, 4, tmp_path / "logs_one")
    multihost_harness.run([*args, f"--out={tmp_path / 'two'}"], 2, 2, tmp_path / "logs_two")
    one = (tmp_path / "one" / "items.jsonl").read_text().splitlines()
    two = (tmp_path / "two" / "items.jsonl").read_text().splitlines()
    assert len(one) == 4 and one == two
    config = json.loads((tmp_path / "two" / "results.json").read_text())["config"]
    assert config["epoch"] == 1 and config["tokenizer"] == str(TOY_TOKENIZER)
