"""The PRISM hybrid: its candidates, its per-window combiner and its switches."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evaluation.benchmarks.shapes import _stairs
from prism.errors import ConfigError
from prism.forecasters import get_forecaster
from prism.forecasters.hybrid import PrismForecaster

STEP = pd.Timedelta("10min")
NO_RNN = {"use_rnn": False, "use_gbm": False}


def _panel(values: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.concat([
        pd.DataFrame({"series_id": sid, "ts": pd.date_range("2026-01-05", periods=len(v),
                                                            freq=STEP), "value": v})
        for sid, v in values.items()], ignore_index=True)


def _square_wave(days: int) -> np.ndarray:
    """Busy 08:00-20:00 (40 GPUs), idle at night (8 GPUs): the same every day."""
    slot = np.arange(144 * days) % 144
    return np.where((slot >= 48) & (slot < 120), 40.0, 8.0)


def test_a_candidate_that_has_been_exact_takes_the_forecast() -> None:
    # On an exactly repeating day the season candidate has made no error in the combiner's
    # window, so the combined forecast is the last day again, bit for bit.
    values = _square_wave(14)
    model = get_forecaster("prism", **NO_RNN).fit(_panel({"c/all/gpus_in_use": values}))
    out = model.predict("1d", (0.1, 0.9))
    np.testing.assert_array_equal(out["mean"].to_numpy(), values[-144:])
    # and the season made no error on the calibration tail either: a zero-width band
    np.testing.assert_allclose(out["p90"] - out["p10"], 0.0, atol=1e-9)


def test_weights_follow_the_recent_regime() -> None:
    # A daily cycle for two weeks, then five days of flat demand: at the end the level
    # candidates have been right and the season wrong, so the forecast is flat; at the end
    # of the cyclic part it was the cycle.
    values = np.concatenate([_square_wave(14), np.full(144 * 5, 20.0)])
    model = PrismForecaster(**NO_RNN, combiner="recent").fit(
        _panel({"c/all/gpus_in_use": values}))
    sid = "c/all/gpus_in_use"
    history = model.history_[sid]
    flat_end = model._forecast_many(sid, history, np.array([len(history)]), 144)[0]
    np.testing.assert_allclose(flat_end, 20.0, atol=1e-6)
    cyclic_end = model._forecast_many(sid, history, np.array([144 * 14]), 144)[0]
    np.testing.assert_allclose(cyclic_end, _square_wave(1), atol=1e-6)


def test_after_a_burst_the_forecast_decays_to_the_base_load() -> None:
    # An idle VC (2 GPUs) with bursts to 30 GPUs that last three hours: right after a burst
    # starts, naive keeps 30 for the whole day; PRISM expects it to end, as past bursts did.
    rng = np.random.default_rng(2)
    values = np.full(144 * 21, 2.0)
    for start in rng.choice(np.arange(100, len(values) - 200), 25, replace=False):
        values[start:start + 18] = 30.0
    values[-3:] = 30.0  # a burst is under way at the end
    panel = _panel({"c/vc1/gpus_in_use": values})
    prism = get_forecaster("prism", **NO_RNN).fit(panel).predict("1d", ())
    mean = prism["mean"].to_numpy()
    assert mean[0] > 25.0  # the burst is still on in ten minutes
    assert mean[36:].max() < 0.2 * 30.0  # six hours later it is over (bursts last three)
    np.testing.assert_allclose(mean[-36:], 2.0, atol=1.0)  # back at the base load
    assert mean[:6].mean() > mean[18:36].mean()  # it decays, it does not jump at once


def test_switches_drop_their_parts() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(144 * 10)
    values = 30 + 10 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 2, len(t))
    panel = _panel({"c/all/gpus_in_use": values})
    full = PrismForecaster(use_spectral=True, **NO_RNN).fit(panel)
    bare = PrismForecaster(use_primitives=False, use_spectral=False, **NO_RNN).fit(panel)
    assert full.dictionary_ is not None and bare.dictionary_ is None
    assert full.rnn_ is None
    assert len(full.state_["c/all/gpus_in_use"].sinusoids[0]) >= 1  # the daily sine
    assert len(bare.state_["c/all/gpus_in_use"].sinusoids[0]) == 0
    assert not np.allclose(full.predict(36, ())["mean"], bare.predict(36, ())["mean"])


def test_the_dictionary_is_learned_once_from_all_series() -> None:
    rng = np.random.default_rng(1)
    values = {f"c/vc{i}/gpus_in_use": 20 + rng.normal(0, 3, 144 * 8).cumsum() * 0.1
              for i in range(3)}
    model = PrismForecaster(**NO_RNN).fit(_panel(values))
    assert model.dictionary_ is not None
    first = model.dictionary_
    one = PrismForecaster(**NO_RNN).fit(_panel({"c/vc0/gpus_in_use": values[
        "c/vc0/gpus_in_use"]}))
    assert one.dictionary_ is not None
    assert not np.allclose(first.atoms_, one.dictionary_.atoms_)  # it saw other windows


def test_the_first_hours_trust_the_recent_best_and_later_blocks_average() -> None:
    # Three candidates whose recent MAE is 1, 1.05 and 2 at every step: up to the trim horizon
    # (6 h) the one more than 1.1x worse than the best gets nothing; beyond it, all three are
    # weighed by MAE^-1.
    panel = _panel({"c/all/gpus_in_use": _square_wave(14)})
    model = PrismForecaster(**NO_RNN, use_primitives=False).fit(panel)
    steps = 144
    origins = np.arange(100, 120, dtype=np.int64)
    end = np.array([int(origins.max()) + steps])
    errors = np.broadcast_to(np.array([1.0, 1.05, 2.0])[:, None, None],
                             (3, len(origins), steps)).copy()
    weights = model._weights(errors, origins, end, model._block_edges(steps))[0]
    np.testing.assert_allclose(weights.sum(axis=0), 1.0)
    early, late = weights[:, 35], weights[:, 36]  # the last step of 6 h, the first after
    assert early[2] == 0.0
    np.testing.assert_allclose(early[:2], np.array([1.0, 1 / 1.05]) / (1.0 + 1 / 1.05))
    inverse = np.array([1.0, 1 / 1.05, 0.5])
    np.testing.assert_allclose(late, inverse / inverse.sum())
    # combiner_trim=inf turns trimming off everywhere; perfect candidates share a block
    untrimmed = PrismForecaster(**NO_RNN, use_primitives=False,
                                combiner_trim=float("inf")).fit(panel)
    weights = untrimmed._weights(errors, origins, end, model._block_edges(steps))[0]
    np.testing.assert_allclose(weights[:, 0], inverse / inverse.sum())
    errors[:2] = 0.0
    for fitted in (model, untrimmed):
        weights = fitted._weights(errors, origins, end, model._block_edges(steps))[0]
        np.testing.assert_array_equal(weights[:, [0, 100]], [[0.5, 0.5], [0.5, 0.5], [0, 0]])
    with pytest.raises(ConfigError, match="combiner_trim=0.5 must be at least 1"):
        PrismForecaster(**NO_RNN, combiner_trim=0.5).fit(panel)


def test_weights_score_only_what_happened_before_each_end() -> None:
    # One origin; candidate 0 is exact for 3 steps then off by 10, candidate 1 off by 1
    # throughout. At an end 2 steps after the origin only steps 0-1 are scored (candidate 0
    # perfect: it takes the first block); with no origin in the window the weights are equal.
    model = PrismForecaster(**NO_RNN, use_primitives=False, combiner_trim=float("inf")).fit(
        _panel({"c/all/gpus_in_use": _square_wave(14)}))
    errors = np.array([[[0.0, 0.0, 0.0, 10.0, 10.0, 10.0]], [[1.0] * 6]])
    origins = np.array([50], dtype=np.int64)
    edges = [1, 3, 6]
    weights = model._weights(errors, origins, np.array([52, 56, 50, 50 + 10_000]), edges)
    np.testing.assert_array_equal(weights[0][:, 0], [1.0, 0.0])  # step 0 seen: 0 vs 1
    np.testing.assert_array_equal(weights[0][:, 2], [1.0, 0.0])  # block 1-2: step 1 seen only
    np.testing.assert_array_equal(weights[0][:, 5], [1.0, 0.0])  # nothing seen: carried over
    # at 56 all six steps are seen: block 3-5 has MAE 10 against 1
    np.testing.assert_allclose(weights[1][:, 4], np.array([0.1, 1.0]) / 1.1)
    np.testing.assert_array_equal(weights[2], np.full((2, 6), 0.5))  # origin not before end
    np.testing.assert_array_equal(weights[3], np.full((2, 6), 0.5))  # origin out of window


def test_idle_and_nearly_idle_series_stay_at_zero_and_never_go_negative() -> None:
    """Real clusters have VCs that hold no GPU for weeks and VCs that use one now and then:
    the default PRISM forecasts 0 for the first, and neither a mean nor a band below 0 for a
    small count series, in a panel whose other series cycles."""
    days = 14
    t = np.arange(144 * days)
    rng = np.random.default_rng(0)
    blips = np.zeros(len(t))
    for start in rng.choice(len(t) - 6, days // 2, replace=False):  # an hour, now and then
        blips[start:start + 6] = 1.0
    panel = _panel({"busy": 50 + 20 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 2, len(t)),
                    "idle": np.zeros(len(t)), "blips": blips,
                    "counts": rng.poisson(0.7, len(t)).astype(float)})
    forecast = get_forecaster("prism").fit(panel).predict("1d", quantiles=[0.05, 0.5, 0.95])
    by = {sid: f for sid, f in forecast.groupby("series_id")}
    idle = by["idle"][["mean", "p5", "p50", "p95"]].to_numpy()
    assert np.array_equal(idle, np.zeros_like(idle))
    blip = by["blips"]  # up 2 % of the time, at random: the median and the mean stay at 0
    assert (blip["p50"] == 0).all() and blip["mean"].max() < 0.1
    counts = by["counts"]
    assert (counts[["mean", "p5", "p50", "p95"]].to_numpy() >= 0).all()
    assert (counts["p95"] >= 1).all()  # a count series of mean 0.7 is not a point mass
    busy = by["busy"]["mean"].to_numpy()
    assert busy.max() - busy.min() > 20  # the cycle is forecast, not flattened


def _weekday_plateau(days: int, rng: np.random.Generator) -> np.ndarray:
    """400 GPUs on weekdays 10:00-18:00 (ramps of 2 h either side), 90 at night and all
    weekend, from Monday 2026-01-05 00:00."""
    ts = pd.date_range("2026-01-05", periods=144 * days, freq=STEP)
    hour = ts.hour + ts.minute / 60
    day = np.clip((hour - 8) / 2, 0, 1) * np.clip((20 - hour) / 2, 0, 1)
    weekday = np.asarray(ts.day_of_week < 5, dtype=float)
    return np.round(90 + 310 * weekday * day + rng.normal(0, 4, len(ts)))


def test_a_weekday_plateau_has_a_weekly_season() -> None:
    # Monday 11:50 after a weekend: yesterday at this time the cluster was at 90 GPUs, a week
    # ago at 400. With only a daily season, the season candidates bet on Sunday; with the
    # week, the forecast holds the weekday plateau until the evening ramp.
    rng = np.random.default_rng(3)
    monday = _weekday_plateau(22, rng)[:144 * 21 + 72]  # ends Monday 2026-01-26 11:50
    saturday = _weekday_plateau(20, rng)[:144 * 19 + 72]  # ends Saturday 2026-01-24 11:50
    cycle = 100 + 30 * np.sin(2 * np.pi * np.arange(144 * 21) / 144) + rng.normal(0, 2, 144 * 21)
    panel = _panel({"c/mon/gpus_in_use": monday, "c/sat/gpus_in_use": saturday,
                    "c/day/gpus_in_use": np.round(cycle)})
    model = get_forecaster("prism", **NO_RNN).fit(panel)
    assert model.state_["c/mon/gpus_in_use"].season == 7 * 144
    assert model.state_["c/day/gpus_in_use"].season == 144  # a daily cycle keeps its day
    out = model.predict("6h", ())
    mon = out.loc[out["series_id"] == "c/mon/gpus_in_use", "mean"].to_numpy()
    sat = out.loc[out["series_id"] == "c/sat/gpus_in_use", "mean"].to_numpy()
    np.testing.assert_allclose(mon, 400.0, atol=25.0)  # 12:00-17:50 on a Monday
    np.testing.assert_allclose(sat, 90.0, atol=25.0)  # and on a Saturday
    daily = get_forecaster("prism", **NO_RNN, use_week=False).fit(panel)
    assert daily.state_["c/mon/gpus_in_use"].season == 144


@pytest.mark.slow
def test_a_move_smaller_than_half_the_series_step_is_no_move() -> None:
    # Idle VCs that run 8- and 16-GPU jobs now and then, beside bursty ones. The value is
    # always a multiple of 8, so a forecast 0.04 GPUs off the last value is no better than
    # the last value whatever comes, and where the VC stays as it is, infinitely worse.
    rng = np.random.default_rng(5)
    n = 144 * 21
    values = {}
    for i in range(3):
        v = np.zeros(n)
        for start in rng.choice(n - 100, 12, replace=False):
            v[start:start + int(rng.exponential(30)) + 3] += rng.choice([8.0, 16.0])
        values[f"c/idle{i}/gpus_in_use"] = v
    for i in range(2):
        v = np.full(n, 100.0)
        for start in rng.choice(n - 100, 12, replace=False):
            v[start:start + 100] += 60 * 0.9 ** np.arange(100)
        values[f"c/burst{i}/gpus_in_use"] = np.round(v)
    panel = _panel(values)
    ends = np.arange(n - 144 * 4, n, 6)

    def small_moves(model: PrismForecaster) -> int:
        count = 0
        for i in range(3):
            sid = f"c/idle{i}/gpus_in_use"
            history = model.history_[sid]
            moved = model._forecast_many(sid, history, ends, 144) - history[ends - 1][:, None]
            count += int(((moved != 0) & (np.abs(moved) < 4.0)).sum())
        return count

    snapped = PrismForecaster(use_rnn=False).fit(panel)
    assert snapped.state_["c/idle0/gpus_in_use"].quantum == 8.0
    assert small_moves(snapped) == 0
    assert small_moves(PrismForecaster(use_rnn=False, use_snap=False).fit(panel)) > 0


def _autoscaled_and_manual_apps() -> dict[str, np.ndarray]:
    """8 apps autoscaled on a daily load (``c/auto<i>``), 3 resized by hand now and then
    (``c/manual<i>``: steps that hold for days), three weeks at 10 minutes."""
    rng = np.random.default_rng(7)
    n = 144 * 21
    t = np.arange(n)
    values = {}
    for i in range(8):
        base, size = rng.uniform(5, 30), rng.choice([1, 2, 4])
        load = base * (1 + 0.6 * np.cos(2 * np.pi * (t - rng.uniform(60, 120)) / 144))
        load = load * rng.lognormal(0, 0.05, n)
        load[rng.integers(n // 3, n):] *= rng.choice([0.7, 1.4])
        values[f"c/auto{i}/gpus_in_use"] = np.ceil(load) * size
    for i in range(3):
        v, level, start = np.empty(n), int(rng.integers(10, 40)), 0
        while start < n:
            span = int(rng.exponential(144 * 3)) + 1
            v[start:start + span] = level
            start += span
            level = max(1, level + int(rng.choice([-1, 1]) * rng.integers(2, 12)))
        values[f"c/manual{i}/gpus_in_use"] = v
    return values


@pytest.mark.slow
def test_a_step_at_the_last_point_is_a_jump_that_holds() -> None:
    # Each hand-sized app was resized by +30 GPUs at the very last point. The rolling median
    # flags a jump one point later; until then the reversion candidate took the new value
    # for a deviation from the day's median and, with the weight the autoscaled apps'
    # scale-downs earned it, pulled the forecast back toward the old level. As a jump of
    # age 0 (``use_fresh_jumps``: the apps' earlier one-point moves held) its reversion
    # target is the new level, and the hand-sized apps' steps have held.
    # A service scaled up every morning steps as a hand-sized app does, but its step is one of
    # its cycle's: in a series with a cycle a fresh move is read as before.
    values = _autoscaled_and_manual_apps()
    manual = [f"c/manual{i}/gpus_in_use" for i in range(3)]
    for sid in manual:
        values[sid][-1] = values[sid][-2] + 30.0
    # two services scaled up at 08:00 and down at 20:00 every day, the last point 08:00
    n = len(values[manual[0]])
    tod = (np.arange(n) - (n - 1) + 48) % 144
    shifts = [f"c/shift{i}/gpus_in_use" for i in range(2)]
    for i, sid in enumerate(shifts):
        values[sid] = np.where((tod >= 48) & (tod < 120), 40.0 + 8 * i, 16.0)
    panel = _panel(values)
    forecasts = {}

    def largest_move(model: PrismForecaster) -> float:
        out = model.fit(panel).predict("1d", ())
        forecasts[model.use_fresh_jumps] = out
        return max(float(np.abs(out.loc[out["series_id"] == sid, "mean"] - values[sid][-1])
                         .max()) for sid in manual)

    fresh = PrismForecaster(use_rnn=False, use_fresh_jumps=True)
    assert largest_move(fresh) == 0.0
    before = PrismForecaster(use_rnn=False, use_fresh_jumps=False)
    assert largest_move(before) >= 1.0
    assert all(fresh.state_[sid].periodic for sid in shifts)
    cycling = forecasts[True]["series_id"].isin(shifts)
    np.testing.assert_array_equal(forecasts[True].loc[cycling, "mean"],
                                  forecasts[False].loc[cycling, "mean"])
    # the weights are learned as before: only an origin right after such a move changes
    assert fresh.stacker_ is not None and before.stacker_ is not None
    np.testing.assert_array_equal(fresh.stacker_.weights_, before.stacker_.weights_)


@pytest.mark.slow
def test_a_one_off_step_yesterday_is_not_a_cycle_in_a_series_without_one() -> None:
    # Autoscaled apps that cycle every day, beside apps resized by hand (steps that hold).
    # One of those went to 56 GPUs yesterday 04:40-09:10 only and has held 28 since. The
    # cycle candidates would repeat yesterday's step tomorrow morning, with the weights the
    # panel's cycles earned them; gated, a series without a period has no cycle candidate.
    values = _autoscaled_and_manual_apps()
    manual = [f"c/manual{i}/gpus_in_use" for i in range(3)]
    for i in range(3):
        values[manual[i]][-2 * 144:] = 28.0
        values[manual[i]][-144 - 116:-144 - 89] = 56.0
    panel = _panel(values)

    def largest_move(model: PrismForecaster) -> float:
        out = model.fit(panel).predict("1d", ())
        return float(np.abs(out.loc[out["series_id"].isin(manual), "mean"] - 28.0).max())

    gated = PrismForecaster(use_rnn=False, use_cycle_gate=True)
    assert largest_move(gated) == 0.0
    assert not any(gated.state_[sid].periodic or gated.state_[sid].repeats for sid in manual)
    assert all(gated.state_[f"c/auto{i}/gpus_in_use"].periodic for i in range(8))
    # ungated, the cycle candidates move it (the hold gate's tail, which reads the 2 days
    # held from the longest past runs, would hold it too: off to see the gate's part)
    assert largest_move(PrismForecaster(use_rnn=False, use_cycle_gate=False,
                                        use_hold_tail=False)) >= 1.0


@pytest.mark.parametrize("spurious, periodic", [(695.0, False), (151.0, True)])
def test_a_spectral_period_the_season_does_not_match_is_no_cycle(
        monkeypatch: pytest.MonkeyPatch, spurious: float, periodic: bool) -> None:
    # The spectrum of a random walk of steps can show a "period" that fits barely 3 times
    # (695 steps, 4.8 days, in 15 days of a generated fleet); its season (the lag whose last
    # cycle predicted the next best) stayed the day. Treated as cycling, that fleet's
    # forecast went back to yesterday's level where the last value held on. A line at 151
    # steps beside a season of 144 is the day (Helios VCs: 149-151).
    import prism.forecasters.hybrid as hybrid
    from prism.primitives.types import Period

    # fleets scaled by hand: the shapes benchmark's stairs (steps of 1-7 GPUs, mostly up)
    values = {f"c/app{i}/gpus_in_use": _stairs(np.random.default_rng(i), 144 * 21)
              for i in range(4)}
    fleet = "c/app0/gpus_in_use"
    values[fleet][-100:] = values[fleet][-101] + 3.0  # up 3 GPUs, held for 16 h 40 min
    found = hybrid.find_periods

    def spectrum(y: np.ndarray, **kwargs: object) -> list[Period]:
        if y[0] != values[fleet][0]:
            return found(y, **kwargs)  # type: ignore[arg-type]
        return [Period(steps=spurious, seconds=600 * spurious, strength=0.2,
                       power_ratio=1.1, acf=0.1)]

    monkeypatch.setattr(hybrid, "find_periods", spectrum)
    model = PrismForecaster(**NO_RNN).fit(_panel(values))
    state = model.state_[fleet]
    assert state.season == 144 and state.periodic is periodic
    assert state.has_cycle is periodic
    if not periodic:  # the held value is held: it holds in past runs as long as this one
        mean = model.predict("1d", ()).query("series_id == @fleet")["mean"].to_numpy()
        assert hybrid.hold_steps(values[fleet], np.array([144 * 21]), 144)[0] > 0
        np.testing.assert_array_equal(mean[:36], values[fleet][-1])


def test_a_model_saved_before_the_week_and_the_snap_loads_as_it_was() -> None:
    # A pickle of a PRISM from before use_week, use_snap and use_cycle_gate (no such
    # attributes, no quantum or repeats in its series' states) reads them as off, which is
    # what it does: its season was chosen without the week, with no quantum it never snaps,
    # and every series had the cycle candidates.
    import pickle

    rng = np.random.default_rng(4)
    values = np.round(30 + 10 * np.sin(2 * np.pi * np.arange(144 * 10) / 144)
                      + rng.normal(0, 2, 144 * 10))
    model = PrismForecaster(**NO_RNN).fit(_panel({"c/all/gpus_in_use": values}))
    old = pickle.loads(pickle.dumps(model))
    added = ("use_week", "use_snap", "use_cycle_gate", "use_fresh_jumps", "use_short_floor",
             "use_hold_gate", "use_quiet_held", "use_hold_tail", "use_series_veto")
    for name in added:
        del old.__dict__[name]
    old.__dict__.pop("vetoed_", None)  # learned by a fit since the series veto
    for name in ("quantum", "repeats"):
        del old.state_["c/all/gpus_in_use"].__dict__[name]
    loaded = pickle.loads(pickle.dumps(old))
    assert not any(loaded.get_params()[name] for name in added)
    assert loaded.state_["c/all/gpus_in_use"].repeats  # the dataclass default
    assert model.get_params()["use_snap"] is True
    unsnapped = PrismForecaster(**NO_RNN, use_snap=False).fit(
        _panel({"c/all/gpus_in_use": values}))
    np.testing.assert_array_equal(loaded.predict(36, ())["mean"],
                                  unsnapped.predict(36, ())["mean"])


def test_the_jumps_of_a_series_are_found_once_and_not_saved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    import prism.forecasters.hybrid as hybrid

    values = np.r_[np.full(144 * 5, 10.0), np.full(144 * 4, 30.0)]
    calls: list[int] = []
    found = hybrid.jump_events

    def counted(y: np.ndarray, **kwargs: int) -> object:
        calls.append(len(y))
        return found(y, **kwargs)

    monkeypatch.setattr(hybrid, "jump_events", counted)
    model = PrismForecaster(**NO_RNN).fit(_panel({"c/all/gpus_in_use": values}))
    forecast = model.predict(36, (0.1, 0.9))
    # each distinct history once (the whole series, the part before the stacking tail, ...)
    assert len(calls) == len(set(calls))
    y = values.copy()
    assert model._events(y) is model._events(y.copy())
    y[-1] = 60.0  # another series: its own jumps
    assert model._events(y) is not model._events(values)
    blob = pickle.dumps(model)
    assert b"_events_memo" not in blob
    again = pickle.loads(blob)
    assert "_events_memo" not in again.__dict__
    pd.testing.assert_frame_equal(again.predict(36, (0.1, 0.9)), forecast)
