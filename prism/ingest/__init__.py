"""Ingestion: one adapter module per source format, registered by name.

``prism.ingest.adapters()`` lists them; :func:`prism.ingest.pipeline.ingest` writes files to the
store in one transaction.
"""

from __future__ import annotations

import importlib

from prism.errors import ConfigError
from prism.ingest.base import Adapter, Batch, IngestOptions, Reject, registry

#: Modules that define adapters (each registers itself on import).
_MODULES = (
    "jobs_csv",
    "long_csv",
    "wide_csv",
    "capacity_csv",
    "node_list",
    "helios_vc",
    "philly_nodes",
    "helios_jobs",
    "alibaba_pods",
    "alibaba_pai",
    "slurm_sacct",
    "prometheus",
)

_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        for name in _MODULES:
            importlib.import_module(f"prism.ingest.{name}")
        _loaded = True


def adapters() -> dict[str, Adapter]:
    """All ingestion formats by name."""
    _load()
    return registry()


def get_adapter(name: str) -> Adapter:
    """The adapter of format ``name``.

    Raises:
        ConfigError: for an unknown format, listing the known ones.
    """
    known = adapters()
    if name not in known:
        raise ConfigError(
            f"unknown format {name!r}; pass --format with one of: {', '.join(sorted(known))}"
        )
    return known[name]


__all__ = ["Adapter", "Batch", "IngestOptions", "Reject", "adapters", "get_adapter"]
