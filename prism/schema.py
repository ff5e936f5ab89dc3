"""Column names, metric vocabulary, durations and the panel contract.

Every module uses these constants; columns are renamed once, at ingestion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from prism.errors import ConfigError, DataContractError

SERIES_ID = "series_id"
TS = "ts"
VALUE = "value"
PANEL_COLUMNS = (SERIES_ID, TS, VALUE)

#: Nixtla's names (statsforecast, utilsforecast, neuralforecast) for the same three columns.
#: The forecasters' public methods accept them and rename once (:mod:`prism.frames`); the core
#: speaks ``series_id, ts, value`` only.
UNIQUE_ID = "unique_id"
DS = "ds"
Y = "y"
NIXTLA_COLUMNS = (UNIQUE_ID, DS, Y)

#: The canonical ``jobs`` table, in order. ``num_gpus`` may be fractional (shared GPUs).
JOB_COLUMNS = (
    "source",
    "cluster",
    "scope",
    "job_id",
    "gpu_type",
    "num_gpus",
    "num_cpus",
    "submit_ts",
    "start_ts",
    "end_ts",
    "status",
)
JOB_TIME_COLUMNS = ("submit_ts", "start_ts", "end_ts")

#: Times outside [EARLIEST_TS, LATEST_TS) are rejected at ingestion: they are typos (a year 9999
#: would otherwise stretch a series over millions of buckets).
EARLIEST_TS = pd.Timestamp("1970-01-01")
LATEST_TS = pd.Timestamp("2100-01-01")
#: The most buckets one series may have; more means the frequency is too fine for the span.
MAX_BUCKETS = 2_000_000

#: How a column of a :class:`FileScan` is read: parsed as text, a number or a time (with or
#: without a zone; naive times are UTC), or taken as it is from a Parquet timestamp column
#: without a zone (``utc_time``).
ScanType = Literal["text", "number", "time", "utc_time"]


@dataclass(frozen=True)
class FileScan:
    """A file that the store reads itself (DuckDB's CSV or Parquet reader) into a canonical
    table, with no Python between the bytes and the rows: the fast path of clean files.

    The file's columns are addressed by position, never by name, so nothing from the file goes
    into SQL text. Text is stored with empty strings as NULL; numbers as DOUBLE; times as UTC
    (a zone suffix such as ``Z`` or ``+02:00`` is honoured, naive times are UTC).

    Attributes:
        path: the file (``.csv``, ``.csv.gz`` or ``.parquet``).
        file_format: ``csv`` (header row, comma, double quotes) or ``parquet``.
        column_types: how each of the file's columns is read, in file order.
        fields: canonical column -> index of the file column that fills it.
        constants: canonical column -> a value for every row.
        rows_hint: the rows expected (for progress; 0 when unknown).
    """

    path: Path
    file_format: Literal["csv", "parquet"]
    column_types: tuple[ScanType, ...]
    fields: dict[str, int] = field(default_factory=dict)
    constants: dict[str, str] = field(default_factory=dict)
    rows_hint: int = 0


#: The cluster-wide scope.
ALL_SCOPE = "all"
#: Prefix of GPU-type scopes in series ids: ``earth/gpu:V100/gpus_in_use``.
GPU_TYPE_PREFIX = "gpu:"
#: Characters a scope name in a series id may not have: the derivation replaces them by ``_``
#: (a regular expression, for DuckDB's ``regexp_replace``).
SCOPE_BAD_CHARS = "[^A-Za-z0-9_.:=+@-]"
#: Scope given to jobs without one when other jobs of the same cluster have one.
UNASSIGNED_SCOPE = "unassigned"


@dataclass(frozen=True)
class MetricInfo:
    """How a metric is measured and aggregated into a coarser bucket."""

    unit: str
    aggregation: str  # "mean" for gauges, "sum" for counts
    default_fill: str  # the gap policy used when the user names none


METRICS: dict[str, MetricInfo] = {
    "gpus_in_use": MetricInfo("gpus", "mean", "hold"),
    "gpus_pending": MetricInfo("gpus", "mean", "hold"),
    "gpu_demand": MetricInfo("gpus", "mean", "hold"),
    "gpu_capacity": MetricInfo("gpus", "mean", "hold"),
    "jobs_submitted": MetricInfo("jobs", "sum", "zero"),
    "gpus_submitted": MetricInfo("gpus", "sum", "zero"),
    "nodes_in_use": MetricInfo("nodes", "mean", "hold"),
    "nodes_total": MetricInfo("nodes", "mean", "hold"),
    "gpu_util": MetricInfo("ratio", "mean", "hold"),
}

#: Gap policies for sampled series: how a bucket with no sample gets its value.
FILL_POLICIES = ("auto", "hold", "zero", "linear")

_SEGMENT = re.compile(r"^[A-Za-z0-9_.:=+@-]+$")


def metric_info(metric: str) -> MetricInfo:
    """Return how ``metric`` aggregates; unknown metrics are gauges (mean, hold)."""
    if metric in METRICS:
        return METRICS[metric]
    if metric.endswith(("_submitted", "_total_count", "_count")):
        return MetricInfo("count", "sum", "zero")
    return MetricInfo("", "mean", "hold")


def make_series_id(cluster: str, scope: str, metric: str) -> str:
    """Build ``{cluster}/{scope}/{metric}``; each part must be a non-empty name without ``/``.

    Raises:
        DataContractError: when a part is empty or has characters outside ``[A-Za-z0-9_.:=+@-]``.
    """
    for name, part in (("cluster", cluster), ("scope", scope), ("metric", metric)):
        if not part or not _SEGMENT.match(part):
            raise DataContractError(
                f"{name} {part!r} cannot be part of a series id: use letters, digits and "
                "'_.:=+@-' only (no '/' or spaces)"
            )
    return f"{cluster}/{scope}/{metric}"


def split_series_id(series_id: str) -> tuple[str, str, str]:
    """Split a series id into ``(cluster, scope, metric)``.

    Raises:
        DataContractError: when the id does not have exactly three ``/``-separated parts.
    """
    parts = series_id.split("/")
    if len(parts) != 3 or not all(parts):
        raise DataContractError(
            f"series id {series_id!r} is not of the form 'cluster/scope/metric', "
            "e.g. 'earth/vc6YE/gpus_in_use'"
        )
    return parts[0], parts[1], parts[2]


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")
_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "t": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}


#: The longest duration PRISM accepts (pandas' Timedelta ends near 292 years).
MAX_DURATION_S = 100 * 365 * 86400


def parse_duration(text: str) -> pd.Timedelta:
    """Parse a duration such as ``10min``, ``6h``, ``1d`` or ``1w``.

    Raises:
        ConfigError: when the text is not a positive duration with a known unit.
    """
    match = _DURATION.match(str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ConfigError(
            f"{text!r} is not a duration: write a number and a unit, e.g. 10min, 6h, 1d, 1w "
            f"(units: {', '.join(sorted(set(_UNITS)))})"
        )
    seconds = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if seconds <= 0:
        raise ConfigError(f"duration {text!r} must be positive")
    if not seconds <= MAX_DURATION_S:  # also NaN and inf
        raise ConfigError(f"duration {text!r} is longer than the {MAX_DURATION_S // 86400:,} "
                          "days PRISM accepts; write a shorter one, e.g. 1d or 4w")
    return pd.Timedelta(seconds=seconds)


def freq_seconds(freq: str) -> int:
    """Return a bucket frequency in whole seconds.

    Raises:
        ConfigError: when ``freq`` is not a whole number of seconds.
    """
    delta = parse_duration(freq)
    seconds = delta.total_seconds()
    if seconds != int(seconds):
        raise ConfigError(f"frequency {freq!r} must be a whole number of seconds")
    return int(seconds)


def panel_freq(panel: pd.DataFrame, *, purpose: str = "be used together") -> int:
    """The one step (seconds) between consecutive points of every series of a sorted panel.

    The one place a panel's frequency is read: forecasters, backtests, planning, the batch
    engine and the decomposer all call it.

    Raises:
        DataContractError: when no series has two points, or series differ in step (the
            message says how to fix it: derive them at one ``--freq``).
    """
    diffs = panel.groupby(SERIES_ID, sort=False)[TS].diff().dropna().dt.total_seconds().unique()
    if len(diffs) == 0:
        raise DataContractError(
            f"every series has a single point; to {purpose} a series needs at least two")
    if len(diffs) != 1:
        raise DataContractError(
            f"every series of a panel needs the same step to {purpose}; got "
            f"{sorted(int(d) for d in diffs)} s: derive them at one --freq")
    return int(diffs[0])


def format_freq(seconds: int) -> str:
    """Render a frequency in seconds the way users write it (``10min``, ``1h``, ``1d``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def validate_panel(panel: pd.DataFrame, *, regular: bool = True) -> pd.DataFrame:
    """Check a frame against the panel contract and return it sorted.

    Args:
        panel: frame with ``series_id, ts, value``.
        regular: also require each series to be on one regular grid without gaps.

    Returns:
        The panel sorted by ``series_id, ts`` with a fresh index.

    Raises:
        DataContractError: naming the column or series at fault and how to fix it.
    """
    missing = [c for c in PANEL_COLUMNS if c not in panel.columns]
    if missing:
        nixtla = all(c in panel.columns for c in NIXTLA_COLUMNS)
        hint = ("; this is a Nixtla frame (unique_id, ds, y): a forecaster's fit takes it as it "
                "is, elsewhere convert it with prism.frames.to_panel") if nixtla else ""
        raise DataContractError(
            f"panel is missing column(s) {missing}; a panel has columns {list(PANEL_COLUMNS)}"
            f"{hint}"
        )
    if not pd.api.types.is_datetime64_any_dtype(panel[TS]):
        raise DataContractError("panel column 'ts' must be datetime64 (UTC, naive)")
    if getattr(panel[TS].dt, "tz", None) is not None:
        raise DataContractError("panel column 'ts' must be UTC-naive: use .dt.tz_convert(None)")
    if not pd.api.types.is_numeric_dtype(panel[VALUE]):
        raise DataContractError("panel column 'value' must be numeric (float64)")
    out = panel.sort_values([SERIES_ID, TS], kind="stable").reset_index(drop=True)
    dup = out.duplicated([SERIES_ID, TS])
    if dup.any():
        row = out[dup].iloc[0]
        raise DataContractError(
            f"panel has more than one row for ({row[SERIES_ID]!r}, {row[TS]}); "
            "aggregate duplicates before building a panel"
        )
    if regular:
        for series_id, group in out.groupby(SERIES_ID, sort=False):
            steps = np.diff(group[TS].to_numpy().astype("datetime64[ns]").astype(np.int64))
            if len(steps) and (steps != steps[0]).any():
                at = group[TS].iloc[int(np.argmax(steps != steps[0])) + 1]
                raise DataContractError(
                    f"ts is not regular in {series_id!r}: gap at {at}; "
                    "derive with --fill zero, --fill hold or --fill linear"
                )
    out[VALUE] = out[VALUE].astype("float64")
    return out
