"""The forecaster protocol: public ``fit``/``predict``/``update`` wrap private hooks.

Hyperparameters are keyword-only ``__init__`` arguments stored as given; learned state ends in
``_``; ``get_params()`` comes from the ``__init__`` signature, so ``clone(f)`` is
``type(f)(**f.get_params())``. ``predict`` returns the forecast contract: ``series_id, ts,
model, mean`` and one ``p{percent}`` column per quantile, quantiles never crossing and never
below 0 (GPU demand is not negative).

A subclass writes two hooks, abstract here:

- ``_fit(values)`` learns its parameters from each series' history (a dict of arrays);
- ``_forecast_many(series_id, history, ends, steps)`` forecasts ``steps`` steps from each
  origin ``e`` in ``ends`` using ``history[:e]`` only and the learned parameters.

Everything else is shared, so every model gets it the same way:

**Conformal quantiles.** ``fit`` holds out the last ``calibration_window`` of each series (at
least 48 steps, at most a third of it) and learns the parameters on what comes before; the
model's forecasts from origins in the held-out tail calibrate its quantiles, corrected for a
drift of the series' volatility (:mod:`prism.forecasters.conformal`). The final forecast
continues from the end of the whole history with the parameters learned on the prefix: nothing
is fitted twice.

**Online update.** ``update(new_points)`` appends fresh points, recalibrates on the new tail and
checks each updated series' rolling error (day-ahead forecasts through the last
``fallback_window``) against the seasonal naive fallback's; a series whose error is worse than
the fallback's by more than ``fallback_margin`` is served by the fallback (logged, with the
numbers) until the model is back within half the margin. Parameters are never refitted by
``update``: the last good version is the fitted one, and a refit is an explicit ``fit``.
The fallback is part of this protocol, not a composite wrapped around a model
(:mod:`prism.forecasters.compose`): every fitted forecaster, saved ones included, carries its
``fallback_`` and serves it from ``forecast_arrays``, and the fallback is scored and calibrated
on the model's own history, origins and calibration tail.

**Global models at scale.** A global model (``global_model``) learns parameters that all series
share (the hybrid's dictionary and RNN, a recurrent network, boosted trees) and possibly some
state of each series of its own. ``fit_shared(panel)`` learns the shared parameters only, from
all series or a sample; ``fit_local(panel)`` returns a copy fitted on any series against them
(their own state and calibration); ``fit`` does both in one go, forecast for forecast.
:mod:`prism.batch` learns the shared parameters once and fans ``fit_local`` out over workers. A
global model with state of its own per series splits ``_fit`` into the hooks ``_fit_shared``
and ``_fit_local`` (see the hybrid).

**The ecosystem's frames.** ``fit``, ``fit_shared``, ``fit_local`` and ``update`` also take
Nixtla's ``unique_id, ds, y`` and timezone-aware times (:mod:`prism.frames` renames and converts
them to UTC-naive once, here); ``predict`` answers in the naming and zone of the frame given to
the last fit (``unique_id, ds, model, mean, p..`` for a Nixtla frame), kept as ``frame_style_``.
"""

from __future__ import annotations

import abc
import copy
import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.forecasters.conformal import (
    MAX_HOLDOUT_SHARE,
    MIN_CHANGES,
    MIN_HOLDOUT_STEPS,
    Calibration,
    bands,
    calibrate,
    calibration_offsets,
    calibration_origins,
    history_calibration,
)
from prism.frames import PRISM_STYLE, FrameStyle, to_frame, to_panel
from prism.schema import (
    SERIES_ID,
    TS,
    VALUE,
    panel_freq,
    parse_duration,
    validate_panel,
)

logger = logging.getLogger(__name__)

# Calibration stays importable from here: models pickled before conformal.py existed refer to
# prism.forecasters.base.Calibration.
__all__ = ["DEFAULT_QUANTILES", "BaseForecaster", "Calibration", "FloatArray", "Paths",
           "check_quantiles", "clone", "horizon_steps", "quantile_column"]

FloatArray = npt.NDArray[np.float64]
DEFAULT_QUANTILES = (0.5, 0.9)
#: A model's fitting window (``fit_window``) holds at least this many steps: a week is 1,008
#: ten-minute points but 7 daily ones, on which ARIMA picked an MA(1) that forecast 659 GPUs
#: one day ahead of a series that never passed 143.
MIN_FIT_STEPS = 48


def quantile_column(q: float) -> str:
    """``0.5 -> 'p50'``, ``0.975 -> 'p97.5'``, ``0.1234567 -> 'p12.34567'`` (to 1e-8)."""
    return "p" + f"{round(q * 100, 6):.6f}".rstrip("0").rstrip(".")


#: Why a forecast longer than its series' history should be read with care.
PAST_HISTORY = ("past that length a forecast only repeats what the model saw, and its bands "
                "widen with nothing to check them against")


def horizon_note(steps: int, points: int) -> str | None:
    """A note for a forecast of ``steps`` from a series of ``points`` values, or ``None``
    when the history is at least as long as the horizon."""
    if steps <= points:
        return None
    return (f"the horizon ({steps:,} steps) is longer than the stored history ({points:,} "
            f"points): {PAST_HISTORY}")


def _duration_text(seconds: int) -> str:
    """``86100 -> '1435min'``: seconds in the largest unit that divides them."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


#: What to know about bands not calibrated out of sample, by :func:`band_source`.
BAND_NOTES = {
    "changes": ("too few points to calibrate the bands out of sample (72 needed): they are the "
                "last value's errors in the series' own history, around the model's forecast"),
    "none": ("too few points for bands (5 needed): every quantile is the mean; ingest more "
             "history or a finer --freq"),
}


def band_source(model: BaseForecaster, series_id: str) -> str:
    """Where a fitted model's bands for ``series_id`` come from: ``calibrated`` (out of
    sample, or the model's native quantiles), ``changes`` (the series' own changes: too short
    to calibrate) or ``none`` (too short for any band). :data:`BAND_NOTES` says what each
    but the first means."""
    calibration = model.calibration_.get(series_id)
    if model.native_levels or (calibration is not None and len(calibration.centers)):
        return "calibrated"
    # change_offsets' first block needs MIN_CHANGES one-step changes
    return "none" if len(model.history_[series_id]) - 1 < MIN_CHANGES else "changes"


def horizon_steps(horizon: int | str, freq_s: int, *, name: str = "horizon",
                  rounded: bool = False) -> int:
    """A horizon as a number of steps: ``"1d"`` at 10 min is 144; a number is steps.

    ``name`` is what messages call the value (a hyperparameter's duration is no horizon).
    ``rounded``: a duration that is not a whole number of steps is rounded to the nearest,
    at least one (a model's windows and seasons, whose defaults are written for 10-minute
    series, on a store of daily or 20-minute steps); a horizon is never rounded.

    Raises:
        ConfigError: when the horizon is not positive or (unless ``rounded``) not a whole
            number of steps.
    """
    if isinstance(horizon, int | np.integer) and not isinstance(horizon, bool):
        steps = int(horizon)
    elif isinstance(horizon, str) and horizon.strip().isdigit():
        steps = int(horizon)
    else:
        try:
            seconds = parse_duration(str(horizon)).total_seconds()
        except ConfigError as exc:  # name the field: a request has several durations
            raise ConfigError(f"{name.rstrip('=')}: {exc}") from None
        if seconds % freq_s and rounded and seconds > 0:
            return max(1, round(seconds / freq_s))
        if seconds % freq_s:
            below = int(seconds // freq_s)
            near = " or ".join(f"{_duration_text(k * freq_s)} ({k:,} steps)"
                               for k in (below, below + 1) if k >= 1)
            raise ConfigError(
                f"{name}{'' if name.endswith('=') else ' '}{horizon!r} is not a whole number"
                f" of {freq_s}-second steps: use {near}, or a number of steps"
            )
        steps = int(seconds // freq_s)
    if steps < 1:
        raise ConfigError(f"{name}{'' if name.endswith('=') else ' '}{horizon!r} must be at "
                          "least one step")
    return steps


def check_quantiles(quantiles: Sequence[float]) -> list[float]:
    """Sorted unique quantiles, each strictly between 0 and 1, each its own band name.

    Raises:
        ConfigError: for a quantile outside (0, 1), or levels that band names (to 1e-8) cannot
            tell apart from each other or from 0 and 1.
    """
    out = sorted({float(q) for q in quantiles})
    bad = [q for q in out if not 0 < q < 1]
    if bad:
        raise ConfigError(f"quantiles must be between 0 and 1 (exclusive); got {bad}")
    names: dict[str, float] = {}
    for q in out:
        name = quantile_column(q)
        if name in ("p0", "p100"):
            raise ConfigError(f"quantile {q!r} is too close to {name[1:-2] or 0} for a band "
                              f"name ({name}; band names resolve 1e-8): give levels at least "
                              "1e-8 from 0 and 1")
        if name in names:
            raise ConfigError(f"quantiles {names[name]!r} and {q!r} share the band name {name} "
                              "(band names resolve 1e-8): give levels at least 1e-8 apart")
        names[name] = q
    return out


@dataclass
class Paths:
    """Forecasts from several origins (what :meth:`BaseForecaster._forecast_many` returns).

    Attributes:
        mean: ``(n_origins, steps)`` point forecasts.
        quantiles: ``(n_origins, steps, n_levels)`` native quantiles at the model's
            ``native_levels``, or ``None`` for models without them.
    """

    mean: FloatArray
    quantiles: FloatArray | None = None


def _seasonal_naive_paths(history: FloatArray, ends: npt.NDArray[np.int64], steps: int,
                          season: int) -> FloatArray:
    """The last season before each origin, repeated (the last value when history is short)."""
    out = np.empty((len(ends), steps))
    for i, e in enumerate(ends):
        if e >= season:
            out[i] = np.resize(history[e - season:e], steps)
        else:
            out[i] = history[e - 1]
    return out


class BaseForecaster(abc.ABC):
    """Base of every forecaster; subclasses set ``alias`` and write ``_fit``/``_forecast_many``.

    Class attributes (capabilities and shared settings, not hyperparameters):
        alias: the registry name.
        native_levels: quantile levels the model forecasts itself (empty: quantiles come from
            the calibrated errors of the point forecast).
        global_model: one model learns from all series of the panel.
        calibration_window: the held-out tail for conformal calibration (a duration).
        fallback_window: the window of the rolling error ``update`` checks.
        fallback_margin: the model falls back when its rolling MAE exceeds the seasonal naive
            fallback's by more than this share.

    Attributes (after ``fit``):
        freq_s_: the panel's step in seconds.
        series_ids_: the series fitted, sorted.
        first_ts_ / last_ts_: series id -> its first / last timestamp.
        history_: series id -> its values (grows with ``update``).
        fit_len_: series id -> how many leading points the parameters were learned on.
        calibration_: series id -> its :class:`Calibration` (absent when too short).
        fallback_: series id -> why it is served by the fallback (only those that are).
        version_: 1 after ``fit``, +1 per ``update``.
    """

    alias: ClassVar[str] = ""
    native_levels: ClassVar[tuple[float, ...]] = ()
    global_model: ClassVar[bool] = False
    calibration_window: ClassVar[str] = "7d"
    fallback_window: ClassVar[str] = "3d"
    fallback_margin: ClassVar[float] = 0.25
    fallback_season: ClassVar[str] = "1d"

    # -- parameters ---------------------------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind == p.KEYWORD_ONLY]

    def get_params(self) -> dict[str, Any]:
        """The hyperparameters, as given to ``__init__``."""
        return {name: getattr(self, name) for name in self._param_names()}

    @classmethod
    def test_params(cls) -> list[dict[str, Any]]:
        """Two or more cheap settings for the shared conformance suite."""
        return [{}]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # -- fit / predict / update ---------------------------------------------------------------
    def fit(self, panel: pd.DataFrame) -> Self:
        """Learn from a regular panel (``series_id, ts, value``); refitting replaces all state.

        The parameters are learned on each series but its last ``calibration_window`` (at
        most a third of it), which calibrates the quantiles out of sample. A Nixtla frame
        (``unique_id, ds, y``) and timezone-aware times are accepted too; ``predict`` then
        answers in the same naming and zone (see :mod:`prism.frames`).

        Raises:
            DataContractError: for a panel that breaks the contract (neither naming, or a mix
                of both), holds missing values or has fewer than two points per series.
        """
        panel, style = _checked_panel(panel, "fit on")
        for name in [n for n in vars(self) if n.endswith("_") and not n.startswith("_")]:
            delattr(self, name)  # refitting replaces all learned state
        self.frame_style_ = style
        self._fit(self._take_series(panel))
        self._calibrate_all()
        return self

    def fit_shared(self, panel: pd.DataFrame) -> Self:
        """Learn only what a global model shares across series (its network, dictionary).

        For batches of many series: the shared parameters are learned once from ``panel``
        (all series, or a sample of them), then :meth:`fit_local` fits any series against
        them. The model forecasts nothing until then. ``fit(panel)`` gives the same forecasts
        as ``fit_shared(panel).fit_local(panel)``.

        Raises:
            ConfigError: for a model that is not global (``global_model`` is false): fit such
                a model on each series with ``fit``.
            DataContractError: as :meth:`fit`.
        """
        self._check_global("fit_shared")
        panel, style = _checked_panel(panel, "fit on")
        for name in [n for n in vars(self) if n.endswith("_") and not n.startswith("_")]:
            delattr(self, name)
        self.frame_style_ = style
        self._fit_shared(self._take_series(panel))
        for name in _SERIES_STATE:  # keep the shared parameters only (small to ship)
            delattr(self, name)
        return self

    def fit_local(self, panel: pd.DataFrame) -> Self:
        """A copy fitted on the series of ``panel`` against this model's shared parameters.

        Learns each series' own state (if the model has any) and calibrates its quantiles;
        the shared parameters learned by :meth:`fit_shared` or :meth:`fit` are reused as they
        are (not copied, not relearned). ``self`` is left unchanged.

        Raises:
            ConfigError: for a model that is not global.
            NotFittedError: before ``fit_shared`` or ``fit``.
            DataContractError: as :meth:`fit`, or for a panel whose step is not the one the
                shared parameters were learned at.
        """
        self._check_global("fit_local")
        if not hasattr(self, "freq_s_"):
            raise NotFittedError(f"{type(self).__name__} has no shared parameters: call "
                                 "fit_shared(panel) or fit(panel) first")
        panel, style = _checked_panel(panel, "fit on")
        freq_s = panel_freq(panel, purpose="be fitted together")
        if freq_s != self.freq_s_:
            raise DataContractError(
                f"the panel's step is {freq_s} s but the shared parameters were learned at "
                f"{self.freq_s_} s; fit series of each step with their own model"
            )
        out = copy.copy(self)  # a new __dict__: the shared parts are shared, not copied
        out.frame_style_ = style
        out._fit_local(out._take_series(panel))
        out._calibrate_all()
        return out

    def _check_global(self, method: str) -> None:
        if not self.global_model:
            raise ConfigError(
                f"{type(self).__name__} learns each series on its own: {method} is for global "
                "models; call fit(panel) on the series instead"
            )

    def _take_series(self, panel: pd.DataFrame) -> dict[str, FloatArray]:
        """Set the per-series state of a checked panel; return what ``_fit`` learns from."""
        self.freq_s_ = panel_freq(panel, purpose="be fitted together")
        groups = {str(sid): g for sid, g in panel.groupby(SERIES_ID, sort=True)}
        self.series_ids_ = sorted(groups)
        self.first_ts_ = {sid: pd.Timestamp(g[TS].iloc[0]) for sid, g in groups.items()}
        self.last_ts_ = {sid: pd.Timestamp(g[TS].iloc[-1]) for sid, g in groups.items()}
        self.history_ = {sid: g[VALUE].to_numpy(dtype=np.float64) for sid, g in groups.items()}
        self.fit_len_ = {sid: len(v) - self._holdout(len(v)) for sid, v in self.history_.items()}
        self.fallback_: dict[str, str] = {}
        self.version_ = 1
        return {sid: v[:self.fit_len_[sid]].copy() for sid, v in self.history_.items()}

    def _calibrate_all(self) -> None:
        self.calibration_: dict[str, Calibration] = {}
        self.spread_scale_: dict[str, FloatArray] = {}
        for sid in self.series_ids_:
            self._calibrate(sid)

    def predict(
        self, horizon: int | str, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> pd.DataFrame:
        """Forecast ``horizon`` (steps, or a duration such as ``"1d"``) past each series' end.

        Returns:
            ``series_id, ts, model, mean, p..`` with one row per series and step; keyed
            ``unique_id, ds`` and in the zone of the times given when ``fit`` was given such
            a frame (:mod:`prism.frames`).

        Raises:
            NotFittedError: before ``fit``.
            ConfigError: for a bad horizon or quantile.
        """
        self._check_fitted()
        steps = horizon_steps(horizon, self.freq_s_)
        qs = check_quantiles(quantiles)
        frames = []
        step = pd.Timedelta(seconds=self.freq_s_)
        for sid in self.series_ids_:
            mean, bands = self.forecast_arrays(sid, steps, qs)
            data: dict[str, Any] = {
                SERIES_ID: sid,
                TS: pd.date_range(self.last_ts_[sid] + step, periods=steps, freq=step),
                "model": self.alias,
                "mean": mean,
            }
            for j, q in enumerate(qs):
                data[quantile_column(q)] = bands[:, j]
            frames.append(pd.DataFrame(data))
        out = pd.concat(frames, ignore_index=True)
        out[TS] = out[TS].astype("datetime64[ns]")
        # models saved before frame styles existed have none: they were fitted on PRISM panels
        return to_frame(out, getattr(self, "frame_style_", PRISM_STYLE))

    def forecast_arrays(
        self, series_id: str, steps: int, quantiles: Sequence[float]
    ) -> tuple[FloatArray, FloatArray]:
        """The forecast of one series as arrays: ``(mean (steps,), bands (steps, n_q))``.

        Bands never cross and nothing is below 0. A series in fallback is forecast by the
        seasonal naive fallback, with its own calibrated bands.
        """
        self._check_fitted()
        history = self.history_[series_id]
        end = np.array([len(history)], dtype=np.int64)
        if series_id in self.fallback_:
            paths = Paths(self._fallback_paths(history, end, steps))
            calibration = self._fallback_calibration(series_id)
        else:
            paths = self._paths(series_id, history, end, steps)
            calibration = self.calibration_.get(series_id)
        if not self.native_levels and (calibration is None or not len(calibration.centers)):
            # too short to calibrate out of sample: the last value's errors in its history
            calibration = history_calibration(history, steps)
        mean = np.maximum(paths.mean[0], 0.0)
        qs = list(quantiles)
        if not qs:
            return mean, np.zeros((steps, 0))
        native = paths.quantiles[0] if paths.quantiles is not None else None
        out = bands(mean, native, self.native_levels, calibration, steps, qs)
        out = np.maximum.accumulate(np.maximum(out, 0.0), axis=1)  # never cross, never < 0
        return mean, out

    def update(self, new_points: pd.DataFrame, *, fallback: bool = True) -> Self:
        """Absorb fresh points of fitted series without refitting the parameters.

        Points at or before a series' last timestamp replace the stored values (late
        revisions of a bucket); the rest must continue the series without a gap. Each updated
        series is recalibrated on its new tail and, with ``fallback`` (serving), its rolling
        error is checked against the seasonal naive fallback (see the module docstring). A
        backtest passes ``fallback=False``: it measures the model it names, and the baseline
        ``naive`` served by seasonal naive would be no baseline. Either naming and zoned times
        are accepted, as in :meth:`fit`; forecasts keep the style of the fit.

        Raises:
            NotFittedError: before ``fit``.
            DataContractError: for an unknown series, another step, or a gap after the end.
        """
        self._check_fitted()
        panel, _ = _checked_panel(new_points, "update with")
        step = pd.Timedelta(seconds=self.freq_s_)
        touched = []
        for sid, group in panel.groupby(SERIES_ID, sort=True):
            sid = str(sid)
            if sid not in self.history_:
                raise DataContractError(
                    f"series {sid!r} was not fitted; fit the model on it before updating it"
                )
            ts = pd.DatetimeIndex(group[TS])
            offsets = (ts - self.first_ts_[sid]) / step
            if not np.allclose(offsets, np.round(offsets)) or (offsets < 0).any():
                raise DataContractError(
                    f"new points of {sid!r} are not on its {self.freq_s_}-second grid "
                    f"starting at {self.first_ts_[sid]}; resample them first"
                )
            idx = np.round(offsets).astype(np.int64)
            history = self.history_[sid]
            if idx[0] > len(history):
                missing = self.last_ts_[sid] + step
                raise DataContractError(
                    f"new points of {sid!r} start at {ts[0]} but the series ends at "
                    f"{self.last_ts_[sid]}: send the points from {missing} on as well"
                )
            grown = np.empty(max(len(history), int(idx[-1]) + 1))
            grown[:len(history)] = history
            grown[idx] = group[VALUE].to_numpy(dtype=np.float64)
            self.history_[sid] = grown
            self.last_ts_[sid] = self.first_ts_[sid] + (len(grown) - 1) * step
            touched.append(sid)
        self.version_ += 1
        for sid in touched:
            self._calibrate(sid)
            if fallback:
                self._check_fallback(sid)
        return self

    # -- shared machinery ---------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "series_ids_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(panel) first")

    def _steps_of(self, duration: str) -> int:
        """A duration hyperparameter (a season, a window) in steps of the fitted series,
        rounded to whole steps, at least one: ``lookback="12h"`` is one step of a daily
        series."""
        param = next((k for k, v in self.get_params().items() if v == duration), None)
        name = f"{self.alias} parameter {param}=" if param else f"{self.alias} duration"
        return horizon_steps(duration, self.freq_s_, name=name, rounded=True)

    def _holdout(self, n: int) -> int:
        """Steps held out for calibration in a series of ``n`` points."""
        window = max(self._steps_of(self.calibration_window), MIN_HOLDOUT_STEPS)
        return int(min(window, n * MAX_HOLDOUT_SHARE))

    def epoch_seconds(self, series_id: str, index: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Unix seconds of positions ``index`` of a series' history (0 is its first point)."""
        first = self.first_ts_[series_id].value // 1_000_000_000
        return first + np.asarray(index, dtype=np.int64) * self.freq_s_

    def _paths(self, series_id: str, history: FloatArray, ends: npt.NDArray[np.int64],
               steps: int) -> Paths:
        out = self._forecast_many(series_id, history, ends, steps)
        paths = out if isinstance(out, Paths) else Paths(np.asarray(out, dtype=np.float64))
        if paths.mean.shape != (len(ends), steps):
            raise RuntimeError(
                f"{type(self).__name__} returned forecasts of shape {paths.mean.shape}, "
                f"expected {(len(ends), steps)}"
            )
        return paths

    def _origins(self, series_id: str) -> npt.NDArray[np.int64]:
        n = len(self.history_[series_id])
        return calibration_origins(n, self._holdout(n))

    def _calibrate(self, series_id: str) -> None:
        """Conformal offsets of one series, with its drift correction (:mod:`.conformal`).

        The correction is the series' own, so a series is calibrated the same whichever
        other series share its fit (``fit`` and the batch engine's chunks agree).
        """
        history = self.history_[series_id]
        ends = self._origins(series_id)
        if len(ends) == 0:
            self.calibration_.pop(series_id, None)
            logger.info("%s: too short to calibrate quantiles", series_id)
            return
        steps = int(len(history) - ends[0])
        paths = self._paths(series_id, history, ends, steps)
        calibration, factors = calibrate(history, ends, paths.mean, paths.quantiles,
                                         self.native_levels, self.freq_s_)
        if not hasattr(self, "spread_scale_"):
            self.spread_scale_ = {}
        self.spread_scale_[series_id] = factors
        self.calibration_[series_id] = calibration

    def _fallback_paths(self, history: FloatArray, ends: npt.NDArray[np.int64],
                        steps: int) -> FloatArray:
        return _seasonal_naive_paths(history, ends, steps, self._steps_of(self.fallback_season))

    def _fallback_calibration(self, series_id: str) -> Calibration | None:
        history = self.history_[series_id]
        ends = self._origins(series_id)
        if len(ends) == 0:
            return None
        steps = int(len(history) - ends[0])
        return calibration_offsets(history, ends, self._fallback_paths(history, ends, steps),
                                   None, ())

    def _check_fallback(self, series_id: str) -> None:
        """Rolling day-ahead MAE of the model and of the fallback over ``fallback_window``."""
        history = self.history_[series_id]
        window = self._steps_of(self.fallback_window)
        season = self._steps_of(self.fallback_season)
        first = len(history) - window
        if first < max(2, season):
            return
        # one forecast a season (a day) through the window, each scored on the steps up to
        # the next origin: day-ahead errors, as the forecasts are used
        ends = np.arange(first, len(history), season, dtype=np.int64)
        steps = min(season, window)
        target = ends[:, None] + np.arange(steps)[None, :]
        seen = target < len(history)
        actual = history[np.minimum(target, len(history) - 1)]
        model_paths = self._paths(series_id, history, ends, steps).mean
        fallback_paths = self._fallback_paths(history, ends, steps)
        model = float(np.abs(model_paths - actual)[seen].mean())
        fallback = float(np.abs(fallback_paths - actual)[seen].mean())
        limit = (1.0 + self.fallback_margin) * fallback
        if series_id not in self.fallback_ and model > limit and model > 0:
            reason = (
                f"rolling MAE {model:.4g} over the last {self.fallback_window} exceeds the "
                f"seasonal naive fallback's {fallback:.4g} by more than "
                f"{self.fallback_margin:.0%} (version {self.version_})"
            )
            self.fallback_[series_id] = reason
            logger.warning("%s (%s): falling back to seasonal naive: %s", series_id,
                           self.alias, reason)
        elif series_id in self.fallback_ and model <= (1.0 + self.fallback_margin / 2) * fallback:
            del self.fallback_[series_id]
            logger.warning(
                "%s (%s): back from the fallback: rolling MAE %.4g vs the fallback's %.4g "
                "(version %d)", series_id, self.alias, model, fallback, self.version_)

    # -- for subclasses -----------------------------------------------------------------------
    @abc.abstractmethod
    def _fit(self, values: dict[str, FloatArray]) -> None:
        """Learn the parameters from each series' values (the calibration tail left out)."""

    def _fit_shared(self, values: dict[str, FloatArray]) -> None:
        """A global model's shared parameters (default: all of ``_fit``).

        A global model that also learns state of its own per series splits ``_fit`` into
        this hook and :meth:`_fit_local`, and its ``_fit`` calls both.
        """
        self._fit(values)

    def _fit_local(self, values: dict[str, FloatArray]) -> None:  # noqa: B027 (optional hook)
        """Each series' own state, given the shared parameters (default: none)."""

    @abc.abstractmethod
    def _forecast_many(
        self, series_id: str, history: FloatArray, ends: npt.NDArray[np.int64], steps: int
    ) -> FloatArray | Paths:
        """Forecasts from each origin in ``ends`` using ``history[:end]`` only.

        Calibration asks for up to ``conformal.MAX_ORIGINS`` origins at once, so a model that
        can share work between origins (one filter pass over the history) should.

        Returns:
            ``(len(ends), steps)`` point forecasts, or :class:`Paths` with native quantiles.
        """

    def copy(self) -> Self:
        """A deep copy (fitted state included)."""
        return copy.deepcopy(self)


#: What ``fit`` learns of the series themselves (dropped by ``fit_shared``).
_SERIES_STATE = ("series_ids_", "first_ts_", "last_ts_", "history_", "fit_len_", "fallback_",
                 "version_")


def clone(forecaster: BaseForecaster) -> BaseForecaster:
    """A new, unfitted forecaster with the same hyperparameters."""
    return type(forecaster)(**forecaster.get_params())


# -- helpers ----------------------------------------------------------------------------------
def _checked_panel(frame: pd.DataFrame, verb: str) -> tuple[pd.DataFrame, FrameStyle]:
    """The frame renamed to a panel (:mod:`prism.frames`), validated, and its style."""
    panel, style = to_panel(frame, what="new points" if verb == "update with" else "panel")
    try:
        panel = validate_panel(panel)
    except DataContractError as exc:
        if style.tz is None or "not regular" not in str(exc):
            raise
        raise DataContractError(
            f"{exc} (times in UTC, converted from {style.tz}: local days or hours are not "
            "regular across a daylight-saving change; resample the series on a UTC grid)"
        ) from exc
    if panel.empty:
        raise DataContractError(f"cannot {verb} an empty panel")
    bad = ~np.isfinite(panel[VALUE].to_numpy())
    if bad.any():
        row = panel[bad].iloc[0]
        raise DataContractError(
            f"series {row[SERIES_ID]!r} has a missing or infinite value at {row[TS]}; "
            "derive it with a --fill policy (zero, hold or linear) first"
        )
    counts = panel.groupby(SERIES_ID)[TS].count()
    if verb == "fit on" and (counts < 2).any():
        short = counts.index[counts < 2][0]
        raise DataContractError(f"series {short!r} has fewer than two points to fit on")
    return panel, style
