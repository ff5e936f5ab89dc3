"""The "recent" combiner of the PRISM hybrid (``combiner="recent"``), kept for the ablation.

Per series, each candidate weighs ``MAE ** -power`` by its errors over the last ``window``
steps of origins before each forecast origin, per block of horizon steps; a candidate more
than ``trim`` times worse than the best drops out of the blocks up to ``trim_steps``. The
default combiner is :class:`~prism.forecasters.stacking.NaiveAnchoredStacker`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Ends = npt.NDArray[np.int64]

__all__ = ["recent_weights"]


def recent_weights(errors: FloatArray, origins: Ends, ends: Ends, edges: list[int], *,
                   window: int, power: float, trim: float, trim_steps: int) -> FloatArray:
    """``(ends, candidates, steps)`` combination weights at each origin of ``ends``.

    ``errors`` is ``(candidates, origins, steps)``: the absolute error of each candidate's
    forecast from each origin at each step (NaN where a candidate has none). At an end
    ``e`` the forecasts from the origins in ``[e - window, e)`` are scored on the
    steps that happened before ``e`` (the first ``e - o`` steps of origin ``o``): one
    block's sums come from cumulative sums over the steps, for every end at once.
    """
    n_cand, n_orig, steps = errors.shape
    gaps = np.isnan(errors)
    sums = np.zeros((n_cand, n_orig, steps + 1))
    np.cumsum(np.where(gaps, 0.0, errors), axis=2, out=sums[:, :, 1:])
    holes = np.zeros((n_cand, n_orig, steps + 1), dtype=np.int64)
    np.cumsum(gaps, axis=2, out=holes[:, :, 1:])
    lag = ends[:, None] - origins[None, :]  # (E, O)
    inside = (lag > 0) & (lag <= window)
    seen = np.where(inside, np.minimum(lag, steps), 0)  # steps of o scored at e
    o_index = np.arange(n_orig)[None, :]
    weights = np.full((len(ends), n_cand, steps), 1.0 / n_cand)
    previous = np.full((len(ends), n_cand), np.nan)  # the last block's weights, per end
    lo = 0
    for hi in edges:
        stop = np.clip(seen, lo, hi)  # (E, O): steps lo..stop-1 of o are scored
        count = (stop - lo).sum(axis=1)  # (E,)
        total = (sums[:, o_index, stop] - sums[:, o_index, lo]).sum(axis=2)
        missing = (holes[:, o_index, stop] - holes[:, o_index, lo]).sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            mae = np.where(missing > 0, np.nan, total / np.maximum(count, 1)).T  # (E, C)
        finite = np.isfinite(mae) & (count > 0)[:, None]
        scored = finite.any(axis=1)
        best = np.min(np.where(finite, mae, np.inf), axis=1, keepdims=True)
        if hi <= trim_steps and np.isfinite(trim):
            finite &= np.where(finite, mae, np.inf) <= trim * best
        positive = best > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(finite, mae, 1.0) / np.where(positive, best, 1.0)
            w = np.where(positive, np.where(finite, ratio ** -power, 0.0),
                         (finite & (np.where(finite, mae, 1.0) == 0)).astype(np.float64))
        w = w / np.where(scored, w.sum(axis=1), 1.0)[:, None]
        previous = np.where(scored[:, None], w, previous)
        known = np.isfinite(previous[:, 0])
        weights[known, :, lo:hi] = previous[known][:, :, None]
        lo = hi
    return weights
