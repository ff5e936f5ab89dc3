"""The job-aware forecast (release of running jobs + arrivals): oracles and causality."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.forecasters.release import (
    JobReleaseModel,
    ShrunkSurvival,
    _alive_after,
    kaplan_meier,
)
from prism.store import Store

T = pd.Timestamp("2026-01-10 12:00")
MIN = pd.Timedelta(minutes=1)
HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
F = 600  # 10-minute buckets


def _jobs(rows: list[tuple[float, pd.Timestamp | None, pd.Timestamp | None, pd.Timestamp | None]]
          ) -> pd.DataFrame:
    """``(num_gpus, submit, start, end)`` rows -> a jobs frame."""
    frame = pd.DataFrame(rows, columns=["num_gpus", "submit_ts", "start_ts", "end_ts"])
    for col in ("submit_ts", "start_ts", "end_ts"):
        frame[col] = pd.to_datetime(frame[col]).astype("datetime64[ns]")
    frame["num_gpus"] = frame["num_gpus"].astype("float64")
    return frame


def _hour_long_history() -> list[tuple[float, pd.Timestamp, pd.Timestamp, pd.Timestamp]]:
    """21 finished jobs of 1, 2 or 4 GPUs (every size class has ends), all of exactly 60
    minutes, the day before ``T``."""
    starts = [T - DAY + i * 30 * MIN for i in range(21)]
    return [(float(2 ** (i % 3)), s, s, s + HOUR) for i, s in enumerate(starts)]


# -- Kaplan-Meier -------------------------------------------------------------------------------
def test_kaplan_meier_matches_a_hand_computed_censored_example() -> None:
    # durations 1 2 2+ 3 4+ 5 ("+": censored). At risk / ended at each end time:
    # t=1: 6/1 -> 5/6; t=2: 5/1 -> 5/6*4/5 = 2/3; t=3: 3/1 -> 2/3*2/3 = 4/9; t=5: 1/1 -> 0
    curve = kaplan_meier([3, 1, 2, 2, 4, 5], [True, True, True, False, False, True])
    np.testing.assert_array_equal(curve.times, [1, 2, 3, 5])
    np.testing.assert_allclose(curve.survival, [5 / 6, 2 / 3, 4 / 9, 0.0])
    np.testing.assert_allclose(curve([0.5, 1, 2, 2.5, 4.5, 10]),
                               [1, 5 / 6, 2 / 3, 2 / 3, 4 / 9, 0])
    assert curve.n == 6
    # inverse: the first duration at which S falls to the level (for drawing durations)
    whole = ShrunkSurvival((1.0,), (curve,))
    np.testing.assert_allclose(whole.inverse([0.9, 5 / 6, 0.5, 0.0]), [1, 1, 3, 5])
    never = ShrunkSurvival((1.0,), (kaplan_meier([1.0], [False]),))
    assert np.isinf(never.inverse([0.5])).all()


def test_kaplan_meier_without_ends_and_bad_input() -> None:
    curve = kaplan_meier([1.0, 2.0], [False, False])
    np.testing.assert_array_equal(curve([0, 5, 1e9]), [1, 1, 1])
    with pytest.raises(DataContractError, match="one observed flag per duration"):
        kaplan_meier([1.0, 2.0], [True])
    with pytest.raises(DataContractError, match=">= 0"):
        kaplan_meier([-1.0], [True])


def test_the_model_estimates_kaplan_meier_with_running_jobs_censored() -> None:
    # ended: 10 and 30 min; running at T: aged 20 min (censored at 20)
    jobs = _jobs([(1, T - 2 * HOUR, T - 2 * HOUR, T - 2 * HOUR + 10 * MIN),
                  (1, T - HOUR, T - HOUR, T - 30 * MIN),
                  (1, T - 20 * MIN, T - 20 * MIN, T + 5 * HOUR)])
    model = JobReleaseModel(shrinkage=0.0).fit(jobs, F)
    small = model.survival_at(T)[0]
    # t=10 min: 3 at risk, 1 ends -> 2/3; t=30 min: 1 at risk (20 censored) -> 0
    np.testing.assert_allclose(small(np.array([5, 10, 20, 29, 30]) * 60.0),
                               [1, 2 / 3, 2 / 3, 2 / 3, 0])


# -- release oracle --------------------------------------------------------------------------
def _release_trace() -> pd.DataFrame:
    # history: every job lasts exactly 60 min; running at T: 1, 2 and 4 GPUs aged 10, 30, 50 min
    running = [(1.0, T - 10 * MIN, T - 10 * MIN, T + 50 * MIN),
               (2.0, T - 30 * MIN, T - 30 * MIN, T + 30 * MIN),
               (4.0, T - 50 * MIN, T - 50 * MIN, T + 10 * MIN)]
    return _jobs([*_hour_long_history(), *running])


@pytest.mark.parametrize("estimate", ["mean", "median"])
def test_jobs_of_a_fixed_duration_release_as_a_known_step_down(estimate: str) -> None:
    jobs = _release_trace()
    common = {"arrivals": "none", "estimate": estimate, "cap": False}
    end = JobReleaseModel(point="end", **common).fit(jobs, F)  # type: ignore[arg-type]
    # at each bucket end: the 4-GPU job (50 min old) is gone at +10 min, the 2-GPU at +30,
    # the 1-GPU at +50
    np.testing.assert_allclose(end.forecast([T], 7)[0], [3, 3, 1, 1, 0, 0, 0])
    mean = JobReleaseModel(point="mean", **common).fit(jobs, F)  # type: ignore[arg-type]
    # bucket means: each job holds its GPUs for whole buckets, up to its end
    np.testing.assert_allclose(mean.forecast([T], 7)[0], [7, 3, 3, 1, 1, 0, 0])
    np.testing.assert_allclose(mean.nowcast([T]), [7.0])


def test_arrivals_repeat_the_same_time_of_day() -> None:
    # one 1-GPU job of 60 min started 5 min after T's time of day on each of the last 7 days
    history = [(1.0, T - d * DAY + 5 * MIN, T - d * DAY + 5 * MIN, T - d * DAY + 65 * MIN)
               for d in range(1, 8)]
    jobs = _jobs(history)
    model = JobReleaseModel(arrivals="daily", estimate="mean", point="end", cap=False)
    release, arrivals = model.fit(jobs, F).forecast_parts([T], 8)
    np.testing.assert_allclose(release[0], 0.0)
    # one GPU a day in the first bucket, spread over it (mean start +5 min), lives 60 min
    np.testing.assert_allclose(arrivals[0], [1, 1, 1, 1, 1, 1, 0, 0])


def test_a_full_vc_refills_from_its_queue() -> None:
    # capacity 4 (the most ever held), 4 one-GPU jobs of 60 min running, aged 50, 40, 20 and
    # 10 min; 2 one-GPU jobs waiting for 30 min (earlier jobs waited up to 3 h)
    history = []
    for d in (1, 2, 3):
        day = T - d * DAY - 10 * HOUR
        history += [(1.0, day, day, day + HOUR)] * 2
        history += [(1.0, day, day + 3 * HOUR, day + 4 * HOUR)] * 2
    running = [(1.0, T - a * MIN, T - a * MIN, T + (60 - a) * MIN) for a in (50, 40, 20, 10)]
    waiting = [(1.0, T - 30 * MIN, T + 5 * HOUR, T + 6 * HOUR)] * 2
    jobs = _jobs(history + running + waiting)
    for arrivals in ("queue", "auto"):
        for estimate in ("mean", "median"):
            model = JobReleaseModel(arrivals=arrivals, estimate=estimate,  # type: ignore[arg-type]
                                    point="end").fit(jobs, F)
            # +10: one ends, one waiting starts; +20 likewise; +40, +50: nothing left to start
            np.testing.assert_allclose(model.forecast([T], 6)[0], [4, 4, 4, 3, 2, 2])
    daily = JobReleaseModel(arrivals="daily", estimate="mean", point="end").fit(jobs, F)
    np.testing.assert_allclose(daily.forecast([T], 6)[0], [3, 2, 2, 1, 0, 0])


def test_the_share_still_running_is_read_per_lag_on_even_offsets() -> None:
    # A queued job started at offset j is still running at offset i with the curves' share
    # at age offsets[i] - offsets[j]. On the model's even offsets that is read once per lag
    # (a Toeplitz matrix); it must equal the entry-by-entry reading, and uneven offsets take
    # that reading.
    short = kaplan_meier([600.0, 900.0, 1200.0, 4000.0], [True, True, False, True])
    long = kaplan_meier([3000.0, 7200.0, 9000.0], [True, True, True])
    curves = [ShrunkSurvival((1.0,), (short,)), ShrunkSurvival((0.3, 0.7), (short, long))]
    mix = np.array([0.4, 0.6])

    def direct(offsets: np.ndarray) -> np.ndarray:
        age = np.maximum(offsets[:, None] - offsets[None, :], 0.0)
        return np.tril(sum(w * c(age) for w, c in zip(mix, curves, strict=True)))

    even = JobReleaseModel(sub_steps=4).fit(_jobs(_hour_long_history()), F)._offsets(36)
    alive = _alive_after(even, mix, curves)
    np.testing.assert_array_equal(alive, direct(even))
    assert alive[5, 5] == pytest.approx(1.0) and alive[0, 5] == 0.0
    assert alive[-1, 0] < alive[-1, -2]  # older starts have ended more
    uneven = np.array([150.0, 450.0, 1000.0, 5000.0])
    np.testing.assert_array_equal(_alive_after(uneven, mix, curves), direct(uneven))


# -- causality -------------------------------------------------------------------------------
def _random_trace(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 600
    submit = T - 6 * DAY + pd.to_timedelta(rng.uniform(0, 7 * 86400, n), unit="s")
    wait = pd.to_timedelta(rng.exponential(600, n), unit="s")
    run = pd.to_timedelta(rng.lognormal(7.5, 1.2, n), unit="s")
    gpus = rng.choice([0.5, 1, 2, 4, 8, 16], n)
    start = submit + wait
    return _jobs(list(zip(gpus, submit, start, start + run, strict=True)))


def _after(jobs: pd.DataFrame, t: pd.Timestamp, seed: int) -> pd.DataFrame:
    """The same trace with everything unknown at ``t`` changed: later ends and starts moved,
    jobs submitted later replaced by others."""
    rng = np.random.default_rng(seed)
    out = jobs.copy()
    later_end = out["end_ts"] > t
    out.loc[later_end, "end_ts"] = t + pd.to_timedelta(
        rng.uniform(1, 86400, int(later_end.sum())), unit="s")
    later_start = out["start_ts"] > t
    out.loc[later_start, "start_ts"] = t + pd.to_timedelta(
        rng.uniform(1, 3600, int(later_start.sum())), unit="s")
    out.loc[later_start, "end_ts"] = out.loc[later_start, "start_ts"] + HOUR
    kept = out[out["submit_ts"] <= t]
    extra = _jobs([(64.0, t + MIN, t + 2 * MIN, t + 3 * HOUR)] * 5)
    return pd.concat([kept, extra], ignore_index=True).sample(frac=1.0, random_state=seed)


@pytest.mark.parametrize("params", [{}, {"estimate": "mean"}, {"arrivals": "recent"},
                                    {"arrivals": "queue", "estimate": "mean"}])
def test_changing_what_happens_after_the_origin_changes_nothing(params: dict[str, str]) -> None:
    jobs = _random_trace(1)
    reference = _random_trace(2)
    origins = [T - DAY, T - 6 * HOUR, T]
    first = pd.Timestamp("2026-01-04")
    base = JobReleaseModel(n_samples=50, **params).fit(  # type: ignore[arg-type]
        jobs, F, reference=reference, observed_from=first).forecast(origins, 36)
    assert np.isfinite(base).all() and (base >= 0).all()
    for i, t in enumerate(origins):
        other = JobReleaseModel(n_samples=50, **params).fit(  # type: ignore[arg-type]
            _after(jobs, t, 3), F, reference=_after(reference, t, 4), observed_from=first)
        np.testing.assert_array_equal(other.forecast([t], 36)[0], base[i])


def test_the_forecast_from_the_store_as_known_then_is_the_same(store: Store) -> None:
    jobs = _random_trace(5)
    jobs["cluster"], jobs["scope"], jobs["job_id"] = "c", "vc1", [f"j{i}" for i in range(len(jobs))]
    store.insert_frame("jobs", jobs, ["cluster", "scope", "job_id", "num_gpus", "submit_ts",
                                      "start_ts", "end_ts"])
    first = pd.Timestamp("2026-01-04")
    full = JobReleaseModel(n_samples=50).fit(store.load_jobs("c", "vc1"), F,
                                             observed_from=first)
    then = JobReleaseModel(n_samples=50).fit(store.load_jobs("c", "vc1", until=T), F,
                                             observed_from=first)
    np.testing.assert_array_equal(full.forecast([T], 36), then.forecast([T], 36))


# -- the rest of the contract ----------------------------------------------------------------
def test_quantiles_are_ordered_and_the_simulated_mean_is_the_expectation() -> None:
    jobs = _random_trace(7)
    model = JobReleaseModel(n_samples=2000, arrivals="daily", cap=False).fit(jobs, F)
    qs = model.forecast_quantiles([T], 36, [0.1, 0.5, 0.9])[0]
    assert (np.diff(qs, axis=1) >= -1e-9).all()
    expected = JobReleaseModel(estimate="mean", arrivals="daily", cap=False).fit(
        jobs, F).forecast([T], 36)[0]
    # the median and the mean of a sum of many jobs are close; the 80 % band holds the mean
    assert ((qs[:, 0] <= expected + 1e-9) & (expected <= qs[:, 2] + 1e-9)).mean() > 0.9


def test_predict_before_fit_and_bad_settings() -> None:
    with pytest.raises(NotFittedError):
        JobReleaseModel().forecast([T], 6)
    jobs = _release_trace()
    with pytest.raises(ConfigError, match="arrivals"):
        JobReleaseModel(arrivals="weekly").fit(jobs, F)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="steps"):
        JobReleaseModel().fit(jobs, F).forecast([T], 0)
    with pytest.raises(DataContractError, match="start_ts"):
        JobReleaseModel().fit(jobs.drop(columns="start_ts"), F)
    with pytest.raises(DataContractError, match="submit_ts"):
        JobReleaseModel(arrivals="queue").fit(jobs.drop(columns="submit_ts"), F)
