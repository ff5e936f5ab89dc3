"""Accuracy benchmark: does PRISM beat the last value, on which panels, how surely, and why.

    python -m evaluation.benchmarks.accuracy [--datasets helios_in_use,philly,...]
        [--models naive,prism,...] [--windows 28] [--jobs 2] [--output DIR] [--references]
        [--before 7d] [--quick]

**Panels** (all at 10 min, built by :func:`load_datasets` from ``../shared/data/traces``
through PRISM's own ingest into an in-memory store):

- ``helios_in_use`` / ``helios_demand``: ``earth/<vc>/gpus_in_use`` / ``gpu_demand`` of the
  16 Helios Earth VCs (May 2020, 4,464 points each);
- ``philly``: ``philly/all/nodes_in_use`` (Microsoft Philly, Oct-Dec 2017);
- ``alibaba_qos``: ``alibaba-v2023/<qos>/gpus_in_use`` of the QoS classes the ``alibaba-pods``
  ingest makes scopes of (``BE``, ``Burstable``, ``Guaranteed``, ``LS``: 4 series of 4,836
  points; ``Guaranteed`` has 7 pods and ``Burstable`` 100, so they are nearly idle);
- ``alibaba_gpu``: ``alibaba-v2023/gpu:<type>/gpus_in_use`` per GPU type. The v2023 pod list
  leaves ``gpu_spec`` empty on all its 8,152 pods, so the ingest has no ``gpu:<type>`` scope
  (the derivation would make one per type if the column were filled) and this panel falls
  back to the cluster total ``alibaba-v2023/all/gpus_in_use`` (one series);
- ``arrivals``: ``jobs_submitted`` counts: one series per VC of a synthetic trace
  (:func:`prism.generate.generate_trace`, 35 days, 1 cluster, seed 0, ingested as
  ``jobs-csv``: 5 VCs) and ``alibaba-v2023/all/jobs_submitted``. Helios has no job-level file
  here, so there are no Helios arrivals;
- ``deployments``: ``deploy/<app>/gpus_in_use`` of 24 synthetic inference services that
  scale in steps and hold (``prism.generate_deployments.generate_deployments(apps=24,
  days=35, freq="10min", seed=0)``); skipped with a warning where that module is missing.

**Cutoffs.** One backtest per model and panel: ``horizon="1d"``, ``step="6h"``, 28 windows
(cutoffs every 6 h over the last 7 days; the last forecast ends at the last point, as
statsforecast's ``cross_validation`` places them), quantiles ``QUANTILES``. The horizons
``1h``, ``6h`` and ``1d`` are the first 6, 36 and 144 steps of those same forecasts (a
forecast made for a day contains its 1 h and 6 h forecasts), so each horizon has 28 windows
per series. ``1d-daily`` is ``1d`` on the daily cutoffs only (every 4th, ending with the
last): 7 windows per series, as a daily planning run would see it.

**Models.** ``naive`` (the baseline, always run), ``seasonal_naive``, ``window_average``,
``theta``, ``ets``, ``gbm``, ``gru``, ``prism``, and PRISM's ablations, read from
``PrismForecaster().get_params()`` when the benchmark runs (:func:`prism_variants`): each
boolean ``use_<part>`` flipped from its default (``prism-<part>`` turns the part off,
``prism+<part>`` on), and, where PRISM has a ``combiner`` parameter, ``prism@<value>`` for every
other value its annotation (a ``Literal``) or docstring names. With ``--references``,
statsforecast's ``Naive``, ``SeasonalNaive``, ``AutoETS``, ``AutoTheta`` and ``MSTL`` run
through their own ``cross_validation`` on the same cutoffs (``sf-*``; needs the ``bench``
extra: ``make bench-accuracy-references``).

**Metrics** (:mod:`prism.evaluation.metrics`, per panel and horizon): AvgRelMAE, the geometric
mean over windows of each window's MAE over naive's, with a 95 % block-bootstrap interval
``[lo, hi]`` over cutoffs (1,000 replicates); MASE (mean over windows), WAPE (pooled), CRPS,
90 % coverage (with its block-bootstrap interval over cutoffs: one series' 28 windows
cannot pin it to +-0.02) and relative width, catastrophes (share of windows with an MAE above twice
naive's), and fit + predict seconds per series and cutoff. The ablation table is each PRISM
variant's paired ratio to ``prism`` (:func:`prism.evaluation.metrics.relative_to`; above 1: turning
that part off costs accuracy).

**Targets** (checked on ``prism`` at horizons 1h, 6h, 1d; ``1d-daily`` is a view of 1d):
(1) AvgRelMAE <= 1.00 on every panel and horizon; (2) the (arithmetic) mean over panels a
day ahead <= 0.95, and the interval's upper end < 1.00 a day ahead on philly, alibaba_*,
arrivals and deployments; (3) first, or within 1 % of the best model (ablations and
references included), on every panel and horizon; (4) catastrophes <= 2 %; (5) 90 %
coverage within [0.88, 0.92] everywhere.

**Output** (``--output``, default ``evaluation/results``): ``accuracy.csv`` (one row per
panel, horizon and model), ``accuracy_windows.csv`` (one row per window and horizon, with
``rel_mae``, the ratio to naive; ``width_90`` there is in the series' units),
``accuracy_ablations.csv`` and ``accuracy.md`` (the headline table of AvgRelMAE [lo, hi],
the targets with PASS/FAIL, per-panel tables and the ablations).

``--jobs N`` runs the (panel, model) backtests in N processes, one thread each.
``--before 7d`` ends every series of every panel that long before its last point, so the same
protocol runs on an earlier week: one the defaults were not chosen on (a check that a gain or a
coverage holds out of the week it was measured on; write it to another ``--output``).
``--quick`` is a smoke setting for tests: 4 windows (whatever ``--windows`` says), the first 3
series of each panel.
``--reuse DIR`` (repeatable) takes the models this run does not run from the per-window results
of an earlier run in ``DIR`` (``accuracy_windows.csv``, and the seconds from ``accuracy.csv``),
so a change to PRISM need not rerun every baseline: ``--models prism,prism-jumps --reuse
evaluation/results``. Each reused model must have exactly this run's windows (naive's series
and cutoffs in each panel and horizon; else the run stops and says so), and a PRISM variant
is reused only from the directory its ``prism`` comes from (the ablations compare the two):
from none when ``prism`` runs now.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import multiprocessing
import os
import re
import sys
import tempfile
import time
import typing
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evaluation.benchmarks.reuse import reuse, with_reused
from prism.errors import ConfigError
from prism.evaluation.backtest import WINDOW, backtest, backtest_cutoffs
from prism.evaluation.metrics import evaluate, relative_mae, relative_to, summarize_windows
from prism.forecasters import FORECASTERS, get_forecaster
from prism.forecasters.base import quantile_column
from prism.forecasters.hybrid import PrismForecaster
from prism.ingest.pipeline import ingest
from prism.schema import SERIES_ID, TS, parse_duration, validate_panel
from prism.store import Store

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"
RESULTS = ROOT / "evaluation" / "results"
DATASETS = ("helios_in_use", "helios_demand", "philly", "alibaba_qos", "alibaba_gpu",
            "arrivals", "deployments")
BASELINE = "naive"
MODELS = ("naive", "seasonal_naive", "window_average", "theta", "ets", "gbm", "gru", "prism")
#: The one backtest each model runs per panel; the horizons below are prefixes of it.
BACKTEST_HORIZON = "1d"
STEP = "6h"
WINDOWS = 28
HORIZONS = ("1h", "6h", "1d")
#: ``1d`` on every ``DAILY_EVERY``-th cutoff (counted back from the last): one a day.
DAILY = "1d-daily"
DAILY_EVERY = 4
QUANTILES = (0.01, 0.05, 0.1, 0.5, 0.9, 0.95, 0.99)
LEVELS = (80, 90, 98)  # the references' intervals: the same quantiles
N_BOOT = 1000
QUICK_WINDOWS = 4
QUICK_SERIES = 3
REFERENCES = "references"
REFERENCE_MODELS = ("sf-Naive", "sf-SeasonalNaive", "sf-AutoETS", "sf-AutoTheta", "sf-MSTL")
#: Panels where target 2 wants PRISM's interval a day ahead below 1.
SURE_PANELS = ("philly", "alibaba_qos", "alibaba_gpu", "arrivals", "deployments")
TABLE_COLUMNS = ["avg_rel_mae", "lo", "hi", "mase", "wape", "crps", "coverage_90", "coverage_lo",
                 "coverage_hi", "width_90", "catastrophes", "windows", "seconds_per_window"]
WINDOW_COLUMNS = ["n", "mean_abs_actual", "mae", "rmse", "mase", "smape", "wape", "crps",
                  "coverage_90", "width_90"]

logger = logging.getLogger("evaluation.benchmarks.accuracy")


# -- panels -----------------------------------------------------------------------------------
def load_datasets(names: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The benchmark's panels, ingested from the traces into a throw-away store.

    Args:
        names: panels among ``DATASETS`` (see the module docstring for their series).

    Returns:
        Panel name -> panel (``series_id, ts, value``), in the order asked; ``deployments``
        is left out, with a printed warning, while ``prism.generate_deployments`` is missing.

    Raises:
        ConfigError: for an unknown panel name.
    """
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        raise ConfigError(f"unknown data sets {unknown}; choose among {', '.join(DATASETS)}")
    helios = TRACES / "helios_earth_vc"
    wanted: dict[str, list[str]] = {}
    panels: dict[str, pd.DataFrame] = {}
    with Store.open(":memory:") as store, tempfile.TemporaryDirectory() as tmp:
        if any(n.startswith("helios") for n in names):
            ingest(store, sorted(helios.glob("earth_vc*_1min.csv.gz")), "helios-vc")
        if "philly" in names:
            ingest(store, [helios / "philly_node_sequence_1min.csv.gz"], "philly-nodes")
        if any(n.startswith("alibaba") for n in names) or "arrivals" in names:
            ingest(store, [TRACES / "alibaba_gpu" / "v2023_openb_pod_list_default.csv.gz"],
                   "alibaba-pods")
        synthetic: list[str] = []
        if "arrivals" in names:
            from prism.generate import generate_trace

            trace = generate_trace(tmp, days=35, clusters=1, seed=0)
            ingest(store, [trace.jobs_path], "jobs-csv")
            synthetic = list(trace.clusters)
        series = store.list_series()
        wanted = _series_of_panels(series, synthetic)
        for name in names:
            if name in wanted:
                panels[name] = store.load_panel(wanted[name])
    if "deployments" in names:
        try:
            from prism.generate_deployments import (  # type: ignore[import-not-found,unused-ignore]
                generate_deployments,
            )
        except ImportError:
            print("warning: prism.generate_deployments is not there yet; the deployments "
                  "panel is skipped", flush=True)
        else:
            panel = generate_deployments(apps=24, days=35, freq="10min", seed=0)
            panels["deployments"] = validate_panel(panel[[SERIES_ID, TS, "value"]])
    return {n: panels[n] for n in names if n in panels}


def _series_of_panels(series: pd.DataFrame, synthetic: Sequence[str]) -> dict[str, list[str]]:
    """Panel name -> series ids, from the store's catalogue."""
    def pick(mask: pd.Series) -> list[str]:
        return sorted(series.loc[mask, "series_id"].astype(str))

    cluster, scope, metric = series["cluster"], series["scope"], series["metric"]
    by_type = scope.str.startswith("gpu:")
    alibaba = cluster == "alibaba-v2023"
    out = {
        "helios_in_use": pick((cluster == "earth") & (metric == "gpus_in_use")),
        "helios_demand": pick((cluster == "earth") & (metric == "gpu_demand")),
        "philly": pick((cluster == "philly") & (scope == "all") & (metric == "nodes_in_use")),
        "alibaba_qos": pick(alibaba & (metric == "gpus_in_use") & (scope != "all") & ~by_type),
        "alibaba_gpu": pick(alibaba & (metric == "gpus_in_use") & by_type),
        "arrivals": pick((cluster.isin(list(synthetic)) & (metric == "jobs_submitted")
                          & (scope != "all") & ~by_type)
                         | (alibaba & (metric == "jobs_submitted") & (scope == "all"))),
    }
    if not out["alibaba_gpu"]:  # the v2023 pod list has no gpu_spec: no gpu:<type> scope
        out["alibaba_gpu"] = pick(alibaba & (metric == "gpus_in_use") & (scope == "all"))
    return {k: v for k, v in out.items() if v}


def end_before(panel: pd.DataFrame, offset: pd.Timedelta) -> pd.DataFrame:
    """``panel`` with each series' last ``offset`` dropped (its points after ``last - offset``)."""
    last = panel.groupby(SERIES_ID)[TS].transform("max")
    return panel[panel[TS] <= last - offset].reset_index(drop=True)


def _first_series(panel: pd.DataFrame, n: int) -> pd.DataFrame:
    keep = sorted(panel[SERIES_ID].unique())[:n]
    return panel[panel[SERIES_ID].isin(keep)].reset_index(drop=True)


# -- models -----------------------------------------------------------------------------------
def prism_variants(cls: type = PrismForecaster) -> dict[str, dict[str, Any]]:
    """PRISM and its ablations, from the forecaster's current parameters.

    Each boolean ``use_<part>`` parameter flipped from its default gives ``prism-<part>``
    (the flip turns the part off) or ``prism+<part>`` (on); a ``combiner`` parameter gives
    ``prism@<value>`` for each other value its ``Literal`` annotation, or else its docstring
    (quoted words in the ``combiner`` argument's entry or in a paragraph naming
    ````combiner````), allows.

    Args:
        cls: the forecaster class (PRISM's, or a stand-in in tests).

    Returns:
        Model name -> parameters that differ from the defaults (``{}`` for ``prism``).
    """
    params = cls().get_params()
    out: dict[str, dict[str, Any]] = {"prism": {}}
    for name, value in params.items():
        if name.startswith("use_") and isinstance(value, bool):
            out[f"prism{'-' if value else '+'}{name[len('use_'):]}"] = {name: not value}
    if "combiner" in params:
        for value in _allowed_values(cls, "combiner"):
            if value != params["combiner"]:
                out[f"prism@{value}"] = {"combiner": value}
    return out


def _allowed_values(cls: type, param: str) -> list[str]:
    """The values a string parameter may take, from its annotation or its documentation."""
    init = cls.__init__  # type: ignore[misc]
    try:
        hint = typing.get_type_hints(init).get(param)
    except (NameError, TypeError):
        hint = None
    if typing.get_origin(hint) is typing.Literal:
        return [str(v) for v in typing.get_args(hint)]
    quoted = re.compile(r"[\"']([A-Za-z][\w.+-]*)[\"']")
    found: list[str] = []
    module = inspect.getmodule(cls)
    for doc in (cls.__doc__, init.__doc__, module.__doc__ if module else None):
        if not doc:
            continue
        entry = re.search(rf"^([ \t]*){param}[ \t]*(\([^)]*\))?:.*(\n\1[ \t]+.*)*", doc,
                          re.MULTILINE)
        texts = [entry.group(0)] if entry else []
        texts += [p for p in re.split(r"\n\s*\n", doc) if f"``{param}``" in p]
        for text in texts:
            found += [v for v in quoted.findall(text) if v not in found]
    return found


def model_specs(names: Sequence[str], variants: dict[str, dict[str, Any]]
                ) -> dict[str, tuple[str, dict[str, Any]]]:
    """Model name -> ``(forecaster alias, parameters)``; the baseline always comes first.

    Raises:
        ConfigError: for a name that is neither a forecaster nor a PRISM variant.
    """
    out: dict[str, tuple[str, dict[str, Any]]] = {BASELINE: (BASELINE, {})}
    for name in names:
        if name in variants:
            out[name] = ("prism", variants[name])
        elif name in FORECASTERS:
            out[name] = (name, {})
        else:
            raise ConfigError(
                f"unknown model {name!r}; choose among {', '.join(sorted(FORECASTERS))} and "
                f"PRISM's variants {', '.join(variants)}"
            )
    return out


# -- running ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Task:
    """One backtest: a model (or the statsforecast references) on one panel."""

    dataset: str
    model: str
    alias: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def cost(self) -> int:
        """A rough rank of how long it runs, to start the slow ones first."""
        return 2 if self.alias in ("prism", "gru") else 1 if self.alias != BASELINE else 0


def _init_worker() -> None:
    """One thread per worker process: the parallelism is across processes."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # kept for the life of the worker
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return
    torch.set_num_threads(1)


def _run_task(task: _Task, panel: pd.DataFrame, windows: int
              ) -> tuple[pd.DataFrame, dict[str, float], float]:
    """The task's backtest frame, the seconds per series and cutoff of each of its models,
    and its own seconds."""
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    if task.alias == REFERENCES:
        frame, seconds = _run_references(panel, windows)
        return frame, seconds, time.perf_counter() - started
    frame = backtest({task.model: get_forecaster(task.alias, **task.params)}, panel,
                     horizon=BACKTEST_HORIZON, windows=windows, step=STEP, quantiles=QUANTILES)
    took = time.perf_counter() - started
    return frame, {task.model: took / (panel[SERIES_ID].nunique() * windows)}, took


def _run_references(panel: pd.DataFrame, windows: int
                    ) -> tuple[pd.DataFrame, dict[str, float]]:
    """statsforecast's models through their own cross_validation, on our cutoffs."""
    from statsforecast import StatsForecast
    from statsforecast.models import MSTL, AutoETS, AutoTheta, Naive, SeasonalNaive

    freq_s = int((panel[TS].iloc[1] - panel[TS].iloc[0]).total_seconds())
    day = 86_400 // freq_s
    h = int(pd.Timedelta(BACKTEST_HORIZON).total_seconds()) // freq_s
    step = int(pd.Timedelta(STEP).total_seconds()) // freq_s
    data = panel.rename(columns={SERIES_ID: "unique_id", TS: "ds", "value": "y"})
    references = dict(zip(REFERENCE_MODELS, (
        Naive(), SeasonalNaive(season_length=day), AutoETS(season_length=1),
        AutoTheta(season_length=day), MSTL(season_length=[day, 7 * day])), strict=True))
    ours = backtest_cutoffs(panel, horizon=BACKTEST_HORIZON, windows=windows, step=STEP)
    frames, seconds = [], {}
    n = panel[SERIES_ID].nunique() * windows
    warm = data[data["unique_id"] == data["unique_id"].iloc[0]].tail(20 * day)
    qcols = [quantile_column(q) for q in QUANTILES]
    for name, model in references.items():
        sf = StatsForecast(models=[model], freq=f"{freq_s}s", n_jobs=1)
        with warnings.catch_warnings():  # numba compiles on first use: not part of the timing
            warnings.simplefilter("ignore")
            sf.forecast(df=warm, h=h, level=list(LEVELS))
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cv = sf.cross_validation(df=data, h=h, n_windows=windows, step_size=step,
                                     level=list(LEVELS))
        seconds[name] = (time.perf_counter() - started) / n
        col = str(model)
        cv = cv.reset_index() if "unique_id" not in cv.columns else cv
        frame = pd.DataFrame({
            SERIES_ID: cv["unique_id"].astype(str), TS: cv["ds"], "cutoff": cv["cutoff"],
            "model": name, "mean": cv[col].clip(lower=0.0),
        })
        for level in LEVELS:
            lo, hi = (100 - level) / 200, 1 - (100 - level) / 200
            frame[quantile_column(lo)] = cv[f"{col}-lo-{level}"].clip(lower=0.0)
            frame[quantile_column(hi)] = cv[f"{col}-hi-{level}"].clip(lower=0.0)
        frame["p50"] = frame["mean"]
        frame["value"] = cv["y"]
        frame[qcols] = np.maximum.accumulate(frame[qcols].to_numpy(), axis=1)
        got = frame.groupby(SERIES_ID)["cutoff"].unique().map(sorted)
        want = ours.groupby(SERIES_ID)["cutoff"].unique().map(sorted)
        if not all(list(got[s]) == list(want[s]) for s in want.index):
            raise RuntimeError(f"{name}: statsforecast placed other cutoffs than PRISM's")
        frames.append(frame[[SERIES_ID, TS, "cutoff", "model", "mean", *qcols, "value"]])
    return pd.concat(frames, ignore_index=True), seconds


def _run_all(tasks: list[_Task], panels: dict[str, pd.DataFrame], windows: int, jobs: int,
             note: Callable[[str], None]
             ) -> tuple[dict[str, list[pd.DataFrame]], dict[tuple[str, str], float], list[str]]:
    """Every task, in ``jobs`` processes (in this one for ``jobs == 1``), slow ones first.

    Returns:
        Frames per panel, seconds per (panel, model), and a line per failed task.
    """
    frames: dict[str, list[pd.DataFrame]] = {d: [] for d in panels}
    seconds: dict[tuple[str, str], float] = {}
    failures: list[str] = []
    ordered = sorted(tasks, key=lambda t: -t.cost)
    count = 0

    def done(task: _Task,
             result: Callable[[], tuple[pd.DataFrame, dict[str, float], float]]) -> None:
        nonlocal count
        count += 1
        try:
            frame, secs, took = result()
        except Exception as exc:  # one model's failure must not cost the others' hours
            failures.append(f"{task.dataset} {task.model}: {type(exc).__name__}: {exc}")
            note(f"[{count}/{len(ordered)}] {task.dataset:<14} {task.model:<24} FAILED: "
                 f"{type(exc).__name__}: {exc}")
            return
        frames[task.dataset].append(frame)
        seconds.update({(task.dataset, m): s for m, s in secs.items()})
        note(f"[{count}/{len(ordered)}] {task.dataset:<14} {task.model:<24} {took:8.1f} s "
             f"({time.perf_counter() - began:.0f} s in all)")

    began = time.perf_counter()
    if jobs == 1:
        for task in ordered:
            done(task, partial(_run_task, task, panels[task.dataset], windows))
        return frames, seconds, failures
    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                             initializer=_init_worker) as pool:
        futures = {pool.submit(_run_task, t, panels[t.dataset], windows): t for t in ordered}
        for future in as_completed(futures):
            done(futures[future], future.result)
    return frames, seconds, failures


# -- scoring ----------------------------------------------------------------------------------
def horizon_frames(frame: pd.DataFrame, panel: pd.DataFrame, windows: int
                   ) -> dict[str, pd.DataFrame]:
    """The backtest frame cut to each horizon (its first steps), and ``1d-daily``.

    Args:
        frame: the backtest frame of the day-ahead forecasts.
        panel: the panel it ran on.
        windows: the backtest's windows.

    Returns:
        ``1h``, ``6h``, ``1d`` (the rows at most that long after their cutoff) and
        ``1d-daily`` (``1d`` at every 4th cutoff counted back from the last).
    """
    ahead = frame[TS] - frame["cutoff"]
    out = {h: frame[ahead <= parse_duration(h)].reset_index(drop=True) for h in HORIZONS}
    cuts = backtest_cutoffs(panel, horizon=BACKTEST_HORIZON, windows=windows, step=STEP)
    daily = cuts.loc[(windows - 1 - cuts[WINDOW]) % DAILY_EVERY == 0, [SERIES_ID, "cutoff"]]
    out[DAILY] = out[BACKTEST_HORIZON].merge(daily, on=[SERIES_ID, "cutoff"])
    return out


def score(frames: dict[str, list[pd.DataFrame]], panels: dict[str, pd.DataFrame],
          seconds: dict[tuple[str, str], float], windows: int, models: Sequence[str],
          reused: pd.DataFrame | None = None
          ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The summary, per-window and ablation tables of every panel and horizon.

    Args:
        frames: the backtest frames of each panel, in any order.
        panels: the panels.
        seconds: seconds per series and cutoff of each (panel, model).
        windows: the backtests' windows.
        models: the models in the order of the tables (the baseline first); PRISM's
            variants among them are compared with ``prism`` in the ablation table.
        reused: per-window rows of earlier runs (:func:`evaluation.benchmarks.reuse.reuse`),
            added to each panel and horizon (their seconds already in ``seconds``).

    Raises:
        ConfigError: where a reused model's windows are not this run's.

    Returns:
        ``(table, per_window, ablations)`` with ``dataset, horizon`` in front.
    """
    tables, per_window, ablations = [], [], []
    ablated = [m for m in models if m.startswith("prism") and m != "prism"]
    rank = {m: i for i, m in enumerate(models)}
    for dataset, parts in frames.items():
        if not parts:
            continue
        parts = sorted(parts, key=lambda f: rank.get(str(f["model"].iloc[0]), len(rank)))
        frame = pd.concat(parts, ignore_index=True)
        if BASELINE not in set(frame["model"]):
            print(f"warning: {dataset}: the baseline {BASELINE!r} failed; no scores",
                  flush=True)
            continue
        for horizon, cut in horizon_frames(frame, panels[dataset], windows).items():
            w = with_reused(evaluate(cut, panels[dataset]), reused, dataset, horizon,
                            rank, BASELINE)
            table = summarize_windows(w, baseline=BASELINE, n_boot=N_BOOT, random_state=0)
            table["seconds_per_window"] = [seconds.get((dataset, m), np.nan)
                                           for m in table["model"]]
            tables.append(_keyed(table, dataset, horizon))
            rel = relative_mae(w, baseline=BASELINE)[["model", SERIES_ID, "cutoff", "rel_mae"]]
            w = w[["model", SERIES_ID, "cutoff", *[c for c in WINDOW_COLUMNS if c in w]]]
            per_window.append(_keyed(w.merge(rel, how="left"), dataset, horizon))
            present = [v for v in ablated if v in set(w["model"])]
            if present and "prism" in set(w["model"]):
                ablations.append(_keyed(relative_to(w, present, "prism", n_boot=N_BOOT,
                                                    random_state=0), dataset, horizon))
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(
        columns=["dataset", "horizon", "model", *TABLE_COLUMNS])
    return (table, pd.concat(per_window, ignore_index=True) if per_window else pd.DataFrame(),
            pd.concat(ablations, ignore_index=True) if ablations else pd.DataFrame(
                columns=["dataset", "horizon", "model", "reference", "ratio", "lo", "hi",
                         "windows"]))


def _keyed(frame: pd.DataFrame, dataset: str, horizon: str) -> pd.DataFrame:
    frame = frame.copy()
    frame.insert(0, "horizon", horizon)
    frame.insert(0, "dataset", dataset)
    return frame


def check_targets(table: pd.DataFrame) -> list[tuple[str, str, str]]:
    """PRISM's targets (module docstring), checked on the summary table.

    Returns:
        ``(target, "PASS" | "FAIL" | "SKIP", detail)`` per target.
    """
    names = ["(1) prism AvgRelMAE <= 1.00 on every panel and horizon",
             "(2) mean over panels a day ahead <= 0.95; hi < 1.00 a day ahead on "
             + ", ".join(SURE_PANELS),
             "(3) prism first or within 1 % of the best model everywhere",
             "(4) prism catastrophes <= 2 % everywhere",
             "(5) prism 90 % coverage within [0.88, 0.92] everywhere"]
    main = table[table["horizon"].isin(HORIZONS)]
    prism = main[main["model"] == "prism"]
    if prism.empty:
        return [(n, "SKIP", "prism was not run") for n in names]

    def where(rows: pd.DataFrame, col: str) -> str:
        return ", ".join(f"{r.dataset} {r.horizon}: {getattr(r, col):.3f}"
                         for r in rows.itertuples())

    out = []
    bad = prism[~(prism["avg_rel_mae"] <= 1.0)]
    out.append((names[0], _verdict(bad.empty), where(bad, "avg_rel_mae") or "all <= 1.00"))
    day = prism[prism["horizon"] == BACKTEST_HORIZON]
    mean_day = float(day["avg_rel_mae"].mean())
    sure = day[day["dataset"].isin(SURE_PANELS)]
    unsure = sure[~(sure["hi"] < 1.0)]
    out.append((names[1], _verdict(mean_day <= 0.95 and unsure.empty),
                f"mean {mean_day:.3f} over {len(day)} panels; hi: {where(sure, 'hi') or '-'}"))
    best = main.groupby(["dataset", "horizon"])["avg_rel_mae"].transform("min")
    best_model = main.loc[main.groupby(["dataset", "horizon"])["avg_rel_mae"].idxmin(),
                          ["dataset", "horizon", "model"]]
    lagging = prism[~(prism["avg_rel_mae"] <= 1.01 * best[prism.index])]
    lagging = lagging.merge(best_model.rename(columns={"model": "best"}),
                            on=["dataset", "horizon"])
    out.append((names[2], _verdict(lagging.empty), ", ".join(
        f"{r.dataset} {r.horizon}: {r.avg_rel_mae:.3f}, best {r.best}"
        for r in lagging.itertuples()) or "prism is first or within 1 % everywhere"))
    bad = prism[~(prism["catastrophes"] <= 0.02)]
    out.append((names[3], _verdict(bad.empty), where(bad, "catastrophes") or "all <= 2 %"))
    bad = prism[~prism["coverage_90"].between(0.88, 0.92)]
    out.append((names[4], _verdict(bad.empty), ", ".join(
        f"{r.dataset} {r.horizon}: {r.coverage_90:.3f}"
        + (f" [{r.coverage_lo:.2f}, {r.coverage_hi:.2f}]" if hasattr(r, "coverage_lo") else "")
        for r in bad.itertuples()) or "all within [0.88, 0.92]"))
    return out


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# -- writing ----------------------------------------------------------------------------------
def _cell(row: Any, value: str = "avg_rel_mae") -> str:
    return f"{row[value]:.3f} [{row['lo']:.2f}, {row['hi']:.2f}]"


def headline(table: pd.DataFrame, value: str = "avg_rel_mae") -> pd.DataFrame:
    """``value [lo, hi]`` per model (rows) and panel/horizon (columns), best first."""
    if table.empty:
        return pd.DataFrame()
    cells = table.assign(cell=table.apply(_cell, axis=1, value=value),
                         column=table["dataset"] + " " + table["horizon"])
    wide = cells.pivot(index="model", columns="column", values="cell")
    order = table.groupby("model", sort=False)[value].apply(
        lambda s: float(np.exp(np.nanmean(np.log(s.to_numpy(np.float64))))))
    columns = list(dict.fromkeys(cells["column"]))
    wide = wide.loc[order.sort_values().index, columns].fillna("")
    return wide.reset_index()


def _markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "(none)"
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(table: pd.DataFrame, per_window: pd.DataFrame, ablations: pd.DataFrame,
          output: Path, note: str, failures: Sequence[str]) -> str:
    """Write the four result files; return the headline and targets as text for stdout."""
    output.mkdir(parents=True, exist_ok=True)
    table.to_csv(output / "accuracy.csv", index=False, float_format="%.6g")
    per_window.to_csv(output / "accuracy_windows.csv", index=False, float_format="%.6g")
    ablations.to_csv(output / "accuracy_ablations.csv", index=False, float_format="%.6g")
    head = headline(table)
    targets = check_targets(table)
    target_lines = [f"- **{verdict}** {name}: {detail}" for name, verdict, detail in targets]
    parts = [
        "# Accuracy benchmark\n",
        f"`python -m evaluation.benchmarks.accuracy` ({note}). One backtest per model and "
        f"panel (horizon {BACKTEST_HORIZON}, cutoffs every {STEP}); 1h and 6h are the first "
        f"steps of the same forecasts, {DAILY} the daily cutoffs. AvgRelMAE is the geometric "
        "mean over windows of each window's MAE over naive's (below 1: better than the last "
        "value); [lo, hi] its 95 % block-bootstrap interval over cutoffs. See the module "
        "docstring of `evaluation/benchmarks/accuracy.py` for the protocol.\n",
        f"## AvgRelMAE [lo, hi] by panel and horizon\n\n{_markdown(head)}\n",
        "## Targets\n\n" + "\n".join(target_lines) + "\n",
    ]
    if failures:
        parts.append("## Failed runs\n\n" + "\n".join(f"- {f}" for f in failures) + "\n")
    if not ablations.empty:
        ab = headline(ablations.rename(columns={"ratio": "avg_rel_mae"}))
        parts.append("## Ablations: each variant's MAE ratio to prism [lo, hi]\n\n"
                     "Above 1: the change costs accuracy (the part helps); below 1: it "
                     f"helps.\n\n{_markdown(ab)}\n")
    order = {h: i for i, h in enumerate([*HORIZONS, DAILY])}
    for dataset, group in table.groupby("dataset", sort=False):
        shown = group.sort_values(["horizon", "avg_rel_mae"], key=lambda c: c.map(order)
                                  if c.name == "horizon" else c)
        shown = shown[["horizon", "model", *[c for c in TABLE_COLUMNS if c in shown]]]
        parts.append(f"## {dataset}\n\n{_markdown(shown)}\n")
    (output / "accuracy.md").write_text("\n".join(parts))
    text = head.to_string(index=False) if not head.empty else "(no results)"
    return text + "\n\n" + "\n".join(f"{v} {n}: {d}" for n, v, d in targets)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results; 1 when a backtest failed, else 0."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--models", default=None,
                        help="models and PRISM variants (default: all; naive always runs)")
    parser.add_argument("--windows", type=int, default=WINDOWS)
    parser.add_argument("--jobs", type=int, default=2, help="processes (1: this one)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--references", action="store_true",
                        help="also run statsforecast's models (the bench extra)")
    parser.add_argument("--before", default=None, metavar="DURATION",
                        help="end each series this long before its last point (an earlier "
                             "week: e.g. 7d)")
    parser.add_argument("--reuse", type=Path, action="append", default=[], metavar="DIR",
                        help="take the models this run does not run from an earlier run's "
                             "results in DIR (repeatable; see the module docstring)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_WINDOWS} windows, the first {QUICK_SERIES} "
                             "series of each panel")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.jobs < 1 or args.windows < 1:
        parser.error("--jobs and --windows must be at least 1")
    windows = QUICK_WINDOWS if args.quick else args.windows
    variants = prism_variants()
    names = [d.strip() for d in args.datasets.split(",") if d.strip()]
    wanted = ([m.strip() for m in args.models.split(",") if m.strip()] if args.models
              else [*MODELS, *(v for v in variants if v != "prism")])
    specs = model_specs(wanted, variants)
    try:
        reused, reused_seconds = reuse(args.reuse, list(specs)) if args.reuse else (None, {})
    except ConfigError as exc:
        parser.error(str(exc))
    started = time.perf_counter()
    panels = load_datasets(names)
    if args.before:
        try:
            cut = parse_duration(args.before)
        except ConfigError as exc:
            parser.error(f"--before {args.before!r}: {exc}")
        panels = {k: end_before(p, cut) for k, p in panels.items()}
    if args.quick:
        panels = {k: _first_series(p, QUICK_SERIES) for k, p in panels.items()}
    for name, panel in panels.items():
        print(f"{name}: {panel[SERIES_ID].nunique()} series, {len(panel):,} points", flush=True)
    tasks = [_Task(d, m, alias, params) for d in panels for m, (alias, params) in specs.items()]
    if args.references:
        tasks += [_Task(d, REFERENCES, REFERENCES) for d in panels]
    frames, seconds, failures = _run_all(tasks, panels, windows, args.jobs,
                                         lambda s: print(s, flush=True))
    order = [*specs, *(REFERENCE_MODELS if args.references else ())]
    reused_names = (set(reused["model"].astype(str)) - set(order)) if reused is not None else set()
    known = list(dict.fromkeys([BASELINE, *MODELS, *variants, *REFERENCE_MODELS]))
    reused_models = [m for m in known if m in reused_names] + sorted(reused_names - set(known))
    if reused_models:  # the models run and reused, in the benchmark's order
        everyone = set(order) | reused_names
        order = ([m for m in known if m in everyone]
                 + [m for m in [*order, *reused_models] if m not in known])
    try:
        table, per_window, ablations = score(frames, panels, {**reused_seconds, **seconds},
                                             windows, order, reused)
    except ConfigError as exc:
        parser.error(str(exc))
    took = time.perf_counter() - started
    note = (f"{len(panels)} panels, {windows} windows, {args.jobs} processes, {took:.0f} s"
            + (f", --before {args.before}" if args.before else "")
            + (f", reusing {', '.join(reused_models)} from {', '.join(map(str, args.reuse))}"
               if reused_models else "")
            + (", --quick" if args.quick else ""))
    print(write(table, per_window, ablations, args.output, note, failures), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
