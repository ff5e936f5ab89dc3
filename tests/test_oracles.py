"""Oracle tests at the edges: exact, hand-computed answers where an off-by-one gives another.

Each test pins the first or last bucket, an interval's bounds, the step after a cutoff or the
level a method keeps, with the answer worked out by hand in the comments, so a plausible small
bug (a window rounded the wrong way, ``<`` for ``<=``, an actual one step off, the wrong level
summed, a fallback without hysteresis) fails it rather than a property it still satisfies.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from prism.evaluation.metrics import by_step, coverage, evaluate, under_provisioning_rate
from prism.forecasters.base import BaseForecaster, FloatArray
from prism.forecasters.conformal import LEVELS, calibration_offsets
from prism.ingest.base import IngestOptions
from prism.ingest.pipeline import ingest
from prism.reconcile import one_step_residuals, reconcile
from prism.store import Store
from tests import conftest

STEP = pd.Timedelta("10min")
JOBS_HEADER = "job_id,cluster,scope,gpu_type,num_gpus,num_cpus,submit_ts,start_ts,end_ts,status\n"


def _jobs(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(JOBS_HEADER + "".join(f"{r}\n" for r in rows))
    return path


def _series(store: Store, series_id: str) -> tuple[list[pd.Timestamp], list[float]]:
    frame = store.load_panel([series_id])
    return list(frame["ts"]), frame["value"].round(9).tolist()


# -- derive: the window's first and last bucket ---------------------------------------------------
def test_a_half_observed_first_and_last_bucket_are_dropped(store: Store, tmp_path: Path) -> None:
    # One 4-GPU job from 00:05 to 00:45, the only events: the window is [00:05, 00:45), so the
    # whole buckets inside it are [00:10, 00:40): 00:10, 00:20, 00:30, each fully held (4).
    # Rounding the start down would add 00:00 at 2.0 (half a bucket); rounding the end up,
    # 00:40 at 2.0.
    ingest(store, [_jobs(tmp_path, "A,one,,,4,8,2026-01-05T00:05:00,2026-01-05T00:05:00,"
                                   "2026-01-05T00:45:00,COMPLETED")], "jobs-csv")
    ts, values = _series(store, "one/all/gpus_in_use")
    assert ts == list(pd.date_range("2026-01-05 00:10", periods=3, freq=STEP))
    assert values == [4.0, 4.0, 4.0]
    # submitted at 00:05, in the dropped half bucket: no bucket of the window counts it
    assert _series(store, "one/all/jobs_submitted")[1] == [0.0, 0.0, 0.0]
    assert _series(store, "one/all/gpus_pending")[1] == [0.0, 0.0, 0.0]


def test_events_on_bucket_edges(store: Store, tmp_path: Path) -> None:
    # X (2 GPUs) is submitted and starts exactly at 00:10, ends exactly at 00:30; Y (1 GPU) is
    # submitted at 00:20, starts at 00:25 and ends at 00:40. Window [00:10, 00:40): the first
    # submit is on an edge, so 00:10 is a whole bucket and stays; 00:40 is the window's end.
    # in use: X 2, 2, 0 (nothing after its end at the 00:30 edge); Y 0, 0.5, 1.
    # pending: Y from 00:20 to 00:25, half of bucket 00:20.
    ingest(store, [_jobs(
        tmp_path,
        "X,edge,,,2,8,2026-01-05T00:10:00,2026-01-05T00:10:00,2026-01-05T00:30:00,COMPLETED",
        "Y,edge,,,1,8,2026-01-05T00:20:00,2026-01-05T00:25:00,2026-01-05T00:40:00,COMPLETED",
    )], "jobs-csv")
    ts, in_use = _series(store, "edge/all/gpus_in_use")
    assert ts == list(pd.date_range("2026-01-05 00:10", periods=3, freq=STEP))
    assert in_use == [2.0, 2.5, 1.0]
    assert _series(store, "edge/all/gpus_pending")[1] == [0.0, 0.5, 0.0]
    assert _series(store, "edge/all/gpu_demand")[1] == [2.0, 3.0, 1.0]
    # a submission exactly at the window's start counts in its first bucket
    assert _series(store, "edge/all/jobs_submitted")[1] == [1.0, 1.0, 0.0]
    assert _series(store, "edge/all/gpus_submitted")[1] == [2.0, 1.0, 0.0]


def test_a_sample_on_a_bucket_edge_opens_the_next_bucket(store: Store, tmp_path: Path) -> None:
    # Buckets are [start, start + 10 min): 00:09:59 is in 00:00, 00:10:00 in 00:10.
    path = tmp_path / "wide.csv"
    path.write_text("time,gpus_in_use\n2026-01-05 00:00:00,2\n2026-01-05 00:09:59,4\n"
                    "2026-01-05 00:10:00,10\n2026-01-05 00:19:59,20\n")
    ingest(store, [path], "wide-csv", IngestOptions(cluster="c"))
    ts, values = _series(store, "c/all/gpus_in_use")
    assert ts == list(pd.date_range("2026-01-05 00:00", periods=2, freq=STEP))
    assert values == [3.0, 15.0]


# -- the fallback's hysteresis ------------------------------------------------------------------
class _OffsetSeasonalNaive(BaseForecaster):
    """The last day repeated plus ``offset``: on a series rising by exactly 1 a day, the
    seasonal naive fallback's error is 1 at every step and this model's ``1 - offset``."""

    alias = "offset_seasonal_naive"

    def __init__(self, *, offset: float = 0.0) -> None:
        self.offset = offset

    def _fit(self, values: dict[str, FloatArray]) -> None:
        pass

    def _forecast_many(self, series_id: str, history: FloatArray, ends: npt.NDArray[np.int64],
                       steps: int) -> FloatArray:
        season = self._steps_of(self.fallback_season)
        out = np.empty((len(ends), steps))
        for i, e in enumerate(ends):
            last = history[max(e - season, 0):e]
            out[i] = np.resize(last, steps) + self.offset
        return out


def test_the_fallback_enters_above_the_margin_and_leaves_below_half_of_it() -> None:
    sid = "c/all/gpus_in_use"
    n = 1440  # ten days at 10 min; the rolling check looks at the last three
    values = 100.0 + np.arange(n + 4) / 144  # +1 a day: seasonal naive is off by exactly 1
    ts = pd.date_range("2026-01-05", periods=n + 4, freq=STEP)
    panel = pd.DataFrame({"series_id": sid, "ts": ts, "value": values})
    model = _OffsetSeasonalNaive().fit(panel.iloc[:n])
    margin = model.fallback_margin
    states = []
    # rolling MAE 1 + |offset| against the fallback's 1: between the margins, above the full
    # margin, between them again, below half of it
    for i, offset in enumerate([-0.75 * margin, -2.0 * margin, -0.75 * margin, -0.25 * margin]):
        model.offset = offset
        model.update(panel.iloc[[n + i]])
        states.append(sid in model.fallback_)
        if sid in model.fallback_:  # served by the seasonal naive: the last day, repeated
            got = model.predict(3, ())["mean"].to_numpy()
            np.testing.assert_allclose(got, model.history_[sid][-144:-141])
    # out: stays out between the margins; in: stays in between them (hysteresis), leaves
    # below half the margin
    assert states == [False, True, True, False]


# -- coverage at the interval's bounds ----------------------------------------------------------
def test_coverage_counts_actuals_on_either_bound() -> None:
    # Series a: zero demand, forecast clipped to 0 (y = p5 = 0): covered, nothing under.
    # Series b: y = p95 = 3: covered, and not under-provisioned at p95.
    ts = pd.date_range("2026-01-05", periods=4, freq="h")
    panel = pd.concat([
        pd.DataFrame({"series_id": "c/a/gpus_in_use", "ts": ts, "value": [0.0, 1.0, 0.0, 0.0]}),
        pd.DataFrame({"series_id": "c/b/gpus_in_use", "ts": ts, "value": [2.0, 2.0, 2.0, 3.0]}),
    ], ignore_index=True)
    frame = pd.DataFrame({
        "series_id": ["c/a/gpus_in_use", "c/b/gpus_in_use"], "ts": [ts[3], ts[3]],
        "cutoff": [ts[2], ts[2]], "model": "m", "mean": [0.0, 2.0], "p5": [0.0, 1.0],
        "p50": [0.0, 2.0], "p95": [2.0, 3.0], "value": [0.0, 3.0]})
    out = evaluate(frame, panel, season=1).set_index("series_id")
    assert out.loc["c/a/gpus_in_use", "coverage_90"] == 1.0
    assert out.loc["c/b/gpus_in_use", "coverage_90"] == 1.0
    assert out.loc["c/a/gpus_in_use", "width_90"] == 2.0
    assert out.loc["c/b/gpus_in_use", "under_p95"] == 0.0
    assert out.loc["c/b/gpus_in_use", "over_p95"] == 0.0
    assert out.loc["c/a/gpus_in_use", "over_p95"] == 2.0
    # the array metrics agree
    assert coverage([0.0, 3.0], [0.0, 1.0], [2.0, 3.0]) == 1.0
    assert coverage([0.0, 3.0], [0.5, 1.0], [2.0, 2.5]) == 0.0
    assert under_provisioning_rate([3.0, 3.0], [3.0, 2.5]) == 0.5


def test_horizon_steps_count_from_the_cutoff_on_the_series_grid() -> None:
    # Hourly series, cutoff at 04:00, rows at 06:00 and 07:00 only (the step after the cutoff
    # left out, e.g. to score day-two accuracy): they are steps 2 and 3, not 1 and 2.
    ts = pd.date_range("2026-01-05", periods=8, freq="h")
    panel = pd.DataFrame({"series_id": "c/a/m", "ts": ts, "value": np.arange(1.0, 9.0)})
    frame = pd.DataFrame({"series_id": "c/a/m", "ts": ts[6:8], "cutoff": ts[4], "model": "m",
                          "mean": [5.0, 5.0], "value": [7.0, 8.0]})
    out = by_step(frame, panel, season=1).set_index("horizon_step")
    assert list(out.index) == [2, 3]
    assert out.loc[2, "mae"] == 2.0 and out.loc[3, "mae"] == 3.0


# -- conformal offsets: each step's errors against its own actual ------------------------------
def test_calibration_offsets_pair_each_step_with_its_own_actual() -> None:
    # Origin e forecasts from history[:e]: step 1 predicts history[e], step 2 history[e + 1].
    # The forecasts are those actuals minus known errors: at step 1 a permutation of 0..24,
    # at step 2 of 2 * (0..24) - 10. With 25 residuals, np.quantile's level q of 0..24 is
    # 24 q, so the offsets are 24 q at step 1 and 48 q - 10 at step 2. Pairing a forecast
    # with the next (or previous) actual adds history's increments, t + 1/2 here, instead.
    history = np.arange(60, dtype=np.float64) ** 2 / 2
    ends = np.arange(20, 45, dtype=np.int64)
    i = np.arange(25)
    err1 = (7.0 * i) % 25
    err2 = 2.0 * ((3 * i) % 25) - 10.0
    mean = np.stack([history[ends] - err1, history[ends + 1] - err2], axis=1)
    cal = calibration_offsets(history, ends, mean, None, ())
    levels = np.asarray(LEVELS)
    np.testing.assert_allclose(cal.centers, [1.0, 2.0])
    np.testing.assert_array_equal(cal.n_residuals, [25, 25])
    np.testing.assert_allclose(cal.offsets[0], 24 * levels, atol=1e-9)
    np.testing.assert_allclose(cal.offsets[1], 48 * levels - 10, atol=1e-9)
    assert cal.offsets[0][list(LEVELS).index(0.5)] == pytest.approx(12.0)
    np.testing.assert_allclose(cal.one_step, err1)
    np.testing.assert_array_equal(cal.origins, ends)


def test_a_step_past_the_history_is_not_scored() -> None:
    # The last origin's second step would predict history[n], which does not exist: step 2
    # has one residual fewer than step 1 (24 vs 25), and still its own offsets.
    history = np.arange(50, dtype=np.float64) * 3
    ends = np.arange(25, 50, dtype=np.int64)
    nxt = history[np.minimum(ends + 1, 49)]
    mean = np.stack([history[ends] - 1.0, nxt - 2.0], axis=1)
    cal = calibration_offsets(history, ends, mean, None, ())
    np.testing.assert_array_equal(cal.n_residuals, [25, 24])
    np.testing.assert_allclose(cal.offsets, [[1.0] * len(LEVELS), [2.0] * len(LEVELS)])


class _Clairvoyant(BaseForecaster):
    """Knows the future: forecasts the actual of step ``k`` plus ``2 k - 1`` (1, 3, 5, ...)."""

    alias = "clairvoyant"

    def _fit(self, values: dict[str, FloatArray]) -> None:
        pass

    def _forecast_many(self, series_id: str, history: FloatArray, ends: npt.NDArray[np.int64],
                       steps: int) -> FloatArray:
        k = np.arange(1, steps + 1)
        target = np.minimum(ends[:, None] + k[None, :] - 1, len(history) - 1)
        return np.asarray(history[target] + (2 * k - 1)[None, :], dtype=np.float64)


def test_fitted_calibration_is_each_steps_known_error() -> None:
    # Every error at step k is exactly -(2k - 1): each block of one step gets that offset at
    # every level (no spread, so the drift correction around the median changes nothing),
    # and the bands of the forecast are its mean minus it.
    sid = "c/all/gpus_in_use"
    values = (np.arange(300) % 7) * 10.0 + np.arange(300)  # integers: exact differences
    panel = pd.DataFrame({"series_id": sid, "ts": pd.date_range("2026-01-05", periods=300,
                                                                 freq=STEP), "value": values})
    model = _Clairvoyant().fit(panel)
    cal = model.calibration_[sid]
    np.testing.assert_allclose(cal.centers[:4], [1.0, 2.0, 3.0, 4.0])
    for k in range(1, 5):
        np.testing.assert_allclose(cal.offsets[k - 1], -(2 * k - 1), atol=1e-9)
    np.testing.assert_allclose(cal.one_step, -1.0)
    out = model.predict(2, (0.1, 0.9))
    np.testing.assert_allclose(out["p10"], out["mean"] - [1.0, 3.0], atol=1e-9)
    np.testing.assert_allclose(out["p90"], out["mean"] - [1.0, 3.0], atol=1e-9)
    # reconciliation's residuals: the error of the forecast made at ts for ts. The first
    # origin is 200 (the last third held out), so the first residual is at 00:00 + 200 steps.
    resid = one_step_residuals(model)
    assert cal.origins[0] == 200
    assert resid["ts"].iloc[0] == pd.Timestamp("2026-01-05") + 200 * STEP
    assert resid["ts"].iloc[-1] == pd.Timestamp("2026-01-05") + 299 * STEP
    np.testing.assert_allclose(resid["value"], -1.0)


# -- reconciliation: which level each method keeps ----------------------------------------------
def _hierarchy_forecast() -> pd.DataFrame:
    # cluster = VC a + VC b = GPU type t1 + t2; base forecasts that do not add up
    means = {"c/all/gpus_in_use": 20.0, "c/a/gpus_in_use": 6.0, "c/b/gpus_in_use": 8.0,
             "c/gpu:t1/gpus_in_use": 10.0, "c/gpu:t2/gpus_in_use": 5.0,
             "c/all/gpu_util": 0.5}
    ts = pd.Timestamp("2026-01-05 00:10")
    return pd.DataFrame({"series_id": list(means), "ts": ts, "model": "m",
                         "mean": list(means.values()),
                         "p90": [v + 1.0 for v in means.values()]})


def _got(frame: pd.DataFrame, col: str = "mean") -> dict[str, float]:
    return {str(k): float(v) for k, v in frame.set_index("series_id")[col].items()}


def test_bottom_up_keeps_the_vcs_and_splits_the_gap_over_the_gpu_types() -> None:
    got = _got(reconcile(_hierarchy_forecast(), method="bottom_up"))
    # the VCs are kept, the total is their sum 6 + 8 = 14 (not the types' 15, nor 20)
    assert got["c/a/gpus_in_use"] == 6.0 and got["c/b/gpus_in_use"] == 8.0
    assert got["c/all/gpus_in_use"] == 14.0
    # the types' gap 14 - 15 = -1 is split in proportion to them: 10 - 2/3, 5 - 1/3
    assert got["c/gpu:t1/gpus_in_use"] == pytest.approx(10.0 - 2.0 / 3.0)
    assert got["c/gpu:t2/gpus_in_use"] == pytest.approx(5.0 - 1.0 / 3.0)
    assert got["c/all/gpu_util"] == 0.5  # a ratio has no hierarchy
    # quantiles move with their mean
    p90 = _got(reconcile(_hierarchy_forecast(), method="bottom_up"), "p90")
    assert p90["c/all/gpus_in_use"] == 15.0 and p90["c/a/gpus_in_use"] == 7.0


def test_bottom_up_sums_the_gpu_types_when_there_are_no_vcs() -> None:
    frame = _hierarchy_forecast()
    frame = frame[~frame["series_id"].isin(["c/a/gpus_in_use", "c/b/gpus_in_use"])]
    got = _got(reconcile(frame, method="bottom_up"))
    assert got["c/all/gpus_in_use"] == 15.0
    assert got["c/gpu:t1/gpus_in_use"] == 10.0 and got["c/gpu:t2/gpus_in_use"] == 5.0


def test_mint_with_uncorrelated_errors_is_weighted_least_squares() -> None:
    # Residuals: mutually orthogonal +-s columns of a 4 x 4 Hadamard matrix, so every
    # correlation is 0 and W = diag(s^2): total 1, a 1, b 4; types t1 1, t2 4.
    # WLS on total = a + b spreads the gap g = 20 - (6 + 8) = 6 by the variances:
    # a = 6 + 1/6 g = 7, b = 8 + 4/6 g = 12, total = 19. The types then take the gap
    # 19 - 15 = 4 in proportion to their variances: t1 = 10 + 0.8, t2 = 5 + 3.2.
    h = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=float)
    times = pd.date_range("2026-01-01", periods=4, freq=STEP)
    columns = {"c/all/gpus_in_use": h[1], "c/a/gpus_in_use": h[2], "c/b/gpus_in_use": 2 * h[3],
               "c/gpu:t1/gpus_in_use": h[1], "c/gpu:t2/gpus_in_use": 2 * h[2]}
    residuals = pd.concat([pd.DataFrame({"series_id": s, "ts": times, "value": v})
                           for s, v in columns.items()], ignore_index=True)
    got = _got(reconcile(_hierarchy_forecast(), method="mint_shrink", residuals=residuals))
    assert got["c/a/gpus_in_use"] == pytest.approx(7.0)
    assert got["c/b/gpus_in_use"] == pytest.approx(12.0)
    assert got["c/all/gpus_in_use"] == pytest.approx(19.0)
    assert got["c/gpu:t1/gpus_in_use"] == pytest.approx(10.8)
    assert got["c/gpu:t2/gpus_in_use"] == pytest.approx(8.2)


# -- the traces helper ------------------------------------------------------------------------
def test_missing_traces_skip_with_the_download_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conftest, "DEFAULT_TRACES", tmp_path / "nowhere")
    monkeypatch.delenv("PRISM_TRACES_DIR", raising=False)
    monkeypatch.delenv(conftest.REQUIRE_TRACES, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"prism datasets download \$n"):
        conftest.require_traces()
    monkeypatch.setenv(conftest.REQUIRE_TRACES, "1")
    with pytest.raises(pytest.fail.Exception, match="fails instead of skipping"):
        conftest.require_traces()


def test_traces_are_found_through_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conftest, "DEFAULT_TRACES", tmp_path / "nowhere")
    monkeypatch.setenv("PRISM_TRACES_DIR", str(tmp_path))
    for rel in conftest.TRACE_COPIES.values():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    assert conftest.require_traces() == tmp_path
    (tmp_path / conftest.TRACE_COPIES["philly-node-sequence"]).unlink()  # a partial copy
    monkeypatch.delenv(conftest.REQUIRE_TRACES, raising=False)
    with pytest.raises(pytest.skip.Exception, match="lacks helios_earth_vc/philly_node"):
        conftest.require_traces()
