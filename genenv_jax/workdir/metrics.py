"""Run metrics: metrics.jsonl per epoch and the trackers fed from it (TensorBoard events; W&B and
MLflow, `genenv_jax.workdir.trackers`), a PNG of the curves, a summary table.

metrics.jsonl holds one validated row per line ({"epoch": int >= -1, name: scalar | str | None}).
Reading never changes the file; `truncate_metrics` (resume) keeps a file with bad lines aside
before rewriting its valid rows, so no row is ever dropped silently. A gs:// workdir works too
(`genenv_jax.workdir.storage`): each row rewrites the whole object (GCS objects cannot be appended), and
so does each row's TensorBoard events. The events are derived data: rebuilt from metrics.jsonl whenever
a writer opens, so kills and resumes never lose or double them; W&B and MLflow points, which cannot
be taken back, are sent once each row is settled, each point once (docs/trackers.md).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import numbers
import os
import time
from typing import Any, Callable, Mapping, Sequence

from genenv_jax.workdir import storage
from genenv_jax.workdir.storage import AnyPath
from genenv_jax.workdir.trackers import DEFAULT_TRACKERS, open_feeds

METRICS_FILE = "metrics.jsonl"
HELDOUT_DIR = "heldout"  # <workdir>/heldout/: the held-out items of each evaluation (`heldout_items_file`)


def heldout_items_file(epoch: int) -> str:
    """The held-out items file of an epoch under HELDOUT_DIR (-1: the starting point, after any warm-start)."""
    return "start.jsonl" if epoch < 0 else f"epoch_{epoch:04d}.jsonl"
TENSORBOARD_DIR = "tensorboard"

# The per-epoch curves the final plot shows (the paper's dynamics figure), in panel order.
PLOTTED = (
    ("p_hat_mean", "agent success on generated tasks (p_hat)"),
    ("r_env_mean", "R_env"),
    ("in_band_fraction", "in-band fraction |p_hat - alpha| <= k_min"),
    ("parse_rate", "simulator parse rate"),
    ("agent/loss", "GRPO loss"),
    ("simulator/loss", "RWR loss"),
    ("response_tokens_mean", "agent response tokens"),
    ("eval/accuracy", "held-out accuracy"),
)

SUMMARY_COLUMNS = ("epoch", "tasks", "parse_rate", "p_hat_mean", "r_env_mean", "in_band_fraction",
                   "success_rate", "agent/loss", "simulator/loss", "agent/kl", "tokens_per_s")


def _scalar(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


class BadMetricsRow(ValueError):
    """A metrics.jsonl line that is not a row this module writes."""


def _row_value(key: str, value: Any) -> Any:
    """`value` as a JSON scalar (numpy / JAX scalars become Python numbers); ValueError otherwise."""
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "shape", None) == () and hasattr(value, "item"):  # 0-d numpy / JAX arrays
        return _row_value(key, value.item())
    raise BadMetricsRow(f"metric {key!r} is a {type(value).__name__}, not a number, string, bool or None")


def validate_row(row: Any) -> dict:
    """`row` if it is a metrics row: a JSON object with an int "epoch" >= -1 (-1: warm-start) and
    scalar / None / string values; BadMetricsRow saying what is wrong otherwise."""
    if not isinstance(row, dict):
        raise BadMetricsRow(f"not a JSON object but a {type(row).__name__}")
    epoch = row.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < -1:
        raise BadMetricsRow(f"'epoch' must be an int >= -1, got {epoch!r}")
    for key, value in row.items():
        if not (value is None or isinstance(value, (bool, str, int, float))):
            raise BadMetricsRow(f"value of {key!r} is a {type(value).__name__}, not a scalar")
    return row


class MetricsWriter:
    """The one writer of a run's metrics: appends one JSON line per epoch to `metrics.jsonl` (the
    source of truth) and copies its scalars to the trackers `log.trackers` names.

    - tensorboard: <workdir>/tensorboard, whose events always equal the file's rows: on opening the
      events are rebuilt from metrics.jsonl (which resume has truncated to the checkpoint), and each
      row's events are on disk before `write` returns (`genenv_jax.workdir.tensorboard_events`);
    - wandb, mlflow: fed each settled row once (`genenv_jax.workdir.trackers`): rows of epochs <=
      `settled()` (the newest finished checkpoint's epoch; None: none yet), after every write and on
      close. Without `settled`, every written row is settled at once.

    `log` is the run config's log section (None: jsonl and tensorboard); `config` the run's config
    snapshot, recorded with a new W&B or MLflow run."""

    def __init__(self, workdir: str | os.PathLike, enabled: bool = True, *, log: Any = None,
                 config: Mapping[str, Any] | None = None, settled: Callable[[], int | None] | None = None):
        self.workdir = storage.as_path(workdir)
        self.path = self.workdir / METRICS_FILE
        self.enabled = enabled
        self.trackers = tuple(getattr(log, "trackers", DEFAULT_TRACKERS))
        self._settled = settled
        self._events = None
        self._feeds: list = []
        self._rows: dict[int, dict[str, float]] = {}  # epoch -> scalars of each valid row of metrics.jsonl
        if enabled:
            storage.makedirs(self.workdir)
            self._rows = {row["epoch"]: tensorboard_scalars(row) for row in parse_metrics(self.path).upto(None)}
            if "tensorboard" in self.trackers:
                from genenv_jax.workdir.tensorboard_events import EventLog  # imports tensorboardX: only on writers

                self._events = EventLog(self.workdir / TENSORBOARD_DIR, self._rows_scalars())
            self._feeds = open_feeds(self.workdir, self.trackers, self._rows_scalars(), log, config)
            self._feed()

    def write(self, epoch: int, metrics: Mapping[str, Any]) -> None:
        """Appends (and fsyncs; on GCS rewrites) the row of `epoch`, then its TensorBoard events,
        then feeds the trackers what is settled; BadMetricsRow, before writing, for a value that is
        not a scalar, so the file only ever holds rows `read_metrics` accepts."""
        if "epoch" in metrics:
            raise BadMetricsRow("metrics may not contain the key 'epoch' (the row's own epoch)")
        row = validate_row({"epoch": epoch, **{k: _row_value(k, v) for k, v in metrics.items()}})
        if self.enabled:
            storage.append_text(self.path, json.dumps(row) + "\n")
            replaced = epoch in self._rows
            self._rows[epoch] = tensorboard_scalars(row)
            if self._events is not None:
                if replaced:  # a row replaced (the later one wins): no second value
                    self._events.rebuild(self._rows_scalars())
                else:
                    self._events.add(epoch, self._rows[epoch])
            self._feed()

    def _rows_scalars(self) -> list[tuple[int, dict[str, float]]]:
        """(epoch, scalars) of every valid row of metrics.jsonl, in epoch order."""
        return sorted(self._rows.items())

    def _settled_rows(self) -> list[tuple[int, dict[str, float]]]:
        """The rows the trackers may hold: every row, or those of epochs <= `settled()`."""
        upto = math.inf if self._settled is None else self._settled()
        return [] if upto is None else [(epoch, scalars) for epoch, scalars in self._rows_scalars() if epoch <= upto]

    def _feed(self) -> None:
        """Sends the trackers the settled points they lack."""
        if self._feeds:
            rows = self._settled_rows()
            for feed in self._feeds:
                feed.feed(rows)

    def close(self) -> None:
        """Feeds the trackers the rows settled by now and finishes their runs (the jsonl and
        TensorBoard writes are durable as they happen: nothing of theirs is buffered)."""
        try:
            self._feed()
        finally:
            feeds, self._feeds = self._feeds, []
            for feed in feeds:
                feed.close()


def tensorboard_scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The values of a metrics row TensorBoard plots: finite numbers, not bools, not the epoch."""
    return {key: x for key, value in row.items()
            if key != "epoch" and not isinstance(value, bool) and (x := _scalar(value)) is not None}


@dataclasses.dataclass(frozen=True)
class MetricsFile:
    """A parsed metrics.jsonl: the valid rows (a re-run epoch's later row wins) and the bad lines."""

    rows: dict[int, dict]
    bad_lines: list[tuple[int, str]]  # (line number, why)

    def upto(self, epoch: int | None) -> list[dict]:
        return [self.rows[e] for e in sorted(self.rows) if epoch is None or e <= epoch]

    def describe_bad_lines(self) -> str:
        shown = "; ".join(f"line {n}: {why}" for n, why in self.bad_lines[:3])
        more = f"; and {len(self.bad_lines) - 3} more" if len(self.bad_lines) > 3 else ""
        return f"{len(self.bad_lines)} bad line(s) ({shown}{more})"


def parse_metrics(path: str | os.PathLike) -> MetricsFile:
    """Reads a metrics.jsonl without changing it (a missing file has no rows)."""
    rows: dict[int, dict] = {}
    bad: list[tuple[int, str]] = []
    if not storage.exists(path):
        return MetricsFile(rows, bad)
    with storage.open_text(path, errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = validate_row(json.loads(line))
            except json.JSONDecodeError as e:
                bad.append((number, f"not JSON ({e.msg}; a line cut by a crash?)"))
                continue
            except BadMetricsRow as e:
                bad.append((number, str(e)))
                continue
            rows[row["epoch"]] = row
    return MetricsFile(rows, bad)


def read_metrics(path: str | os.PathLike, upto_epoch: int | None = None) -> list[dict]:
    """Valid rows of a metrics.jsonl in epoch order (a resumed run's rows for re-run epochs replace
    the earlier ones). Bad lines are skipped with one logged line; the file is not changed."""
    parsed = parse_metrics(path)
    if parsed.bad_lines:
        logging.warning("%s: skipped %s", path, parsed.describe_bad_lines())
    return parsed.upto(upto_epoch)


def _write_rows_atomic(path: AnyPath, rows: Sequence[Mapping[str, Any]]) -> None:
    storage.write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))


def truncate_metrics(path: str | os.PathLike, upto_epoch: int) -> None:
    """Keeps the rows of epochs <= `upto_epoch` (used on resume, so re-run epochs are not doubled).

    A file with bad lines is first kept aside whole as metrics.jsonl.bad-<time> (one logged line
    says where); the valid rows are then rewritten atomically, so no row is lost silently.
    """
    path = storage.as_path(path)
    parsed = parse_metrics(path)
    if parsed.bad_lines:
        aside = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        storage.move(path, aside)
        logging.warning("%s had %s; kept the original aside as %s and rewrote its %d valid rows",
                        path, parsed.describe_bad_lines(), aside, len(parsed.rows))
    if parsed.bad_lines or path.exists():
        _write_rows_atomic(path, parsed.upto(upto_epoch))


def plot_curves(rows: Sequence[Mapping[str, Any]], out_png: str | os.PathLike, title: str = "") -> AnyPath | None:
    """One small panel per curve in `PLOTTED` that has data; returns the PNG path (None if no data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [(key, label) for key, label in PLOTTED
              if any(_scalar(r.get(key)) is not None for r in rows)]
    if not panels:
        return None
    cols = min(4, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, panels):
        points = [(r["epoch"], _scalar(r.get(key))) for r in rows if _scalar(r.get(key)) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if key in ("p_hat_mean", "in_band_fraction", "parse_rate", "r_env_mean"):
            ax.set_ylim(-0.05, 1.05)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_png = storage.as_path(out_png)
    if storage.is_remote(out_png):  # matplotlib writes local files: render in memory, upload once
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        storage.write_atomic(out_png, buffer.getvalue())
    else:
        fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def summary_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] = SUMMARY_COLUMNS) -> str:
    """A Markdown table of the per-epoch metrics (columns without data are left out)."""
    columns = [c for c in columns if any(c in r for r in rows)]
    if not rows or not columns:
        return "(no epochs completed)"

    def fmt(v):
        x = _scalar(v)
        if x is None:
            return "-" if v is None else str(v)
        return str(int(x)) if float(x).is_integer() and abs(x) < 1e9 else f"{x:.4g}"

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
