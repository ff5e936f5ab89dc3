"""Decomposition benchmark: learn the dictionary on all Helios Earth VCs, decompose series.

    python -m evaluation.benchmarks.decompose [--synthetic 1000] [--repeats 3]

Measures (medians over the repeats, each stage in this process; peak RSS of the process):
learning the primitive dictionary on the 16 Helios Earth VCs at 10 min (``gpus_in_use`` and
``gpu_demand``: 32 series of 4,464 points), decomposing one of them, and decomposing 1,000
synthetic series of the same length (daily and weekly cycles, bursts, level shifts) with that
dictionary. Writes ``evaluation/results/decompose.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces" / "helios_earth_vc"
RESULTS = ROOT / "evaluation" / "results"


def _helios_panel() -> pd.DataFrame:
    from prism.ingest.pipeline import ingest
    from prism.store import Store

    with Store.open(":memory:") as store:
        ingest(store, sorted(TRACES.glob("earth_vc*_1min.csv.gz")), "helios-vc")
        ids = [s for s in store.list_series()["series_id"]
               if s.endswith(("/gpus_in_use", "/gpu_demand"))]
        return store.load_panel(ids)


def _synthetic(n_series: int, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    out = []
    for _ in range(n_series):
        y = (rng.uniform(20, 200) + rng.uniform(5, 40) * np.sin(2 * np.pi * t / 144
                                                                + rng.uniform(0, 6.3))
             + rng.uniform(0, 15) * np.sin(2 * np.pi * t / 1008) + rng.normal(0, 2, n))
        for s in rng.choice(n - 10, size=8, replace=False):
            y[s:s + int(rng.integers(1, 5))] += rng.uniform(20, 60)
        y[int(rng.integers(n // 4, 3 * n // 4)):] += rng.choice([-1, 1]) * rng.uniform(0, 40)
        out.append(y)
    return out


def _timed(repeats: int, work: Any) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results."""
    from prism.primitives.decompose import decompose_values, fit_dictionary

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    panel = _helios_panel()
    n_series = panel["series_id"].nunique()
    fit_s, dictionary = _timed(args.repeats, lambda: fit_dictionary(panel))
    one = panel[panel["series_id"] == "earth/vc6YE/gpus_in_use"]
    ts = pd.DatetimeIndex(one["ts"])
    one_s, _ = _timed(args.repeats, lambda: decompose_values(
        "earth/vc6YE/gpus_in_use", ts, one["value"].to_numpy(), freq_s=600,
        dictionary=dictionary))
    series = _synthetic(args.synthetic, len(ts))
    start = time.perf_counter()
    for i, values in enumerate(series):
        decompose_values(f"synthetic/{i}/gpus_in_use", ts, values, freq_s=600,
                         dictionary=dictionary)
    many_s = time.perf_counter() - start
    result = {
        "dictionary_fit_s": fit_s, "dictionary_series": n_series,
        "points_per_series": len(ts), "atoms": len(dictionary.atoms_),
        "decompose_one_s": one_s, "decompose_synthetic_s": many_s,
        "synthetic_series": args.synthetic,
        "per_series_ms": 1000 * many_s / max(1, args.synthetic),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "repeats": args.repeats,
    }
    print(f"dictionary fit on {n_series} Helios series x {len(ts)} points: {fit_s:.2f} s "
          f"({len(dictionary.atoms_)} atoms)")
    print(f"decompose one series: {one_s * 1000:.0f} ms")
    print(f"decompose {args.synthetic} synthetic series: {many_s:.1f} s "
          f"({result['per_series_ms']:.0f} ms each)")
    print(f"peak RSS: {result['peak_rss_mb']:.0f} MB")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "decompose.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
