"""Relative accuracy: each window's MAE over a baseline's, AvgRelMAE with a bootstrap interval."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.evaluation.metrics.arrays import check_level
from prism.evaluation.metrics.frames import CUTOFF, MODEL, WINDOW_KEYS, evaluate
from prism.schema import SERIES_ID

logger = logging.getLogger(__name__)

ArrayLike = npt.ArrayLike
FloatArray = npt.NDArray[np.float64]

# -- relative accuracy ------------------------------------------------------------------------
#: A window's MAE is floored at this share of its series' mean absolute actual over the
#: baseline's windows (ratios stay finite).
FLOOR_SHARE = 1e-3
#: The floor of a series whose actuals are all 0.
FLOOR_MIN = 1e-9
#: A window whose MAE is more than this many times the baseline's is a catastrophe.
CATASTROPHE = 2.0
REL_MAE = "rel_mae"
_WINDOW_NEED = (MODEL, SERIES_ID, CUTOFF, "mae", "mean_abs_actual")


def relative_mae(windows: pd.DataFrame, *, baseline: str = "naive") -> pd.DataFrame:
    """Each window's MAE relative to the baseline's MAE in the same window.

    The ratio is ``max(mae, floor) / max(mae_baseline, floor)`` with ``floor = 1e-3`` of the
    series' level: the mean of ``mean_abs_actual`` over the baseline's windows of the series
    (``1e-9`` when its actuals are all 0), so that a window where the baseline is exactly
    right (a flat stretch) gives a large but finite ratio. The floor is the series', not the
    window's: with the window's, an idle hour of a busy series (arrivals at night: every actual
    0, the last value 0) floored at ``1e-9``, and a forecast 0.1 off there counted 1e8 times
    the last value's error. Three such windows of 168 made ``gbm``, 16 % better than the last
    value on the other 165 windows of the generated arrivals an hour ahead, 12 % worse in all
    (11 % better with the series' floor). Windows where both MAEs are 0 say nothing about
    either model and are left out. The baseline's own windows are kept (ratio 1, unless its
    MAE is 0).

    Args:
        windows: the per-window frame of :func:`evaluate` (``model, series_id, cutoff, mae,
            mean_abs_actual, ...``). Every other column that is not a number (say ``dataset``
            or ``horizon``) is a key of the window too and is carried to the output.
        baseline: the model the others are divided by.

    Returns:
        ``<extra keys>, model, series_id, cutoff, mae, mae_baseline, rel_mae``, one row per
        window of each model, in the frame's order.

    Raises:
        DataContractError: for a frame missing columns, a window given twice, or a window of a
            model that the baseline lacks (run the baseline in the same backtest).
    """
    missing = [c for c in _WINDOW_NEED if c not in windows.columns]
    if missing:
        raise DataContractError(
            f"relative accuracy needs the per-window frame of evaluate() with columns "
            f"{list(_WINDOW_NEED)}; missing {missing}"
        )
    keys = [*_extra_keys(windows), SERIES_ID, CUTOFF]
    repeated = windows.duplicated([MODEL, *keys])
    if repeated.any():
        first = windows.loc[repeated].iloc[0]
        raise DataContractError(
            f"window (model {first[MODEL]!r}, series {first[SERIES_ID]!r}, cutoff "
            f"{first[CUTOFF]}) appears more than once; give the column that tells the copies "
            "apart (e.g. dataset or horizon) as text, so that it is a key"
        )
    base = windows.loc[windows[MODEL] == baseline, [*keys, "mae", "mean_abs_actual"]]
    if base.empty:
        raise DataContractError(
            f"no window of the baseline {baseline!r} (models: "
            f"{list(pd.unique(windows[MODEL]))}); run the baseline in the same backtest"
        )
    out = windows[[*keys[:-2], MODEL, SERIES_ID, CUTOFF, "mae", "mean_abs_actual"]].merge(
        base[[*keys, "mae"]].rename(columns={"mae": "mae_baseline"}), on=keys, how="left",
        indicator=True, sort=False)
    lacking = out["_merge"] == "left_only"
    if lacking.any():
        first = out.loc[lacking].iloc[0]
        raise DataContractError(
            f"model {first[MODEL]!r} has a window (series {first[SERIES_ID]!r}, cutoff "
            f"{first[CUTOFF]}) that the baseline {baseline!r} lacks: run the baseline in the "
            "same backtest, on the same series and cutoffs"
        )
    model_mae = out["mae"].to_numpy(np.float64)
    base_mae = out["mae_baseline"].to_numpy(np.float64)
    # each series' scale: its mean absolute actual over the baseline's windows (the same for
    # every model, whichever windows it has)
    per_series = base.groupby(keys[:-1], sort=False)["mean_abs_actual"].mean().rename("scale")
    scale = out[keys[:-1]].join(per_series, on=keys[:-1])["scale"].to_numpy(np.float64)
    floor = np.maximum(FLOOR_SHARE * scale, FLOOR_MIN)
    out[REL_MAE] = np.maximum(model_mae, floor) / np.maximum(base_mae, floor)
    keep = ~((model_mae == 0) & (base_mae == 0))
    out = out.loc[keep].drop(columns=["_merge", "mean_abs_actual"])
    return out.reset_index(drop=True)


def avg_rel_mae(
    windows: pd.DataFrame,
    *,
    baseline: str = "naive",
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """AvgRelMAE per model: the geometric mean over windows of :func:`relative_mae`.

    ``exp(mean(log r))`` over the model's windows: below 1 the model beats the baseline, and
    no single window (a near-idle series, a flat day) can dominate it as it dominates a mean of
    ratios. The interval is a paired block bootstrap over cutoffs: each replicate draws the
    frame's cutoffs with replacement, and all windows at a drawn cutoff (every series, every
    other key) come along, so that the correlation between series at one time is kept; with
    one series this is resampling windows. The same draws serve every model (paired). The
    geometric mean of each replicate is computed at once from a ``(n_boot, n_cutoffs)``
    matrix of draw counts times the per-cutoff sums of log ratios; the interval is the
    replicates' percentile interval.

    Args:
        windows: the per-window frame of :func:`evaluate` (see :func:`relative_mae`).
        baseline: the model the others are divided by.
        n_boot: bootstrap replicates.
        level: the interval's coverage (0.95: the 2.5 and 97.5 percentiles).
        random_state: seed of the draws.

    Returns:
        ``model, avg_rel_mae, lo, hi, windows`` in the frame's model order, ``windows`` the
        count used (both-zero windows left out); a model without one has ``NaN``.

    Raises:
        DataContractError: as :func:`relative_mae`.
        ConfigError: for ``n_boot < 1`` or a level outside (0, 1).
    """
    rel = relative_mae(windows, baseline=baseline)
    return _geometric_means(rel, n_boot=n_boot, level=level, random_state=random_state,
                            models=list(pd.unique(windows[MODEL])))


def relative_to(
    windows: pd.DataFrame,
    model: str | Sequence[str],
    reference: str,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """How much better or worse ``model`` is than ``reference``, paired window by window.

    The ratio is ``exp(mean(log r_model - log r_reference))`` over the windows both have,
    which is the AvgRelMAE of ``model`` with ``reference`` as the baseline (the baseline's
    MAE cancels out of the difference of logs); floors and left-out windows as in
    :func:`relative_mae`, interval as in :func:`avg_rel_mae`. For ablations: with ``model``
    PRISM with a part turned off and ``reference`` PRISM, a ratio of 1.05 means turning the
    part off costs 5 % of MAE.

    Args:
        windows: the per-window frame of :func:`evaluate`.
        model: a model, or several (one row each).
        reference: the model they are compared with.
        n_boot: bootstrap replicates.
        level: the interval's coverage.
        random_state: seed of the draws.

    Returns:
        ``model, reference, ratio, lo, hi, windows``.

    Raises:
        DataContractError: for a model not in the frame, or as :func:`relative_mae` (here the
            reference must have every window of the models).
        ConfigError: as :func:`avg_rel_mae`.
    """
    models = [model] if isinstance(model, str) else list(model)
    present = set(pd.unique(windows[MODEL])) if MODEL in windows.columns else set()
    absent = [m for m in [*models, reference] if m not in present]
    if absent:
        raise DataContractError(
            f"models {absent} have no window in the frame (models: {sorted(present)}); "
            "evaluate them in the same backtest"
        )
    rel = relative_mae(windows[windows[MODEL].isin([*models, reference])], baseline=reference)
    out = _geometric_means(rel, n_boot=n_boot, level=level, random_state=random_state,
                           models=models)
    out.insert(1, "reference", reference)
    return out.rename(columns={"avg_rel_mae": "ratio"})


def summarize_windows(
    windows: pd.DataFrame,
    *,
    baseline: str = "naive",
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """One row per model of a panel's windows: the decision metrics.

    Every window given is pooled (call it once per panel and horizon):

    - ``avg_rel_mae``, ``lo``, ``hi``, ``windows``: :func:`avg_rel_mae`;
    - ``mase``, ``crps``, ``coverage_90``: means over the model's windows (``coverage_90`` is
      ``NaN`` when the frame has no ``p5``/``p95``); ``coverage_lo``, ``coverage_hi``: the
      coverage's block-bootstrap interval over cutoffs;
    - ``wape``: pooled, the total absolute error over the total actual of all windows
      (``sum n * mae / sum n * mean_abs_actual``), not a mean of window WAPEs;
    - ``width_90``: the mean width of the 90 % interval (``p95 - p5``) over the mean
      ``|actual|`` of the windows: a relative width, comparable across panels (0.5 means the
      interval spans half the average level);
    - ``catastrophes``: the share of windows whose MAE is more than twice the baseline's in the
      same window (``rel_mae > 2``, floors as in :func:`relative_mae`).

    Args:
        windows: the per-window frame of :func:`evaluate`.
        baseline: the model ratios are taken against.
        n_boot: bootstrap replicates.
        level: the interval's coverage.
        random_state: seed of the draws.

    Returns:
        ``model, avg_rel_mae, lo, hi, mase, wape, crps, coverage_90, coverage_lo,
        coverage_hi, width_90, catastrophes, windows`` in the frame's model order.

    Raises:
        DataContractError: as :func:`relative_mae`.
        ConfigError: as :func:`avg_rel_mae`.
    """
    models = list(pd.unique(windows[MODEL])) if MODEL in windows.columns else []
    rel = relative_mae(windows, baseline=baseline)
    out = _geometric_means(rel, n_boot=n_boot, level=level, random_state=random_state,
                           models=models).set_index(MODEL)
    g = windows.groupby(MODEL, sort=False)
    n = windows["n"] if "n" in windows.columns else pd.Series(1.0, index=windows.index)
    errors = (n * windows["mae"]).groupby(windows[MODEL], sort=False).sum()
    volume = (n * windows["mean_abs_actual"]).groupby(windows[MODEL], sort=False).sum()
    mean_level = g["mean_abs_actual"].mean()
    for col in ("mase", "crps", "coverage_90"):
        out[col] = g[col].mean() if col in windows.columns else np.nan
    out["wape"] = errors / volume.where(volume > 0)
    if "width_90" in windows.columns:
        out["width_90"] = g["width_90"].mean() / mean_level.where(mean_level > 0)
    else:
        out["width_90"] = np.nan
    out["catastrophes"] = (rel[REL_MAE] > CATASTROPHE).groupby(rel[MODEL], sort=False).mean()
    out[["coverage_lo", "coverage_hi"]] = _coverage_intervals(
        windows, models, n_boot=n_boot, level=level, random_state=random_state)
    cols = ["avg_rel_mae", "lo", "hi", "mase", "wape", "crps", "coverage_90", "coverage_lo",
            "coverage_hi", "width_90", "catastrophes", "windows"]
    return out[cols].reset_index()


def _coverage_intervals(windows: pd.DataFrame, models: list[str], *, n_boot: int,
                        level: float, random_state: int | None) -> FloatArray:
    """``(len(models), 2)``: each model's mean 90 % coverage's block-bootstrap interval
    over cutoffs (as :func:`avg_rel_mae`'s: whole cutoffs drawn with replacement), so that
    a coverage off 0.90 can be told from the noise of a few correlated windows."""
    out = np.full((len(models), 2), np.nan)
    if "coverage_90" not in windows.columns or windows.empty:
        return out
    blocks, cutoffs = pd.factorize(windows[CUTOFF], sort=True)
    k = len(cutoffs)
    counts = np.random.default_rng(random_state).multinomial(
        k, np.full(k, 1.0 / k), size=n_boot)
    values = windows["coverage_90"].to_numpy(np.float64)
    by_model = windows.groupby(MODEL, sort=False).indices
    for i, name in enumerate(models):
        idx = by_model.get(name, np.array([], dtype=np.int64))
        idx = idx[np.isfinite(values[idx])]
        if idx.size == 0:
            continue
        sums = np.bincount(blocks[idx], weights=values[idx], minlength=k)
        sizes = np.bincount(blocks[idx], minlength=k).astype(np.float64)
        num, den = counts @ sums, counts @ sizes
        reps = np.divide(num, den, out=np.full(n_boot, np.nan), where=den > 0)
        out[i] = np.nanquantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return out


def panel_summary(
    frame: pd.DataFrame,
    panel: pd.DataFrame,
    *,
    baseline: str = "naive",
    n_boot: int = 1000,
    level: float = 0.95,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """The decision metrics of a backtest on one panel: :func:`summarize_windows` of
    :func:`evaluate`.

    Args:
        frame: a backtest frame with the baseline among its models (``p5`` and ``p95`` for
            the 90 % coverage and width).
        panel: the panel the backtest ran on.
        baseline: the model ratios are taken against.
        n_boot: bootstrap replicates.
        level: the interval's coverage.
        random_state: seed of the draws.

    Returns:
        ``model, avg_rel_mae, lo, hi, mase, wape, crps, coverage_90, coverage_lo,
        coverage_hi, width_90, catastrophes, windows`` (see :func:`summarize_windows`).

    Raises:
        DataContractError: as :func:`evaluate` and :func:`relative_mae` (no baseline).
        ConfigError: as :func:`evaluate` and :func:`avg_rel_mae`.
    """
    return summarize_windows(evaluate(frame, panel), baseline=baseline, n_boot=n_boot,
                             level=level, random_state=random_state)


def _extra_keys(windows: pd.DataFrame) -> list[str]:
    """The columns besides model, series and cutoff that identify a window (not numbers)."""
    return [str(c) for c in windows.columns if c not in WINDOW_KEYS
            and (not pd.api.types.is_numeric_dtype(windows[c])
                 or pd.api.types.is_bool_dtype(windows[c]))]


def _geometric_means(
    rel: pd.DataFrame, *, n_boot: int, level: float, random_state: int | None,
    models: list[str],
) -> pd.DataFrame:
    """Per model: ``exp(mean(log rel_mae))`` and its block-bootstrap interval over cutoffs."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ConfigError(f"n_boot must be a whole number >= 1, got {n_boot!r}")
    check_level(level)
    blocks, cutoffs = pd.factorize(rel[CUTOFF], sort=True)
    k = len(cutoffs)
    rng = np.random.default_rng(random_state)
    # one draw of cutoffs for every model: the intervals of two models are paired
    counts = rng.multinomial(k, np.full(k, 1.0 / k), size=n_boot) if k else None
    logs = np.log(rel[REL_MAE].to_numpy(np.float64))
    by_model = rel.groupby(MODEL, sort=False).indices
    rows = []
    for name in models:
        idx = by_model.get(name, np.array([], dtype=np.int64))
        est, lo, hi = _bootstrap_geomean(logs[idx], blocks[idx], counts, level)
        rows.append({MODEL: name, "avg_rel_mae": est, "lo": lo, "hi": hi, "windows": len(idx)})
    return pd.DataFrame(rows, columns=[MODEL, "avg_rel_mae", "lo", "hi", "windows"])


def _bootstrap_geomean(
    logs: FloatArray, blocks: npt.NDArray[np.intp], counts: npt.NDArray[np.int64] | None,
    level: float,
) -> tuple[float, float, float]:
    """The geometric mean of ``exp(logs)`` and its percentile interval over block draws."""
    if logs.size == 0 or counts is None:
        return float("nan"), float("nan"), float("nan")
    # centred on the median, so that equal ratios give exactly that ratio and a zero-width
    # interval (sums of equal floats are not exact multiples)
    centre = float(np.median(logs))
    d = logs - centre
    k = counts.shape[1]
    sums = np.bincount(blocks, weights=d, minlength=k)
    sizes = np.bincount(blocks, minlength=k).astype(np.float64)
    num = counts @ sums
    den = counts @ sizes
    reps = centre + np.divide(num, den, out=np.full(len(num), np.nan), where=den > 0)
    lo, hi = np.nanquantile(reps, [(1 - level) / 2, (1 + level) / 2])
    est = centre + float(np.sum(d)) / len(d)
    return float(np.exp(est)), float(np.exp(lo)), float(np.exp(hi))


