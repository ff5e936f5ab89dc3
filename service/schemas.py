"""Request and response schemas of the REST API (pydantic).

Requests are validated here, so that a bad value is a 422 naming its field
(``["query", "horizon"]``); what only the data can tell (a horizon that is not a whole number
of the series' steps) is checked by the core and is a 422 with a message.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
)

#: A positive duration (``6h``, ``1d``, ``90min``) or a whole number of steps (``144``).
DURATION_PATTERN = r"^\s*(\d+|\d+(\.\d+)?\s*[A-Za-z]+)\s*$"
#: ``cluster/scope/metric`` with the characters series ids may hold.
SERIES_ID_PATTERN = r"^[A-Za-z0-9_.:=+@-]+/[A-Za-z0-9_.:=+@-]+/[A-Za-z0-9_.:=+@-]+$"
_NAME = r"^[A-Za-z0-9_.:=+@-]+$"

SeriesId = Annotated[str, Field(min_length=5, max_length=512, pattern=SERIES_ID_PATTERN,
                                examples=["cluster-0/all/gpu_demand"])]


def _duration(value: str) -> str:
    if not re.match(DURATION_PATTERN, value) or not any(c != "0" for c in value if c.isdigit()):
        raise ValueError(f"{value!r} is not a positive duration: write a number and a unit, "
                         "e.g. 30min, 6h, 1d, or a whole number of steps such as 144")
    return value


Horizon = Annotated[str, Field(max_length=32, description="a duration (6h, 1d) or a number "
                               "of steps", examples=["1d"],
                               json_schema_extra={"pattern": DURATION_PATTERN}),
                    AfterValidator(_duration)]
ModelAlias = Annotated[str, Field(max_length=64, pattern=r"^[a-z][a-z0-9_]*$",
                                  description="a forecaster alias (default: the server's)",
                                  examples=["seasonal_naive"])]
Quantile = Annotated[float, Field(gt=0, lt=1)]
Param = Annotated[str, Field(max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*=.*$",
                             description="a hyperparameter as NAME=VALUE",
                             examples=["use_rnn=false"])]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=_NAME)]


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


#: A time in UTC, written with ``Z`` (RFC 3339): stored times are UTC without a zone.
UtcTime = Annotated[datetime, AfterValidator(_as_utc)]


def _quantile_levels(value: object) -> list[float]:
    """Quantile levels from a query: ``"0.5,0.9"``, repeated (``["0.5", "0.9"]``) or both
    (``["0.5,0.9", "0.99"]``); each strictly between 0 and 1, at most 99."""
    items = [str(v) for v in (value if isinstance(value, list | tuple) else [value])]
    if any(len(item) > 1024 for item in items):
        raise ValueError("a quantiles value is over 1,024 characters; give at most 99 levels")
    texts = [t.strip() for item in items for t in item.split(",") if t.strip()]
    if not texts:
        raise ValueError("give at least one quantile, e.g. quantiles=0.5,0.9,0.99")
    if len(texts) > 99:
        raise ValueError(f"at most 99 quantiles; got {len(texts)}")
    try:
        values = [float(t) for t in texts]
    except ValueError:
        text = next(t for t in texts if not _is_number(t))
        raise ValueError(f"{text!r} is not a number: give levels such as 0.5,0.9,0.99, "
                         "comma-separated or repeated (quantiles=0.5&quantiles=0.9)") from None
    bad = [q for q in values if not 0 < q < 1]
    if bad:
        raise ValueError(f"quantiles must be between 0 and 1 (exclusive); got {bad}")
    return values


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


#: Quantile levels of a query, comma-separated, repeated or both; documented as what the
#: query string holds (strings), validated into numbers.
QuantileLevels = Annotated[list[float], BeforeValidator(_quantile_levels), WithJsonSchema({
    "type": "array", "maxItems": 99, "default": ["0.5,0.9,0.99"],
    "items": {"type": "string", "maxLength": 1024, "examples": ["0.5,0.9,0.99"]},
    "description": "levels in (0, 1), comma-separated (quantiles=0.5,0.9), repeated "
                   "(quantiles=0.5&quantiles=0.9) or both; at most 99"})]


def _params(items: list[str]) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (i.partition("=") for i in items)}


# -- errors and health --------------------------------------------------------------------------
class ErrorOut(BaseModel):
    """An error: ``detail`` says what is wrong and how to fix it."""

    detail: str | list[dict[str, Any]]


class HealthOut(BaseModel):
    """Liveness."""

    status: Literal["ok"] = "ok"


class ReadyOut(BaseModel):
    """Readiness, with what the server holds."""

    status: Literal["ready"] = "ready"
    series: int
    models_loaded: int
    models_in_registry: int
    jobs: int
    cached_forecasts: int


# -- query strings ------------------------------------------------------------------------------
class QueryModel(BaseModel):
    """The query string of a route: a parameter the route does not take is a 422
    (``extra_forbidden``, its name in ``loc``; :func:`service.errors.handle_validation_error`
    names the route's close ones), not silently ignored: ``quantiles=0.9`` on
    ``/v1/capacity``, whose parameter is ``quantile``, once gave a p95 plan."""

    model_config = ConfigDict(extra="forbid")


# -- series -------------------------------------------------------------------------------------
class SeriesQuery(QueryModel):
    """Filters of the series catalogue."""

    cluster: Name | None = None
    scope: Name | None = None
    metric: Name | None = None


class SeriesOut(BaseModel):
    """One series of the catalogue."""

    series_id: str
    source: str | None = None
    cluster: str
    scope: str
    metric: str
    freq: str | None = None
    first_ts: UtcTime | None = None
    last_ts: UtcTime | None = None
    n_points: int | None = None
    n_filled: int | None = None
    unit: str | None = None
    aggregation: str | None = None
    fill: str | None = None


class SeriesListOut(BaseModel):
    """The series catalogue."""

    count: int
    series: list[SeriesOut]


class ValuesQuery(QueryModel):
    """Which values of a series."""

    series_id: SeriesId
    start: str | None = Field(default=None, max_length=64, examples=["2026-01-05T00:00"],
                              description="first time (inclusive), ISO 8601")
    end: str | None = Field(default=None, max_length=64, description="end (exclusive)")
    tail: int | None = Field(default=None, ge=1, le=1_000_000,
                             description="only the last N values")


class ExportQuery(QueryModel):
    """Which series to export, and how."""

    series_id: list[SeriesId] = Field(default_factory=list, max_length=10_000,
                                      description="series ids (repeatable; none: every series)")
    format: Literal["csv", "parquet"] = "parquet"


class PointOut(BaseModel):
    """One value of a series (``filled``: the bucket was a gap filled by the fill policy)."""

    ts: UtcTime
    value: float | None
    filled: bool


class ValuesOut(BaseModel):
    """Values of one series."""

    series_id: str
    points: list[PointOut]


# -- forecasts ----------------------------------------------------------------------------------
class ForecastQuery(QueryModel):
    """``GET /v1/forecast``: one series."""

    series_id: SeriesId
    horizon: Horizon = "1d"
    quantiles: QuantileLevels = Field(default_factory=lambda: [0.5, 0.9, 0.99])
    model: ModelAlias | None = None
    param: list[Param] = Field(default_factory=list)
    save: bool = Field(default=False, description="save a model fitted with ad-hoc params to "
                       "the registry (models of the default params are always saved)")

    @property
    def levels(self) -> list[float]:
        """The quantile levels, in the order given."""
        return self.quantiles

    @property
    def params(self) -> dict[str, str]:
        """The hyperparameters as ``{name: text}``."""
        return _params(self.param)


class _WithParams(BaseModel):
    """A request that names hyperparameters of its model."""

    model_config = ConfigDict(extra="forbid")

    params: dict[Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                 str | int | float | bool] = Field(default_factory=dict, max_length=64)

    @property
    def text_params(self) -> dict[str, str]:
        """The hyperparameters as text, as the CLI takes them."""
        return {k: (str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in self.params.items()}


class RefitRequest(_WithParams):
    """``POST /v1/models/refit``: refit the server's models of some series (or all)."""

    series_ids: list[SeriesId] | None = Field(default=None, max_length=100_000,
                                              description="none: every series")
    model: ModelAlias | None = None


class RefitOut(BaseModel):
    """How many background jobs the refit queued."""

    refits: int = Field(description="models refitted (each serves one or more series)")
    fits: int = Field(description="series that had no model of that alias: fitted anew")


class ForecastRequest(_WithParams):
    """``POST /v1/forecast``: several series with one model, horizon and quantiles."""

    series_ids: list[SeriesId] = Field(min_length=1, max_length=1000)
    horizon: Horizon = "1d"
    quantiles: list[Quantile] = Field(default_factory=lambda: [0.5, 0.9, 0.99],
                                      min_length=1, max_length=99)
    model: ModelAlias | None = None
    save: bool = Field(default=False, description="save a model fitted with ad-hoc params to "
                       "the registry (models of the default params are always saved)")



class ForecastOut(BaseModel):
    """One series' forecast, by column: ``ts[i]``, ``mean[i]`` and ``bands["p90"][i]`` are
    step ``i + 1``."""

    series_id: str
    model: str = Field(description="alias, with the hyperparameters that differ from its "
                       "defaults: prism[use_rnn=false]")
    model_id: str = Field(description="the model's id in the registry")
    model_version: str = Field(description="<model id>.v<version>; grows with each update")
    watermark: str = Field(description="the data the model had absorbed: last ts#checksum")
    freq_s: int
    horizon_steps: int
    quantiles: list[float]
    ts: list[AwareDatetime]  # the core sends them with their zone: no Python check per item
    mean: list[float]
    bands: dict[str, list[float]] = Field(description="p50-style name -> forecasts")
    fallback: str | None = Field(default=None, description="why the seasonal naive "
                                 "fallback serves the series, if it does")
    note: str | None = Field(default=None, description="what to know about the forecast, "
                             "e.g. a horizon longer than the series' stored history")
    cached: bool


class ForecastsOut(BaseModel):
    """Forecasts of several series."""

    forecasts: list[ForecastOut]


# -- decomposition ------------------------------------------------------------------------------
class DecompositionQuery(QueryModel):
    """``GET /v1/decomposition``."""

    series_id: SeriesId
    top: int = Field(default=5, ge=1, le=100, description="primitives to list")


class PeriodOut(BaseModel):
    """A significant period."""

    seconds: float
    steps: float
    strength: float


class PrimitiveOut(BaseModel):
    """An atom of the dictionary and the share of the detrended variance it explains."""

    id: str
    kind: str
    label: str
    share: float


class BurstOut(BaseModel):
    """A burst: start, end (exclusive), peak and height."""

    start: UtcTime
    end: UtcTime
    peak: UtcTime
    height: float


class LevelShiftOut(BaseModel):
    """An abrupt level shift."""

    at: UtcTime
    delta: float


class DecompositionOut(BaseModel):
    """Periods, top primitives, bursts, level shifts and variance shares of a series."""

    series_id: str
    freq_s: int
    periods: list[PeriodOut]
    primitives: list[PrimitiveOut]
    bursts: list[BurstOut]
    level_shifts: list[LevelShiftOut]
    variance_share: dict[str, float]
    note: str = Field(default="", description="why a part is missing, e.g. no primitives "
                      "where no series of the cluster has a day that moves")


# -- capacity -----------------------------------------------------------------------------------
Reservation = Annotated[str, Field(max_length=256, pattern=r"^[^,]+,[^,]+,[^,]+,[^,]+$",
                                   description="a known future job: SCOPE,START,END,GPUS",
                                   examples=["vc-27a,2026-01-12T08:00,2026-01-12T20:00,8"])]


class CapacityQuery(QueryModel):
    """``GET /v1/capacity``: the plan of a cluster (what ``prism capacity`` prints)."""

    cluster: Name
    scope: Name | None = None
    horizon: Horizon = "1d"
    quantile: Quantile = 0.95
    model: ModelAlias | None = None
    param: list[Param] = Field(default_factory=list)
    growth: float = Field(default=1.0, gt=0, le=100, description="demand growth factor")
    reservation: list[Reservation] = Field(default_factory=list, max_length=1000,
                                           description="known future jobs added on top")
    watts_idle: float = Field(default=60.0, ge=0, le=10_000,
                              description="watts an idle GPU draws")
    watts_busy: float = Field(default=300.0, ge=0, le=10_000,
                              description="watts a busy GPU draws")
    steps: bool = Field(default=False, description="add the GPUs needed at each step (and "
                        "each projected day)")
    procurement: Horizon | None = Field(
        default=None, description="also the plan for buying: each scope's daily peak projected "
        "over this horizon (30d, 12w) from its trend, and when capacity runs out")
    trend_weeks: int = Field(default=4, ge=1, le=520, description="weeks of daily peaks the "
                             "procurement trend is fitted on")
    max_unmet: float | None = Field(
        default=None, description="choose each scope's quantile from the planning backtest: "
        "the cheapest leaving at most this share of demand unmet, as a fraction (0.003) or a "
        "percentage (0.3%); quantile is then the fallback of a scope without a backtest",
        json_schema_extra={"examples": [0.003]})
    record: bool = Field(default=True, description="keep the served plan (and pool) in the "
                         "store for the report's track record (false: a what-if)")
    day_floor: bool = Field(default=True, description="size each scope at least for what the "
                            "last 24 h used and, if its weekends differ from its weekdays, the "
                            "latest day of its kind (false: the forecast's quantile alone)")
    pool: bool = Field(default=False, description="also the shared-pool alternative: a "
                       "quota per VC and one pool they all borrow from, the shares chosen on "
                       "the VCs' last 7 days (at most max_unmet unmet there, 0.3 % by "
                       "default); the whole cluster only (no scope)")

    @field_validator("max_unmet", mode="before")
    @classmethod
    def _share(cls, value: object) -> float | None:
        from prism.errors import ConfigError
        from prism.usecases.capacity import parse_max_unmet

        if value is None or value == "":
            return None
        try:
            return parse_max_unmet(str(value), name="max_unmet")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @property
    def params(self) -> dict[str, str]:
        """The hyperparameters as ``{name: text}``."""
        return _params(self.param)


class CapacityStepOut(BaseModel):
    """The GPUs one scope needs at the planning quantile in one step."""

    ts: UtcTime
    needed: float
    mean: float
    reserved: float
    p_exceed: float | None = Field(description="probability that demand exceeds capacity")


class CapacityRowOut(BaseModel):
    """GPUs one scope needs over the window, against its capacity, the advice and why."""

    cluster: str
    scope: str
    series_id: str = Field(description="the series the scope is sized on (GPUs in use)")
    model: str
    start: UtcTime
    end: UtcTime
    quantile: float
    gpus_needed: float = Field(description="in_use_needed + queue_allowance")
    in_use_needed: float = Field(description="peak over the window of the GPUs in use at the "
                                 "quantile")
    queue_allowance: float = Field(description="the mean queued GPUs forecast over the window, "
                                   "at most the queue's recent peak")
    mean_peak: float = Field(description="peak of the mean forecast of GPUs in use")
    demand_gpu_hours: float = Field(description="expected GPU-hours of demand")
    reserved_gpu_hours: float = Field(description="GPU-hours the reservations add")
    growth: float
    capacity: float | None
    capacity_source: str | None = Field(description="file, store (capacity-csv or node-list), "
                                        "samples or cluster (the cluster's, of one GPU type)")
    headroom: float | None = Field(description="capacity - gpus_needed (negative: short)")
    shortfall_gpu_hours: float | None = Field(description="expected GPU-hours above capacity")
    queue_risk: float | None = Field(description="largest per-step probability that demand "
                                     "exceeds capacity")
    queue_hours: float | None = Field(description="expected hours with demand above capacity")
    idle_gpu_hours: float | None = Field(description="expected GPU-hours of idle capacity")
    idle_energy_kwh: float | None
    busy_energy_kwh: float | None
    action: Literal["add", "release", "keep", "unknown", "borrow", "lend", "borrow+add",
                    "lend+release", "stale"] = Field(
        description="add and release are the cluster's net; a VC's are its part of it; "
                    "stale: the scope's series stopped before its plan's window (no advice)")
    add_gpus: int
    lend_gpus: int
    release_gpus: int
    borrow_gpus: int
    net_gpus: int = Field(description="the change of the scope's GPUs; the VCs' add up to the "
                          "cluster's")
    recommendation: str
    reason: str = Field(description="the peak forecast, quantile, queue allowance and headroom "
                        "behind the advice")
    steps: list[CapacityStepOut] | None = None


class MoveOut(BaseModel):
    """GPUs one VC lends another for the window, before anything is added."""

    from_scope: str
    to_scope: str
    gpus: int
    hours: float
    text: str


class PoolVcOut(BaseModel):
    """One VC's part of the shared pool."""

    scope: str
    needed: float = Field(description="GPUs its plan needs over the window")
    quota: int = Field(description="GPUs it keeps as its own; the rest it borrows")


class PoolOut(BaseModel):
    """The shared-pool alternative to sizing each VC apart (``pool=true``)."""

    cluster: str
    quota_share: float = Field(description="each VC's own share of what it needs")
    pool_share: float = Field(description="the pool, a share of the VCs' needs added up")
    pool_gpus: int
    per_vc_gpus: int = Field(description="the VCs' needs added up, each rounded up")
    pooled_gpus: int = Field(description="the quotas plus the pool")
    capacity: float | None = Field(description="the VCs' capacities added up (none: one "
                                   "is unknown)")
    net_gpus: int | None = Field(description="pooled_gpus - capacity: GPUs to add (above 0) "
                                 "or spare (below 0); none where capacity is unknown")
    days: int = Field(description="days replayed to choose the shares on")
    max_unmet: float
    saved_share: float = Field(description="static-peak idle GPU-hours the pooled plan "
                               "saved over those days")
    unmet_share: float
    per_vc_saved_share: float = Field(description="the same, each VC sized apart at its "
                                      "day-kind peak")
    per_vc_unmet_share: float
    vcs: list[PoolVcOut]
    text: str


class CapacityOut(BaseModel):
    """The capacity table of a cluster and the moves between its VCs."""

    cluster: str
    horizon: str
    quantile: float
    watts_idle: float
    watts_busy: float
    rows: list[CapacityRowOut]
    moves: list[MoveOut] = Field(default_factory=list)
    max_unmet: float | None = Field(default=None, description="the target unmet share the "
                                    "quantiles were chosen for (none: one quantile)")
    quantile_choice: list[QuantileChoiceOut] = Field(default_factory=list)
    procurement: ProcurementOut | None = Field(default=None, description="the plan for "
                                               "buying, when asked (procurement=30d)")
    pool: PoolOut | None = Field(default=None, description="the shared-pool alternative, "
                                 "when asked (pool=true)")


class QuantileChoiceOut(BaseModel):
    """The planning quantile chosen for one scope (``max_unmet``)."""

    scope: str
    series_id: str
    quantile: float
    unmet_share: float | None = Field(description="the quantile's unmet share of demand in "
                                      "the planning backtest")
    saved_share: float | None = Field(description="share of the static peak's idle GPU-hours "
                                      "it saved there")
    windows: int = Field(description="days replayed")
    meets_target: bool | None = Field(description="false: no quantile meets the target, the "
                                      "highest is used; none: no backtest, the fallback")
    basis: str = Field(description="a saved planning run, 'replayed now' or 'none'")
    text: str


class ProcurementDayOut(BaseModel):
    """One projected day of a scope."""

    day: UtcTime
    projected: float
    low: float
    high: float


class ProcurementRowOut(BaseModel):
    """One scope's projected daily level over the horizon, against its capacity."""

    cluster: str
    scope: str
    series_id: str
    start: UtcTime
    end: UtcTime
    days_fitted: int
    first_day: UtcTime | None
    last_day: UtcTime | None
    last_level: float | None
    recent_peak: float | None
    slope_per_day: float | None = Field(description="Theil-Sen trend of the daily levels")
    slope_low: float | None = Field(description="90 % interval of the slope")
    slope_high: float | None
    trend_now: float | None
    margin: float | None
    quantile: float
    growth: float
    projected_peak: float | None
    projected_low: float | None
    projected_high: float | None
    capacity: float | None
    capacity_source: str | None
    exceeds_on: UtcTime | None = Field(description="first day the projection exceeds capacity")
    needed_gpus: int
    action: Literal["buy", "needs", "keep", "unknown", "no trend"]
    text: str
    reason: str
    days: list[ProcurementDayOut] | None = None


class ProcurementOut(BaseModel):
    """A cluster's procurement plan (``prism capacity --procurement``)."""

    cluster: str
    horizon_days: int
    weeks: int
    rows: list[ProcurementRowOut]


class TrackRecordQuery(QueryModel):
    """``GET /v1/capacity/track-record``."""

    cluster: Name
    plans: bool = Field(default=False, description="also each scored plan row")


class TrackRecordRowOut(BaseModel):
    """One model's served plans over one scope (or ``total``: over the cluster's partition),
    against what was in use and against yesterday's peak on the same windows."""

    model: str
    scope: str
    plans: int
    quantile: float | None = Field(description="the plans' mean quantile (none for a shared "
                                   "pool: its shares are chosen for a share of demand unmet)")
    in_use_gpu_hours: float
    unmet_gpu_hours: float
    unmet_share: float | None = Field(description="unmet GPU-hours over GPU-hours in use")
    idle_gpu_hours: float
    coverage: float = Field(description="share of windows whose peak stayed within the plan")
    rule_unmet_gpu_hours: float
    rule_unmet_share: float | None
    rule_idle_gpu_hours: float
    rule_coverage: float
    beats: bool = Field(description="the plans beat yesterday's peak: no more demand unmet "
                        "(within 0.01 % of the GPU-hours in use) and fewer idle GPU-hours")
    pooled: bool = Field(default=False, description="a shared pool's plans (`pool=true`): "
                         "each window's VC quotas and pool scored together, total only")


class ScoredPlanOut(BaseModel):
    """One served plan row scored against its window."""

    cluster: str
    scope: str
    series_id: str | None = Field(description="the scope's GPUs-in-use series (none for a "
                                  "shared pool's row)")
    model: str
    quantile: float | None = Field(description="the plan's quantile (none for a shared pool)")
    valid_from: UtcTime
    valid_to: UtcTime
    gpus_planned: float
    yesterday_peak: float
    in_use_gpu_hours: float
    peak_in_use: float
    unmet_gpu_hours: float
    idle_gpu_hours: float
    covered: bool
    rule_unmet_gpu_hours: float
    rule_idle_gpu_hours: float
    rule_covered: bool


class TrackRecordOut(BaseModel):
    """The track record of a cluster's served capacity plans (``prism track-record``)."""

    cluster: str
    note: str = Field(description="what the record covers, or why it is empty")
    scopes: list[str] = Field(description="the partition the totals add up (VCs, else all; "
                              "all where the VCs share GPUs)")
    plans_recorded: int
    plans_scored: int = Field(description="plan rows whose window has ended and is stored")
    next_end: UtcTime | None = Field(description="the end of the first plan not scored yet")
    summary: list[TrackRecordRowOut]
    warnings: list[str] = Field(description="where the plans lost to yesterday's peak, or "
                                "covered fewer windows than their quantile promises")
    plans: list[ScoredPlanOut] | None = None


class ReportQuery(QueryModel):
    """``GET /v1/reports/capacity``."""

    cluster: Name | None = None
    horizon: Horizon = "1d"
    quantile: Quantile = 0.95
    model: ModelAlias | None = None
    record: bool = Field(default=True, description="keep the served plan (and pool) in the "
                         "store for the report's track record (false: a what-if)")
    day_floor: bool = Field(default=True, description="as `GET /v1/capacity`'s")
    pool: bool = Field(default=False, description="also each cluster's shared-pool "
                       "alternative, as `GET /v1/capacity`'s")


# -- ingest -------------------------------------------------------------------------------------
class IngestQuery(QueryModel):
    """``POST /v1/ingest``: the options of ``prism ingest``."""

    format: str = Field(max_length=64, pattern=r"^[a-z][a-z0-9-]*$", examples=["jobs-csv"],
                        description="an ingest format (`prism formats`)")
    cluster: Name | None = None
    scope: Name | None = None
    tz: str | None = Field(default=None, max_length=64)
    origin: str | None = Field(default=None, max_length=64)
    time_col: str | None = Field(default=None, max_length=128)
    freq: Horizon | None = Field(default=None, description="bucket size of the derived "
                                 "series, e.g. 10min")
    fill: Literal["auto", "hold", "zero", "linear"] | None = None
    on_error: Literal["fail", "skip"] = "fail"
    map: list[Param] = Field(default_factory=list, description="FIELD=COLUMN")
    option: list[Param] = Field(default_factory=list, description="KEY=VALUE")
    filename: str | None = Field(default=None, max_length=255,
                                 description="name of a raw (non-multipart) upload; some "
                                 "formats read the VC from it")


class IngestRecords(BaseModel):
    """JSON rows to ingest, with the columns of the format (e.g. ``series_id, ts, value``
    for ``long-csv``); the ingest's options are query parameters, so any other field is
    refused (``{"records": [...], "on_error": "skip"}`` would otherwise fail on the row it
    meant to skip)."""

    model_config = ConfigDict(extra="forbid")

    records: list[dict[str, str | int | float | bool | None]] = Field(min_length=1)

    @field_validator("records")
    @classmethod
    def _same_keys(cls, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        bad = [k for row in rows for k in row if not re.match(r"^[A-Za-z0-9_ .:-]{1,128}$", k)]
        if bad:
            raise ValueError(f"column name {bad[0]!r} is not usable; use letters, digits, "
                             "'_', '-', '.', ':' or spaces")
        return rows


class IngestFileOut(BaseModel):
    """What happened to one uploaded file."""

    name: str
    status: Literal["ingested", "unchanged"]
    rows: int
    rejected: int
    note: str = Field("", description="what the rows stand for where it is not one per input "
                      "row (node-list: the capacity summed per GPU type from the nodes)")


class IngestOut(BaseModel):
    """What an ingest did."""

    status: Literal["ingested", "unchanged"]
    rows: int
    rejected: int
    files: list[IngestFileOut]
    clusters: list[str]
    series: int
    changed_series: int = Field(description="series whose data changed (cache dropped)")
    scored_points: int = Field(description="served forecast points scored against the "
                               "new data (rolling error in /metrics)")
    notes: list[str] = Field(default_factory=list, description="what to know about the result, "
                             "e.g. a capacity for a cluster without series (a misspelt "
                             "cluster?)")
