"""Pooled plans on the 16 Helios Earth VCs: a quota per VC and a shared pool, chosen rolling.

    python -m evaluation.benchmarks.pooling [--days 7] [--train 7] [--max-unmet 0.003]

The planning benchmark (:mod:`evaluation.benchmarks.planning`) sizes each VC on its own. This
one keeps ``quota`` of each VC's day-kind plan as its own GPUs and ``pool`` of their sum as a
pool any VC borrows from (:mod:`prism.evaluation.pooling`), with ``(quota, pool)`` chosen each
day on the ``train`` days before it, and scores the last ``days`` days against the same
static-peak plan as the planning benchmark (the peak before its first replayed day), so the
numbers compare with ``planning.json``. The per-VC plan is the day-kind peak capped at each
VC's capacity: on Helios PRISM's plan is that floor (its day-ahead forecast is the last
value's; see the README), so no model is fitted here. Writes ``evaluation/results/pooling.csv``
(one row per scored day) and ``pooling.md``, and, beside the planning benchmark's
``planning_frontier.csv``, ``pooling.png``: the pooled point over the per-VC frontier.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from evaluation.benchmarks.planning import RESULTS, TRACES, helios_panel


def main(argv: list[str] | None = None) -> int:
    """Run the pooled-plan backtest and write its tables."""
    from prism.errors import PrismError
    from prism.evaluation.backtest import CUTOFF
    from prism.evaluation.planning import DAY_KIND, STATIC, plan_levels, window_rows
    from prism.evaluation.pooling import pooled_backtest, pooled_scores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7, help="days scored")
    parser.add_argument("--train", type=int, default=7,
                        help="days before each scored day that its quota and pool are chosen on")
    parser.add_argument("--max-unmet", type=float, default=0.003)
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    panel, capacity = helios_panel(args.traces)
    freq_s = 600
    try:
        rows = window_rows(panel, horizon="1d", windows=args.days + args.train)
        levels = plan_levels(rows, panel, block="1d", horizon="1d", capacity=capacity)
        cutoffs = sorted(levels[CUTOFF].unique())
        first = cutoffs[args.train]
        # the planning benchmark's static plan: each VC's peak before the first scored day
        static = panel[panel["ts"] <= first].groupby("series_id")["value"].max()
        levels[STATIC] = levels["series_id"].map(static).to_numpy()
        result = pooled_backtest(levels, DAY_KIND, freq_s=freq_s, train=args.train,
                                 max_unmet=args.max_unmet, capacity=capacity)
        alone = pooled_scores(levels, DAY_KIND, quota=1.0, pool=0.0, freq_s=freq_s,
                              capacity=capacity)
    except PrismError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    alone = alone[alone[CUTOFF] >= first]
    per_vc_saved = 1 - alone["idle_gpu_hours"].sum() / alone["static_idle_gpu_hours"].sum()
    per_vc_unmet = alone["unmet_gpu_hours"].sum() / alone["demand_gpu_hours"].sum()
    table = pd.DataFrame([
        {"plan": "per VC: the day-kind peak", "saved_share": per_vc_saved,
         "unmet_share": per_vc_unmet},
        {"plan": "pooled: quota and pool chosen on the days before", "saved_share":
         result.saved_share, "unmet_share": result.unmet_share}])
    print(table.assign(saved_share=(table.saved_share * 100).round(1),
                       unmet_share=(table.unmet_share * 100).round(2)).to_string(index=False))
    print(result.windows[[CUTOFF, "quota", "pool"]].to_string(index=False))
    args.output.mkdir(parents=True, exist_ok=True)
    result.windows.to_csv(args.output / "pooling.csv", index=False, float_format="%.6g")
    lines = [
        "# Pooled plans: a quota per VC and a shared pool",
        "",
        f"`python -m evaluation.benchmarks.pooling --days {args.days} --train {args.train} "
        f"--max-unmet {args.max_unmet}`: the 16 Helios Earth VCs, the last {args.days} days, "
        f"each day's quota and pool chosen on the {args.train} days before it (at most "
        f"{100 * args.max_unmet:.2f} % unmet there); saved against the static peak before "
        "the first scored day.",
        "",
        "| plan | saved | unmet |",
        "|---|---:|---:|",
        f"| per VC: the day-kind peak | {100 * per_vc_saved:.1f} % | "
        f"{100 * per_vc_unmet:.2f} % |",
        f"| pooled: quota and pool chosen on the days before | {100 * result.saved_share:.1f} "
        f"% | {100 * result.unmet_share:.2f} % |",
        "",
        "| day (cutoff) | quota | pool | idle GPU-h | unmet GPU-h |",
        "|---|---:|---:|---:|---:|",
        *[f"| {r.cutoff} | {r.quota:.2f} | {r.pool:.2f} | {r.idle_gpu_hours:.1f} | "
          f"{r.unmet_gpu_hours:.1f} |" for r in result.windows.itertuples()],
    ]
    (args.output / "pooling.md").write_text("\n".join(lines) + "\n")
    frontier = args.output / "planning_frontier.csv"
    if frontier.exists() and args.days == 7:  # the planning benchmark's days: one picture
        plot_pooled(pd.read_csv(frontier), result.saved_share, result.unmet_share,
                    args.output / "pooling.png", max_unmet=args.max_unmet)
        print(f"wrote {args.output / 'pooling.png'} over {frontier.name}")
    print(f"wrote {args.output / 'pooling.csv'} and pooling.md")
    return 0


def plot_pooled(frontier: pd.DataFrame, saved: float, unmet: float, path: Path, *,
                max_unmet: float) -> None:
    """The pooled plan's point over the per-VC frontier of the planning benchmark (daily)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evaluation.benchmarks.planning import draw_families

    fig, ax = plt.subplots(figsize=(6.5, 4.5), dpi=110)
    draw_families(ax, frontier[frontier["block"] == "1d"], suffix=" (per VC)", tags=False)
    ax.scatter([unmet * 100], [saved * 100], marker="D", s=70, color="#16a085", zorder=5,
               label="pooled: a quota per VC + a shared pool")
    ax.axvline(max_unmet * 100, color="#c0392b", ls=":", lw=1,
               label=f"target: {max_unmet * 100:g} % unmet")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(left=0)
    ax.set_xlabel("unmet demand (% of GPU-hours demanded)")
    ax.set_ylabel("idle GPU-hours saved vs static peak (%)")
    ax.set_title("daily levels, 16 Helios VCs x 7 days: per-VC plans and the pooled plan",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
