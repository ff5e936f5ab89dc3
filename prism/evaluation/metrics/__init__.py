"""Forecast metrics: pure functions over arrays and over backtest frames.

Array functions take actuals ``y`` and forecasts ``f`` (same shape) and return one number;
frame functions take a backtest frame (``series_id, ts, cutoff, model, mean, p.., value``, see
:func:`prism.evaluation.backtest.backtest`) and the panel it was run on (the in-sample history that
scales MASE and sets the burst threshold before each cutoff) and return tidy tables:

- :func:`evaluate`: one row per ``(model, series_id, cutoff)`` window;
- :func:`by_step`: one row per ``(model, horizon_step)`` (step 1 is the first after the cutoff);
- :func:`summary`: one row per model, the mean over its windows
  (:func:`summary_and_windows`: it and :func:`evaluate`, the points scored once).

Accuracy claims are ratios against a baseline (the last value, ``naive``), per window, over the
per-window frame of :func:`evaluate`:

- :func:`relative_mae`: each window's ``mae_model / mae_baseline``;
- :func:`avg_rel_mae`: per model the geometric mean of those ratios (AvgRelMAE) with a paired
  block-bootstrap interval over cutoffs;
- :func:`relative_to`: the same for two models against each other (ablations);
- :func:`summarize_windows` / :func:`panel_summary`: one row per model of a panel, AvgRelMAE
  with its interval next to MASE, pooled WAPE, CRPS, 90 % coverage and width, catastrophes.

Metric columns (``q`` is a quantile column such as ``p90``; formulas in each function):

==========================  ==================================================================
``mae`` / ``rmse``          of the ``mean`` forecast
``mase``                    MAE over the in-sample one-day seasonal naive MAE before the cutoff
``smape``                   ``mean(|y - f| / (|y| + |f|))``, in [0, 1], ``0/0 = 0``
``wape``                    ``sum|y - f| / sum|y|`` (``NaN`` when every actual is 0)
``mean_abs_actual``         ``mean(|y|)``: the window's level (scales ratios and widths)
``pinball_q``               pinball (quantile) loss of each quantile column
``crps``                    ``2 * mean_q pinball_q`` over the frame's quantile columns
``coverage_L``              share of actuals inside the central ``L``% interval
``width_L``                 mean width of that interval (upper minus lower quantile)
``burst_mse``               MSE of the mean over burst steps (change above the in-sample p95)
``under_q`` / ``over_q``    share of steps with ``y > q`` / mean GPUs ``max(q - y, 0)`` idle
==========================  ==================================================================

MASE is undefined (``NaN``) for a window whose in-sample seasonal changes are all zero (a
constant history) or that has less than one season and a step of history; such windows are
logged, left out of the means and counted in :func:`summary`'s ``mase_undefined``.
"""

from prism.evaluation.metrics.arrays import (
    burst_mse,
    burst_threshold,
    check_level,
    coverage,
    crps,
    mae,
    mase,
    over_provisioning,
    pinball_loss,
    rmse,
    seasonal_scale,
    smape,
    under_provisioning_rate,
    wape,
)
from prism.evaluation.metrics.frames import (
    CUTOFF,
    HORIZON_STEP,
    MEAN,
    MODEL,
    PROVISION_FROM,
    WINDOW_KEYS,
    by_step,
    evaluate,
    quantile_levels,
    summary,
    summary_and_windows,
)
from prism.evaluation.metrics.relative import (
    CATASTROPHE,
    FLOOR_MIN,
    FLOOR_SHARE,
    REL_MAE,
    avg_rel_mae,
    panel_summary,
    relative_mae,
    relative_to,
    summarize_windows,
)

__all__ = [
    "CATASTROPHE",
    "CUTOFF",
    "FLOOR_MIN",
    "FLOOR_SHARE",
    "HORIZON_STEP",
    "MEAN",
    "MODEL",
    "PROVISION_FROM",
    "REL_MAE",
    "WINDOW_KEYS",
    "avg_rel_mae",
    "burst_mse",
    "burst_threshold",
    "by_step",
    "check_level",
    "coverage",
    "crps",
    "evaluate",
    "mae",
    "mase",
    "over_provisioning",
    "panel_summary",
    "pinball_loss",
    "quantile_levels",
    "relative_mae",
    "relative_to",
    "rmse",
    "seasonal_scale",
    "smape",
    "summarize_windows",
    "summary",
    "summary_and_windows",
    "under_provisioning_rate",
    "wape",
]
