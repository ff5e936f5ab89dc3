"""Bad input found by QA, the way a user meets it: ``prism ingest`` refuses it with exit code 1,
a message (no traceback) that names the file, line and column and says how to fix it, and
leaves the store exactly as it was.

- a header that names a column twice, in every CSV format;
- local times that a daylight-saving change makes ambiguous or skips (``--tz``);
- a file with a header only; sample times outside 1970..2099; a bucket whose samples add up
  to more than a float holds; ``NaN`` as a value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ingest.cli_checks import ingest as _ingest
from tests.ingest.cli_checks import refused as _refused
from tests.ingest.cli_checks import snapshot as _snapshot


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store that holds a series already."""
    path = tmp_path / "s.duckdb"
    seed = tmp_path / "seed.csv"
    seed.write_text("series_id,ts,value\nlab/all/gpus_in_use,2026-01-05T00:00:00Z,1\n"
                    "lab/all/gpus_in_use,2026-01-05T00:10:00Z,2\n")
    assert _ingest(path, seed, "long-csv") == 0
    return path


# -- B3: a column named twice --------------------------------------------------------------
@pytest.mark.parametrize(("fmt", "text", "column", "fields", "extra"), [
    ("long-csv", "series_id,ts,value,value\nc/all/x,2026-01-01T00:00:00Z,5,6\n", "value",
     (3, 4), ()),
    ("wide-csv", "time,gpus_in_use,gpus_in_use\n2026-01-01T00:00:00,5,6\n", "gpus_in_use",
     (2, 3), ("--cluster", "w")),
    ("capacity-csv", "cluster,scope,gpus,gpus\nc,all,8,8\n", "gpus", (3, 4), ()),
    ("jobs-csv", "job_id,num_gpus,num_gpus,submit_ts,end_ts\n"
     "1,2,2,2026-01-01T00:00:00,2026-01-01T01:00:00\n", "num_gpus", (2, 3),
     ("--cluster", "x")),
    ("jobs-csv", "job_id,num_gpus,num_gpus,submit_ts,end_ts\n"  # the checked reader
     "1,2,2,2026-01-01T00:00:00,2026-01-01T01:00:00\n", "num_gpus", (2, 3),
     ("--cluster", "x", "--tz", "UTC")),
])
def test_a_column_named_twice_is_refused(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, text: str,
        column: str, fields: tuple[int, int], extra: tuple[str, ...]) -> None:
    path = tmp_path / "twice.csv"
    path.write_text(text)
    err = _refused(db, path, fmt, capsys, *extra)
    assert err.startswith(f"error: {path}, line 1, column '{column}': column '{column}' "
                          f"appears twice in the header (fields {fields[0]} and {fields[1]})")
    assert "rename or drop one of the two" in err


# -- B5: local times at a daylight-saving change ----------------------------------------
def test_an_ambiguous_and_a_missing_local_time_are_named(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "paris.csv"
    path.write_text("series_id,ts,value\nc/all/x,2026-10-25 02:10:00,5\n"
                    "c/all/x,2026-03-29 02:10:00,5\n")
    err = _refused(db, path, "long-csv", capsys, "--tz", "Europe/Paris")
    assert err.startswith(
        f"error: {path}, line 2, column 'ts': time is ambiguous in time zone Europe/Paris: the "
        "clocks go back at a daylight-saving change, so this local time happens twice (value "
        "'2026-10-25 02:10:00')")
    assert ("line 3, column 'ts': time does not exist in time zone Europe/Paris: the clocks "
            "skip it at a daylight-saving change (value '2026-03-29 02:10:00')") in err
    assert "2026-10-25T02:10:00+02:00 (the first time) or 2026-10-25T02:10:00+01:00" in err
    assert "e.g. 2026-03-29T02:10:00+01:00" in err and "ingest without --tz" in err
    # the fix works: written with their offsets, the same times are taken
    path.write_text("series_id,ts,value\nc/all/x,2026-10-25T02:10:00+01:00,5\n")
    assert _ingest(db, path, "long-csv", "--tz", "Europe/Paris") == 0


def test_an_ambiguous_submit_time_of_a_job_is_named(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,num_gpus,submit_ts,end_ts\n"
                    "1,2,2026-11-01 01:30:00,2026-11-01 03:00:00\n")
    err = _refused(db, path, "jobs-csv", capsys, "--cluster", "x", "--tz", "America/New_York")
    assert err.startswith(f"error: {path}, line 2, column 'submit_ts': submit_ts is ambiguous "
                          "in time zone America/New_York")
    assert "out of range" not in err
    assert "2026-11-01T01:30:00-04:00 (the first time) or 2026-11-01T01:30:00-05:00" in err


# -- B10: empty files, far times, overflowing buckets, NaN -----------------------------------
@pytest.mark.parametrize(("fmt", "header", "extra"), [
    ("long-csv", "series_id,ts,value", ()),
    ("jobs-csv", "job_id,cluster,num_gpus,submit_ts,end_ts", ()),
    ("wide-csv", "time,gpus_in_use", ("--cluster", "w")),
])
def test_a_file_with_a_header_only_is_refused(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, header: str,
        extra: tuple[str, ...]) -> None:
    path = tmp_path / "header.csv"
    path.write_text(header + "\n")
    err = _refused(db, path, fmt, capsys, *extra)
    assert err.startswith(f"error: {path}: no rows to ingest: the file has a header only")


@pytest.mark.parametrize(("fmt", "text", "column", "extra"), [
    ("long-csv", "series_id,ts,value\nc/all/x,2150-01-01 00:00:00,5\n", "ts", ()),
    ("long-csv", "series_id,ts,value\nc/all/x,1969-12-31T23:00:00Z,5\n", "ts", ()),
    ("wide-csv", "time,gpus_in_use\n2150-01-01 00:00:00,5\n", "time", ("--cluster", "w")),
])
def test_sample_times_outside_the_years_prism_takes_are_refused(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, text: str,
        column: str, extra: tuple[str, ...]) -> None:
    path = tmp_path / "far.csv"
    path.write_text(text)
    err = _refused(db, path, fmt, capsys, *extra)
    assert err.startswith(f"error: {path}, line 2, column '{column}': time is out of range "
                          "(PRISM takes years 1970..2099)")


def test_a_bucket_too_large_for_a_float_is_refused(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "huge.csv"
    path.write_text("series_id,ts,value\nc/all/jobs_submitted,2026-01-01T00:00:00Z,1e308\n"
                    "c/all/jobs_submitted,2026-01-01T00:01:00Z,1e308\n")
    err = _refused(db, path, "long-csv", capsys)
    assert ("series 'c/all/jobs_submitted': the values of the bucket at 2026-01-01 00:00:00 "
            f"add up to inf (too large a number), from {path}") in err


def test_nan_is_quoted_like_any_value_that_is_not_a_number(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nan.csv"
    path.write_text("series_id,ts,value\nc/all/x,2026-01-01T00:00:00Z,NaN\n")
    err = _refused(db, path, "long-csv", capsys)
    assert err.startswith(f"error: {path}, line 2, column 'value': value is missing or not a "
                          "number (value 'NaN')")


def test_an_empty_time_zone_is_named_not_a_traceback(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(db)
    wide = tmp_path / "w.csv"
    wide.write_text("time,gpus_in_use\n2026-01-05 00:00:00,1\n")
    assert _ingest(db, wide, "wide-csv", "--cluster", "wq", "--time-col", "time",
                   "--tz", "") == 1
    assert "unknown time zone '' (an empty name)" in capsys.readouterr().err
    assert _snapshot(db) == before
