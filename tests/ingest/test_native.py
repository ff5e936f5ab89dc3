"""The DuckDB-reader fast path of jobs-csv: the same rows as the checked reader, or a fallback.

Clean files are read by DuckDB itself and checked in SQL afterwards; every test here compares
that with ``ingest(..., native=False)`` (Arrow chunks or the checked reader) on the same file.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prism import store_scan
from prism.errors import FileScanError, IngestError
from prism.ingest.base import MISSING_VALUES, IngestOptions
from prism.ingest.pipeline import ingest
from prism.schema import FileScan
from prism.store import Store

HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"
ROWS = [
    "j1,c,vc1,A100,2,8,2026-01-05T00:00:00,2026-01-05T00:01:00,2026-01-05T03:00:00,COMPLETED",
    "j2,c,,A100,0.5,4,2026-01-05T00:30:00.250,2026-01-05T00:31:00,2026-01-05T02:00:00,DONE",
    'j3,c,vc1,H100,8,,2026-01-05 01:00:00,2026-01-05T01:10:00,,"RUNNING, late"',
    "j4,c,vc2,,1,1,2026-01-05T03:00:00,,,PENDING",
]


def _jobs(store: Store) -> pd.DataFrame:
    return store.fetch_df("SELECT * EXCLUDE (ingest_id) FROM jobs ORDER BY cluster, job_id")


def _both(tmp_path: Path, path: Path, options: IngestOptions | None = None
          ) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The jobs table after a native and after a checked ingest of ``path``, and the reader
    the native run used."""
    fast, slow = Store.open(tmp_path / "fast.duckdb"), Store.open(tmp_path / "slow.duckdb")
    with fast, slow:
        report = ingest(fast, [path], "jobs-csv", options)
        ingest(slow, [path], "jobs-csv", options, native=False)
        assert fast.fetch_df("SELECT * FROM series_values ORDER BY series_id, ts").equals(
            slow.fetch_df("SELECT * FROM series_values ORDER BY series_id, ts"))
        return _jobs(fast), _jobs(slow), report.files[0].reader


def test_clean_csv_is_read_by_duckdb_with_the_same_rows(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "\n".join(ROWS) + "\n")
    fast, slow, reader = _both(tmp_path, path)
    assert reader == "duckdb"
    pd.testing.assert_frame_equal(fast, slow)
    # empty fields are NULL, the quoted comma stays, fractions of a second are kept
    j2, j3 = fast.set_index("job_id").loc["j2"], fast.set_index("job_id").loc["j3"]
    assert pd.isna(j2["scope"]) and j2["submit_ts"] == pd.Timestamp("2026-01-05T00:30:00.250")
    assert pd.isna(j3["num_cpus"]) and pd.isna(j3["end_ts"]) and j3["status"] == "RUNNING, late"


def test_zone_suffixes_become_utc_on_both_paths(tmp_path: Path) -> None:
    path = tmp_path / "zoned.csv"
    path.write_text(HEADER + "z1,c,vc1,A100,1,1,2026-01-05T02:00:00+02:00,"
                    "2026-01-05T00:30:00Z,2026-01-05T01:00:00-01:00,DONE\n")
    fast, slow, reader = _both(tmp_path, path)
    assert reader == "duckdb"
    pd.testing.assert_frame_equal(fast, slow)
    assert fast.loc[0, "submit_ts"] == pd.Timestamp("2026-01-05T00:00:00")
    assert fast.loc[0, "end_ts"] == pd.Timestamp("2026-01-05T02:00:00")


def test_naive_times_are_utc_whatever_the_connection_time_zone(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + ROWS[0] + "\n")
    conn = duckdb.connect(str(tmp_path / "tz.duckdb"))
    conn.execute("SET TimeZone = 'Asia/Shanghai'")
    store = Store(conn)
    report = ingest(store, [path], "jobs-csv")
    assert report.files[0].reader == "duckdb"
    assert store.fetch_one("SELECT submit_ts FROM jobs") == (
        pd.Timestamp("2026-01-05T00:00:00").to_pydatetime(),)
    store.close()


def test_gzip_parquet_mapping_ignore_and_cluster_option(tmp_path: Path) -> None:
    plain = tmp_path / "jobs.csv"
    plain.write_text(HEADER + "\n".join(ROWS) + "\n")
    gz = tmp_path / "jobs.csv.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    fast, slow, reader = _both(tmp_path, gz)
    assert reader == "duckdb"
    pd.testing.assert_frame_equal(fast, slow)

    frame = pd.read_csv(plain, dtype={"scope": "string", "gpu_type": "string"})
    frame = frame.rename(columns={"job_id": "id", "num_gpus": "gpus"}).assign(colour="red")
    frame["submit_ts"] = pd.to_datetime(frame["submit_ts"], format="ISO8601").dt.tz_localize(
        "Europe/Paris")  # a zone-aware Parquet column: stored as UTC
    for col in ("start_ts", "end_ts"):
        frame[col] = pd.to_datetime(frame[col], format="ISO8601")
    parquet = tmp_path / "jobs.parquet"
    frame.drop(columns="cluster").to_parquet(parquet)
    options = IngestOptions(cluster="lab", mapping={"job_id": "id", "num_gpus": "gpus"},
                            extra={"ignore": "colour"})
    (tmp_path / "pq").mkdir()
    fast_pq, slow_pq, reader = _both(tmp_path / "pq", parquet, options)
    assert reader == "duckdb"
    pd.testing.assert_frame_equal(fast_pq, slow_pq)
    assert set(fast_pq["cluster"]) == {"lab"}
    assert fast_pq.loc[0, "submit_ts"] == pd.Timestamp("2026-01-04T23:00:00")  # Paris is +1


@pytest.mark.parametrize(
    ("bad", "reader"),
    [
        ("j9,c,vc1,A100,-1,8,2026-01-05T00:00:00,,,PENDING", "checked"),  # fails a check
        ("j9,c,vc1,A100,1,8,soon,,,PENDING", "checked"),  # a time that does not parse
        ("j1,c,vc1,A100,1,8,2026-01-05T00:00:00,,,PENDING", "checked"),  # repeated job id
    ],
)
def test_a_bad_row_falls_back_to_the_reader_that_names_it(
    tmp_path: Path, bad: str, reader: str
) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "\n".join([*ROWS, bad]) + "\n")
    with Store.open(tmp_path / "s.duckdb") as store:
        with pytest.raises(IngestError, match="line 6"):
            ingest(store, [path], "jobs-csv")
        assert store.fetch_one("SELECT count(*) FROM jobs") == (0,)
        report = ingest(store, [path], "jobs-csv", IngestOptions(on_error="skip"))
        assert (report.rows, report.rejected, report.files[0].reader) == (4, 1, reader)
        assert store.fetch_all("SELECT line FROM rejects") == [(6,)]


def test_a_duckdb_error_rolls_the_run_back_and_reads_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text(HEADER + "\n".join(ROWS) + "\n")
    second.write_text(HEADER + "\n".join(r.replace(",c,", ",d,") for r in ROWS) + "\n")
    real = Store.insert_file
    calls: list[Path] = []

    def second_fails(store: Store, table: str, scan: FileScan, *args: object,
                     **kwargs: object) -> int:
        calls.append(scan.path)
        if scan.path == second:  # a real DuckDB error: it aborts the open transaction
            with pytest.raises(duckdb.Error):
                store.execute("SELECT 'x'::INTEGER")
            raise FileScanError(f"{scan.path}: simulated")
        return real(store, table, scan, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "insert_file", second_fails)
    with Store.open(tmp_path / "s.duckdb") as store:
        report = ingest(store, [first, second], "jobs-csv")
        assert calls == [first, second]  # the first file was inserted, then rolled back
        assert [f.rows for f in report.files] == [4, 4]
        assert "duckdb" not in [f.reader for f in report.files]
        assert store.fetch_all("SELECT cluster, count(*) FROM jobs GROUP BY 1 ORDER BY 1") == [
            ("c", 4), ("d", 4)]
        assert store.fetch_one("SELECT count(*) FROM ingests") == (2,)


def test_a_value_that_does_not_parse_is_found_without_aborting(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text(HEADER + "\n".join(ROWS) + "\n")
    bad.write_text(HEADER + "x1,d,vc1,A100,1,1,2026-01-05T00:00:00,,,PENDING\n"
                   "x2,d,vc1,A100,one,1,2026-01-05T00:00:00,,,PENDING\n")
    with Store.open(tmp_path / "s.duckdb") as store:
        report = ingest(store, [good, bad], "jobs-csv", IngestOptions(on_error="skip"))
        assert [(f.rows, f.rejected, f.reader) for f in report.files] == [
            (4, 0, "duckdb"), (1, 1, "checked")]
        assert store.fetch_all("SELECT line, column_name FROM rejects") == [(3, "num_gpus")]


def test_inside_an_open_transaction_duckdb_reader_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "\n".join(ROWS) + "\n")
    with Store.open(tmp_path / "s.duckdb") as store, store.transaction():
        report = ingest(store, [path], "jobs-csv")
        assert report.rows == 4 and report.files[0].reader != "duckdb"


def test_progress_reports_rows(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "\n".join(ROWS) + "\n")
    calls: list[tuple[str, int, int]] = []
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest(store, [path], "jobs-csv", progress=lambda *c: calls.append(c))
    rows = [c for c in calls if c[0] == "rows"]
    assert rows and rows[-1] == ("rows", 4, 4)
    assert [c[0] for c in calls if c[0] != "rows"] == ["read", "write", "derive"]


# A valid row in several spellings, and the ways one of its fields can go wrong.
_SPELL = ["{}", "{}Z", "{}.5", "{}+00:00"]
_ODD = {
    "cluster": ["", "NA"], "scope": ["", " vc2", '"a,b"', "NA", "N/A", "null", "None", "-"],
    "gpu_type": ["", "N/A", "NULL", '"NA"', "n/a"],
    "num_gpus": ["-1", "", "two", "1e3", "inf", "nan", " 3", "0", "NA"],
    "num_cpus": ["", "x", "NA", "N/A", "NaN"],
    "submit_ts": ["", "soon", "9999-01-01T00:00:00", "2026-01-05", "NA",
                  "2026-01-05T00:00:00+00:00:00"],
    "start_ts": ["", "1969-12-31T00:00:00", "2026-01-04T00:00:00", "null"],
    "end_ts": ["", "2026-01-05T00:30:00", "2026-01-05 02:00:00+02:00", "N/A"],
    "status": ["", '"a, b"', "NA"],
}


@st.composite
def _row(draw: st.DrawFn) -> list[str]:
    spell = draw(st.sampled_from(_SPELL))
    hours = sorted(draw(st.lists(st.integers(0, 23), min_size=3, max_size=3)))
    times = [spell.format(f"2026-01-05T{h:02d}:00:00") for h in hours]
    row = {"cluster": draw(st.sampled_from(["c", "d"])), "scope": "vc1", "gpu_type": "A100",
           "num_gpus": draw(st.sampled_from(["1", "2", "0.5", "8"])), "num_cpus": "4",
           "submit_ts": times[0], "start_ts": times[1], "end_ts": times[2], "status": "OK"}
    if draw(st.integers(0, 3)) == 0:  # one row in four has an odd field
        field = draw(st.sampled_from(sorted(_ODD)))
        row[field] = draw(st.sampled_from(_ODD[field]))
    return [draw(st.sampled_from(["fresh"] * 6 + ["j0", "", "NA"])), *row.values()]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(rows=st.lists(_row(), min_size=1, max_size=6))
@example(rows=[["j0", "c", "vc1", "A100", "1", "x", *["2026-01-05T00:00:00"] * 3, "OK"]])
@example(rows=[["j0", "c", "vc1", "A100", "1", "inf", *["2026-01-05T00:00:00"] * 3, "OK"]])
def test_duckdb_reader_and_checked_reader_agree_on_any_rows(
    rows: list[list[str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    lines = [",".join([f"j{i}" if r[0] == "fresh" else r[0], *r[1:]])
             for i, r in enumerate(rows)]
    path = tmp_path_factory.mktemp("any") / "jobs.csv"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    for on_error in ("fail", "skip"):
        results = []
        for native in (True, False):
            with Store.open(":memory:") as store:
                try:
                    ingest(store, [path], "jobs-csv", IngestOptions(on_error=on_error),
                           native=native)
                except IngestError as exc:
                    results.append(str(exc))
                    continue
                jobs = _jobs(store)
                results.append((jobs.astype(object).where(jobs.notna(), None).to_dict(
                    "list"), store.fetch_all(
                    "SELECT line, column_name, reason FROM rejects ORDER BY line")))
        assert results[0] == results[1], (on_error, lines)


def test_both_readers_share_one_list_of_missing_values() -> None:
    assert store_scan.MISSING_VALUES == MISSING_VALUES


@pytest.mark.parametrize("missing", [*MISSING_VALUES, '"NA"', "None", "-"])
def test_a_missing_value_spelling_gives_the_same_rows_on_both_readers(
    tmp_path: Path, missing: str
) -> None:
    # NA, N/A, null... are missing on both readers (a scope NA is no scope, an end time N/A
    # still running); None and - are names on both.
    name = missing if missing in ("None", "-") else None
    other = "" if name else missing  # number and time fields: a name is not a number
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + f"j1,c,{missing},{missing},2,{other},2026-01-05T00:00:00,"
                    f"2026-01-05T00:10:00,{other},{missing}\n")
    fast, slow, reader = _both(tmp_path, path)
    assert reader == "duckdb"
    pd.testing.assert_frame_equal(fast, slow)
    assert fast.loc[0, ["scope", "gpu_type", "status"]].tolist() == [name] * 3
    assert pd.isna(fast.loc[0, "end_ts"]) and pd.isna(fast.loc[0, "num_cpus"])


def test_j9_scope_na_is_unassigned_with_or_without_a_bad_row(tmp_path: Path) -> None:
    row = "{},c1,{},{},{},1,2024-03-01T10:00:00Z,2024-03-01T10:00:00Z,2024-03-01T11:00:00Z,OK"
    path = tmp_path / "j9.csv"
    path.write_text(HEADER + "\n".join([row.format("j0", "a", "A100", 1),
                                        row.format("j2", "NA", "N/A", 2)]) + "\n")
    bad = tmp_path / "j10.csv"
    bad.write_text(path.read_text() + row.format("j3", "a", "A100", "x") + "\n")
    wanted = {"c1/unassigned/gpus_in_use", "c1/gpu:unknown/gpus_in_use"}
    for file, options in ((path, None), (path, IngestOptions(tz="UTC")),
                          (bad, IngestOptions(on_error="skip"))):
        with Store.open(":memory:") as store:
            ingest(store, [file], "jobs-csv", options)
            ids = {r[0] for r in store.fetch_all("SELECT series_id FROM series")}
            assert wanted <= ids and not any("NA" in i or "N_A" in i for i in ids), ids


def test_an_offset_with_seconds_is_refused_by_both_readers(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "j1,c,vc1,A100,1,1,2024-03-01T10:30:00+00:00:00,,,OK\n")
    messages = []
    for native in (True, False):
        with Store.open(":memory:") as store, pytest.raises(IngestError) as info:
            ingest(store, [path], "jobs-csv", native=native)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "line 2, column 'submit_ts': submit_ts is not a time" in messages[0]


def test_spellings_only_the_duckdb_reader_takes_are_read_right(tmp_path: Path) -> None:
    # Documented leniencies: the checked reader refuses these, DuckDB's reads them correctly.
    path = tmp_path / "lenient.csv"
    path.write_text(HEADER + "\n".join([
        "a,c,vc1,A100,1_000,1,2026-01-05T00:00:00 Europe/Paris,,,OK",
        "b,c,vc1,A100,1,1,2026-01-05T24:00:00,,,OK",
        "d,c,vc1,A100,1,1,2026-01-05T03:00:00 UTC,,,OK",
    ]) + "\n")
    with Store.open(tmp_path / "s.duckdb") as store:
        report = ingest(store, [path], "jobs-csv")
        assert report.files[0].reader == "duckdb"
        assert store.fetch_all("SELECT job_id, num_gpus, submit_ts FROM jobs ORDER BY 1") == [
            ("a", 1000.0, pd.Timestamp("2026-01-04T23:00:00").to_pydatetime()),
            ("b", 1.0, pd.Timestamp("2026-01-06T00:00:00").to_pydatetime()),
            ("d", 1.0, pd.Timestamp("2026-01-05T03:00:00").to_pydatetime()),
        ]
    with Store.open(tmp_path / "t.duckdb") as store, pytest.raises(IngestError, match="line 2"):
        ingest(store, [path], "jobs-csv", native=False)


def test_a_repeat_within_a_file_of_a_run_is_named_and_across_files_the_later_wins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Repeats are looked for once, after all files (each file has replaced the rows earlier
    # files held of its jobs); on a repeat left, within one file, the run is written again
    # with a check per file, which names the file and line.
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text(HEADER + "\n".join(ROWS) + "\n")
    second.write_text(HEADER + "\n".join([ROWS[0].replace("j1,", "k1,"), ROWS[2]]) + "\n")
    with Store.open(tmp_path / "s.duckdb") as store:
        report = ingest(store, [first, second], "jobs-csv")
        assert [(f.rows, f.replaced + f.same) for f in report.files] == [(4, 0), (2, 1)]
        assert store.fetch_one("SELECT count(*) FROM jobs") == (5,)
    twice = tmp_path / "twice.csv"
    twice.write_text(HEADER + "\n".join([ROWS[0].replace("j1,", "m1,"),
                                          ROWS[0].replace("j1,", "m1,")]) + "\n")
    with Store.open(tmp_path / "u.duckdb") as store:
        with caplog.at_level("INFO", logger="prism.ingest.pipeline"), pytest.raises(
                IngestError, match=r"twice.csv, line 3, column 'job_id': job id appears more "
                                   r"than once in this file"):
            ingest(store, [first, twice], "jobs-csv")
        assert "writing the files again with a check per file" in caplog.text
        assert store.fetch_one("SELECT count(*) FROM jobs") == (0,)
        report = ingest(store, [first, twice], "jobs-csv", IngestOptions(on_error="skip"))
        assert [(f.rows, f.rejected) for f in report.files] == [(4, 0), (1, 1)]
        assert store.fetch_all("SELECT path, line FROM rejects") == [(str(twice), 3)]
    caplog.clear()
    with Store.open(tmp_path / "t.duckdb") as store, caplog.at_level("INFO"):
        clean = ingest(store, [first, tmp_path / "first.csv"], "jobs-csv")  # same file twice
        assert [f.status for f in clean.files] == ["ingested", "unchanged"]
        assert "check per file" not in caplog.text
