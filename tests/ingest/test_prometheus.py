"""The ``prometheus`` adapter: exact samples from query_range bodies, combining, and errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism.errors import ConfigError, IngestError, PrismError
from prism.ingest.base import SAMPLE_COLUMNS, Batch, IngestOptions
from prism.ingest.prometheus import PrometheusAdapter
from tests.ingest.cli_checks import refused

T0 = 1767600000  # 2026-01-05T08:00:00Z

_FIXTURE_OK = [HealthCheck.function_scoped_fixture]  # tmp_path is reused; files are rewritten


@pytest.fixture
def adapter() -> PrometheusAdapter:
    """The adapter, imported directly (independent of the other formats' modules)."""
    return PrometheusAdapter()


def _frame(rows: list[tuple[str, str, str, float, int]]) -> pd.DataFrame:
    """Expected samples from (cluster, series_id, ts, value, line) tuples."""
    return pd.DataFrame({
        "cluster": pd.Series([r[0] for r in rows], dtype=object),
        "series_id": pd.Series([r[1] for r in rows], dtype=object),
        "ts": pd.Series([pd.Timestamp(r[2]) for r in rows], dtype="datetime64[ns]"),
        "value": np.array([r[3] for r in rows], dtype="float64"),
        "_line": np.array([r[4] for r in rows], dtype=np.int64),
    })


def _write(tmp_path: Path, body: object, name: str = "q.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return path


def _matrix(*results: object, kind: str = "matrix") -> dict[str, object]:
    return {"status": "success", "data": {"resultType": kind, "result": list(results)}}


def test_registered_under_its_name() -> None:
    from prism.ingest import get_adapter

    adapter = get_adapter("prometheus")
    assert isinstance(adapter, PrometheusAdapter)
    assert adapter.kind == "samples"


def test_dcgm_util_is_scaled_and_averaged_over_gpus(
    adapter: PrometheusAdapter, fixtures: Path
) -> None:
    batch = adapter.read(fixtures / "prometheus_dcgm_util.json", IngestOptions())
    assert batch.kind == "samples" and batch.source == "prometheus" and batch.rejects == []
    assert list(batch.frame.columns) == [*SAMPLE_COLUMNS, "_line"]
    # GPUs 0 and 1 of node-1 (namespace team-a) average: (80+40)/2 %, (60+20)/2 %, then only
    # GPU 0 (100 %). node-2's GPU has no namespace: scope "unassigned", not "all".
    expected = _frame([
        ("earth", "earth/team-a/gpu_util", "2026-01-05 08:00", 0.6, 1),
        ("earth", "earth/team-a/gpu_util", "2026-01-05 08:01", 0.4, 1),
        ("earth", "earth/team-a/gpu_util", "2026-01-05 08:02", 1.0, 1),
        ("earth", "earth/unassigned/gpu_util", "2026-01-05 08:00", 0.0, 3),
        ("earth", "earth/unassigned/gpu_util", "2026-01-05 08:01", 0.0, 3),
        ("earth", "earth/unassigned/gpu_util", "2026-01-05 08:02", 0.1, 3),
    ])
    pd.testing.assert_frame_equal(batch.frame, expected)


def test_counts_are_summed_and_names_sanitised(adapter: PrometheusAdapter, fixtures: Path) -> None:
    path = fixtures / "prometheus_gpu_requests.json"
    frame = adapter.read(path, IngestOptions()).frame
    name = "kube_pod_container_resource_requests"
    pd.testing.assert_frame_equal(frame, _frame([
        ("prometheus", f"prometheus/team-a/{name}", "2026-01-05 08:00", 4.0, 1),
        ("prometheus", f"prometheus/team-a/{name}", "2026-01-05 08:01", 6.0, 1),
        ("prometheus", f"prometheus/team-b/{name}", "2026-01-05 08:00", 8.0, 3),
        ("prometheus", f"prometheus/team-b/{name}", "2026-01-05 08:01", 8.0, 3),
    ]))
    named = adapter.read(path, IngestOptions(cluster="venus", extra={"metric": "gpus_in_use"}))
    assert named.frame["series_id"].unique().tolist() == [
        "venus/team-a/gpus_in_use", "venus/team-b/gpus_in_use"
    ]
    assert named.frame["value"].tolist() == [4.0, 6.0, 8.0, 8.0]


def test_scope_options(adapter: PrometheusAdapter, fixtures: Path) -> None:
    path = fixtures / "prometheus_gpu_requests.json"
    by_node = adapter.read(path, IngestOptions(extra={"scope_label": "node"})).frame
    assert sorted(by_node["series_id"].str.split("/").str[1].unique()) == [
        "node-1", "node-2", "node-3"
    ]
    one = adapter.read(path, IngestOptions(scope="vcX", extra={"metric": "gpus_in_use"})).frame
    assert one["series_id"].unique().tolist() == ["prometheus/vcX/gpus_in_use"]
    assert one["value"].tolist() == [12.0, 14.0]


def test_combine_option_overrides_the_rule(adapter: PrometheusAdapter, fixtures: Path) -> None:
    frame = adapter.read(fixtures / "prometheus_dcgm_util.json",
                         IngestOptions(scope="all", extra={"combine": "max"})).frame
    assert frame["series_id"].unique().tolist() == ["earth/all/gpu_util"]
    assert frame["value"].tolist() == [0.8, 0.6, 1.0]


def test_vector_needs_a_metric_name_when_aggregated(
    adapter: PrometheusAdapter, fixtures: Path
) -> None:
    path = fixtures / "prometheus_vector_sum.json"
    with pytest.raises(IngestError) as err:
        adapter.read(path, IngestOptions())
    text = str(err.value)
    assert str(path) in text and "line 1" in text and "column 'data.result[0].metric'" in text
    assert '{vc="vc6YE"}' in text and "no __name__" in text and "--option metric=NAME" in text
    with pytest.raises(IngestError, match=r"all 2 samples or results are rejected.*"
                       r"--option metric=NAME"):  # skipping every result stores nothing
        adapter.read(path, IngestOptions(on_error="skip"))
    frame = adapter.read(path, IngestOptions(extra={"metric": "gpus_in_use"})).frame
    pd.testing.assert_frame_equal(frame, _frame([
        ("prometheus", "prometheus/vc6YE/gpus_in_use", "2026-01-05 08:00:00.123", 24.0, 1),
        ("prometheus", "prometheus/vcHvQ/gpus_in_use", "2026-01-05 08:00:00.123", 8.0, 2),
    ]))


def test_error_response_quotes_prometheus(adapter: PrometheusAdapter, fixtures: Path) -> None:
    path = fixtures / "prometheus_error.json"
    for on_error in ("fail", "skip"):
        with pytest.raises(IngestError) as err:
            adapter.read(path, IngestOptions(on_error=on_error))
        text = str(err.value)
        assert str(path) in text and "column 'status'" in text
        assert "bad_data: invalid parameter \"query\"" in text and "Fix:" in text


def test_non_json_body(adapter: PrometheusAdapter, fixtures: Path) -> None:
    path = fixtures / "prometheus_not_json.json"
    with pytest.raises(IngestError) as err:
        adapter.read(path, IngestOptions(on_error="skip"))
    text = str(err.value)
    assert str(path) in text and "line 1" in text and "not JSON" in text
    assert "'<html>" in text and "/api/v1/query_range" in text


def test_scalar_result_has_no_series(adapter: PrometheusAdapter, fixtures: Path) -> None:
    with pytest.raises(IngestError, match=r"column 'data.resultType': resultType is 'scalar'"):
        adapter.read(fixtures / "prometheus_scalar.json", IngestOptions())


def test_nan_inf_and_garbled_values(adapter: PrometheusAdapter, fixtures: Path) -> None:
    path = fixtures / "prometheus_bad_values.json"
    with pytest.raises(IngestError) as err:
        adapter.read(path, IngestOptions())
    text = str(err.value)
    assert str(path) in text and "line 1" in text
    assert "column 'data.result[0].values[1][1]'" in text and "value 'NaN'" in text
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="node-1",gpu="0",vc="vc6YE"}' in text
    batch = adapter.read(path, IngestOptions(on_error="skip"))
    pd.testing.assert_frame_equal(batch.frame, _frame([
        ("prometheus", "prometheus/vc6YE/gpu_util", "2026-01-05 08:00", 0.4, 1),  # (50+30)/2 %
        ("prometheus", "prometheus/vc6YE/gpu_util", "2026-01-05 08:02", 0.7, 1),
    ]))
    assert [(r.line, r.column, r.raw) for r in batch.rejects] == [
        (1, "data.result[0].values[1][1]", "NaN"),
        (2, "data.result[1].values[1][1]", "+Inf"),
        (2, "data.result[1].values[2][1]", "busy"),
    ]
    assert "is not a finite number" in batch.rejects[1].reason
    assert "is not a number" in batch.rejects[2].reason


def test_gpu_util_outside_0_1_suggests_a_scale(adapter: PrometheusAdapter, tmp_path: Path) -> None:
    path = _write(tmp_path, _matrix({"metric": {"vc": "a"}, "values": [[T0, "87"]]}))
    with pytest.raises(IngestError, match=r"gpu_util must be a fraction 0-1 but is 87.*scale=0.01"):
        adapter.read(path, IngestOptions(extra={"metric": "gpu_util"}))
    frame = adapter.read(path, IngestOptions(extra={"metric": "gpu_util", "scale": "0.01"})).frame
    assert frame["value"].tolist() == [0.87]


def test_bad_samples_and_results(adapter: PrometheusAdapter, tmp_path: Path) -> None:
    path = _write(tmp_path, _matrix(
        {"metric": {"__name__": "up"}, "values": [[T0, "1"], [T0 + 60], ["soon", "1"],
                                                  [1e12, "1"], [True, "1"]]},
        {"metric": {"__name__": "rpc_latency"}, "histograms": [[T0, {"count": "3"}]]},
        "not an object",
    ))
    batch = adapter.read(path, IngestOptions(on_error="skip"))
    assert batch.frame["value"].tolist() == [1.0]
    assert [(r.line, r.column) for r in batch.rejects] == [
        (1, "data.result[0].values[1]"),
        (1, "data.result[0].values[2][0]"),
        (1, "data.result[0].values[3][0]"),
        (1, "data.result[0].values[4][0]"),
        (2, "data.result[1].values"),
        (3, "data.result[2]"),
    ]
    assert "native histogram" in batch.rejects[4].reason


def test_a_body_without_samples_is_refused_saying_so(
    adapter: PrometheusAdapter, tmp_path: Path
) -> None:
    with pytest.raises(IngestError, match=r"no samples to ingest: the response holds no samples "
                       r"\(data.result is empty: no series matched\).*label matchers"):
        adapter.read(_write(tmp_path, _matrix()), IngestOptions())
    with pytest.raises(IngestError, match=r"holds no samples \(its 1 result\(s\) have no values"):
        adapter.read(_write(tmp_path, _matrix({"metric": {"vc": "a"}, "values": []})),
                     IngestOptions(extra={"metric": "gpu_util"}))


def test_a_header_only_body_is_not_called_a_header_only_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = refused(tmp_path / "s.db", _write(tmp_path, _matrix()), "prometheus", capsys)
    assert "the response holds no samples" in message and "header only" not in message


def test_a_sum_of_utilisations_over_1_after_the_scale_says_to_average(
    adapter: PrometheusAdapter, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # sum by (namespace) (DCGM_FI_DEV_GPU_UTIL): two GPUs at 80 % sum to 160
    path = _write(tmp_path, _matrix({"metric": {"namespace": "team-a"}, "values": [
        [T0, "160"], [T0 + 60, "150"]]}))
    options = ("--option", "metric=gpu_util", "--option", "scale=0.01")
    message = refused(tmp_path / "s.db", path, "prometheus", capsys, *options)
    assert "gpu_util must be a fraction 0-1 but is 1.6" in message
    assert "(160 times --option scale=0.01)" in message
    assert "avg by (...) rather than sum by (...)" in message
    assert "another metric" in message and "pass --option scale" not in message
    skipped = refused(tmp_path / "s.db", path, "prometheus", capsys, *options,
                      "--on-error", "skip")
    assert "no samples to ingest: all 2 samples or results are rejected" in skipped
    assert "avg by (...)" in skipped
    # the well-known scale of DCGM_FI_DEV_GPU_UTIL is a scale too
    named = _write(tmp_path, _matrix({"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL"},
                                      "values": [[T0, "130"]]}), "named.json")
    with pytest.raises(IngestError, match=r"130 times the scale of DCGM_FI_DEV_GPU_UTIL.*avg by"):
        adapter.read(named, IngestOptions())


def test_empty_file_and_gzip(adapter: PrometheusAdapter, fixtures: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    with pytest.raises(IngestError, match="empty.json: file is empty"):
        adapter.read(empty, IngestOptions())
    packed = tmp_path / "util.json.gz"
    packed.write_bytes(gzip.compress((fixtures / "prometheus_dcgm_util.json").read_bytes()))
    assert len(adapter.read(packed, IngestOptions()).frame) == 6


def test_bad_options_are_config_errors(adapter: PrometheusAdapter, fixtures: Path) -> None:
    path = fixtures / "prometheus_dcgm_util.json"
    for extra, match in (({"scale": "a lot"}, "scale"), ({"combine": "median"}, "combine"),
                         ({"metric": "gpu/util"}, "metric")):
        with pytest.raises(ConfigError, match=match):
            adapter.read(path, IngestOptions(extra=extra))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["metric", "values", "value", "__name__", "vc", "x"]),
                      children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(data=st.binary(max_size=400))
def test_any_bytes_give_a_batch_or_a_prism_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(data)
    try:
        batch = PrometheusAdapter().read(path, IngestOptions())
    except PrismError:
        return
    assert isinstance(batch, Batch)


@settings(max_examples=150, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(result=st.lists(_JSON, max_size=4), kind=st.sampled_from(["matrix", "vector"]),
       on_error=st.sampled_from(["fail", "skip"]))
def test_any_result_list_gives_a_batch_or_an_ingest_error(
    tmp_path: Path, result: list[object], kind: str, on_error: str
) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"status": "success",
                                "data": {"resultType": kind, "result": result}}))
    try:
        batch = PrometheusAdapter().read(path, IngestOptions(on_error=on_error))  # type: ignore[arg-type]
    except IngestError:
        return
    assert list(batch.frame.columns) == [*SAMPLE_COLUMNS, "_line"]
    assert np.isfinite(batch.frame["value"].to_numpy()).all()
    assert not batch.frame.duplicated(["series_id", "ts"]).any()
