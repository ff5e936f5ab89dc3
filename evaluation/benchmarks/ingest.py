"""Ingest and derivation benchmark: synthetic job traces of 1M and 10M jobs.

    python -m evaluation.benchmarks.ingest                 # 1M and 10M jobs, 3 repeats
    python -m evaluation.benchmarks.ingest --sizes 1000000 --repeats 1

For each size the generator writes a trace (8 clusters, 28 days, ~50 VCs, cached under
``build/bench``) as CSV and as Parquet; ``csv x10`` is the same CSV cut into 10 files ingested
in one run. Every measurement runs in a fresh subprocess that ingests
into a new DuckDB file, so that its peak RSS is its own; the table shows medians over the
repeats. Stages: ``read`` (content hash; parse + check on the slower readers), ``write``
(insert into ``jobs`` and the SQL checks), ``derive`` (all five job metrics at 10 min for every
scope, plus the commit). Ingest rows/s = rows / (read + write). In the same process, after PRISM,
DuckDB's own reader loads the file into a new table with no checks (``CREATE TABLE AS SELECT *
FROM read_csv(...)``): the ceiling, reported as a ratio of times.

The reference is a straightforward vectorised pandas derivation of ``gpus_in_use`` and
``gpus_pending`` (explode each job into the buckets it touches, then group by scope and bucket),
run on the same 1M jobs in the same process as a SQL derivation of the same trace; the process
also checks that both give the same values. Results go to
``evaluation/results/ingest.json`` and ``ingest.csv``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "bench"
RESULTS = ROOT / "evaluation" / "results"
CLUSTERS, DAYS, FREQ_S = 8, 28, 600


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _trace(n_jobs: int, fmt: str) -> tuple[Path, float]:
    """The cached trace of ``n_jobs`` jobs in ``fmt``; generated (timed) when missing."""
    from prism.generate import generate_trace

    folder = CACHE / f"jobs-{n_jobs}-{fmt}"
    path = folder / ("jobs.parquet" if fmt == "parquet" else "jobs.csv")
    if path.exists():
        return path, float("nan")
    start = time.perf_counter()
    generate_trace(folder, days=DAYS, clusters=CLUSTERS, seed=0,
                   jobs_per_day=n_jobs / (CLUSTERS * DAYS), format=fmt)  # type: ignore[arg-type]
    return path, time.perf_counter() - start


# -- workers (each in its own process) ---------------------------------------------------------
def _split(n_jobs: int, parts: int) -> Path:
    """The cached CSV trace of ``n_jobs`` cut into ``parts`` CSV files (a folder of them): the
    shape of a run that ingests many files at once, e.g. a month of daily exports."""
    source, _ = _trace(n_jobs, "csv")
    folder = CACHE / f"jobs-{n_jobs}-csv{parts}"
    if folder.exists():
        return folder
    tmp = folder.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as handle:
        header = handle.readline()
        per_part = n_jobs // parts
        for i in range(parts):
            with (tmp / f"part{i:02d}.csv").open("wb") as out:
                out.write(header)
                lines = handle if i == parts - 1 else islice(handle, per_part)  # last: the rest
                out.writelines(lines)
    tmp.rename(folder)
    return folder


def _worker_ingest(path: Path) -> dict[str, Any]:
    """PRISM's ingest into a new store file, then, in the same process, DuckDB's own reader
    into a new file (``CREATE TABLE AS SELECT * FROM read_csv/read_parquet``, no checks): the
    ceiling PRISM's ingest is compared with. Peak RSS is taken before the baseline runs."""
    import duckdb

    from prism.ingest.pipeline import ingest
    from prism.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        with Store.open(Path(tmp) / "bench.duckdb") as store:
            start = time.perf_counter()
            files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
            report = ingest(store, files, "jobs-csv")
            total = time.perf_counter() - start
            scopes = store.fetch_one("SELECT count(DISTINCT scope) FROM series")
        peak = _peak_rss_mb()
        reader = "read_parquet" if path.suffix == ".parquet" else "read_csv"
        with duckdb.connect(str(Path(tmp) / "baseline.duckdb")) as conn:
            start = time.perf_counter()
            conn.execute(f"CREATE TABLE jobs AS SELECT * FROM {reader}(?)",
                         [[str(f) for f in files]])
            baseline = time.perf_counter() - start
    return {"rows": report.rows, **report.timings, "total": total,
            "series": report.series, "scopes": int(scopes[0]) if scopes else 0,
            "reader": report.files[0].reader, "duckdb_s": baseline, "peak_rss_mb": peak}


def pandas_in_use_pending(jobs: pd.DataFrame, w0: int, w1: int, f: int) -> pd.DataFrame:
    """The reference: ``gpus_in_use`` and ``gpus_pending`` per (scope, bucket) in plain pandas.

    Times are seconds since the epoch; returns columns ``metric, scope, k, value``.
    """
    def intervals(s: np.ndarray, e: np.ndarray, g: np.ndarray, scope: np.ndarray,
                  metric: str) -> pd.DataFrame:
        s, e = np.maximum(s, w0), np.minimum(e, w1)
        keep = e > s
        s, e, g, scope = s[keep], e[keep], g[keep], scope[keep]
        ks, ke = s // f, (e - 1) // f
        n = (ke - ks + 1).astype(np.int64)
        row = np.repeat(np.arange(len(s)), n)
        k = ks[row] + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
        overlap = np.minimum(e[row], (k + 1) * f) - np.maximum(s[row], k * f)
        frame = pd.DataFrame({"scope": scope[row], "k": k, "value": g[row] * overlap / f})
        by_scope = frame.groupby(["scope", "k"], as_index=False)["value"].sum()
        total = frame.groupby("k", as_index=False)["value"].sum().assign(scope="all")
        return pd.concat([by_scope, total]).assign(metric=metric)

    def seconds(col: str) -> np.ndarray:
        values = jobs[col].astype("datetime64[s]").astype("int64").to_numpy().copy()
        values[jobs[col].isna().to_numpy()] = -1
        return values

    sub, sta, fin = seconds("submit_ts"), seconds("start_ts"), seconds("end_ts")
    g = jobs["num_gpus"].to_numpy(dtype="float64")
    scope = (jobs["cluster"].astype(str) + "/" + jobs["scope"].astype(str)).to_numpy()
    started = sta >= 0
    in_use = intervals(sta[started], np.where(fin[started] >= 0, fin[started], w1),
                       g[started], scope[started], "gpus_in_use")
    pend_end = np.where(started, sta, np.where(fin >= 0, fin, w1))
    pending = intervals(sub, pend_end, g, scope, "gpus_pending")
    return pd.concat([in_use, pending], ignore_index=True)


def _worker_reference(path: Path) -> dict[str, Any]:
    """pandas vs SQL derivation of the same jobs, in one process, checked against each other."""
    from prism.derive import derive_clusters
    from prism.ingest.pipeline import ingest
    from prism.store import Store

    with Store.open(":memory:") as store:
        ingest(store, [path], "jobs-csv")
        clusters = [r[0] for r in store.fetch_all("SELECT DISTINCT cluster FROM jobs")]
        sql_times = []
        for _ in range(3):
            start = time.perf_counter()
            with store.transaction():
                derive_clusters(store, clusters)
            sql_times.append(time.perf_counter() - start)
        jobs = store.fetch_df("SELECT cluster, scope, num_gpus, submit_ts, start_ts, end_ts "
                              "FROM jobs")
        windows = store.fetch_all(
            "SELECT cluster, epoch(min(ts))::BIGINT, epoch(max(ts))::BIGINT FROM series_values "
            "GROUP BY cluster")
        sql = store.fetch_df(
            "SELECT series_id, epoch(ts)::BIGINT // ? AS k, value FROM series_values "
            "WHERE split_part(series_id, '/', 3) IN ('gpus_in_use', 'gpus_pending')", [FREQ_S])
    pandas_times: list[float] = []
    parts: list[pd.DataFrame] = []
    for _ in range(3):
        parts = []
        start = time.perf_counter()
        for cluster, lo, hi in windows:
            mine = jobs[jobs["cluster"] == cluster]
            parts.append(pandas_in_use_pending(mine, int(lo), int(hi) + FREQ_S, FREQ_S))
        pandas_times.append(time.perf_counter() - start)
    ref = pd.concat(parts, ignore_index=True)
    scoped = ref[ref["scope"] != "all"].copy()  # scope is "cluster/vc" here
    scoped["series_id"] = scoped["scope"] + "/" + scoped["metric"]
    merged = sql.merge(scoped[["series_id", "k", "value"]], on=["series_id", "k"], how="inner",
                       suffixes=("_sql", "_pandas"))
    return {
        "jobs": len(jobs), "sql_derive_s": statistics.median(sql_times),
        "pandas_derive_s": statistics.median(pandas_times),
        "compared_values": len(merged),
        "max_abs_diff": float((merged["value_sql"] - merged["value_pandas"]).abs().max()),
        "peak_rss_mb": _peak_rss_mb(),
    }


def _run_worker(kind: str, path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "evaluation.benchmarks.ingest", "--worker", kind, str(path)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {kind} {path} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        kind, path = args.worker
        work = _worker_ingest if kind == "ingest" else _worker_reference
        print(json.dumps(work(Path(path))))
        return 0

    sizes = [int(float(s)) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    for n in sizes:
        for fmt in ("csv", "parquet", "csv x10"):
            path, gen_s = (_split(n, 10), float("nan")) if fmt == "csv x10" else _trace(n, fmt)
            runs = [_run_worker("ingest", path) for _ in range(args.repeats)]
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("read", "write", "derive", "total", "peak_rss_mb", "duckdb_s")}
            ratio = statistics.median(
                (r["read"] + r["write"]) / r["duckdb_s"] for r in runs)  # per process
            jobs = runs[0]["rows"]
            rows.append({
                "jobs": jobs, "format": fmt, "scopes": runs[0]["scopes"],
                "series": runs[0]["series"], "reader": runs[0]["reader"], "generate_s": gen_s,
                **med, "ingest_rows_per_s": jobs / (med["read"] + med["write"]),
                "duckdb_rows_per_s": jobs / med["duckdb_s"], "ingest_vs_duckdb": ratio,
                "repeats": args.repeats,
            })
            print(f"{jobs:>10,} jobs {fmt:<8} read {med['read']:6.2f}s write {med['write']:6.2f}s "
                  f"derive {med['derive']:6.2f}s  ingest {rows[-1]['ingest_rows_per_s']:>12,.0f} "
                  f"rows/s ({ratio:.2f}x the time of DuckDB's own reader, "
                  f"{rows[-1]['duckdb_rows_per_s']:,.0f} rows/s)  peak RSS "
                  f"{med['peak_rss_mb']:7.0f} MB", flush=True)
    ref_path, _ = _trace(min(sizes), "csv")
    ref = _run_worker("reference", ref_path)
    ref["speedup"] = ref["pandas_derive_s"] / ref["sql_derive_s"]
    print(f"reference on {ref['jobs']:,} jobs (same process): pandas {ref['pandas_derive_s']:.2f}s"
          f" (in use + pending only) vs SQL {ref['sql_derive_s']:.2f}s (all five metrics): "
          f"{ref['speedup']:.1f}x; {ref['compared_values']:,} values compared, max |diff| "
          f"{ref['max_abs_diff']:.2e}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(RESULTS / "ingest.csv", index=False)
    (RESULTS / "ingest.json").write_text(json.dumps(
        {"runs": rows, "reference": ref, "machine_cores": _cores(), "when": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2) + "\n")
    print(f"wrote {RESULTS / 'ingest.json'} and {RESULTS / 'ingest.csv'}")
    return 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
