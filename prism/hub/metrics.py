"""The hub's Prometheus metrics: cache answers, model jobs, data freshness, forecast errors."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import pandas as pd
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from prism.hub.types import SeriesState

_FIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

#: The gauges of :meth:`ForecastHub.status` that are exported, with their help text.
_STATUS_GAUGES = (("models_loaded", "Models in memory"),
                  ("jobs", "Fit/update jobs waiting or running"),
                  ("cached_forecasts", "Forecasts in the memory cache"))


class HubMetrics:
    """Counters the hub's parts update as they work, and the gauges read at each scrape.

    The metrics are registered nowhere (``registry=None``): the app's collector yields
    :meth:`collect` at each scrape, so two hubs in one process (tests) never clash.
    """

    def __init__(self) -> None:
        self._cache = Counter(
            "prism_forecast_cache", "Forecast answers by where they came from",
            ["model", "result"], registry=None)
        self._fit = Histogram(
            "prism_model_fit_duration_seconds",
            "Time to fit, load, update or refit a served model", ["model", "kind"],
            buckets=_FIT_BUCKETS, registry=None)
        self._rejected = Counter(
            "prism_fit_jobs_rejected", "Fit/update jobs refused because the queue was full",
            registry=None)

    def cache_answer(self, alias: str, result: str) -> None:
        """Count a forecast answer: ``hit_memory``, ``hit_store`` or ``miss``."""
        self._cache.labels(alias, result).inc()

    def job_timed(self, alias: str, kind: str, seconds: float) -> None:
        """Record how long a ``fit``, ``load``, ``update`` or ``refit`` took."""
        self._fit.labels(alias, kind).observe(seconds)

    def job_rejected(self) -> None:
        """Count a job refused because the queue was full."""
        self._rejected.inc()

    def collect(
        self,
        *,
        catalogue: Mapping[str, SeriesState],
        errors: pd.DataFrame,
        status: Mapping[str, int],
        shared: bool = True,
        per_series: bool = True,
    ) -> Iterator[Metric]:
        """Every metric, with the gauges computed from the hub's present state.

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
            for name, help_text in _STATUS_GAUGES:
                gauge = GaugeMetricFamily(f"prism_{name}", help_text)
                gauge.add_metric([], status[name])
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
        mae = GaugeMetricFamily(
            "prism_forecast_rolling_mae",
            "Mean absolute error of the served forecasts over the last scored points",
            labels=["series_id", "model"])
        wape = GaugeMetricFamily(
            "prism_forecast_rolling_wape",
            "Sum of absolute errors over the sum of actuals, last scored points",
            labels=["series_id", "model"])
        points = GaugeMetricFamily("prism_forecast_scored_points",
                                   "Points in the rolling forecast error",
                                   labels=["series_id", "model"])
        for row in errors.to_dict("records"):
            labels = [str(row["series_id"]), str(row["model"])]
            mae.add_metric(labels, float(row["mae"]))
            points.add_metric(labels, float(row["points"]))
            if pd.notna(row["wape"]):
                wape.add_metric(labels, float(row["wape"]))
        yield mae
        yield wape
        yield points
