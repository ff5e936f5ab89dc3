"""``wide-csv``: a time column and one numeric column per metric.

``prism ingest FILE --format wide-csv --time-col time --cluster NAME [--scope S]``: every other
column becomes the series ``NAME/S/<column>`` (``S`` defaults to ``all``), resampled at
derivation with the metric's aggregation (mean for gauges, sum for ``*_submitted`` counts).
``--option ignore=col1,col2`` leaves columns out; a column that holds no numbers (a host name)
is refused, naming it.
CSV, ``.csv.gz`` or Parquet. Times are ISO 8601 (a zone suffix is honoured, naive times are in
``--tz``, default UTC) or, with ``--option time_unit=s`` (or ``ms``), numbers since the Unix
epoch. Empty cells are gaps (filled by the derivation's fill policy).
Values must fit their metric (``prism.schema.METRICS``): counts of GPUs, jobs or nodes are
>= 0, ratios such as ``gpu_util`` are 0..1; metrics PRISM does not know take any number.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from prism.errors import DataContractError, IngestError
from prism.ingest.base import (
    LINE,
    SAMPLE_COLUMNS,
    Adapter,
    Batch,
    IngestOptions,
    read_table,
    register,
)
from prism.ingest.checks import (
    JOB_YEARS,
    RowChecker,
    check_range,
    check_times,
    parse_numbers,
    parse_times,
)
from prism.schema import ALL_SCOPE, make_series_id, split_series_id


def samples_from_columns(
    path: Path,
    frame: pd.DataFrame,
    *,
    time_col: str,
    series: dict[str, str],
    cluster: str,
    options: IngestOptions,
    derived: dict[str, tuple[str, ...]] | None = None,
    unit_hint: bool = False,
) -> tuple[pd.DataFrame, list]:
    """Turn wide columns into long samples rows.

    A value outside the range of its series' metric (a negative GPU count, a ratio above 1)
    is a bad row, like a value that is not a number.

    Args:
        path: the file (for messages).
        frame: the file's rows with ``_line``.
        time_col: the time column.
        series: file column -> series id.
        cluster: the cluster of every series.
        options: ingest options (``tz``, ``on_error``, ``--option time_unit``).
        derived: extra series id -> file columns summed into it (e.g. demand = running +
            pending).
        unit_hint: the format takes ``--option time_unit`` (a time written as a number is
            reported with it as the fix).

    Returns:
        The samples frame (``SAMPLE_COLUMNS`` + ``_line``) and the rejects.
    """
    checker = RowChecker(path, frame, options.on_error)
    unit = options.extra.get("time_unit")
    times, bad, dst = parse_times(frame[time_col], tz=options.tz, unit=unit)
    check_times(checker, frame[time_col], bad, time_col, "time",
                "write times as ISO 8601, e.g. 2020-05-01 00:00:00"
                + (" (or numbers with --option time_unit=s)" if unit_hint else ""),
                reason="time does not parse", years=JOB_YEARS, times=times, dst=dst,
                tz=options.tz, numeric=unit is not None, unit_hint=unit_hint)
    checker.check(frame[time_col].isna().to_numpy(), time_col, "time is empty",
                  "every row needs a time")
    values: dict[str, pd.Series] = {}
    for column in series:
        numbers, bad = parse_numbers(frame[column])
        checker.check(bad, column, "value is not a number", "write plain numbers")
        check_range(checker, numbers.to_numpy(dtype="float64", na_value=np.nan), column,
                    split_series_id(series[column])[2])
        values[column] = numbers
    good_rows, rejects = checker.finish()
    keep = frame[LINE].isin(good_rows[LINE]).to_numpy()
    parts = []
    lines = frame[LINE].to_numpy()[keep]
    ts = times.to_numpy()[keep]
    for column, series_id in series.items():
        parts.append(pd.DataFrame({"series_id": series_id, "ts": ts,
                                   "value": values[column].to_numpy()[keep], LINE: lines}))
    for series_id, columns in (derived or {}).items():
        total = np.sum([values[c].to_numpy()[keep] for c in columns], axis=0)
        parts.append(pd.DataFrame({"series_id": series_id, "ts": ts, "value": total,
                                   LINE: lines}))
    out = pd.concat(parts, ignore_index=True)
    out = out[out["value"].notna()]
    out.insert(0, "cluster", cluster)
    out["ts"] = out["ts"].astype("datetime64[ns]")
    return out[[*SAMPLE_COLUMNS, LINE]].reset_index(drop=True), rejects


def series_id_for(path: Path, cluster: str, scope: str, metric: str) -> str:
    """``make_series_id`` with the error turned into an ingest error about the column."""
    try:
        return make_series_id(cluster, scope, metric)
    except DataContractError as exc:
        raise IngestError(str(exc), path=str(path), line=1, column=metric,
                          fix="rename the column or pass another --cluster/--scope") from exc


def _refuse_text_column(path: Path, frame: pd.DataFrame, column: str) -> None:
    """Refuse a column none of whose values is a number (a host name, a label): as a metric
    every row of it would be rejected.

    Raises:
        IngestError: naming the column, its first value and how to leave it out.
    """
    numbers, bad = parse_numbers(frame[column])
    if not bad.any() or numbers.notna().any():
        return
    first = int(np.flatnonzero(bad)[0])
    raise IngestError(
        f"column {column!r} holds no numbers (its first value: {frame[column].iloc[first]!r}); "
        "every column of a wide-csv but the time column is a metric",
        path=str(path), line=int(frame[LINE].iloc[first]), column=column,
        fix=f"leave it out with --option ignore={column} (several: --option ignore=a,b), or "
        "delete the column")


@register
class WideCsvAdapter(Adapter):
    """A time column plus one column per metric."""

    name = "wide-csv"
    time_columns = {"ts": "time"}
    kind = "samples"
    description = "a time column and one numeric column per metric (--time-col, --cluster)"
    option_keys = ("time_unit", "ignore")

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read a wide file; each non-time column becomes ``cluster/scope/<column>``."""
        if not options.cluster:
            raise IngestError("wide-csv needs a cluster name", path=str(path),
                              fix="pass --cluster NAME")
        time_col = options.time_col or "time"
        frame = read_table(path, required=[time_col])
        scope = options.scope or ALL_SCOPE
        ignored = {c.strip() for c in options.extra.get("ignore", "").split(",") if c.strip()}
        columns = [c for c in frame.columns if c not in (time_col, LINE, *ignored)]
        if not columns:
            raise IngestError("no value columns besides the time column", path=str(path),
                              line=1, fix="add one numeric column per metric")
        for column in columns:
            _refuse_text_column(path, frame, column)
        series = {c: series_id_for(path, options.cluster, scope, c) for c in columns}
        samples, rejects = samples_from_columns(
            path, frame, time_col=time_col, series=series, cluster=options.cluster,
            options=options, unit_hint=True)
        return Batch(kind="samples", frame=samples, source=self.name, rejects=rejects)
