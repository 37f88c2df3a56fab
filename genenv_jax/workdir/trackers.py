"""Experiment trackers beside metrics.jsonl: W&B (offline) and MLflow (a local store), each point once.

metrics.jsonl stays the source of truth (`genenv_jax.workdir.metrics.MetricsWriter`). A tracker is
fed a row only after the file holds it, and only once the row is settled: covered by a finished
checkpoint, because resuming from a checkpoint truncates metrics.jsonl to it and re-runs (rewrites)
the rows after it, and a W&B or MLflow point, unlike a TensorBoard event file, cannot be taken back.

Exactly once without a ledger of our own: on opening, each tracker's own store is read back (W&B's
.wandb transaction logs through `wandb leet inspect --json`, MLflow's metric histories through
MlflowClient) and only the (metric, epoch) points it lacks are sent. A kill after metrics.jsonl got
a row but before the tracker stored it re-sends the row on resume; a kill after the tracker stored
it sends nothing twice. The run ids are kept in <workdir>/trackers.json, written before a tracker
run is created, so a resumed run continues the same W&B and MLflow run (docs/trackers.md).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import logging
import math
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

from genenv_jax.core.config_checks import ConfigError
from genenv_jax.workdir import storage

TRACKERS = ("jsonl", "tensorboard", "wandb", "mlflow")
DEFAULT_TRACKERS = ("jsonl", "tensorboard")
IDS_FILE = "trackers.json"  # {"wandb": {"run_id"}, "mlflow": {"tracking_uri", "experiment", "token", "run_id"}}
WANDB_DIR = "wandb"  # wandb.init(dir=<workdir>) writes <workdir>/wandb/offline-run-<time>-<run id>/
MLFLOW_DB = "mlflow.db"  # the default MLflow store: sqlite:///<workdir>/mlflow.db
MLFLOW_ARTIFACTS = "mlflow_artifacts"
INSTALL_HINT = "pip install -e '.[trackers]'"
_DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow stores served through SQLAlchemy
_MLFLOW_BATCH = 1000  # MLflow's limit of metrics per log_batch call
_MLFLOW_BAD_CHARACTERS = re.compile(r"[^/\w.\- :]")  # what MLflow refuses in a metric name


Points = dict[tuple[str, int], float]  # (metric, epoch) -> value


def _uses_database(tracking_uri: str) -> bool:
    return not tracking_uri or tracking_uri.split(":", 1)[0].split("+", 1)[0] in _DB_SCHEMES


def trackers_problem(trackers: Sequence[str], mlflow_tracking_uri: str = "") -> str | None:
    """Why `log.trackers` cannot run here (an unknown or repeated name, jsonl left out, a package not
    installed), as one line; None when it can. Checked with the config, before any work starts."""
    unknown = [name for name in trackers if name not in TRACKERS]
    if unknown:
        return f"log.trackers names {unknown[0]!r}; known: {', '.join(TRACKERS)}"
    if len(set(trackers)) != len(trackers):
        return f"log.trackers names a tracker twice: {', '.join(trackers)}"
    if "jsonl" not in trackers:
        return "log.trackers must include jsonl: metrics.jsonl is the record that resume and the other trackers read"
    needs = {"wandb": ("wandb",),
             "mlflow": ("mlflow", "sqlalchemy", "alembic") if _uses_database(mlflow_tracking_uri) else ("mlflow",)}
    for name in trackers:
        for package in needs.get(name, ()):
            if importlib.util.find_spec(package) is None:
                why = "" if package == name else " (MLflow's database store needs it)"
                return f"log.trackers includes {name} but the {package} package is not installed{why}: {INSTALL_HINT}"
    return None


class Tracker(Protocol):
    """One external tracker run that settled metrics rows are copied into."""

    name: str
    run_id: str

    def key(self, metric: str) -> str:
        """The name the tracker stores `metric` under."""

    def held(self) -> Points:
        """Every (key, epoch) point the tracker's own store holds, with its value."""

    def send(self, epoch: int, scalars: Mapping[str, float]) -> None:
        """Stores the points of one epoch (keys already `key`-mapped)."""

    def close(self) -> None:
        """Finishes the tracker run (a resumed run reopens it)."""


class TrackerFeed:
    """Copies settled rows into one tracker: each (metric, epoch) point that its store lacks, once.

    A point the store already holds is never sent again, even when metrics.jsonl now has another
    value for it (an epoch re-run after resuming from an older checkpoint than the one that
    settled it, e.g. a damaged checkpoint set aside): one warning names those epochs."""

    def __init__(self, tracker: Tracker, rows: Sequence[tuple[int, Mapping[str, float]]]):
        self.tracker = tracker
        self.held = tracker.held()
        self._done: set[int] = set()  # epochs whose points are all in `held`
        file_epochs = {epoch for epoch, _ in rows}
        beyond = sorted({epoch for _, epoch in self.held} - file_epochs)
        if beyond:
            logging.warning("%s run %s holds epochs %s that metrics.jsonl no longer has (resumed from an older "
                            "checkpoint); tracker points are never rewritten, so their re-run values stay only in "
                            "metrics.jsonl", tracker.name, tracker.run_id, beyond)

    def feed(self, rows: Iterable[tuple[int, Mapping[str, float]]]) -> None:
        """Sends, in epoch order, the points of `rows` (settled, from metrics.jsonl) not yet held."""
        for epoch, scalars in sorted(rows, key=lambda row: row[0]):
            if epoch in self._done:
                continue
            mapped: dict[str, float] = {}
            for metric, value in scalars.items():
                mapped.setdefault(self.tracker.key(metric), value)
            new = {key: value for key, value in mapped.items() if (key, epoch) not in self.held}
            differ = sorted(key for key, value in mapped.items()
                            if (key, epoch) in self.held and not _same(self.held[(key, epoch)], value))
            if differ:
                logging.warning("%s run %s already holds epoch %d with other values for %s (kept; metrics.jsonl "
                                "has the re-run's)", self.tracker.name, self.tracker.run_id, epoch, differ[:5])
            if new:
                self.tracker.send(epoch, new)
                self.held.update({(key, epoch): value for key, value in new.items()})
            self._done.add(epoch)

    def close(self) -> None:
        self.tracker.close()


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


# -- the run ids ------------------------------------------------------------------------------


def _read_ids(workdir: storage.AnyPath) -> dict[str, Any]:
    path = workdir / IDS_FILE
    if not storage.exists(path):
        return {}
    with storage.open_text(path) as f:
        return json.load(f)


def _save_id(workdir: storage.AnyPath, tracker: str, entry: Mapping[str, Any]) -> None:
    """Records a tracker's run identity before (and after) the run is created, atomically."""
    storage.write_json_atomic(workdir / IDS_FILE, _read_ids(workdir) | {tracker: dict(entry)})


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config snapshot as {"section.key": value} (MLflow params are flat)."""
    return {name: value for key, sub in tree.items()
            for name, value in (_flat(sub, f"{prefix}{key}.").items() if isinstance(sub, Mapping)
                                else [(f"{prefix}{key}", sub)])}


def _local_workdir(workdir: storage.AnyPath, why: str) -> Path:
    if storage.is_remote(workdir):
        raise ConfigError(f"{why}, and --workdir {workdir} is not a local directory; run with a local --workdir "
                          f"or leave it out of log.trackers")
    return Path(workdir).absolute()


# -- W&B --------------------------------------------------------------------------------------


def wandb_points(wandb_dir: str | Path, run_id: str) -> Points:
    """(metric, epoch) -> value of every history record in the .wandb logs of run `run_id` under
    `wandb_dir` (one log per session of the run), read with W&B's own reader, `wandb leet inspect
    --json`, which stops at a record that a kill cut short."""
    files = sorted(Path(wandb_dir).glob(f"*-{run_id}/*.wandb"))  # every session's log, whatever its name
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        outputs = list(pool.map(_inspect, files))
    points: Points = {}
    for text in outputs:
        for line in text.splitlines():
            record = json.loads(line)
            if record.get("type") != "history":
                continue
            item = record["history"]["item"]
            epoch = item.get("epoch")
            if not isinstance(epoch, (int, float)):  # not a row of ours (logged by hand into the run)
                continue
            points.update({(key, int(epoch)): float(value) for key, value in item.items()
                           if not key.startswith("_") and key != "epoch" and isinstance(value, (int, float))})
    return points


def _inspect(path: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"wandb leet inspect {path} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout


class WandbTracker:
    """An offline W&B run under <workdir>/wandb (no network; `wandb sync` uploads it later). Step
    epoch + 1 (W&B steps start at 0; the starting point is epoch -1) and an `epoch` value that every
    chart uses as its x axis."""

    name = "wandb"

    def __init__(self, workdir: storage.AnyPath, project: str, config: Mapping[str, Any] | None):
        import wandb

        local = _local_workdir(workdir, "log.trackers includes wandb, whose offline run files are local")
        self.run_id = _read_ids(workdir).get("wandb", {}).get("run_id")
        if not self.run_id:
            self.run_id = uuid.uuid4().hex[:12]
            _save_id(workdir, "wandb", {"run_id": self.run_id})
        self._held = wandb_points(local / WANDB_DIR, self.run_id)  # before init: this session's log is not there
        settings = wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                  save_code=False, x_save_requirements=False)
        self.run = wandb.init(mode="offline", dir=str(local), id=self.run_id, resume="allow", project=project,
                              name=local.name, config=dict(config or {}), settings=settings)
        self.run.define_metric("epoch")
        self.run.define_metric("*", step_metric="epoch")

    def key(self, metric: str) -> str:
        return metric

    def held(self) -> Points:
        return dict(self._held)

    def send(self, epoch: int, scalars: Mapping[str, float]) -> None:
        self.run.log({**scalars, "epoch": epoch}, step=epoch + 1)

    def close(self) -> None:
        """Finishes the run and shuts W&B's service down, which returns only once the service has
        written this session's .wandb log to the end: a reader (the next session's `held`, a test)
        must not see a log the service is still writing (seen under load: the last rows missing)."""
        import wandb

        self.run.finish()
        wandb.teardown()


# -- MLflow -----------------------------------------------------------------------------------


def default_mlflow_uri(workdir: storage.AnyPath) -> str:
    return f"sqlite:///{_local_workdir(workdir, 'log.mlflow_tracking_uri is empty (a sqlite file in the workdir)')}/{MLFLOW_DB}"


class MlflowTracker:
    """One MLflow run (step = epoch) in `tracking_uri`, found again on resume by its recorded id or,
    when a kill came between creating it and recording the id, by its token tag."""

    name = "mlflow"

    def __init__(self, workdir: storage.AnyPath, tracking_uri: str, experiment: str, params: Mapping[str, Any] | None):
        from mlflow.tracking import MlflowClient

        default = not tracking_uri
        self.tracking_uri = tracking_uri or default_mlflow_uri(workdir)
        self.client = MlflowClient(self.tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            artifacts = (_local_workdir(workdir, "") / MLFLOW_ARTIFACTS).as_uri() if default else None
            experiment_id = self.client.create_experiment(experiment, artifact_location=artifacts)
        else:
            experiment_id = found.experiment_id
        saved = _read_ids(workdir).get("mlflow", {})
        same_store = saved.get("tracking_uri") == self.tracking_uri
        self.run_id = self._existing_run(experiment_id, saved) if same_store else None
        if self.run_id is None:
            token = saved["token"] if same_store and saved.get("token") else uuid.uuid4().hex
            entry = {"tracking_uri": self.tracking_uri, "experiment": experiment, "token": token}
            _save_id(workdir, "mlflow", entry)
            run = self.client.create_run(experiment_id, run_name=Path(str(workdir)).name,
                                         tags={"genenv.run_token": token, "genenv.workdir": str(workdir)})
            self.run_id = run.info.run_id
            _save_id(workdir, "mlflow", entry | {"run_id": self.run_id})
            self._log_params(_flat(params or {}))
        else:
            self.client.update_run(self.run_id, status="RUNNING")

    def _existing_run(self, experiment_id: str, saved: Mapping[str, Any]) -> str | None:
        from mlflow.exceptions import MlflowException

        if saved.get("run_id"):
            try:
                return self.client.get_run(saved["run_id"]).info.run_id
            except MlflowException:
                logging.warning("mlflow: run %s is not in %s; starting a new run", saved["run_id"], self.tracking_uri)
                return None
        if saved.get("token"):
            runs = self.client.search_runs([experiment_id], f"tags.`genenv.run_token` = '{saved['token']}'")
            return runs[0].info.run_id if runs else None
        return None

    def _log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(self.key(k), v if isinstance(v, str) else json.dumps(v, default=str))
                 for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow's limit of params per call
            self.client.log_batch(self.run_id, params=[Param(p.key, p.value[:6000]) for p in items[start:start + 100]])

    def key(self, metric: str) -> str:
        """`metric` with the characters MLflow refuses as '_' and no empty, '.' or '..' path part."""
        parts = _MLFLOW_BAD_CHARACTERS.sub("_", metric).split("/")
        return "/".join(part if part.strip(".") else "_" for part in parts)[:250]

    def held(self) -> Points:
        keys = self.client.get_run(self.run_id).data.metrics
        return {(key, point.step): point.value for key in keys
                for point in self.client.get_metric_history(self.run_id, key)}

    def send(self, epoch: int, scalars: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, float(value), now, epoch) for key, value in scalars.items()]
        for start in range(0, len(metrics), _MLFLOW_BATCH):  # one transaction each in a database store
            self.client.log_batch(self.run_id, metrics=metrics[start:start + _MLFLOW_BATCH])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def open_feeds(workdir: storage.AnyPath, trackers: Sequence[str], rows: Sequence[tuple[int, Mapping[str, float]]],
               log: Any = None, config: Mapping[str, Any] | None = None) -> list[TrackerFeed]:
    """A feed for each external tracker in `trackers`, its store read back against `rows` (every
    row of metrics.jsonl). `log`: the run config's log section (wandb_project, mlflow_*)."""
    feeds = []
    try:
        if "wandb" in trackers:
            feeds.append(TrackerFeed(WandbTracker(workdir, getattr(log, "wandb_project", "genenv_jax"), config), rows))
        if "mlflow" in trackers:
            tracker = MlflowTracker(workdir, getattr(log, "mlflow_tracking_uri", ""),
                                    getattr(log, "mlflow_experiment", "genenv_jax"), config)
            feeds.append(TrackerFeed(tracker, rows))
    except BaseException:
        for feed in feeds:
            feed.close()
        raise
    return feeds
