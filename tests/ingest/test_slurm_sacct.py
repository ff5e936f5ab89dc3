"""The ``slurm-sacct`` adapter: exact rows from ``sacct --parsable2`` exports, and its errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError, IngestError, PrismError
from prism.ingest.base import Batch, IngestOptions
from prism.ingest.slurm_sacct import SlurmSacctAdapter
from prism.schema import JOB_COLUMNS

HEADER = "JobID|User|Account|Partition|AllocTRES|Submit|Start|End|State"
TRES = "billing=4,cpu=4,gres/gpu=1,mem=32G,node=1"

_FIXTURE_OK = [HealthCheck.function_scoped_fixture]  # tmp_path is reused; files are rewritten


@pytest.fixture
def adapter() -> SlurmSacctAdapter:
    """The adapter, imported directly (independent of the other formats' modules)."""
    return SlurmSacctAdapter()


def _write(tmp_path: Path, *rows: str, header: str = HEADER, name: str = "sacct.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _ts(text: str | None) -> object:
    return pd.Timestamp(text) if text else pd.NaT


def test_registered_under_its_name() -> None:
    from prism.ingest import get_adapter

    adapter = get_adapter("slurm-sacct")
    assert isinstance(adapter, SlurmSacctAdapter)
    assert adapter.kind == "jobs"


def test_basic_export_gives_exact_rows_in_utc(adapter: SlurmSacctAdapter, fixtures: Path) -> None:
    batch = adapter.read(fixtures / "sacct_basic.txt", IngestOptions(tz="Europe/Berlin"))
    assert batch.kind == "jobs" and batch.source == "slurm-sacct" and batch.rejects == []
    # Berlin is UTC+1 in January: every local time is one hour ahead of the stored UTC time.
    rows = [
        # job_id, scope, gpu_type, gpus, cpus, submit, start, end, status, line
        ("1001", "vision", "a100", 4.0, 16.0, "2026-01-05 07:00", "2026-01-05 07:05",
         "2026-01-05 09:05", "COMPLETED", 2),
        ("1002", "nlp", None, 0.0, 4.0, "2026-01-05 08:00", "2026-01-05 08:00:01",
         "2026-01-05 08:30", "FAILED", 6),
        ("1003_1", "nlp", None, 1.0, 8.0, "2026-01-05 08:10", "2026-01-05 08:12",
         "2026-01-05 12:12", "TIMEOUT", 8),
        # the pending array line stands for its three tasks
        *((f"1003_{task}", "nlp", None, 0.0, np.nan, "2026-01-05 08:10", None, None, "PENDING",
           10) for task in (2, 3, 4)),
        ("1004+0", "gpu", "h100", 8.0, 32.0, "2026-01-05 10:00", "2026-01-05 10:20", None,
         "RUNNING", 11),
        ("1004+1", "cpu", None, 0.0, 2.0, "2026-01-05 10:00", "2026-01-05 10:20", None,
         "RUNNING", 12),
        ("1005", "vision", None, 0.0, np.nan, "2026-01-05 11:00", None, "2026-01-05 11:30",
         "CANCELLED", 13),
    ]
    expected = pd.DataFrame({
        "source": ["slurm-sacct"] * len(rows),
        "cluster": ["slurm"] * len(rows),
        "scope": [r[1] for r in rows],
        "job_id": [r[0] for r in rows],
        "gpu_type": pd.Series([r[2] for r in rows], dtype=object),
        "num_gpus": [r[3] for r in rows],
        "num_cpus": [r[4] for r in rows],
        "submit_ts": pd.Series([_ts(r[5]) for r in rows], dtype="datetime64[ns]"),
        "start_ts": pd.Series([_ts(r[6]) for r in rows], dtype="datetime64[ns]"),
        "end_ts": pd.Series([_ts(r[7]) for r in rows], dtype="datetime64[ns]"),
        "status": [r[8] for r in rows],
        "_line": np.array([r[9] for r in rows], dtype=np.int64),
    })
    for name in ("source", "cluster", "scope", "job_id", "status"):
        expected[name] = expected[name].astype(object)
    assert list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]
    pd.testing.assert_frame_equal(batch.frame, expected)


def test_steps_are_skipped_and_array_and_het_ids_kept(
    adapter: SlurmSacctAdapter, fixtures: Path
) -> None:
    ids = adapter.read(fixtures / "sacct_basic.txt", IngestOptions()).frame["job_id"].tolist()
    assert not any("." in i for i in ids)  # 1001.batch, 1001.extern, 1001.0, 1003_1.batch
    assert {"1003_1", "1003_2", "1003_3", "1003_4", "1004+0", "1004+1"} <= set(ids)


def test_without_tz_times_are_utc(adapter: SlurmSacctAdapter, fixtures: Path) -> None:
    frame = adapter.read(fixtures / "sacct_basic.txt", IngestOptions()).frame
    assert frame["submit_ts"].iloc[0] == pd.Timestamp("2026-01-05 08:00")


def test_cluster_option_and_cluster_column(adapter: SlurmSacctAdapter, tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"7|u1|a|gpu|{TRES}|2026-01-05T08:00:00|2026-01-05T08:01:00|Unknown|RUNNING|earth",
        f"8|u1|a|gpu|{TRES}|2026-01-05T08:00:00|2026-01-05T08:01:00|Unknown|RUNNING|",
        header=HEADER + "|Cluster",
    )
    assert adapter.read(path, IngestOptions()).frame["cluster"].tolist() == ["earth", "slurm"]
    named = adapter.read(path, IngestOptions(cluster="venus")).frame
    assert named["cluster"].tolist() == ["venus", "venus"]


def test_scope_by_partition_takes_the_first_listed(
    adapter: SlurmSacctAdapter, fixtures: Path
) -> None:
    frame = adapter.read(fixtures / "sacct_basic.txt",
                         IngestOptions(extra={"scope": "partition"})).frame
    assert frame["scope"].tolist() == ["gpu", "cpu", "gpu", "gpu", "gpu", "gpu", "gpu", "cpu",
                                       "gpu"]


def test_scope_option_puts_every_job_in_one_scope(
    adapter: SlurmSacctAdapter, fixtures: Path
) -> None:
    frame = adapter.read(fixtures / "sacct_basic.txt", IngestOptions(scope="vcX")).frame
    assert set(frame["scope"]) == {"vcX"}


def test_bad_options_are_config_errors(adapter: SlurmSacctAdapter, fixtures: Path) -> None:
    with pytest.raises(ConfigError, match="scope=account"):
        adapter.read(fixtures / "sacct_basic.txt", IngestOptions(extra={"scope": "qos"}))
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        adapter.read(fixtures / "sacct_basic.txt", IngestOptions(tz="Mars/Olympus"))


def test_daylight_saving_changes(adapter: SlurmSacctAdapter, tmp_path: Path) -> None:
    # 2026-11-01 01:30 happens twice in New York: read as the first (EDT, UTC-4) pass.
    path = _write(tmp_path, f"1|u|a|p|{TRES}|2026-11-01T01:30:00|2026-11-01T01:40:00|"
                  "2026-11-01T03:00:00|COMPLETED")
    frame = adapter.read(path, IngestOptions(tz="America/New_York")).frame
    assert frame["submit_ts"].iloc[0] == pd.Timestamp("2026-11-01 05:30")
    assert frame["end_ts"].iloc[0] == pd.Timestamp("2026-11-01 08:00")  # EST, UTC-5
    # 2026-03-08 02:30 does not exist there: the clock jumps from 02:00 to 03:00.
    path = _write(tmp_path, f"2|u|a|p|{TRES}|2026-03-08T02:30:00|Unknown|Unknown|PENDING")
    with pytest.raises(IngestError) as err:
        adapter.read(path, IngestOptions(tz="America/New_York"))
    assert "line 2" in str(err.value) and "column 'Submit'" in str(err.value)
    assert "does not exist in time zone America/New_York" in str(err.value)


def test_times_with_an_offset_ignore_tz(adapter: SlurmSacctAdapter, tmp_path: Path) -> None:
    path = _write(tmp_path, f"1|u|a|p|{TRES}|2026-01-05T08:00:00+0100|2026-01-05T08:00:00Z|"
                  "Unknown|RUNNING")
    frame = adapter.read(path, IngestOptions(tz="Asia/Tokyo")).frame
    assert frame["submit_ts"].iloc[0] == pd.Timestamp("2026-01-05 07:00")
    assert frame["start_ts"].iloc[0] == pd.Timestamp("2026-01-05 08:00")


# Bad rows of every kind, each format: tests/ingest/test_adapters.py.
def test_missing_column(adapter: SlurmSacctAdapter, fixtures: Path) -> None:
    path = fixtures / "sacct_missing_column.txt"
    for on_error in ("fail", "skip"):
        with pytest.raises(IngestError) as err:
            adapter.read(path, IngestOptions(on_error=on_error))
        text = str(err.value)
        assert str(path) in text and "line 1" in text
        assert "['AllocTRES', 'End']" in text and "--format=JobID" in text


def test_empty_file(adapter: SlurmSacctAdapter, fixtures: Path) -> None:
    with pytest.raises(IngestError, match="sacct_empty.txt: file is empty"):
        adapter.read(fixtures / "sacct_empty.txt", IngestOptions())


def test_header_only_gives_no_rows(adapter: SlurmSacctAdapter, fixtures: Path) -> None:
    batch = adapter.read(fixtures / "sacct_header_only.txt", IngestOptions())
    assert batch.frame.empty and list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]


def test_row_with_wrong_field_count(adapter: SlurmSacctAdapter, tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"1|u|a|p|{TRES}|2026-01-05T08:00:00|2026-01-05T08:01:00|Unknown|RUNNING",
        f"2|u|a|p|{TRES}|2026-01-05T08:00:00|2026-01-05T08:01:00|Unknown|RUNNING|extra",
    )
    with pytest.raises(IngestError, match=r"line 3: row does not have as many '\|'"):
        adapter.read(path, IngestOptions())
    batch = adapter.read(path, IngestOptions(on_error="skip"))
    assert batch.frame["job_id"].tolist() == ["1"]
    assert [(r.line, r.column) for r in batch.rejects] == [(3, None)]


def test_pending_jobs_count_requested_gpus_from_reqtres(
    adapter: SlurmSacctAdapter, tmp_path: Path
) -> None:
    path = _write(
        tmp_path,
        "9|u|a|gpu||billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1|"
        "2026-01-05T08:00:00|Unknown|Unknown|PENDING",
        f"10|u|a|gpu|{TRES}|cpu=2,gres/gpu=7|2026-01-05T08:00:00|2026-01-05T08:01:00|"
        "Unknown|RUNNING",
        header="JobID|User|Account|Partition|AllocTRES|ReqTRES|Submit|Start|End|State",
    )
    frame = adapter.read(path, IngestOptions()).frame
    assert frame[["job_id", "gpu_type", "num_gpus", "num_cpus"]].values.tolist() == [
        ["9", "a100", 2.0, 8.0],
        ["10", None, 1.0, 4.0],  # allocated: AllocTRES wins over the request
    ]


def test_parsable_crlf_blank_lines_and_repeated_headers(
    adapter: SlurmSacctAdapter, tmp_path: Path
) -> None:
    # sacct --parsable ends lines with '|'; two exports concatenated repeat the header.
    row = f"{TRES}|2026-01-05T08:00:00|2026-01-05T08:01:00|2026-01-05T09:00:00|COMPLETED|"
    text = "\r\n".join([HEADER + "|", f"1|u|a|p|{row}", "", HEADER + "|", f"2|u|a|p|{row}"])
    path = tmp_path / "sacct.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    frame = adapter.read(path, IngestOptions()).frame
    assert frame[["job_id", "_line"]].values.tolist() == [["1", 2], ["2", 5]]
    assert frame["status"].tolist() == ["COMPLETED", "COMPLETED"]


def test_gpu_tres_that_are_not_counts_are_ignored(
    adapter: SlurmSacctAdapter, tmp_path: Path
) -> None:
    path = _write(
        tmp_path,
        "1|u|a|p|cpu=2,gres/gpumem=80G,gres/gpuutil=87,gres/gpu:a100=1,gres/gpu:v100=2,mem=1G|"
        "2026-01-05T08:00:00|2026-01-05T08:01:00|2026-01-05T09:00:00|COMPLETED",
    )
    frame = adapter.read(path, IngestOptions()).frame
    assert frame[["gpu_type", "num_gpus", "num_cpus"]].values.tolist() == [["a100+v100", 3.0, 2.0]]


@settings(max_examples=150, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(data=st.binary(max_size=400))
def test_any_bytes_give_a_batch_or_a_prism_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "sacct.txt"
    path.write_bytes(data)
    try:
        batch = SlurmSacctAdapter().read(path, IngestOptions(on_error="skip"))
    except PrismError:
        return
    assert isinstance(batch, Batch)


_FIELD = st.one_of(
    st.sampled_from(["", "Unknown", "None", "2026-01-05T08:00:00", "9999-12-31T23:59:59",
                     "2026-03-08T02:30:00", "gres/gpu=2", "gres/gpu:=x", "cpu=-1",
                     "CANCELLED by 0", "1.batch", "1_[1-3]"]),
    st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=["Cs"]),
            max_size=20),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(rows=st.lists(st.lists(_FIELD, min_size=7, max_size=11), max_size=6),
       on_error=st.sampled_from(["fail", "skip"]))
def test_any_rows_under_a_valid_header_give_a_batch_or_an_ingest_error(
    tmp_path: Path, rows: list[list[str]], on_error: str
) -> None:
    path = _write(tmp_path, *("|".join(r) for r in rows))
    try:
        batch = SlurmSacctAdapter().read(
            path, IngestOptions(tz="America/New_York", on_error=on_error)  # type: ignore[arg-type]
        )
    except IngestError:
        return
    assert list(batch.frame.columns) == [*JOB_COLUMNS, "_line"]
    assert batch.frame["num_gpus"].ge(0).all()
