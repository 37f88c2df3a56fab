"""The simulator-aims study's plots (PNG via `plots.save_figure`, byte-equal on a rebuild): mean
level of accepted tasks and in-band share against epoch, one line per run, and held-out accuracy
by level at the start and the end of each run (and of the untrained base model)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from genenv_jax.study.arm_epochs import RunData, level_numbers
from genenv_jax.study.details import accuracy
from genenv_jax.study.plots import save_figure

PLOTS = ("mean_level.png", "in_band.png", "heldout_levels.png")


def _by_level(items: dict, levels: Sequence[str]) -> list[float]:
    """The accuracy of `items` at each level (NaN for a level without items: no point drawn)."""
    return [float("nan") if (v := accuracy(items, lv).value) is None else v for lv in levels]


def _curves(data: Sequence[RunData], value, title: str, ylabel: str, path: Path, ylim=None) -> Path:
    """One line per run of `value(EpochStats)` against epoch (epochs without a value left out)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for d in data:
        points = [(e, y) for e, s in sorted(d.epochs.items()) if (y := value(s)) is not None]
        if points:
            ax.plot([e for e, _ in points], [y for _, y in points], marker="o", markersize=3, label=d.run.name)
    ax.set(title=title, xlabel="epoch", ylabel=ylabel, **({"ylim": ylim} if ylim else {}))
    return save_figure(fig, path)


def write_plots(data: Sequence[RunData], levels: Sequence[str], ends: Mapping[str, tuple[dict, dict, int]],
                base: dict | None, out_dir: Path) -> list[Path]:
    """Writes PLOTS into `out_dir`; `ends` maps a run's name to its held-out items at the start
    (after the warm-start) and at its last evaluation, and that evaluation's epoch; `base` holds the
    untrained model's items."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    numbers = level_numbers(levels)
    paths = [_curves(data, lambda s: s.mean_level(numbers), "mean level of accepted tasks", "level",
                     out_dir / PLOTS[0], (min(numbers) - 0.2, max(numbers) + 0.2)),
             _curves(data, lambda s: s.in_band, "in-band share of scored tasks", "share",
                     out_dir / PLOTS[1], (-0.05, 1.05))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, which, title in zip(axes, (0, 1), ("start (after the format warm-start)", "end (last evaluation)")):
        if base:
            ax.plot(numbers, _by_level(base, levels), "k--", marker="s", label="base (untrained)")
        for name, (start, end, epoch) in ends.items():
            ax.plot(numbers, _by_level(end if which else start, levels), marker="o", markersize=3,
                    label=f"{name} (after epoch {epoch})" if which else name)
        ax.set(title=f"held-out accuracy by level, {title}", xlabel="level", xticks=numbers, ylim=(-0.05, 1.05))
    axes[0].set_ylabel("accuracy")
    paths.append(save_figure(fig, out_dir / PLOTS[2]))
    return paths
