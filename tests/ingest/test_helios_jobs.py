"""helios-jobs: HeliosData cluster_log.csv -> canonical jobs (exact rows, bad input, tz)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError, IngestError, PrismError
from prism.ingest.base import Batch, IngestOptions, registry
from prism.ingest.helios_jobs import HeliosJobsAdapter, parse_local_times
from prism.schema import JOB_COLUMNS

ADAPTER = HeliosJobsAdapter()
HEADER = ("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
          "duration,queue")
GOOD = "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0"  # noqa: E501
ROW2 = "1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0"  # noqa: E501
T = pd.Timestamp


def _write(tmp_path: Path, rows: list[str], name: str = "cluster_log.csv",
           header: str = HEADER) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_registered_under_its_format_name() -> None:
    assert isinstance(registry()["helios-jobs"], HeliosJobsAdapter)
    assert HeliosJobsAdapter.kind == "jobs"


def test_reads_the_published_format_into_exact_canonical_rows(fixtures: Path) -> None:
    batch = ADAPTER.read(fixtures / "helios_cluster_log.csv", IngestOptions())
    expected = pd.DataFrame({
        "source": ["helios-jobs"] * 6,
        "cluster": ["helios"] * 6,
        "scope": ["vcJkd", "vchbv", "vcpDC", "vcJkd", "vc6YE", "vchbv"],
        "job_id": ["1425511", "1425512", "1425513", "1425514", "1425515", "1425516"],
        "gpu_type": [None] * 6,
        "num_gpus": [1.0, 4.0, 1.0, 0.0, 16.0, 8.0],
        "num_cpus": [1.0, 16.0, 1.0, 8.0, 64.0, 32.0],
        "submit_ts": [T("2020-06-09 18:41:01"), T("2020-06-09 18:41:27"),
                      T("2020-06-09 18:41:28"), T("2020-06-09 18:42:00"),
                      T("2020-06-09 18:43:10"), T("2020-06-09 18:44:00")],
        "start_ts": [T("2020-06-09 18:41:01"), T("2020-06-09 18:41:27"),
                     T("2020-06-09 18:41:28"), T("2020-06-09 18:42:05"),
                     T("2020-06-09 19:13:10"), T("2020-06-09 18:44:30")],
        "end_ts": [T("2020-06-10 04:55:09"), T("2020-06-09 18:45:36"), T("2020-06-17 14:15:21"),
                   T("2020-06-09 18:52:05"), T("2020-06-10 19:13:10"), T("2020-06-09 20:44:30")],
        "status": ["COMPLETED", "FAILED", "CANCELLED", "COMPLETED", "TIMEOUT", "NODE_FAIL"],
        "_line": [2, 3, 4, 5, 6, 7],
    })
    for col in ("submit_ts", "start_ts", "end_ts"):
        expected[col] = expected[col].astype("datetime64[ns]")
    for col in ("source", "cluster", "scope", "job_id", "gpu_type", "status"):
        expected[col] = expected[col].astype(object)
    assert batch.kind == "jobs" and batch.source == "helios-jobs" and batch.rejects == []
    assert list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]
    pd.testing.assert_frame_equal(batch.frame, expected)
    # duration and queue are derived upstream from the times; the rows agree with them
    raw = pd.read_csv(fixtures / "helios_cluster_log.csv")
    run = (batch.frame["end_ts"] - batch.frame["start_ts"]).dt.total_seconds()
    wait = (batch.frame["start_ts"] - batch.frame["submit_ts"]).dt.total_seconds()
    assert run.tolist() == raw["duration"].astype(float).tolist()
    assert wait.tolist() == raw["queue"].astype(float).tolist()


def test_tz_converts_local_times_to_utc(fixtures: Path) -> None:
    batch = ADAPTER.read(fixtures / "helios_cluster_log.csv", IngestOptions(tz="Asia/Shanghai"))
    assert batch.frame["submit_ts"][0] == T("2020-06-09 10:41:01")
    assert batch.frame["end_ts"][0] == T("2020-06-09 20:55:09")


def test_times_with_an_offset_are_converted_whatever_tz(tmp_path: Path) -> None:
    row = ("7,u,vc1,2,4,1,COMPLETED,2020-06-09T18:41:01+08:00,2020-06-09 10:42:00Z,"
           "2020-06-09 19:00:00,0,0")
    for tz in (None, "Asia/Shanghai"):
        batch = ADAPTER.read(_write(tmp_path, [row]), IngestOptions(tz=tz))
        assert batch.frame["submit_ts"][0] == T("2020-06-09 10:41:01")
        assert batch.frame["start_ts"][0] == T("2020-06-09 10:42:00")
    assert batch.frame["end_ts"][0] == T("2020-06-09 11:00:00")  # naive, in Asia/Shanghai


def test_empty_start_and_end_are_null(tmp_path: Path) -> None:
    rows = ["8,u,vc1,2,4,1,CANCELLED,2020-06-09 18:00:00,,,0,0",
            "9,u,vc1,1,4,1,RUNNING,2020-06-09 18:00:00,2020-06-09 18:05:00,,0,0"]
    frame = ADAPTER.read(_write(tmp_path, rows), IngestOptions()).frame
    assert frame["start_ts"].isna().tolist() == [True, False]
    assert frame["end_ts"].isna().tolist() == [True, True]


@pytest.mark.parametrize(("folder", "cluster"), [
    ("Venus", "venus"), ("Earth", "earth"), ("saturn", "saturn"), ("Uranus", "uranus"),
    ("Philly", "philly"), ("downloads", "helios"),
])
def test_cluster_comes_from_the_helios_folder(
    fixtures: Path, tmp_path: Path, folder: str, cluster: str
) -> None:
    path = tmp_path / folder / "cluster_log.csv"
    path.parent.mkdir()
    shutil.copy(fixtures / "helios_cluster_log.csv", path)
    assert ADAPTER.read(path, IngestOptions()).clusters == [cluster]
    assert ADAPTER.read(path, IngestOptions(cluster="mine")).clusters == ["mine"]


def test_cluster_column_of_the_artifacts_all_cluster_log(fixtures: Path) -> None:
    frame = ADAPTER.read(fixtures / "helios_cluster_log_all.csv", IngestOptions()).frame
    assert frame["cluster"].tolist() == ["venus", "earth"]
    # the same Slurm id in two clusters is two jobs
    assert frame["job_id"].tolist() == ["1425511", "1425511"]


def test_extra_columns_such_as_jobname_are_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD + ",resnet50"], header=HEADER + ",jobname")
    assert ADAPTER.read(path, IngestOptions()).frame["job_id"].tolist() == ["1425511"]


def test_gzip_file_reads_like_the_plain_one(fixtures: Path, tmp_path: Path) -> None:
    path = tmp_path / "cluster_log.csv.gz"
    path.write_bytes(gzip.compress((fixtures / "helios_cluster_log.csv").read_bytes()))
    plain = ADAPTER.read(fixtures / "helios_cluster_log.csv", IngestOptions()).frame
    pd.testing.assert_frame_equal(ADAPTER.read(path, IngestOptions()).frame, plain)


S, A, E = "2020-06-09 18:41:01", "2020-06-09 18:41:01", "2020-06-10 04:55:09"


def _row(job_id: str = "1425599", gpus: str = "1", cpus: str = "1", submit: str = S,
         start: str = A, end: str = E) -> str:
    """A cluster_log row with the given fields (user u, vc vc1, state COMPLETED)."""
    return f"{job_id},u,vc1,{gpus},{cpus},1,COMPLETED,{submit},{start},{end},0,0"


# Bad rows of every kind, each format: tests/ingest/test_adapters.py.
def test_skip_with_several_bad_rows_reports_each(tmp_path: Path) -> None:
    rows = [GOOD, _row(submit="yesterday"), ROW2, _row(job_id="1425600", gpus="-2")]
    batch = ADAPTER.read(_write(tmp_path, rows), IngestOptions(on_error="skip"))
    assert batch.frame["job_id"].tolist() == ["1425511", "1425512"]
    assert [(r.line, r.column, r.raw) for r in batch.rejects] == [
        (3, "submit_time", "yesterday"), (5, "gpu_num", "-2.0")]


def test_missing_column_names_it(tmp_path: Path) -> None:
    header = HEADER.replace(",vc,", ",")
    row = GOOD.replace(",vcJkd,", ",")
    path = _write(tmp_path, [row], header=header)
    with pytest.raises(IngestError) as info:
        ADAPTER.read(path, IngestOptions())
    assert info.value.line == 1 and "'vc'" in str(info.value) and str(path) in str(info.value)


def test_empty_file_fails(tmp_path: Path) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text("")
    with pytest.raises(IngestError, match="empty") as info:
        ADAPTER.read(path, IngestOptions())
    assert str(path) in str(info.value)


def test_header_only_file_is_an_empty_batch(tmp_path: Path) -> None:
    batch = ADAPTER.read(_write(tmp_path, []), IngestOptions())
    assert batch.frame.empty and list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]


def test_truncated_gzip_fails(fixtures: Path, tmp_path: Path) -> None:
    data = gzip.compress((fixtures / "helios_cluster_log.csv").read_bytes())
    path = tmp_path / "cluster_log.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(IngestError, match="truncated") as info:
        ADAPTER.read(path, IngestOptions())
    assert str(path) in str(info.value)


def test_row_with_too_many_fields_names_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD, ROW2 + ",extra,fields"])
    with pytest.raises(IngestError) as info:
        ADAPTER.read(path, IngestOptions())
    assert info.value.line == 3 and "expected 12 fields, found 14" in str(info.value)


def test_unknown_tz_is_a_config_error(fixtures: Path) -> None:
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        ADAPTER.read(fixtures / "helios_cluster_log.csv", IngestOptions(tz="Mars/Olympus"))


def test_parse_local_times_flags_dst_gaps_and_odd_input() -> None:
    values = pd.Series(["2017-03-12 02:30:00", "2017-11-05 01:30:00", "2017-07-01 12:00:00",
                        "nonsense", "", None, "2017-07-01T12:00:00+00:00", "3000-01-01"])
    times, bad, tz_bad = parse_local_times(values, "America/Los_Angeles")
    assert tz_bad.tolist() == [True, True, False, False, False, False, False, False]
    assert bad.tolist() == [False, False, False, True, False, False, False, True]
    assert times[2] == T("2017-07-01 19:00:00") and times[6] == T("2017-07-01 12:00:00")
    assert times.dtype == np.dtype("datetime64[ns]")
    # hour-only offsets, mixed with naive times or alone, are honoured and not re-localised
    mixed = pd.Series(["2020-06-09 18:41:01", "2020-06-09T18:41:01+08", "2020-06-09T18:41:01-05"])
    for values in (mixed, mixed[1:]):
        times, bad, tz_bad = parse_local_times(values, "Asia/Shanghai")
        assert not bad.any() and not tz_bad.any()
        assert times[1] == T("2020-06-09 10:41:01") and times[2] == T("2020-06-09 23:41:01")
    assert parse_local_times(mixed, "Asia/Shanghai")[0][0] == T("2020-06-09 10:41:01")


_FIELD = st.one_of(
    st.sampled_from(["", "1", "0", "-1", "1.5", "nan", "inf", "1e400", "2020-06-09 18:41:01",
                     "2020-06-09 18:00:00", "9999-01-01", "0001-01-01", "2020-06-09T18:41:01+08:00",
                     "2020-06-09 18:41:01 UTC", "2017-11-05 01:30:00", "COMPLETED", "vc1", "Venus",
                     "\"a,b\""]),
    st.text(alphabet=st.sampled_from(list("0123456789-:. TZ+zuv\u00e9")), max_size=25),
)

def _mutate(good: str, changes: dict[int, str]) -> str:
    fields = good.split(",")
    return ",".join(changes.get(i, f) for i, f in enumerate(fields))


_ROW = st.one_of(
    st.dictionaries(st.integers(0, 11), _FIELD, max_size=3).map(lambda c: _mutate(GOOD, c)),
    st.lists(_FIELD, min_size=12, max_size=12).map(",".join),
    st.text(max_size=80),
)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(
    st.binary(max_size=400),
    st.lists(_ROW, max_size=6).map(lambda rows: "\n".join([HEADER, *rows]).encode()),
), suffix=st.sampled_from([".csv", ".csv.gz"]), on_error=st.sampled_from(["fail", "skip"]))
@example(content=b"\r\x00", suffix=".csv", on_error="fail")  # a lone \r before the first \n
@example(content=b"job_id\rvc\n1,2\n", suffix=".csv", on_error="fail")
def test_any_bytes_give_a_batch_or_a_prism_error(
    tmp_path: Path, content: bytes, suffix: str, on_error: str
) -> None:
    path = tmp_path / f"cluster_log{suffix}"
    path.write_bytes(content)
    try:
        batch = ADAPTER.read(path, IngestOptions(on_error=on_error))  # type: ignore[arg-type]
    except PrismError:
        return
    assert isinstance(batch, Batch)
    assert list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]
