"""Where traces come from: the catalogue of public GPU traces, and synthetic ones.

``prism datasets list|download`` and ``prism generate [--kind deployments]``. None of these
needs a store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from prism.errors import ConfigError

if TYPE_CHECKING:
    from prism.datasets import DownloadResult
    from prism.generate import GeneratedTrace
    from prism.generate_deployments import GeneratedDeployments


def list_datasets() -> pd.DataFrame:
    """The public trace catalogue as a table (name, format, licence, size, checksum known)."""
    from prism import datasets

    rows = [
        {"name": d.name, "format": d.format, "licence": d.licence,
         "size": d.size, "sha256": "yes" if d.sha256 else "unknown", "title": d.title}
        for d in datasets.list_datasets()
    ]
    return pd.DataFrame(rows, columns=["name", "format", "licence", "size", "sha256", "title"])


def download_dataset(
    name: str,
    *,
    cache_dir: Path | None = None,
    base_url: str | None = None,
    verify: bool = True,
    progress: Callable[[int, int | None], None] | None = None,
) -> DownloadResult:
    """Fetch a catalogue trace into the cache and verify its checksum."""
    from prism import datasets

    return datasets.download(name, cache_dir=cache_dir, base_url=base_url, verify=verify,
                             progress=progress)


def generate_trace(
    output: str | Path,
    *,
    days: int = 28,
    clusters: int = 2,
    seed: int = 0,
    jobs_per_day: float | None = None,
    fmt: str = "csv",
    progress: Callable[[int, int], None] | None = None,
) -> GeneratedTrace:
    """Write a synthetic job trace and capacities to ``output`` (see :mod:`prism.generate`).

    Raises:
        ConfigError: for a file format other than ``csv`` or ``parquet``.
    """
    from prism import generate  # imported on use: the CLI starts faster

    if fmt not in ("csv", "parquet"):
        raise ConfigError(f"unknown trace file format {fmt!r}; use csv or parquet")
    return generate.generate_trace(
        Path(output), days=days, clusters=clusters, seed=seed, jobs_per_day=jobs_per_day,
        format="parquet" if fmt == "parquet" else "csv", progress=progress,
    )


def generate_deployments(output: str | Path, *, apps: int = 24, days: int = 35,
                         seed: int = 0) -> GeneratedDeployments:
    """Write the GPUs allocated to the apps of a synthetic inference fleet to
    ``output/deployments.csv``, a ``long-csv`` file (see :mod:`prism.generate_deployments`)."""
    from prism.generate_deployments import write_deployments

    return write_deployments(output, apps=apps, days=days, seed=seed)
