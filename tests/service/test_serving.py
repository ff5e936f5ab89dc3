"""The forecast serving core (prism.serving) and the store methods it uses, without HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from prism import registry
from prism.errors import ConfigError, ModelNotReady
from prism.ingest.base import IngestOptions
from prism.serving import MAX_HORIZON_STEPS, ForecastServer, ServedForecast
from prism.store import SCHEMA_VERSION, Store
from tests.service.conftest import SERIES, Trace


def _samples(store_path: Path, rows: list[tuple[str, str, float]], name: str) -> Path:
    path = store_path.parent / f"{name}.csv"
    pd.DataFrame(rows, columns=["series_id", "ts", "value"]).to_csv(path, index=False)
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ForecastServer, Path]]:
    """A server on a store holding one sampled series of two days (naive models)."""
    store = Store.open(tmp_path / "s.duckdb")
    server = ForecastServer(store, models_dir=tmp_path / "models", default_model="naive",
                            fit_budget_s=10).start()
    t0 = pd.Timestamp("2026-03-01")
    rows = [("lab/all/gpus_in_use", (t0 + pd.Timedelta(minutes=10 * i)).isoformat(),
             float(i % 9)) for i in range(288)]
    server.ingest([_samples(tmp_path / "s.duckdb", rows, "first")], "long-csv",
                  IngestOptions())
    yield server, tmp_path
    server.close()
    store.close()


def test_model_keys_name_the_parameters_that_differ(served: tuple[ForecastServer, Path]
                                                    ) -> None:
    server, _ = served
    assert server.spec().key == "naive"
    assert server.spec("prism").key == "prism"
    assert server.spec("prism", {"use_rnn": True}).key == "prism[use_rnn=true]"
    assert server.spec("prism", {"use_rnn": False}).key == "prism"  # the default
    assert server.spec("seasonal_naive", {"season": "1w"}).key == 'seasonal_naive[season="1w"]'
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        server.spec("nope")
    with pytest.raises(ConfigError, match="bad parameters"):
        server.spec("naive", {"season": "1d"})


def test_revised_value_changes_the_watermark_and_is_absorbed(
        served: tuple[ForecastServer, Path]) -> None:
    server, folder = served
    sid = "lab/all/gpus_in_use"
    first = server.forecast(sid, horizon="30min", quantiles=[0.5])
    assert first.mean == [float(287 % 9)] * 3
    same = server.ingest([_samples(folder / "s.duckdb", [(sid, "2026-03-01T00:00", 0.0)],
                                   "same")], "long-csv", IngestOptions())
    assert same.changed == [] and server.series_state(sid).watermark == first.watermark
    # a second sample in the last bucket: the bucket mean (the last value) changes
    revised = server.ingest([_samples(folder / "s.duckdb",
                                      [(sid, "2026-03-02T23:55", 100.0)], "revise")],
                            "long-csv", IngestOptions())
    assert revised.changed == [sid]
    state = server.series_state(sid)
    assert state.last_ts == pd.Timestamp("2026-03-02T23:50")  # same end, new content
    assert state.watermark != first.watermark
    second = server.forecast(sid, horizon="30min", quantiles=[0.5])
    assert second.ts == first.ts and second.model_id == first.model_id
    assert second.mean == [(287 % 9 + 100.0) / 2] * 3
    assert second.model_version == f"{first.model_id}.v2"


def test_data_before_the_start_refits_the_model(served: tuple[ForecastServer, Path]) -> None:
    server, folder = served
    sid = "lab/all/gpus_in_use"
    first = server.forecast(sid, horizon="10min", quantiles=[0.5])
    server.ingest([_samples(folder / "s.duckdb", [(sid, "2026-02-28T23:50", 5.0)], "early")],
                  "long-csv", IngestOptions())
    second = server.forecast(sid, horizon="10min", quantiles=[0.5])
    assert second.model_id != first.model_id and second.model_version.endswith(".v1")
    assert {r.model_id for r in registry.list_models(folder / "models")} == {
        first.model_id, second.model_id}


def test_refit_schedule_replaces_old_models(tmp_path: Path, trace: Trace) -> None:
    db = tmp_path / "p.duckdb"
    db.write_bytes(trace.db.read_bytes())
    with Store.open(db) as store:
        server = ForecastServer(store, models_dir=tmp_path / "models", default_model="naive",
                                refit_every="1s").start()
        try:
            first = server.forecast(SERIES, horizon="1h", quantiles=[0.5])
            deadline = time.monotonic() + 15
            current = first
            while current.model_id == first.model_id and time.monotonic() < deadline:
                time.sleep(0.2)
                current = server.forecast(SERIES, horizon="1h", quantiles=[0.5])
        finally:
            server.close()
    assert current.model_id != first.model_id
    assert current.mean == first.mean  # same data, same naive forecast


def test_fit_queue_is_bounded(tmp_path: Path, trace: Trace) -> None:
    db = tmp_path / "p.duckdb"
    db.write_bytes(trace.db.read_bytes())
    with Store.open(db) as store:
        server = ForecastServer(store, models_dir=tmp_path / "models", default_model="prism",
                                fit_budget_s=0, fit_queue=1).start()
        spec = server.spec("prism", {"use_rnn": False})
        ids = ["cluster-0/vc-27a/gpu_demand", "cluster-0/vc-l10/gpu_demand",
               "cluster-0/vc-he9/gpu_demand", "cluster-0/vc-pzx/gpu_demand"]
        messages = []
        try:
            for sid in ids:
                with pytest.raises(ModelNotReady) as error:
                    server.forecast(sid, horizon="1h", quantiles=[0.5], spec=spec)
                messages.append(str(error.value))
            rejected = [s.value for m in server.collect() if m.name == "prism_fit_jobs_rejected"
                        for s in m.samples if s.name == "prism_fit_jobs_rejected_total"]
        finally:
            server.close()
    refused = sum("model jobs are waiting" in m for m in messages)
    assert refused >= 1 and rejected == [float(refused)]


def test_horizon_is_capped(served: tuple[ForecastServer, Path]) -> None:
    server, _ = served
    with pytest.raises(ConfigError, match=f"at most {MAX_HORIZON_STEPS:,} steps"):
        server.forecast("lab/all/gpus_in_use", horizon="1000w", quantiles=[0.5])


def test_served_forecast_json_round_trip(served: tuple[ForecastServer, Path]) -> None:
    server, _ = served
    fc = server.forecast("lab/all/gpus_in_use", horizon="1h", quantiles=[0.5, 0.9])
    assert ServedForecast.from_json(fc.to_json()) == fc
    assert fc.ts[0].tzinfo is not None  # times leave the process with their zone
    naive = fc.to_json().replace("+00:00", "")  # a payload cached by an older version
    assert ServedForecast.from_json(naive).ts == fc.ts
    frame = fc.frame()
    assert list(frame.columns) == ["series_id", "ts", "model", "mean", "p50", "p90"]
    assert frame["ts"].dt.tz is None and frame["ts"].iloc[0] == pd.Timestamp("2026-03-03")


def test_store_capacity_takes_the_row_in_force(store: Store, tmp_path: Path) -> None:
    from prism.ingest.pipeline import ingest

    path = tmp_path / "capacity.csv"
    path.write_text("cluster,scope,gpu_type,gpus,valid_from\n"
                    "c,vc,A100,8,\n"
                    "c,vc,A100,16,2026-02-01\n"
                    "c,vc,H100,4,2026-03-01\n")
    ingest(store, [path], "capacity-csv")
    assert store.capacity_at("c", "vc", pd.Timestamp("2026-01-15")) == 8
    assert store.capacity_at("c", "vc", pd.Timestamp("2026-02-15")) == 16
    assert store.capacity_at("c", "vc", pd.Timestamp("2026-03-15")) == 20
    assert store.capacity_at("c", "other", None) is None


def test_store_rolling_errors_use_the_last_points(store: Store) -> None:
    ts = pd.date_range("2026-01-01", periods=4, freq="10min")
    store.add_forecast_errors(pd.DataFrame({
        "series_id": "a/b/c", "model": "naive", "model_version": "m.v1",
        "origin_ts": ts[0], "ts": ts, "step": [1, 2, 3, 4],
        "forecast": [10.0, 10.0, 10.0, 10.0], "actual": [11.0, 13.0, 6.0, 10.0],
        "scored_at": pd.Timestamp("2026-01-02")}))
    errors = store.rolling_forecast_errors(2)
    assert errors[["series_id", "points", "mae"]].values.tolist() == [["a/b/c", 2, 2.0]]
    assert errors["wape"].iloc[0] == pytest.approx(4 / 16)


def test_store_forecast_cache_round_trip(store: Store) -> None:
    key = ("a/b/c", "naive", "m.v1", "w", 6, "0.5")
    assert store.cached_forecast(*key) is None
    assert store.cache_forecasts([(*key, "{}"), (*key, "{}")]) == 2
    assert store.cached_forecast(*key) == "{}"
    assert store.drop_cached_forecasts(["x/y/z"]) == 0
    assert store.drop_cached_forecasts(["a/b/c"]) == 1
    assert store.cached_forecast(*key) is None


def test_store_watermark_checksum_changes_with_any_value(store: Store) -> None:
    first = store.series_watermarks()
    assert first.empty
    store.insert_frame("series", pd.DataFrame({
        "series_id": ["a/b/c"], "cluster": ["a"], "scope": ["b"], "metric": ["c"],
        "freq": ["10min"], "first_ts": [pd.Timestamp("2026-01-01")],
        "last_ts": [pd.Timestamp("2026-01-01T00:10")], "n_points": [2]}),
        ["series_id", "cluster", "scope", "metric", "freq", "first_ts", "last_ts", "n_points"])
    values = pd.DataFrame({"cluster": "a", "series_id": "a/b/c",
                           "ts": pd.date_range("2026-01-01", periods=2, freq="10min"),
                           "value": [1.0, 2.0], "filled": False})
    store.insert_frame("series_values", values, list(values.columns))
    one = int(store.series_watermarks()["checksum"].iloc[0])
    store.execute("UPDATE series_values SET value = 2.5 WHERE ts = '2026-01-01 00:10:00'")
    two = int(store.series_watermarks()["checksum"].iloc[0])
    store.execute("UPDATE series_values SET value = 2.0 WHERE ts = '2026-01-01 00:10:00'")
    assert one != two and int(store.series_watermarks(["a"])["checksum"].iloc[0]) == one
    assert store.series_watermarks(["zzz"]).empty


def test_a_version_1_store_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.close()
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 2
        tables = {r[0] for r in store.fetch_all("SELECT table_name FROM duckdb_tables()")}
    assert {"forecast_cache", "forecast_errors", "series"} <= tables


def _warm_up_thread(server: ForecastServer) -> None:
    for thread in server._threads:
        if thread.name == "prism-warm-up":
            thread.join(timeout=60)
            assert not thread.is_alive()


def test_start_warms_the_default_model_up_off_the_request_path(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The first fit in a process pays the imports; the server does one on a synthetic series
    # when it starts, logs it, and a warm-up that fails only logs why.
    with caplog.at_level("INFO", logger="prism.serving"), Store.open(
            tmp_path / "s.duckdb") as store:
        server = ForecastServer(store, models_dir=tmp_path / "models",
                                default_model="seasonal_naive").start()
        _warm_up_thread(server)
        assert any("warmed up seasonal_naive" in r.getMessage() for r in caplog.records)
        server.close()

        def broken(alias: str, **params: object) -> None:
            raise RuntimeError("no torch today")

        monkeypatch.setattr("prism.serving.get_forecaster", broken)
        server = ForecastServer(store, models_dir=tmp_path / "models",
                                default_model="seasonal_naive").start()
        _warm_up_thread(server)
        assert server.ready
        assert any(r.levelname == "WARNING" and "no torch today" in r.getMessage()
                   for r in caplog.records)
        server.close()
