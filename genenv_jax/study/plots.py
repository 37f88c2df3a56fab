"""Study plots: p_hat, held-out accuracy, generated difficulty and the alpha sweep as PNGs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from genenv_jax.study.results import Stat, Study, level_number


def _band(ax: Any, points: dict[int, Stat], label: str) -> None:
    """A mean line with a +-std band over epochs."""
    xs = [e for e in sorted(points) if points[e].mean is not None]
    mean, std = (np.array([getattr(points[e], k) for e in xs]) for k in ("mean", "std"))
    if xs:
        line, = ax.plot(xs, mean, marker="o", label=label)
        ax.fill_between(xs, mean - std, mean + std, color=line.get_color(), alpha=0.2)


def save_figure(fig: Any, path: Path) -> Path:
    """Grid, legends, then the PNG (dpi 100) without the 'Software' text chunk (the matplotlib
    version), so a rebuild with another version differs only where the drawing does; returns `path`."""
    import matplotlib.pyplot as plt

    for ax in fig.axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def write_plots(study: Study, summary: dict, out_dir: Path) -> list[Path]:
    """Writes p_hat.png, heldout.png, difficulty.png and (with two alphas or more) alpha_sweep.png; returns
    their paths."""
    import matplotlib; matplotlib.use("Agg")  # noqa: E702
    import matplotlib.pyplot as plt
    modes, sweep, levels = summary["modes"], summary["sweep"], study.levels
    x, ticks, paths = np.arange(len(levels)), [str(level_number(lv, i)) for i, lv in enumerate(levels)], []

    def save(fig: Any, name: str) -> None:
        paths.append(save_figure(fig, out_dir / name))

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for mode, v in modes.items():
        _band(axes[0], {e: s["p_hat"] for e, s in v["per_epoch"].items()}, mode)
        _band(axes[1], {e: s["in_band"] for e, s in v["per_epoch"].items()}, mode)
    axes[0].axhline(study.alpha, color="black", linestyle="--", label=f"alpha={study.alpha:g}")
    for ax, title in zip(axes, ("p_hat on generated tasks", "in-band fraction")):
        ax.set(title=title, xlabel="epoch", ylim=(-0.05, 1.05))
    save(fig, "p_hat.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for mode, v in modes.items():
        _band(ax, {e: s["heldout"] for e, s in v["per_epoch"].items()}, mode)
    ax.set(title="held-out accuracy", xlabel="epoch", ylim=(-0.05, 1.05))
    save(fig, "heldout.png")

    fig, axes = plt.subplots(1, max(1, len(modes)), figsize=(4.5 * max(1, len(modes)), 3.5), squeeze=False)
    for ax, (mode, v) in zip(axes.flat, modes.items()):
        fin = v["final"]
        first, last = ([fin[k][lv].mean or 0.0 for lv in levels] for k in ("share_first", "share_last"))
        ax.bar(x - 0.2, first, 0.4, label="epoch 0")
        ax.bar(x + 0.2, last, 0.4, label=f"epoch {summary['last_epoch']['modes']}")
        if not any(first) and not any(last):
            ax.text(0.5, 0.5, "no generated tasks", ha="center", va="center", transform=ax.transAxes)
        success = [(i, y) for i, lv in enumerate(levels) if (y := fin["success_last"][lv].mean) is not None]
        twin = ax.twinx()
        twin.plot([i for i, _ in success], [y for _, y in success], "k-o")  # unlabelled: one legend per panel
        twin.set(ylim=(-0.05, 1.05), ylabel=f"agent success, epoch {summary['last_epoch']['modes']} (line)")
        ax.set(title=mode, xticks=x, xticklabels=ticks, xlabel="level", ylabel="share of tasks", ylim=(0, 1.05))
    save(fig, "difficulty.png")

    if len(sweep) < 2:  # one alpha is no sweep: nothing to compare
        return paths
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    width = 0.8 / max(1, len(sweep))
    for j, (alpha, v) in enumerate(sweep.items()):
        axes[0].bar(x + (j - (len(sweep) - 1) / 2) * width, [v["share_last"][lv].mean or 0.0 for lv in levels],
                    width, label=f"alpha={alpha:g}")
        _band(axes[1], v["level_per_epoch"], f"alpha={alpha:g}")
    axes[0].set(title=f"generated-level share, epoch {summary['last_epoch']['sweep']}", xticks=x,
                xticklabels=ticks, xlabel="level")
    axes[1].set(title="mean generated level", xlabel="epoch")
    save(fig, "alpha_sweep.png")
    return paths
