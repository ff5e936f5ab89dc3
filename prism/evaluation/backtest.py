"""Rolling-origin backtests: refit at each cutoff, forecast, line the forecast up with the actuals.

Cutoffs are placed as statsforecast's ``cross_validation`` places them, per series: the last
window ends at the series' last observation and the ``windows`` cutoffs are ``step`` apart
going back from there. With ``n`` points, horizon ``h`` and step ``s`` (both in steps), window
``w = 0 .. windows - 1`` has its cutoff at position ``n - 1 - h - (windows - 1 - w) * s`` (0 is
the first point): the model is fitted on the points up to and including the cutoff and
forecasts the ``h`` points after it.

At each cutoff the forecaster sees only the points with ``ts <= cutoff`` of each series
(:func:`_until` slices them, and nothing else reaches the forecaster), and each forecast must
start one step after its cutoff, so a model fitted on more than it should is caught.

A series too short for the backtest (fewer than ``h + (windows - 1) * s + MIN_TRAIN`` points)
raises a :class:`~prism.errors.DataContractError` naming it and the points it needs; with
``on_short="skip"`` it is left out with a logged warning instead (for ``--all`` over a store
whose series have different lengths).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.forecasters import BaseForecaster, clone
from prism.forecasters.base import horizon_steps, quantile_column
from prism.forecasters.panel_fast import forecast_panel, supports_panel
from prism.schema import SERIES_ID, TS, VALUE, panel_freq, validate_panel

logger = logging.getLogger(__name__)

CUTOFF = "cutoff"
MODEL = "model"
#: The window index (0 is the earliest) in :func:`backtest_cutoffs`.
WINDOW = "window"
#: Fewest training points a series has at its earliest cutoff (``fit`` needs two).
MIN_TRAIN = 2

Progress = Callable[[int, int], None]


def cutoff_positions(n: int, h: int, s: int, windows: int) -> list[int]:
    """Positions of the cutoffs of a series of ``n`` points (empty when it is too short).

    Window ``w`` has its cutoff at ``n - 1 - h - (windows - 1 - w) * s``: the last window's
    forecast of ``h`` steps ends at the last point, as statsforecast's ``cross_validation``
    places them; the earliest keeps at least ``MIN_TRAIN`` points to fit on. The one cutoff
    rule: :func:`backtest_cutoffs` and the batch engine both use it.
    """
    if n < h + (windows - 1) * s + MIN_TRAIN:
        return []
    return [n - 1 - h - (windows - 1 - w) * s for w in range(windows)]


def backtest_cutoffs(
    panel: pd.DataFrame,
    *,
    horizon: int | str,
    windows: int = 7,
    step: int | str | None = None,
    on_short: Literal["raise", "skip"] = "raise",
) -> pd.DataFrame:
    """The cutoff of every series and window, placed like statsforecast's ``cross_validation``.

    Window ``w`` of a series of ``n`` points has its cutoff at position
    ``n - 1 - h - (windows - 1 - w) * s``: the last window's forecast ends at the last point.

    Args:
        panel: a regular panel (``series_id, ts, value``), one step for all series.
        horizon: forecast length, in steps or as a duration (``"1d"``).
        windows: how many cutoffs per series.
        step: steps (or a duration) between consecutive cutoffs; ``None`` means ``horizon``.
        on_short: ``"raise"`` for a series with too few points, or ``"skip"`` it (logged).

    Returns:
        ``series_id, window, cutoff`` sorted by series and window.

    Raises:
        DataContractError: for a panel that breaks the contract, or (with ``on_short="raise"``)
            a series shorter than ``h + (windows - 1) * s + MIN_TRAIN`` points.
        ConfigError: for a bad horizon, step, window count or ``on_short``.
    """
    panel = validate_panel(panel)
    if panel.empty:
        raise DataContractError("cannot backtest an empty panel")
    h, s = _steps(panel, horizon, windows, step)
    if on_short not in ("raise", "skip"):
        raise ConfigError(f"on_short must be 'raise' or 'skip', got {on_short!r}")
    need = h + (windows - 1) * s + MIN_TRAIN
    rows: list[dict[str, Any]] = []
    short: dict[str, int] = {}
    for sid, group in panel.groupby(SERIES_ID, sort=True):
        n = len(group)
        if n < need:
            reason = (
                f"series {sid!r} has {n} points but a backtest of {windows} window(s) of "
                f"{h} step(s), {s} step(s) apart, needs at least {need} "
                f"(horizon + (windows - 1) * step + {MIN_TRAIN} to fit on)"
            )
            if on_short == "raise":
                raise DataContractError(
                    f"{reason}: pass fewer windows, a shorter horizon or step, or leave the "
                    "series out (a backtest of a cluster, a metric or --all skips short series "
                    "with a note; in Python, on_short='skip')"
                )
            short[str(sid)] = n
            continue
        ts = group[TS].to_numpy()
        for w, position in enumerate(cutoff_positions(n, h, s, windows)):
            rows.append({SERIES_ID: str(sid), WINDOW: w, CUTOFF: ts[position]})
    if not rows:
        longest = max(short.values())
        fits = (longest - MIN_TRAIN - h) // s + 1 if longest >= h + MIN_TRAIN else 0
        raise DataContractError(
            f"no series is long enough for {windows} window(s) of {h} step(s), {s} apart "
            f"(each needs {need} points; the longest holds {longest}): "
            + (f"pass at most {fits} window(s), or a shorter horizon" if fits
               else "pass a shorter horizon")
        )
    if short:  # one line (a cluster's VCs that began late); callers say it their way
        first = min(short, key=short.__getitem__)
        logger.info("skipped %d series shorter than the %d points a backtest of %d "
                       "window(s) of %d step(s), %d apart, needs (the shortest, %s, holds %d)",
                       len(short), need, windows, h, s, first, short[first])
    out = pd.DataFrame(rows)
    out[CUTOFF] = out[CUTOFF].astype("datetime64[ns]")
    return out


def backtest(
    forecaster: BaseForecaster | Sequence[BaseForecaster] | Mapping[str, BaseForecaster],
    panel: pd.DataFrame,
    *,
    horizon: int | str,
    windows: int = 7,
    step: int | str | None = None,
    quantiles: Sequence[float] = (0.5, 0.9, 0.99),
    refit: int | Literal["always"] = "always",
    on_short: Literal["raise", "skip"] = "raise",
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Rolling-origin backtest of one or more forecasters (cutoffs: :func:`backtest_cutoffs`).

    At each refit cutoff a fresh ``clone`` of the forecaster is fitted on the points up to the
    cutoff; with ``refit=k`` the model is refitted at every ``k``-th cutoff (the first included)
    and in between the last fitted model is ``update``-d with the points since the previous
    cutoff (cheaper: parameters are not relearned; the serving fallback to seasonal naive is
    not checked there, so each row is the named model's). The given forecasters are never
    fitted.

    Args:
        forecaster: a forecaster, a sequence of them (each named by its ``alias``), or a
            mapping from model name to forecaster (to compare settings of one model).
        panel: a regular panel (``series_id, ts, value``).
        horizon: forecast length, in steps or as a duration (``"1d"``).
        windows: cutoffs per series.
        step: steps (or a duration) between cutoffs; ``None`` means ``horizon``.
        quantiles: quantile levels to forecast.
        refit: ``"always"`` (refit at every cutoff) or ``k >= 1`` (refit every ``k`` cutoffs).
        on_short: what to do with a series too short for the backtest: ``"raise"`` or
            ``"skip"`` (logged).
        progress: called as ``progress(done, total)`` after each model and window.

    Returns:
        The forecast contract plus ``cutoff`` and ``value`` (the actual):
        ``series_id, ts, cutoff, model, mean, p.., value``, ``horizon`` rows per series, window
        and model, sorted by model (in the given order), series, cutoff and ts.

    Raises:
        ConfigError: for a bad horizon, step, window count, ``refit``, or duplicate model names.
        DataContractError: for a bad panel or a series too short (see :func:`backtest_cutoffs`),
            or one a forecaster cannot be fitted on (the cutoff is named).
        RuntimeError: when a forecast does not start one step after its cutoff (the model saw
            data after the cutoff, or lost some).
    """
    models = _named(forecaster)
    every = _refit_every(refit)
    panel = validate_panel(panel)
    cuts = backtest_cutoffs(panel, horizon=horizon, windows=windows, step=step,
                            on_short=on_short)
    h, _ = _steps(panel, horizon, windows, step)
    panel = panel[panel[SERIES_ID].isin(cuts[SERIES_ID].unique())].reset_index(drop=True)
    freq = pd.Timedelta(seconds=panel_freq(panel, purpose="be backtested together"))
    by_window = [cuts[cuts[WINDOW] == w].set_index(SERIES_ID)[CUTOFF] for w in range(windows)]
    total = len(models) * windows
    done = 0
    frames = []
    for name, template in models.items():
        model: BaseForecaster | None = None
        # a cheap baseline refitted at every cutoff: its vectorised panel path, the same
        # numbers as fit then predict series by series (tests/forecasters/test_panel_fast.py)
        fast = every == 1 and supports_panel(template)
        for w, cutoff in enumerate(by_window):
            try:
                if fast:
                    fc = forecast_panel(template, _until(panel, cutoff), h, quantiles)
                else:
                    if model is None or w % every == 0:
                        model = clone(template).fit(_until(panel, cutoff))
                    else:
                        # the model named, not the serving fallback it may switch to
                        model = model.update(_between(panel, by_window[w - 1], cutoff),
                                             fallback=False)
                    fc = model.predict(h, quantiles)
            except (DataContractError, ConfigError) as exc:
                raise type(exc)(
                    f"backtest of {name!r} at window {w} (first cutoff {cutoff.min()}): {exc}"
                ) from exc
            frames.append(_with_actuals(fc, cutoff, panel, name, h, freq))
            done += 1
            logger.debug("backtest %s: window %d/%d done", name, w + 1, windows)
            if progress is not None:
                progress(done, total)
    out = pd.concat(frames, ignore_index=True)
    order = {name: i for i, name in enumerate(models)}
    out = out.sort_values([MODEL, SERIES_ID, CUTOFF, TS], key=lambda c: c.map(order)
                          if c.name == MODEL else c, kind="stable").reset_index(drop=True)
    qcols = [quantile_column(q) for q in sorted({float(q) for q in quantiles})]
    return out[[SERIES_ID, TS, CUTOFF, MODEL, "mean", *qcols, VALUE]]


# -- helpers ----------------------------------------------------------------------------------
def _named(
    forecaster: BaseForecaster | Sequence[BaseForecaster] | Mapping[str, BaseForecaster],
) -> dict[str, BaseForecaster]:
    """Model name -> forecaster; names must be unique."""
    if isinstance(forecaster, BaseForecaster):
        return {forecaster.alias: forecaster}
    if isinstance(forecaster, Mapping):
        named = {str(k): v for k, v in forecaster.items()}
    else:
        named = {}
        for f in forecaster:
            if f.alias in named:
                raise ConfigError(
                    f"model {f.alias!r} is given twice; pass a mapping of distinct names to "
                    "compare settings of one model"
                )
            named[f.alias] = f
    if not named:
        raise ConfigError("backtest needs at least one forecaster")
    bad = [k for k, v in named.items() if not isinstance(v, BaseForecaster)]
    if bad:
        raise ConfigError(f"{bad[0]!r} is not a forecaster (a BaseForecaster subclass)")
    return named


def _refit_every(refit: int | str) -> int:
    if refit == "always":
        return 1
    if isinstance(refit, int | np.integer) and not isinstance(refit, bool) and refit >= 1:
        return int(refit)
    raise ConfigError(
        f"refit must be 'always' or a whole number k >= 1 (refit every k cutoffs), got {refit!r}"
    )


def _steps(panel: pd.DataFrame, horizon: int | str, windows: int,
           step: int | str | None) -> tuple[int, int]:
    """``(horizon, step)`` in steps of the panel's frequency."""
    if isinstance(windows, bool) or not isinstance(windows, int | np.integer) or windows < 1:
        raise ConfigError(f"windows must be a whole number >= 1, got {windows!r}")
    freq_s = panel_freq(panel, purpose="be backtested together")
    h = horizon_steps(horizon, freq_s)
    s = h if step is None else horizon_steps(step, freq_s)
    return h, s



def _cutoff_of_rows(panel: pd.DataFrame, cutoff: pd.Series) -> pd.Series:
    """Each row's series cutoff (``NaT`` for a series without one)."""
    return panel[SERIES_ID].map(cutoff)


def _until(panel: pd.DataFrame, cutoff: pd.Series) -> pd.DataFrame:
    """The points of each series with ``ts <= `` its cutoff (the only data a model is fitted on).

    Args:
        panel: the sorted panel.
        cutoff: series id -> cutoff.
    """
    keep = panel[TS] <= _cutoff_of_rows(panel, cutoff)
    return panel.loc[keep.to_numpy()].reset_index(drop=True)


def _between(panel: pd.DataFrame, after: pd.Series, until: pd.Series) -> pd.DataFrame:
    """The points of each series with ``after < ts <= until`` (what ``update`` is given)."""
    ts = panel[TS]
    keep = (ts > _cutoff_of_rows(panel, after)) & (ts <= _cutoff_of_rows(panel, until))
    return panel.loc[keep.to_numpy()].reset_index(drop=True)


def _with_actuals(fc: pd.DataFrame, cutoff: pd.Series, panel: pd.DataFrame, name: str,
                  h: int, freq: pd.Timedelta) -> pd.DataFrame:
    """The forecast with ``cutoff``, ``model`` and the actual ``value`` of each row."""
    fc = fc.copy()
    fc[MODEL] = name
    fc[CUTOFF] = fc[SERIES_ID].map(cutoff).astype("datetime64[ns]")
    first = fc.groupby(SERIES_ID)[TS].min()
    expected = cutoff.reindex(first.index) + freq
    counts = fc.groupby(SERIES_ID)[TS].count()
    wrong = (first != expected) | (counts != h)
    if wrong.any() or set(first.index) != set(cutoff.index):
        sid = str(first.index[wrong.to_numpy()][0]) if wrong.any() else "(a series)"
        got = first.get(sid, pd.NaT)
        raise RuntimeError(
            f"{name!r} forecast {sid} from {got} but its cutoff is {cutoff.get(sid, pd.NaT)}: "
            "the model was not fitted on exactly the points up to the cutoff"
        )
    out = fc.merge(panel, on=[SERIES_ID, TS], how="left", validate="one_to_one")
    if out[VALUE].isna().any():
        raise RuntimeError(f"{name!r}: forecast rows without an actual; this is a bug")
    return out
