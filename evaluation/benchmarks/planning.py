"""Planning backtest on the 16 Helios Earth VCs: GPU-hours saved against static peak provisioning.

    python -m evaluation.benchmarks.planning [--models prism,naive,...] [--days 7]
        [--quantiles 0.5,0.8,0.9,0.925,0.95,0.975,0.99] [--headroom 0.05,0.1,...] [--blocks 1d,1h]
        [--max-unmet 0.003] [--no-cap] [--no-floor]

Each VC's ``gpus_in_use`` (10 min) is replayed over the last ``days`` days: every day each
model is fitted on the data before it and forecasts it (day-ahead, quantiles), and the VC is
provisioned at one level per day (block ``1d``) or per hour (``1h``): the peak of the
forecast's quantile over the block, at least the day-kind peak (:mod:`prism.day_kind`: the
larger of yesterday's peak and the latest complete day of the planned day's kind, weekday or
weekend, as ``prism capacity`` sizes; ``--no-floor``: the quantile alone), capped at the VC's
capacity (the ``gpu_capacity`` samples). The references are the static historical peak,
yesterday's peak (and, hourly, the same hour yesterday), the day-kind peak, yesterday's peak
with margins (``--headroom``: the simple rule's own trade-off) and the oracle (each block's
actual peak). Definitions: :mod:`prism.evaluation.planning`. Prints the table and writes
``evaluation/results/planning.csv`` and ``planning.json``, the saved-vs-unmet frontier of
each plan family
(``planning_frontier.csv`` and ``.png``) and, in the JSON's ``target``, the share saved at
most ``--max-unmet`` of demand unmet: PRISM at the quantile the backtest chooses (one for all
VCs, and one per VC, chosen on these same days and so optimistic), yesterday's peak at its
cheapest margin meeting the target, and the oracle.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces" / "helios_earth_vc"
RESULTS = ROOT / "evaluation" / "results"
MODELS = "prism,naive,seasonal_naive,time_of_day_quantile,ets,theta,gbm"
HEADROOM = "0.05,0.1,0.15,0.2,0.3,0.5"
#: The families drawn on the frontier plot (the CSV has them all).
PLOTTED = {"prism": "#2f6db5", "seasonal_naive": "#8e44ad", "naive": "#7f8c8d",
           "yesterday's peak": "#e67e22", "day-kind peak": "#c0392b", "oracle": "#27ae60"}


def helios_panel(traces: Path = TRACES) -> tuple[pd.DataFrame, dict[str, float]]:
    """The Earth VCs' ``gpus_in_use`` panel and each series' capacity (GPUs)."""
    from prism.ingest.pipeline import ingest
    from prism.store import Store

    with Store.open(":memory:") as store:
        ingest(store, sorted(traces.glob("earth_vc*_1min.csv.gz")), "helios-vc")
        ids = store.list_series(cluster="earth", metric="gpus_in_use")["series_id"].tolist()
        panel = store.load_panel(ids)
        caps = store.load_panel([s.replace("/gpus_in_use", "/gpu_capacity") for s in ids])
    capacity = {str(s).replace("/gpu_capacity", "/gpus_in_use"): float(v)
                for s, v in caps.groupby("series_id")["value"].max().items()}
    return panel, capacity


def main(argv: list[str] | None = None) -> int:
    """Run the planning backtest and write its table."""
    from prism.evaluation.planning import planning_backtest, planning_frontier
    from prism.forecasters import get_forecaster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--quantiles", default="0.5,0.8,0.9,0.925,0.95,0.975,0.99")
    parser.add_argument("--headroom", default=HEADROOM,
                        help="margins over yesterday's peak, scored as references")
    parser.add_argument("--blocks", default="1d,1h")
    parser.add_argument("--max-unmet", type=float, default=0.003)
    parser.add_argument("--no-cap", action="store_true", help="do not cap at capacity")
    parser.add_argument("--no-floor", action="store_true",
                        help="size the models' plans at their quantile alone (no day-kind floor)")
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--output", type=Path, default=RESULTS / "planning")
    args = parser.parse_args(argv)
    quantiles = [float(q) for q in args.quantiles.split(",")]
    headroom = [float(h) for h in args.headroom.split(",") if h]
    blocks = [b for b in args.blocks.split(",") if b]
    panel, capacity = helios_panel(args.traces)
    frames, seconds = [], {}
    for alias in [m for m in args.models.split(",") if m]:
        clock = time.perf_counter()
        result = planning_backtest({alias: get_forecaster(alias)}, panel, days=args.days,
                                   quantiles=quantiles, blocks=blocks)
        seconds[alias] = round(time.perf_counter() - clock, 1)
        frames.append(result.frame)
        print(f"{alias}: backtest of {panel['series_id'].nunique()} series x {args.days} days "
              f"in {seconds[alias]} s", flush=True)
    result = planning_backtest(None, panel, days=args.days, quantiles=quantiles,
                               capacity=None if args.no_cap else capacity, blocks=blocks,
                               frame=pd.concat(frames, ignore_index=True) if frames else None,
                               headroom=headroom, floor=not args.no_floor)
    table = result.table
    shown = table.drop(columns=["model", "quantile"]).copy()
    for col in ("idle_gpu_hours", "unmet_gpu_hours", "demand_gpu_hours"):
        shown[col] = shown[col].round(1)
    shown["saved_share"] = (shown["saved_share"] * 100).round(1)
    shown["unmet_share"] = (shown["unmet_share"] * 100).round(2)
    print(shown.rename(columns={"saved_share": "saved %", "unmet_share": "unmet %"})
          .to_string(index=False))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output.with_suffix(".csv"), index=False)
    frontier = planning_frontier(table)
    stem = args.output.with_name(args.output.name + "_frontier")
    frontier.to_csv(stem.with_suffix(".csv"), index=False)
    plot_frontier(frontier, stem.with_suffix(".png"), max_unmet=args.max_unmet,
                  series=int(panel["series_id"].nunique()), days=args.days,
                  floor=not args.no_floor)
    target = measure_target(table, result.by_series, frontier, max_unmet=args.max_unmet)
    print(json.dumps(target, indent=1))
    args.output.with_suffix(".json").write_text(json.dumps({
        "series": int(panel["series_id"].nunique()), "days": args.days,
        "capped_at_capacity": not args.no_cap, "day_kind_floor": not args.no_floor,
        "headroom": headroom, "seconds": seconds,
        "target": target, "rows": json.loads(table.to_json(orient="records"))}, indent=1))
    print(f"wrote {args.output.with_suffix('.csv')}, .json and {stem.with_suffix('.csv')}, .png")
    return 0


def measure_target(table: pd.DataFrame, by_series: pd.DataFrame, frontier: pd.DataFrame, *,
                   max_unmet: float) -> dict[str, dict[str, object]]:
    """Per block, the share saved at most ``max_unmet`` unmet: each model at the quantile the
    backtest chooses (for all series at once, and per series), yesterday's peak at its cheapest
    margin meeting it, the oracle; and whether each model beats yesterday's peak."""
    from prism.evaluation.planning import (
        DAY_KIND,
        ORACLE,
        YESTERDAY,
        aggregate_plans,
        best_within,
        choose_quantiles,
        versus_reference,
    )

    out: dict[str, dict[str, object]] = {}
    for block in pd.unique(frontier["block"]):
        rows = frontier[frontier["block"] == block]
        entry: dict[str, object] = {"max_unmet": max_unmet}
        for family in pd.unique(rows["family"]):
            points = rows[rows["family"] == family]
            best = best_within(points, max_unmet)
            entry[str(family)] = None if best is None else {
                "plan": str(best["plan"]), "setting": _num(best["setting"]),
                "saved_share": _num(best["saved_share"]), "unmet_share": _num(best["unmet_share"])}
        for model in [m for m in pd.unique(table["model"].dropna()) if m]:
            chosen = choose_quantiles(by_series, model=str(model), block=str(block),
                                      max_unmet=max_unmet)
            picked = by_series.merge(chosen[["series_id", "quantile"]],
                                     on=["series_id", "quantile"])
            picked = picked[(picked["model"] == model) & (picked["block"] == block)]
            total = aggregate_plans(picked.assign(plan="per-series", quantile=np.nan))
            entry[f"{model} per series"] = {
                "quantiles": {str(s): float(q) for s, q in
                              zip(chosen["series_id"], chosen["quantile"], strict=True)},
                "series_meeting_target": int(chosen["meets_target"].sum()),
                "saved_share": _num(total["saved_share"].iloc[0]),
                "unmet_share": _num(total["unmet_share"].iloc[0])}
        for reference in (YESTERDAY, DAY_KIND):
            versus = versus_reference(table[table["block"] == block], "prism",
                                      reference=reference)
            if not versus.empty:
                entry[f"prism beats {reference}"] = bool(versus["beats"].iloc[0])
        oracle = rows[rows["family"] == ORACLE]
        if not oracle.empty:
            entry[ORACLE] = {"saved_share": _num(oracle["saved_share"].iloc[0]),
                             "unmet_share": _num(oracle["unmet_share"].iloc[0])}
        out[str(block)] = entry
    return out


def plot_frontier(frontier: pd.DataFrame, path: Path, *, max_unmet: float, series: int,
                  days: int, floor: bool = True) -> None:
    """Saved share against unmet share, one panel per block, one line per plan family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blocks = list(pd.unique(frontier["block"]))
    fig, axes = plt.subplots(1, len(blocks), figsize=(6 * len(blocks), 4.5), dpi=110,
                             squeeze=False)
    for ax, block in zip(axes[0], blocks, strict=True):
        draw_families(ax, frontier[frontier["block"] == block])
        ax.axvline(max_unmet * 100, color="#c0392b", ls=":", lw=1,
                   label=f"target: {max_unmet * 100:g} % unmet")
        ax.set_xscale("symlog", linthresh=0.1)  # the oracle leaves 0 unmet
        ax.set_xlim(left=0)
        ax.set_xlabel("unmet demand (% of GPU-hours demanded)")
        ax.set_ylabel("idle GPU-hours saved vs static peak (%)")
        name = {"1d": "daily", "1h": "hourly"}.get(str(block), str(block))
        floored = ", models' plans at least the day-kind peak" if floor else ""
        ax.set_title(f"{name} levels, {series} VCs x {days} days{floored}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def draw_families(ax: Any, rows: pd.DataFrame, *, suffix: str = "",
                  tags: bool = True) -> None:
    """Each plotted family's frontier points of ``rows`` on ``ax`` (a star for a single
    point; with ``tags``, PRISM's quantiles and the margins of yesterday's peak)."""
    for family, color in PLOTTED.items():
        points = rows[rows["family"] == family].sort_values("unmet_share")
        if points.empty:
            continue
        x, y = points["unmet_share"] * 100, points["saved_share"] * 100
        if len(points) == 1:
            ax.scatter(x, y, marker="*", s=120, color=color, label=family + suffix, zorder=3)
            continue
        ax.plot(x, y, marker="o", ms=4, color=color, label=family + suffix,
                zorder=4 if family == "prism" else 2)  # over naive's where they agree
        for _, p in points.iterrows():
            if tags and family in ("prism", "yesterday's peak"):
                tag = (f"p{p['setting'] * 100:g}" if family == "prism"
                       else f"+{p['setting'] * 100:g}%")
                ax.annotate(tag, (p["unmet_share"] * 100, p["saved_share"] * 100),
                            fontsize=6, xytext=(3, 3), textcoords="offset points")


def _num(value: object) -> float | None:
    number = float(value)  # type: ignore[arg-type]
    return None if np.isnan(number) else round(number, 6)


if __name__ == "__main__":
    raise SystemExit(main())
