"""Shapes the accuracy benchmark's panels lack: PRISM against the last value on each.

The accuracy benchmark judges PRISM on seven panels; other clusters have other shapes. This
benchmark generates a panel of each shape real clusters have that those panels hold little
of, and backtests the models on it as a user would (``prism backtest``: a day ahead, cutoffs
every 12 h over the last week, a fresh fit per cutoff), scored like the accuracy benchmark
(AvgRelMAE against the last value, bootstrap interval over cutoffs, catastrophes) on the
first 1 h, 6 h and 1 d of each forecast, per shape.

Shapes (28 days at 10 min unless said; ``--seeds`` draws each anew):

- ``idle``: VCs at 0 that run 8- and 16-GPU jobs now and then (a few hours each);
- ``bursts``: a base load with bursts that decay geometrically (10-50 min half-lives);
- ``weekly``: 400-500 GPUs on weekdays 10:00-18:00 (2 h ramps), a night and weekend floor;
- ``sawtooth``: a gang of 4-GPU jobs that grows and ends together;
- ``autoscaled``: an inference app's replicas (1, 2 or 4 GPUs each) following a daily load,
  up at once and down after an hour's cooldown; a new version changes what a replica
  serves (a step that holds) every few days;
- ``manual``: an app resized by hand every few days (steps that hold, no cycle);
- ``counts``: job arrivals per 5 min (21 days), Poisson with a daily cycle;
- ``hourly``: hourly demand (60 days) with a daily cycle and level shifts that hold;
- ``growth``: a daily cycle on a level that grows 1-3 % a day (or shrinks half as fast);
- ``stairs``: a fleet scaled by hand, steps of 1-7 GPUs, three in four up, each held an
  exponential 17 h (a random walk with drift, no cycle);
- ``drains``: a busy VC near its quota, drained to 10-60 % for 2-8 h a few times a month.

The 10-minute VC shapes share one panel (PRISM's stacker learns across it, as in a cluster
whose VCs differ), and so do the two inference-app shapes (a fleet's apps); the 5-minute and
hourly ones are panels of their own. (With the apps in the VCs' panel, the stacker's shared
weights moved the other shapes: idle VCs at 6 h 3.77 -> 1.00, sawtooth at 1 h 0.93 -> 1.05.)
The last three, added later, are a second cluster's panel (``10min-b``).

Run: ``python -m evaluation.benchmarks.shapes`` (writes ``evaluation/results/shapes.{csv,md}``;
``--quick`` is the tests' smoke setting).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from evaluation.benchmarks.accuracy import model_specs, prism_variants
from prism.errors import ConfigError
from prism.evaluation.backtest import backtest
from prism.evaluation.metrics import evaluate, summarize_windows
from prism.forecasters import get_forecaster
from prism.schema import SERIES_ID, TS, parse_duration

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "evaluation" / "results"
BASELINE = "naive"
MODELS = ("naive", "gbm", "prism")
HORIZONS = ("1h", "6h", "1d")
SHAPES = ("idle", "bursts", "weekly", "sawtooth", "autoscaled", "manual", "counts", "hourly",
          "growth", "stairs", "drains")
PANELS = ("10min", "10min-apps", "5min", "1h", "10min-b")
WINDOWS = 14
STEP = "12h"
SEEDS = (1, 2)
PER_SHAPE = 3
QUICK_WINDOWS = 2
N_BOOT = 1000
START = pd.Timestamp("2026-01-05")  # a Monday


def _idle(rng: np.random.Generator, n: int) -> np.ndarray:
    v = np.zeros(n)
    for start in rng.choice(n, rng.integers(5, 15), replace=False):
        v[start:start + int(rng.exponential(30)) + 3] += rng.choice([8.0, 16.0])
    return v


def _bursts(rng: np.random.Generator, n: int) -> np.ndarray:
    base = rng.uniform(50, 200)
    v = np.full(n, base)
    for start in rng.choice(n - 100, rng.integers(8, 20), replace=False):
        v[start:start + 100] += (rng.uniform(0.3, 1.0) * base
                                 * rng.uniform(0.85, 0.95) ** np.arange(100))
    return np.round(v + rng.normal(0, 2, n))


def _weekly(rng: np.random.Generator, ts: pd.DatetimeIndex) -> np.ndarray:
    hour = np.asarray(ts.hour + ts.minute / 60, dtype=float)
    day = np.clip((hour - 8) / 2, 0, 1) * np.clip((20 - hour) / 2, 0, 1)
    weekday = np.asarray(ts.day_of_week < 5, dtype=float)
    high, low = rng.uniform(200, 500), rng.uniform(30, 100)
    return np.round(low + (high - low) * weekday * day + rng.normal(0, 5, len(ts)))


def _sawtooth(rng: np.random.Generator, n: int) -> np.ndarray:
    v = np.zeros(n)
    level, cap = 0.0, rng.uniform(100, 300)
    for k in range(n):
        level += rng.poisson(0.4) * 4
        if level > cap or rng.random() < 0.003:
            level = rng.uniform(0, 0.2) * cap
        v[k] = level
    return v


def _autoscaled(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(n)
    load = rng.uniform(3, 30) * (1 + rng.uniform(0.3, 0.9)
                                 * np.cos(2 * np.pi * (t - rng.uniform(0, 144)) / 144))
    load *= rng.lognormal(0, 0.08, n)
    served = np.ones(n)  # what a replica serves: a new version every few days
    j = 0
    while (j := j + int(rng.exponential(5 * 144)) + 1) < n:
        served[j:] *= rng.choice([rng.uniform(0.6, 0.85), rng.uniform(1.2, 1.6)])
    want = np.maximum(np.ceil(load / served), 1)
    replicas, since, v = want[0], 0, np.empty(n)
    for k in range(n):
        if want[k] > replicas:
            replicas, since = want[k], k
        elif want[k] < 0.8 * replicas and k - since >= 6:
            replicas, since = np.ceil((replicas + want[k]) / 2), k
        v[k] = replicas
    return v * rng.choice([1.0, 2.0, 4.0])


def _manual(rng: np.random.Generator, n: int) -> np.ndarray:
    v = np.empty(n)
    replicas, start = int(rng.integers(5, 40)), 0
    while start < n:
        span = int(rng.exponential(3 * 144)) + 1
        v[start:start + span] = replicas
        start += span
        replicas = max(1, replicas + int(rng.choice([-1, 1]) * rng.integers(1, replicas // 2 + 2)))
    return v * rng.choice([1.0, 2.0, 4.0, 8.0])


def _counts(rng: np.random.Generator, n: int, per_day: int) -> np.ndarray:
    t = np.arange(n)
    rate = rng.uniform(0.3, 3) * (1 + 0.8 * np.sin(2 * np.pi * (t + rng.integers(per_day))
                                                    / per_day))
    return rng.poisson(rate).astype(float)


def _hourly(rng: np.random.Generator, n: int) -> np.ndarray:
    level = np.full(n, rng.uniform(100, 300))
    j = 0
    while True:
        j += int(rng.exponential(7 * 24)) + 12
        if j >= n:
            break
        level[j:] = level[j - 1] * rng.uniform(0.6, 1.5)
    t = np.arange(n)
    return np.round(level * (1 + 0.2 * np.sin(2 * np.pi * t / 24)) + rng.normal(0, 3, n))


def _growth(rng: np.random.Generator, ts: pd.DatetimeIndex) -> np.ndarray:
    rate = rng.uniform(0.01, 0.03) * rng.choice([1.0, -0.5])
    hour = np.asarray(ts.hour + ts.minute / 60, dtype=float)
    cycle = 1 + rng.uniform(0.1, 0.3) * np.sin(2 * np.pi * (hour - 9) / 24)
    days = np.arange(len(ts)) / 144
    return np.round(rng.uniform(100, 300) * (1 + rate) ** days * cycle
                    + rng.normal(0, 3, len(ts)))


def _stairs(rng: np.random.Generator, n: int) -> np.ndarray:
    v = np.empty(n)
    level, start = float(rng.integers(20, 80)), 0
    while start < n:
        span = int(rng.exponential(100)) + 1
        v[start:start + span] = level
        start += span
        level = max(1.0, level + float(rng.choice([1, 1, 1, -1]) * rng.integers(1, 8)))
    return v


def _drains(rng: np.random.Generator, n: int) -> np.ndarray:
    quota = rng.uniform(150, 400)
    v = np.minimum(quota * np.clip(1 + 0.03 * rng.standard_normal(n), 0.9, 1.1), 1.05 * quota)
    for start in rng.choice(n - 60, rng.integers(3, 7), replace=False):
        v[start:start + int(rng.uniform(12, 48))] *= rng.uniform(0.1, 0.6)
    return np.round(v)


def make_panels(seed: int, per_shape: int = PER_SHAPE) -> dict[str, pd.DataFrame]:
    """The generated panels of one seed, by step (``10min``, ``5min``, ``1h``; the inference
    apps, ``10min-apps``, are a panel of their own, as a fleet's store would be, and so is a
    second cluster, ``10min-b``); series ids ``s<seed>/<shape><i>/<metric>``."""
    rng = np.random.default_rng(seed)
    frames: dict[str, list[pd.DataFrame]] = {"10min": [], "10min-apps": [], "5min": [],
                                              "1h": [], "10min-b": []}

    def add(step: str, shape: str, i: int, metric: str, ts: pd.DatetimeIndex,
            values: np.ndarray) -> None:
        frames[step].append(pd.DataFrame({SERIES_ID: f"s{seed}/{shape}{i}/{metric}", TS: ts,
                                          "value": values}))

    ts10 = pd.date_range(START, periods=28 * 144, freq="10min")
    for shape, make in (("idle", _idle), ("bursts", _bursts), ("sawtooth", _sawtooth)):
        for i in range(per_shape):
            add("10min", shape, i, "gpus_in_use", ts10, make(rng, len(ts10)))
    for i in range(per_shape):
        add("10min", "weekly", i, "gpus_in_use", ts10, _weekly(rng, ts10))
    apps = np.random.default_rng((seed, 1))  # added later: the other shapes draw as before
    for shape, make in (("autoscaled", _autoscaled), ("manual", _manual)):
        for i in range(per_shape):
            add("10min-apps", shape, i, "gpus_in_use", ts10, make(apps, len(ts10)))
    ts5 = pd.date_range(START, periods=21 * 288, freq="5min")
    for i in range(per_shape):
        add("5min", "counts", i, "jobs_submitted", ts5, _counts(rng, len(ts5), 288))
    ts1 = pd.date_range(START, periods=60 * 24, freq="1h")
    for i in range(per_shape):
        add("1h", "hourly", i, "gpus_in_use", ts1, _hourly(rng, len(ts1)))
    second = np.random.default_rng((seed, 2))  # added later still
    for i in range(per_shape):
        add("10min-b", "growth", i, "gpus_in_use", ts10, _growth(second, ts10))
    for shape, make in (("stairs", _stairs), ("drains", _drains)):
        for i in range(per_shape):
            add("10min-b", shape, i, "gpus_in_use", ts10, make(second, len(ts10)))
    return {step: pd.concat(parts, ignore_index=True) for step, parts in frames.items()}


def shape_of(series_id: pd.Series) -> pd.Series:
    """The shape in a generated series id (``s1/idle0/gpus_in_use`` -> ``idle``)."""
    return series_id.str.split("/").str[1].str.rstrip("0123456789")


def run(seeds: Sequence[int], models: Sequence[str], windows: int,
        per_shape: int = PER_SHAPE, only: Sequence[str] = ()
        ) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Backtest frames of every model on every panel of every seed, one after another, and
    the panels by name (``s<seed>-<step>``, the frame's ``panel`` column).

    ``models`` are forecaster aliases or PRISM's variants (``prism-week``: the accuracy
    benchmark's :func:`~evaluation.benchmarks.accuracy.prism_variants`); ``only``: these
    panels (by step, e.g. ``10min-b``), all when empty.

    Raises:
        ConfigError: for a model that is neither.
    """
    specs = model_specs(models, prism_variants())
    frames = []
    panels: dict[str, pd.DataFrame] = {}
    for seed in seeds:
        for step, panel in make_panels(seed, per_shape).items():
            if only and step not in only:
                continue
            panels[f"s{seed}-{step}"] = panel
            started = time.perf_counter()
            forecasters = {m: get_forecaster(alias, **params)
                           for m, (alias, params) in specs.items()}
            frame = backtest(forecasters, panel, horizon="1d", windows=windows, step=STEP,
                             quantiles=(0.05, 0.5, 0.95))
            frame["panel"] = f"s{seed}-{step}"
            frames.append(frame)
            print(f"seed {seed} {step:>5}: {panel[SERIES_ID].nunique()} series, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    return pd.concat(frames, ignore_index=True), panels


def score(frame: pd.DataFrame, panels: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per shape and horizon: each model's AvgRelMAE against the last value and the rest of
    the accuracy benchmark's columns (``panels``: :func:`run`'s)."""
    rows: list[pd.DataFrame] = []
    ahead = frame[TS] - frame["cutoff"]
    for horizon in HORIZONS:
        cut = frame[ahead <= parse_duration(horizon)]
        scored = [evaluate(part.drop(columns="panel"), panels[str(name)])
                  for name, part in cut.groupby("panel")]
        windows: pd.DataFrame = pd.concat(scored, ignore_index=True)
        windows["shape"] = shape_of(windows[SERIES_ID])
        for shape, part in windows.groupby("shape", sort=False):
            table = summarize_windows(part.drop(columns="shape"), baseline=BASELINE,
                                      n_boot=N_BOOT, random_state=0)
            table.insert(0, "horizon", horizon)
            table.insert(0, "shape", shape)
            rows.append(table)
    out: pd.DataFrame = pd.concat(rows, ignore_index=True)
    order = {s: i for i, s in enumerate(SHAPES)}
    return out.sort_values(["shape", "horizon"], key=lambda c: c.map(
        order if c.name == "shape" else {h: i for i, h in enumerate(HORIZONS)}),
        kind="stable").reset_index(drop=True)


def markdown(table: pd.DataFrame, models: Sequence[str]) -> str:
    """AvgRelMAE [lo, hi] and catastrophes per shape and horizon, a column per model."""
    lines = ["| shape | horizon | " + " | ".join(f"`{m}`" for m in models if m != BASELINE)
             + " |", "|---|---|" + "---|" * (len(models) - 1)]
    for (shape, horizon), part in table.groupby(["shape", "horizon"], sort=False):
        cells = []
        for m in models:
            if m == BASELINE:
                continue
            row = part[part["model"] == m]
            if row.empty:
                cells.append("")
                continue
            r = row.iloc[0]
            if not np.isfinite(r.avg_rel_mae):
                cells.append("no window moved")
                continue
            cells.append(f"{r.avg_rel_mae:.3f} [{r.lo:.2f}, {r.hi:.2f}], "
                         f"{100 * r.catastrophes:.1f} %")
        lines.append(f"| {shape} | {horizon} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)),
                        help="generator seeds, comma-separated")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="models besides naive, comma-separated (PRISM's variants too, "
                        "e.g. prism-week)")
    parser.add_argument("--windows", type=int, default=WINDOWS)
    parser.add_argument("--panels", default="",
                        help=f"only these panels, comma-separated ({', '.join(PANELS)}); "
                        "all by default")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke setting: {QUICK_WINDOWS} windows, one series per shape")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give whole numbers, e.g. 1,2")
    only = [p.strip() for p in args.panels.split(",") if p.strip()]
    if unknown := [p for p in only if p not in PANELS]:
        parser.error(f"--panels {','.join(unknown)}: choose among {', '.join(PANELS)}")
    models = [BASELINE, *[m for m in args.models.split(",") if m and m != BASELINE]]
    windows = QUICK_WINDOWS if args.quick else args.windows
    per_shape = 1 if args.quick else PER_SHAPE
    try:
        frame, panels = run(seeds, models, windows, per_shape, only)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = score(frame, panels)
    args.output.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output / "shapes.csv", index=False, float_format="%.6g")
    text = (f"# Shapes: AvgRelMAE against `{BASELINE}` [95 % interval], catastrophes\n\n"
            f"Generator seeds {', '.join(map(str, seeds))}; per series {windows} cutoffs "
            f"{STEP} apart, a day ahead scored on its first 1 h, 6 h and 1 d "
            f"(`python -m evaluation.benchmarks.shapes`)."
            f"\n\n{markdown(table, models)}\n")
    (args.output / "shapes.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
