"""Accuracy benchmark: rolling-origin backtests on the real traces against strong baselines.

    python -m evaluation.benchmarks.accuracy [--datasets helios_in_use,helios_demand,philly,
        alibaba] [--horizons 6h,1d] [--windows 7] [--models ...] [--no-references]

Data sets (``../shared/data/traces``, ingested at 10 min through PRISM's own adapters):

- ``helios_in_use`` / ``helios_demand``: the 16 Helios Earth VCs, ``gpus_in_use`` /
  ``gpu_demand`` (May 2020, 4,464 points each);
- ``philly``: Microsoft Philly ``nodes_in_use`` (Oct-Dec 2017);
- ``alibaba``: Alibaba cluster-trace-gpu-v2023 ``gpus_in_use`` (4,836 points).

Each model is backtested with 7 daily cutoffs over the last week (``step`` 1 d; the last window
ends at the last point, as statsforecast's ``cross_validation`` places them) at each horizon:
PRISM, its ablations, every other PRISM forecaster, and statsforecast's ``Naive``,
``SeasonalNaive``, ``AutoETS``, ``AutoTheta`` and ``MSTL`` run in the same process on the same
cutoffs through their own ``cross_validation`` (prediction intervals at 80/90/98 %, so every
model has the quantiles 0.01, 0.05, 0.1, 0.5, 0.9, 0.95, 0.99; the references' median is their
mean). Metrics come from :mod:`evaluation.metrics`: mean MASE over windows, sMAPE, burst-phase
MSE, CRPS, 90 % coverage, and fit+predict seconds per series and window.

Writes ``evaluation/results/accuracy.csv`` (one row per data set, horizon and model),
``accuracy_windows.csv`` (one row per window) and ``accuracy.md`` (the tables, with PRISM's
gain over the best non-PRISM model).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from evaluation.backtest import backtest, backtest_cutoffs
from evaluation.metrics import evaluate, summary
from prism.forecasters import FORECASTERS, BaseForecaster, get_forecaster
from prism.forecasters.base import quantile_column
from prism.ingest.pipeline import ingest
from prism.store import Store

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"
RESULTS = ROOT / "evaluation" / "results"
QUANTILES = (0.01, 0.05, 0.1, 0.5, 0.9, 0.95, 0.99)
LEVELS = (80, 90, 98)
#: PRISM and its ablations, by the name they carry in the tables.
PRISM_VARIANTS: dict[str, dict[str, bool]] = {
    "prism": {},
    "prism-no_primitives": {"use_primitives": False},
    "prism-no_spectral": {"use_spectral": False},
    "prism-no_primitives_spectral": {"use_primitives": False, "use_spectral": False},
    "prism-no_rnn": {"use_rnn": False},
}
REFERENCES = ("sf-Naive", "sf-SeasonalNaive", "sf-AutoETS", "sf-AutoTheta", "sf-MSTL")
SUMMARY_COLUMNS = ["mase", "smape", "burst_mse", "crps", "coverage_90", "seconds_per_series"]

logger = logging.getLogger("evaluation.benchmarks.accuracy")


def load_datasets(names: list[str]) -> dict[str, pd.DataFrame]:
    """The benchmark panels, ingested from the real traces into a throw-away store."""
    helios = TRACES / "helios_earth_vc"
    with Store.open(":memory:") as store:
        if any(n.startswith("helios") for n in names):
            ingest(store, sorted(helios.glob("earth_vc*_1min.csv.gz")), "helios-vc")
        if "philly" in names:
            ingest(store, [helios / "philly_node_sequence_1min.csv.gz"], "philly-nodes")
        if "alibaba" in names:
            ingest(store, [TRACES / "alibaba_gpu" / "v2023_openb_pod_list_default.csv.gz"],
                   "alibaba-pods")
        series = store.list_series()["series_id"].tolist()
        wanted = {
            "helios_in_use": [s for s in series if s.startswith("earth/")
                              and s.endswith("/gpus_in_use")],
            "helios_demand": [s for s in series if s.startswith("earth/")
                              and s.endswith("/gpu_demand")],
            "philly": ["philly/all/nodes_in_use"],
            "alibaba": ["alibaba-v2023/all/gpus_in_use"],
        }
        return {n: store.load_panel(wanted[n]) for n in names}


def _prism_models(names: list[str]) -> dict[str, BaseForecaster]:
    out: dict[str, BaseForecaster] = {}
    for name in names:
        if name in PRISM_VARIANTS:
            out[name] = get_forecaster("prism", **PRISM_VARIANTS[name])
        elif name in FORECASTERS:
            out[name] = get_forecaster(name)
    return out


def _run_ours(panel: pd.DataFrame, models: dict[str, BaseForecaster], horizon: str,
              windows: int, note: Callable[[str], None]) -> tuple[pd.DataFrame, dict[str, float]]:
    frames, seconds = [], {}
    n_series = panel["series_id"].nunique()
    for name, model in models.items():
        start = time.perf_counter()
        frames.append(backtest({name: model}, panel, horizon=horizon, windows=windows,
                               step="1d", quantiles=QUANTILES))
        seconds[name] = (time.perf_counter() - start) / (n_series * windows)
        note(f"{name:<30} {seconds[name]:7.2f} s per series and window")
    return pd.concat(frames, ignore_index=True), seconds


def _run_references(panel: pd.DataFrame, horizon: str, windows: int,
                    note: Callable[[str], None]) -> tuple[pd.DataFrame, dict[str, float]]:
    """statsforecast's models through their own cross_validation, on our cutoffs."""
    from statsforecast import StatsForecast
    from statsforecast.models import MSTL, AutoETS, AutoTheta, Naive, SeasonalNaive

    freq_s = int((panel["ts"].iloc[1] - panel["ts"].iloc[0]).total_seconds())
    day = 86_400 // freq_s
    h = int(pd.Timedelta(horizon).total_seconds() // freq_s)
    data = panel.rename(columns={"series_id": "unique_id", "ts": "ds", "value": "y"})
    references = {
        "sf-Naive": Naive(),
        "sf-SeasonalNaive": SeasonalNaive(season_length=day),
        "sf-AutoETS": AutoETS(season_length=1),
        "sf-AutoTheta": AutoTheta(season_length=day),
        "sf-MSTL": MSTL(season_length=[day, 7 * day]),
    }
    ours = backtest_cutoffs(panel, horizon=horizon, windows=windows, step="1d")
    frames, seconds = [], {}
    n_series = panel["series_id"].nunique()
    warm = data[data["unique_id"] == data["unique_id"].iloc[0]].tail(20 * day)
    for name, model in references.items():
        sf = StatsForecast(models=[model], freq=f"{freq_s}s", n_jobs=1)
        with warnings.catch_warnings():  # numba compiles on first use: not part of the timing
            warnings.simplefilter("ignore")
            sf.forecast(df=warm, h=h, level=list(LEVELS))
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cv = sf.cross_validation(df=data, h=h, n_windows=windows, step_size=day,
                                     level=list(LEVELS))
        seconds[name] = (time.perf_counter() - start) / (n_series * windows)
        col = str(model)
        cv = cv.reset_index() if "unique_id" not in cv.columns else cv
        frame = pd.DataFrame({
            "series_id": cv["unique_id"].astype(str), "ts": cv["ds"], "cutoff": cv["cutoff"],
            "model": name, "mean": cv[col].clip(lower=0.0),
        })
        for level in LEVELS:
            lo, hi = (100 - level) / 200, 1 - (100 - level) / 200
            frame[quantile_column(lo)] = cv[f"{col}-lo-{level}"].clip(lower=0.0)
            frame[quantile_column(hi)] = cv[f"{col}-hi-{level}"].clip(lower=0.0)
        frame["p50"] = frame["mean"]
        frame["value"] = cv["y"]
        qcols = [quantile_column(q) for q in QUANTILES]
        frame[qcols] = np.maximum.accumulate(frame[qcols].to_numpy(), axis=1)
        got = frame.groupby("series_id")["cutoff"].unique().map(sorted)
        want = ours.groupby("series_id")["cutoff"].unique().map(sorted)
        if not all(list(got[s]) == list(want[s]) for s in want.index):
            raise RuntimeError(f"{name}: statsforecast placed other cutoffs than PRISM's")
        frames.append(frame[["series_id", "ts", "cutoff", "model", "mean", *qcols, "value"]])
        note(f"{name:<30} {seconds[name]:7.2f} s per series and window")
    return pd.concat(frames, ignore_index=True), seconds


def _gain_table(table: pd.DataFrame) -> pd.DataFrame:
    """PRISM's gain over the best non-PRISM model, per data set and horizon, in %."""
    rows = []
    for (dataset, horizon), group in table.groupby(["dataset", "horizon"], sort=False):
        others = group[~group["model"].str.startswith("prism")]
        prism = group[group["model"] == "prism"]
        if prism.empty or others.empty:
            continue
        row: dict[str, object] = {"dataset": dataset, "horizon": horizon}
        for metric in ("mase", "burst_mse", "crps"):
            best = others.iloc[int(np.argmin(others[metric].to_numpy()))]
            ours = float(prism[metric].iloc[0])
            row[f"best_{metric}_model"] = best["model"]
            row[f"{metric}_gain_%"] = 100.0 * (1.0 - ours / float(best[metric]))
        rows.append(row)
    return pd.DataFrame(rows)


def _markdown(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write(table: pd.DataFrame, per_window: pd.DataFrame, output: Path, took: str,
           windows: int) -> None:
    output.mkdir(parents=True, exist_ok=True)
    table.to_csv(output / "accuracy.csv", index=False)
    per_window.to_csv(output / "accuracy_windows.csv", index=False)
    gains = _gain_table(table)
    parts = [f"# Accuracy benchmark\n\n`python -m evaluation.benchmarks.accuracy` ({took}). "
             f"Means over {windows} daily windows; seconds are fit + predict per series and "
             "window.\n"]
    for metric in ("mase", "coverage_90"):
        pivot = table.pivot_table(index="model", columns=["dataset", "horizon"], values=metric,
                                  sort=False)
        pivot.columns = [f"{c[0]} {c[1]}" for c in pivot.columns]
        pivot = pivot.sort_values(pivot.columns[0]).reset_index()
        parts.append(f"## {metric} by data set and horizon\n\n{_markdown(pivot)}\n")
    for key, group in table.groupby(["dataset", "horizon"], sort=False):
        shown = group[["model", *SUMMARY_COLUMNS]].sort_values("mase")
        parts.append(f"## {key[0]}, horizon {key[1]}\n\n{_markdown(shown)}\n")
    if not gains.empty:
        parts.append(f"## PRISM's gain over the best non-PRISM model\n\n{_markdown(gains)}\n")
    (output / "accuracy.md").write_text("\n".join(parts))
    print(gains.to_string(index=False, float_format=lambda v: f"{v:.1f}"))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="helios_in_use,helios_demand,philly,alibaba")
    parser.add_argument("--horizons", default="6h,1d")
    parser.add_argument("--windows", type=int, default=7)
    parser.add_argument("--models", default=",".join(
        [*PRISM_VARIANTS, *sorted(a for a in FORECASTERS if a != "prism")]))
    parser.add_argument("--no-references", action="store_true",
                        help="skip statsforecast (e.g. when it is not installed)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--merge", type=Path, nargs="+", metavar="DIR",
                        help="only merge the results of runs written to these --output "
                             "folders (e.g. one run per horizon, each on its own core); a "
                             "model's rows in a later folder replace an earlier folder's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.merge:  # a model's rows from a later folder replace an earlier folder's
        key = ["dataset", "horizon", "model"]
        table = pd.concat([pd.read_csv(d / "accuracy.csv").assign(run=i)
                           for i, d in enumerate(args.merge)], ignore_index=True)
        table = table.drop_duplicates(key, keep="last")
        per_window = pd.concat([pd.read_csv(d / "accuracy_windows.csv").assign(run=i)
                                for i, d in enumerate(args.merge)], ignore_index=True)
        per_window = per_window.merge(table[[*key, "run"]], on=[*key, "run"])
        _write(table.drop(columns="run").reset_index(drop=True),
               per_window.drop(columns="run"), args.output,
               f"{len(args.merge)} runs merged", args.windows)
        return 0
    names = [d.strip() for d in args.datasets.split(",") if d.strip()]
    model_names = [m.strip() for m in args.models.split(",") if m.strip()]
    started = time.perf_counter()
    panels = load_datasets(names)
    rows, windows_rows = [], []
    for dataset, panel in panels.items():
        for horizon in [h.strip() for h in args.horizons.split(",") if h.strip()]:
            print(f"== {dataset} ({panel['series_id'].nunique()} series), horizon {horizon}",
                  flush=True)
            frame, seconds = _run_ours(panel, _prism_models(model_names), horizon,
                                       args.windows, lambda s: print(s, flush=True))
            if not args.no_references:
                ref, ref_seconds = _run_references(panel, horizon, args.windows,
                                                   lambda s: print(s, flush=True))
                frame = pd.concat([frame, ref], ignore_index=True)
                seconds.update(ref_seconds)
            table = summary(frame, panel)
            table["seconds_per_series"] = table["model"].map(seconds)
            table.insert(0, "horizon", horizon)
            table.insert(0, "dataset", dataset)
            rows.append(table)
            per_window = evaluate(frame, panel)
            per_window.insert(0, "horizon", horizon)
            per_window.insert(0, "dataset", dataset)
            windows_rows.append(per_window)
            print(table[["model", *SUMMARY_COLUMNS]].sort_values("mase").to_string(
                index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
    _write(pd.concat(rows, ignore_index=True), pd.concat(windows_rows, ignore_index=True),
           args.output, f"{time.perf_counter() - started:.0f} s", args.windows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
