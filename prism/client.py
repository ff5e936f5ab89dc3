"""A Python client of the PRISM REST API, for schedulers and capacity tools.

    from prism.client import PrismClient

    with PrismClient("http://127.0.0.1:8000") as prism:      # token from PRISM_API_TOKEN
        fc = prism.forecast("cluster-0/all/gpu_demand", horizon="6h", quantiles=(0.5, 0.95))
        peak = max(fc.band(0.95))
        plan = prism.capacity("cluster-0", horizon="1d", quantile=0.95)

Every call has a timeout. A ``503`` (a model being fitted or updated) is retried after the
server's ``Retry-After`` (capped at ``max_backoff``), and a connection error after an
exponential backoff, at most ``retries`` times; other errors raise :class:`PrismAPIError`
with the server's message. Ingest is safe to retry: the server skips content it has already
stored.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from prism.errors import PrismError

logger = logging.getLogger(__name__)


def _ids(series_ids: Iterable[str] | None) -> list[str] | None:
    """Series ids as a list; one id given as a bare string is refused (a string is iterable:
    its characters went out as 24 "series ids")."""
    if series_ids is None:
        return None
    if isinstance(series_ids, str):
        raise TypeError(f"series_ids takes a list of ids, not the string {series_ids!r}: "
                        f"write [{series_ids!r}]")
    return list(series_ids)


def _levels(quantiles: Sequence[float]) -> list[float]:
    """Quantile levels as a list; one level given as a number is refused by name."""
    if isinstance(quantiles, int | float):
        raise TypeError(f"quantiles takes a list of levels, not the number {quantiles!r}: "
                        f"write [{quantiles!r}]")
    return [float(q) for q in quantiles]


def _band_name(quantile: float) -> str:
    """The API's name of a quantile's band (``0.975 -> 'p97.5'``; the server's
    ``quantile_column``, written here so that the client needs no forecasting libraries)."""
    return "p" + f"{round(quantile * 100, 6):.6f}".rstrip("0").rstrip(".")


class PrismAPIError(PrismError):
    """The API answered with an error.

    Attributes:
        status: the HTTP status (0 when the server could not be reached).
        detail: the server's ``detail`` (a message, or a list of field errors for 422).
    """

    def __init__(self, status: int, detail: Any, *, method: str, url: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"{method} {url} -> {status}: {detail}")


@dataclass(frozen=True)
class Forecast:
    """One series' forecast: ``ts[i]``, ``mean[i]`` and ``bands["p90"][i]`` are step ``i+1``.

    Attributes:
        series_id: the series.
        model: the model key (alias, with the hyperparameters that differ from defaults).
        model_id: the model's registry id.
        model_version: ``<model id>.v<version>``.
        watermark: the data the model had absorbed.
        freq_s: step in seconds.
        quantiles: the levels of ``bands``.
        ts: forecast timestamps (aware, UTC).
        mean: point forecasts.
        bands: ``p50``-style name -> forecasts at that quantile.
        fallback: why the seasonal naive fallback serves the series, if it does.
        cached: whether the server answered from its cache.
        note: what to know about the forecast (a horizon longer than the stored history).

    The server rounds forecasts to 4 decimals (1e-4 GPU): they match a local forecast of the
    same model to that.
    """

    series_id: str
    model: str
    model_id: str
    model_version: str
    watermark: str
    freq_s: int
    quantiles: tuple[float, ...]
    ts: list[datetime]
    mean: list[float]
    bands: dict[str, list[float]]
    fallback: str | None
    cached: bool
    note: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Forecast:
        """A forecast from the API's JSON."""
        return cls(
            series_id=data["series_id"], model=data["model"], model_id=data["model_id"],
            model_version=data["model_version"], watermark=data["watermark"],
            freq_s=int(data["freq_s"]), quantiles=tuple(data["quantiles"]),
            ts=[datetime.fromisoformat(t) for t in data["ts"]], mean=list(data["mean"]),
            bands={k: list(v) for k, v in data["bands"].items()}, fallback=data["fallback"],
            cached=bool(data["cached"]), note=data.get("note"))

    def band(self, quantile: float) -> list[float]:
        """The forecasts at one of the requested quantiles.

        Raises:
            KeyError: for a quantile that was not requested.
        """
        return self.bands[_band_name(quantile)]

    def to_frame(self) -> Any:
        """The forecast contract as a pandas frame: ``series_id, ts, model, mean, p..``."""
        import pandas as pd

        ts = pd.to_datetime(self.ts, utc=True).tz_convert(None)  # the contract: naive UTC
        frame = pd.DataFrame({"series_id": self.series_id, "ts": ts,
                              "model": self.model, "mean": self.mean})
        for name, values in self.bands.items():
            frame[name] = values
        return frame


@dataclass(frozen=True)
class CapacityMove:
    """GPUs one VC lends another for the window, before anything is added."""

    from_scope: str
    to_scope: str
    gpus: int
    hours: float
    text: str


@dataclass(frozen=True)
class CapacityRow:
    """GPUs one scope needs over the window at the planning quantile, against capacity."""

    cluster: str
    scope: str
    series_id: str
    start: datetime
    end: datetime
    quantile: float
    gpus_needed: float
    mean_peak: float
    capacity: float | None
    shortfall_gpu_hours: float | None
    idle_gpu_hours: float | None
    recommendation: str
    action: str = ""
    add_gpus: int = 0
    lend_gpus: int = 0
    release_gpus: int = 0
    queue_risk: float | None = None
    idle_energy_kwh: float | None = None
    busy_energy_kwh: float | None = None
    in_use_needed: float | None = None
    queue_allowance: float = 0.0
    headroom: float | None = None
    borrow_gpus: int = 0
    net_gpus: int = 0
    reason: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CapacityRow:
        """A row from the API's JSON (fields this client does not know are left out)."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "start": datetime.fromisoformat(data["start"]),
                      "end": datetime.fromisoformat(data["end"])})


@dataclass(frozen=True)
class IngestResult:
    """What an ingest did.

    Attributes:
        status: ``ingested``, or ``unchanged`` when all of it was stored before.
        rows: rows added.
        rejected: rows rejected (with ``on_error="skip"``).
        clusters: clusters whose series were derived again.
        changed_series: series whose data changed.
        files: per file: ``name, status, rows, rejected, note`` (``note``: what the rows
            stand for where it is not one per input row).
        notes: what to know about the result (a capacity for a cluster without series).
    """

    status: str
    rows: int
    rejected: int
    clusters: list[str]
    changed_series: int
    files: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


class PrismClient:
    """A client of the PRISM API (see the module docstring).

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        token: the bearer token (default: ``PRISM_API_TOKEN``, if set).
        timeout: seconds for each request (connect, read, write).
        retries: how many times a 503 or a connection error is retried.
        backoff: first wait after a connection error (doubling, with jitter).
        max_backoff: the longest wait between tries (also caps ``Retry-After``).
        transport: an httpx transport (tests; default: the network).
        sleep: how to wait (tests).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url.strip().lower().startswith(("http://", "https://")):
            raise ValueError(f"base_url {base_url!r} needs its scheme, e.g. "
                             f"'http://{base_url.strip().lstrip('/')}'")
        token = token if token is not None else os.environ.get("PRISM_API_TOKEN") or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout,
                                  transport=transport)
        self._retries = retries
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._sleep = sleep

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> PrismClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------------
    def health(self) -> bool:
        """Whether the server answers ``/healthz``."""
        try:
            return self._http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def ready(self) -> dict[str, Any]:
        """``/readyz``: series, models loaded, jobs and cached forecasts."""
        return dict(self._request("GET", "/readyz").json())

    def series(self, *, cluster: str | None = None, scope: str | None = None,
               metric: str | None = None) -> list[dict[str, Any]]:
        """The series catalogue (filtered)."""
        params = {k: v for k, v in (("cluster", cluster), ("scope", scope),
                                    ("metric", metric)) if v is not None}
        return list(self._request("GET", "/v1/series", params=params).json()["series"])

    def series_values(self, series_id: str, *, start: str | None = None,
                      end: str | None = None, tail: int | None = None) -> list[dict[str, Any]]:
        """Values of one series (``ts, value, filled``), as ``prism series show``."""
        params: dict[str, str | int] = {"series_id": series_id}
        params.update({k: v for k, v in (("start", start), ("end", end), ("tail", tail))
                       if v is not None})
        return list(self._request("GET", "/v1/series/values", params=params).json()["points"])

    def export_panel(self, *, series_ids: Sequence[str] | None = None,
                     format: str = "parquet") -> bytes:
        """The panel (``series_id, ts, value``) as CSV or Parquet bytes, as ``prism series
        export`` writes it (all series, or ``series_ids``)."""
        query = [("format", format)] + [("series_id", s) for s in _ids(series_ids) or ()]
        return self._request("GET", "/v1/series/export", params=query).content

    def decomposition(self, series_id: str, *, top: int = 5) -> dict[str, Any]:
        """``GET /v1/decomposition``: periods, top primitives, bursts, level shifts, variance
        shares and a note (the JSON of ``prism decompose --json``)."""
        return dict(self._request("GET", "/v1/decomposition",
                                  params={"series_id": series_id, "top": top}).json())

    def forecast(
        self,
        series_id: str,
        *,
        horizon: str = "1d",
        quantiles: Sequence[float] = (0.5, 0.9, 0.99),
        model: str | None = None,
        params: Mapping[str, object] | None = None,
    ) -> Forecast:
        """The forecast of one series (waits, with retries, while its model is fitted).

        Raises:
            PrismAPIError: 404 unknown series, 422 bad horizon/quantile/model, 503 after the
                retries.
        """
        levels = ",".join(repr(q) for q in _levels(quantiles))
        query: list[tuple[str, str]] = [("series_id", series_id), ("horizon", horizon),
                                        ("quantiles", levels)]
        if model:
            query.append(("model", model))
        query += [("param", f"{k}={_text(v)}") for k, v in (params or {}).items()]
        return Forecast.from_json(self._request("GET", "/v1/forecast", params=query).json())

    def forecast_many(
        self,
        series_ids: Iterable[str],
        *,
        horizon: str = "1d",
        quantiles: Sequence[float] = (0.5, 0.9, 0.99),
        model: str | None = None,
        params: Mapping[str, object] | None = None,
    ) -> list[Forecast]:
        """Forecasts of several series with one model (one request)."""
        body: dict[str, Any] = {"series_ids": _ids(series_ids), "horizon": horizon,
                                "quantiles": _levels(quantiles), "params": dict(params or {})}
        if model:
            body["model"] = model
        data = self._request("POST", "/v1/forecast", json=body).json()
        return [Forecast.from_json(f) for f in data["forecasts"]]

    def capacity(
        self,
        cluster: str,
        *,
        scope: str | None = None,
        horizon: str = "1d",
        quantile: float = 0.95,
        model: str | None = None,
        max_unmet: float | str | None = None,
    ) -> list[CapacityRow]:
        """GPUs needed per scope over the horizon at the quantile, against capacity
        (``max_unmet``: each scope at the cheapest quantile leaving at most that share of
        demand unmet in the planning backtest, e.g. ``"0.3%"``)."""
        return self.capacity_plan(cluster, scope=scope, horizon=horizon, quantile=quantile,
                                  model=model, max_unmet=max_unmet)[0]

    def capacity_plan(
        self,
        cluster: str,
        *,
        scope: str | None = None,
        horizon: str = "1d",
        quantile: float = 0.95,
        model: str | None = None,
        max_unmet: float | str | None = None,
        record: bool = True,
        day_floor: bool = True,
    ) -> tuple[list[CapacityRow], list[CapacityMove]]:
        """The capacity rows and the moves between VCs that come before any purchase
        (``record=False``: the server does not keep the plan for its track record;
        ``day_floor=False``: sized at the forecast's quantile alone)."""
        data = self._capacity(cluster, scope=scope, horizon=horizon, quantile=quantile,
                              model=model, max_unmet=max_unmet,
                              record=None if record else "false",
                              day_floor=None if day_floor else "false")
        return ([CapacityRow.from_json(r) for r in data["rows"]],
                [CapacityMove(**{k: m[k] for k in CapacityMove.__dataclass_fields__})
                 for m in data.get("moves", [])])

    def capacity_body(self, cluster: str, *, scope: str | None = None, horizon: str = "1d",
                      quantile: float = 0.95, model: str | None = None,
                      max_unmet: float | str | None = None, record: bool = True,
                      day_floor: bool = True) -> dict[str, Any]:
        """``GET /v1/capacity`` as the server's JSON, every field (what ``prism capacity
        --json`` prints); :meth:`capacity_plan` takes the same arguments."""
        return dict(self._capacity(cluster, scope=scope, horizon=horizon, quantile=quantile,
                                   model=model, max_unmet=max_unmet,
                                   record=None if record else "false",
                                   day_floor=None if day_floor else "false"))

    def procurement(self, cluster: str, *, horizon: str = "30d", scope: str | None = None,
                    weeks: int = 4, quantile: float = 0.95, growth: float = 1.0,
                    model: str | None = None) -> list[dict[str, Any]]:
        """The plan for buying (``prism capacity --procurement``): per scope the daily peak
        projected over ``horizon`` from the trend of the last ``weeks`` weeks, the day
        capacity would be exceeded (``exceeds_on``), the GPUs needed and the advice
        (``text``), as the API's JSON rows (the day-ahead plan is computed with it)."""
        data = self._capacity(cluster, scope=scope, horizon="1d", quantile=quantile,
                              model=model, procurement=horizon, trend_weeks=weeks,
                              growth=growth)
        rows: list[dict[str, Any]] = data["procurement"]["rows"]
        return rows

    def pool(self, cluster: str, *, horizon: str = "1d", quantile: float = 0.95,
             model: str | None = None, max_unmet: float | str | None = None,
             record: bool = True) -> dict[str, Any]:
        """The shared-pool alternative (``prism capacity --pool``): each VC's quota, the
        pool, their totals, the shares and how they did on the replayed days, as the API's
        ``pool`` object (``record=False``: the server keeps neither the plan nor the pool
        for the track record)."""
        data = self._capacity(cluster, scope=None, horizon=horizon, quantile=quantile,
                              model=model, pool="true", max_unmet=max_unmet,
                              record=None if record else "false")
        pool: dict[str, Any] = data["pool"]
        return pool

    def _capacity(self, cluster: str, *, scope: str | None, horizon: str, quantile: float,
                  model: str | None, **extra: object) -> dict[str, Any]:
        """``GET /v1/capacity`` as JSON (``extra``: further query fields, ``None`` left out)."""
        query = {"cluster": cluster, "horizon": horizon, "quantile": repr(float(quantile))}
        if scope:
            query["scope"] = scope
        if model:
            query["model"] = model
        query.update({k: f"{v:g}" if isinstance(v, float) else str(v)
                      for k, v in extra.items() if v is not None})
        data: dict[str, Any] = self._request("GET", "/v1/capacity", params=query).json()
        return data

    def capacity_report(self, *, cluster: str | None = None, horizon: str = "1d",
                        quantile: float = 0.95, model: str | None = None,
                        record: bool = True, day_floor: bool = True) -> str:
        """The capacity report (one self-contained HTML page), as ``prism report``
        (``record=False``: the server does not keep its plan for the track record;
        ``day_floor=False``: plans sized at the forecast's quantile alone)."""
        query = {"horizon": horizon, "quantile": repr(float(quantile))}
        if not record:
            query["record"] = "false"
        if not day_floor:
            query["day_floor"] = "false"
        if cluster:
            query["cluster"] = cluster
        if model:
            query["model"] = model
        return self._request("GET", "/v1/reports/capacity", params=query).text

    def track_record(self, cluster: str, *, plans: bool = False) -> dict[str, Any]:
        """The served plans of ``cluster`` whose window has ended, against what was in use and
        against yesterday's peak, as ``prism track-record --json`` (``plans``: each scored
        plan row too)."""
        query = {"cluster": cluster, "plans": "true" if plans else "false"}
        data: dict[str, Any] = self._request("GET", "/v1/capacity/track-record",
                                             params=query).json()
        return data

    def refit(self, series_ids: Sequence[str] | None = None, *, model: str | None = None,
              params: Mapping[str, object] | None = None) -> dict[str, int]:
        """Queue refits of the server's models of ``series_ids`` (none: all); returns
        ``{"refits": n, "fits": m}`` (the jobs run in the background)."""
        body: dict[str, Any] = {"params": dict(params or {})}
        if series_ids is not None:
            body["series_ids"] = _ids(series_ids)
        if model:
            body["model"] = model
        return dict(self._request("POST", "/v1/models/refit", json=body).json())

    def ingest_file(self, path: str | Path, *, format: str, **options: object) -> IngestResult:
        """Upload a file to ingest (``format`` as in ``prism formats``; options as the query
        of ``POST /v1/ingest``: ``cluster``, ``freq``, ``on_error``, ``map=["ts=time"]``,
        ...; an option the server does not take is a :class:`PrismAPIError` 422 naming it)."""
        path = Path(path)
        files = {"file": (path.name, path.read_bytes())}
        return self._ingest(format, options, files=files)

    def ingest_records(self, records: Sequence[Mapping[str, object]], *, format: str,
                       **options: object) -> IngestResult:
        """Ingest rows given as objects (e.g. ``series_id, ts, value`` for ``long-csv``)."""
        return self._ingest(format, options, json={"records": [dict(r) for r in records]})

    def _ingest(self, fmt: str, options: Mapping[str, object], **body: Any) -> IngestResult:
        # a list (map=["ts=time", ...], option=[...]) is sent as the parameter repeated
        query: dict[str, str | list[str]] = {"format": fmt}
        for key, value in options.items():
            if isinstance(value, list | tuple):
                query[key] = [_text(v) for v in value]
            elif value is not None:
                query[key] = _text(value)
        data = self._request("POST", "/v1/ingest", params=query, **body).json()
        return IngestResult(status=data["status"], rows=data["rows"], rejected=data["rejected"],
                            clusters=data["clusters"], changed_series=data["changed_series"],
                            files=data["files"], notes=list(data.get("notes", [])))

    # -- transport -----------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send, retrying 503s and connection errors; raise :class:`PrismAPIError` else."""
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if attempt >= self._retries:
                    raise PrismAPIError(0, f"cannot reach the server: {exc}", method=method,
                                        url=str(self._http.base_url) + path) from exc
                wait = self._wait(attempt, None)
                logger.info("%s %s: %s; retrying in %.1f s", method, path, exc, wait)
            else:
                if response.status_code < 400:
                    return response
                if response.status_code != 503 or attempt >= self._retries:
                    raise PrismAPIError(response.status_code, _detail(response),
                                        method=method, url=str(response.url))
                wait = self._wait(attempt, response.headers.get("Retry-After"))
                logger.info("%s %s: 503 (%s); retrying in %.1f s", method, path,
                            _detail(response), wait)
            self._sleep(wait)
            attempt += 1

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(self._max_backoff, max(0.0, float(retry_after)))
            except ValueError:
                pass
        base = self._backoff * (2 ** attempt)
        return min(self._max_backoff, base * (0.5 + random.random()))  # noqa: S311 - jitter


def _detail(response: httpx.Response) -> Any:
    try:
        return response.json().get("detail", response.text)
    except ValueError:
        return response.text


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
