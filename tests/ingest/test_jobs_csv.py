"""jobs-csv and the pipeline's safety: every kind of bad input, transactions, idempotence."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError, IngestError, PrismError
from prism.ingest import get_adapter
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import ingest
from prism.store import Store

HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"
GOOD = [
    "j1,c,vc1,A100,2,8,2026-01-05T00:00:00,2026-01-05T00:01:00,2026-01-05T03:00:00,COMPLETED",
    "j2,c,vc2,A100,1,4,2026-01-05T00:30:00,2026-01-05T00:31:00,2026-01-05T02:00:00,COMPLETED",
    "j3,c,vc1,H100,8,32,2026-01-05T01:00:00,2026-01-05T01:10:00,,RUNNING",
]


def _write(tmp_path: Path, lines: list[str], name: str = "jobs.csv", header: str = HEADER) -> Path:
    path = tmp_path / name
    path.write_text(header + "\n".join(lines) + "\n")
    return path


def _snapshot(store: Store) -> dict[str, int]:
    tables = ("jobs", "samples", "ingests", "rejects", "series", "series_values", "capacity")
    return {t: store.fetch_one(f"SELECT count(*) FROM {t}")[0] for t in tables}  # type: ignore[index]


# Bad rows of every kind, each format: tests/ingest/test_adapters.py.
def test_skip_stores_rejects_with_reasons_and_keeps_good_rows(store: Store, tmp_path: Path) -> None:
    path = _write(tmp_path, [
        *GOOD,
        "j8,c,vc1,A100,-1,8,2026-01-05T00:00:00,2026-01-05T00:01:00,2026-01-05T01:00:00,DONE",
        "j9,c,vc1,A100,1,8,2026-13-45T00:00:00,2026-01-05T00:01:00,2026-01-05T01:00:00,DONE",
    ])
    report = ingest(store, [path], "jobs-csv", IngestOptions(on_error="skip"))
    assert report.rows == 3 and report.rejected == 2
    rejects = store.fetch_df("SELECT line, column_name, reason, raw FROM rejects ORDER BY line")
    assert rejects["line"].tolist() == [5, 6]
    assert rejects["column_name"].tolist() == ["num_gpus", "submit_ts"]
    assert "negative" in rejects["reason"][0]
    assert rejects["raw"][1] == "2026-13-45T00:00:00"
    assert store.fetch_one("SELECT rejected FROM ingests") == (2,)


def test_unknown_column_fails(store: Store, tmp_path: Path) -> None:
    path = _write(tmp_path, [g + ",x" for g in GOOD], header=HEADER.strip() + ",colour\n")
    with pytest.raises(IngestError, match=r"unknown column\(s\) \['colour'\].*--option ignore"):
        ingest(store, [path], "jobs-csv")
    report = ingest(store, [path], "jobs-csv", IngestOptions(extra={"ignore": "colour"}))
    assert report.rows == 3


def test_missing_required_column_names_it(store: Store, tmp_path: Path) -> None:
    path = _write(tmp_path, ["j1,c,2"], header="job_id,cluster,num_gpus\n")
    with pytest.raises(IngestError, match=r"line 1: missing column\(s\) \['submit_ts'\]"):
        ingest(store, [path], "jobs-csv")


def test_empty_file_and_truncated_gzip(store: Store, tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(IngestError, match="empty.csv: file is empty"):
        ingest(store, [empty], "jobs-csv")
    full = gzip.compress((HEADER + "\n".join(GOOD * 50)).encode())
    truncated = tmp_path / "jobs.csv.gz"
    truncated.write_bytes(full[: len(full) // 2])
    with pytest.raises(IngestError, match="gzip file is truncated or corrupt"):
        ingest(store, [truncated], "jobs-csv")
    assert _snapshot(store)["jobs"] == 0


def test_a_job_ingested_again_is_replaced_by_the_newer_row(store: Store,
                                                           tmp_path: Path) -> None:
    # the newest ingest's row of a job wins (a daily export sees a RUNNING job finish)
    ingest(store, [_write(tmp_path, GOOD)], "jobs-csv")
    before = _snapshot(store)
    again = _write(tmp_path, [GOOD[1].replace("COMPLETED", "FAILED")], name="again.csv")
    report = ingest(store, [again], "jobs-csv")
    assert (report.rows, report.replaced, report.rejected) == (1, 1, 0)
    assert _snapshot(store)["jobs"] == before["jobs"]  # replaced, not added
    state = store.fetch_one("SELECT status FROM jobs WHERE job_id = 'j2'")
    assert state is not None and state[0] == "FAILED"


def test_one_transaction_for_all_files(store: Store, tmp_path: Path) -> None:
    good = _write(tmp_path, GOOD)
    bad = _write(tmp_path, ["x1,d,vc1,A100,1,1,nope,,,PENDING"], name="bad.csv")
    with pytest.raises(IngestError, match="bad.csv"):
        ingest(store, [good, bad], "jobs-csv")
    assert _snapshot(store)["jobs"] == 0 and _snapshot(store)["ingests"] == 0


def test_gzip_and_parquet_read_like_csv(store: Store, tmp_path: Path) -> None:
    plain = _write(tmp_path, GOOD)
    frame = get_adapter("jobs-csv").read(plain, IngestOptions()).rows()
    gz = tmp_path / "jobs.csv.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    pq_path = tmp_path / "jobs.parquet"
    raw = pd.read_csv(plain, parse_dates=["submit_ts", "start_ts", "end_ts"])
    raw.to_parquet(pq_path)
    for other in (gz, pq_path):
        got = get_adapter("jobs-csv").read(other, IngestOptions()).rows()
        cols = ["job_id", "cluster", "scope", "num_gpus", "submit_ts", "start_ts", "end_ts"]
        pd.testing.assert_frame_equal(got[cols], frame[cols], check_dtype=False)


def test_mapping_and_cluster_option(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text("id,gpus,queued,began,done\nx,2,2026-01-05T00:00:00,2026-01-05T00:00:00,"
                    "2026-01-05T02:00:00\n")
    options = IngestOptions(cluster="lab", mapping={"job_id": "id", "num_gpus": "gpus",
                            "submit_ts": "queued", "start_ts": "began", "end_ts": "done"})
    ingest(store, [path], "jobs-csv", options)
    assert store.fetch_all("SELECT cluster, job_id, num_gpus FROM jobs") == [("lab", "x", 2.0)]
    with pytest.raises(IngestError, match="--map names unknown field"):
        ingest(store, [path], "jobs-csv", IngestOptions(mapping={"gpu": "gpus"}))


def test_local_times_converted_with_tz(store: Store, tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD[:1])
    frame = get_adapter("jobs-csv").read(path, IngestOptions(tz="Asia/Shanghai")).rows()
    assert frame.loc[0, "submit_ts"] == pd.Timestamp("2026-01-04T16:00:00")


def test_unknown_format_and_bad_freq(store: Store, tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(ConfigError, match="unknown format 'jobs'.*jobs-csv"):
        ingest(store, [path], "jobs")
    with pytest.raises(ConfigError, match="not a duration"):
        ingest(store, [path], "jobs-csv", freq="ten minutes")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_parser_raises_only_prism_errors(tmp_path: Path, body: bytes) -> None:
    for name in ("any.csv", "any.csv.gz", "any.parquet"):
        path = tmp_path / name
        path.write_bytes(body if not name.endswith(".gz") else gzip.compress(body))
        try:
            get_adapter("jobs-csv").read(path, IngestOptions(cluster="c"))
        except PrismError:
            pass


def test_a_header_after_a_blank_line_that_is_not_utf8_is_an_ingest_error(
        tmp_path: Path) -> None:
    # Found by the property test above: pyarrow takes the header from the first line that is
    # not blank, and names that are not UTF-8 broke its conversion to pandas with a
    # UnicodeDecodeError, no PRISM error (the first line, checked on reading, was blank).
    for body in (b"\n\x80,b\n1,2\n", b'"job\n\xe9tat",b\n1,2\n'):
        path = tmp_path / "latin1.csv"
        path.write_bytes(body)
        with pytest.raises(IngestError, match="header .* is not UTF-8") as info:
            get_adapter("jobs-csv").read(path, IngestOptions(cluster="c"))
        assert "latin1.csv" in str(info.value) and "iconv" in str(info.value)


def test_skip_duplicate_in_clean_file_keeps_first(store: Store, tmp_path: Path) -> None:
    # A file that is clean but for a repeated id takes the Arrow fast path; the SQL check
    # after the insert finds the repeat and, under skip, keeps the first row only.
    repeat = GOOD[0].replace(",2,8,", ",5,8,")
    path = _write(tmp_path, [*GOOD, repeat])
    report = ingest(store, [path], "jobs-csv", IngestOptions(on_error="skip"))
    assert (report.rows, report.rejected) == (3, 1)
    assert store.fetch_all("SELECT num_gpus FROM jobs WHERE job_id = 'j1'") == [(2.0,)]
    assert store.fetch_all("SELECT line, reason FROM rejects") == [
        (5, "job id appears more than once in this file")]
    assert store.fetch_one("SELECT rows, rejected FROM ingests") == (3, 1)


def test_odd_times_are_named_not_crashes(store: Store, tmp_path: Path) -> None:
    far = GOOD[0].replace("j1,", "j7,").replace("2026-01-05T03:00:00", "9999-12-31T00:00:00")
    with pytest.raises(IngestError, match=r"line 5, column 'end_ts': end_ts is out of range "
                                          r"\(PRISM takes years 1970\.\.2099\)"):
        ingest(store, [_write(tmp_path, [*GOOD, far])], "jobs-csv")
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
        ingest(store, [_write(tmp_path, GOOD)], "jobs-csv", IngestOptions(tz="Mars/Olympus"))


def test_blank_lines_keep_line_numbers_and_short_rows_are_located(
    store: Store, tmp_path: Path
) -> None:
    bad = "j9,c,vc1,A100,-1,8,2026-01-05T00:00:00,2026-01-05T00:01:00,2026-01-05T01:00:00,X"
    with pytest.raises(IngestError, match=r"line 7, column 'num_gpus'"):
        ingest(store, [_write(tmp_path, [GOOD[0], "", GOOD[1], "", GOOD[2], bad])], "jobs-csv")
    short = r"line 3: malformed CSV row: expected 10 fields, found 3"
    with pytest.raises(IngestError, match=short):
        ingest(store, [_write(tmp_path, [GOOD[0], "j2,c,vc1", GOOD[2]])], "jobs-csv")
