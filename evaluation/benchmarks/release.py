"""Job-aware forecast benchmark: does the release + arrivals model beat the last value?

    python -m evaluation.benchmarks.release [--windows 28] [--prism] [--output DIR]

**Panels** (10 min, PRISM's own ingest into an in-memory store):

- ``alibaba``: ``alibaba-v2023/<scope>/gpus_in_use`` at every scope of the v2023 pod list
  (``all`` and the QoS classes ``BE``, ``LS``, ``Burstable``, ``Guaranteed``; the pod list has
  no GPU type, so no ``gpu:<type>`` scope);
- ``generated``: ``cluster-0/<vc>/gpus_in_use`` per VC of
  ``prism.generate.generate_trace(days=35, clusters=1, seed=0)`` ingested as ``jobs-csv``.

Each series' jobs come from :meth:`prism.store.Store.load_jobs` (its scope; the cluster's
jobs are the curves' shrinkage target).

**Cutoffs** as in ``evaluation.benchmarks.accuracy``: 28 every 6 h over the last 7 days
(:func:`prism.evaluation.backtest.backtest_cutoffs`, ``horizon="1d"``, ``step="6h"``); the
horizons ``1h``, ``6h``, ``1d`` are the first 6, 36, 144 steps of the day-ahead forecast. A
cutoff ``c`` is the label of the last bucket seen, so the job model forecasts from the end of
that bucket, ``c + 10min``, with the jobs as known then.

**Models**: ``naive`` (the last value); ``release`` (:class:`JobReleaseModel` with its
defaults: the median of 200 simulated futures of bucket means, arrivals ``auto``: the queue
where jobs wait for room, else the same time of day over the last 7 days, capped at the most
GPUs the scope ever held); ``release-change`` (the last value plus the model's change,
``naive + forecast - nowcast``: the series measures bucket means and the nowcast the GPUs
held at the origin, so only the model's change is used); one ablation per setting,
``release[<param>=<value>]`` (``VARIANTS``), each with its ``-change``; with ``--prism``, the
series-only ``prism`` through :func:`prism.evaluation.backtest.backtest` (1-6 s per series
and cutoff, 280 of them: off by default to keep the run within minutes on one core).

**Metric**: AvgRelMAE against naive (:func:`prism.evaluation.metrics.summarize_windows`: the
geometric mean over series x cutoffs of each window's MAE over naive's, floors as there) with
its 95 % paired cutoff-block bootstrap interval (1,000 replicates), pooled WAPE and the share
of windows above 2x naive's MAE (catastrophes), per panel and horizon.

**Output** (``--output``, default ``evaluation/results``): ``release.csv`` (one row per panel,
horizon and model) and ``release.md``; the table is printed. One process, one thread.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prism.evaluation.backtest import CUTOFF, MODEL, backtest, backtest_cutoffs
from prism.evaluation.metrics import evaluate, summarize_windows
from prism.forecasters import get_forecaster
from prism.forecasters.release import JobReleaseModel
from prism.ingest.pipeline import ingest
from prism.schema import SERIES_ID, TS, VALUE, parse_duration
from prism.store import Store

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"
RESULTS = ROOT / "evaluation" / "results"
ALIBABA = TRACES / "alibaba_gpu" / "v2023_openb_pod_list_default.csv.gz"
BASELINE = "naive"
BACKTEST_HORIZON = "1d"
STEP = "6h"
WINDOWS = 28
HORIZONS = ("1h", "6h", "1d")
N_BOOT = 1000
#: Job-model settings measured: name -> JobReleaseModel parameters (each also as -change).
VARIANTS: dict[str, dict[str, Any]] = {
    "release": {},
    "release[estimate=mean]": {"estimate": "mean"},
    "release[arrivals=daily]": {"arrivals": "daily"},
    "release[arrivals=recent]": {"arrivals": "recent"},
    "release[arrivals=queue]": {"arrivals": "queue"},
    "release[arrivals=none]": {"arrivals": "none"},
    "release[point=end]": {"point": "end"},
    "release[cap=False]": {"cap": False},
}
HEADLINE = ("release", "release-change", BASELINE)
COLUMNS = ["avg_rel_mae", "lo", "hi", "wape", "mase", "catastrophes", "windows",
           "seconds_per_window"]

logger = logging.getLogger("evaluation.benchmarks.release")


# -- panels -----------------------------------------------------------------------------------
def load_panels() -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, pd.DataFrame]]]:
    """The panels and, per series, its jobs and its cluster's jobs.

    Returns:
        ``(panels, jobs)``: panel name -> panel; series id -> ``{"jobs": ..., "reference":
        ...}`` (frames of :meth:`Store.load_jobs`).
    """
    panels: dict[str, pd.DataFrame] = {}
    jobs: dict[str, dict[str, pd.DataFrame]] = {}
    with Store.open(":memory:") as store, tempfile.TemporaryDirectory() as tmp:
        from prism.generate import generate_trace

        ingest(store, [ALIBABA], "alibaba-pods")
        trace = generate_trace(tmp, days=35, clusters=1, seed=0)
        ingest(store, [trace.jobs_path], "jobs-csv")
        series = store.list_series(metric="gpus_in_use")
        pick = {
            "alibaba": series["cluster"] == "alibaba-v2023",
            "generated": series["cluster"].isin(list(trace.clusters))
            & (series["scope"] != "all") & ~series["scope"].str.startswith("gpu:"),
        }
        for name, mask in pick.items():
            chosen = series[mask].sort_values(SERIES_ID)
            panels[name] = store.load_panel(list(chosen[SERIES_ID]))
            for row in chosen.itertuples():
                jobs[str(row.series_id)] = {
                    "jobs": store.load_jobs(str(row.cluster), str(row.scope)),
                    "reference": store.load_jobs(str(row.cluster)),
                }
    return panels, jobs


# -- forecasts --------------------------------------------------------------------------------
def job_forecasts(
    panel: pd.DataFrame, jobs: dict[str, dict[str, pd.DataFrame]], windows: int,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """The backtest frame of naive and of every job-model variant (and its -change) on a
    panel, and the seconds per series and cutoff of each model.

    Returns:
        ``series_id, ts, cutoff, model, mean, value`` rows, and model -> seconds.
    """
    cuts = backtest_cutoffs(panel, horizon=BACKTEST_HORIZON, windows=windows, step=STEP)
    freq = panel.groupby(SERIES_ID)[TS].diff().dropna().min()
    freq_s = freq.total_seconds()
    steps = int(parse_duration(BACKTEST_HORIZON) / freq)
    frames: list[pd.DataFrame] = []
    seconds: dict[str, float] = {}
    for sid, group in panel.groupby(SERIES_ID, sort=True):
        values = group.set_index(TS)[VALUE]
        cutoffs = pd.Series(cuts.loc[cuts[SERIES_ID] == sid, CUTOFF].to_numpy())
        pos = values.index.get_indexer(pd.DatetimeIndex(cutoffs))
        actual = np.stack([values.to_numpy()[p + 1:p + 1 + steps] for p in pos])
        last = values.to_numpy()[pos]
        origins = cutoffs + freq  # the end of the last bucket seen
        out = {BASELINE: np.repeat(last[:, None], steps, axis=1)}
        for name, params in VARIANTS.items():
            started = time.perf_counter()
            model = JobReleaseModel(**params).fit(
                jobs[str(sid)]["jobs"], freq_s, reference=jobs[str(sid)]["reference"],
                observed_from=group[TS].min())
            mean = model.forecast(origins, steps)
            now = model.nowcast(origins)
            took = (time.perf_counter() - started) / len(cutoffs)
            out[name] = mean
            out[f"{name}-change"] = last[:, None] + mean - now[:, None]
            for key in (name, f"{name}-change"):
                seconds[key] = seconds.get(key, 0.0) + took / panel[SERIES_ID].nunique()
        ts = cutoffs.to_numpy()[:, None] + freq.to_timedelta64() * np.arange(1, steps + 1)
        for name, mean in out.items():
            frames.append(pd.DataFrame({
                SERIES_ID: str(sid), TS: ts.ravel(),
                CUTOFF: np.repeat(cutoffs.to_numpy(), steps), MODEL: name,
                "mean": mean.ravel(), VALUE: actual.ravel()}))
    seconds.setdefault(BASELINE, 0.0)
    return pd.concat(frames, ignore_index=True), seconds


def prism_forecasts(panel: pd.DataFrame, windows: int) -> tuple[pd.DataFrame, float]:
    """The series-only PRISM's backtest frame on the same cutoffs, and seconds per window."""
    started = time.perf_counter()
    frame = backtest(get_forecaster("prism"), panel, horizon=BACKTEST_HORIZON,
                     windows=windows, step=STEP, quantiles=(0.5,))
    took = (time.perf_counter() - started) / (windows * panel[SERIES_ID].nunique())
    return frame[[SERIES_ID, TS, CUTOFF, MODEL, "mean", VALUE]], took


# -- scoring ----------------------------------------------------------------------------------
def score(frame: pd.DataFrame, panel: pd.DataFrame, dataset: str,
          seconds: dict[str, float]) -> pd.DataFrame:
    """One row per horizon and model: AvgRelMAE against naive with its interval, and more."""
    step = (frame[TS] - frame[CUTOFF])
    rows = []
    for horizon in HORIZONS:
        part = frame[step <= parse_duration(horizon)]
        windows = evaluate(part, panel)
        table = summarize_windows(windows, baseline=BASELINE, n_boot=N_BOOT)
        table.insert(0, "horizon", horizon)
        table.insert(0, "dataset", dataset)
        table["seconds_per_window"] = table[MODEL].map(seconds)
        rows.append(table)
    return pd.concat(rows, ignore_index=True)


def markdown(table: pd.DataFrame, note: str) -> str:
    """The headline table (AvgRelMAE [lo, hi]) and the full one, as Markdown."""
    def cell(r: pd.Series) -> str:
        return f"{r['avg_rel_mae']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"

    lines = ["# Job-aware forecast (release + arrivals) against the last value", "",
             f"AvgRelMAE against naive, 95 % paired cutoff-block bootstrap interval. {note}.",
             "Reproduce: `.venv/bin/python -m evaluation.benchmarks.release`.", ""]
    models = [m for m in pd.unique(table[MODEL]) if m in HEADLINE or m == "prism"]
    lines += ["| panel | horizon | " + " | ".join(models) + " |",
              "|---|---|" + "---|" * len(models)]
    for (dataset, horizon), g in table.groupby(["dataset", "horizon"], sort=False):
        by = g.set_index(MODEL)
        lines.append(f"| {dataset} | {horizon} | "
                     + " | ".join(cell(by.loc[m]) if m in by.index else "" for m in models)
                     + " |")
    lines += ["", "## Every variant", "",
              "| panel | horizon | model | AvgRelMAE [95 %] | WAPE | catastrophes | windows "
              "| s/window |", "|---|---|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        lines.append(f"| {r['dataset']} | {r['horizon']} | {r[MODEL]} | {cell(pd.Series(r))} | "
                     f"{r['wape']:.3f} | {r['catastrophes']:.3f} | {r['windows']} | "
                     f"{r['seconds_per_window']:.3f} |")
    return "\n".join(lines) + "\n"


def run(windows: int, with_prism: bool, say: Callable[[str], None]) -> pd.DataFrame:
    """Load the panels, forecast, score: the full table."""
    panels, jobs = load_panels()
    tables = []
    for dataset, panel in panels.items():
        say(f"{dataset}: {panel[SERIES_ID].nunique()} series, {len(panel):,} points")
        frame, seconds = job_forecasts(panel, jobs, windows)
        if with_prism:
            fc, took = prism_forecasts(panel, windows)
            frame = pd.concat([frame, fc], ignore_index=True)
            seconds["prism"] = took
        tables.append(score(frame, panel, dataset, seconds))
    return pd.concat(tables, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and write ``release.{csv,md}``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=WINDOWS)
    parser.add_argument("--prism", action="store_true",
                        help="also backtest the series-only PRISM (slow)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    table = run(args.windows, args.prism, lambda s: print(s, flush=True))  # noqa: T201
    note = f"{args.windows} cutoffs every {STEP}, {time.perf_counter() - started:.0f} s"
    args.output.mkdir(parents=True, exist_ok=True)
    table[["dataset", "horizon", MODEL, *COLUMNS]].to_csv(args.output / "release.csv",
                                                          index=False)
    text = markdown(table, note)
    (args.output / "release.md").write_text(text)
    print(text)  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
