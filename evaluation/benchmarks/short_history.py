"""Bands on short histories: how the 90 % band covers when a series has only days of data.

    python -m evaluation.benchmarks.short_history [--days 3,5,7,14,21] [--seeds 1,2]
        [--models naive,prism] [--output DIR]

A new VC, a new app or a trace of a week has days of history, not the weeks the accuracy
benchmark's panels hold. The conformal bands (:mod:`prism.forecasters.conformal`) hold out
the last 7 days of a series for calibration, but at most a third of it: on a series of 4 days
the tail is 1.3 days, and its day-ahead errors come from origins a few hours apart.
A block of horizon steps is *sure* where the origins spread over ``MIN_BLOCK_WINDOWS`` times
its first step; past the last sure block, each level's offset is the wider of the block's own
and the last sure block's widened with the square root of the step
(:func:`~prism.forecasters.conformal.widen_unsure`).

Panels: the shapes benchmark's 10-minute VC and inference-app shapes
(:func:`evaluation.benchmarks.shapes.make_panels`: idle, bursts, weekly, sawtooth,
autoscaled, manual; 3 series each), cut so that the first of 4 cutoffs 6 h apart has
``days`` days of history; a day ahead from each. Per history length and horizon (1 h, 6 h,
1 d): the 90 % band's coverage and mean width, of each model as it is (``gate``) and with
the rule off (``MIN_BLOCK_WINDOWS = 1``: every block with 24 residuals sure, as before;
``no gate``). The point forecasts are the same in both (checked). Writes
``short_history.{csv,md}`` under ``--output``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from evaluation.benchmarks.shapes import RESULTS, make_panels, shape_of
from prism.evaluation.backtest import backtest
from prism.forecasters import conformal, get_forecaster
from prism.schema import SERIES_ID, TS, parse_duration

DAYS = (3, 5, 7, 14, 21)
SEEDS = (1, 2)
MODELS = ("naive", "prism")
HORIZONS = ("1h", "6h", "1d")
WINDOWS = 4
STEP = "6h"
QUANTILES = (0.05, 0.5, 0.95)


@contextmanager
def block_windows(value: int) -> Iterator[None]:
    """``MIN_BLOCK_WINDOWS`` set to ``value`` (the per-series and the panel path read it
    through :func:`~prism.forecasters.conformal.sure_blocks`)."""
    before = conformal.MIN_BLOCK_WINDOWS
    conformal.MIN_BLOCK_WINDOWS = value
    try:
        yield
    finally:
        conformal.MIN_BLOCK_WINDOWS = before


def cut(panel: pd.DataFrame, days: int) -> pd.DataFrame:
    """The start of each series: ``days`` of history before the first cutoff, then what the
    cutoffs need (a day ahead of the last, the cutoffs 6 h apart)."""
    span = (pd.Timedelta(days=days) + parse_duration("1d")
            + (WINDOWS - 1) * pd.Timedelta(STEP))
    start = panel.groupby(SERIES_ID)[TS].transform("min")
    out: pd.DataFrame = panel[panel[TS] < start + span].reset_index(drop=True)
    return out


def run(days: Sequence[int], seeds: Sequence[int], models: Sequence[str]) -> pd.DataFrame:
    """Backtest frames (``series_id, ts, cutoff, model, mean, p5, p50, p95, value``) with
    ``days``, ``seed`` and ``variant`` columns.

    Raises:
        AssertionError: if the rule moved a point forecast (it only touches the bands).
    """
    frames = []
    for seed in seeds:
        panels = make_panels(seed)
        whole = pd.concat([panels["10min"], panels["10min-apps"]], ignore_index=True)
        for d in days:
            panel = cut(whole, d)
            started = time.perf_counter()
            pair = []
            for variant, value in (("gate", conformal.MIN_BLOCK_WINDOWS), ("no gate", 1)):
                with block_windows(value):
                    frame = backtest({m: get_forecaster(m) for m in models}, panel,
                                     horizon="1d", windows=WINDOWS, step=STEP,
                                     quantiles=QUANTILES)
                frame["variant"] = variant
                pair.append(frame)
            assert np.array_equal(pair[0]["mean"].to_numpy(), pair[1]["mean"].to_numpy())
            for frame in pair:
                frame["days"], frame["seed"] = d, seed
                frames.append(frame)
            print(f"seed {seed}, {d:>2} days: {time.perf_counter() - started:.0f} s",
                  flush=True)
    return pd.concat(frames, ignore_index=True)


def score(frame: pd.DataFrame) -> pd.DataFrame:
    """Per history length, horizon, model and variant: coverage of the 90 % band, its mean
    width, and the windows (series x cutoffs x seeds) behind them."""
    ahead = frame[TS] - frame["cutoff"]
    frame = frame.assign(covered=(frame["value"] >= frame["p5"])
                         & (frame["value"] <= frame["p95"]),
                         width=frame["p95"] - frame["p5"])
    rows = []
    for horizon in HORIZONS:
        part = frame[ahead <= parse_duration(horizon)]
        table = part.groupby(["days", "model", "variant"], sort=True).agg(
            coverage_90=("covered", "mean"), width_90=("width", "mean"))
        table["windows"] = part.groupby(["days", "model", "variant"]).apply(
            lambda g: g.groupby([SERIES_ID, "cutoff", "seed"]).ngroups)
        rows.append(table.reset_index().assign(horizon=horizon))
    out = pd.concat(rows, ignore_index=True)
    return out[["days", "horizon", "model", "variant", "coverage_90", "width_90", "windows"]]


def by_shape(frame: pd.DataFrame, model: str = "prism") -> pd.DataFrame:
    """A day ahead: coverage per shape, history length and variant, for one model."""
    part = frame[frame["model"] == model]
    covered = (part["value"] >= part["p5"]) & (part["value"] <= part["p95"])
    table: pd.DataFrame = covered.groupby([shape_of(part[SERIES_ID]), part["days"],
                                           part["variant"]]).mean().unstack("days")
    return table


def markdown(table: pd.DataFrame) -> str:
    """Coverage (width) per history length: a row per horizon, model and variant."""
    days = sorted(table["days"].unique())
    lines = ["| horizon | model | variant | " + " | ".join(f"{d} d" for d in days) + " |",
             "|---|---|---|" + "---:|" * len(days)]
    for (horizon, model, variant), part in table.groupby(["horizon", "model", "variant"],
                                                         sort=False):
        cells = part.set_index("days")
        lines.append(f"| {horizon} | `{model}` | {variant} | " + " | ".join(
            f"{cells.loc[d, 'coverage_90']:.3f} ({cells.loc[d, 'width_90']:.1f})"
            for d in days) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", default=",".join(map(str, DAYS)),
                        help="days of history before the first cutoff, comma-separated")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        days = [int(d) for d in args.days.split(",") if d.strip()]
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error("--days and --seeds take whole numbers, e.g. 3,7")
    if not days or min(days) < 2:
        parser.error(f"--days {args.days!r}: at least 2 days of history")
    models = [m for m in args.models.split(",") if m]
    frame = run(days, seeds, models)
    table = score(frame)
    order = {h: i for i, h in enumerate(HORIZONS)}
    table = table.sort_values(["horizon", "model", "variant", "days"],
                              key=lambda c: c.map(order) if c.name == "horizon" else c,
                              kind="stable").reset_index(drop=True)
    args.output.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output / "short_history.csv", index=False, float_format="%.6g")
    shapes = by_shape(frame) if "prism" in models else None
    text = (f"# Bands on short histories: 90 % coverage (mean width)\n\n"
            f"`python -m evaluation.benchmarks.short_history` (seeds "
            f"{', '.join(map(str, seeds))}; the shapes benchmark's 10-minute shapes, 18 series "
            f"a seed, cut to the days of history before the first of {WINDOWS} cutoffs "
            f"{STEP} apart; a day ahead scored on its first 1 h, 6 h and 1 d). `gate`: "
            f"`MIN_BLOCK_WINDOWS = {conformal.MIN_BLOCK_WINDOWS}` (the default); `no gate`: "
            f"1 (before).\n\n{markdown(table)}\n")
    if shapes is not None:
        cols = list(shapes.columns)
        rows = ["| shape | variant | " + " | ".join(f"{d} d" for d in cols) + " |",
                "|---|---|" + "---:|" * len(cols)]
        rows += [f"| {shape} | {variant} | " + " | ".join(f"{v:.3f}" for v in values) + " |"
                 for (shape, variant), values in zip(shapes.index, shapes.to_numpy(),
                                                     strict=True)]
        text += "\n`prism` a day ahead, 90 % coverage per shape:\n\n" + "\n".join(rows) + "\n"
    (args.output / "short_history.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
