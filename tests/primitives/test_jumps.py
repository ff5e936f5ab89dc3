"""The jump persistence table: what share of a jump is left k steps later."""

from __future__ import annotations

import numpy as np
import pytest

from prism.primitives.jumps import (
    AGE_BINS_H,
    AWAY,
    JumpPersistence,
    age_bin,
    direction_of,
    jump_events,
)

STEP_S = 600
PARAMS = {"smooth": 3, "base_window": 36, "week": 1008}


def _steps(rng: np.random.Generator, n: int, *, hold: bool) -> np.ndarray:
    """A level that jumps every 1-2 days and holds (``hold``), or bursts up for 2 h."""
    y = np.full(n, 50.0)
    at = 200
    while at < n - 20:
        size = rng.choice([-1, 1]) * rng.uniform(15, 30)
        if hold:
            y[at:] += size
        else:
            y[at:at + 12] += abs(size)
        at += int(rng.integers(144, 288))
    return y + rng.normal(0, 0.5, n)


def _loop_table(series: list[tuple[np.ndarray, object]], steps: int, max_age: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The table pair by pair, as written before it was vectorised (the oracle)."""
    n_age = len(AGE_BINS_H)
    rows: list[list[np.ndarray]] = [[] for _ in range(2 * n_age)]
    k = np.arange(1, steps + 1)
    probe = sorted({max(1, int(round(h * 3600 / STEP_S))) for h in (0.5, 2.0, 4.5, 9.0, 18.0)}
                   | {1})
    for y, ev in series:
        n = len(y)
        for o, f, b, wk in zip(ev.onset, ev.first, ev.base, ev.week_level, strict=True):
            for age in probe:
                t = int(o) + age
                if t < f or t >= n - 1 or age > max_age:
                    continue
                jump = y[t] - b
                if abs(jump) < 1e-9 or abs(jump) < 2 * 1e-3 * (abs(b) + 1):
                    continue
                d = int(direction_of(np.array([y[t]]), np.array([b]), np.array([wk]))[0])
                r = np.clip((y[np.minimum(t + k, n - 1)] - b) / jump, 0.0, 1.25)
                r[t + k >= n] = np.nan
                rows[d * n_age + int(age_bin(np.array([float(age)]), STEP_S)[0])].append(r)
    table, count = np.ones((2, n_age, steps)), np.zeros((2, n_age), dtype=np.int64)
    for idx, got in enumerate(rows):
        if got:
            stack = np.vstack(got)
            seen = np.isfinite(stack).any(axis=0)
            med = np.full(steps, np.nan)
            med[seen] = np.nanmedian(stack[:, seen], axis=0)
            last = 1.0
            for j in range(steps):  # a step no jump reached keeps the last known value
                med[j] = last = med[j] if np.isfinite(med[j]) else last
            table[divmod(idx, n_age)], count[divmod(idx, n_age)] = med, len(got)
    return table, count


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("steps", "max_age"), [(144, 144), (300, 40)])
def test_the_table_is_the_pair_by_pair_one(seed: int, steps: int, max_age: int) -> None:
    rng = np.random.default_rng(seed)
    series = []
    for hold in (True, False, True):
        y = _steps(rng, 144 * 12, hold=hold)
        series.append((y, jump_events(y, **PARAMS)))
    fitted = JumpPersistence(steps=steps, step_s=STEP_S, max_age=max_age).fit(series)
    table, count = _loop_table(series, steps, max_age)
    assert count.sum() > 0
    np.testing.assert_array_equal(fitted.count_, count)
    np.testing.assert_array_equal(fitted.table_, table)


def test_steps_that_hold_keep_their_jump_and_bursts_lose_it() -> None:
    rng = np.random.default_rng(5)
    tables = {}
    for hold in (True, False):
        ys = [_steps(rng, 144 * 12, hold=hold) for _ in range(4)]
        tables[hold] = JumpPersistence(steps=144, step_s=STEP_S, max_age=144).fit(
            [(y, jump_events(y, **PARAMS)) for y in ys])
    young = 0  # jumps seen within their first hour, away from the week's level (a burst's
    # end, back toward it, holds like a step)
    held, burst = tables[True], tables[False]
    assert held.count_[AWAY, young] > 0 and burst.count_[AWAY, young] > 0
    assert np.median(held.table_[AWAY, young, 36:]) > 0.8  # 6 h on, most of the step is there
    assert np.median(burst.table_[AWAY, young, 36:]) < 0.2  # the 2-hour burst is gone


def test_a_series_without_jumps_leaves_the_table_at_hold() -> None:
    y = np.full(144 * 8, 20.0)
    fitted = JumpPersistence(steps=24, step_s=STEP_S, max_age=144).fit(
        [(y, jump_events(y, **PARAMS))])
    assert (fitted.count_ == 0).all() and (fitted.table_ == 1.0).all()
