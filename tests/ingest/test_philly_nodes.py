"""philly-nodes: the Philly node sequence -> samples (exact rows, bad input, the real file)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError, IngestError, PrismError
from prism.ingest.base import SAMPLE_COLUMNS, Batch, IngestOptions, registry
from prism.ingest.philly_nodes import PhillyNodesAdapter

ADAPTER = PhillyNodesAdapter()
HEADER = "time,active,total"
ROWS = ["2017-10-03 00:00:00,312,420", "2017-10-03 00:01:00,309,420",
        "2017-10-03 00:02:00,314,420"]
T = pd.Timestamp
REAL = ("helios_earth_vc", "philly_node_sequence_1min.csv.gz")


def _write(tmp_path: Path, rows: list[str], name: str = "philly_node_sequence.csv",
           header: str = HEADER) -> Path:
    path = tmp_path / name
    text = header + "\n" + "\n".join(rows) + "\n"
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_registered_under_its_format_name() -> None:
    assert isinstance(registry()["philly-nodes"], PhillyNodesAdapter)
    assert PhillyNodesAdapter.kind == "samples"


def test_exact_samples_of_both_series(tmp_path: Path) -> None:
    batch = ADAPTER.read(_write(tmp_path, ROWS), IngestOptions())
    ts = [T("2017-10-03 00:00:00"), T("2017-10-03 00:01:00"), T("2017-10-03 00:02:00")]
    expected = pd.DataFrame({
        "cluster": ["philly"] * 6,
        "series_id": ["philly/all/nodes_in_use"] * 3 + ["philly/all/nodes_total"] * 3,
        "ts": ts + ts,
        "value": [312.0, 309.0, 314.0, 420.0, 420.0, 420.0],
        "_line": [2, 3, 4, 2, 3, 4],
    })
    expected["ts"] = expected["ts"].astype("datetime64[ns]")
    expected[["cluster", "series_id"]] = expected[["cluster", "series_id"]].astype(object)
    assert batch.kind == "samples" and batch.source == "philly-nodes" and batch.rejects == []
    assert list(batch.frame.columns) == [*SAMPLE_COLUMNS, "_line"]
    pd.testing.assert_frame_equal(batch.frame, expected)


def test_cluster_option_names_the_series(tmp_path: Path) -> None:
    batch = ADAPTER.read(_write(tmp_path, ROWS), IngestOptions(cluster="msr"))
    assert set(batch.frame["series_id"]) == {"msr/all/nodes_in_use", "msr/all/nodes_total"}
    assert batch.clusters == ["msr"]
    with pytest.raises(ConfigError, match="--cluster"):
        ADAPTER.read(_write(tmp_path, ROWS), IngestOptions(cluster="my cluster"))


def test_tz_converts_to_utc_and_rejects_the_repeated_autumn_hour(tmp_path: Path) -> None:
    rows = ["2017-11-05 00:59:00,300,420", "2017-11-05 01:30:00,301,420",
            "2017-11-05 02:00:00,302,420"]
    options = IngestOptions(tz="America/Los_Angeles")
    with pytest.raises(IngestError, match="ambiguous in time zone America/Los_Angeles") as info:
        ADAPTER.read(_write(tmp_path, rows), options)
    assert (info.value.line, info.value.column) == (3, "time")
    skip = IngestOptions(tz="America/Los_Angeles", on_error="skip")
    batch = ADAPTER.read(_write(tmp_path, rows), skip)
    in_use = batch.frame[batch.frame["series_id"] == "philly/all/nodes_in_use"]
    # 00:59 PDT (UTC-7) and 02:00 PST (UTC-8)
    assert in_use["ts"].tolist() == [T("2017-11-05 07:59:00"), T("2017-11-05 10:00:00")]
    assert [(r.line, r.column, r.raw) for r in batch.rejects] == [
        (3, "time", "2017-11-05 01:30:00")]


def test_unknown_tz_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Nowhere/Land"):
        ADAPTER.read(_write(tmp_path, ROWS), IngestOptions(tz="Nowhere/Land"))


# Bad rows of every kind, each format: tests/ingest/test_adapters.py.
def test_missing_column_names_it(tmp_path: Path) -> None:
    path = _write(tmp_path, ["2017-10-03 00:00:00,312"], header="time,active")
    with pytest.raises(IngestError) as info:
        ADAPTER.read(path, IngestOptions())
    assert info.value.line == 1 and "'total'" in str(info.value)


def test_empty_file_fails(tmp_path: Path) -> None:
    path = tmp_path / "philly_node_sequence.csv"
    path.write_text("")
    with pytest.raises(IngestError, match="empty") as info:
        ADAPTER.read(path, IngestOptions())
    assert str(path) in str(info.value)


def test_truncated_gzip_fails(traces: Path, tmp_path: Path) -> None:
    data = traces.joinpath(*REAL).read_bytes()
    path = tmp_path / "philly_node_sequence_1min.csv.gz"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(IngestError, match="truncated") as info:
        ADAPTER.read(path, IngestOptions())
    assert str(path) in str(info.value)


def test_gzip_reads_like_plain(tmp_path: Path) -> None:
    plain = ADAPTER.read(_write(tmp_path, ROWS), IngestOptions()).frame
    packed = ADAPTER.read(_write(tmp_path, ROWS, name="seq.csv.gz"), IngestOptions()).frame
    pd.testing.assert_frame_equal(packed, plain)


def test_the_real_file_matches_pandas(traces: Path) -> None:
    path = traces.joinpath(*REAL)
    batch = ADAPTER.read(path, IngestOptions())
    reference = pd.read_csv(path, parse_dates=["time"])
    assert len(reference) == 105_644 and batch.rejects == []
    assert len(batch.frame) == 2 * 105_644
    for metric, column in (("nodes_in_use", "active"), ("nodes_total", "total")):
        series = batch.frame[batch.frame["series_id"] == f"philly/all/{metric}"]
        np.testing.assert_array_equal(series["value"].to_numpy(),
                                      reference[column].to_numpy(dtype="float64"))
        np.testing.assert_array_equal(series["ts"].to_numpy(),
                                      reference["time"].to_numpy().astype("datetime64[ns]"))
    in_use = batch.frame[batch.frame["series_id"] == "philly/all/nodes_in_use"]
    assert in_use["ts"].iloc[0] == T("2017-10-03 00:00:00")
    assert in_use["ts"].iloc[-1] == T("2017-12-15 18:42:00")
    steps = in_use["ts"].diff().dropna().value_counts()
    assert steps.to_dict() == {pd.Timedelta("1min"): 105_642, pd.Timedelta("10h"): 1}
    total = batch.frame.loc[batch.frame["series_id"] == "philly/all/nodes_total", "value"]
    assert set(total) == {420.0, 552.0, 174.0}


_FIELD = st.one_of(
    st.sampled_from(["", "0", "-1", "1.5", "420", "nan", "inf", "2017-10-03 00:00:00",
                     "2017-11-05 01:30:00", "9999-01-01", "2017-10-03T00:00:00+08:00",
                     "\"1,2\""]),
    st.text(alphabet=st.sampled_from(list("0123456789-:. TZ+\u00e9")), max_size=25),
)
_ROW = st.one_of(
    st.dictionaries(st.integers(0, 2), _FIELD, max_size=2).map(
        lambda c: ",".join(c.get(i, f) for i, f in enumerate(ROWS[0].split(",")))),
    st.lists(_FIELD, min_size=3, max_size=3).map(",".join),
    st.text(max_size=60),
)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(
    st.binary(max_size=400),
    st.lists(_ROW, max_size=6).map(lambda rows: "\n".join([HEADER, *rows]).encode()),
), suffix=st.sampled_from([".csv", ".csv.gz"]), on_error=st.sampled_from(["fail", "skip"]),
   tz=st.sampled_from([None, "America/Los_Angeles"]))
def test_any_bytes_give_a_batch_or_a_prism_error(
    tmp_path: Path, content: bytes, suffix: str, on_error: str, tz: str | None
) -> None:
    path = tmp_path / f"philly_node_sequence{suffix}"
    path.write_bytes(content)
    try:
        batch = ADAPTER.read(path, IngestOptions(on_error=on_error, tz=tz))  # type: ignore[arg-type]
    except PrismError:
        return
    assert isinstance(batch, Batch)
    assert list(batch.frame.columns) == [*SAMPLE_COLUMNS, "_line"]
