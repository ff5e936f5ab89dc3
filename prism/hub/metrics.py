"""The hub's Prometheus metrics: cache lookups, model jobs, data freshness, forecast errors,
and the latest forecast and capacity plan of each series and scope."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from prism.forecasters.base import quantile_column
from prism.hub.types import SeriesState, ServedForecast
from prism.schema import metric_info, split_series_id

if TYPE_CHECKING:
    from prism.capacity import CapacityRow

_FIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

#: The gauges of :meth:`ForecastHub.status` that are exported: status key, name, help text.
_STATUS_GAUGES = (("models_loaded", "prism_models_loaded", "Models in memory"),
                  ("jobs", "prism_fit_jobs", "Fit/update jobs waiting or running"),
                  ("cached_forecasts", "prism_forecast_cache_entries",
                   "Forecasts in the memory cache"))

#: The steps ahead at which forecasts are exported: ``horizon`` label -> seconds ahead. A
#: series whose step does not divide one (a daily series at ``1h``) has no sample there.
FORECAST_HORIZONS = (("1h", 3600), ("6h", 6 * 3600), ("1d", 24 * 3600))
#: Quantile levels kept per series: the forecasts of one series, model and data merge their
#: levels up to this many (a request with other levels then starts afresh), so that clients
#: asking for ever new levels cannot grow the exposition without bound.
_MAX_LEVELS = 32


def unit_suffix(series_id: str) -> str:
    """``_gpus``, ``_jobs``, ``_nodes`` or ``_ratio``: the unit of the series' metric as the
    end of a metric name (Prometheus names carry their unit); ``""`` for counts and metrics
    without a known unit.

    Raises:
        DataContractError: for an id that is not ``cluster/scope/metric``.
    """
    unit = metric_info(split_series_id(series_id)[2]).unit
    return "" if unit in ("", "count") else f"_{unit}"


@dataclass(frozen=True)
class _Forecast:
    """The values of a series' latest forecast at :data:`FORECAST_HORIZONS`."""

    model: str
    start_s: float  # Unix time of the first step
    quantiles: dict[tuple[str, str], float]  # (level as "0.9", horizon label) -> value
    mean: dict[str, float]  # horizon label -> value


@dataclass(frozen=True)
class _Plan:
    """One scope's row of the latest capacity plan of its cluster."""

    needed: float
    installed: float | None
    start_s: float


class HubMetrics:
    """Counters the hub's parts update as they work, and the gauges read at each scrape.

    The metrics are registered nowhere (``registry=None``): the app's collector yields
    :meth:`collect` and :meth:`collect_forecasts` at each scrape, so two hubs in one process
    (tests) never clash.
    """

    def __init__(self) -> None:
        self._cache = Counter(
            "prism_forecast_cache_lookups",
            "Forecast answers by where they came from (memory, DuckDB, or computed)",
            ["model", "result"], registry=None)
        self._fit = Histogram(
            "prism_model_fit_duration_seconds",
            "Time to fit, load, update or refit a served model", ["model", "kind"],
            buckets=_FIT_BUCKETS, registry=None)
        self._rejected = Counter(
            "prism_fit_jobs_rejected", "Fit/update jobs refused because the queue was full",
            registry=None)
        self._lock = threading.Lock()  # guards the two maps below; held for dict updates only
        self._forecasts: dict[str, _Forecast] = {}
        self._plans: dict[tuple[str, str], _Plan] = {}

    def cache_answer(self, alias: str, result: str) -> None:
        """Count a forecast answer: ``hit_memory``, ``hit_store`` or ``miss``."""
        self._cache.labels(alias, result).inc()

    def job_timed(self, alias: str, kind: str, seconds: float) -> None:
        """Record how long a ``fit``, ``load``, ``update`` or ``refit`` took."""
        self._fit.labels(alias, kind).observe(seconds)

    def job_rejected(self) -> None:
        """Count a job refused because the queue was full."""
        self._rejected.inc()

    def forecast_served(self, served: ServedForecast) -> None:
        """Keep the values of a forecast just served at :data:`FORECAST_HORIZONS` (a few
        list lookups: it runs on the request's path).

        The latest forecast of a series wins; one of the same model from the same data (the
        same first step) adds its quantile levels and horizons to those kept.
        """
        start_s = served.ts[0].timestamp()
        quantiles: dict[tuple[str, str], float] = {}
        mean: dict[str, float] = {}
        for label, seconds in FORECAST_HORIZONS:
            step, rest = divmod(seconds, served.freq_s)
            if rest or not 1 <= step <= served.horizon_steps:
                continue
            mean[label] = served.mean[step - 1]
            for q in served.quantiles:
                quantiles[(repr(float(q)), label)] = served.bands[quantile_column(q)][step - 1]
        with self._lock:
            old = self._forecasts.get(served.series_id)
            if old is not None and old.model == served.model and old.start_s == start_s:
                merged = {**old.quantiles, **quantiles}
                if len({q for q, _ in merged}) <= _MAX_LEVELS:
                    quantiles, mean = merged, {**old.mean, **mean}
            self._forecasts[served.series_id] = _Forecast(served.model, start_s, quantiles,
                                                          mean)

    def capacity_planned(self, rows: Iterable[CapacityRow]) -> None:
        """Keep the rows of a capacity plan just computed (the latest per cluster and scope).

        Args:
            rows: the plan's rows (:attr:`prism.capacity.CapacityPlan.rows`).
        """
        with self._lock:
            for row in rows:
                self._plans[(row.cluster, row.scope)] = _Plan(
                    float(row.gpus_needed),
                    None if row.capacity is None else float(row.capacity),
                    pd.Timestamp(row.start).timestamp())

    def collect(
        self,
        *,
        catalogue: Mapping[str, SeriesState],
        errors: pd.DataFrame,
        status: Mapping[str, int],
        shared: bool = True,
        per_series: bool = True,
    ) -> Iterator[Metric]:
        """Every metric but the forecasts, with the gauges computed from the hub's state.

        Args:
            catalogue: every series' state (freshness gauges).
            errors: ``series_id, model, points, mae, wape`` over the last scored points.
            status: the counts of :meth:`ForecastHub.status`.
            shared: include the metrics of the hub as a whole (cache, fits, counts).
            per_series: include the gauges labelled by series id (they name every cluster,
                VC and tenant; the API serves them only behind the token).
        """
        if shared:
            yield from self._cache.collect()
            yield from self._fit.collect()
            yield from self._rejected.collect()
            for key, name, help_text in _STATUS_GAUGES:
                gauge = GaugeMetricFamily(name, help_text)
                gauge.add_metric([], status[key])
                yield gauge
        if not per_series:
            return
        now = time.time()
        last = GaugeMetricFamily("prism_series_last_timestamp_seconds",
                                 "Unix time of the series' last bucket", labels=["series_id"])
        age = GaugeMetricFamily("prism_series_data_age_seconds",
                                "Seconds from the end of the series' last bucket to now",
                                labels=["series_id"])
        for sid, state in sorted(catalogue.items()):
            end = state.last_ts.value / 1e9
            last.add_metric([sid], end)
            age.add_metric([sid], now - end - state.freq_s)
        yield last
        yield age
        mae = _ByUnit("prism_forecast_rolling_mae",
                      "Mean absolute error of the served forecasts over the last scored "
                      "points, in the series' unit", ["series_id", "model"])
        wape = GaugeMetricFamily(
            "prism_forecast_rolling_wape_ratio",
            "Sum of absolute errors over the sum of actuals, last scored points",
            labels=["series_id", "model"])
        points = GaugeMetricFamily("prism_forecast_scored_points",
                                   "Points in the rolling forecast error",
                                   labels=["series_id", "model"])
        for row in errors.to_dict("records"):
            labels = [str(row["series_id"]), str(row["model"])]
            mae.add(labels[0], labels, float(row["mae"]))
            points.add_metric(labels, float(row["points"]))
            if pd.notna(row["wape"]):
                wape.add_metric(labels, float(row["wape"]))
        yield from mae.families()
        yield wape
        yield points

    def collect_forecasts(self, catalogue: Mapping[str, SeriesState]) -> Iterator[Metric]:
        """The latest forecast of each series at :data:`FORECAST_HORIZONS` and the latest
        capacity plan of each scope: what a scaler or a dashboard acts on.

        Args:
            catalogue: the series there are now (a series no longer there is left out).

        Yields:
            ``prism_forecast<unit>{series_id, quantile, horizon}``,
            ``prism_forecast_mean<unit>{series_id, horizon}`` (``<unit>``: see
            :func:`unit_suffix`), ``prism_forecast_start_timestamp_seconds{series_id,
            model}``, ``prism_capacity_needed_gpus{cluster, scope}``,
            ``prism_capacity_installed_gpus{cluster, scope}`` and
            ``prism_capacity_plan_start_timestamp_seconds{cluster, scope}``.
        """
        with self._lock:
            forecasts = sorted(self._forecasts.items())
            plans = sorted(self._plans.items())
        bands = _ByUnit("prism_forecast", "The latest served forecast of the series at the "
                        "quantile, the horizon ahead of its last bucket",
                        ["series_id", "quantile", "horizon"])
        means = _ByUnit("prism_forecast_mean", "The latest served mean forecast of the series, "
                        "the horizon ahead of its last bucket", ["series_id", "horizon"])
        start = GaugeMetricFamily("prism_forecast_start_timestamp_seconds",
                                  "Unix time of the first step of the latest served forecast",
                                  labels=["series_id", "model"])
        for sid, fc in forecasts:
            if sid not in catalogue:
                continue
            start.add_metric([sid, fc.model], fc.start_s)
            for (q, horizon), value in sorted(fc.quantiles.items()):
                bands.add(sid, [sid, q, horizon], value)
            for horizon, value in sorted(fc.mean.items()):
                means.add(sid, [sid, horizon], value)
        yield from bands.families()
        yield from means.families()
        yield start
        needed = GaugeMetricFamily("prism_capacity_needed_gpus",
                                   "GPUs the scope needs over the window of the latest "
                                   "capacity plan (in use at its quantile plus the queue "
                                   "allowance)", labels=["cluster", "scope"])
        installed = GaugeMetricFamily("prism_capacity_installed_gpus",
                                      "GPUs the scope has, as the latest capacity plan read "
                                      "them", labels=["cluster", "scope"])
        planned = GaugeMetricFamily("prism_capacity_plan_start_timestamp_seconds",
                                    "Unix time of the first step of the latest capacity plan",
                                    labels=["cluster", "scope"])
        for (cluster, scope), plan in plans:
            needed.add_metric([cluster, scope], plan.needed)
            planned.add_metric([cluster, scope], plan.start_s)
            if plan.installed is not None:
                installed.add_metric([cluster, scope], plan.installed)
        yield needed
        yield installed
        yield planned


class _ByUnit:
    """Gauge families of one base name, one per unit of the series (``prism_forecast_gpus``,
    ``prism_forecast_ratio``, ...): one name, one unit."""

    def __init__(self, base: str, help_text: str, labels: list[str]) -> None:
        self._base = base
        self._help = help_text
        self._labels = labels
        self._families: dict[str, GaugeMetricFamily] = {}

    def add(self, series_id: str, labels: list[str], value: float) -> None:
        name = self._base + unit_suffix(series_id)
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = GaugeMetricFamily(name, self._help,
                                                              labels=self._labels)
        family.add_metric(labels, value)

    def families(self) -> Iterator[GaugeMetricFamily]:
        """The families with samples, by name."""
        for name in sorted(self._families):
            yield self._families[name]
