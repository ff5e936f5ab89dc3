"""Recent jumps of a series, causally, and how far jumps of its kind have held.

GPU demand moves in jumps: a deployment scales an application from 95 to 130 GPUs and it stays
there (a *level shift*), a burst of jobs takes 60 GPUs for two hours and lets them go (a
*burst*). A forecaster that sees a jump an hour old has to decide which of the two it is; this
module gives it what the history says.

* :func:`jump_events`: jumps found causally (each from the points up to it only): a rolling
  median over ``smooth`` steps (which ignores one-step spikes) that moves by more than
  ``threshold`` robust noise scales within ``smooth`` steps. A run of such steps is one event;
  its *base* is the median of the ``base_window`` before it. Each event is tagged *away* (it
  moved away from the median of the week before it: a burst starts or demand settles
  elsewhere) or *toward* (it moved back towards that median: a burst ends).
* :func:`JumpPersistence`: for jumps of each direction, seen at each age, the share of the
  jump still there a given number of steps later, from the events of a set of series (a
  panel), as medians per (direction, age bin, horizon block). A series' own events shrink the
  panel's table towards its own (``prior`` pseudo-events), and a table with no events says
  "jumps hold" (1.0): the last value.
* :func:`jump_state`: at each forecast origin, the age, base and direction of the most recent
  jump, from the points before the origin only.

Indices are steps of the array; every function is causal: the state at origin ``e`` uses
``values[:e]`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Upper edges of the age bins, as multiples of an hour (the last bin is open).
AGE_BINS_H = (1.0, 3.0, 6.0, 12.0, 24.0)
AWAY, TOWARD = 0, 1
#: A jump with at most this share of its height left (the value back at its base) is over.
GONE_SHARE = 0.1


@dataclass(frozen=True)
class JumpEvents:
    """The jumps of one series.

    Attributes:
        onset: the step each jump's smoothed level started to move (about ``smooth`` steps
            before it was first flagged).
        first: the first step each jump was flagged at (it is known from there on).
        base: the level before each jump (median of the ``base_window`` before its onset).
        week_level: the median of the week before each jump's onset.
        scale: the robust noise scale the threshold was applied to, at the last step.
        fresh_at: the steps whose value alone moved as far from the smoothed level before it
            as a jump does, not (yet) flagged: a move one point old, which the rolling median
            flags at the next point if it holds (:func:`jump_state` with ``fresh``).
        fresh_base, fresh_week: the base (median of the ``base_window`` before) and the
            week's level of each such move.
        fresh_held: whether each such move held (the median flagged it at the next point);
            False for a move at the last point, whose next point is not known.
    """

    onset: IntArray
    first: IntArray
    base: FloatArray
    week_level: FloatArray
    scale: float
    fresh_at: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    fresh_base: FloatArray = field(default_factory=lambda: np.zeros(0))
    fresh_week: FloatArray = field(default_factory=lambda: np.zeros(0))
    fresh_held: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))


def direction_of(value: FloatArray, base: FloatArray, week_level: FloatArray) -> IntArray:
    """``TOWARD`` where ``value`` is back nearer the week's level than the base was."""
    back = (np.abs(value - week_level) < np.abs(base - week_level)) & (
        np.sign(value - base) == np.sign(week_level - base))
    return np.where(back, TOWARD, AWAY).astype(np.int64)


def causal_noise_scale(values: FloatArray, window: int) -> FloatArray:
    """:func:`noise_scale` at every step, from the ``window`` steps up to it only.

    1.4826 times the trailing median of absolute one-step changes, floored at 1 % of the
    trailing mean level: a jump is judged against the noise the series had before it.
    """
    y = np.asarray(values, dtype=np.float64)
    d = np.abs(np.diff(y, prepend=y[:1]))
    mad = pd.Series(d).rolling(window, min_periods=1).median().to_numpy()
    level = pd.Series(np.abs(y)).rolling(window, min_periods=1).mean().to_numpy()
    return np.asarray(np.maximum(np.maximum(1.4826 * mad, 0.01 * level), 1e-9),
                      dtype=np.float64)


def noise_scale(values: npt.ArrayLike) -> float:
    """Robust scale of one-step changes (MAD * 1.4826), floored at 1 % of the mean level.

    The floor keeps a series that is flat between steps (a deployment) from reading every
    change as a jump of infinite size.
    """
    y = np.asarray(values, dtype=np.float64)
    if len(y) < 3:
        return max(float(np.mean(np.abs(y))) * 0.01 if len(y) else 0.0, 1e-9)
    d = np.diff(y)
    mad = 1.4826 * float(np.median(np.abs(d - np.median(d))))
    return max(mad, 0.01 * float(np.mean(np.abs(y))), 1e-9)


def _rolling_median(y: FloatArray, width: int) -> FloatArray:
    return np.asarray(pd.Series(y).rolling(width, min_periods=1).median().to_numpy(),
                      dtype=np.float64)


def jump_events(values: npt.ArrayLike, *, smooth: int, base_window: int, week: int,
                threshold: float = 6.0) -> JumpEvents:
    """The jumps of a series, each found from the points up to it (see the module docstring).

    Args:
        values: the series (no NaN).
        smooth: width of the causal rolling median, in steps (half an hour is typical).
        base_window: steps before a jump whose median is its base level.
        week: steps of the longer median a jump moves away from or toward.
        threshold: a jump moves the smoothed level by more than this many noise scales.

    Returns:
        The :class:`JumpEvents`, in time order.
    """
    y = np.asarray(values, dtype=np.float64)
    n = len(y)
    scales = causal_noise_scale(y, week) if n else np.ones(1)
    scale = float(scales[-1])
    empty = np.zeros(0, dtype=np.int64)
    if n < 2 * smooth + 2:
        return JumpEvents(empty, empty, np.zeros(0), np.zeros(0), scale)
    level = _rolling_median(y, smooth)
    change = np.zeros(n)
    change[smooth:] = level[smooth:] - level[:-smooth]
    # the threshold: noise scales, and at least 5 % of the level (a 2-GPU wobble of a
    # 200-GPU VC is not a regime change)
    base_level = _rolling_median(y, base_window)
    bar = np.maximum(np.maximum(threshold * scales, 0.05 * np.abs(base_level)), 1e-9)
    flagged = np.abs(change) > bar
    # one point as far from the smoothed level before it as a jump moves it (the median
    # flags it at the next point if it holds)
    moved = np.zeros(n, dtype=bool)
    moved[smooth:] = (np.abs(y[smooth:] - level[smooth - 1:-1]) > bar[smooth:]) & ~flagged[smooth:]
    fresh_at = np.flatnonzero(moved).astype(np.int64)
    fresh_base = base_level[fresh_at - 1]
    fresh_week = (_rolling_median(y, week)[fresh_at - 1] if len(fresh_at) else np.zeros(0))
    fresh_held = flagged[np.minimum(fresh_at + 1, n - 1)] & (fresh_at + 1 < n)
    fresh = (fresh_at, fresh_base, fresh_week, fresh_held)
    if not flagged.any():
        return JumpEvents(empty, empty, np.zeros(0), np.zeros(0), scale, *fresh)
    edges = np.diff(np.concatenate([[0], flagged.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    onset = np.maximum(starts - smooth + 1, 1)
    bases = np.empty(len(onset))
    weeks = np.empty(len(onset))
    for i, o in enumerate(onset):
        lo = max(0, o - base_window)
        bases[i] = float(np.median(y[lo:o])) if o > lo else y[o]
        wlo = max(0, o - week)
        weeks[i] = float(np.median(y[wlo:o])) if o > wlo else bases[i]
    return JumpEvents(onset.astype(np.int64), starts.astype(np.int64), bases, weeks, scale,
                      *fresh)


@dataclass(frozen=True)
class JumpState:
    """The most recent jump at each origin (NaN/-1 where there is none within ``max_age``).

    Attributes:
        age: steps from the jump's onset to the origin's last point.
        base: the level before the jump.
        direction: ``AWAY``, ``TOWARD`` or -1 (no recent jump).
    """

    age: FloatArray
    base: FloatArray
    direction: IntArray


def jump_state(events: JumpEvents, history: FloatArray, origins: npt.ArrayLike, *,
               max_age: int, settle: int = 1, fresh: bool = False, hold: int = 0
               ) -> JumpState:
    """Age, base and direction of the latest jump flagged before each origin.

    A jump counts at origin ``e`` once it was flagged before ``e`` (``first < e``), and its
    direction is judged from the last value before ``e``, so only points before the origin
    decide it. A jump the series has undone by then (at most ``GONE_SHARE`` of its height, the
    value when it was flagged minus its base, left at each of the ``settle`` points before the
    origin) is over: no recent jump. A blip that came and went within the hour otherwise kept a
    series that sat at its old level in the "jump away" regime for a day.

    With ``fresh``, an origin whose last value alone moved as far as a jump does
    (``events.fresh_at``) is a jump of age 0 from the level before it, in a series whose
    earlier such moves mostly held (``(held + 1) / (moves + 2) > 1/2``, from the moves before
    it only): the rolling median would flag it one point later, and until then the last value
    was a deviation from the old level, which the reversion candidate pulled the forecast
    back to. A series whose one-point moves are spikes (counts) keeps that reading. With
    ``hold``, only a move from a value that held exactly still over the ``hold`` points before
    it is one (an app resized by hand, not a busy VC or cluster that moves every step).
    """
    e = np.asarray(origins, dtype=np.int64)
    age = np.full(len(e), np.nan)
    base = np.full(len(e), np.nan)
    direction = np.full(len(e), -1, dtype=np.int64)
    if len(events.onset) == 0:
        return _fresh(events, history, e, JumpState(age, base, direction), fresh, hold)
    j = np.searchsorted(events.first, e, side="left") - 1  # last flagged before e
    ok = j >= 0
    a = np.where(ok, (e - 1) - events.onset[np.maximum(j, 0)], np.inf).astype(np.float64)
    ok &= a <= max_age
    # a jump the series has undone (at most GONE_SHARE of its height left from the base, or
    # past it, at each of the last ``settle`` points) is over: a one-off blip an hour long is
    # no regime to forecast from
    jb = np.maximum(j, 0)
    height = history[np.minimum(events.first[jb], len(history) - 1)] - events.base[jb]
    # the most of the jump left over those points: the highest of them after a rise, the
    # lowest after a fall (trailing extremes of ``settle`` points, ending at each origin's last)
    last = np.maximum(e - 1, 0)
    top, bottom = (x[last] for x in trailing_extremes(history, max(settle, 1)))
    b = events.base[jb]
    left = np.where(height > 0, top - b, np.where(height < 0, b - bottom, 0.0))
    ok &= left > GONE_SHARE * np.abs(height)  # a "jump" flagged at its base has no height
    age[ok] = a[ok]
    base[ok] = events.base[j[ok]]
    direction[ok] = direction_of(history[e[ok] - 1], events.base[j[ok]],
                                 events.week_level[j[ok]])
    return _fresh(events, history, e, JumpState(age, base, direction), fresh, hold)


def trailing_extremes(values: FloatArray, width: int) -> tuple[FloatArray, FloatArray]:
    """The highest and lowest of the ``width`` points ending at each point (fewer at the
    start), from one rolling pass."""
    window = pd.Series(values).rolling(width, min_periods=1)
    return window.max().to_numpy(), window.min().to_numpy()


def _fresh(events: JumpEvents, history: FloatArray, e: IntArray, state: JumpState,
           fresh: bool, hold: int = 0) -> JumpState:
    """``state`` with the origins right after a fresh move (``events.fresh_at``) in a series
    whose earlier such moves mostly held (and, with ``hold``, from a value still over the
    ``hold`` points before the move) at a jump of age 0 (``fresh``; else ``state`` as it
    is)."""
    at = events.fresh_at
    if not fresh or not len(at) or not len(e):
        return state
    k = np.minimum(np.searchsorted(at, e - 1), len(at) - 1)
    # the moves before this one, all decided by the origin (each one point after it)
    held_before = np.concatenate([[0], np.cumsum(events.fresh_held)])[k]
    hit = (at[k] == e - 1) & (2 * (held_before + 1) > k + 2)
    if hold > 0 and hit.any():
        move = e[hit] - 1  # the point that moved; the ``hold`` before it held still
        top, bottom = trailing_extremes(history, hold)
        before = np.maximum(move - 1, 0)
        hit[hit] = (move >= hold) & (top[before] == bottom[before])
    if not hit.any():
        return state
    age, base, direction = state.age.copy(), state.base.copy(), state.direction.copy()
    age[hit] = 0.0
    base[hit] = events.fresh_base[k[hit]]
    direction[hit] = direction_of(history[e[hit] - 1], base[hit], events.fresh_week[k[hit]])
    return JumpState(age, base, direction)


def age_bin(age: FloatArray, step_s: int) -> IntArray:
    """The bin of each age (``AGE_BINS_H`` hours); NaN ages get bin -1."""
    hours = age * step_s / 3600.0
    out = np.searchsorted(np.asarray(AGE_BINS_H), hours, side="left").astype(np.int64)
    return np.where(np.isfinite(age), np.minimum(out, len(AGE_BINS_H) - 1), -1)


class JumpPersistence:
    """How much of a jump is left ``k`` steps later, by direction and age (a learned table).

    ``table_[d, a, k - 1]`` is the median over past jumps of direction ``d`` seen at an age in
    bin ``a`` of ``(y[t + k] - base) / (y[t] - base)`` (``t`` the step the jump is seen at),
    clipped to ``[0, 1.25]``: 1 means jumps of that kind held, 0 that they were gone.
    ``count_[d, a]`` is how many (jump, age) pairs stand behind a row.

    Args:
        steps: the longest horizon of the table (later steps repeat the last one).
        step_s: the series' step in seconds (for the age bins).
        max_age: ages up to this many steps are tabled.
    """

    def __init__(self, *, steps: int, step_s: int, max_age: int) -> None:
        self.steps = steps
        self.step_s = step_s
        self.max_age = max_age

    def fit(self, series: list[tuple[FloatArray, JumpEvents]]) -> JumpPersistence:
        """Learn the table from each series' values and its events (pooled)."""
        n_dir, n_age = 2, len(AGE_BINS_H)
        ratios: list[list[FloatArray]] = [[] for _ in range(n_dir * n_age)]
        k = np.arange(1, self.steps + 1)
        probe_ages = sorted({max(1, int(round(h * 3600 / self.step_s))) for h in
                             (0.5, 2.0, 4.5, 9.0, 18.0)} | {1})
        ages = np.array([a for a in probe_ages if a <= self.max_age], dtype=np.int64)
        for y, ev in series:
            n = len(y)
            if not len(ev.onset) or not len(ages):
                continue
            # every (jump, probe age) pair at once: the jump seen at step t (its last known
            # point), the share of it left k steps later
            age = np.tile(ages, len(ev.onset))
            t = np.repeat(np.asarray(ev.onset, dtype=np.int64), len(ages)) + age
            first = np.repeat(np.asarray(ev.first, dtype=np.int64), len(ages))
            b = np.repeat(np.asarray(ev.base, dtype=np.float64), len(ages))
            wk = np.repeat(np.asarray(ev.week_level, dtype=np.float64), len(ages))
            ok = (t >= first) & (t < n - 1)
            t, age, b, wk = t[ok], age[ok], b[ok], wk[ok]
            jump = y[t] - b
            ok = ~((np.abs(jump) < 1e-9) | (np.abs(jump) < 2 * 1e-3 * (np.abs(b) + 1)))
            t, age, b, wk, jump = t[ok], age[ok], b[ok], wk[ok], jump[ok]
            if not len(t):
                continue
            dirs = direction_of(y[t], b, wk)
            ahead = t[:, None] + k[None, :]
            r = np.clip((y[np.minimum(ahead, n - 1)] - b[:, None]) / jump[:, None], 0.0, 1.25)
            r[ahead >= n] = np.nan  # steps past the end are unknown
            group = dirs * n_age + age_bin(age.astype(np.float64), self.step_s)
            for g in np.unique(group):
                ratios[int(g)].extend(r[group == g])
        self.table_ = np.ones((n_dir, n_age, self.steps))
        self.count_ = np.zeros((n_dir, n_age), dtype=np.int64)
        for idx, rows in enumerate(ratios):
            if not rows:
                continue
            d, a = divmod(idx, n_age)
            stack = np.vstack(rows)
            seen = np.isfinite(stack).any(axis=0)
            med = np.full(stack.shape[1], np.nan)
            if seen.any():
                med[seen] = np.nanmedian(stack[:, seen], axis=0)
            # a step no jump reached keeps the last known value (or "holds")
            med = pd.Series(med).ffill().fillna(1.0).to_numpy()
            self.table_[d, a] = med
            self.count_[d, a] = len(rows)
        return self

    def shrunk(self, own: JumpPersistence, prior: float) -> FloatArray:
        """This (panel) table moved towards ``own`` (a series'), ``prior`` pseudo-events."""
        w = own.count_ / (own.count_ + prior)
        return np.asarray(self.table_ + w[:, :, None] * (own.table_ - self.table_),
                          dtype=np.float64)


def jump_paths(history: FloatArray, origins: IntArray, steps: int, state: JumpState,
               table: FloatArray, step_s: int) -> FloatArray:
    """Forecasts that keep of the latest jump what the table says jumps of its kind keep.

    ``base + (last - base) * table[direction, age bin, k]``; the last value where there is no
    recent jump.
    """
    last = history[origins - 1]
    out = np.repeat(last[:, None], steps, axis=1)
    has = state.direction >= 0
    if not has.any():
        return out
    bins = age_bin(state.age, step_s)
    horizon = table.shape[2]
    cols = np.minimum(np.arange(steps), horizon - 1)
    keep = table[state.direction[has], bins[has]][:, cols]  # (n_has, steps)
    base = state.base[has]
    out[has] = base[:, None] + (last[has] - base)[:, None] * keep
    return out
