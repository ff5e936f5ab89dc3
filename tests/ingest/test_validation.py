"""Bad input from the hardening audit (issue #18), the way a user meets it: ``prism ingest`` on
a file that would have been stored wrong. Each is refused with exit code 1 and a message that
names the file, the line, the column and the value and says how to fix it, and the store is
left exactly as it was (the ingest is one transaction).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pandas as pd
import pytest

from prism.cli import main
from prism.store import Store
from tests.ingest.cli_checks import ingest as _ingest
from tests.ingest.cli_checks import refused as _refused
from tests.ingest.cli_checks import snapshot as _snapshot

JOBS_HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts"
JOBS_ROWS = ("j1,c,vc1,A100,2,8,2026-01-05T00:00:00,2026-01-05T00:10:00\n"
             "j2,c,vc1,A100,4,8,2026-01-05T00:20:00,2026-01-05T00:30:00\n")


def _seeded(folder: Path) -> Path:
    """A store that already holds a job trace, a series and a capacity table."""
    db = folder / "s.duckdb"
    jobs = folder / "seed_jobs.csv"
    jobs.write_text("job_id,cluster,scope,num_gpus,submit_ts,start_ts,end_ts\n"
                    "s1,seed,vc,2,2026-01-05T00:00,2026-01-05T00:00,2026-01-05T03:00\n")
    points = folder / "seed_points.csv"
    points.write_text("series_id,ts,value\n" + "".join(
        f"lab/all/gpus_in_use,2026-01-05T00:{10 * k:02d},{k}\n" for k in range(6)))
    capacity = folder / "seed_capacity.csv"
    capacity.write_text("cluster,scope,gpus\nlab,all,16\n")
    for path, fmt in ((jobs, "jobs-csv"), (points, "long-csv"), (capacity, "capacity-csv")):
        assert _ingest(db, path, fmt) == 0
    return db


# -- 1. a job trace without end times -------------------------------------------------------
def _jobs_without_end(folder: Path, kind: str) -> Path:
    if kind == "parquet":
        path = folder / "jobs.parquet"
        frame = pd.read_csv(io.StringIO(JOBS_HEADER + "\n" + JOBS_ROWS),
                            parse_dates=["submit_ts", "start_ts"])
        frame.to_parquet(path, index=False)
        return path
    path = folder / "jobs.csv"
    path.write_text(JOBS_HEADER + "\n" + JOBS_ROWS)
    return path


@pytest.mark.parametrize(("kind", "extra"), [
    ("csv", ()),                           # DuckDB's own reader would take it
    ("csv", ("--tz", "UTC")),              # the checked reader
    ("csv", ("--on-error", "skip")),       # not a row problem: skip does not help
    ("parquet", ()),
])
def test_a_job_file_without_end_ts_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
        extra: tuple[str, ...]) -> None:
    db = _seeded(tmp_path)
    path = _jobs_without_end(tmp_path, kind)
    err = _refused(db, path, "jobs-csv", capsys, *extra)
    where = f"{path}, line 1," if kind == "csv" else f"{path},"
    assert f"error: {where} column 'end_ts': no end time column 'end_ts'" in err
    assert "running for ever" in err
    assert "add the column 'end_ts'" in err and "--option open_jobs=running" in err


def test_a_mapped_end_column_that_is_missing_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _seeded(tmp_path)
    path = _jobs_without_end(tmp_path, "csv")
    err = _refused(db, path, "jobs-csv", capsys, "--map", "end_ts=finished")
    assert f"{path}, line 1, column 'finished': no end time column 'finished'" in err


def test_open_jobs_running_ingests_as_before_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = _seeded(tmp_path)
    path = _jobs_without_end(tmp_path, "csv")
    with caplog.at_level(logging.WARNING, logger="prism.ingest"):
        assert _ingest(db, path, "jobs-csv", "--option", "open_jobs=running") == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned  # once, whichever readers the file went through
    assert str(path) in warned[0] and "no end time column 'end_ts'" in warned[0]
    assert "running from its start to the end of the trace" in warned[0]
    assert "GPUs in use include jobs that have ended" in warned[0]
    # the same as a file whose end_ts column is there but empty (jobs still running)
    empty = tmp_path / "empty_end.csv"
    empty.write_text(JOBS_HEADER + ",end_ts\n" + JOBS_ROWS.replace("\n", ",\n"))
    other = tmp_path / "other.duckdb"
    assert _ingest(other, empty, "jobs-csv") == 0
    query = "SELECT * EXCLUDE (ingest_id) FROM jobs WHERE cluster = 'c' ORDER BY job_id"
    with Store.open(db) as store, Store.open(other) as reference:
        got = store.fetch_all(query)
        assert got == reference.fetch_all(query) and len(got) == 2
        assert all(row[9] is None for row in got)  # end_ts: still running
        assert store.fetch_all("SELECT * FROM series_values WHERE cluster = 'c' ORDER BY ALL"
                               ) == reference.fetch_all(
            "SELECT * FROM series_values ORDER BY ALL")


def test_open_jobs_running_warns_once_when_a_row_is_rejected(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path, "jobs.csv", JOBS_HEADER + "\n" + JOBS_ROWS
                  + "j3,c,vc1,A100,-1,8,2026-01-05T00:40:00,2026-01-05T00:50:00\n")
    db = tmp_path / "s.duckdb"
    with caplog.at_level(logging.WARNING, logger="prism.ingest"):
        assert _ingest(db, path, "jobs-csv", "--option", "open_jobs=running",
                       "--on-error", "skip") == 0
    assert [r.levelno for r in caplog.records].count(logging.WARNING) == 1
    with Store.open(db) as store:
        assert store.fetch_all("SELECT job_id FROM jobs ORDER BY 1") == [("j1",), ("j2",)]
        assert store.fetch_all("SELECT line, column_name FROM rejects") == [(4, "num_gpus")]


def test_empty_end_times_stay_allowed(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(JOBS_HEADER + ",end_ts\n"
                    "j1,c,vc1,A100,2,8,2026-01-05T00:00:00,2026-01-05T00:10:00,"
                    "2026-01-05T01:00:00\n"
                    "j2,c,vc1,A100,4,8,2026-01-05T00:20:00,2026-01-05T00:30:00,\n")
    db = tmp_path / "s.duckdb"
    assert _ingest(db, path, "jobs-csv") == 0
    with Store.open(db) as store:
        assert store.fetch_all("SELECT job_id, end_ts IS NULL FROM jobs ORDER BY 1") == [
            ("j1", False), ("j2", True)]


def test_open_jobs_takes_only_running(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = _seeded(tmp_path)
    path = _jobs_without_end(tmp_path, "csv")
    err = _refused(db, path, "jobs-csv", capsys, "--option", "open_jobs=finished")
    assert "--option open_jobs='finished': jobs-csv takes open_jobs=running" in err


# -- 2. values outside their metric's range ---------------------------------------------------
def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


LONG = "series_id,ts,value\n"
WIDE = "time,gpus_in_use,gpu_util\n"
HELIOS = "time,running_gpu_num,pending_gpu_num,total_gpu_num\n"
PODS = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,12000,16384,1,1000,,LS,Running,10000000,12537496,10000000\n")


def _pod(cpu: str = "6000", memory: str = "12288", num_gpu: str = "1",
         milli: str = "460") -> str:
    return f"p1,{cpu},{memory},{num_gpu},{milli},,LS,Running,10427061,12902960,10427061\n"


#: (format, file name, content, extra arguments, line, column, value, words of the range)
RANGE_CASES = [
    ("long-csv", "long.csv", LONG + "c/vc1/gpus_in_use,2026-01-05T00:00,3\n"
     "c/vc1/gpus_in_use,2026-01-05T00:10,-2\n", (), 3, "value", "-2",
     "gpus_in_use is negative (valid range: >= 0)"),
    ("long-csv", "long.csv", LONG + "c/all/gpu_util,2026-01-05T00:00,0.5\n"
     "c/all/gpu_util,2026-01-05T00:10,1.5\n", (), 3, "value", "1.5",
     "gpu_util is outside its valid range 0..1"),
    ("long-csv", "long.csv", LONG + "c/all/gpu_util,2026-01-05T00:00,-0.1\n", (), 2, "value",
     "-0.1", "gpu_util is outside its valid range 0..1"),
    ("long-csv", "long.csv", LONG + "c/all/jobs_submitted,2026-01-05T00:00,-1\n", (), 2,
     "value", "-1", "jobs_submitted is negative (valid range: >= 0)"),
    ("wide-csv", "wide.csv", WIDE + "2026-01-05T00:00,4,0.5\n2026-01-05T00:10,-4,0.5\n",
     ("--cluster", "c"), 3, "gpus_in_use", "-4", "gpus_in_use is negative (valid range: >= 0)"),
    ("wide-csv", "wide.csv", WIDE + "2026-01-05T00:00,4,0.5\n2026-01-05T00:10,4,1.5\n",
     ("--cluster", "c"), 3, "gpu_util", "1.5", "gpu_util is outside its valid range 0..1"),
    ("helios-vc", "earth_vc1_1min.csv", HELIOS + "2020-05-01 00:00:00,162,0,208\n"
     "2020-05-01 00:01:00,160,-2,208\n", (), 3, "pending_gpu_num", "-2",
     "gpus_pending is negative (valid range: >= 0)"),
    ("helios-vc", "earth_vc1_1min.csv", HELIOS + "2020-05-01 00:00:00,-162,0,208\n", (), 2,
     "running_gpu_num", "-162", "gpus_in_use is negative (valid range: >= 0)"),
    ("alibaba-pods", "pods.csv", PODS + _pod(cpu="-6000"), (), 3, "cpu_milli", "-6000",
     "cpu_milli is negative (valid range: >= 0)"),
    ("alibaba-pods", "pods.csv", PODS + _pod(memory="-1"), (), 3, "memory_mib", "-1",
     "memory_mib is negative (valid range: >= 0)"),
    ("alibaba-pods", "pods.csv", PODS + _pod(num_gpu="2", milli="-5"), (), 3, "gpu_milli",
     "-5", "gpu_milli is negative (valid range: >= 0)"),
    ("alibaba-pods", "pods.csv", PODS + _pod(num_gpu="-2"), (), 3, "num_gpus", "-2",
     "GPU count is negative"),
]


@pytest.mark.parametrize(("fmt", "name", "text", "extra", "line", "column", "value", "words"),
                         RANGE_CASES, ids=[f"{c[0]}:{c[5]}:{c[6]}" for c in RANGE_CASES])
def test_a_value_outside_its_range_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str, text: str,
        extra: tuple[str, ...], line: int, column: str, value: str, words: str) -> None:
    db = _seeded(tmp_path)
    path = _write(tmp_path, name, text)
    err = _refused(db, path, fmt, capsys, *extra)
    assert f"error: {path}, line {line}, column '{column}': {words}" in err
    assert f"(value {value!r})" in err
    assert "Fix:" in err and "--on-error skip" in err


def test_skip_keeps_the_rows_in_range_and_records_the_other(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "wide.csv", WIDE + "2026-01-05T00:00,4,0.5\n"
                  "2026-01-05T00:10,4,1.5\n2026-01-05T00:20,5,0.25\n")
    db = tmp_path / "s.duckdb"
    assert _ingest(db, path, "wide-csv", "--cluster", "c", "--on-error", "skip") == 0
    assert "rejected line 3 column gpu_util" in capsys.readouterr().out
    with Store.open(db) as store:
        assert store.fetch_all("SELECT line, column_name, raw FROM rejects") == [
            (3, "gpu_util", "1.5")]
        assert store.fetch_all("SELECT series_id, value FROM samples ORDER BY ts, 1") == [
            ("c/all/gpu_util", 0.5), ("c/all/gpus_in_use", 4.0),
            ("c/all/gpu_util", 0.25), ("c/all/gpus_in_use", 5.0)]


def test_values_of_metrics_without_a_unit_and_the_bounds_are_accepted(
        tmp_path: Path) -> None:
    path = _write(tmp_path, "long.csv", LONG + "c/all/temperature_delta,2026-01-05T00:00,-3\n"
                  "c/all/gpu_util,2026-01-05T00:00,0\nc/all/gpu_util,2026-01-05T00:10,1\n"
                  "c/all/gpus_in_use,2026-01-05T00:00,0\n")
    db = tmp_path / "s.duckdb"
    assert _ingest(db, path, "long-csv") == 0
    with Store.open(db) as store:
        assert store.fetch_one("SELECT count(*) FROM samples") == (4,)


# -- 3. the same capacity twice ---------------------------------------------------------------
@pytest.mark.parametrize(("rows", "line", "first"), [
    ("c,vc1,A100,8,\nc,vc2,A100,4,\nc,vc1,A100,16,\n", 4, 2),
    ("c,vc1,,8,2026-02-01\nc,vc1,,8,2026-02-01\n", 3, 2),
    ("c,vc1,A100,8,\nc,vc1,H100,4,\nc,vc1,A100,8,2026-03-01\nc,vc1,H100,2,\n", 5, 3),
])
def test_a_repeated_capacity_row_is_refused_naming_both_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str, line: int,
        first: int) -> None:
    db = _seeded(tmp_path)
    path = _write(tmp_path, "capacity.csv", "cluster,scope,gpu_type,gpus,valid_from\n" + rows)
    err = _refused(db, path, "capacity-csv", capsys)
    assert (f"error: {path}, line {line}, column 'scope': this row repeats line {first}: "
            "same cluster, scope, gpu_type and valid_from") in err
    assert "keep one row per cluster, scope, gpu_type and valid_from" in err


def test_a_repeated_capacity_row_under_skip_keeps_the_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "capacity.csv", "cluster,scope,gpus\nc,vc1,many\nc,vc1,8\n"
                  "c,vc1,16\n")
    db = tmp_path / "s.duckdb"
    assert _ingest(db, path, "capacity-csv", "--on-error", "skip") == 0
    with Store.open(db) as store:  # line 2 is bad on its own: line 3 is the first of the key
        assert store.fetch_all("SELECT scope, gpus FROM capacity") == [("vc1", 8.0)]
        assert store.fetch_all("SELECT line, reason FROM rejects ORDER BY line") == [
            (2, "GPU count is missing or not a number"),
            (4, "this row repeats line 3: same cluster, scope, gpu_type and valid_from")]


def test_capacity_rows_that_differ_in_a_key_column_are_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, "capacity.csv", "cluster,scope,gpu_type,gpus,valid_from\n"
                  "c,vc1,A100,8,\nc,vc1,A100,16,2026-02-01\nc,vc1,H100,4,\nd,vc1,A100,8,\n")
    db = tmp_path / "s.duckdb"
    assert _ingest(db, path, "capacity-csv") == 0
    with Store.open(db) as store:
        assert store.fetch_one("SELECT count(*) FROM capacity") == (4,)


# -- transactions -----------------------------------------------------------------------------
def test_a_bad_file_rolls_back_the_good_files_of_the_same_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _seeded(tmp_path)
    good = _write(tmp_path, "good.csv", LONG + "c/vc1/gpus_in_use,2026-01-05T00:00,3\n")
    bad = _write(tmp_path, "bad.csv", LONG + "c/vc1/gpus_in_use,2026-01-05T00:10,-3\n")
    before = _snapshot(db)
    capsys.readouterr()
    assert main(["--db", str(db), "ingest", str(good), str(bad), "--format", "long-csv",
                 "-q"]) == 1
    assert f"{bad}, line 2, column 'value'" in capsys.readouterr().err
    assert _snapshot(db) == before
    assert _ingest(db, good, "long-csv") == 0  # the good file alone goes in
    with Store.open(db) as store:
        assert store.fetch_one(
            "SELECT count(*) FROM samples WHERE series_id = 'c/vc1/gpus_in_use'") == (1,)
