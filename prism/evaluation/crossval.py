"""statsforecast-style cross-validation of any PRISM forecaster, on PRISM's own backtest.

:func:`cross_validation` takes the arguments of statsforecast's ``cross_validation`` (``h``,
``n_windows``, ``step_size``, ``level``, ``refit``) and returns its frame layout, one column
per model and interval bound::

    unique_id, ds, cutoff, y, <model>, <model>-lo-90, <model>-hi-90

It is a thin adapter: the cutoffs, the refits and the actuals are those of
:func:`prism.evaluation.backtest.backtest` (its one cutoff rule places the last window's
forecast at the end of each series, as statsforecast does), and the frame is only renamed and
pivoted. A PRISM frame (``series_id, ts, value``) comes back keyed ``series_id, ts, cutoff,
value``; zoned times come back in their zone (:mod:`prism.frames`). ``<model>`` is the
point forecast (``mean``); ``-lo-L``/``-hi-L`` are the quantiles ``(1 - L/100)/2`` and
``(1 + L/100)/2`` of the model's calibrated bands.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Literal

import pandas as pd

from prism.errors import ConfigError
from prism.evaluation.backtest import CUTOFF, MODEL, backtest
from prism.forecasters import BaseForecaster
from prism.forecasters.base import quantile_column
from prism.frames import to_frame, to_panel
from prism.schema import SERIES_ID, TS, VALUE

__all__ = ["cross_validation"]


def cross_validation(
    forecaster: BaseForecaster | Sequence[BaseForecaster] | Mapping[str, BaseForecaster],
    df: pd.DataFrame,
    *,
    h: int | str,
    n_windows: int = 1,
    step_size: int | str = 1,
    level: Sequence[float] | None = None,
    refit: bool | int = True,
) -> pd.DataFrame:
    """Rolling-origin cross-validation in statsforecast's layout.

    Args:
        forecaster: a forecaster, a sequence of them (each named by its ``alias``) or a
            mapping from column name to forecaster. They are cloned, never fitted.
        df: a regular panel, ``unique_id, ds, y`` or ``series_id, ts, value``; times may be
            timezone-aware.
        h: forecast length, in steps or as a duration (``"1d"``).
        n_windows: cutoffs per series.
        step_size: steps (or a duration) between consecutive cutoffs.
        level: interval levels in percent (``[80, 90]``), each strictly between 0 and 100.
        refit: ``True`` refits at every cutoff, ``k`` every ``k`` cutoffs, ``False`` only at
            the first (the model is ``update``-d with the new points in between).

    Returns:
        ``unique_id, ds, cutoff, y`` (or ``series_id, ts, cutoff, value`` for a PRISM frame),
        then per model ``<model>``, its ``<model>-lo-L`` and then its ``<model>-hi-L``
        columns, lowest level first (statsforecast's order); ``h`` rows per series and cutoff,
        sorted by series, cutoff and time.

    Raises:
        ConfigError: for a bad ``h``, ``step_size``, ``n_windows``, level or ``refit``.
        DataContractError: for a frame of neither naming or a mix, a frame that breaks the
            panel contract, or a series too short for the windows.
    """
    panel, style = to_panel(df)
    levels = _levels(level)
    bounds = {lv: ((100 - float(lv)) / 200, (100 + float(lv)) / 200) for lv in levels}
    quantiles = sorted({q for pair in bounds.values() for q in pair})
    frame = backtest(forecaster, panel, horizon=h, windows=n_windows, step=step_size,
                     quantiles=quantiles, refit=_refit(refit, n_windows))
    keys = [SERIES_ID, TS, CUTOFF]
    names = list(dict.fromkeys(frame[MODEL]))  # in the order given
    out = frame.loc[frame[MODEL] == names[0], [*keys, VALUE]].reset_index(drop=True)
    for name in names:
        # every model has the same rows in the same order (backtest sorts them alike)
        rows = frame.loc[frame[MODEL] == name].reset_index(drop=True)
        if not rows[keys].equals(out[keys]):
            raise RuntimeError(f"{name!r} was backtested on other rows; this is a bug")
        out[name] = rows["mean"]
        for lv in levels:
            out[f"{name}-lo-{lv}"] = rows[quantile_column(bounds[lv][0])]
        for lv in levels:
            out[f"{name}-hi-{lv}"] = rows[quantile_column(bounds[lv][1])]
    return to_frame(out, style)


def _levels(level: Sequence[float] | None) -> list[float]:
    """The levels sorted and unique, as given (``90`` stays ``90`` in column names)."""
    if level is None:
        return []
    if isinstance(level, str | int | float):
        raise ConfigError(f"level must be a list of percentages, e.g. [80, 90]; got {level!r}")
    by_value: dict[float, float] = {}
    for lv in level:
        if isinstance(lv, bool) or not isinstance(lv, numbers.Real) or not 0 < lv < 100:
            raise ConfigError(
                f"each level is a percentage strictly between 0 and 100 (e.g. 90); got {lv!r}")
        by_value.setdefault(float(lv), lv)
    return [by_value[v] for v in sorted(by_value)]


def _refit(refit: bool | int, n_windows: int) -> int | Literal["always"]:
    """statsforecast's ``refit`` as :func:`backtest`'s."""
    if refit is True:
        return "always"
    if refit is False:
        return n_windows if isinstance(n_windows, int) and n_windows >= 1 else 1
    if isinstance(refit, numbers.Integral) and refit >= 1:
        return int(refit)
    raise ConfigError(f"refit must be True, False or a whole number k >= 1, got {refit!r}")
