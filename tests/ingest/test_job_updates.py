"""Jobs that a later export updates, and what real sacct exports hold (QA pass on daily Slurm
exports): the newest ingest's row of a job wins, ``sacct -S`` windows, requeued attempts,
pending arrays and output that is not ``|``-separated."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism.cli import main
from prism.ingest.pipeline import ingest
from prism.store import Store
from tests.ingest.cli_checks import ingest as _ingest
from tests.ingest.cli_checks import refused as _refused

HEADER = "JobID|Account|Partition|AllocTRES|Submit|Start|End|State"
DAY1 = (
    "700|ml|gpu|cpu=8,gres/gpu=4,node=1|2024-03-01T10:00:00|2024-03-01T10:00:00|"
    "2024-03-01T11:00:00|COMPLETED",
    "701|ml|gpu|cpu=8,gres/gpu=2,node=1|2024-03-01T11:00:00|2024-03-01T11:00:00|Unknown|RUNNING",
)
DAY2 = (
    "701|ml|gpu|cpu=8,gres/gpu=2,node=1|2024-03-01T11:00:00|2024-03-01T11:00:00|"
    "2024-03-01T12:30:00|COMPLETED",
    "702|ml|gpu|cpu=8,gres/gpu=1,node=1|2024-03-01T12:00:00|2024-03-01T12:00:00|"
    "2024-03-01T14:00:00|COMPLETED",
)


def _file(tmp_path: Path, name: str, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / name
    path.write_text("\n".join((header, *rows)) + "\n", encoding="utf-8")
    return path


def _series(db: Path, series_id: str) -> dict[str, float]:
    """``HH:MM`` -> value of one series."""
    with Store.open(db) as store:
        rows = store.fetch_all("SELECT ts, value FROM series_values WHERE series_id = ? "
                               "ORDER BY ts", [series_id])
    return {ts.strftime("%H:%M") if ts.day == 1 else ts.strftime("%d %H:%M"): float(v)
            for ts, v in rows}


def _summary(db: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["--db", str(db), "ingest", *argv]) == 0
    captured = capsys.readouterr()
    return " ".join((captured.out + captured.err).split())


# -- 1. a later export's row of a job replaces the earlier one -----------------------------------
def test_a_daily_export_replaces_the_running_row_of_the_day_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    day1, day2 = _file(tmp_path, "d1.txt", *DAY1), _file(tmp_path, "d2.txt", *DAY2)
    assert _ingest(db, day1, "slurm-sacct") == 0
    out = _summary(db, capsys, str(day2), "--format", "slurm-sacct")
    assert ("1 job(s) replaced the row an earlier ingest stored for the same job id (the "
            "newest ingest wins)") in out
    assert "2 rows added (1 of them replaced stored values)" in out
    in_use = _series(db, "slurm/all/gpus_in_use")
    # 700 (4) until 11:00, 701 (2) from 11:00 to 12:30, 702 (1) from 12:00 to 14:00; the
    # RUNNING row of day 1 would hold 701's GPUs to the end (3 from 12:30)
    assert in_use["10:50"] == 4 and in_use["11:50"] == 2 and in_use["12:20"] == 3
    assert in_use["12:30"] == 1 and in_use["13:50"] == 1
    with Store.open(db) as store:
        assert store.fetch_all("SELECT job_id, status FROM jobs ORDER BY job_id") == [
            ("700", "COMPLETED"), ("701", "COMPLETED"), ("702", "COMPLETED")]


def test_the_same_jobs_in_other_bytes_change_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    day1 = _file(tmp_path, "d1.txt", *DAY1)
    assert _ingest(db, day1, "slurm-sacct") == 0
    series = _series(db, "slurm/all/gpus_in_use")
    copy = tmp_path / "d1_crlf.txt"
    copy.write_bytes(day1.read_bytes().replace(b"\n", b"\r\n"))
    out = _summary(db, capsys, str(copy), "--format", "slurm-sacct")
    assert "2 job(s) already stored with the same row" in out and "replaced" not in out
    assert _series(db, "slurm/all/gpus_in_use") == series
    with Store.open(db) as store:
        assert store.fetch_one("SELECT count(*) FROM jobs") == (2,)


def test_a_changed_jobs_csv_replaces_its_jobs_on_every_reader(tmp_path: Path) -> None:
    header = ("job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,"
              "status\n")
    first = tmp_path / "a.csv"
    first.write_text(header + "j1,c,vc,A100,2,4,2026-01-01T00:00:00,2026-01-01T00:00:00,"
                     "2026-01-01T06:00:00,COMPLETED\nj2,c,vc,A100,1,4,2026-01-01T00:00:00,"
                     "2026-01-01T01:00:00,2026-01-01T06:00:00,COMPLETED\n")
    changed = tmp_path / "b.csv"
    changed.write_text(header + "j2,c,vc,A100,4,4,2026-01-01T00:00:00,2026-01-01T01:00:00,"
                       "2026-01-01T06:00:00,COMPLETED\n")
    for native in (True, False):  # DuckDB's reader, then the Arrow stream
        db = tmp_path / f"s{native}.duckdb"
        with Store.open(db) as store:
            ingest(store, [first], "jobs-csv", native=native)
            report = ingest(store, [changed], "jobs-csv", native=native)
        assert (report.replaced, report.same) == (1, 0)
        assert report.files[0].reader == ("duckdb" if native else "arrow")
        in_use = _series(db, "c/all/gpus_in_use")
        assert in_use["00:50"] == 2 and in_use["01:00"] == 6, native


@pytest.mark.parametrize("native", [True, False])
def test_daily_exports_in_one_run_the_later_file_wins(tmp_path: Path, native: bool) -> None:
    # prism ingest d1.txt d2.txt: as one after the other (samples of one run do the same)
    db = tmp_path / "s.duckdb"
    day1, day2 = _file(tmp_path, "d1.txt", *DAY1), _file(tmp_path, "d2.txt", *DAY2)
    with Store.open(db) as store:
        report = ingest(store, [day1, day2], "slurm-sacct", native=native)
    assert [(f.rows, f.replaced) for f in report.files] == [(2, 0), (2, 1)]
    in_use = _series(db, "slurm/all/gpus_in_use")
    assert in_use["11:50"] == 2 and in_use["12:20"] == 3 and in_use["12:30"] == 1
    with Store.open(db) as store:
        assert store.fetch_all("SELECT job_id, status FROM jobs ORDER BY job_id") == [
            ("700", "COMPLETED"), ("701", "COMPLETED"), ("702", "COMPLETED")]


def test_a_failed_run_leaves_the_replaced_rows_in_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    assert _ingest(db, _file(tmp_path, "d1.txt", *DAY1), "slurm-sacct") == 0
    bad = _file(tmp_path, "d2.txt", *DAY2, "703|ml|gpu|gres/gpu=1|nope|Unknown|Unknown|PENDING")
    err = _refused(db, bad, "slurm-sacct", capsys)  # the store as it was, RUNNING row too
    assert "line 4" in err


# -- 2. sacct -S: the series start where the export is complete ----------------------------------
SINCE = (
    "1000|ml|gpu|cpu=8,gres/gpu=8,node=1|2024-02-26T09:00:00|2024-02-26T09:00:00|Unknown|RUNNING",
    "1001|ml|gpu|cpu=8,gres/gpu=4,node=1|2024-03-01T00:10:00|2024-03-01T00:10:00|"
    "2024-03-01T06:00:00|COMPLETED",
    "1002|ml|gpu|cpu=8,gres/gpu=4,node=1|2024-03-01T06:00:00|2024-03-01T06:00:00|"
    "2024-03-01T12:00:00|COMPLETED",
)


def test_an_export_since_a_date_starts_at_its_earliest_end(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    out = _summary(db, capsys, str(_file(tmp_path, "s8.txt", *SINCE)), "--format",
                   "slurm-sacct")
    assert ("the series start at 2024-03-01 06:00 UTC, the earliest End in the export, not at "
            "its first Submit (2024-02-26 09:00 UTC)") in out
    assert "--option window_start=2024-02-26T09:00:00" in out
    in_use = _series(db, "slurm/all/gpus_in_use")
    assert min(in_use) == "06:00" and set(in_use.values()) == {12.0}


def test_window_start_option_sets_the_start_in_the_files_zone(tmp_path: Path) -> None:
    path = _file(tmp_path, "s8.txt", *SINCE)
    db = tmp_path / "s.duckdb"
    assert _ingest(db, path, "slurm-sacct", "--tz", "Europe/Berlin",
                   "--option", "window_start=2024-03-01T01:00:00") == 0
    in_use = _series(db, "slurm/all/gpus_in_use")  # 01:00 in Berlin is 00:00 UTC
    # (1001 runs from 23:10 UTC the day before; without the option: from 05:00, its end)
    assert min(in_use) == "00:00" and in_use["00:00"] == 12
    bad = tmp_path / "b.duckdb"
    assert _ingest(bad, path, "slurm-sacct", "--option", "window_start=yesterday") == 1


# -- 3. requeued jobs: every attempt held its GPUs -----------------------------------------------
def test_requeued_attempts_are_kept_under_numbered_ids(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(
        tmp_path, "s3.txt",
        "300|ml|gpu|cpu=4,gres/gpu=2,node=1|2024-03-01T10:00:00|2024-03-01T10:00:00|"
        "2024-03-01T10:30:00|REQUEUED",
        "300|ml|gpu|cpu=4,gres/gpu=2,node=1|2024-03-01T10:30:00|2024-03-01T10:40:00|"
        "2024-03-01T11:00:00|COMPLETED",
        "301|ml|gpu|cpu=4,gres/gpu=1,node=1|2024-03-01T09:00:00|2024-03-01T09:00:00|"
        "2024-03-01T12:00:00|COMPLETED")
    db = tmp_path / "s.duckdb"
    out = _summary(db, capsys, str(path), "--format", "slurm-sacct", "--option",
                   "window_start=2024-03-01T09:00:00")
    assert "1 earlier attempt(s) of requeued jobs" in out and "JobID#1" in out
    with Store.open(db) as store:
        assert store.fetch_all("SELECT job_id, status FROM jobs ORDER BY job_id") == [
            ("300", "COMPLETED"), ("300#1", "REQUEUED"), ("301", "COMPLETED")]
    in_use = _series(db, "slurm/all/gpus_in_use")
    pending = _series(db, "slurm/all/gpus_pending")
    assert in_use["10:00"] == 3 and in_use["10:30"] == 1 and in_use["10:40"] == 3
    assert pending["10:30"] == 2 and pending["10:40"] == 0


def test_the_same_record_twice_is_still_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, "cat.txt", *DAY1, DAY2[0])  # two exports concatenated
    err = _refused(tmp_path / "s.duckdb", path, "slurm-sacct", capsys)
    assert "line 4, column 'JobID': job id appears more than once in this file" in err


# -- 4. a pending array line counts each of its tasks --------------------------------------------
def test_a_pending_array_counts_each_task(tmp_path: Path) -> None:
    path = _file(
        tmp_path, "arr.txt",
        "500_[3-5%2]|ml|gpu||cpu=1,gres/gpu=1|2024-03-01T10:00:00|Unknown|Unknown|PENDING",
        "501_[1,3,6-10:2]|ml|gpu||gres/gpu=2|2024-03-01T10:00:00|Unknown|Unknown|PENDING",
        "502|ml|gpu|gres/gpu=1|gres/gpu=1|2024-03-01T09:00:00|2024-03-01T09:00:00|"
        "2024-03-01T12:00:00|COMPLETED",
        header="JobID|Account|Partition|AllocTRES|ReqTRES|Submit|Start|End|State")
    db = tmp_path / "s.duckdb"
    assert _ingest(db, path, "slurm-sacct", "--option",
                   "window_start=2024-03-01T09:00:00") == 0
    with Store.open(db) as store:
        ids = [r[0] for r in store.fetch_all("SELECT job_id FROM jobs ORDER BY job_id")]
    assert ids == ["500_3", "500_4", "500_5", "501_1", "501_10", "501_3", "501_6", "501_8",
                   "502"]
    pending = _series(db, "slurm/all/gpus_pending")
    assert pending["09:50"] == 0 and pending["10:00"] == 3 * 1 + 5 * 2


# -- 5. output that is not '|'-separated ---------------------------------------------------------
@pytest.mark.parametrize(("header", "row", "shape"), [
    ("JobID           Account  Partition  AllocTRES            Submit               Start    "
     "             End      State",
     "400                  ml        gpu billing=8,cpu=8,gres/+ 2024-03-01T10:00:00 "
     "2024-03-01T10:00:00 2024-03-01T11:00:00  COMPLETED", "fixed-width"),
    ("JobID,Account,Partition,AllocTRES,Submit,Start,End,State",
     "300,ml,gpu,cpu=4,gres/gpu=2,node=1,2024-03-01T10:00:00,2024-03-01T10:00:00,"
     "2024-03-01T10:30:00,COMPLETED", "comma-separated"),
])
def test_output_that_is_not_pipe_separated_says_to_export_with_p(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], header: str, row: str,
        shape: str) -> None:
    path = _file(tmp_path, "s.txt", row, header=header)
    err = _refused(tmp_path / "s.duckdb", path, "slurm-sacct", capsys)
    assert f"{path}, line 1: the file is not '|'-separated sacct output" in err
    assert shape in err and "missing column" not in err
    assert "Fix: export with sacct -P (--parsable2) --format=JobID," in err
