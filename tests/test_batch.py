"""The batch engine (prism.batch): local processes and Ray give the same results, failing or
slow series fall back without failing the batch, memory stays flat, and the CLI drives it."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
import pytest

from prism import batch
from prism.cli import main
from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.evaluation.backtest import backtest
from prism.forecasters import BaseForecaster, get_forecaster
from prism.forecasters.base import FloatArray
from prism.store import Store

#: The hybrid, small enough for tests, with its RNN (a global model with per-series state).
PRISM_SMALL = {"lookback": "2h", "horizon": "2h", "n_atoms": 2, "combiner_window": "6h",
               "rnn_hidden_size": 4, "rnn_epochs": 2}
QUANTILES = (0.1, 0.5, 0.9)


def synthetic_panel(n: int, *, days: float = 3, clusters: int = 3, seed: int = 0) -> pd.DataFrame:
    """``n`` 10-minute series with a daily cycle, noise and a level per series."""
    rng = np.random.default_rng(seed)
    steps = int(144 * days)
    ts = pd.date_range("2026-01-05", periods=steps, freq="10min")
    t = np.arange(steps)
    frames = []
    for i in range(n):
        level = 20 + 5 * (i % 7)
        value = np.maximum(0.0, level + 8 * np.sin(2 * np.pi * t / 144 + i)
                           + rng.normal(0, 2, steps)).round(3)
        frames.append(pd.DataFrame({"series_id": f"c{i % clusters}/vc{i:04d}/gpus_in_use",
                                    "ts": ts, "value": value}))
    return pd.concat(frames, ignore_index=True)


def fill_store(store: Store, panel: pd.DataFrame) -> None:
    """Store a panel as derived series (what ingestion leaves behind)."""
    rows = panel.assign(cluster=panel["series_id"].str.split("/").str[0], filled=False)
    store.insert_frame("series_values", rows, ["cluster", "series_id", "ts", "value", "filled"])
    catalogue = rows.groupby("series_id").agg(
        cluster=("cluster", "first"), first_ts=("ts", "min"), last_ts=("ts", "max"),
        n_points=("ts", "size")).reset_index()
    catalogue["scope"] = catalogue["series_id"].str.split("/").str[1]
    catalogue["metric"] = "gpus_in_use"
    catalogue["freq"] = "10min"
    store.insert_frame("series", catalogue, ["series_id", "cluster", "scope", "metric", "freq",
                                             "first_ts", "last_ts", "n_points"])


@contextmanager
def panel_store(n: int) -> Iterator[tuple[Store, pd.DataFrame]]:
    """An in-memory store with ``n`` synthetic series of 3 days, and their panel."""
    panel = synthetic_panel(n)
    store = Store.open(":memory:")
    try:
        fill_store(store, panel)
        yield store, panel
    finally:
        store.close()


@pytest.fixture
def small() -> Iterator[tuple[Store, pd.DataFrame]]:
    """An in-memory store with 8 series of 3 days."""
    with panel_store(8) as out:
        yield out


# -- the hook: shared parts once, each series against them --------------------------------------
@pytest.mark.parametrize(("alias", "params"), [
    ("prism", PRISM_SMALL),
    ("gru", {"lookback": "6h", "horizon": "2h", "hidden_size": 4, "epochs": 2,
             "max_windows": 64}),
    ("gbm", {"max_iter": 10, "max_rows": 1_000, "random_state": 1}),
])
def test_fit_is_fit_shared_then_fit_local_forecast_for_forecast(
    alias: str, params: dict[str, Any]
) -> None:
    panel = synthetic_panel(3)
    whole = get_forecaster(alias, **params).fit(panel).predict("3h", QUANTILES)
    shared = get_forecaster(alias, **params).fit_shared(panel)
    with pytest.raises(NotFittedError):
        shared.predict(3)  # shared parts only: nothing to forecast yet
    parts = [shared.fit_local(g).predict("3h", QUANTILES)
             for _, g in panel.groupby("series_id")]
    pd.testing.assert_frame_equal(whole, pd.concat(parts, ignore_index=True), check_exact=True)
    assert not hasattr(shared, "history_")  # fit_local left the shared model as it was


def test_fit_shared_and_fit_local_refuse_what_they_cannot_do() -> None:
    panel = synthetic_panel(2)
    with pytest.raises(ConfigError, match="fit\\(panel\\) on the series"):
        get_forecaster("seasonal_naive").fit_shared(panel)
    with pytest.raises(NotFittedError, match="fit_shared"):
        get_forecaster("gbm").fit_local(panel)
    shared = get_forecaster("prism", **{**PRISM_SMALL, "use_rnn": False}).fit_shared(panel)
    hourly = panel.iloc[::6].reset_index(drop=True)
    with pytest.raises(DataContractError, match="600 s"):
        shared.fit_local(hourly)


def test_stratified_sample_spreads_over_clusters_and_metrics() -> None:
    ids = ([f"a/vc{i:03d}/gpus_in_use" for i in range(60)]
           + [f"a/vc{i:03d}/gpu_demand" for i in range(30)]
           + [f"b/vc{i:03d}/gpus_in_use" for i in range(10)])
    sample = batch.stratified_sample(ids, 10)
    assert len(sample) == 10 == len(set(sample))
    counts = pd.Series([f"{s.split('/')[0]}/{s.split('/')[2]}" for s in sample]).value_counts()
    # one each, then 7 in proportion to 59:29:9 by largest remainder -> 4, 2, 1 (+1 each)
    assert counts.to_dict() == {"a/gpus_in_use": 5, "a/gpu_demand": 3, "b/gpus_in_use": 2}
    assert batch.stratified_sample(ids, 10) == sample  # deterministic
    assert batch.stratified_sample(ids[:5], 10) == sorted(ids[:5])
    assert len(batch.stratified_sample(ids, 2)) == 2  # fewer than the strata


# -- backends -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_global_batch_forecasts_what_one_in_memory_fit_does_with_1_or_2_workers(
    small: tuple[Store, pd.DataFrame]
) -> None:
    store, panel = small
    model = get_forecaster("prism", **PRISM_SMALL)
    want = get_forecaster("prism", **PRISM_SMALL).fit(panel).predict("3h", QUANTILES)
    runs = [batch.run_batch(store, model, horizon="3h", quantiles=QUANTILES, workers=w,
                            chunk_size=3) for w in (1, 2)]
    for report in runs:
        assert (report.n_series, report.ok, report.fallback) == (8, 8, 0)
        assert report.shared_series == 8 and report.rows == len(want)
        pd.testing.assert_frame_equal(batch.run_frame(store, report.run_id), want,
                                      check_exact=True)
    statuses = store.batch_series(runs[0].run_id)
    assert list(statuses["status"].unique()) == ["ok"]
    assert store.batch_runs(runs[1].run_id)["status"].iloc[0] == "done"


def test_export_streams_every_format(small: tuple[Store, pd.DataFrame], tmp_path: Path) -> None:
    store, panel = small
    report = batch.run_batch(store, get_forecaster("naive"), horizon=3, quantiles=QUANTILES,
                             workers=1, chunk_size=3)
    want = get_forecaster("naive").fit(panel).predict(3, QUANTILES)
    for suffix in (".csv", ".json", ".parquet"):
        path = batch.export_run(store, report.run_id, tmp_path / f"out{suffix}")
        if suffix == ".csv":
            got = pd.read_csv(path, parse_dates=["ts"])
        elif suffix == ".json":
            got = pd.read_json(path, orient="records", dtype=False)
        else:
            got = pd.read_parquet(path)
        if suffix == ".json":  # times in UTC with Z, as every JSON the CLI writes
            assert got["ts"].str.endswith(":00Z").all()
            got["ts"] = pd.to_datetime(got["ts"], utc=True).dt.tz_localize(None)
        got["ts"] = got["ts"].astype("datetime64[ns]")
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
    with pytest.raises(ConfigError, match="no batch run"):
        batch.export_run(store, "nope", tmp_path / "x.csv")
    with pytest.raises(ConfigError, match=".csv, .parquet or .json"):
        batch.export_run(store, report.run_id, tmp_path / "x.txt")


@pytest.mark.slow
def test_global_model_learns_from_the_sample_and_serves_every_series(
    small: tuple[Store, pd.DataFrame]
) -> None:
    store, panel = small
    params = {**PRISM_SMALL, "use_rnn": False}
    report = batch.run_batch(store, get_forecaster("prism", **params), horizon="2h",
                             quantiles=QUANTILES, workers=1, global_sample=3)
    assert report.shared_series == 3 and report.ok == 8
    sample = batch.stratified_sample(sorted(panel["series_id"].unique()), 3)
    shared = get_forecaster("prism", **params).fit_shared(panel[panel["series_id"].isin(sample)])
    want = pd.concat([shared.fit_local(g).predict("2h", QUANTILES)
                      for _, g in panel.groupby("series_id")], ignore_index=True)
    pd.testing.assert_frame_equal(batch.run_frame(store, report.run_id), want, check_exact=True)


@pytest.mark.slow
def test_batch_backtest_matches_evaluation_backtest(small: tuple[Store, pd.DataFrame]) -> None:
    store, panel = small
    short = synthetic_panel(1, days=20 / 144, seed=3).assign(series_id="c9/short/gpus_in_use")
    fill_store(store, short)
    for alias, params in (("seasonal_naive", {}), ("prism", {**PRISM_SMALL, "use_rnn": False})):
        report = batch.run_batch(store, get_forecaster(alias, **params), task="backtest",
                                 horizon="2h", windows=2, step="3h", quantiles=QUANTILES,
                                 workers=2)
        assert (report.ok, report.skipped) == (8, 1)
        want = backtest(get_forecaster(alias, **params), panel, horizon="2h", windows=2,
                        step="3h", quantiles=QUANTILES)
        pd.testing.assert_frame_equal(batch.run_frame(store, report.run_id), want,
                                      check_exact=True)
    reason = store.batch_series(report.run_id).set_index("series_id")["fallback_reason"]
    assert "needs at least" in reason["c9/short/gpus_in_use"]


@pytest.mark.slow
def test_ray_cluster_matches_the_local_backend_exactly(tmp_path: Path,
                                                       ray_runtime: Any) -> None:
    store = Store.open(str(tmp_path / "prism.duckdb"))
    fill_store(store, synthetic_panel(24, days=2.5))
    model = get_forecaster("prism", **PRISM_SMALL)
    local = batch.run_batch(store, model, horizon="3h", quantiles=QUANTILES, workers=2)
    remote = batch.run_batch(store, model, horizon="3h", quantiles=QUANTILES, backend="ray")
    assert (remote.backend, remote.workers, remote.ok) == ("ray", 2, 24)
    assert local.ok == 24
    pd.testing.assert_frame_equal(batch.run_frame(store, remote.run_id),
                                  batch.run_frame(store, local.run_id), check_exact=True)
    files = [batch.export_run(store, r.run_id, tmp_path / f"{r.backend}.csv")
             for r in (local, remote)]
    assert files[0].read_bytes() == files[1].read_bytes()
    store.close()


# -- failures and budgets -----------------------------------------------------------------------
class TroubleForecaster(BaseForecaster):
    """The last value, except that series named ``boom`` raise, ``slow`` sleep and ``stuck``
    sleep with the budget's alarm ignored (as code stuck in C would)."""

    alias = "trouble"

    def __init__(self, *, random_state: int | None = None) -> None:
        self.random_state = random_state

    def _fit(self, values: dict[str, FloatArray]) -> None:
        for sid in values:
            if "boom" in sid:
                raise RuntimeError(f"cannot fit {sid}")
            if "stuck" in sid:
                signal.signal(signal.SIGALRM, signal.SIG_IGN)
                time.sleep(60)
            if "slow" in sid:
                time.sleep(60)

    def _forecast_many(self, series_id: str, history: FloatArray, ends: Any,
                       steps: int) -> FloatArray:
        return np.repeat(history[ends - 1][:, None], steps, axis=1)


def _trouble_store(names: list[str]) -> tuple[Store, pd.DataFrame]:
    panel = synthetic_panel(len(names), days=2)
    ids = sorted(panel["series_id"].unique())
    panel["series_id"] = panel["series_id"].map(dict(zip(ids, names, strict=True)))
    store = Store.open(":memory:")
    fill_store(store, panel)
    return store, panel


def _check_outcomes(store: Store, report: batch.BatchReport, panel: pd.DataFrame,
                    expected: dict[str, str]) -> None:
    got = batch.run_frame(store, report.run_id)
    outcomes = store.batch_series(report.run_id).set_index("series_id")
    for sid, group in panel.groupby("series_id"):
        reason = outcomes.loc[sid, "fallback_reason"]
        rows = got[got["series_id"] == sid].reset_index(drop=True)
        if sid in expected:
            assert outcomes.loc[sid, "status"] == "fallback"
            assert expected[sid] in reason and "seasonal_naive" in reason
            want = get_forecaster("seasonal_naive").fit(group).predict("1h", QUANTILES)
        else:
            assert outcomes.loc[sid, "status"] == "ok" and pd.isna(reason)
            want = TroubleForecaster().fit(group).predict("1h", QUANTILES)
        want["model"] = "trouble"
        pd.testing.assert_frame_equal(rows, want, check_exact=True)


def test_a_series_that_raises_or_overruns_falls_back_and_the_batch_goes_on() -> None:
    names = ["a/boom/gpus_in_use", "a/fine1/gpus_in_use", "a/fine2/gpus_in_use",
             "a/slow/gpus_in_use", "a/fine3/gpus_in_use"]
    store, panel = _trouble_store(names)
    started = time.perf_counter()
    report = batch.run_batch(store, TroubleForecaster(), horizon="1h", quantiles=QUANTILES,
                             workers=2, budget_s=1.0, chunk_size=2)
    assert time.perf_counter() - started < 30  # nobody waited for the 60 s sleep
    assert (report.ok, report.fallback, report.failed) == (3, 2, 0)
    _check_outcomes(store, report, panel, {
        "a/boom/gpus_in_use": "RuntimeError: cannot fit a/boom/gpus_in_use",
        "a/slow/gpus_in_use": "exceeded its time budget of 1 s",
    })
    assert store.batch_runs(report.run_id)["status"].iloc[0] == "done"


@pytest.mark.slow
def test_a_stuck_worker_is_stopped_and_its_chunk_rerun_one_by_one() -> None:
    names = ["a/fine1/gpus_in_use", "a/stuck/gpus_in_use", "a/fine2/gpus_in_use",
             "a/fine3/gpus_in_use"]
    store, panel = _trouble_store(names)
    started = time.perf_counter()
    report = batch.run_batch(store, TroubleForecaster(), horizon="1h", quantiles=QUANTILES,
                             workers=1, budget_s=0.5, hard_grace_s=2.0, chunk_size=4)
    assert time.perf_counter() - started < 45
    assert (report.ok, report.fallback) == (3, 1)
    _check_outcomes(store, report, panel, {"a/stuck/gpus_in_use": "did not stop"})


# -- memory -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_memory_stays_flat_over_2000_series(tmp_path: Path) -> None:
    """A sanity bound only (the benchmark has the real figures). The 2M forecast rows take
    381 MB as one pandas frame (measured with ``memory_usage(deep=True)``); the run's peak
    grew by 67 MB when measured, the most of it DuckDB's buffers (capped at 64 MB here)."""
    n, horizon = 2_000, 144 * 7
    store = Store.open(str(tmp_path / "prism.duckdb"), memory_limit="64MB")
    fill_store(store, synthetic_panel(n, days=2, clusters=8))
    process = psutil.Process()
    base = process.memory_info().rss
    peak = base
    running = True

    def watch() -> None:
        nonlocal peak
        while running:
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        report = batch.run_batch(store, get_forecaster("seasonal_naive"), horizon=horizon,
                                 quantiles=QUANTILES, workers=2, chunk_size=50)
    finally:
        running = False
        watcher.join()
    assert report.ok == n and report.rows == n * horizon
    assert peak - base < 150e6, f"peak RSS grew by {(peak - base) / 1e6:.0f} MB"
    counts = store.fetch_one("SELECT count(DISTINCT series_id), count(*) FROM batch_forecasts "
                             "WHERE run_id = ?", [report.run_id])
    assert counts == (n, n * horizon)
    store.close()


# -- CLI ----------------------------------------------------------------------------------------
@pytest.fixture
def db(tmp_path: Path) -> tuple[str, pd.DataFrame]:
    """A store file with 6 series."""
    path = str(tmp_path / "prism.duckdb")
    panel = synthetic_panel(6)
    with Store.open(path) as store:
        fill_store(store, panel)
    return path, panel


@pytest.mark.slow
def test_cli_batch_forecast_and_backtest(tmp_path: Path, db: tuple[str, pd.DataFrame],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path, panel = db
    out = tmp_path / "forecast.parquet"
    assert main(["--db", path, "forecast", "--all", "--model", "seasonal_naive", "--param",
                 "season=1h", "--horizon", "2h", "--quantiles", "0.1,0.5,0.9", "--workers",
                 "2", "--budget", "60", "--output", str(out), "-q"]) == 0
    printed = capsys.readouterr().out
    assert "6 ok, 0 fallback" in printed and "on local (2 workers)" in printed
    want = get_forecaster("seasonal_naive", season="1h").fit(panel).predict("2h", QUANTILES)
    pd.testing.assert_frame_equal(pd.read_parquet(out), want, check_exact=True)

    bt = tmp_path / "backtest.csv"
    assert main(["--db", path, "backtest", "--models", "naive,seasonal_naive", "--all",
                 "--horizon", "2h", "--windows", "2", "--quantiles", "0.1,0.5,0.9",
                 "--param", "seasonal_naive.season=1h",
                 "--workers", "1", "--output", str(bt), "--summary", "-q"]) == 0
    printed = capsys.readouterr().out
    assert "mase" in printed and printed.count("run ") == 2
    want = backtest(get_forecaster("naive"), panel, horizon="2h", windows=2,
                    quantiles=QUANTILES)
    got = pd.read_csv(bt, parse_dates=["ts", "cutoff"]).astype(
        {"ts": want["ts"].dtype, "cutoff": want["cutoff"].dtype})
    pd.testing.assert_frame_equal(got[got["model"] == "naive"].reset_index(drop=True), want,
                                  check_exact=False, rtol=1e-12)
    assert set(got["model"]) == {"naive", "seasonal_naive"}
    hourly = backtest(get_forecaster("seasonal_naive", season="1h"), panel, horizon="2h",
                      windows=2, quantiles=QUANTILES)  # the --param reached its model only
    np.testing.assert_allclose(got.loc[got["model"] == "seasonal_naive", "mean"],
                               hourly["mean"], rtol=1e-12)


def test_cli_batch_errors_name_the_fix(db: tuple[str, pd.DataFrame],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = db
    assert main(["--db", path, "forecast", "--all", "--workers", "2", "--reconcile",
                 "bottom_up"]) == 1
    assert "drop them to run a batch" in capsys.readouterr().err
    assert main(["--db", path, "forecast", "--all", "--workers", "0", "-q"]) == 1
    assert "workers must be a whole number >= 1" in capsys.readouterr().err
    assert main(["--db", path, "forecast", "--all", "--budget", "5", "--horizon", "7min",
                 "-q"]) == 1
    assert "whole number of 600-second steps" in capsys.readouterr().err
