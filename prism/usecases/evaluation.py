"""Backtests of stored series and their scores, kept in the store for the capacity report.

``prism backtest``: :func:`backtest_series` runs a rolling-origin backtest in memory (or
:func:`batch_backtest` reads the one a batch ran, :mod:`prism.usecases.batch`), then
:func:`score_backtest` scores it (accuracy per model, and the planning backtest: one
provisioned level per series and block) and saves both for ``prism report``. The planning
backtest's totals add up one partition of each cluster (:func:`planning_series`: its VCs,
else ``all``), so that each GPU counts once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import pandas as pd

from prism.errors import ConfigError
from prism.forecasters.params import typed_params
from prism.schema import SERIES_ID, split_series_id
from prism.usecases.capacity import ALLOCATED, capacities_at
from prism.usecases.series import load_panel

if TYPE_CHECKING:
    from prism.forecasters import BaseForecaster
    from prism.store import Store

#: The model the relative scores divide by: the last value carried forward.
BASELINE = "naive"
#: What a planning backtest of a cluster plans unless a metric or series is named: the GPUs
#: each scope holds (``gpu_demand`` for a cluster without it).
PLANNED_METRICS = ("gpus_in_use", "gpu_demand")


@dataclass(frozen=True)
class PlanningSeries:
    """The series a planning backtest plans, and those its totals add up.

    Attributes:
        planned: the series planned (scored one by one and kept, so that ``prism capacity
            --max-unmet`` reuses them for every scope).
        added: those the totals add up: per cluster and metric, one partition of its scopes
            (the VCs, else ``all``, else the GPU types; ``all`` where the VCs share GPUs), so
            that each GPU counts once (:func:`prism.reports.tables.partition`, as the report's
            planning table).
        text: what was planned and added up, in words.
    """

    planned: tuple[str, ...]
    added: tuple[str, ...]
    text: str


def planning_series(store: Store, series_ids: Sequence[str] | None, *,
                    explicit: bool) -> PlanningSeries:
    """The series a planning backtest plans among ``series_ids`` and those its totals add up.

    Args:
        store: the store (the series and the capacities that tell whether VCs share GPUs).
        series_ids: the series picked (``None``: every series).
        explicit: the series or the metric were named (``--series``, ``--metric``): every
            one is planned. Otherwise (``--cluster``, ``--all``) only each cluster's GPUs in
            use (:data:`PLANNED_METRICS`) are: counts of jobs or queued GPUs are not capacity.

    Returns:
        The :class:`PlanningSeries` (empty where no series is of a metric to plan).
    """
    from prism.reports.tables import partition

    ids = ([str(s) for s in store.list_series()[SERIES_ID]] if series_ids is None
           else [str(s) for s in series_ids])
    groups: dict[tuple[str, str], list[str]] = {}
    for sid in ids:
        cluster, scope, metric = split_series_id(sid)
        groups.setdefault((cluster, metric), []).append(scope)
    if not explicit:
        clusters = sorted({c for c, _ in groups})
        keep = {}
        for cluster in clusters:
            first = next((m for m in PLANNED_METRICS if (cluster, m) in groups), None)
            if first is not None:
                keep[cluster, first] = groups[cluster, first]
        groups = keep
    planned, added, words = [], [], []
    for (cluster, metric), scopes in sorted(groups.items()):
        gpus, _ = capacities_at(store, cluster, sorted(set(scopes)), None)
        part = partition(scopes, gpus)
        planned += [f"{cluster}/{s}/{metric}" for s in scopes]
        added += [f"{cluster}/{s}/{metric}" for s in part.scopes]
        text = (f"planned {cluster}'s {metric}: the totals add up {part.describe()}, so that "
                "each GPU counts once")
        others = part.left_out(scopes)
        if others:
            text += (f"; {', '.join(others)} count the same GPUs again: scored per series "
                     "(kept for --max-unmet), not added")
        words.append(text)
    text = "; ".join(words) if words else "no series to plan"
    return PlanningSeries(tuple(planned), tuple(added), text)


@dataclass(frozen=True)
class ModelSpec:
    """One model of a backtest: the label its rows carry, its alias and its hyperparameters.

    Attributes:
        label: the name in the backtest's ``model`` column (the alias unless relabelled).
        alias: the forecaster alias (``prism models aliases``).
        params: its hyperparameters as text (``use_short_floor=false``).
    """

    label: str
    alias: str
    params: dict[str, str]

    def forecaster(self) -> BaseForecaster:
        """A new forecaster of this spec (parameters typed as their defaults)."""
        from prism.forecasters import get_forecaster

        return get_forecaster(self.alias, **typed_params(self.alias, self.params))


def model_specs(models: Sequence[str], params: Mapping[str, str] | None = None
                ) -> list[ModelSpec]:
    """The models of ``prism backtest --models ... --param ...``.

    A model is an alias (``prism``) or ``LABEL=ALIAS`` (``nofloor=prism``: PRISM under the
    label ``nofloor``), so that a variant runs beside the default on the same cutoffs. A
    parameter is ``LABEL.NAME`` (``nofloor.use_short_floor``), or ``NAME`` where one model is
    named.

    Raises:
        ConfigError: for no model, a label named twice, another model's alias or not of the
            letters, digits, ``_`` and ``-``, a parameter of no model named, one without a
            label among several models, an unknown alias or parameter, or a value not of the
            parameter's type.
    """
    from prism.forecasters import FORECASTERS

    if not models:
        raise ConfigError("--models is empty; name models, e.g. --models prism,seasonal_naive")
    specs: dict[str, ModelSpec] = {}
    for item in models:
        label, sep, alias = (part.strip() for part in item.partition("="))
        alias = alias if sep else label
        if not label.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"--models {item!r}: a label is letters, digits, '_' and '-', "
                              "e.g. --models prism,nofloor=prism")
        if alias not in FORECASTERS:
            raise ConfigError(f"--models {item!r}: unknown model {alias!r}; use one of: "
                              f"{', '.join(sorted(FORECASTERS))} (or LABEL=ALIAS)")
        if label in specs:
            raise ConfigError(f"--models names {label!r} twice; give a variant its own label, "
                              f"e.g. --models {label},{label}2={alias}")
        if label != alias and label in FORECASTERS:
            raise ConfigError(f"--models {item!r}: {label!r} is another model's alias; give "
                              f"the variant a label of its own, e.g. {alias}2={alias}")
        specs[label] = ModelSpec(label, alias, {})
    for key, value in (params or {}).items():
        label, dot, name = key.rpartition(".")
        if not dot:
            if len(specs) > 1:
                raise ConfigError(f"--param {key}={value}: with several models, say whose, "
                                  f"e.g. --param {next(iter(specs))}.{key}={value}")
            label = next(iter(specs))
        if label not in specs:
            raise ConfigError(f"--param {key}={value}: no model labelled {label!r} in --models "
                              f"({', '.join(specs)})")
        specs[label].params[name] = value
    for spec in specs.values():
        typed_params(spec.alias, spec.params)  # an unknown name or a bad value fails here
    return list(specs.values())


@dataclass(frozen=True)
class Backtest:
    """A backtest and the panel it ran on.

    Attributes:
        frame: the backtest forecasts (``series_id, cutoff, ts, model, mean, p.., value``).
        panel: the stored panel of its series.
        models: the models backtested (their labels, in the order they were named).
        variants: per label relabelled or given parameters, its alias (``model``) and
            parameters as text, as the scores keep them.
    """

    frame: pd.DataFrame
    panel: pd.DataFrame
    models: tuple[str, ...]
    variants: dict[str, dict[str, str]] = field(default_factory=dict)


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
    params: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    skip_short: bool | None = None,
) -> Backtest:
    """Rolling-origin backtest of models on stored series, in memory
    (:func:`prism.evaluation.backtest.backtest`).

    Args:
        store: the store.
        series_ids: the series; all when ``None`` (those too short are then skipped).
        skip_short: skip series too short for the windows (logged) rather than refuse;
            default: only when ``series_ids`` is ``None`` (a series picked by cluster or
            metric is skipped too when the caller says so).
        models: forecaster aliases, or ``LABEL=ALIAS`` (:func:`model_specs`).
        horizon / windows / step / quantiles / refit: as
            :func:`prism.evaluation.backtest.backtest`.
        params: hyperparameters as text, ``LABEL.NAME`` (or ``NAME`` with one model).
        progress: called as ``progress(done, total)``.

    Raises:
        ConfigError: for no or an unknown model or parameter (:func:`model_specs`), or a bad
            horizon, step or quantile.
        SeriesNotFound: for an unknown series.
        DataContractError: for a named series too short for the windows.
    """
    from prism.evaluation.backtest import backtest

    specs = model_specs(models, params)
    forecasters = {spec.label: spec.forecaster() for spec in specs}
    if skip_short is None:
        skip_short = series_ids is None
    panel = load_panel(store, series_ids)
    frame = backtest(forecasters, panel, horizon=horizon, windows=windows, step=step,
                     quantiles=quantiles, refit=refit,
                     on_short="skip" if skip_short else "raise", progress=progress)
    variants = {s.label: {"model": s.alias, **s.params} for s in specs
                if s.params or s.label != s.alias}
    return Backtest(frame, panel, tuple(forecasters), variants)


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
        accuracy: the metrics per model (:func:`prism.evaluation.metrics.summary`), if asked;
            with ``naive`` backtested too, also each model against it
            (:func:`prism.evaluation.metrics.panel_summary`): ``avg_rel_mae`` with its
            bootstrap interval ``avg_rel_mae_lo`` / ``avg_rel_mae_hi``, ``catastrophes`` and
            ``compared`` (the windows in the ratio: those where either MAE is not 0).
        accuracy_run_id: its saved run.
        planning: the planning totals per plan and block (and ``metric``, where several are
            planned) over one partition of each cluster (:func:`planning_series`), if asked.
        planning_run_id: the saved run of the planning rows per series.
        planning_note: which series the planning totals add up, in words.
    """

    accuracy: pd.DataFrame | None = None
    accuracy_run_id: str | None = None
    planning: pd.DataFrame | None = None
    planning_run_id: str | None = None
    planning_note: str = ""


def score_backtest(
    store: Store,
    backtest: Backtest,
    *,
    horizon: str,
    windows: int,
    quantiles: Sequence[float],
    accuracy: bool = True,
    planning: bool = False,
    explicit: bool = True,
) -> Scores:
    """Score a backtest and keep the scores in the store (for ``prism report``).

    Args:
        store: the store (capacities; the scores are saved there).
        backtest: the backtest.
        horizon / windows: its window and cutoffs (saved with the scores).
        quantiles: its quantile levels; those >= 0.5 are the planning's provisioning levels.
        accuracy: the metrics per model (saved as ``accuracy``).
        planning: the planning backtest, capped at the stored capacities (saved as
            ``planning``), over the series :func:`planning_series` picks.
        explicit: the backtest's series or metric were named (:func:`planning_series`).

    Raises:
        DataContractError / ConfigError: as :func:`prism.evaluation.planning.planning_table`.
    """
    from prism.evaluation.metrics import summarize_windows, summary_and_windows

    table, run_id = None, None
    if accuracy:
        table, per_window = summary_and_windows(backtest.frame, backtest.panel)
        if BASELINE in backtest.models and len(backtest.models) > 1:
            # kept with the accuracy (the CLI and the report show them); naive's own ratio is
            # 1; the bootstrap as in ``panel_summary``
            relative = summarize_windows(per_window, baseline=BASELINE, random_state=0)
            kept = relative.set_index("model")[["avg_rel_mae", "lo", "hi", "catastrophes",
                                                 "windows"]]
            table = table.join(kept.rename(columns={
                "lo": "avg_rel_mae_lo", "hi": "avg_rel_mae_hi", "windows": "compared"}),
                on="model")
        params = {"models": ",".join(backtest.models), "horizon": horizon, "windows": windows,
                  "series": int(backtest.frame[SERIES_ID].nunique())}
        if backtest.variants:
            params["variants"] = backtest.variants
        run_id = store.save_evaluation("accuracy", table, json.dumps(params, default=str))
    plans, plans_id, note = None, None, ""
    if planning:
        levels = [q for q in quantiles if q >= 0.5]
        chosen = planning_series(store, sorted(backtest.frame[SERIES_ID].astype(str).unique()),
                                 explicit=explicit)
        if not chosen.planned:
            raise ConfigError("no series to plan: a planning backtest plans GPUs in use "
                              "(gpus_in_use, or gpu_demand); pick them with --metric "
                              "gpus_in_use or --series")
        plans, plans_id = _planning_scores(store, backtest, chosen, horizon=horizon,
                                           quantiles=levels)
        note = chosen.text
    return Scores(table, run_id, plans, plans_id, note)


def _planning_scores(store: Store, backtest: Backtest, chosen: PlanningSeries, *,
                     horizon: str, quantiles: Sequence[float]) -> tuple[pd.DataFrame, str]:
    """Score a backtest as a planning backtest (GPUs in use capped at the stored capacities)
    on ``chosen.planned`` and save its rows per series: ``(totals per plan and block over
    ``chosen.added``, per metric where there are several, run id)``."""
    from prism.evaluation.planning import aggregate_plans, planning_table
    from prism.forecasters.base import horizon_steps
    from prism.schema import panel_freq

    planned = set(chosen.planned)
    frame = backtest.frame[backtest.frame[SERIES_ID].isin(planned)]
    panel = backtest.panel[backtest.panel[SERIES_ID].isin(planned)]
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
    floor = True  # sized as `prism capacity` sizes by default; --max-unmet reads this back
    _, by_series = planning_table(frame, panel, horizon=horizon, quantiles=quantiles,
                                  blocks=blocks, capacity=capacity, floor=floor)
    added = by_series[by_series[SERIES_ID].isin(set(chosen.added))]
    metric = added[SERIES_ID].map(lambda s: split_series_id(str(s))[2])
    keys = ["plan", "model", "quantile", "block"]
    if metric.nunique() > 1:  # GPUs of one metric are not added to another's
        added, keys = added.assign(metric=metric), ["metric", *keys]
    table = aggregate_plans(added, keys=keys)
    run_id = store.save_evaluation("planning", by_series, json.dumps({
        "models": ",".join(map(str, pd.unique(frame["model"]))), "horizon": horizon,
        "windows": int(frame["cutoff"].nunique()),
        "series": len(by_series[SERIES_ID].unique()), "day_kind_floor": floor}))
    return table, run_id
