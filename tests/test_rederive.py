"""Re-deriving a cluster's series at another frequency (issue #18 item 13).

``--freq`` on a re-ingest of the same files does nothing (the files are skipped): ingest says so
and names ``prism series rederive``; :func:`rederive_cluster` derives the series again from the
stored jobs and samples, in one transaction.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import prism.derive
from prism.cli import main
from prism.errors import ConfigError, IngestError
from prism.store import Store
from prism.usecases.series import RederiveResult, rederive_cluster

JOBS = ("job_id,cluster,scope,num_gpus,submit_ts,start_ts,end_ts\n"
        "j1,c,vc,2,2026-01-05T00:00:00,2026-01-05T00:10:00,2026-01-05T03:00:00\n"
        "j2,c,vc,4,2026-01-05T00:30:00,2026-01-05T01:30:00,2026-01-05T02:00:00\n")


def _ingest(db: Path, path: Path, fmt: str = "jobs-csv", *extra: str) -> int:
    return main(["--db", str(db), "ingest", str(path), "--format", fmt, "-q", *extra])


def _trace(folder: Path) -> Path:
    path = folder / "jobs.csv"
    path.write_text(JOBS, encoding="utf-8")
    return path


def _series(db: Path, cluster: str = "c") -> dict[str, Any]:
    """The cluster's catalogue, values and settings, to compare stores."""
    with Store.open(db) as store:
        return {
            "series": store.fetch_all(
                "SELECT * EXCLUDE (source) FROM series WHERE cluster = ? ORDER BY series_id",
                [cluster]),
            "values": store.fetch_all(
                "SELECT * FROM series_values WHERE cluster = ? ORDER BY ALL", [cluster]),
            "config": store.fetch_all("SELECT * FROM clusters WHERE cluster = ?", [cluster]),
        }


def test_rederive_gives_what_a_fresh_ingest_at_that_freq_gives(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    db, fresh = tmp_path / "s.duckdb", tmp_path / "fresh.duckdb"
    assert _ingest(db, path) == 0
    assert _ingest(fresh, path, "jobs-csv", "--freq", "1h") == 0
    with Store.open(db) as store:
        result = rederive_cluster(store, "c", freq="1h")
    assert result == RederiveResult(cluster="c", freq="1h", fill="auto", previous_freq="10min",
                                    previous_fill="auto", series=10, points=30)
    assert _series(db) == _series(fresh)
    with Store.open(db) as store:  # the oracle: j1 holds 2 GPUs from 00:10, j2 4 for 30 min
        values = store.fetch_all("""SELECT strftime(ts, '%H:%M'), value FROM series_values
                                    WHERE series_id = 'c/all/gpus_in_use' ORDER BY ts""")
    assert values == [("00:00", pytest.approx(2 * 50 / 60)), ("01:00", 2 + 4 * 30 / 60),
                      ("02:00", 2.0)]


def test_rederive_keeps_the_setting_for_later_ingests(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert _ingest(db, _trace(tmp_path)) == 0
    with Store.open(db) as store:
        rederive_cluster(store, "c", freq="30min")
    more = tmp_path / "more.csv"
    more.write_text(JOBS.splitlines()[0] + "\n"
                    "j3,c,vc,1,2026-01-05T03:00:00,2026-01-05T03:00:00,2026-01-05T05:00:00\n",
                    encoding="utf-8")
    assert _ingest(db, more) == 0
    with Store.open(db) as store:
        assert {r[0] for r in store.fetch_all("SELECT freq FROM series")} == {"30min"}


def test_rederive_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.duckdb"
    assert _ingest(db, _trace(tmp_path)) == 0
    before = _series(db)

    def crash(*args: object) -> None:  # after the old series are deleted and jobs derived
        raise RuntimeError("disk full")

    monkeypatch.setattr(prism.derive, "_derive_samples", crash)
    with Store.open(db) as store, pytest.raises(RuntimeError, match="disk full"):
        rederive_cluster(store, "c", freq="1h")
    assert _series(db) == before


def test_a_span_too_long_for_the_freq_names_the_row_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    path = tmp_path / "long.csv"
    path.write_text(JOBS + "j9,c,vc,1,2026-01-05T00:00:00,2026-01-05T00:00:00,"
                    "2030-01-05T00:00:00\n", encoding="utf-8")
    assert _ingest(db, path, "jobs-csv", "--freq", "1h") == 0  # 35,064 buckets of 1h: fine
    before = _series(db)
    with Store.open(db) as store, pytest.raises(IngestError) as caught:
        rederive_cluster(store, "c", freq="1min")  # 2.1M buckets: too many
    text = str(caught.value)
    assert text.startswith(f"{path}, column 'end_ts': end_ts 2030-01-05T00:00:00 (job 'j9')")
    assert "more than the 2,000,000 PRISM derives" in text and "--freq 5min or coarser" in text
    assert _series(db) == before


def test_rederive_drops_the_cached_forecasts_of_the_cluster(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert _ingest(db, _trace(tmp_path)) == 0
    with Store.open(db) as store:
        store.cache_forecasts([("c/all/gpus_in_use", "naive", "v1", "w", 6, "0.5", "{}"),
                               ("other/all/gpus_in_use", "naive", "v1", "w", 6, "0.5", "{}")])
        rederive_cluster(store, "c", freq="1h")
        assert store.fetch_all("SELECT series_id FROM forecast_cache") == [
            ("other/all/gpus_in_use",)]


def test_rederive_changes_the_fill_of_sampled_series(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    points = tmp_path / "points.csv"
    points.write_text("series_id,ts,value\nlab/all/gpus_in_use,2026-01-05T00:00,4\n"
                      "lab/all/gpus_in_use,2026-01-05T00:30,8\n", encoding="utf-8")
    assert _ingest(db, points, "long-csv") == 0
    with Store.open(db) as store:
        result = rederive_cluster(store, "lab", fill="zero")
        assert (result.freq, result.fill, result.previous_fill) == ("10min", "zero", "auto")
        values = store.fetch_all("""SELECT value, filled FROM series_values
                                    WHERE series_id = 'lab/all/gpus_in_use' ORDER BY ts""")
    assert values == [(4.0, False), (0.0, True), (0.0, True), (8.0, False)]


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"cluster": "cc", "freq": "1h"}, "--cluster 'cc' is not a cluster of the store; did you "
     "mean c?"),
    ({"cluster": "c", "freq": "1s"}, "finer than the 1min"),
    ({"cluster": "c", "freq": "soon"}, "soon"),
    ({"cluster": "c", "fill": "mean"}, "--fill 'mean' is not a fill policy"),
])
def test_bad_arguments_are_refused_and_change_nothing(
        tmp_path: Path, kwargs: dict[str, str], words: str) -> None:
    db = tmp_path / "s.duckdb"
    assert _ingest(db, _trace(tmp_path)) == 0
    before = _series(db)
    with Store.open(db) as store, pytest.raises(ConfigError, match=words.replace("?", r"\?")):
        rederive_cluster(store, **kwargs)
    assert _series(db) == before


def test_freq_on_a_reingest_warns_and_names_rederive(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.duckdb"
    path = _trace(tmp_path)
    assert _ingest(db, path) == 0
    before = _series(db)
    with caplog.at_level(logging.WARNING):
        assert _ingest(db, path, "jobs-csv", "--freq", "1h") == 0
    assert ("series of cluster c unchanged at freq 10min: the files were ingested before, so "
            "--freq did nothing; run `prism series rederive --cluster c --freq 1h` to "
            "re-derive") in caplog.text
    assert _series(db) == before
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the same freq again: nothing to say
        assert _ingest(db, path, "jobs-csv", "--freq", "10min") == 0
    assert "rederive" not in caplog.text


def test_series_rederive_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _trace(tmp_path)
    db, fresh = tmp_path / "s.duckdb", tmp_path / "fresh.duckdb"
    assert _ingest(db, path) == 0 and _ingest(fresh, path, "jobs-csv", "--freq", "1h") == 0
    capsys.readouterr()
    assert main(["--db", str(db), "series", "rederive", "--cluster", "c", "--freq", "1h"]) == 0
    assert "re-derived 10 series of c (30 points) at 1h (was 10min)" in capsys.readouterr().out
    assert _series(db) == _series(fresh)
    before = _series(db)
    assert main(["--db", str(db), "series", "rederive", "--cluster", "nope", "--freq", "1h"]) == 1
    assert "nope" in capsys.readouterr().err
    assert _series(db) == before


def _store_rows(db: Path) -> dict[str, Any]:
    """Everything a refused command must leave as it was: series, settings, jobs, ingests."""
    with Store.open(db) as store:
        return {**_series(db), "jobs": store.fetch_all("SELECT * FROM jobs ORDER BY ALL"),
                "ingests": store.fetch_all("SELECT ingest_id, path FROM ingests ORDER BY 1")}


@pytest.mark.parametrize("extra", [[], ["--fill", "zero"]])
def test_a_freq_longer_than_the_jobs_window_is_refused_and_keeps_the_series(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    # The trace is observed from 00:00 to 03:00: no whole bucket of 1d lies in it, so the
    # re-derive would have deleted all 10 series and said "re-derived 0 series", exit 0.
    db = tmp_path / "s.duckdb"
    assert _ingest(db, _trace(tmp_path)) == 0
    before = _store_rows(db)
    capsys.readouterr()
    assert main(["--db", str(db), "series", "rederive", "--cluster", "c", "--freq", "1d",
                 *extra]) == 1
    captured = capsys.readouterr()
    assert "re-derived" not in captured.out
    assert ("error: cluster 'c': its jobs are observed from 2026-01-05 00:00 to 2026-01-05 "
            "03:00 UTC (3.0 hours), which holds no whole bucket of 1d") in captured.err
    assert ("its jobs would derive no series (the cluster has 10 now); nothing was changed. "
            "Fix: pass a shorter --freq (3h fits)") in captured.err
    assert _store_rows(db) == before
    assert main(["--db", str(db), "series", "list"]) == 0
    assert "c/all/gpus_in_use" in capsys.readouterr().out


def test_a_freq_that_drops_a_scope_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # VC b's one job ends at 00:30; at 1h the window's first whole bucket starts at 01:00, so
    # the five series of c/b would vanish while those of c/a stay.
    db = tmp_path / "s.duckdb"
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,cluster,scope,num_gpus,submit_ts,start_ts,end_ts\n"
                    "j1,c,a,2,2026-01-05T00:05:00,2026-01-05T00:10:00,2026-01-05T03:00:00\n"
                    "j2,c,b,1,2026-01-05T00:05:00,2026-01-05T00:05:00,2026-01-05T00:30:00\n",
                    encoding="utf-8")
    assert _ingest(db, path) == 0
    before = _store_rows(db)
    capsys.readouterr()
    assert main(["--db", str(db), "series", "rederive", "--cluster", "c", "--freq", "1h"]) == 1
    err = capsys.readouterr().err
    assert ("error: cluster 'c': deriving it at 1h would drop 5 of its 15 series "
            "(c/b/gpu_demand, c/b/gpus_in_use, c/b/gpus_pending, ...)") in err
    assert "2026-01-05 00:05 to 2026-01-05 03:00 UTC" in err
    assert "Fix: pass a shorter --freq (its series are at 10min)" in err
    assert _store_rows(db) == before
    assert main(["--db", str(db), "series", "rederive", "--cluster", "c", "--freq", "5min"]) == 0


def test_an_ingest_whose_freq_leaves_no_whole_bucket_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    path = _trace(tmp_path)
    capsys.readouterr()
    assert _ingest(db, path, "jobs-csv", "--freq", "1d") == 1  # a new store: nothing stored
    assert "its jobs would derive no series; nothing was changed" in capsys.readouterr().err
    with Store.open(db) as store:
        assert store.fetch_all("SELECT count(*) FROM jobs") == [(0,)]
        assert store.fetch_all("SELECT count(*) FROM ingests") == [(0,)]
    assert _ingest(db, path) == 0  # a cluster with series: a new file at 1d changes nothing
    before = _store_rows(db)
    more = tmp_path / "more.csv"
    more.write_text(JOBS.splitlines()[0] + "\n"
                    "j3,c,vc,1,2026-01-05T03:00:00,2026-01-05T03:00:00,2026-01-05T05:00:00\n",
                    encoding="utf-8")
    capsys.readouterr()
    assert _ingest(db, more, "jobs-csv", "--freq", "1d") == 1
    assert ("(the cluster has 10 now); nothing was changed. Fix: pass a shorter --freq (3h "
            "fits)") in capsys.readouterr().err
    assert _store_rows(db) == before
