"""Planning backtest on the 16 Helios Earth VCs: GPU-hours saved against static peak provisioning.

    python -m evaluation.benchmarks.planning [--models prism,naive,...] [--days 7]
        [--quantiles 0.5,0.8,0.9,0.95,0.99] [--no-cap]

Each VC's ``gpus_in_use`` (10 min) is replayed over the last ``days`` days: every day each
model is fitted on the data before it and forecasts it (day-ahead, quantiles), and the VC is
provisioned at one level per day (block ``1d``) or per hour (``1h``): the peak of the
forecast's quantile over the block, capped at the VC's capacity (the ``gpu_capacity``
samples). The references are the static historical peak, yesterday's peak (and, hourly, the
same hour yesterday) and the oracle (each block's actual peak). Definitions:
:mod:`prism.evaluation.planning`. Prints the table and writes ``evaluation/results/planning.csv``
and ``planning.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces" / "helios_earth_vc"
RESULTS = ROOT / "evaluation" / "results"
MODELS = "prism,naive,seasonal_naive,time_of_day_quantile,ets,theta,gbm"


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
    from prism.evaluation.planning import planning_backtest
    from prism.forecasters import get_forecaster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--quantiles", default="0.5,0.8,0.9,0.95,0.99")
    parser.add_argument("--no-cap", action="store_true", help="do not cap at capacity")
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--output", type=Path, default=RESULTS / "planning")
    args = parser.parse_args(argv)
    quantiles = [float(q) for q in args.quantiles.split(",")]
    panel, capacity = helios_panel(args.traces)
    frames, seconds = [], {}
    for alias in [m for m in args.models.split(",") if m]:
        clock = time.perf_counter()
        result = planning_backtest({alias: get_forecaster(alias)}, panel, days=args.days,
                                   quantiles=quantiles)
        seconds[alias] = round(time.perf_counter() - clock, 1)
        frames.append(result.frame)
        print(f"{alias}: backtest of {panel['series_id'].nunique()} series x {args.days} days "
              f"in {seconds[alias]} s", flush=True)
    result = planning_backtest(None, panel, days=args.days, quantiles=quantiles,
                               capacity=None if args.no_cap else capacity,
                               frame=pd.concat(frames, ignore_index=True) if frames else None)
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
    args.output.with_suffix(".json").write_text(json.dumps({
        "series": int(panel["series_id"].nunique()), "days": args.days,
        "capped_at_capacity": not args.no_cap, "seconds": seconds,
        "rows": json.loads(table.to_json(orient="records"))}, indent=1))
    print(f"wrote {args.output.with_suffix('.csv')} and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
