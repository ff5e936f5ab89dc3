"""The values the forecast hub hands out and keeps: series states, model specs, forecasts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from prism.forecasters import get_forecaster
from prism.forecasters.base import BaseForecaster
from prism.ingest.pipeline import IngestReport
from prism.schema import SERIES_ID, TS


@dataclass(frozen=True)
class SeriesState:
    """A series as the hub sees it.

    Attributes:
        series_id: the id.
        cluster: its cluster.
        freq_s: its step in seconds.
        first_ts / last_ts: its first and last timestamp.
        n_points: its number of values.
        watermark: ``<last ts>#<checksum of its values>``.
    """

    series_id: str
    cluster: str
    freq_s: int
    first_ts: pd.Timestamp
    last_ts: pd.Timestamp
    n_points: int
    watermark: str


@dataclass(frozen=True)
class ModelSpec:
    """A forecaster alias with its hyperparameters.

    Attributes:
        alias: the forecaster's alias.
        key: ``alias`` for the default hyperparameters, else ``alias[name=value,...]`` with
            the ones that differ (JSON values): the ``model`` label of forecasts and caches.
        params: the hyperparameters to construct it with.
    """

    alias: str
    key: str
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ServedForecast:
    """One series' forecast as the API serves it (columns of the forecast contract).

    Attributes:
        series_id: the series.
        model: the model key (see :class:`ModelSpec`).
        model_id: the registry id of the model.
        model_version: ``<model id>.v<version>`` (the version grows with each update).
        watermark: the data watermark the model had absorbed.
        freq_s: step in seconds.
        horizon_steps: number of steps.
        quantiles: the quantile levels of ``bands``.
        ts: the forecast timestamps (UTC, with the zone: they leave the process).
        mean: point forecasts.
        bands: ``p50``-style column name -> that quantile's forecasts.
        fallback: why the series is served by the seasonal naive fallback, if it is.
        note: what to know about the forecast (a horizon longer than the series' stored
            history), if anything.
        cached: whether the answer came from the cache.
    """

    series_id: str
    model: str
    model_id: str
    model_version: str
    watermark: str
    freq_s: int
    horizon_steps: int
    quantiles: tuple[float, ...]
    ts: list[datetime]
    mean: list[float]
    bands: dict[str, list[float]]
    fallback: str | None = None
    note: str | None = None
    cached: bool = False

    def to_json(self) -> str:
        """The forecast as a JSON object (the ``forecast_cache`` payload)."""
        data = {k: getattr(self, k) for k in (
            "series_id", "model", "model_id", "model_version", "watermark", "freq_s",
            "horizon_steps", "quantiles", "mean", "bands", "fallback", "note")}
        data["ts"] = [t.isoformat() for t in self.ts]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> ServedForecast:
        """The forecast back from :meth:`to_json`."""
        data = json.loads(text)
        data["ts"] = [_utc(datetime.fromisoformat(t)) for t in data["ts"]]
        data["quantiles"] = tuple(data["quantiles"])
        return cls(**data)

    def frame(self) -> pd.DataFrame:
        """The forecast contract: ``series_id, ts, model, mean, p..``."""
        ts = pd.to_datetime(self.ts, utc=True).tz_convert(None)  # the contract: naive UTC
        out = pd.DataFrame({SERIES_ID: self.series_id, TS: ts,
                            "model": self.model, "mean": self.mean})
        for name, values in self.bands.items():
            out[name] = values
        return out


@dataclass(frozen=True)
class IngestOutcome:
    """What an ingest through the hub did.

    Attributes:
        report: the ingestion report (files, rows, clusters).
        changed: series whose data changed (their cached forecasts were dropped).
        scored: forecast points scored against the new data.
    """

    report: IngestReport
    changed: list[str]
    scored: int


@dataclass(frozen=True)
class LoadedModel:
    """A model in memory; replaced whole (copy on write), never changed once published.

    Attributes:
        model_id: its registry id.
        spec: the alias and hyperparameters it was built with.
        forecaster: the fitted forecaster.
        fitted_at: Unix time its parameters were learned.
        synced: series id -> the watermark its history matches.
        saved: whether it is in the registry (else it lives in memory only).
    """

    model_id: str
    spec: ModelSpec
    forecaster: BaseForecaster
    fitted_at: float
    synced: Mapping[str, str]
    saved: bool = True

    @property
    def version(self) -> str:
        """``<model id>.v<version>``: grows with each update of the forecaster."""
        return f"{self.model_id}.v{self.forecaster.version_}"


def spec_key(alias: str, params: Mapping[str, Any]) -> str:
    """``alias`` or ``alias[name=value,...]`` with the hyperparameters that differ from the
    defaults (JSON values, so that registry metadata and live objects give the same key).

    Raises:
        ConfigError: for an unknown alias.
    """
    defaults = _jsonable(get_forecaster(alias).get_params())
    given = _jsonable(dict(params))
    changed = {k: v for k, v in sorted(given.items()) if defaults.get(k) != v}
    if not changed:
        return alias
    return alias + "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in changed.items()) + "]"


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | set):
        return list(value)
    return str(value)
