"""alibaba-pai: header-less v2020 task table (+ optional job table) -> canonical jobs."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError, IngestError, PrismError
from prism.ingest.alibaba_pai import (
    DEFAULT_ORIGIN,
    TASK_COLUMNS,
    AlibabaPaiAdapter,
    parse_origin,
)
from prism.ingest.base import Batch, IngestOptions, registry
from prism.schema import JOB_COLUMNS

ADAPTER = AlibabaPaiAdapter()
T = pd.Timestamp
GOOD = "4b3f04b66a525d2df903eb16,tensorflow,1.0,Terminated,4550900.0,4551416.0,600.0,29.296875,50.0,MISC"  # noqa: E501
ROW2 = "a1b2c3d4e5f60718293a4b5c,worker,2.0,Terminated,4551000.0,4554600.0,400.0,29.296875,50.0,V100"  # noqa: E501
JOB_IDS = ["4b3f04b66a525d2df903eb16/tensorflow", "a1b2c3d4e5f60718293a4b5c/ps",
           "a1b2c3d4e5f60718293a4b5c/worker", "d6e7f8091a2b3c4d5e6f7081/PyTorchWorker",
           "9f8e7d6c5b4a39281706f5e4/worker"]
START = [T("2020-02-23 16:08:20"), T("2020-02-23 16:10:00"), T("2020-02-23 16:10:00"),
         T("2020-02-23 18:40:00"), T("2020-02-23 19:13:20")]


def _expected(submit: list[pd.Timestamp], scope: Sequence[str | None]) -> pd.DataFrame:
    frame = pd.DataFrame({
        "source": ["alibaba-pai"] * 5,
        "cluster": ["alibaba-v2020"] * 5,
        "scope": scope,
        "job_id": JOB_IDS,
        "gpu_type": ["MISC", None, "V100", "V100", "T4"],
        # inst_num * plan_gpu / 100: 1*50, 1*empty (CPU-only ps), 2*50, 8*100, 1*25
        "num_gpus": [0.5, 0.0, 1.0, 8.0, 0.25],
        # inst_num * plan_cpu / 100: 1*600, 1*600, 2*400, 8*1200, 1*800
        "num_cpus": [6.0, 6.0, 8.0, 96.0, 8.0],
        "submit_ts": submit,
        "start_ts": START,
        "end_ts": [T("2020-02-23 16:16:56"), T("2020-02-23 17:10:00"), T("2020-02-23 17:10:00"),
                   pd.NaT, T("2020-02-23 19:14:20")],
        "status": ["Terminated", "Terminated", "Terminated", "Running", "Failed"],
        "_line": [1, 2, 3, 4, 5],
    })
    for col in ("submit_ts", "start_ts", "end_ts"):
        frame[col] = frame[col].astype("datetime64[ns]")
    for col in ("source", "cluster", "scope", "job_id", "gpu_type", "status"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    return frame


def _write(tmp_path: Path, rows: list[str], name: str = "pai_task_table.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return path


def test_registered_under_its_format_name() -> None:
    assert isinstance(registry()["alibaba-pai"], AlibabaPaiAdapter)


def test_task_table_alone_gives_exact_rows_with_submit_at_start(fixtures: Path) -> None:
    batch = ADAPTER.read(fixtures / "pai_task_table.csv", IngestOptions())
    assert batch.kind == "jobs" and batch.source == "alibaba-pai" and batch.rejects == []
    assert list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]
    pd.testing.assert_frame_equal(batch.frame, _expected(START, [None] * 5))


def test_job_table_gives_submit_times_and_users(fixtures: Path) -> None:
    options = IngestOptions(extra={"job_table": str(fixtures / "pai_job_table.csv")})
    batch = ADAPTER.read(fixtures / "pai_task_table.csv", options)
    submit = [T("2020-02-23 16:07:59"), T("2020-02-23 16:09:50"), T("2020-02-23 16:09:50"),
              T("2020-02-23 18:30:00"), T("2020-02-23 19:13:10")]
    users = ["58540f191766", "d2d3b77d342e", "d2d3b77d342e", "58540f191766", "1c4e2f9a7b3d"]
    pd.testing.assert_frame_equal(batch.frame, _expected(submit, users))


def test_relative_job_table_is_found_beside_the_task_table(fixtures: Path) -> None:
    options = IngestOptions(extra={"job_table": "pai_job_table.csv"})
    frame = ADAPTER.read(fixtures / "pai_task_table.csv", options).frame
    assert frame["scope"][0] == "58540f191766"


def test_default_origin_keeps_weekday_and_time_of_day_of_unix_time() -> None:
    # The README: read as Unix time in UTC+8 the seconds keep the real weekday and time of day.
    origin = parse_origin(None)
    assert origin == T(DEFAULT_ORIGIN)
    as_unix = T(4550879, unit="s", tz="UTC").tz_convert("Asia/Shanghai")
    ours = (origin + pd.Timedelta(seconds=4550879)).tz_localize("UTC").tz_convert("Asia/Shanghai")
    assert (ours.day_name(), ours.time()) == (as_unix.day_name(), as_unix.time())


def test_origin_option_shifts_all_times(fixtures: Path) -> None:
    options = IngestOptions(origin="2020-07-01T00:00:00+08:00")
    frame = ADAPTER.read(fixtures / "pai_task_table.csv", options).frame
    assert frame["start_ts"][0] == T("2020-06-30 16:00:00") + pd.Timedelta(seconds=4550900)


def test_bad_origin_is_a_config_error(fixtures: Path) -> None:
    with pytest.raises(ConfigError, match="--origin"):
        ADAPTER.read(fixtures / "pai_task_table.csv", IngestOptions(origin="last tuesday"))


def test_task_that_has_not_started(fixtures: Path, tmp_path: Path) -> None:
    waiting = "c0ffee00112233445566778a,worker,1.0,Waiting,0.0,0.0,600.0,,100.0,T4"
    path = _write(tmp_path, [*(fixtures / "pai_task_table.csv").read_text().splitlines(), waiting])
    with pytest.raises(IngestError) as info:
        ADAPTER.read(path, IngestOptions())
    assert (info.value.line, info.value.column) == (6, "start_time")
    assert "job_table" in str(info.value)
    options = IngestOptions(extra={"job_table": str(fixtures / "pai_job_table.csv")})
    row = ADAPTER.read(path, options).frame.iloc[-1]
    assert row["job_id"] == "c0ffee00112233445566778a/worker" and row["num_gpus"] == 1.0
    assert row["submit_ts"] == T("2020-02-23 19:30:00")  # 4563000 s, from the job table
    assert pd.isna(row["start_ts"]) and pd.isna(row["end_ts"])  # pending


def test_a_header_line_is_accepted_and_counted(fixtures: Path, tmp_path: Path) -> None:
    path = tmp_path / "pai_task_table.csv"
    path.write_text(",".join(TASK_COLUMNS) + "\n" + (fixtures / "pai_task_table.csv").read_text())
    frame = ADAPTER.read(path, IngestOptions()).frame
    assert frame["job_id"].tolist() == JOB_IDS and frame["_line"].tolist() == [2, 3, 4, 5, 6]


def test_blank_lines_keep_line_numbers_true(tmp_path: Path) -> None:
    path = tmp_path / "pai_task_table.csv"
    path.write_text(GOOD + "\n\n" + ROW2 + "\n")
    assert ADAPTER.read(path, IngestOptions()).frame["_line"].tolist() == [1, 3]


def test_gzip_file_reads_like_the_plain_one(fixtures: Path, tmp_path: Path) -> None:
    path = tmp_path / "pai_task_table.csv.gz"
    path.write_bytes(gzip.compress((fixtures / "pai_task_table.csv").read_bytes()))
    plain = ADAPTER.read(fixtures / "pai_task_table.csv", IngestOptions()).frame
    pd.testing.assert_frame_equal(ADAPTER.read(path, IngestOptions()).frame, plain)


def _task(start: str = "4550900.0", end: str = "4551416.0", inst: str = "1.0",
          plan_gpu: str = "50.0", plan_cpu: str = "600.0", job: str = "b" * 24,
          task: str = "worker") -> str:
    """A task row (memory 29.3 GB, status Terminated, GPU type P100)."""
    return f"{job},{task},{inst},Terminated,{start},{end},{plan_cpu},29.296875,{plan_gpu},P100"


# Bad task rows of every kind: tests/ingest/test_adapters.py.
def test_job_missing_from_the_job_table(fixtures: Path, tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD, _task()])
    options = IngestOptions(extra={"job_table": str(fixtures / "pai_job_table.csv")})
    with pytest.raises(IngestError, match="not in the job table") as info:
        ADAPTER.read(path, options)
    assert (info.value.line, info.value.column) == (2, "job_name")
    skip = IngestOptions(on_error="skip", extra=options.extra)
    assert ADAPTER.read(path, skip).frame["job_id"].tolist() == [JOB_IDS[0]]


def test_bad_job_table_row_names_the_job_table(fixtures: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "pai_job_table.csv"
    lines = (fixtures / "pai_job_table.csv").read_text().splitlines()
    lines[1] = lines[1].replace("4550990.0", "early")
    jobs.write_text("\n".join(lines) + "\n")
    options = IngestOptions(extra={"job_table": str(jobs)})
    with pytest.raises(IngestError) as info:
        ADAPTER.read(fixtures / "pai_task_table.csv", options)
    assert (info.value.path, info.value.line, info.value.column) == (str(jobs), 2, "start_time")
    skip = ADAPTER.read(fixtures / "pai_task_table.csv",
                        IngestOptions(on_error="skip", extra=options.extra))
    # the job table row is rejected, and so are the job's two tasks, which lost their job
    assert [(r.line, r.column) for r in skip.rejects] == [(2, "start_time"), (2, "job_name"),
                                                          (3, "job_name")]
    assert "job table pai_job_table.csv line 2" in skip.rejects[0].reason


def test_missing_job_table_file(fixtures: Path) -> None:
    options = IngestOptions(extra={"job_table": "/nonexistent/pai_job_table.csv"})
    with pytest.raises(IngestError, match="not found"):
        ADAPTER.read(fixtures / "pai_task_table.csv", options)


def test_job_table_given_as_the_task_table_is_a_column_count_error(fixtures: Path) -> None:
    with pytest.raises(IngestError, match="expected 10 fields, found 6") as info:
        ADAPTER.read(fixtures / "pai_job_table.csv", IngestOptions())
    assert info.value.line == 1 and "no header" in str(info.value)


def test_row_with_missing_fields_names_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD, ROW2, ",".join(GOOD.split(",")[:8])])
    with pytest.raises(IngestError, match="expected 10 fields, found 8") as info:
        ADAPTER.read(path, IngestOptions())
    assert info.value.line == 3 and str(path) in str(info.value)


def test_non_utf8_row_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "pai_task_table.csv"
    path.write_bytes((GOOD + "\n").encode() + b"\xff\xfe" + (ROW2 + "\n").encode())
    with pytest.raises(IngestError, match="UTF-8") as info:
        ADAPTER.read(path, IngestOptions())
    assert info.value.line == 2


def test_empty_file_fails(tmp_path: Path) -> None:
    path = tmp_path / "pai_task_table.csv"
    path.write_text("")
    with pytest.raises(IngestError, match="empty") as info:
        ADAPTER.read(path, IngestOptions())
    assert str(path) in str(info.value)


def test_truncated_gzip_fails(fixtures: Path, tmp_path: Path) -> None:
    data = gzip.compress((fixtures / "pai_task_table.csv").read_bytes())
    path = tmp_path / "pai_task_table.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(IngestError, match="truncated"):
        ADAPTER.read(path, IngestOptions())


_FIELD = st.one_of(
    st.sampled_from(["", "0", "0.0", "1.0", "-1", "1.5", "50.0", "nan", "inf", "1e300",
                     "4550900.0", "Terminated", "MISC", "\"a,b\""]),
    st.text(alphabet=st.sampled_from(list("0123456789-.e+ abc\u00e9")), max_size=20),
)


def _mutate(changes: dict[int, str]) -> str:
    return ",".join(changes.get(i, f) for i, f in enumerate(GOOD.split(",")))


_ROW = st.one_of(
    st.dictionaries(st.integers(0, 9), _FIELD, max_size=3).map(_mutate),
    st.lists(_FIELD, min_size=10, max_size=10).map(",".join),
    st.text(max_size=80),
)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(
    st.binary(max_size=400),
    st.lists(_ROW, max_size=6).map(lambda rows: "\n".join(rows).encode()),
), suffix=st.sampled_from([".csv", ".csv.gz"]), on_error=st.sampled_from(["fail", "skip"]))
def test_any_bytes_give_a_batch_or_a_prism_error(
    tmp_path: Path, content: bytes, suffix: str, on_error: str
) -> None:
    path = tmp_path / f"pai_task_table{suffix}"
    path.write_bytes(content)
    try:
        batch = ADAPTER.read(path, IngestOptions(on_error=on_error))  # type: ignore[arg-type]
    except PrismError:
        return
    assert isinstance(batch, Batch)
    assert list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]
