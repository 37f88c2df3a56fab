"""tpu/tpu.py and tpu/slurm.py: the commands they print, and the shell scripts they hand to the
workers or to sbatch, run here in bash with fake `gcloud`, `curl`, `scontrol` and `srun`."""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO, xla_flags

TPU = REPO / "tpu" / "tpu.py"
SLURM = REPO / "tpu" / "slurm.py"
HOSTILE = "runs/x; rm -rf /"


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_bin(tmp_path):
    """A PATH directory whose `gcloud` records that it was called: a dry run must never call it."""
    bin_dir = tmp_path / "bin"
    write_exe(bin_dir / "gcloud", f'#!/bin/sh\necho "$@" >> {tmp_path}/gcloud_called\nexit 99\n')
    return bin_dir


def clean_env(**extra: str) -> dict:
    """os.environ without JAX_* (the test run's JAX_PLATFORMS), plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("JAX_")}, **extra}


def run(script: Path, *args: str, fake_bin: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{fake_bin}:{os.environ['PATH']}")
    out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=60)
    assert not (fake_bin.parent / "gcloud_called").exists(), "a dry run called gcloud"
    return out


def dry_run(*args: str, fake_bin: Path) -> list[list[str]]:
    """The commands `tpu.py ARGS --dry_run` prints, each split back into its argv."""
    args = list(args)
    cut = args.index("--") if "--" in args else len(args)
    out = run(TPU, *args[:cut], "--dry_run", *args[cut:], fake_bin=fake_bin)
    assert out.returncode == 0, out.stderr
    return [shlex.split(line) for line in out.stdout.splitlines()]


def remote_script(cmd: list[str]) -> str:
    """The --command=SCRIPT that `gcloud ... ssh` runs on the workers."""
    [script] = [arg[len("--command="):] for arg in cmd if arg.startswith("--command=")]
    return script


def steps_of(script: str) -> list[list[str]]:
    """The script's `;`-separated commands, each split into words as a POSIX shell would quote them."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";")
    lexer.whitespace_split, lexer.commenters = True, ""
    steps = [[]]
    for token in lexer:
        if token == ";":
            steps.append([])
        else:
            steps[-1].append(token)
    return steps


COMMON = ("--name", "genenv-1", "--zone", "us-east5-a")


# ---------------------------------------------------------------------------------------- create
@pytest.mark.parametrize("accelerator, extra, version, capacity", [
    ("v5p-8", ["--spot"], "v2-alpha-tpuv5", ["--spot"]),
    ("v4-32", ["--reserved", "--project", "my-proj"], "tpu-ubuntu2204-base", ["--reserved", "--project=my-proj"]),
    ("v5litepod-16", [], "v2-alpha-tpuv5-lite", []),
    ("v6e-8", ["--version", "v2-alpha-tpuv6e-custom"], "v2-alpha-tpuv6e-custom", []),
])
def test_create_passes_accelerator_zone_runtime_and_capacity(fake_bin, accelerator, extra, version, capacity):
    [cmd] = dry_run("create", *COMMON, "--accelerator_type", accelerator, *extra, fake_bin=fake_bin)
    assert cmd == ["gcloud", "compute", "tpus", "tpu-vm", "create", "genenv-1", "--zone=us-east5-a",
                   f"--accelerator-type={accelerator}", f"--version={version}", *capacity]


@pytest.mark.parametrize("args, message", [
    (["--accelerator_type", "v5p-8", "--spot", "--reserved"], "not allowed with argument"),
    (["--accelerator_type", "v9x-8"], "pass --version"),
    (["--accelerator_type", "v5p"], "expected a type like"),
])
def test_create_refuses_bad_flags(fake_bin, args, message):
    out = run(TPU, "create", *COMMON, *args, "--dry_run", fake_bin=fake_bin)
    assert out.returncode == 2 and message in out.stderr and not out.stdout


# --------------------------------------------------------------------------------------- install
def test_install_ships_this_commit_and_builds_the_venv_on_all_workers(fake_bin):
    archive, scp, ssh = dry_run("install", *COMMON, fake_bin=fake_bin)
    assert archive == ["git", "-C", str(REPO), "archive", "--format=tar.gz", "--output=/tmp/genenv_jax-src.tar.gz",
                       "HEAD"]
    assert scp[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "scp"] and "--worker=all" in scp
    assert scp[5:7] == ["/tmp/genenv_jax-src.tar.gz", "genenv-1:genenv_jax-src.tar.gz"]
    assert ssh[4] == "ssh" and "--worker=all" in ssh and "--zone=us-east5-a" in ssh
    steps = steps_of(remote_script(ssh))
    assert ["tar", "-xzf", "genenv_jax-src.tar.gz", "-C", "genenv_jax"] in steps
    assert ["python3", "-m", "venv", ".venv"] in steps
    assert [".venv/bin/pip", "install", "-q", "-e", ".", "jax[tpu]"] in steps


def test_install_pins_the_no_deps_packages_of_the_makefile(fake_bin):
    [makefile_line] = [line for line in (REPO / "Makefile").read_text().splitlines()
                       if "--no-deps" in line and "bfcl-eval" in line]
    makefile_packages = shlex.split(makefile_line.split("--no-deps", 1)[1])
    *_, ssh = dry_run("install", *COMMON, fake_bin=fake_bin)
    steps = steps_of(remote_script(ssh))
    assert [".venv/bin/pip", "install", "-q", "--no-deps", *makefile_packages] in steps
    assert not any("alfworld" in " ".join(step) for step in steps)  # only with --alfworld


def test_install_alfworld_runs_the_makefiles_alfworld_steps(fake_bin):
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("$(ALFWORLD_STAMP): $(STAMP)\n", 1)[1].split("\ttouch", 1)[0]
    make_steps = [shlex.split(line.strip().removeprefix("$(BIN)/")) for line in recipe.splitlines() if line.strip()]
    *_, ssh = dry_run("install", *COMMON, "--alfworld", fake_bin=fake_bin)
    steps = steps_of(remote_script(ssh))
    assert ["sudo", "apt-get", "-qq", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "g++", "make", "cmake"] in steps
    remote = [step for step in steps if step[:1] == [".venv/bin/pip"]]
    assert [[step[0].removeprefix(".venv/bin/"), *step[1:]] for step in remote[-len(make_steps):]] == make_steps


def test_install_from_git_with_nfs_quotes_every_value(fake_bin):
    [ssh] = dry_run("install", *COMMON, "--repo_url", "https://example.com/genenv.git", "--ref", "v1; reboot",
                    "--remote_dir", "my repo", "--nfs", "10.0.0.2:/genenv", "--jax", "jax[tpu]==0.10.2",
                    fake_bin=fake_bin)
    steps = steps_of(remote_script(ssh))
    assert ["git", "-C", "my repo", "fetch", "origin", "v1; reboot"] in steps
    assert ["[", "-d", "my repo/.git", "]", "||", "git", "clone", "https://example.com/genenv.git", "my repo"] in steps
    assert ["mountpoint", "-q", "/mnt/genenv", "||", "sudo", "mount", "-t", "nfs", "-o", "rw,hard", "10.0.0.2:/genenv",
            "/mnt/genenv"] in steps
    assert [".venv/bin/pip", "install", "-q", "-e", ".", "jax[tpu]==0.10.2"] in steps
    assert ["reboot"] not in steps


# ---------------------------------------------------------------------------------------- launch
LAUNCH = ("launch", *COMMON, "--workdir", HOSTILE, "--model_gcs", "gs://bucket/models/Qwen2.5-7B-Instruct",
          "--env", "GREETING=a b", "--", "--config.agent.sampling.temperature=$(reboot)", "--config.epochs=3")


def test_launch_runs_main_on_all_workers_with_each_value_one_argument(fake_bin):
    copy, ssh = dry_run(*LAUNCH, fake_bin=fake_bin)
    for cmd in (copy, ssh):
        assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "genenv-1"] and "--worker=all" in cmd
    model = "/tmp/genenv_models/Qwen2.5-7B-Instruct"
    assert steps_of(remote_script(copy)) == [
        ["set", "-e"], ["cd", "genenv_jax"], ["mkdir", "-p", model],
        ["gcloud", "storage", "rsync", "--recursive", "gs://bucket/models/Qwen2.5-7B-Instruct", model]]
    steps = steps_of(remote_script(ssh))
    [start] = [step for step in steps if step[0] == "nohup"]
    assert start[:start.index(">")] == [
        "nohup", "env", "GREETING=a b", ".venv/bin/python", "-u", "-m", "genenv_jax.main", "--config=configs/bfcl.py",
        f"--workdir={HOSTILE}", f"--config.agent.model_dir={model}",
        "--config.agent.sampling.temperature=$(reboot)", "--config.epochs=3"]
    assert [".", "tpu/worker_env.sh"] in steps


def test_launch_passes_a_gs_workdir_through(fake_bin):
    [ssh] = dry_run("launch", *COMMON, "--workdir", "gs://bucket/runs/bfcl-7b", fake_bin=fake_bin)
    [start] = [step for step in steps_of(remote_script(ssh)) if step[0] == "nohup"]
    assert "--workdir=gs://bucket/runs/bfcl-7b" in start


@pytest.mark.parametrize("args, message", [
    (["--workdir", "gs://"], "expected gs://BUCKET/PATH"),
    (["--workdir", "gs:///run"], "expected gs://BUCKET/PATH"),
    (["--workdir", "w", "--model_gcs", "/local/model"], "expected gs://"),
    (["--workdir", "w", "--env", "1X=2"], "expected NAME=VALUE"),
    (["--workdir", "w", "--", "epochs=3"], "expected flags for genenv_jax.main"),
    (["--workdir", "w", "--", "--dry_run"], "put it before --"),
])
def test_launch_refuses_bad_values(fake_bin, args, message):
    out = run(TPU, "launch", *COMMON, *args, fake_bin=fake_bin)
    assert out.returncode == 2 and message in out.stderr and not out.stdout


def fake_worker(tmp_path: Path) -> tuple[Path, dict]:
    """A worker's home: the repo with tpu/worker_env.sh and a `.venv/bin/python` that records its
    argv and environment and then sleeps; fake gcloud (storage rsync) and curl (the metadata server)."""
    home = tmp_path / "home"
    repo = home / "genenv_jax"
    (repo / "tpu").mkdir(parents=True)
    (repo / "tpu" / "worker_env.sh").write_text((REPO / "tpu" / "worker_env.sh").read_text())
    write_exe(repo / ".venv" / "bin" / "python", f"""#!{sys.executable}
import json, os, sys, time
env = {{k: v for k, v in os.environ.items() if k.startswith(("JAX_", "GREETING"))}}
json.dump({{"argv": sys.argv[1:], "env": env}}, open(os.environ["FAKE_OUT"] + "/main.json", "w"))
print("fake GenEnv running", flush=True)
time.sleep(60)
""")
    bin_dir = tmp_path / "worker_bin"
    write_exe(bin_dir / "gcloud", '#!/bin/sh\n[ "$1 $2" = "storage rsync" ] || exit 99\n'
                                  'echo "$@" > "$FAKE_OUT/rsync"; echo "{}" > "$5/config.json"\n')
    write_exe(bin_dir / "curl", '#!/bin/sh\n[ -n "$FAKE_ENDPOINTS" ] || exit 22\nprintf %s "$FAKE_ENDPOINTS"\n')
    env = clean_env(PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_OUT=str(tmp_path),
                    FAKE_ENDPOINTS="unknown:unknown:10.0.0.11,unknown:unknown:10.0.0.12")
    return home, env


def on_worker(script: str, home: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=home, env=env, capture_output=True, text=True, timeout=60)


def test_launch_and_stop_scripts_run_in_a_real_shell(fake_bin, tmp_path):
    home, env = fake_worker(tmp_path)
    model = str(tmp_path / "models" / "Qwen 7B")
    copy, ssh = dry_run(*LAUNCH[:-3], "--model_local", model, *LAUNCH[-3:], fake_bin=fake_bin)
    copied = on_worker(remote_script(copy), home, env)
    assert copied.returncode == 0, copied.stderr
    assert (Path(model) / "config.json").exists()
    started = on_worker(remote_script(ssh), home, env)
    assert started.returncode == 0, started.stderr
    assert "started GenEnv, pid" in started.stdout
    deadline = time.time() + 30
    while not (tmp_path / "main.json").exists() and time.time() < deadline:
        time.sleep(0.1)
    recorded = json.loads((tmp_path / "main.json").read_text())
    assert recorded["argv"] == ["-u", "-m", "genenv_jax.main", "--config=configs/bfcl.py", f"--workdir={HOSTILE}",
                                f"--config.agent.model_dir={model}", "--config.agent.sampling.temperature=$(reboot)",
                                "--config.epochs=3"]
    assert recorded["env"] == {"JAX_COORDINATOR_ADDRESS": "10.0.0.11:8482", "GREETING": "a b"}
    repo = home / "genenv_jax"
    pid = int((repo / "logs" / "genenv.pid").read_text())
    os.kill(pid, 0)  # alive
    assert "fake GenEnv running" in (repo / "logs" / "genenv.log").read_text()

    again = on_worker(remote_script(ssh), home, env)
    assert again.returncode == 1 and f"already running (pid {pid})" in again.stderr

    [stop] = dry_run("stop", *COMMON, "--grace", "5", fake_bin=fake_bin)
    assert "--worker=all" in stop
    stopped = on_worker(remote_script(stop), home, env)
    assert f"stopped GenEnv (pid {pid})" in stopped.stdout
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (repo / "logs" / "genenv.pid").exists()
    assert "no GenEnv job running" in on_worker(remote_script(stop), home, env).stdout


@pytest.mark.parametrize("endpoints, expected", [
    ("unknown:unknown:10.0.0.11,unknown:unknown:10.0.0.12", "10.0.0.11:8482"),
    ("t1v-n-ab12-w-0,t1v-n-ab12-w-1", "t1v-n-ab12-w-0:8482"),
    ("unknown:unknown:10.0.0.11", "unset"),  # one host: no jax.distributed
    ("", "unset"),                           # no metadata server: not a Cloud TPU VM
])
def test_worker_env_sets_the_coordinator_only_on_multi_host_slices(tmp_path, endpoints, expected):
    home, env = fake_worker(tmp_path)
    env["FAKE_ENDPOINTS"] = endpoints
    out = on_worker('. genenv_jax/tpu/worker_env.sh; echo "${JAX_COORDINATOR_ADDRESS-unset}"', home, env)
    assert out.stdout.strip() == expected
    env["JAX_COORDINATOR_ADDRESS"] = "10.9.9.9:1234"  # already set by the user: kept
    out = on_worker('. genenv_jax/tpu/worker_env.sh; echo "$JAX_COORDINATOR_ADDRESS"', home, env)
    assert out.stdout.strip() == "10.9.9.9:1234"


# ---------------------------------------------------------------------------------- logs, delete
def test_logs_stream_from_every_worker_and_delete_is_quiet(fake_bin):
    [logs] = dry_run("logs", *COMMON, fake_bin=fake_bin)
    assert "--worker=all" in logs
    assert remote_script(logs) == 'tail -n 100 -F genenv_jax/logs/genenv.log | sed -u "s/^/[$(hostname)] /"'
    [one] = dry_run("logs", *COMMON, "--worker", "0", "--lines", "20", "--no_follow", fake_bin=fake_bin)
    assert "--worker=0" in one and remote_script(one).startswith("tail -n 20 genenv_jax/logs/genenv.log |")
    assert run(TPU, "logs", *COMMON, "--worker", "0; reboot", "--dry_run", fake_bin=fake_bin).returncode == 2
    [delete] = dry_run("delete", *COMMON, "--project", "p", fake_bin=fake_bin)
    assert delete == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "genenv-1", "--zone=us-east5-a", "--quiet",
                      "--project=p"]


def test_every_subcommand_has_help(fake_bin):
    for command in ("create", "install", "launch", "logs", "stop", "delete"):
        out = run(TPU, command, "--help", fake_bin=fake_bin)
        assert out.returncode == 0 and "--dry_run" in out.stdout
    out = run(SLURM, "--help", fake_bin=fake_bin)
    assert out.returncode == 0 and "--dry_run" in out.stdout


# ----------------------------------------------------------------------------------------- SLURM
def slurm_dry_run(*args: str, fake_bin: Path) -> str:
    args = list(args)
    cut = args.index("--") if "--" in args else len(args)
    out = run(SLURM, *args[:cut], "--dry_run", *args[cut:], fake_bin=fake_bin)
    assert out.returncode == 0, out.stderr
    return out.stdout


def fake_cluster(tmp_path: Path, hosts: str, job_id: int, nodes: int) -> dict:
    """`scontrol show hostnames` prints `hosts`; `srun` starts nodes x ntasks-per-node copies of the
    command with the per-task SLURM variables and records its own arguments."""
    bin_dir = tmp_path / "slurm_bin"
    write_exe(bin_dir / "scontrol", f'#!/bin/sh\nprintf "%s\\n" {hosts}\n')
    write_exe(bin_dir / "srun", """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_OUT/srun_args"
per_node=1
while [[ "$1" == --* ]]; do case "$1" in --ntasks-per-node=*) per_node=${1#*=};; esac; shift; done
total=$((SLURM_NNODES * per_node))
for ((i = 0; i < total; i++)); do
    SLURM_PROCID=$i SLURM_NTASKS=$total SLURM_LOCALID=$((i % per_node)) SLURM_STEP_NODELIST=$SLURM_JOB_NODELIST "$@" &
done
wait
""")
    return clean_env(PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_OUT=str(tmp_path), SLURM_JOB_ID=str(job_id),
                     SLURM_JOB_NODELIST="nodes", SLURM_NNODES=str(nodes), SLURM_CPUS_ON_NODE="64")


RECORDER = """import json, os, sys
env = {k: v for k, v in os.environ.items() if k.startswith(("JAX_", "SLURM_PROCID"))}
out = f"{os.environ['FAKE_OUT']}/task{os.environ['SLURM_PROCID']}.json"
json.dump({"argv": sys.argv[1:], "env": env}, open(out, "w"))
"""


def test_slurm_script_headers_environment_and_quoting(fake_bin, tmp_path):
    recorder = write_exe(tmp_path / "recorder", f"#!{sys.executable}\n{RECORDER}")
    args = ("--nodes", "4", "--gpus_per_node", "8", "--workdir", HOSTILE, "--partition", "gpu", "--repo_dir",
            str(tmp_path), "--python", str(recorder), "--env", "GREETING=a b", "--", "--config.epochs=3")
    script = slurm_dry_run(*args, fake_bin=fake_bin)
    for header in ("--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8", "--partition=gpu", "--exclusive"):
        assert f"#SBATCH {header}\n" in script
    env = fake_cluster(tmp_path, "gpu01 gpu02 gpu03 gpu04", job_id=1234, nodes=4)
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    srun = (tmp_path / "srun_args").read_text().splitlines()
    assert srun[:3] == ["--ntasks-per-node=1", "--cpus-per-task=64", "--kill-on-bad-exit=1"]
    assert srun[3] == f"--output={tmp_path}/logs/genenv-%j-%t.log"
    for task in range(4):
        recorded = json.loads((tmp_path / f"task{task}.json").read_text())
        assert recorded["argv"] == ["-u", "-m", "genenv_jax.main", "--config=configs/bfcl.py", f"--workdir={HOSTILE}",
                                    "--config.epochs=3"]
        assert recorded["env"] == {"JAX_COORDINATOR_ADDRESS": f"gpu01:{1234 + 61440}",
                                   "JAX_LOCAL_DEVICE_IDS": "0,1,2,3,4,5,6,7", "SLURM_PROCID": str(task)}


def test_slurm_one_process_per_gpu(fake_bin, tmp_path):
    recorder = write_exe(tmp_path / "recorder", f"#!{sys.executable}\n{RECORDER}")
    script = slurm_dry_run("--nodes", "1", "--gpus_per_node", "8", "--process_per", "gpu", "--workdir", "w",
                           "--repo_dir", str(tmp_path), "--python", str(recorder), fake_bin=fake_bin)
    assert "#SBATCH --ntasks-per-node=8\n" in script
    env = fake_cluster(tmp_path, "gpu07", job_id=99, nodes=1)
    subprocess.run(["bash", "-c", script], env=env, check=True, timeout=60)
    assert (tmp_path / "srun_args").read_text().splitlines()[:2] == ["--ntasks-per-node=8", "--cpus-per-task=8"]
    recorded = [json.loads((tmp_path / f"task{i}.json").read_text())["env"] for i in range(8)]
    assert all(r.keys() == {"JAX_COORDINATOR_ADDRESS", "SLURM_PROCID"} for r in recorded)  # JAX picks GPU LOCALID
    assert {r["JAX_COORDINATOR_ADDRESS"] for r in recorded} == {f"gpu07:{99 + 61440}"}


@pytest.mark.parametrize("args", [["--job_name", "a b"], ["--time", "1 day"], ["--env", "=x"], ["--", "epochs=3"]])
def test_slurm_refuses_values_it_cannot_write_safely(fake_bin, args):
    cut = args.index("--") if "--" in args else len(args)
    out = run(SLURM, "--nodes", "2", "--workdir", "w", *args[:cut], "--dry_run", *args[cut:], fake_bin=fake_bin)
    assert out.returncode == 2 and "error" in out.stderr and not out.stdout


def test_slurm_environment_starts_jax_distributed(fake_bin, tmp_path):
    """The script's environment plus SLURM's per-task variables make genenv_jax's
    initialize_distributed() join every process into one JAX cluster (2 nodes x 2 CPU devices)."""
    with socket.socket() as s:  # a free port in the range the script derives from the job id
        for port in range(61440 + os.getpid() % 4000, 65536):
            try:
                s.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
    probe = write_exe(tmp_path / "probe", f"""#!{sys.executable}
import json, os
from genenv_jax.parallel import initialize_distributed
initialize_distributed()
import jax
info = [jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count()]
json.dump(info, open(f"{{os.environ['FAKE_OUT']}}/task{{os.environ['SLURM_PROCID']}}.json", "w"))
""")
    script = slurm_dry_run("--nodes", "2", "--gpus_per_node", "2", "--workdir", "w", "--repo_dir", str(tmp_path),
                           "--python", str(probe), fake_bin=fake_bin)
    env = fake_cluster(tmp_path, "localhost", job_id=port - 61440, nodes=2)
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(2), PYTHONPATH=str(REPO))
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    results = sorted(json.loads((tmp_path / f"task{i}.json").read_text()) for i in range(2))
    assert results == [[0, 2, 2, 4], [1, 2, 2, 4]]
