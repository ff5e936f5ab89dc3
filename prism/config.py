"""Infrastructure settings (paths, limits, tokens), read from ``PRISM_*`` environment variables.

Hyperparameters are never settings: they are constructor arguments of the models.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """PRISM's infrastructure settings.

    Attributes:
        db: the DuckDB file (``PRISM_DB``); ``:memory:`` for a throw-away store.
        cache_dir: where ``prism datasets download`` keeps fetched traces (``PRISM_CACHE_DIR``).
        api_token: bearer token the REST API requires on ``/v1`` when set (``PRISM_API_TOKEN``).
        catalogue_url: base URL that overrides the origin of every catalogue download
            (``PRISM_CATALOGUE_URL``); used for mirrors and by the tests.
        memory_limit: DuckDB's memory limit, e.g. ``2GB`` (``PRISM_MEMORY_LIMIT``; default:
            DuckDB's own, 80 % of RAM). Larger aggregations then spill to disk.
        models_dir: the model registry (``PRISM_MODELS_DIR``).
        max_body_bytes: the largest request body the REST API accepts, uploads included
            (``PRISM_MAX_BODY_BYTES``; larger ones get 413).
        default_model: the forecaster the API fits when a request names none
            (``PRISM_DEFAULT_MODEL``).
        fit_budget_s: how long a forecast request waits for an on-demand fit or update
            before it answers 503 with ``Retry-After`` (``PRISM_FIT_BUDGET_S``).
        fit_workers: fits and updates that run at once in the background, and as many
            again for fits past the fit budget (``PRISM_FIT_WORKERS``).
        prometheus_token: the bearer token of ``prism ingest --prometheus-url``
            (``PRISM_PROMETHEUS_TOKEN``).
        fit_timeout_s: the longest one series' on-demand fit may run; its process is
            killed past it and the request answers 422 (``PRISM_FIT_TIMEOUT_S``).
        fit_queue: the most fit/update jobs waiting at once; more get 503
            (``PRISM_FIT_QUEUE``).
        refit_every: refit served models older than this duration, e.g. ``1d``
            (``PRISM_REFIT_EVERY``; unset: never, models are only updated).
        forecast_cache_entries: forecasts kept in memory in front of the DuckDB forecast
            cache (``PRISM_FORECAST_CACHE_ENTRIES``).
        max_models: fitted models the API keeps in memory (``PRISM_MAX_MODELS``); past it the
            least recently used leaves memory and reloads from the registry when asked.
        drift_window: scored forecast points per series in the rolling forecast error
            (``PRISM_DRIFT_WINDOW``).
        allowed_hosts: Host headers the API answers (``PRISM_ALLOWED_HOSTS``, a JSON list;
            ``*`` any). ``prism serve`` on a loopback address narrows the default to the
            loopback names, so a DNS-rebinding page cannot read through the browser.
        cors_origins: origins allowed by CORS (``PRISM_CORS_ORIGINS``, a JSON list); empty
            (the default) turns CORS off.
    """

    model_config = SettingsConfigDict(env_prefix="PRISM_", extra="ignore")

    db: str = "prism.duckdb"
    cache_dir: Path = Path.home() / ".cache" / "prism"
    api_token: str | None = None
    catalogue_url: str | None = None
    memory_limit: str | None = None
    models_dir: Path = Path("models")
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    default_model: str = "prism"
    fit_budget_s: float = Field(default=2.0, ge=0)
    fit_workers: int = Field(default=1, ge=1, le=64)
    fit_timeout_s: float = Field(default=60.0, gt=0)
    prometheus_token: str | None = None
    fit_queue: int = Field(default=64, ge=1)
    refit_every: str | None = None
    forecast_cache_entries: int = Field(default=4096, ge=0)
    max_models: int = Field(default=512, ge=1)
    drift_window: int = Field(default=144, ge=1)
    cors_origins: list[str] = Field(default_factory=list)
    allowed_hosts: list[str] = Field(default_factory=lambda: ["*"])


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings, read from the environment on first use."""
    return Settings()
