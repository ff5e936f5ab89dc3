"""Pooled plans: exact answers on hand-made VCs, the rolling choice reads only the past, and
the benchmark on the Helios VCs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError
from prism.evaluation.planning import STATIC, score_plans
from prism.evaluation.pooling import pooled_backtest, pooled_scores

PLAN = "plan"


def levels(demand: dict[str, list[list[float]]], plan: float = 10.0,
           static: float = 20.0) -> pd.DataFrame:
    """Hourly steps: ``demand[series][window]`` is each window's values, every level
    ``plan``, the static peak ``static``."""
    rows = []
    for sid, windows in demand.items():
        for w, values in enumerate(windows):
            cutoff = pd.Timestamp("2026-01-01") + pd.Timedelta(days=w)
            for k, v in enumerate(values):
                rows.append({"series_id": sid, "ts": cutoff + pd.Timedelta(hours=k + 1),
                             "cutoff": cutoff, "value": float(v), PLAN: plan,
                             STATIC: static})
    return pd.DataFrame(rows)


def test_the_pool_serves_one_vc_from_what_the_quotas_left() -> None:
    lv = levels({"c/a/gpus_in_use": [[12, 9]], "c/b/gpus_in_use": [[5, 9]]})
    # quotas 10 + 10, a pool of 10 % of 20 = 2 GPUs: a's 2 GPUs over its quota are served
    got = pooled_scores(lv, PLAN, quota=1.0, pool=0.1, freq_s=3600).iloc[0]
    assert got["unmet_gpu_hours"] == 0.0
    assert got["idle_gpu_hours"] == pytest.approx((22 - 17) + (22 - 18))
    assert got["demand_gpu_hours"] == 35.0
    # without the pool a's 2 GPUs are unmet, while b's 5 idle GPUs are not lendable
    alone = pooled_scores(lv, PLAN, quota=1.0, pool=0.0, freq_s=3600).iloc[0]
    assert alone["unmet_gpu_hours"] == 2.0
    assert alone["idle_gpu_hours"] == pytest.approx((0 + 5) + (1 + 1))
    # smaller quotas: each VC's own GPUs are 8; the pool of 1 GPU covers part of the excess
    small = pooled_scores(lv, PLAN, quota=0.8, pool=0.05, freq_s=3600).iloc[0]
    assert small["unmet_gpu_hours"] == pytest.approx((4 - 1) + (2 - 1))
    # capped at capacity: a has 9 GPUs, so its quota and its share of the pool shrink
    capped = pooled_scores(lv, PLAN, quota=1.0, pool=0.1, freq_s=3600,
                           capacity={"c/a/gpus_in_use": 9.0}).iloc[0]
    assert capped["unmet_gpu_hours"] == pytest.approx(3 - 1.9)


def test_without_a_pool_it_is_the_per_series_plan() -> None:
    rng = np.random.default_rng(0)
    demand = {f"c/vc{i}/gpus_in_use": [list(rng.integers(0, 15, 24)) for _ in range(3)]
              for i in range(4)}
    lv = levels(demand)
    pooled = pooled_scores(lv, PLAN, quota=1.0, pool=0.0, freq_s=3600)
    per_series = score_plans(lv, [PLAN], freq_s=3600)
    for col in ("idle_gpu_hours", "unmet_gpu_hours", "demand_gpu_hours",
                "static_idle_gpu_hours"):
        assert pooled[col].sum() == pytest.approx(per_series[col].sum())


def test_each_window_is_planned_from_the_windows_before_it_only() -> None:
    quiet, spike = [5.0] * 4, [5.0, 5.0, 16.0, 5.0]
    demand = {"c/a/gpus_in_use": [quiet, quiet, spike], "c/b/gpus_in_use": [quiet] * 3}
    result = pooled_backtest(levels(demand), PLAN, freq_s=3600, train=2,
                             quotas=(0.6, 1.0), pools=(0.0, 0.5))
    (window,) = result.windows.itertuples()
    # on the quiet windows 6 GPUs each and no pool met every demand and saved the most; the
    # spike of the third window (which a pool would have served) is not seen by the choice
    assert (window.quota, window.pool) == (0.6, 0.0)
    assert window.unmet_gpu_hours == 10.0
    assert result.unmet_share == pytest.approx(10.0 / (31.0 + 20.0))
    # a spike in a training window steers the next choice to a pool that serves it
    result = pooled_backtest(levels({"c/a/gpus_in_use": [quiet, spike, quiet],
                                     "c/b/gpus_in_use": [quiet] * 3}), PLAN, freq_s=3600,
                             train=2, quotas=(0.6, 1.0), pools=(0.0, 0.5))
    assert result.windows["pool"].tolist() == [0.5]


def test_bad_settings_say_what_to_give() -> None:
    lv = levels({"c/a/gpus_in_use": [[1.0, 2.0]] * 2})
    with pytest.raises(ConfigError, match="2 windows.*train=2"):
        pooled_backtest(lv, PLAN, freq_s=3600, train=2)
    with pytest.raises(ConfigError, match="quota 1.5"):
        pooled_scores(lv, PLAN, quota=1.5, pool=0.0, freq_s=3600)


def test_the_benchmark_pools_the_helios_vcs(traces: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from evaluation.benchmarks.planning import RESULTS
    from evaluation.benchmarks.pooling import main

    # beside the planning benchmark's frontier, the pooled point is drawn over it
    (tmp_path / "planning_frontier.csv").write_bytes(
        (RESULTS / "planning_frontier.csv").read_bytes())
    assert main(["--traces", str(traces / "helios_earth_vc"), "--output", str(tmp_path)]) == 0
    assert (tmp_path / "pooling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    # the per-VC row is the planning benchmark's day-kind peak (30.7 % at 0.23 %)
    assert "per VC: the day-kind peak         30.7         0.23" in out
    days = pd.read_csv(tmp_path / "pooling.csv")
    assert len(days) == 7
    saved = 1 - days["idle_gpu_hours"].sum() / days["static_idle_gpu_hours"].sum()
    unmet = days["unmet_gpu_hours"].sum() / days["demand_gpu_hours"].sum()
    assert saved > 0.307 and unmet <= 0.003
    assert "| pooled: quota and pool chosen on the days before |" in (
        tmp_path / "pooling.md").read_text()


def test_the_track_record_scores_a_served_pool_as_the_benchmark_does() -> None:
    # the same quotas and pool, replayed by the benchmark (pooled_scores) and served, kept and
    # scored by the track record (prism.track_record): the same unmet and idle GPU-hours
    from prism.track_record import POOL_SCOPE
    from prism.track_record import score_plans as score_served

    rng = np.random.default_rng(3)
    vcs = [f"c/vc{i}/gpus_in_use" for i in range(4)]
    lv = levels({sid: [list(rng.integers(0, 16, 24)) for _ in range(3)] for sid in vcs})
    planned = {sid: 8.0 + 2 * i for i, sid in enumerate(vcs)}
    lv[PLAN] = lv["series_id"].map(planned)
    quota, pool = 0.8, 0.1
    replay = pooled_scores(lv, PLAN, quota=quota, pool=pool, freq_s=3600)
    # the series as stored: a day before the first window (yesterday's peak), then the windows
    before = pd.concat([pd.DataFrame({"series_id": sid, "value": rng.integers(0, 16, 24),
                                      "ts": pd.date_range("2025-12-31 01:00", periods=24,
                                                          freq="h")}) for sid in vcs])
    panel = pd.concat([before, lv[["series_id", "ts", "value"]]], ignore_index=True)
    rows = []
    for _, window in lv.groupby("cutoff"):
        start, end = window["ts"].min(), window["ts"].max() + pd.Timedelta(hours=1)
        shared = {"cluster": "c", "model": "p pool", "quantile": 0.95, "valid_from": start,
                  "valid_to": end}
        rows += [{**shared, "scope": sid.split("/")[1], "series_id": sid,
                  "gpus_planned": quota * planned[sid]} for sid in vcs]
        rows.append({**shared, "scope": POOL_SCOPE, "series_id": None,
                     "gpus_planned": pool * sum(planned.values())})
    served = score_served(pd.DataFrame(rows), panel, freq_s=3600).sort_values("valid_from")
    assert len(served) == 3 and (served["scope"] == POOL_SCOPE).all()
    np.testing.assert_allclose(served["unmet_gpu_hours"], replay["unmet_gpu_hours"])
    np.testing.assert_allclose(served["idle_gpu_hours"], replay["idle_gpu_hours"])
    np.testing.assert_allclose(served["in_use_gpu_hours"], replay["demand_gpu_hours"])
    assert replay["unmet_gpu_hours"].sum() > 0  # the pool ran short somewhere: not trivial
