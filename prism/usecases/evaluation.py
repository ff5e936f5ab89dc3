"""Backtests of stored series and their scores, kept in the store for the capacity report.

``prism backtest``: :func:`backtest_series` runs a rolling-origin backtest in memory (or
:func:`batch_backtest` reads the one a batch ran, :mod:`prism.usecases.batch`), then
:func:`score_backtest` scores it (accuracy per model, and the planning backtest: one
provisioned level per series and block) and saves both for ``prism report``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pandas as pd

from prism.errors import ConfigError
from prism.schema import SERIES_ID, split_series_id
from prism.usecases.capacity import ALLOCATED, capacities_at
from prism.usecases.series import load_panel

if TYPE_CHECKING:
    from prism.store import Store


@dataclass(frozen=True)
class Backtest:
    """A backtest and the panel it ran on.

    Attributes:
        frame: the backtest forecasts (``series_id, cutoff, ts, model, mean, p.., value``).
        panel: the stored panel of its series.
        models: the models backtested (aliases, in the order they were named).
    """

    frame: pd.DataFrame
    panel: pd.DataFrame
    models: tuple[str, ...]


def backtest_series(
    store: Store,
    series_ids: Sequence[str] | None,
    *,
    models: Sequence[str],
    horizon: str,
    windows: int = 7,
    step: str | None = None,
    quantiles: Sequence[float] = (0.05, 0.5, 0.9, 0.95, 0.99),
    refit: int | Literal["always"] = "always",
    progress: Callable[[int, int], None] | None = None,
) -> Backtest:
    """Rolling-origin backtest of models on stored series, in memory
    (:func:`prism.evaluation.backtest.backtest`).

    Args:
        store: the store.
        series_ids: the series; all when ``None`` (those too short are then skipped).
        models: forecaster aliases.
        horizon / windows / step / quantiles / refit: as
            :func:`prism.evaluation.backtest.backtest`.
        progress: called as ``progress(done, total)``.

    Raises:
        ConfigError: for no or an unknown model, or a bad horizon, step or quantile.
        SeriesNotFound: for an unknown series.
        DataContractError: for a named series too short for the windows.
    """
    from prism.evaluation.backtest import backtest
    from prism.forecasters import get_forecaster

    if not models:
        raise ConfigError("--models is empty; name models, e.g. --models prism,seasonal_naive")
    forecasters = {m: get_forecaster(m) for m in models}
    panel = load_panel(store, series_ids)
    frame = backtest(forecasters, panel, horizon=horizon, windows=windows, step=step,
                     quantiles=quantiles, refit=refit,
                     on_short="skip" if series_ids is None else "raise", progress=progress)
    return Backtest(frame, panel, tuple(models))


def batch_backtest(store: Store, run_ids: Sequence[str]) -> Backtest:
    """The backtest of batch runs (``prism backtest --workers ...``), read into memory with
    the panel of its series, to score it.

    Raises:
        ConfigError: for an unknown run.
    """
    from prism import batch

    frame = pd.concat([batch.run_frame(store, r) for r in run_ids], ignore_index=True)
    return Backtest(frame, load_panel(store, sorted(frame[SERIES_ID].unique())),
                    tuple(str(m) for m in pd.unique(frame["model"])))


@dataclass(frozen=True)
class Scores:
    """The scores of a backtest, as saved for the capacity report.

    Attributes:
        accuracy: the metrics per model (:func:`prism.evaluation.metrics.summary`), if asked.
        accuracy_run_id: its saved run.
        planning: the planning totals per plan and block
            (:func:`prism.evaluation.planning.planning_table`), if asked.
        planning_run_id: the saved run of the planning rows per series.
    """

    accuracy: pd.DataFrame | None = None
    accuracy_run_id: str | None = None
    planning: pd.DataFrame | None = None
    planning_run_id: str | None = None


def score_backtest(
    store: Store,
    backtest: Backtest,
    *,
    horizon: str,
    windows: int,
    quantiles: Sequence[float],
    accuracy: bool = True,
    planning: bool = False,
) -> Scores:
    """Score a backtest and keep the scores in the store (for ``prism report``).

    Args:
        store: the store (capacities; the scores are saved there).
        backtest: the backtest.
        horizon / windows: its window and cutoffs (saved with the scores).
        quantiles: its quantile levels; those >= 0.5 are the planning's provisioning levels.
        accuracy: the metrics per model (saved as ``accuracy``).
        planning: the planning backtest, capped at the stored capacities (saved as
            ``planning``).

    Raises:
        DataContractError / ConfigError: as :func:`prism.evaluation.planning.planning_table`.
    """
    from prism.evaluation.metrics import summary

    table, run_id = None, None
    if accuracy:
        table = summary(backtest.frame, backtest.panel)
        params = {"models": ",".join(backtest.models), "horizon": horizon, "windows": windows,
                  "series": int(backtest.frame[SERIES_ID].nunique())}
        run_id = store.save_evaluation("accuracy", table, json.dumps(params, default=str))
    plans, plans_id = None, None
    if planning:
        levels = [q for q in quantiles if q >= 0.5]
        plans, plans_id = _planning_scores(store, backtest, horizon=horizon, quantiles=levels)
    return Scores(table, run_id, plans, plans_id)


def _planning_scores(store: Store, backtest: Backtest, *, horizon: str,
                     quantiles: Sequence[float]) -> tuple[pd.DataFrame, str]:
    """Score a backtest as a planning backtest (GPUs in use capped at the stored capacities)
    and save its rows per series: ``(totals per plan and block, run id)``."""
    from prism.evaluation.planning import planning_table
    from prism.forecasters.base import horizon_steps
    from prism.schema import panel_freq

    frame, panel = backtest.frame, backtest.panel
    freq_s = panel_freq(panel, purpose="be planned together")
    h = horizon_steps(horizon, freq_s)
    blocks = [b for b, s in (("1d", 86_400), ("1h", 3_600))
              if s % freq_s == 0 and h % (s // freq_s) == 0]
    if not blocks:
        blocks = [horizon]
    capacity: dict[str, float] = {}
    at = pd.Timestamp(frame["cutoff"].min())
    for sid in sorted(frame[SERIES_ID].unique()):
        cluster, scope, _ = split_series_id(str(sid))
        if not str(sid).endswith(ALLOCATED):
            continue  # demand with a queue can exceed capacity: never capped
        gpus, _ = capacities_at(store, cluster, [scope], at)
        if scope in gpus:
            capacity[str(sid)] = gpus[scope]
    table, by_series = planning_table(frame, panel, horizon=horizon, quantiles=quantiles,
                                      blocks=blocks, capacity=capacity)
    run_id = store.save_evaluation("planning", by_series, json.dumps({
        "models": ",".join(map(str, pd.unique(frame["model"]))), "horizon": horizon,
        "windows": int(frame["cutoff"].nunique()),
        "series": len(by_series[SERIES_ID].unique())}))
    return table, run_id
