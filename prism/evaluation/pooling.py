"""Pooled plans: a guaranteed quota per series and a shared pool they all borrow from.

A per-series plan (:mod:`prism.evaluation.planning`) sizes each VC on its own, and a VC's
demand above its level is unmet even while another VC's GPUs sit idle. A pooled plan keeps
``quota`` times each series' planned level as that series' own GPUs, and ``pool`` times the
sum of the planned levels as one shared pool: at each step, the series' demand above their
quotas is served from the pool as far as it reaches (borrowing, as a Kubernetes Kueue cohort
or a Slurm partition shared by accounts lends quota). The provisioned GPUs are the quotas
plus the pool, so

- idle GPU-hours ``sum (sum_s Q_s + P - (sum_s y_s - unmet)) * step_h``;
- unmet ``sum max(sum_s max(y_s - Q_s, 0) - P, 0) * step_h``;

with ``Q_s = quota * min(L_s, capacity_s)`` and ``P = pool * sum_s min(L_s, capacity_s)``.
``quota=1, pool=0`` is the per-series plan itself.

:func:`pooled_backtest` chooses ``(quota, pool)`` for each replayed window from the windows
before it only (the most saved with at most ``max_unmet`` of demand unmet there) and scores
the choice on the window: a rolling-origin result, not the best point in hindsight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError
from prism.evaluation.backtest import CUTOFF
from prism.evaluation.planning import MAX_UNMET, STATIC
from prism.schema import SERIES_ID, TS, VALUE

#: The quota shares :func:`pooled_backtest` chooses among.
QUOTAS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
#: The pool shares (of the sum of planned levels) it chooses among.
POOLS = (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25)
SCORES = ("idle_gpu_hours", "unmet_gpu_hours", "demand_gpu_hours", "static_idle_gpu_hours")


@dataclass(frozen=True)
class PooledResult:
    """A rolling pooled-plan backtest.

    Attributes:
        windows: one row per scored window: ``cutoff, quota, pool`` chosen on the windows
            before it, and its :data:`SCORES`.
        saved_share: ``1 - idle / static idle`` over the scored windows.
        unmet_share: unmet over demand over the scored windows.
    """

    windows: pd.DataFrame
    saved_share: float
    unmet_share: float


def pooled_scores(levels: pd.DataFrame, plan: str, *, quota: float, pool: float,
                  freq_s: int, capacity: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Idle, unmet and demand GPU-hours of one pooled plan, per window (``cutoff``).

    Args:
        levels: :func:`prism.evaluation.planning.plan_levels`' output (``series_id, ts,
            cutoff, value``, the ``static peak`` and the ``plan`` column).
        plan: the per-series plan the quotas and the pool are shares of.
        quota: each series' own share of its planned level (0-1].
        pool: the shared pool, a share of the sum of the planned levels (>= 0).
        freq_s: the step in seconds.
        capacity: series id -> installed GPUs (planned levels capped there).

    Returns:
        One row per cutoff: ``cutoff`` and :data:`SCORES`.

    Raises:
        ConfigError: for a quota outside (0, 1] or a negative pool.
    """
    pair = (float(quota), float(pool))
    return _grid_scores(levels, plan, [pair], freq_s=freq_s, capacity=capacity)[pair]


def _grid_scores(levels: pd.DataFrame, plan: str, pairs: Sequence[tuple[float, float]], *,
                 freq_s: int, capacity: Mapping[str, float] | None
                 ) -> dict[tuple[float, float], pd.DataFrame]:
    """:func:`pooled_scores` of each ``(quota, pool)`` pair, from one pass over the steps:
    the per-step sums that no share changes are summed once, the excess over the quotas once
    per quota."""
    for quota, pool in pairs:
        if not 0.0 < quota <= 1.0 or pool < 0.0:
            raise ConfigError(f"quota {quota} and pool {pool}: the quota is a share in (0, 1] "
                              "of each series' planned level, the pool a share >= 0 of their "
                              "sum")
    step_h = freq_s / 3600.0
    y = levels[VALUE].to_numpy(dtype=np.float64)
    level = levels[plan].to_numpy(dtype=np.float64)
    if capacity is not None:
        cap = levels[SERIES_ID].map(capacity).to_numpy(dtype=np.float64)
        level = np.where(np.isnan(cap), level, np.minimum(level, cap))
    steps = levels.groupby([CUTOFF, TS], sort=True)
    at = steps.ngroup().to_numpy()  # each row's step
    n = int(at.max()) + 1 if len(at) else 0
    window = steps[CUTOFF].first().to_numpy()  # each step's cutoff

    def per_step(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.bincount(at, weights=np.nan_to_num(values), minlength=n).astype(np.float64)

    planned, demand = per_step(level), per_step(y)
    static_idle = per_step(np.maximum(levels[STATIC].to_numpy(dtype=np.float64) - y, 0.0))
    over = {q: per_step(np.maximum(y - q * level, 0.0)) for q in {q for q, _ in pairs}}
    out = {}
    for quota, pool in pairs:
        shared = pool * planned
        unmet = np.maximum(over[quota] - shared, 0.0)
        idle = quota * planned + shared - (demand - unmet)
        frame = pd.DataFrame({CUTOFF: window, "idle_gpu_hours": idle * step_h,
                              "unmet_gpu_hours": unmet * step_h,
                              "demand_gpu_hours": demand * step_h,
                              "static_idle_gpu_hours": static_idle * step_h})
        out[quota, pool] = frame.groupby(CUTOFF, sort=True).sum().reset_index()
    return out


def _shares(frame: pd.DataFrame) -> tuple[float, float]:
    """``(saved share, unmet share)`` of scored windows (0 where there is nothing to share)."""
    demand = float(frame["demand_gpu_hours"].sum())
    static = float(frame["static_idle_gpu_hours"].sum())
    saved = 1.0 - float(frame["idle_gpu_hours"].sum()) / static if static > 0 else 0.0
    return saved, float(frame["unmet_gpu_hours"].sum()) / demand if demand > 0 else 0.0


def pooled_backtest(levels: pd.DataFrame, plan: str, *, freq_s: int, train: int = 7,
                    max_unmet: float = MAX_UNMET,
                    capacity: Mapping[str, float] | None = None,
                    quotas: Sequence[float] = QUOTAS,
                    pools: Sequence[float] = POOLS) -> PooledResult:
    """Score each window after the first ``train`` with the ``(quota, pool)`` chosen on the
    ``train`` windows before it.

    The choice saves the most over those windows with at most ``max_unmet`` of their demand
    unmet; where no pair meets it, the one leaving least unmet. Nothing of the scored window
    is read to choose.

    Raises:
        ConfigError: for fewer than ``train + 1`` windows, or ``train < 1``.
    """
    cutoffs = sorted(levels[CUTOFF].unique())
    if train < 1 or len(cutoffs) <= train:
        raise ConfigError(f"{len(cutoffs)} windows: a pooled backtest needs more than "
                          f"train={train} (at least 1), the windows its choice is made on")
    grid = [(float(q), float(p)) for q in quotas for p in pools]
    scored = {pair: frame.set_index(CUTOFF) for pair, frame in
              _grid_scores(levels, plan, grid, freq_s=freq_s, capacity=capacity).items()}
    rows = []
    for i in range(train, len(cutoffs)):
        pair = _choose(scored, cutoffs[i - train:i], max_unmet)
        rows.append({CUTOFF: cutoffs[i], "quota": pair[0], "pool": pair[1],
                     **scored[pair].loc[cutoffs[i]].to_dict()})
    windows = pd.DataFrame(rows)
    saved, unmet = _shares(windows)
    return PooledResult(windows, saved, unmet)


def _choose(scored: Mapping[tuple[float, float], pd.DataFrame], cutoffs: Sequence[object],
            max_unmet: float) -> tuple[float, float]:
    best: tuple[float, float] | None = None
    best_saved = -np.inf
    least: tuple[float, float] | None = None
    least_unmet = np.inf
    for pair, frame in scored.items():
        saved, unmet = _shares(frame.loc[list(cutoffs)])
        if unmet <= max_unmet + 1e-12 and saved > best_saved:
            best, best_saved = pair, saved
        if unmet < least_unmet:
            least, least_unmet = pair, unmet
    chosen = best if best is not None else least
    assert chosen is not None
    return chosen


@dataclass(frozen=True)
class PoolChoice:
    """The ``(quota, pool)`` chosen on replayed windows, and what it and the per-series plan
    did there.

    Attributes:
        quota / pool: the chosen shares.
        windows: the windows it was chosen on.
        saved_share / unmet_share: the pooled plan's over those windows.
        per_series_saved_share / per_series_unmet_share: the per-series plan's (``quota=1,
            pool=0``) over the same windows.
        max_unmet: the unmet share the choice had to meet (``unmet_share`` is above it where
            no pair met it: then the pair leaving least unmet).
    """

    quota: float
    pool: float
    windows: int
    saved_share: float
    unmet_share: float
    per_series_saved_share: float
    per_series_unmet_share: float
    max_unmet: float


def choose_pool(levels: pd.DataFrame, plan: str, *, freq_s: int,
                max_unmet: float = MAX_UNMET, capacity: Mapping[str, float] | None = None,
                quotas: Sequence[float] = QUOTAS,
                pools: Sequence[float] = POOLS) -> PoolChoice:
    """The ``(quota, pool)`` saving most over all windows of ``levels`` with at most
    ``max_unmet`` of their demand unmet (else the pair leaving least unmet), as
    :func:`pooled_backtest` chooses for each window from the ones before it.

    Raises:
        ConfigError: for levels without a window.
    """
    cutoffs = sorted(levels[CUTOFF].unique())
    if not cutoffs:
        raise ConfigError("no replayed window to choose a pool on: the series need at "
                          "least a day of history before the plan")
    grid = sorted({(float(q), float(p)) for q in quotas for p in pools} | {(1.0, 0.0)})
    scored = {pair: frame.set_index(CUTOFF) for pair, frame in
              _grid_scores(levels, plan, grid, freq_s=freq_s, capacity=capacity).items()}
    pair = _choose(scored, cutoffs, max_unmet)
    saved, unmet = _shares(scored[pair])
    alone_saved, alone_unmet = _shares(scored[1.0, 0.0])
    return PoolChoice(pair[0], pair[1], len(cutoffs), saved, unmet, alone_saved, alone_unmet,
                      float(max_unmet))
