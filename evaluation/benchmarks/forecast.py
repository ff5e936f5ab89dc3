"""Forecaster speed: fit + predict per model on one Helios Earth VC series at 10 min.

    python -m evaluation.benchmarks.forecast [--series earth/vc6YE/gpus_in_use] [--repeats 3]

Each model is fitted on the whole series (4,464 points) and predicts one day with quantiles
0.5, 0.9, 0.99; the table shows the median over the repeats, in this process. Writes
``evaluation/results/forecast_speed.json``.
"""

from __future__ import annotations

import argparse
import json
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
    args = parser.parse_args(argv)
    _, scope, _ = split_series_id(args.series)
    with Store.open(":memory:") as store:
        ingest(store, [TRACES / f"earth_{scope}_1min.csv.gz"], "helios-vc")
        panel = store.load_panel([args.series])
    rows = []
    for alias in sorted(FORECASTERS):
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            get_forecaster(alias).fit(panel).predict("1d", (0.5, 0.9, 0.99))
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        rows.append({"model": alias, "fit_predict_s": median})
        print(f"{alias:<22} {median * 1000:8.0f} ms", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "forecast_speed.json").write_text(json.dumps(
        {"series": args.series, "points": len(panel), "repeats": args.repeats, "runs": rows},
        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
