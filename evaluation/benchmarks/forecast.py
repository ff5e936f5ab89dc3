"""Forecaster speed: fit and predict per model on one Helios Earth VC series at 10 min.

    OMP_NUM_THREADS=1 taskset -c 0 python -m evaluation.benchmarks.forecast \
        [--series earth/vc6YE/gpus_in_use] [--repeats 3] [--models prism,gbm] [--output F]

Each model is fitted once untimed (imports, caches), then on the whole series (4,464 points;
fit includes the conformal calibration on the held-out tail) and predicts one day with
quantiles 0.5, 0.9, 0.99; the table shows the medians over the repeats, in this process.
``taskset -c 0`` and ``OMP_NUM_THREADS=1`` hold it to one core, the budget of an on-demand
refit in the API. Writes ``evaluation/results/forecast_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces" / "helios_earth_vc"
RESULTS = ROOT / "evaluation" / "results"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results."""
    from prism.forecasters import FORECASTERS, get_forecaster
    from prism.ingest.pipeline import ingest
    from prism.schema import split_series_id
    from prism.store import Store

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", default="earth/vc6YE/gpus_in_use")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default=",".join(sorted(FORECASTERS)),
                        help="comma-separated aliases (default: every registered model)")
    parser.add_argument("--output", type=Path, default=RESULTS / "forecast_speed.json",
                        help="where the JSON goes (a subset of models: give another file)")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in FORECASTERS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose among {', '.join(sorted(FORECASTERS))}")
    _, scope, _ = split_series_id(args.series)
    with Store.open(":memory:") as store:
        ingest(store, [TRACES / f"earth_{scope}_1min.csv.gz"], "helios-vc")
        panel = store.load_panel([args.series])
    rows = []
    print(f"{'model':<22} {'fit':>9} {'predict':>9} {'total':>9}")
    for alias in models:
        get_forecaster(alias).fit(panel)  # untimed: the first fit pays imports and caches
        fits, predicts = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            model = get_forecaster(alias).fit(panel)
            middle = time.perf_counter()
            model.predict("1d", (0.5, 0.9, 0.99))
            fits.append(middle - start)
            predicts.append(time.perf_counter() - middle)
        fit, predict = statistics.median(fits), statistics.median(predicts)
        rows.append({"model": alias, "fit_s": fit, "predict_s": predict,
                     "fit_predict_s": fit + predict})
        print(f"{alias:<22} {fit * 1000:7.0f} ms {predict * 1000:6.0f} ms "
              f"{(fit + predict) * 1000:6.0f} ms", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(
        {"series": args.series, "points": len(panel), "repeats": args.repeats,
         "cpus": sorted(os.sched_getaffinity(0)), "runs": rows},
        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
