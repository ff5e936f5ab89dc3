"""Gradient boosting on calendar and lag features (``gbm``).

The capacity-forecasting recipe of Helios (Hu et al., SC'21): time of day, rolling means and
standard deviations over 30 minutes and an hour, lags; learned by scikit-learn's
``HistGradientBoostingRegressor`` as a strong practical baseline.

One **global** model learns from every series of the panel. So that series of different size
share it, each origin is put in the units of its own recent range (the largest absolute value
of the last day) and the model predicts the **change from the last value** in those units::

    yhat[t] = last + scale * model(features(history[:e], t))

Features of an origin ``e`` and a target step ``k`` (target index ``t = e + k - 1``), every
value taken minus the last and over the scale:

- ``level``: the last value over the scale (where it sits in its recent range);
- ``lag_*``: the value 10 min, 20 min, 30 min, 1 h and 2 h back;
- ``mean_*`` / ``std_*``: rolling mean and standard deviation over 30 min, 1 h, 6 h and 1 d;
  ``min_1d`` / ``max_1d``: the range of the last day;
- ``step`` (direct strategy), ``tod`` and ``tod_origin``: the time of day of the target and
  of the origin;
- ``tod_latest``, ``tod_mean``: the value at the target's time of day on the latest day
  before the origin and its mean over the last seven days (``NaN`` where the history is too
  short, which the trees handle natively).

How good it is (16 Helios Earth VCs, 10 min, 1-day horizon, 7 daily cutoffs, PRISM's backtest
and metrics; MASE mean over series and windows / CRPS in GPUs):

=====================  =====================  ======================
data (weeks)           gbm (direct)           naive (last value)
=====================  =====================  ======================
gpus_in_use, last      1.255 / 3.38           1.311 / 3.50
gpus_in_use, before    0.679 / 3.34           0.531 / 3.14
gpu_demand, last       1.347 / 4.93           1.359 / 5.05
gpu_demand, before     0.671 / 4.91           0.639 / 4.91
=====================  =====================  ======================

So it is a baseline on a par with the last value, not a better model: a little better over the
last week, worse over the calm week before it (where any move away from a flat series costs
much MASE). Choices behind it, measured on the same VCs: the absolute error loss (MASE 1.255 vs
1.776 with the squared error: most changes are exactly zero and a few are 64-GPU jobs); steps
drawn log-uniformly for the direct model (drawn uniformly it had few examples of the first
hours and was three times worse than the last value over the first hour); no weekday feature
(with a month of history the trees split on two or three Sundays and forecast outages that
never came) and no value a week back (slightly worse). ``recursive`` is close to the last
value (MASE 1.368 / 0.542 on ``gpus_in_use``) with worse quantiles (CRPS 4.01 last week) and
takes 1.5 times as long, so ``direct`` is the default.

Multi-step strategies (``strategy``):

- ``direct``: one model with the step as a feature, trained on (origin, step) pairs up to
  ``max_horizon``; beyond it the step feature stays at ``max_horizon`` while the time of day
  and the same-time-of-day values follow the target;
- ``recursive``: a one-step model rolled forward, each forecast fed back as history.

Training pairs are drawn at random (seeded by ``random_state``) from every series, at most
``max_rows`` of them, so the cost of a fit does not grow with the panel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view
from threadpoolctl import threadpool_limits

from prism.errors import ConfigError, DataContractError
from prism.forecasters.base import BaseForecaster, FloatArray
from prism.schema import parse_duration

logger = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]

STRATEGIES = ("direct", "recursive")
LOSSES = ("absolute_error", "squared_error")
#: Lags of the recent-change features.
LAGS = ("10min", "20min", "30min", "1h", "2h")
#: Windows of the rolling mean and standard deviation features.
WINDOWS = ("30min", "1h", "6h", "1d")
#: Days averaged by the ``tod_mean`` feature.
TOD_DAYS = 7
#: A fit needs at least this many training pairs.
MIN_ROWS = 20
#: History values held at once while building the training set (32 MB of tails).
_CHUNK_VALUES = 4_000_000
#: The direct strategy predicts every step up to this many ahead, and beyond it at most
#: ``_FAR_KNOTS`` steps spread evenly to the last, linearly between them. PRISM asks for
#: paths over its whole 7-day calibration tail from 72 origins (1,008 steps at 10 min, 10,080
#: at 1 min): most of a one-minute series' fit went into predicting them step by step. A day
#: ahead at 10 min (144 steps) is predicted exactly, as are the calibration blocks it uses.
_EXACT_STEPS = 288
_FAR_KNOTS = 256
#: Finer than this many seconds a step, the direct strategy predicts every step of the first
#: hour only, then one knot per ``_KNOT_S`` up to ``_EXACT_STEPS`` such intervals (2 days),
#: then the far knots: at 1 minute, PRISM's stacker asked for 544 steps from each of 768
#: origins, and the boosted trees move little within 10 minutes.
_KNOT_S = 600
_DAY_S = 86_400


@dataclass(frozen=True)
class _Layout:
    """Feature geometry in steps, fixed at fit time."""

    day: int
    horizon: int
    lags: tuple[int, ...]
    windows: tuple[int, ...]

    @property
    def tail(self) -> int:
        """Steps of history before an origin that any feature reads."""
        return max(self.day * (TOD_DAYS + 1), max(self.windows), max(self.lags) + 1)


class GbmForecaster(BaseForecaster):
    """Global gradient boosting on calendar and lag features, in per-origin scale units.

    Args:
        strategy: ``"direct"`` (one model, the horizon step a feature) or ``"recursive"``
            (a one-step model rolled forward).
        max_horizon: the furthest step the direct model is trained for, as a duration or a
            number of steps; later steps reuse it (the time-of-day features still move).
        loss: ``"absolute_error"`` (the conditional median; MASE is MAE-based) or
            ``"squared_error"``.
        max_iter: boosting iterations.
        learning_rate: shrinkage of each tree.
        max_leaf_nodes: leaves per tree.
        min_samples_leaf: the fewest training pairs in a leaf.
        l2_regularization: L2 penalty on leaf values.
        max_rows: the most training pairs drawn from the whole panel.
        n_jobs: OpenMP threads for boosting and prediction. One by default: PRISM fans fits
            out over processes, and on a busy machine spinning threads made a small fit ten
            times slower, not faster.
        random_state: seeds the choice of training pairs; ``None`` is seed 0, so that a fit
            is reproducible unless asked otherwise.
    """

    alias = "gbm"
    global_model = True

    def __init__(
        self,
        *,
        strategy: str = "direct",
        max_horizon: str = "1d",
        loss: str = "absolute_error",
        max_iter: int = 100,
        learning_rate: float = 0.05,
        max_leaf_nodes: int = 31,
        min_samples_leaf: int = 40,
        l2_regularization: float = 1.0,
        max_rows: int = 30_000,
        n_jobs: int = 1,
        random_state: int | None = None,
    ) -> None:
        self.strategy = strategy
        self.max_horizon = max_horizon
        self.loss = loss
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.max_rows = max_rows
        self.n_jobs = n_jobs
        self.random_state = random_state

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Settings for the conformance suite."""
        return [
            {"max_iter": 20, "max_rows": 2_000, "random_state": 1},
            {"strategy": "recursive", "loss": "squared_error", "max_iter": 10,
             "max_rows": 1_000, "max_horizon": "6h"},
        ]

    # -- fit ----------------------------------------------------------------------------------
    def _fit(self, values: dict[str, FloatArray]) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor

        self._check_params()
        horizon = self._steps_of(self.max_horizon) if self.strategy == "direct" else 1
        self.layout_ = _Layout(
            day=self._lenient_steps("1d"), horizon=horizon,
            lags=tuple(self._lenient_steps(lag) for lag in LAGS),
            windows=tuple(self._lenient_steps(w) for w in WINDOWS),
        )
        self.feature_names_ = feature_names()
        rng = np.random.default_rng(0 if self.random_state is None else self.random_state)
        features, targets = self._training_set(values, rng)
        if len(targets) < MIN_ROWS:
            raise DataContractError(
                f"gbm drew only {len(targets)} training pairs from the panel (it needs "
                f"{MIN_ROWS}); fit it on longer series or use a baseline such as naive"
            )
        model = HistGradientBoostingRegressor(
            loss=self.loss, max_iter=self.max_iter, learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
            l2_regularization=self.l2_regularization, early_stopping=False,
            random_state=int(rng.integers(2**31 - 1)),
        )
        with threadpool_limits(limits=self.n_jobs, user_api="openmp"):
            self.model_ = model.fit(features, targets)
        self.n_train_rows_ = len(targets)
        logger.info("gbm (%s, %s): %d training pairs from %d series", self.strategy,
                    self.loss, len(targets), len(values))

    def _check_params(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"gbm strategy {self.strategy!r} is unknown; use one of {', '.join(STRATEGIES)}"
            )
        if self.loss not in LOSSES:
            raise ConfigError(f"gbm loss {self.loss!r} is unknown; use one of {', '.join(LOSSES)}")
        if self.n_jobs < 1:
            raise ConfigError(f"gbm n_jobs must be at least 1; got {self.n_jobs}")
        if self.max_rows < MIN_ROWS:
            raise ConfigError(f"gbm max_rows must be at least {MIN_ROWS}; got {self.max_rows}")

    def _lenient_steps(self, duration: str) -> int:
        """A feature window in steps, at least one (30 minutes of hourly data is one step)."""
        return max(1, int(parse_duration(duration).total_seconds() // self.freq_s_))

    def _training_set(self, values: dict[str, FloatArray],
                      rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        """Features and targets of (origin, step) pairs drawn from every series.

        Origins are uniform over each series (after a day of warm-up where the series is long
        enough), steps log-uniform over ``1..horizon``; the rows are shared between series in
        proportion to their origins.
        """
        lay = self.layout_
        starts = [min(lay.day, max(1, len(y) // 2)) for y in values.values()]
        origins = np.array([max(len(y) - s, 0) for y, s in zip(values.values(), starts,
                                                                strict=True)], dtype=np.float64)
        if origins.sum() == 0:
            return np.zeros((0, 0)), np.zeros(0)
        quota = np.floor(self.max_rows * origins / origins.sum()).astype(np.int64)
        xs: list[FloatArray] = []
        ys: list[FloatArray] = []
        for (sid, y), start, want in zip(values.items(), starts, quota, strict=True):
            n = len(y)
            m = n - start  # origins; pairs (e, k) with e + k - 1 < n, k <= horizon:
            pairs = m * (m + 1) // 2 if m <= lay.horizon else (
                lay.horizon * (lay.horizon + 1) // 2 + (m - lay.horizon) * lay.horizon)
            want = min(int(want), pairs)
            if want == 0:
                continue
            # over-drawn, then pairs whose target is past the end are rejected
            e = rng.integers(start, n, size=3 * want + 16)
            k = np.exp(rng.uniform(0.0, np.log(lay.horizon + 1), size=len(e)))
            k = np.clip(k.astype(np.int64), 1, lay.horizon)
            keep = e + k - 1 < n
            e, k = e[keep][:want], k[keep][:want]
            order = np.argsort(e, kind="stable")
            e, k = e[order], k[order]
            # origins repeat (several steps each): their history tails are built once
            unique, row = np.unique(e, return_inverse=True)
            chunk = max(1, _CHUNK_VALUES // lay.tail)
            for lo in range(0, len(unique), chunk):
                sel = (row >= lo) & (row < lo + chunk)
                ee, kk = e[sel], k[sel]
                tails = _tails(y, unique[lo:lo + chunk], lay.tail)
                x, last, scale = self._features(sid, tails, row[sel] - lo, ee, kk)
                xs.append(x)
                ys.append((y[ee + kk - 1] - last) / scale)
        if not xs:
            return np.zeros((0, 0)), np.zeros(0)
        features = np.vstack(xs)
        # A feature the panel is too short to see (a week of days in three days) has no bins:
        # a constant 0 instead, which no tree splits on.
        features[:, np.isnan(features).all(axis=0)] = 0.0
        return features, np.concatenate(ys)

    # -- features -----------------------------------------------------------------------------
    def _features(self, series_id: str, tails: FloatArray, rows: IntArray, ends: IntArray,
                  k: IntArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Features of the pairs ``(ends[i], k[i])`` whose history tail is ``tails[rows[i]]``.

        ``tails`` holds the last :attr:`_Layout.tail` values before each origin (``NaN``
        before the series starts); its last column is the value at ``e - 1``.

        Returns:
            ``(features (m, n_features), last (m,), scale (m,))``, columns in the order of
            :func:`feature_names`.
        """
        lay = self.layout_
        origin, last, scale = _origin_features(tails, lay)
        last, scale = last[rows], scale[rows]
        epoch_t = self.epoch_seconds(series_id, ends + k - 1)
        epoch_o = self.epoch_seconds(series_id, ends - 1)
        same_tod = _same_tod(tails, rows, k, lay)
        x = np.column_stack([
            origin[rows],
            np.minimum(k, lay.horizon).astype(np.float64),
            (epoch_t % _DAY_S) / _DAY_S,
            (epoch_o % _DAY_S) / _DAY_S,
            (same_tod - last[:, None]) / scale[:, None],
        ])
        return x, last, scale

    # -- forecast -----------------------------------------------------------------------------
    def _forecast_many(self, series_id: str, history: FloatArray, ends: IntArray,
                       steps: int) -> FloatArray:
        with threadpool_limits(limits=self.n_jobs, user_api="openmp"):
            if self.strategy == "recursive":
                return self._recursive(series_id, history, ends, steps)
            return self._direct(series_id, history, ends, steps)

    def _direct(self, series_id: str, history: FloatArray, ends: IntArray,
                steps: int) -> FloatArray:
        """Every step of every origin in one ``predict`` call (past ``_EXACT_STEPS``, at
        knots and linearly between them)."""
        tails = _tails(history, ends, self.layout_.tail)
        knots = _direct_knots(steps, stride=max(1, _KNOT_S // self.freq_s_),
                              first=self._lenient_steps("1h"))
        rows = np.repeat(np.arange(len(ends)), len(knots))
        k = np.tile(knots, len(ends))
        x, last, scale = self._features(series_id, tails, rows, ends[rows], k)
        change = self.model_.predict(x).reshape(len(ends), len(knots))
        if len(knots) < steps:
            change = _interp_rows(np.arange(1, steps + 1), knots, change)
        first = np.arange(len(ends)) * len(knots)  # every row of an origin shares these
        return np.asarray(last[first, None] + scale[first, None] * change, dtype=np.float64)

    def _recursive(self, series_id: str, history: FloatArray, ends: IntArray,
                   steps: int) -> FloatArray:
        """One step at a time for all origins, each forecast appended to its history."""
        width = self.layout_.tail
        buffer = np.full((len(ends), width + steps), np.nan)
        buffer[:, :width] = _tails(history, ends, width)
        rows = np.arange(len(ends))
        one = np.ones(len(ends), dtype=np.int64)
        for j in range(steps):
            x, last, scale = self._features(series_id, buffer[:, j:j + width], rows, ends + j,
                                            one)
            buffer[:, width + j] = last + scale * self.model_.predict(x)
        return buffer[:, width:]


def feature_names() -> list[str]:
    """The model's feature columns, in order."""
    return [
        "level",
        *(f"lag_{lag}" for lag in LAGS),
        *(f"{stat}_{w}" for w in WINDOWS for stat in ("mean", "std")),
        "min_1d", "max_1d", "step", "tod", "tod_origin", "tod_latest", "tod_mean",
    ]


# -- feature helpers ----------------------------------------------------------------------------
def _direct_knots(steps: int, stride: int = 1, first: int = 0) -> IntArray:
    """The steps ahead the direct strategy predicts (``_EXACT_STEPS``, ``_KNOT_S``).

    Every step up to ``first``, then every ``stride``-th up to ``_EXACT_STEPS * stride``
    (with ``stride`` 1, steps of 10 minutes or more: every step up to ``_EXACT_STEPS``), then
    ``_FAR_KNOTS`` knots to the last step (every step where the rest is that short). The
    first and the last step are always knots.
    """
    near_end = _EXACT_STEPS * stride
    top = min(steps, near_end)
    near = np.unique(np.concatenate([
        np.arange(1, min(first, top) + 1), np.arange(max(first, 1), top + 1, stride), [top],
    ])).astype(np.int64)
    if steps <= near_end:
        return near
    far = np.linspace(near_end + 1, steps, _FAR_KNOTS).round().astype(np.int64)
    return np.concatenate([near, np.unique(far)])


def _interp_rows(k: FloatArray | IntArray, knots: IntArray, values: FloatArray) -> FloatArray:
    """``np.interp(k, knots, row)`` of every row, at once (``knots`` increasing)."""
    j = np.clip(np.searchsorted(knots, k, side="right") - 1, 0, len(knots) - 2)
    w = (k - knots[j]) / (knots[j + 1] - knots[j])
    return np.asarray(values[:, j] * (1.0 - w) + values[:, j + 1] * w, dtype=np.float64)


def _tails(y: FloatArray, ends: IntArray, width: int) -> FloatArray:
    """``(len(ends), width)``: the ``width`` values before each origin, ``NaN`` before 0.

    Rows of a sliding view of the series behind ``width`` NaNs: one copy of the rows, where
    an index matrix, its clip and a masked select cost 20-50x as much on 8-day tails of
    1-minute data.
    """
    padded = np.concatenate([np.full(width, np.nan), np.asarray(y, dtype=np.float64)])
    return np.asarray(sliding_window_view(padded, width)[ends], dtype=np.float64)


def _nanmean(block: FloatArray) -> FloatArray:
    """Row means ignoring ``NaN`` (``NaN`` for a row without values), without warnings."""
    ok = np.isfinite(block)
    count = ok.sum(axis=1)
    total = np.where(ok, block, 0.0).sum(axis=1)
    return np.asarray(np.where(count > 0, total / np.maximum(count, 1), np.nan),
                      dtype=np.float64)


def _origin_features(tails: FloatArray,
                     lay: _Layout) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per-origin features (``level`` to ``max_1d``), the last value and the scale."""
    last = tails[:, -1]
    day = tails[:, -lay.day:]
    # the scale: the largest |value| of the last day; of the whole tail if that day was all
    # zero; 1 for a tail of zeros (then the change is in the series' own units)
    scale = np.nanmax(np.abs(day), axis=1)
    dark = ~(scale > 0)  # the whole tail only where it is needed: it is 8 days long
    if dark.any():
        wider = np.nanmax(np.abs(tails[dark]), axis=1)
        scale[dark] = np.where(wider > 0, wider, 1.0)
    cols = [last / scale]
    for lag in lay.lags:
        cols.append((tails[:, -1 - lag] - last) / scale)
    for w in lay.windows:
        block = tails[:, -w:]
        mean = _nanmean(block)
        spread = np.sqrt(np.maximum(_nanmean(block * block) - mean * mean, 0.0))
        cols.append((mean - last) / scale)
        cols.append(spread / scale)
    cols.append((np.nanmin(day, axis=1) - last) / scale)
    cols.append((np.nanmax(day, axis=1) - last) / scale)
    return np.column_stack(cols), last, scale


def _same_tod(tails: FloatArray, rows: IntArray, k: IntArray, lay: _Layout) -> FloatArray:
    """Raw values at each target's time of day: on the latest day, and their mean over days.

    The target ``t = e + k - 1`` was last seen ``back = day * ceil(k / day)`` steps before
    it, at tail column ``width - 1 - (back - k)`` (the last column is ``e - 1``), and on the
    days before that ``day`` columns apart. The tail is long enough for every column.
    """
    width = tails.shape[1]
    col = width - 1 - (lay.day * (-(-k // lay.day)) - k)
    latest = tails[rows, col]
    days = tails[rows[:, None], col[:, None] - lay.day * np.arange(TOD_DAYS)[None, :]]
    return np.column_stack([latest, _nanmean(days)])
