"""CSV files as exports write them: epoch times in long and wide files, columns beyond the
format's, a text column in a wide file, files whose every row is rejected, and the messages of
rows that are not UTF-8 or leave a quote open. Each runs ``prism ingest`` as a user does."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism.store import Store
from tests.ingest.cli_checks import ingest, refused

T0 = 1709287200  # 2024-03-01T10:00:00Z
LONG = "series_id,ts,value\n"
JOBS = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"


def _samples(db: Path) -> list[tuple[str, str, float]]:
    with Store.open(db) as store:
        return [(s, t.isoformat(), v) for s, t, v in store.fetch_all(
            "SELECT series_id, ts, value FROM samples ORDER BY series_id, ts")]


@pytest.mark.parametrize(("unit", "factor"), [("s", 1), ("ms", 1000)])
def test_long_csv_reads_unix_times_with_time_unit(tmp_path: Path, unit: str, factor: int) -> None:
    path = tmp_path / "long.csv"
    path.write_text(LONG + "".join(f"c1/all/gpus_in_use,{(T0 + 300 * i) * factor},{2 * i}\n"
                                   for i in range(3)))
    assert ingest(tmp_path / "s.db", path, "long-csv", "--option", f"time_unit={unit}") == 0
    assert _samples(tmp_path / "s.db") == [
        ("c1/all/gpus_in_use", "2024-03-01T10:00:00", 0.0),
        ("c1/all/gpus_in_use", "2024-03-01T10:05:00", 2.0),
        ("c1/all/gpus_in_use", "2024-03-01T10:10:00", 4.0)]


def test_wide_csv_reads_unix_times_with_time_unit(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text(f"time,gpus_in_use\n{T0}000,3\n{T0 + 600}000,4\n")
    assert ingest(tmp_path / "s.db", path, "wide-csv", "--cluster", "c",
                  "--option", "time_unit=ms") == 0
    assert _samples(tmp_path / "s.db") == [("c/all/gpus_in_use", "2024-03-01T10:00:00", 3.0),
                                           ("c/all/gpus_in_use", "2024-03-01T10:10:00", 4.0)]


@pytest.mark.parametrize(("fmt", "text", "extra"), [
    ("long-csv", LONG + f"c1/all/gpus_in_use,{T0},2\n", ()),
    ("wide-csv", f"time,gpus_in_use\n{T0},2\n", ("--cluster", "c")),
    ("jobs-csv", JOBS + f"j1,c,vc,A100,1,1,{T0},,,OK\n", ()),
])
def test_a_unix_time_without_time_unit_says_to_pass_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, text: str,
    extra: tuple[str, ...]
) -> None:
    path = tmp_path / "epoch.csv"
    path.write_text(text)
    message = refused(tmp_path / "s.db", path, fmt, capsys, *extra)
    assert "line 2" in message and ": a number, not an ISO 8601 time" in message
    assert "pass --option time_unit=s" in message and "--option time_unit=ms" in message


@pytest.mark.parametrize("fmt", ["long-csv", "wide-csv"])
def test_time_unit_takes_the_values_jobs_csv_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    path = tmp_path / "x.csv"
    path.write_text(LONG + f"c1/all/gpus_in_use,{T0},2\n")
    message = refused(tmp_path / "s.db", path, fmt, capsys, "--cluster", "c",
                      "--option", "time_unit=parsecs")
    assert "--option time_unit='parsecs': write time_unit=s or time_unit=ms" in message


def test_long_csv_reads_past_extra_columns_and_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "extra.csv"
    path.write_text("name,ts,value,host,note\n"
                    'c1/all/gpus_in_use,2024-03-01T10:00:00Z,2,n1,"ok, fine"\n'
                    'c1/all/gpus_in_use,2024-03-01T10:10:00Z,4,n1,"a ""quoted"" one"\n')
    db = tmp_path / "s.db"
    code = ingest(db, path, "long-csv", "--map", "series_id=name")
    out = capsys.readouterr().out
    assert code == 0 and out.count("ignored") == 1
    assert "column(s) 'host', 'note' ignored" in out
    assert [v for _, _, v in _samples(db)] == [2.0, 4.0]


def test_wide_csv_refuses_a_text_column_up_front_and_ignore_leaves_it_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.csv"
    path.write_text("time,gpus_in_use,host\n2024-03-01T10:00:00Z,2,n1\n"
                    "2024-03-01T10:10:00Z,3,n1\n")
    db = tmp_path / "s.db"
    for extra in ((), ("--on-error", "skip")):
        message = refused(db, path, "wide-csv", capsys, "--cluster", "c", *extra)
        assert "column 'host' holds no numbers" in message and "'n1'" in message
        assert "--option ignore=host" in message
    assert ingest(db, path, "wide-csv", "--cluster", "c", "--option", "ignore=host") == 0
    assert [s for s, _, _ in _samples(db)] == ["c/all/gpus_in_use"] * 2


@pytest.mark.parametrize(("fmt", "text", "extra"), [
    ("wide-csv", "time,gpus_in_use\n2024-03-01T10:00:00Z,-1\n2024-03-01T10:10:00Z,x\n",
     ("--cluster", "c")),
    ("long-csv", LONG + "c1/all/gpus_in_use,soon,1\nc1/all/gpus_in_use,later,2\n", ()),
    ("jobs-csv", JOBS + "j1,c,vc,A100,x,1,2024-03-01T10:00:00,,,OK\n"
                        "j2,c,vc,A100,-1,1,2024-03-01T10:00:00,,,OK\n", ()),
])
def test_a_file_whose_every_row_is_skipped_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, text: str,
    extra: tuple[str, ...]
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    message = refused(tmp_path / "s.db", path, fmt, capsys, *extra, "--on-error", "skip")
    assert "no rows to ingest: all 2 rows are rejected" in message
    assert "line 2" in message and "pass --on-error skip" not in message


def test_a_line_that_is_not_utf8_is_named_with_its_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(LONG.encode() + b"c1/all/gpus_in_use,2024-03-01T10:00:00Z,1\n"
                     b"c1/all/caf\xe9,2024-03-01T10:10:00Z,2\n")
    message = refused(tmp_path / "s.db", path, "long-csv", capsys)
    assert "line 3: malformed CSV row: the line is not UTF-8 text (byte 0xe9 at position 11" \
        in message
    assert "iconv -f latin1 -t utf-8" in message and "as many fields" not in message


@pytest.mark.parametrize("fmt", ["long-csv", "jobs-csv"])
def test_an_unclosed_quote_names_the_line_that_opens_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    path = tmp_path / "quote.csv"
    if fmt == "long-csv":
        path.write_text(LONG + 'c1/all/gpus_in_use,2024-03-01T10:00:00Z,1\n'
                        'c1/all/gpus_in_use,"2024-03-01T10:10:00Z,1\n'
                        'c1/all/gpus_in_use,2024-03-01T10:20:00Z,2\n')
        field = 2
    else:
        path.write_text(JOBS + "j1,c,vc,A100,1,1,2024-03-01T10:00:00,,,OK\n"
                        'j2,c,"vc,A100,1,1,2024-03-01T10:00:00,,,OK\n')
        field = 3
    message = refused(tmp_path / "s.db", path, fmt, capsys)
    assert (f"line 3: malformed CSV row: a quoted field is not closed: field {field} opens a "
            "quote") in message
    assert "close the quote" in message


def test_a_quoted_line_break_is_not_a_malformed_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a field holding a line break is fine; the short row after it is the one named
    path = tmp_path / "nl.csv"
    path.write_text('series_id,ts,value,note\nc1/all/gpus_in_use,2024-03-01T10:00:00Z,1,"a\n'
                    'b"\nc1/all/gpus_in_use,2024-03-01T10:10:00Z,2\n')
    message = refused(tmp_path / "s.db", path, "long-csv", capsys)
    assert "line 4: malformed CSV row: expected 4 fields, found 3" in message


def test_a_stray_quote_in_an_ignored_column_loses_no_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the quote opened on line 2 closes on line 3: row 3 was read as part of 'note' and,
    # the column being read past, vanished without a word
    path = tmp_path / "stray.csv"
    path.write_text('series_id,ts,value,note\n'
                    'c1/all/gpus_in_use,2024-03-01T10:00:00Z,1,"oops\n'
                    'c1/all/gpus_in_use,2024-03-01T10:10:00Z,2,fine"\n'
                    'c1/all/gpus_in_use,2024-03-01T10:20:00Z,3,ok\n')
    message = refused(tmp_path / "s.db", path, "long-csv", capsys)
    assert "line 2, column 'note': a quoted field of an ignored column runs over several " \
           "lines" in message
