"""Hierarchical reconciliation: levels add up, and MinT uses the error covariance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError, DataContractError
from prism.forecasters import get_forecaster
from prism.reconcile import (
    check_complete,
    hierarchy,
    incomplete_groupings,
    one_step_residuals,
    reconcile,
    shrunk_covariance,
)

STEP = pd.Timedelta("10min")


def _cluster_panel(days: int = 12, seed: int = 0) -> pd.DataFrame:
    """Two VCs and two GPU types of one cluster whose scopes add up to the total."""
    rng = np.random.default_rng(seed)
    n = 144 * days
    t = np.arange(n)
    vc_a = 40 + 10 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 2, n)
    vc_b = 20 + rng.normal(0, 4, n).cumsum() * 0.05
    v100 = 0.7 * vc_a + 0.2 * vc_b
    a100 = vc_a + vc_b - v100
    ts = pd.date_range("2026-02-02", periods=n, freq=STEP)
    series = {"c/all/gpus_in_use": vc_a + vc_b, "c/vcA/gpus_in_use": vc_a,
              "c/vcB/gpus_in_use": vc_b, "c/gpu:V100/gpus_in_use": v100,
              "c/gpu:A100/gpus_in_use": a100, "c/all/gpu_util": np.full(n, 0.5)}
    return pd.concat([pd.DataFrame({"series_id": k, "ts": ts, "value": v})
                      for k, v in series.items()], ignore_index=True)


def test_hierarchy_is_read_from_the_series_ids() -> None:
    ids = ["c/all/gpus_in_use", "c/vcA/gpus_in_use", "c/gpu:V100/gpus_in_use",
           "c/vcB/gpus_in_use", "c/all/gpu_util", "c/vcA/gpu_util", "d/vcA/gpus_in_use"]
    assert hierarchy(ids) == {"c/all/gpus_in_use": [["c/vcA/gpus_in_use", "c/vcB/gpus_in_use"],
                                                    ["c/gpu:V100/gpus_in_use"]]}


@pytest.mark.parametrize("method", ["bottom_up", "mint_shrink"])
def test_reconciled_levels_add_up(method: str) -> None:
    panel = _cluster_panel()
    model = get_forecaster("ets", season="1d").fit(panel)
    raw = model.predict("6h", (0.1, 0.5, 0.9))
    out = reconcile(raw, method=method, residuals=one_step_residuals(model))
    wide = out.pivot(index="ts", columns="series_id", values="mean")
    total = wide["c/all/gpus_in_use"]
    np.testing.assert_allclose(wide["c/vcA/gpus_in_use"] + wide["c/vcB/gpus_in_use"], total)
    np.testing.assert_allclose(wide["c/gpu:V100/gpus_in_use"] + wide["c/gpu:A100/gpus_in_use"],
                               total, rtol=1e-9)
    # the raw forecasts did not add up, a ratio metric is left alone, quantiles stay ordered
    raw_wide = raw.pivot(index="ts", columns="series_id", values="mean")
    assert not np.allclose(raw_wide["c/vcA/gpus_in_use"] + raw_wide["c/vcB/gpus_in_use"],
                           raw_wide["c/all/gpus_in_use"])
    util = out[out["series_id"] == "c/all/gpu_util"]
    pd.testing.assert_frame_equal(util, raw[raw["series_id"] == "c/all/gpu_util"])
    assert (out["p10"] <= out["p50"]).all() and (out["p50"] <= out["p90"]).all()
    assert list(out.columns) == list(raw.columns) and len(out) == len(raw)


def test_bottom_up_keeps_the_members_and_sums_them() -> None:
    ts = pd.date_range("2026-01-01", periods=2, freq=STEP)
    rows = [("c/all/gpus_in_use", [10.0, 10.0]), ("c/vcA/gpus_in_use", [3.0, 4.0]),
            ("c/vcB/gpus_in_use", [5.0, 5.0])]
    frame = pd.concat([pd.DataFrame({"series_id": s, "ts": ts, "model": "m", "mean": v,
                                     "p90": np.array(v) + 1}) for s, v in rows])
    out = reconcile(frame, method="bottom_up")
    got = out.set_index(["series_id", "ts"])["mean"]
    assert got["c/all/gpus_in_use"].tolist() == [8.0, 9.0]
    assert got["c/vcA/gpus_in_use"].tolist() == [3.0, 4.0]
    assert out.set_index(["series_id", "ts"])["p90"]["c/all/gpus_in_use"].tolist() == [9.0, 10.0]


def test_mint_trusts_the_series_with_the_smaller_errors() -> None:
    # Total 10, members 3 + 5 = 8: the gap of 2 goes mostly to the member whose errors are
    # large; the precise total and member barely move.
    ts = pd.date_range("2026-01-01", periods=1, freq=STEP)
    frame = pd.concat([pd.DataFrame({"series_id": s, "ts": ts, "model": "m", "mean": [v]})
                       for s, v in [("c/all/gpus_in_use", 10.0), ("c/vcA/gpus_in_use", 3.0),
                                    ("c/vcB/gpus_in_use", 5.0)]])
    rng = np.random.default_rng(0)
    times = pd.date_range("2025-12-01", periods=400, freq=STEP)
    noisy = rng.normal(0, 5, 400)
    calm = rng.normal(0, 0.1, 400)
    resid = pd.concat([pd.DataFrame({"series_id": s, "ts": times, "value": v}) for s, v in [
        ("c/all/gpus_in_use", calm + noisy * 0.0 + rng.normal(0, 0.1, 400)),
        ("c/vcA/gpus_in_use", calm), ("c/vcB/gpus_in_use", noisy)]])
    got = reconcile(frame, method="mint_shrink", residuals=resid).set_index("series_id")["mean"]
    assert got["c/vcA/gpus_in_use"] == pytest.approx(3.0, abs=0.05)
    assert got["c/vcB/gpus_in_use"] == pytest.approx(7.0, abs=0.1)
    assert got["c/all/gpus_in_use"] == pytest.approx(got["c/vcA/gpus_in_use"]
                                                     + got["c/vcB/gpus_in_use"])


def test_shrinkage_is_between_the_sample_and_the_diagonal() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 5))
    x[:, 1] += 0.8 * x[:, 0]
    shrunk = shrunk_covariance(x)
    sample = np.cov(x.T, bias=True)
    np.testing.assert_allclose(np.diag(shrunk), np.diag(sample))
    assert abs(shrunk[0, 1]) < abs(sample[0, 1])
    assert np.all(np.linalg.eigvalsh(shrunk) > 0)


def test_bad_method_and_missing_residuals() -> None:
    frame = pd.DataFrame({"series_id": ["c/all/gpus_in_use"], "ts": [pd.Timestamp(0)],
                          "model": ["m"], "mean": [1.0]})
    with pytest.raises(ConfigError, match="bottom_up, mint_shrink"):
        reconcile(frame, method="top_down")
    with pytest.raises(ConfigError, match="residuals"):
        reconcile(frame, method="mint_shrink")


STORED = ["c/all/gpus_in_use", "c/vcA/gpus_in_use", "c/vcB/gpus_in_use", "c/vcC/gpus_in_use",
          "c/gpu:V100/gpus_in_use", "c/gpu:A100/gpus_in_use", "c/all/gpu_util",
          "c/vcA/gpu_util", "d/all/gpus_in_use", "d/vcA/gpus_in_use"]


def test_a_total_with_part_of_a_grouping_is_found_and_refused() -> None:
    total = "c/all/gpus_in_use"
    # whole groupings (or none of one) are fine; a ratio metric has no hierarchy
    for named in ([total, "c/vcA/gpus_in_use", "c/vcB/gpus_in_use", "c/vcC/gpus_in_use"],
                  [total, "c/gpu:V100/gpus_in_use", "c/gpu:A100/gpus_in_use"],
                  [total], ["c/vcA/gpus_in_use"], ["c/all/gpu_util", "c/vcA/gpu_util"], STORED):
        assert incomplete_groupings(named, STORED) == {}, named
        check_complete(named, STORED)
    assert incomplete_groupings([total, "c/vcA/gpus_in_use", "c/gpu:V100/gpus_in_use",
                                 "d/all/gpus_in_use", "d/vcA/gpus_in_use"], STORED) == {
        total: ["c/gpu:A100/gpus_in_use", "c/vcB/gpus_in_use", "c/vcC/gpus_in_use"]}
    with pytest.raises(DataContractError) as caught:
        check_complete([total, "c/vcA/gpus_in_use"], STORED)
    message = str(caught.value)
    assert "cannot reconcile 'c/all/gpus_in_use' with only some of its VC series" in message
    assert "'c/vcB/gpus_in_use', 'c/vcC/gpus_in_use' are missing" in message
    assert "Name them too, or forecast the whole cluster with --cluster c" in message
    with pytest.raises(DataContractError, match="GPU-type series: 'c/gpu:A100/gpus_in_use' is"):
        check_complete([total, "c/gpu:V100/gpus_in_use"], STORED)


def test_reconcile_refuses_part_of_a_hierarchy_the_store_holds() -> None:
    ts = pd.date_range("2026-01-01", periods=2, freq=STEP)
    frame = pd.concat([pd.DataFrame({"series_id": s, "ts": ts, "model": "m", "mean": v})
                       for s, v in [("c/all/gpus_in_use", [10.0, 10.0]),
                                    ("c/vcA/gpus_in_use", [3.0, 4.0])]])
    # without the store's series the two are taken for the whole hierarchy (as before)
    assert reconcile(frame, method="bottom_up")["mean"].tolist()[:2] == [3.0, 4.0]
    with pytest.raises(DataContractError, match="'c/vcB/gpus_in_use', 'c/vcC/gpus_in_use'"):
        reconcile(frame, method="bottom_up", stored=STORED)


def test_members_that_end_apart_from_their_total_are_named() -> None:
    ts = pd.date_range("2026-01-01", periods=3, freq=STEP)
    frame = pd.concat([pd.DataFrame({"series_id": s, "ts": t, "model": "m", "mean": 1.0})
                       for s, t in [("c/all/gpus_in_use", ts), ("c/vcA/gpus_in_use", ts),
                                    ("c/vcB/gpus_in_use", ts - 2 * STEP)]])
    with pytest.raises(DataContractError) as caught:
        reconcile(frame, method="bottom_up")
    message = str(caught.value)
    assert ("the forecast of 'c/vcB/gpus_in_use' covers 2025-12-31 23:40 to 2026-01-01 00:00 "
            "but that of its total 'c/all/gpus_in_use' covers 2026-01-01 00:00 to "
            "2026-01-01 00:20") in message
    assert "end at different times" in message and "without --reconcile" in message
