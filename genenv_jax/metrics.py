"""Run metrics: TensorBoard events + metrics.jsonl per epoch, a PNG of the curves, a summary table."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

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


class MetricsWriter:
    """Appends one JSON line per epoch to `metrics.jsonl` and mirrors scalars to TensorBoard."""

    def __init__(self, workdir: str | os.PathLike, enabled: bool = True):
        self.workdir = Path(workdir)
        self.path = self.workdir / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        if enabled:
            from tensorboardX import SummaryWriter  # no TensorFlow needed

            self._tb = SummaryWriter(str(self.workdir / "tensorboard"))

    def write(self, epoch: int, metrics: Mapping[str, Any]) -> None:
        row = {"epoch": epoch, **metrics}
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
                f.flush()
                os.fsync(f.fileno())
            for key, value in metrics.items():
                x = _scalar(value)
                if x is not None and not isinstance(value, bool):
                    self._tb.add_scalar(key, x, epoch)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str | os.PathLike, upto_epoch: int | None = None) -> list[dict]:
    """Rows of a metrics.jsonl; a resumed run's rows for re-run epochs replace the earlier ones."""
    rows: dict[int, dict] = {}
    if not os.path.exists(path):
        return []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                rows[int(row["epoch"])] = row
    return [rows[e] for e in sorted(rows) if upto_epoch is None or e <= upto_epoch]


def truncate_metrics(path: str | os.PathLike, upto_epoch: int) -> None:
    """Drops rows of epochs after `upto_epoch` (used on resume, so re-run epochs are not doubled)."""
    rows = read_metrics(path, upto_epoch)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")
    os.replace(tmp, path)


def plot_curves(rows: Sequence[Mapping[str, Any]], out_png: str | os.PathLike, title: str = "") -> Path | None:
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
    out_png = Path(out_png)
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
