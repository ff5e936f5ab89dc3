"""What ingest says when it refuses input (issue #18 item 14), the way a user meets it: the
message names the file, the line and the column, says what the limit is and how to fix it,
and never points at something that does not exist (a server's temporary file, a command).

Also the oracle of the streamed reader's error path: the rows it inserted before a bad block
are deleted before the checked reader stores the file again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prism.cli import main
from prism.errors import ConfigError, IngestError
from prism.hub import ForecastHub
from prism.ingest import base
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import ingest
from prism.store import Store
from prism.usecases.ingest import ingest_upload

HEADER = "job_id,cluster,scope,num_gpus,submit_ts,start_ts,end_ts\n"


def _job(job_id: str, *, gpus: str = "2", submit: str = "2026-01-05T00:00:00",
         start: str = "2026-01-05T00:10:00", end: str = "2026-01-05T03:00:00") -> str:
    return f"{job_id},c,vc,{gpus},{submit},{start},{end}\n"


def _file(folder: Path, name: str, *rows: str) -> Path:
    path = folder / name
    path.write_text(HEADER + "".join(rows), encoding="utf-8")
    return path


def _refused(db: Path, paths: list[Path], capsys: pytest.CaptureFixture[str], *extra: str,
             fmt: str = "jobs-csv") -> str:
    """Ingest: exit code 1, no traceback; the message on one line."""
    capsys.readouterr()
    assert main(["--db", str(db), "ingest", *map(str, paths), "--format", fmt, "-q",
                 *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return " ".join(err.split())


def _jobs(db: Path) -> int:
    with Store.open(db) as store:
        row = store.fetch_one("SELECT count(*) FROM jobs")
    assert row is not None
    return int(row[0])


# -- times out of range --------------------------------------------------------------------------
def test_a_time_in_year_9999_is_out_of_range_not_not_a_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, "jobs.csv", _job("j1"), _job("j2", submit="9999-01-05T00:00:00"))
    err = _refused(tmp_path / "s.duckdb", [path], capsys)
    assert f"{path}, line 3, column 'submit_ts': submit_ts is out of range" in err
    assert "PRISM takes years 1970..2099" in err and "'9999-01-05T00:00:00'" in err
    assert "not a time" not in err
    assert "check the year" in err


def test_a_sample_in_year_9999_is_out_of_range(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "points.csv"
    path.write_text("series_id,ts,value\nc/all/gpus_in_use,2026-01-05T00:00:00,1\n"
                    "c/all/gpus_in_use,9999-01-05T00:00:00,2\n", encoding="utf-8")
    err = _refused(tmp_path / "s.duckdb", [path], capsys, fmt="long-csv")
    assert f"{path}, line 3, column 'ts': time is out of range (PRISM takes years" in err


def test_text_that_is_no_time_is_still_not_a_time(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, "jobs.csv", _job("j1", submit="yesterday"))
    err = _refused(tmp_path / "s.duckdb", [path], capsys)
    assert "line 2, column 'submit_ts': submit_ts is not a time" in err
    assert "out of range" not in err


# -- a span of too many buckets ------------------------------------------------------------------
@pytest.mark.slow
def test_an_end_in_2099_names_file_line_column_and_the_limit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    path = _file(tmp_path, "jobs.csv", _job("j0"), _job("j1", end="2099-01-05T03:00:00"),
                 _job("j2"))
    err = _refused(db, [path], capsys)
    assert f"{path}, line 3, column 'end_ts': end_ts 2099-01-05T03:00:00 (job 'j1')" in err
    assert "3,839,490 buckets of 10min per series, more than the 2,000,000 PRISM derives" in err
    assert "--freq 30min or coarser" in err and "leave an unknown end empty" in err
    assert _jobs(db) == 0
    capsys.readouterr()  # the fix works: at 30min the span fits
    assert main(["--db", str(db), "ingest", str(path), "--format", "jobs-csv", "-q",
                 "--freq", "30min"]) == 0


def test_a_stray_early_time_is_the_one_named(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, "jobs.csv", *(_job(f"j{i}") for i in range(5)),
                 _job("old", submit="1971-01-01T00:00:00"))
    err = _refused(tmp_path / "s.duckdb", [path], capsys, "--freq", "1min")
    assert f"{path}, line 7, column 'submit_ts': submit_ts 1971-01-01T00:00:00 (job 'old')" in err


def test_the_far_time_is_named_by_the_file_s_own_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    helios = tmp_path / "cluster_log.csv"
    helios.write_text("job_id,vc,gpu_num,cpu_num,state,submit_time,start_time,end_time\n"
                      "1,vc1,2,8,COMPLETED,2020-06-09 18:00:00,2020-06-09 19:00:00,"
                      "2099-06-09 20:00:00\n", encoding="utf-8")
    err = _refused(tmp_path / "h.duckdb", [helios], capsys, fmt="helios-jobs")
    assert f"{helios}, line 2, column 'end_time': end_time 2099-06-09T20:00:00 (job '1')" in err
    mapped = tmp_path / "mapped.csv"
    mapped.write_text(HEADER.replace("end_ts", "finished") + _job("j1") + _job(
        "j2", end="2099-01-05T03:00:00"), encoding="utf-8")
    err = _refused(tmp_path / "m.duckdb", [mapped], capsys, "--map", "end_ts=finished")
    assert f"{mapped}, line 3, column 'finished': finished 2099-01-05T03:00:00" in err


# -- several problems in fail mode ---------------------------------------------------------------
def test_fail_mode_lists_up_to_five_problems_each_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    path = _file(tmp_path, "jobs.csv",
                 _job("j1", gpus="-2"),                            # line 2
                 _job("j2"),
                 _job("j3", end="2026-01-04T03:00:00"),            # line 4: end before start
                 _job("j3"),                                       # line 5: repeated id
                 _job("j5", gpus=""),                              # line 6: no GPU count
                 _job("j6", submit=""),                            # line 7: no submit time
                 _job("j7", start="2026-01-04T00:10:00"),          # line 8: start < submit
                 _job("j8", gpus="-1"))                            # line 9: negative again
    err = _refused(db, [path], capsys)
    assert err.startswith(f"error: {path}, line 2, column 'num_gpus': GPU count is negative "
                          "(value '-2'); 2 row(s) in all; also 5 other problem(s) (4 shown): ")
    for where in ("line 4, column 'end_ts': end time is before start time",
                  "line 5, column 'job_id': job id appears more than once in this file",
                  "line 6, column 'num_gpus': GPU count is empty",
                  "line 7, column 'submit_ts': submit time is empty"):
        assert where in err
    assert "line 8" not in err  # the sixth problem is counted, not listed
    assert "GPU counts must be >= 0; check the row's start and end times" in err
    assert err.rstrip().endswith("or pass --on-error skip to store such rows in `rejects`")
    assert _jobs(db) == 0


def test_one_problem_reads_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, "jobs.csv", _job("j1", gpus="-2"), _job("j2"))
    err = _refused(tmp_path / "s.duckdb", [path], capsys)
    assert "GPU count is negative (value '-2'); 1 row(s) in all. Fix: GPU counts" in err
    assert "also" not in err


# -- repeated job ids ----------------------------------------------------------------------------
def test_a_job_in_two_files_of_one_run_counts_as_the_later_file_has_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    first = _file(tmp_path, "a.csv", _job("j1"), _job("j2"))
    second = _file(tmp_path, "b.csv", _job("j3"), _job("j2", gpus="4"))
    assert main(["--db", str(db), "ingest", str(first), str(second), "--format", "jobs-csv",
                 "-q"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 job(s) replaced the row an earlier ingest stored" in out
    assert _jobs(db) == 3


def test_a_repeat_from_an_earlier_ingest_replaces_it_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    first = _file(tmp_path, "a.csv", _job("j1"), _job("j2"))
    assert main(["--db", str(db), "ingest", str(first), "--format", "jobs-csv", "-q"]) == 0
    capsys.readouterr()
    changed = _file(tmp_path, "a2.csv", _job("j2", gpus="4"))
    assert main(["--db", str(db), "ingest", str(changed), "--format", "jobs-csv", "-q"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("1 job(s) replaced the row an earlier ingest stored for the same job id (the "
            "newest ingest wins)") in out


# -- the store -----------------------------------------------------------------------------------
def test_a_damaged_store_is_not_called_locked(tmp_path: Path) -> None:
    real = tmp_path / "real.duckdb"
    with Store.open(real) as store:
        store.execute("CREATE TABLE filler AS SELECT range AS x FROM range(1000)")
    data = real.read_bytes()
    damaged = tmp_path / "damaged.duckdb"  # DuckDB's header, garbage after it
    damaged.write_bytes(data[:12] + b"\xff" * (len(data) - 12))
    with pytest.raises(ConfigError) as caught:
        Store.open(damaged)
    text = str(caught.value)
    assert "not a PRISM/DuckDB store, or a damaged one" in text
    assert "close" not in text and "another process" not in text


def test_a_store_locked_by_another_process_says_so(tmp_path: Path) -> None:
    db = tmp_path / "held.duckdb"
    with Store.open(db):
        pass
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time\nc = duckdb.connect(sys.argv[1])\n"
         "print('ready', flush=True)\ntime.sleep(60)", str(db)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(ConfigError, match="another process holds it") as caught:
            Store.open(db)
        assert "close that process" in str(caught.value)
        assert "not a PRISM/DuckDB store" not in str(caught.value)
    finally:
        holder.kill()
        holder.wait()


# -- uploads -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["jobs-csv", "long-csv"])
def test_a_fake_parquet_upload_names_the_upload_not_a_temporary_file(
        tmp_path: Path, fmt: str) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        hub = ForecastHub(store, models_dir=tmp_path / "models", default_model="naive")
        try:
            with pytest.raises(IngestError) as caught:
                ingest_upload(hub, fmt, files=[("my jobs.parquet", b"PAR1 not really parquet")])
        finally:
            hub.close()
    text = str(caught.value)
    assert text.startswith("my jobs.parquet: not a readable Parquet file")
    assert "source 'my jobs.parquet'" in text
    assert "prism-upload-" not in text and "/tmp" not in text and str(tmp_path) not in text


# -- the streamed reader's error path ------------------------------------------------------------
def _stream_file(folder: Path) -> Path:
    rows = [_job(f"j{i:04d}") for i in range(400)]  # ~70 bytes each
    return _file(folder, "jobs.csv", *rows, _job("bad", submit="yesterday"))


@pytest.mark.parametrize(("on_error", "stored", "rejected"), [("skip", 400, 1), ("fail", 0, 0)])
def test_rows_the_stream_inserted_before_a_bad_block_are_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_error: str, stored: int,
        rejected: int) -> None:
    monkeypatch.setattr(base, "STREAM_BLOCK_BYTES", 4 << 10)  # 4 KiB: ~60 rows a block
    path = _stream_file(tmp_path)
    assert path.stat().st_size > 6 * (4 << 10)  # the bad row is blocks after the first
    streamed: list[int] = []
    insert = Store.insert_frame

    def spy(self: Store, table: str, frame: object, *args: object, **kw: object) -> int:
        rows = insert(self, table, frame, *args, **kw)  # type: ignore[arg-type]
        if table == "jobs":
            streamed.append(rows)
        return rows

    monkeypatch.setattr(Store, "insert_frame", spy)
    options = IngestOptions(on_error="skip" if on_error == "skip" else "fail")
    with Store.open(":memory:") as store:
        if on_error == "skip":
            report = ingest(store, [path], "jobs-csv", options, native=False)
            assert (report.rows, report.rejected) == (400, 1)
            assert report.files[0].reader == "checked"
            assert store.fetch_all("SELECT line, column_name FROM rejects") == [
                (402, "submit_ts")]
        else:
            with pytest.raises(IngestError, match=r"line 402, column 'submit_ts'"):
                ingest(store, [path], "jobs-csv", options, native=False)
        assert store.fetch_one("SELECT count(*) FROM jobs") == (stored,)
        assert store.fetch_one("SELECT count(DISTINCT job_id) FROM jobs") == (stored,)
        assert store.fetch_one("SELECT count(*) FROM rejects") == (rejected,)
    # the stream inserted several blocks before it met the bad row (they were then deleted)
    assert len(streamed) > 3 and sum(streamed[:-1 if on_error == "skip" else None]) > 200


@pytest.mark.parametrize(("sep", "shown"), [(";", "';'"), ("\t", "'\\t'")])
def test_a_file_separated_by_another_character_says_so_and_stores_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], sep: str, shown: str) -> None:
    # a spreadsheet in a locale with decimal commas writes ';' between fields: the header is
    # one column, and "missing series_id, ts, value" alone leaves the user guessing
    path = tmp_path / "samples.csv"
    path.write_text(sep.join(["series_id", "ts", "value"]) + "\n"
                    + sep.join(["lab/all/gpus_in_use", "2026-01-05T00:00:00Z", "3"]) + "\n")
    db = str(tmp_path / "s.duckdb")
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv"]) == 1
    err = capsys.readouterr().err
    assert "samples.csv, line 1: missing column(s)" in err
    assert f"its fields are separated by {shown}, not ','" in err
    assert "Fix: write the file with ',' between fields" in err
    with Store.open(db) as store:
        assert store.list_series().empty
    # a header that is simply other names keeps the --map advice
    path.write_text("a,b\n1,2\n")
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv"]) == 1
    err = capsys.readouterr().err
    assert "separated by" not in err and "--map CANONICAL=COLUMN" in err
