"""Pictures of a decomposition (matplotlib, drawn off-screen)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt  # noqa: E402

from prism.primitives.decompose import SeriesDecomposition  # noqa: E402
from prism.schema import metric_info  # noqa: E402

#: How a metric's unit reads on an axis.
_AXIS_UNITS = {"gpus": "GPUs", "jobs": "jobs", "nodes": "nodes", "ratio": "ratio",
               "count": "count"}


def axis_unit(series_id: str) -> str:
    """The unit of a series' values on an axis (``GPUs`` for ``.../gpus_in_use``)."""
    unit = metric_info(series_id.rsplit("/", 1)[-1]).unit
    return _AXIS_UNITS.get(unit, unit or "value")


def plot_decomposition(decomposition: SeriesDecomposition, path: Path) -> None:
    """Draw the series with level + trend, each component, and the top atoms to ``path``."""
    d = decomposition
    unit = axis_unit(d.series_id)
    parts = [name for name in d.components if name != "level" or d.level_shifts]
    rows = 1 + len(parts) + (1 if d.top_atoms else 0)
    fig, axes = plt.subplots(rows, 1, figsize=(11, 1.7 * rows + 0.6), squeeze=False)
    ax = axes[0, 0]
    ax.plot(d.ts, d.values, lw=0.8, color="black", label="series")
    ax.plot(d.ts, d.components["level"] + d.components["trend"], lw=1.2, color="tab:orange",
            label="level + trend")
    for b in d.bursts:
        ax.axvspan(d.ts[b.start], d.ts[min(b.end, len(d.ts) - 1)], color="tab:red", alpha=0.2)
    periods = ", ".join(f"{p.seconds / 3600:g} h ({p.strength:.0%})" for p in d.periods)
    ax.set_title(f"{d.series_id}   periods: {periods or 'none'}   bursts: {len(d.bursts)}",
                 fontsize=9, loc="left")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_ylabel(unit, fontsize=8)
    for i, name in enumerate(parts, start=1):
        axes[i, 0].plot(d.ts, d.components[name], lw=0.7)
        axes[i, 0].set_ylabel(f"{name}\n({unit})", fontsize=8)
    if d.top_atoms:
        ax = axes[-1, 0]
        shares = dict(zip(d.usage["atom_id"], d.usage["share"], strict=True))
        for atom_id, atom in d.top_atoms.items():
            ax.plot(atom, lw=1, label=f"{atom_id} ({shares.get(atom_id, 0):.0%})")
        ax.set_ylabel("top atoms\n(unit norm)", fontsize=8)
        ax.set_xlabel(f"steps of {d.freq_s // 60:g} min into the atom", fontsize=8)
        ax.legend(fontsize=7, loc="upper right", ncol=2)
    axes[len(parts), 0].set_xlabel("time (UTC)", fontsize=8)
    for row in axes[:, 0]:
        row.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
