"""Reference tests: the SQL derivation against independent pandas computations on real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.ingest.pipeline import ingest
from prism.store import Store


def test_alibaba_v2023_gpu_seconds_match_pandas(store: Store, traces: Path) -> None:
    path = traces / "alibaba_gpu" / "v2023_openb_pod_list_default.csv.gz"
    ingest(store, [path], "alibaba-pods")
    series = store.load_panel(["alibaba-v2023/all/gpus_in_use"])
    # The documented window: 10,000,800 s to the last deletion, in 10-minute buckets.
    assert len(series) == 4836
    origin = pd.Timestamp("2023-01-01")
    lo = series["ts"].min()
    hi = series["ts"].max() + pd.Timedelta("10min")
    assert lo == origin + pd.Timedelta(seconds=10_000_800)
    assert hi == origin + pd.Timedelta(seconds=12_902_400)

    pods = pd.read_csv(path).dropna(subset=["scheduled_time"])
    gpus = pods.num_gpu * np.where(pods.num_gpu == 1, pods.gpu_milli / 1000, 1)
    t0, t1 = (lo - origin).total_seconds(), (hi - origin).total_seconds()
    held = (pods.deletion_time.clip(upper=t1) - pods.scheduled_time.clip(lower=t0)).clip(lower=0)
    expected = float((gpus * held).sum())
    assert series["value"].sum() * 600 == pytest.approx(expected, rel=1e-9)
    # The figures the trace's README reports for this window.
    assert series["value"].mean() == pytest.approx(36.2, abs=0.05)
    assert series["value"].std() == pytest.approx(7.1, abs=0.05)


def test_helios_vc6ye_matches_pandas_resample(store: Store, traces: Path) -> None:
    path = traces / "helios_earth_vc" / "earth_vc6YE_1min.csv.gz"
    ingest(store, [path], "helios-vc")
    h = pd.read_csv(path, parse_dates=["time"], index_col="time")
    for metric, expected in (
        ("gpus_in_use", h["running_gpu_num"].resample("10min").mean()),
        ("gpus_pending", h["pending_gpu_num"].resample("10min").mean()),
        ("gpu_demand", (h["running_gpu_num"] + h["pending_gpu_num"]).resample("10min").mean()),
        ("gpu_capacity", h["total_gpu_num"].resample("10min").mean()),
    ):
        got = store.load_panel([f"earth/vc6YE/{metric}"]).set_index("ts")["value"]
        assert len(got) == len(expected) == 4464
        np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=0, atol=1e-9)
        assert (got.index == expected.index).all()
    assert store.list_series(scope="vc6YE")["n_filled"].tolist() == [0, 0, 0, 0]


def test_helios_vc_from_original_layout_and_scope_option(store: Store, traces: Path,
                                                         tmp_path: Path) -> None:
    source = traces / "helios_earth_vc" / "earth_vcgkz_1min.csv.gz"
    original = tmp_path / "Earth_vcs" / "vcgkz" / "cluster_sequence_vc.csv.gz"
    original.parent.mkdir(parents=True)
    original.write_bytes(source.read_bytes())
    ingest(store, [original], "helios-vc")
    assert "earth/vcgkz/gpus_in_use" in store.list_series()["series_id"].tolist()
