"""Infrastructure settings (paths, limits, tokens), read from ``PRISM_*`` environment variables.

Hyperparameters are never settings: they are constructor arguments of the models.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

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
    """

    model_config = SettingsConfigDict(env_prefix="PRISM_", extra="ignore")

    db: str = "prism.duckdb"
    cache_dir: Path = Path.home() / ".cache" / "prism"
    api_token: str | None = None
    catalogue_url: str | None = None
    memory_limit: str | None = None
    models_dir: Path = Path("models")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings, read from the environment on first use."""
    return Settings()
