"""prism.store.Store on its own: the tables, the caches and the reads the rest of PRISM uses."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from prism.store import SCHEMA_VERSION, Store


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
        assert store.schema_version == SCHEMA_VERSION == 3
        tables = {r[0] for r in store.fetch_all("SELECT table_name FROM duckdb_tables()")}
    assert {"forecast_cache", "forecast_errors", "series"} <= tables


def _add_series(store: Store, values: dict[str, list[float]], start: str = "2026-01-01",
                freq: str = "10min") -> None:
    """Put series straight into the catalogue and ``series_values`` (no ingest)."""
    rows, catalogue = [], []
    for series_id, points in values.items():
        cluster, scope, metric = series_id.split("/")
        ts = pd.date_range(start, periods=len(points), freq=freq)
        rows.append(pd.DataFrame({"cluster": cluster, "series_id": series_id, "ts": ts,
                                  "value": points, "filled": False}))
        catalogue.append({"series_id": series_id, "cluster": cluster, "scope": scope,
                          "metric": metric, "freq": freq, "first_ts": ts[0], "last_ts": ts[-1],
                          "n_points": len(points)})
    frame = pd.concat(rows, ignore_index=True)
    store.insert_frame("series_values", frame, list(frame.columns))
    info = pd.DataFrame(catalogue)
    store.insert_frame("series", info, list(info.columns))


def test_open_names_a_missing_folder_and_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    from prism.errors import ConfigError

    with pytest.raises(ConfigError, match="does not exist; create it or pass another --db"):
        Store.open(tmp_path / "nowhere" / "s.duckdb")
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database\n")
    with pytest.raises(ConfigError, match="is not a DuckDB store .*pass the store.s file"):
        Store.open(junk)


def test_a_store_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    from prism.errors import PrismError

    path = tmp_path / "new.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION + 1)])
    conn.close()
    with pytest.raises(PrismError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        Store.open(path)


def test_a_file_store_keeps_its_rows_and_reopens_read_only(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store.open(path) as store:
        _add_series(store, {"a/b/c": [1.0, 2.0]})
    with Store.open(path, read_only=True) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.load_panel()["value"].tolist() == [1.0, 2.0]
        with pytest.raises(duckdb.Error):
            store.execute("DELETE FROM series_values")


def test_fetch_helpers_bind_parameters(store: Store) -> None:
    assert store.fetch_one("SELECT ? + 1", [41]) == (42,)
    assert store.fetch_one("SELECT 1 WHERE false") is None
    assert store.fetch_all("SELECT * FROM range(?)", [3]) == [(0,), (1,), (2,)]
    assert store.fetch_df("SELECT ? AS x", ["it's"])["x"].tolist() == ["it's"]


def test_insert_frame_takes_pandas_and_arrow_and_refuses_other_tables(store: Store) -> None:
    import pyarrow as pa

    from prism.errors import PrismError

    frame = pd.DataFrame({"series_id": ["a/b/c"], "ts": [pd.Timestamp("2026-01-01")],
                          "value": [1.5], "ignored": ["x"]})
    assert store.insert_frame("samples", frame, ["series_id", "ts", "value"],
                              {"cluster": "a", "ingest_id": 7}) == 1
    assert store.insert_frame("samples", pa.Table.from_pandas(frame),
                              ["series_id", "ts", "value"], {"cluster": "b"}) == 1
    assert store.fetch_all("SELECT ingest_id, cluster, value FROM samples ORDER BY cluster") == [
        (7, "a", 1.5), (None, "b", 1.5)]
    with pytest.raises(PrismError, match="unknown table 'meta'"):
        store.insert_frame("meta", frame, ["series_id"])


def test_insert_file_reads_a_csv_and_names_one_it_cannot(store: Store, tmp_path: Path) -> None:
    from prism.errors import FileScanError
    from prism.schema import FileScan

    good = tmp_path / "good.csv"
    good.write_text("when,id,v\n2026-01-01T00:10:00,a/b/c,2.5\n2026-01-01T00:00:00Z,a/b/c,x\n")
    scan = FileScan(good, "csv", ("time", "text", "number"),
                    {"ts": 0, "series_id": 1, "value": 2}, {"cluster": "a"})
    with store.transaction():
        assert store.insert_file("samples", scan, ["series_id", "ts", "value", "cluster"]) == 2
    rows = store.fetch_df("SELECT cluster, series_id, ts, value FROM samples ORDER BY ts")
    assert rows["cluster"].tolist() == ["a", "a"]
    assert rows["ts"].astype("datetime64[ns]").tolist() == [
        pd.Timestamp("2026-01-01T00:00"), pd.Timestamp("2026-01-01T00:10")]
    assert rows["value"].iloc[1] == 2.5 and pd.isna(rows["value"].iloc[0])  # x: NaN, no abort
    missing = FileScan(tmp_path / "gone.csv", "csv", ("text",), {"series_id": 0})
    with pytest.raises(FileScanError, match="gone.csv"), store.transaction():
        store.insert_file("samples", missing, ["series_id"])


def test_transaction_commits_together_or_not_at_all(store: Store) -> None:
    with store.transaction():
        assert store.in_transaction
        store.execute("INSERT INTO clusters VALUES ('a', 600, 'zero')")
        with store.transaction():  # nested: part of the outer one
            store.execute("INSERT INTO clusters VALUES ('b', 600, 'zero')")
    assert not store.in_transaction
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.execute("INSERT INTO clusters VALUES ('c', 600, 'zero')")
        raise RuntimeError("boom")
    assert not store.in_transaction
    assert [r[0] for r in store.fetch_all("SELECT cluster FROM clusters ORDER BY 1")] == [
        "a", "b"]


def test_a_cursor_sees_the_same_database(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        other = store.cursor()
        other.execute("INSERT INTO clusters VALUES ('a', 600, 'zero')")
        assert store.fetch_one("SELECT count(*) FROM clusters") == (1,)
        other.close()
        assert store.schema_version == SCHEMA_VERSION  # closing a cursor leaves the store open


def test_list_series_filters_and_require_series_suggests(store: Store) -> None:
    from prism.errors import SeriesNotFound

    _add_series(store, {"a/vc1/gpus_in_use": [1.0], "a/vc2/gpus_in_use": [2.0],
                        "b/vc1/gpu_demand": [3.0]})
    assert store.list_series()["series_id"].tolist() == [
        "a/vc1/gpus_in_use", "a/vc2/gpus_in_use", "b/vc1/gpu_demand"]
    assert store.list_series(cluster="a", scope="vc2")["series_id"].tolist() == [
        "a/vc2/gpus_in_use"]
    assert store.list_series(metric="gpu_demand")["cluster"].tolist() == ["b"]
    assert store.list_series(cluster="zzz").empty
    store.require_series(["a/vc1/gpus_in_use", "a/vc1/gpus_in_use"])
    with pytest.raises(SeriesNotFound, match="'a/vc3/gpus_in_use' is not in the store; "
                                             "did you mean .*a/vc1/gpus_in_use"):
        store.require_series(["a/vc1/gpus_in_use", "a/vc3/gpus_in_use"])
    with pytest.raises(SeriesNotFound, match="`prism series list` shows"):
        store.require_series(["qqqqqqqqqqqqqqqqqqqq"])


def test_load_panel_selects_series_and_a_half_open_time_range(store: Store) -> None:
    from prism.errors import SeriesNotFound

    _add_series(store, {"a/b/c": [0.0, 1.0, 2.0, 3.0], "a/b/d": [5, 6, 7, 8]})
    panel = store.load_panel(["a/b/d"], start=pd.Timestamp("2026-01-01T00:10"),
                             end=pd.Timestamp("2026-01-01T00:30"))
    assert panel["value"].tolist() == [6.0, 7.0]  # the end is excluded
    assert panel["ts"].dtype == "datetime64[ns]" and panel["value"].dtype == "float64"
    everything = store.load_panel()
    assert everything.groupby("series_id").size().to_dict() == {"a/b/c": 4, "a/b/d": 4}
    assert everything.equals(everything.sort_values(["series_id", "ts"]))  # series, then time
    with pytest.raises(SeriesNotFound):
        store.load_panel(["a/b/zz"])


def test_load_panel_block_skips_absent_ids(store: Store) -> None:
    _add_series(store, {"a/b/c": [1.0, 2.0], "a/b/d": [3.0], "a/b/e": [4.0]})
    block = store.load_panel_block(["a/b/e", "a/b/c", "nope/x/y", "a/b/c"])
    assert block[["series_id", "value"]].values.tolist() == [
        ["a/b/c", 1.0], ["a/b/c", 2.0], ["a/b/e", 4.0]]
    empty = store.load_panel_block([])
    assert list(empty.columns) == ["series_id", "ts", "value"] and empty.empty
    assert empty["ts"].dtype == "datetime64[ns]"


def test_cache_keeps_the_first_payload_of_a_key_and_drops_all(store: Store) -> None:
    key = ("a/b/c", "naive", "m.v1", "w", 6, "0.5")
    store.cache_forecasts([(*key, "first")])
    store.cache_forecasts([(*key, "second"), ("d/e/f", *key[1:], "other")])
    assert store.cached_forecast(*key) == "first"
    assert store.cache_forecasts([]) == 0
    assert store.drop_cached_forecasts() == 2
    assert store.cached_forecast("d/e/f", *key[1:]) is None


def test_evaluations_latest_of_a_kind_round_trips(store: Store) -> None:
    assert store.latest_evaluation("accuracy") is None
    table = pd.DataFrame({"model": ["naive", "prism"], "avg_rel_mae": [1.0, 0.8125]})
    first = store.save_evaluation("accuracy", table.head(1))
    store.execute("UPDATE evaluations SET created_at = created_at - INTERVAL 1 HOUR")
    second = store.save_evaluation("accuracy", table, '{"cutoffs": 4}')
    store.save_evaluation("planning", table.head(1))
    assert first != second and second.startswith("accuracy-")
    latest = store.latest_evaluation("accuracy")
    assert latest is not None
    run_id, created_at, params, got = latest
    assert run_id == second and params == '{"cutoffs": 4}'
    assert isinstance(created_at, pd.Timestamp)
    pd.testing.assert_frame_equal(got, table)


def test_batch_run_records_outcomes_and_streams_forecasts_in_order(store: Store) -> None:
    import pyarrow as pa

    store.start_batch_run("r1", task="forecast", model="naive", params="{}", horizon="1h",
                          quantiles=[0.1, 0.9], windows=None, backend="local", workers=2,
                          n_series=2)
    assert store.batch_runs("r1")[["status", "n_series"]].values.tolist() == [["running", 2]]
    ts = pd.date_range("2026-01-01", periods=3, freq="10min")
    forecasts = pa.Table.from_pandas(pd.DataFrame({
        "series_id": ["b/x/y"] * 3 + ["a/x/y"] * 3, "cutoff": pd.NaT,
        "ts": list(ts[::-1]) + list(ts), "model": "naive",
        "mean": [3.0, 2.0, 1.0, 4.0, 5.0, 6.0],
        "quantiles": [[0.0, 1.0]] * 6, "value": float("nan")}), preserve_index=False)
    series = pd.DataFrame({"series_id": ["b/x/y", "a/x/y"], "status": ["ok", "fallback"],
                           "fallback_reason": [None, "too short"], "seconds": [0.1, 0.2],
                           "n_rows": [3, 3]})
    store.add_batch_results("r1", forecasts, series)
    store.add_batch_results("r1", None, series.head(0))
    store.finish_batch_run("r1", status="done", seconds=1.5)
    run = store.batch_runs("r1").iloc[0]
    assert run["status"] == "done" and run["seconds"] == 1.5 and not pd.isna(run["finished_at"])
    assert store.batch_series("r1")[["series_id", "status"]].values.tolist() == [
        ["a/x/y", "fallback"], ["b/x/y", "ok"]]
    chunks = list(store.iter_batch_forecasts("r1", rows=4))
    assert [c.num_rows for c in chunks] == [4, 2]
    out = pa.concat_tables(chunks).to_pandas()
    assert out["mean"].tolist() == [4.0, 5.0, 6.0, 1.0, 2.0, 3.0]  # by series, then time
    assert list(out.columns) == ["series_id", "ts", "cutoff", "model", "mean", "quantiles",
                                 "value"]
    assert list(store.iter_batch_forecasts("other")) == []
    store.start_batch_run("r0", task="refit", model="naive", params="{}", horizon="1h",
                          quantiles=[0.5], windows=2, backend="local", workers=1, n_series=0)
    assert store.batch_runs()["run_id"].tolist()[0] == "r0"  # newest first


def test_load_jobs_by_scope_and_as_known_at_a_time(store: Store) -> None:
    t = pd.Timestamp("2026-01-05")
    h = pd.Timedelta("1h")
    jobs = pd.DataFrame({
        "cluster": ["c", "c", "c", "c", "other"],
        "scope": ["vc a", "vc2", None, "vc2", "vc2"],  # "vc a" is vc_a in series ids
        "job_id": ["j1", "j2", "j3", "j4", "j5"],
        "gpu_type": ["A100", None, "A100", "H 100", "A100"],
        "num_gpus": [2.0, 1.0, 4.0, 8.0, 1.0],
        "submit_ts": [t, t + h, pd.NaT, t + 5 * h, t],
        "start_ts": [t + h, t + 2 * h, t, pd.NaT, t],
        "end_ts": [t + 3 * h, pd.NaT, t + 4 * h, pd.NaT, t + h],
    })
    store.insert_frame("jobs", jobs, list(jobs.columns))
    every = store.load_jobs("c")
    assert every["job_id"].tolist() == ["j3", "j1", "j2", "j4"]  # by start, unstarted last
    assert list(every.columns) == ["cluster", "scope", "job_id", "gpu_type", "num_gpus",
                                   "submit_ts", "start_ts", "end_ts"]
    assert every["start_ts"].dtype == "datetime64[ns]" and every["num_gpus"].dtype == "float64"
    assert store.load_jobs("c", "all")["job_id"].tolist() == every["job_id"].tolist()
    assert store.load_jobs("c", "vc2")["job_id"].tolist() == ["j2", "j4"]
    assert store.load_jobs("c", "vc_a")["job_id"].tolist() == ["j1"]
    assert store.load_jobs("c", "unassigned")["job_id"].tolist() == ["j3"]
    assert store.load_jobs("c", "gpu:A100")["job_id"].tolist() == ["j3", "j1"]
    assert store.load_jobs("c", "gpu:H_100")["job_id"].tolist() == ["j4"]
    assert store.load_jobs("c", "gpu:unknown")["job_id"].tolist() == ["j2"]
    assert store.load_jobs("nowhere").empty
    # at t + 2h: j4 is not submitted yet, j1 and j3 have not ended, j2 has just started
    known = store.load_jobs("c", until=t + 2 * h).set_index("job_id")
    assert sorted(known.index) == ["j1", "j2", "j3"]  # j3 (no submit time): from its start
    assert known["end_ts"].isna().all()  # j1 and j3 end after it (j2 never)
    assert known.loc["j1", "start_ts"] == t + h
    assert known.loc["j2", "start_ts"] == t + 2 * h
    before = store.load_jobs("c", until=t - h)
    assert before.empty and list(before.columns) == list(every.columns)
