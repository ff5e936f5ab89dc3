"""Scale: batch forecasts of thousands of series, local processes vs Ray vs statsforecast.

    python -m evaluation.benchmarks.scale [--series 1000 10000] [--models prism,seasonal_naive]
        [--configs local1,local2,ray2] [--no-mstl | --mstl-series N] [--append] [--quick]

For each size, synthetic demand series of 28 days at 10 minutes (4,032 points: daily and
weekly cycles, bursts, level shifts, noise; ids spread over 10 clusters and 3 metrics) are
written to a DuckDB file; then every configuration forecasts all of them one day ahead with
quantiles 0.5, 0.9, 0.99 through :func:`prism.batch.run_batch` (results streamed into the
store): each model on the local backend with 1 and 2 worker processes and on a local Ray
cluster of 2 CPUs. The reference is statsforecast's ``MSTL`` (seasons of a day and a week,
80 % and 98 % intervals) with ``n_jobs=2`` on the same series, loaded from the same store
into pandas (its contract); ``--mstl-series N`` runs it on the first N series only (it takes
about 10 s a series here) and its series per second are over those. ``--quick`` runs 200
series; ``--append`` keeps the rows of earlier runs in the results file.

``--cheap`` measures the cheap baselines' vectorised path instead (issue #19 item 8; writes
``evaluation/results/scale_cheap.{json,csv}``; see :func:`cheap_main`).

Each configuration runs in a fresh Python process. ``wall_s`` is the time of the batch call
itself (PRISM: the shared fit of a global model, spawning workers, reading, forecasting,
writing; Ray: with the cluster already started, its start-up is ``startup_s``; MSTL: fit and
forecast, after a warm-up that compiles its numba code). ``driver_peak_mb`` is the peak RSS of
the calling process (``ru_maxrss``); ``tree_peak_mb`` the largest sum of RSS over it and all
its descendants (workers, Ray's daemons), sampled every 0.2 s (shared pages counted in each
process, so it overstates). ``cpu_s`` is the CPU time of the process and the workers it
waited for (local workers; not Ray's), ``load_avg`` the machine's mean 1-minute load average
during the run (other work shares this machine). Writes ``evaluation/results/scale.{json,csv}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "evaluation" / "results"
DAYS = 28
STEPS = DAYS * 144
QUANTILES = (0.5, 0.9, 0.99)
CONFIGS = {"local1": ("local", 1), "local2": ("local", 2), "ray2": ("ray", 2)}
METRICS = ("gpus_in_use", "gpu_demand", "gpus_pending")
_BLOCK = 500


def synthetic_block(first: int, count: int, *, seed: int = 0) -> pd.DataFrame:
    """Series ``first .. first + count - 1`` as a panel (each series its own seeded RNG)."""
    t = np.arange(STEPS)
    ts = pd.date_range("2026-01-05", periods=STEPS, freq="10min")
    frames = []
    for i in range(first, first + count):
        rng = np.random.default_rng([seed, i])
        level = rng.lognormal(3.5, 0.8)
        daily = rng.uniform(0.05, 0.4) * level * np.sin(2 * np.pi * t / 144 + rng.uniform(0, 6))
        weekly = rng.uniform(0.0, 0.2) * level * np.sin(2 * np.pi * t / 1008 + rng.uniform(0, 6))
        shifts = np.zeros(STEPS)
        for at in rng.integers(0, STEPS, rng.poisson(1.5)):
            shifts[at:] += rng.normal(0, 0.2) * level
        bursts = np.zeros(STEPS)
        for at in rng.integers(0, STEPS, rng.poisson(4)):
            span = np.arange(STEPS - at)
            bursts[at:] += rng.exponential(0.5) * level * np.exp(-span / rng.uniform(3, 30))
        noise = rng.normal(0, 0.05 * level, STEPS)
        value = np.maximum(0.0, level + daily + weekly + shifts + bursts + noise).round(2)
        cluster, metric = f"cluster-{i % 10}", METRICS[(i // 10) % 3]
        frames.append(pd.DataFrame({"cluster": cluster,
                                    "series_id": f"{cluster}/vc{i:05d}/{metric}", "ts": ts,
                                    "value": value, "filled": False}))
    return pd.concat(frames, ignore_index=True)


def build_store(path: Path, n: int) -> None:
    """Write ``n`` synthetic series into a new store at ``path``."""
    from prism.store import Store

    with Store.open(path) as store:
        for first in range(0, n, _BLOCK):
            block = synthetic_block(first, min(_BLOCK, n - first))
            store.insert_frame("series_values", block,
                               ["cluster", "series_id", "ts", "value", "filled"])
            catalogue = block.groupby("series_id", sort=True).agg(
                cluster=("cluster", "first"), first_ts=("ts", "min"), last_ts=("ts", "max"),
                n_points=("ts", "size")).reset_index()
            catalogue["scope"] = catalogue["series_id"].str.split("/").str[1]
            catalogue["metric"] = catalogue["series_id"].str.split("/").str[2]
            catalogue["freq"] = "10min"
            store.insert_frame("series", catalogue, ["series_id", "cluster", "scope", "metric",
                                                     "freq", "first_ts", "last_ts",
                                                     "n_points"])


# -- one configuration, in a fresh process ------------------------------------------------------
def _run_one(spec: dict[str, Any]) -> dict[str, Any]:
    from prism import batch
    from prism.forecasters import get_forecaster
    from prism.store import Store

    out: dict[str, Any] = {"startup_s": 0.0}
    with Store.open(spec["db"]) as store:
        if spec["model"] == "statsforecast_mstl":
            return {**out, **_run_mstl(store, spec.get("mstl_series"))}
        if spec["backend"] == "ray":
            import ray

            started = time.perf_counter()
            ray.init(num_cpus=spec["workers"], include_dashboard=False, log_to_driver=False)
            out["startup_s"] = time.perf_counter() - started
        started = time.perf_counter()
        report = batch.run_batch(store, get_forecaster(spec["model"], **spec["params"]),
                                 horizon="1d", quantiles=QUANTILES, backend=spec["backend"],
                                 workers=spec["workers"])
        out["wall_s"] = time.perf_counter() - started
        if spec["backend"] == "ray":
            import ray

            ray.shutdown()
    out.update(shared_s=report.shared_seconds, shared_series=report.shared_series,
               ok=report.ok, fallback=report.fallback, failed=report.failed, rows=report.rows,
               run_id=report.run_id)
    out["driver_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _run_mstl(store: Any, limit: int | None) -> dict[str, Any]:
    from statsforecast import StatsForecast
    from statsforecast.models import MSTL

    ids = sorted(store.list_series()["series_id"])
    panel = store.load_panel(ids[:limit] if limit else None).rename(
        columns={"series_id": "unique_id", "ts": "ds", "value": "y"})
    warm = panel[panel["unique_id"].isin(panel["unique_id"].unique()[:2])]
    StatsForecast(models=[MSTL(season_length=[144, 1008])], freq="10min",
                  n_jobs=1).forecast(df=warm, h=144, level=[80, 98])
    started = time.perf_counter()
    sf = StatsForecast(models=[MSTL(season_length=[144, 1008])], freq="10min", n_jobs=2)
    frame = sf.forecast(df=panel, h=144, level=[80, 98])
    wall = time.perf_counter() - started
    return {"wall_s": wall, "rows": len(frame), "ok": int(frame["unique_id"].nunique()),
            "n_done": int(frame["unique_id"].nunique()),
            "fallback": 0, "failed": 0, "shared_s": 0.0, "shared_series": 0,
            "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _measured(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one configuration in a child process; sample its process tree's memory."""
    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = subprocess.Popen([sys.executable, "-m", "evaluation.benchmarks.scale",
                              "--run-one", json.dumps(spec)], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    tree_peak = 0
    loads = []
    proc = psutil.Process(child.pid)
    while child.poll() is None:
        total = 0
        with_children = [proc]
        try:
            with_children += proc.children(recursive=True)
        except psutil.Error:
            pass
        for p in with_children:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        tree_peak = max(tree_peak, total)
        loads.append(os.getloadavg()[0])
        time.sleep(0.2)
    output = child.stdout.read() if child.stdout else ""
    if child.returncode != 0:
        raise RuntimeError(f"configuration {spec} failed (exit {child.returncode})")
    result = json.loads(output.strip().splitlines()[-1])
    result["tree_peak_mb"] = tree_peak / 2**20
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU of the process and of the descendants it waited for (not Ray's daemons' workers)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["load_avg"] = float(np.mean(loads)) if loads else None
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--models", default="prism,seasonal_naive")
    parser.add_argument("--configs", default="local1,local2,ray2")
    parser.add_argument("--no-mstl", action="store_true", help="skip the statsforecast run")
    parser.add_argument("--mstl-series", type=int, default=None,
                        help="run MSTL on the first N series only (it takes ~10 s a series "
                        "here); its series/s is over those")
    parser.add_argument("--append", action="store_true",
                        help="keep the rows already in the results file (other sizes or "
                        "configurations)")
    parser.add_argument("--quick", action="store_true", help="200 series")
    parser.add_argument("--output", default="scale", help="results file stem")
    parser.add_argument("--cheap", action="store_true",
                        help="time seasonal_naive's vectorised path against statsforecast's "
                        "SeasonalNaive in this process (scale_cheap.{json,csv})")
    parser.add_argument("--repeats", type=int, default=5, help="--cheap: timed repeats")
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--batch-peak", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch_peak:
        print(json.dumps(_batch_peak(args.batch_peak)))
        return 0
    if args.cheap:
        return cheap_main(200 if args.quick else args.series[0], args.repeats)
    if args.run_one:
        print(json.dumps(_run_one(json.loads(args.run_one))))
        return 0
    sizes = [200] if args.quick else args.series
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    rows: list[dict[str, Any]] = []
    RESULTS.mkdir(parents=True, exist_ok=True)
    previous = RESULTS / f"{args.output}.json"
    if args.append and previous.exists():
        rows = json.loads(previous.read_text())["runs"]
    print(f"{'series':>7} {'model':<20} {'backend':<10} {'wall':>9} {'series/s':>9} "
          f"{'shared':>8} {'driver MB':>10} {'tree MB':>9} {'fallback':>8} {'load':>5}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="prism-scale-") as tmp:
        for n in sizes:
            db = Path(tmp) / f"scale{n}.duckdb"
            started = time.perf_counter()
            build_store(db, n)
            print(f"# {n} series written in {time.perf_counter() - started:.0f} s", flush=True)
            specs = [{"db": str(db), "model": m, "params": {}, "backend": CONFIGS[c][0],
                      "workers": CONFIGS[c][1], "config": c} for m in models for c in configs]
            if not args.no_mstl:
                specs.append({"db": str(db), "model": "statsforecast_mstl", "params": {},
                              "backend": "n_jobs=2", "workers": 2, "config": "mstl2",
                              "mstl_series": args.mstl_series})
            for spec in specs:
                result = _measured(spec)
                row = {"n_series": n, "model": spec["model"], "config": spec["config"],
                       "backend": spec["backend"], "workers": spec["workers"], **result,
                       "series_per_s": result.get("n_done", n) / result["wall_s"]}
                rows = [r for r in rows if (r["n_series"], r["model"], r["config"])
                        != (n, spec["model"], spec["config"])] + [row]
                print(f"{n:>7} {row['model']:<20} {row['config']:<10} {row['wall_s']:8.1f}s "
                      f"{row['series_per_s']:9.1f} {row['shared_s']:7.1f}s "
                      f"{row['driver_peak_mb']:10.0f} {row['tree_peak_mb']:9.0f} "
                      f"{row['fallback']:>8} {row['load_avg'] or 0:5.1f}", flush=True)
                _write(rows, args.output)
            db.unlink(missing_ok=True)
    _write(rows, args.output)
    return 0


# -- the cheap baselines' vectorised path (--cheap) ------------------------------------------------
def cheap_main(n: int, repeats: int) -> int:
    """Seasonal naive on ``n`` series (28 days at 10 min, a day ahead, quantiles 0.5, 0.9,
    0.99), all in this one process, interleaved, ``repeats`` times after a warm-up:

    - ``statsforecast_seasonal_naive``: ``StatsForecast([SeasonalNaive(144)], freq="10min",
      n_jobs=1).forecast(df, h=144, level=[80, 98])`` on the panel as a Nixtla frame;
    - ``prism_panel``: :func:`prism.forecasters.panel_fast.forecast_panel` on the same panel
      (validation, conformal calibration on 72 origins a series with its drift correction,
      the forecast frame);
    - ``prism_block``: its numpy core, :func:`~prism.forecasters.panel_fast.forecast_block`
      on the ``(series, time)`` array;
    - ``prism_batch``: :func:`prism.batch.run_batch` with one worker, end to end (reading the
      series from DuckDB into arrays, forecasting, writing the forecasts back); it routes the
      model to the panel path;
    - ``prism_per_series`` (once): the per-series ``fit``/``predict`` it replaces.

    statsforecast needs pandas < 3: run under an environment that has it (the ``bench`` extra
    installs it; or ``PYTHONPATH`` pointing at a folder with statsforecast and pandas 2).
    ``median_s`` is the median wall time; ``ratio_vs_statsforecast`` is that over
    statsforecast's median. ``peak_mb`` is tracemalloc's peak of Python-side allocations
    (numpy's included) during one extra call; for the batch, whose DuckDB allocates outside
    tracemalloc's view, it is how far a fresh process' peak RSS (``ru_maxrss``) rose above
    its RSS before the run (after a warm-up run on 10 series): :func:`_batch_peak`.
    ``panel_mb`` is the panel as arrays, its values and timestamps (``n x 4032 x (8 + 8)``
    bytes), ``peak_over_panel`` the ratio (target: under 3), ``frame_mb`` the panel's frame
    (``memory_usage(deep=True)``). The forecasts of the panel path and of the batch (read
    back from the store) are checked equal to the per-series path's, bit for bit.
    Writes ``evaluation/results/scale_cheap.{json,csv}``.
    """
    import platform
    from statistics import median

    try:
        import statsforecast
        from statsforecast import StatsForecast
        from statsforecast.models import SeasonalNaive
    except ImportError as exc:
        raise SystemExit(f"--cheap needs statsforecast ({exc}): pip install -e '.[bench]' in "
                         "an environment of its own (it needs pandas < 3)") from exc

    from prism import batch
    from prism.forecasters import get_forecaster
    from prism.forecasters.panel_fast import forecast_block, forecast_panel, panel_rule
    from prism.store import Store

    panel = synthetic_block(0, n)[["series_id", "ts", "value"]]
    nixtla = panel.rename(columns={"series_id": "unique_id", "ts": "ds", "value": "y"})
    values = panel["value"].to_numpy(dtype=np.float64).reshape(n, STEPS)
    model = get_forecaster("seasonal_naive")
    rule = panel_rule(model, 600)

    def sf() -> Any:
        return StatsForecast(models=[SeasonalNaive(season_length=144)], freq="10min",
                             n_jobs=1).forecast(df=nixtla, h=144, level=[80, 98])

    with tempfile.TemporaryDirectory(prefix="prism-scale-cheap-") as tmp:
        db = Path(tmp) / "cheap.duckdb"
        build_store(db, n)
        batch_peak = _measured_batch_peak(db)  # a process of its own: before this one opens it
        with Store.open(db) as store:
            reports: list[Any] = []
            runs: dict[str, Any] = {
                "statsforecast_seasonal_naive": sf,
                "prism_panel": lambda: forecast_panel(model, panel, "1d", QUANTILES),
                "prism_block": lambda: forecast_block(rule, values, 144, QUANTILES),
                "prism_batch": lambda: reports.append(batch.run_batch(
                    store, model, horizon="1d", quantiles=QUANTILES, workers=1)),
            }
            times: dict[str, list[float]] = {name: [] for name in runs}
            for r in range(repeats + 1):  # the first round warms up (imports, numba, caches)
                for name, call in runs.items():
                    started = time.perf_counter()
                    call()
                    if r:
                        times[name].append(time.perf_counter() - started)
            peaks = {name: _traced_peak(call) for name, call in runs.items()
                     if name != "prism_batch"}
            peaks["prism_batch"] = batch_peak
            started = time.perf_counter()
            want = get_forecaster("seasonal_naive").fit(panel).predict("1d", QUANTILES)
            times["prism_per_series"] = [time.perf_counter() - started]
            peaks["prism_per_series"] = float("nan")
            got = forecast_panel(model, panel, "1d", QUANTILES)
            pd.testing.assert_frame_equal(got, want, check_exact=True)
            pd.testing.assert_frame_equal(batch.run_frame(store, reports[-1].run_id), want,
                                          check_exact=True)
    panel_mb = (values.nbytes + n * STEPS * 8) / 2**20  # the values and their timestamps
    frame_mb = panel.memory_usage(deep=True).sum() / 2**20
    sf_median = median(times["statsforecast_seasonal_naive"])
    rows = [{"n_series": n, "steps": STEPS, "method": name, "repeats": len(t),
             "median_s": median(t), "min_s": min(t), "max_s": max(t),
             "ratio_vs_statsforecast": median(t) / sf_median,
             "peak_mb": peaks[name] / 2**20, "panel_mb": panel_mb, "frame_mb": frame_mb,
             "peak_over_panel": peaks[name] / 2**20 / panel_mb}
            for name, t in times.items()]
    print(f"{'method':<30} {'median':>8} {'ratio':>6} {'peak MB':>8} {'xpanel':>7}")
    for row in rows:
        print(f"{row['method']:<30} {row['median_s']:7.3f}s {row['ratio_vs_statsforecast']:6.2f} "
              f"{row['peak_mb']:8.1f} {row['peak_over_panel']:7.2f}", flush=True)
    meta = {"days": DAYS, "steps": STEPS, "horizon": "1d", "quantiles": list(QUANTILES),
            "statsforecast_levels": [80, 98], "cpus": sorted(os.sched_getaffinity(0)),
            "python": platform.python_version(), "numpy": np.__version__,
            "pandas": pd.__version__, "statsforecast": statsforecast.__version__,
            "identical_to_per_series": True,
            "peak": "tracemalloc's peak during one call; prism_batch: a fresh process' peak "
                    "RSS over its RSS before the run",
            "panel_mb": "values and timestamps, n x steps x 16 bytes",
            "note": "one process, interleaved repeats after a warm-up; shared machine"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale_cheap.json").write_text(json.dumps({**meta, "runs": rows}, indent=2,
                                                         default=float) + "\n")
    pd.DataFrame(rows).to_csv(RESULTS / "scale_cheap.csv", index=False)
    return 0


def _measured_batch_peak(db: Path) -> float:
    """:func:`_batch_peak` in a child process (bytes)."""
    child = subprocess.run([sys.executable, "-m", "evaluation.benchmarks.scale",
                            "--batch-peak", str(db)], cwd=ROOT, check=True,
                           stdout=subprocess.PIPE, text=True)
    return float(json.loads(child.stdout.strip().splitlines()[-1])["peak_bytes"])


def _batch_peak(db: str) -> dict[str, float]:
    """How far this fresh process' peak RSS rises above its RSS before a batch of
    ``seasonal_naive`` over every series of ``db`` (after a warm-up run on 10 series).

    The peak is the kernel's (``VmHWM``), reset just before the run (``/proc/self/
    clear_refs``): ``ru_maxrss`` would include the parent's size, inherited at the fork.
    """
    from prism import batch
    from prism.forecasters import get_forecaster
    from prism.store import Store

    with Store.open(db) as store:
        ids = sorted(store.list_series()["series_id"].astype(str))
        model = get_forecaster("seasonal_naive")
        batch.run_batch(store, model, ids[:10], horizon="1d", quantiles=QUANTILES, workers=1)
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
        before = _status_kb("VmRSS")
        batch.run_batch(store, model, horizon="1d", quantiles=QUANTILES, workers=1)
        high = _status_kb("VmHWM")
    return {"peak_bytes": float(high - before) * 1024, "rss_before": float(before) * 1024,
            "peak_rss": float(high) * 1024}


def _status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _traced_peak(call: Any) -> float:
    """Bytes of tracemalloc's peak during one call."""
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        return float(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def _write(rows: list[dict[str, Any]], stem: str) -> None:
    frame = pd.DataFrame(rows)
    for _, group in frame.groupby("n_series"):
        base = group.set_index(["model", "config"])["wall_s"]
        mstl_rate = group.loc[group["model"] == "statsforecast_mstl", "series_per_s"]
        for i in group.index:
            local1 = base.get((frame.at[i, "model"], "local1"))
            frame.at[i, "speedup_vs_local1"] = local1 / frame.at[i, "wall_s"] if local1 else None
            # per series: MSTL may have run on a subsample
            frame.at[i, "time_per_series_vs_mstl"] = (
                mstl_rate.iloc[0] / frame.at[i, "series_per_s"] if len(mstl_rate) else None)
    meta = {"days": DAYS, "steps": STEPS, "horizon": "1d", "quantiles": list(QUANTILES),
            "cpus": sorted(os.sched_getaffinity(0)),
            "note": "shared 2-core machine: other work ran at the same time"}
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {**meta, "runs": json.loads(frame.to_json(orient="records"))}, indent=2) + "\n")
    frame.to_csv(RESULTS / f"{stem}.csv", index=False)


if __name__ == "__main__":
    sys.exit(main())
