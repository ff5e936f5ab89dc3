"""Inputs of a capacity plan: the power of a GPU, known future jobs (reservations) and
capacity tables, read from files or the API's query values with errors that name the file, the
line and the field, the what-if they make of a forecast (growth and reservations), and the
warning a plan carries where its series' step is too coarse to see peaks.
:mod:`prism.capacity` re-exports most of them."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, IngestError
from prism.schema import ALL_SCOPE, SERIES_ID, TS, format_freq, split_series_id

FloatArray = npt.NDArray[np.float64]

#: The coarsest step a plan is sized from without a warning. GPUs in use (like every gauge,
#: :data:`prism.schema.METRICS`) is derived as the mean over each step, so at a coarser step
#: a burst of a few hours barely shows and the plan sizes below the peaks.
COARSE_STEP_S = 3600


def coarse_step_warning(freq_s: int, cluster: str) -> str | None:
    """The plain-words warning of a plan sized from series at a step coarser than
    :data:`COARSE_STEP_S`, with how to fix it; ``None`` at an hour or finer.

    Plans (day-ahead, procurement, pool) add it to their reasons, so that the CLI, the API
    and the report carry it; the plan is still made.
    """
    if freq_s <= COARSE_STEP_S:
        return None
    step = format_freq(int(freq_s))
    return (f"{cluster}'s series are at a {step} step, coarser than "
            f"{format_freq(COARSE_STEP_S)}: each value is the mean over its {step}, so peaks "
            "within a step are not seen and this plan under-sizes; re-derive them at a finer "
            f"step (prism series rederive --cluster {cluster} --freq 10min) or ingest with a "
            "finer --freq")


@dataclass(frozen=True)
class Watts:
    """Power drawn by one GPU, in watts.

    Attributes:
        idle: an allocated-but-idle (or powered, unused) GPU.
        busy: a GPU running a job.
    """

    idle: float = 60.0
    busy: float = 300.0


def parse_watts(text: str) -> Watts:
    """``"60,300"`` or ``"idle=60,busy=300"`` -> :class:`Watts`.

    Raises:
        ConfigError: for anything else, or a negative figure.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    values: dict[str, float] = {}
    try:
        if len(parts) == 2 and all("=" not in p for p in parts):
            values = {"idle": float(parts[0]), "busy": float(parts[1])}
        else:
            for part in parts:
                key, sep, value = part.partition("=")
                if not sep or key.strip() not in ("idle", "busy"):
                    raise ValueError(part)
                values[key.strip()] = float(value)
    except ValueError:
        values = {}
    if set(values) != {"idle", "busy"} or any(not math.isfinite(v) or v < 0
                                              for v in values.values()):
        raise ConfigError(f"--watts-per-gpu {text!r}: give the idle and busy draw of one GPU "
                          "in watts, e.g. 60,300 or idle=60,busy=300")
    return Watts(idle=values["idle"], busy=values["busy"])


@dataclass(frozen=True)
class Reservation:
    """A known future job: ``gpus`` GPUs held in ``scope`` from ``start`` to ``end``.

    Attributes:
        scope: the VC/tenant (or ``all``).
        start / end: naive UTC times, ``start < end``.
        gpus: GPUs held (fractional allowed).
        cluster: the cluster, or ``None`` for any.
        name: a label.
        line: the line of the file it was read from, if any (for error messages).
        source: the file it was read from, if any (for error messages).
    """

    scope: str
    start: pd.Timestamp
    end: pd.Timestamp
    gpus: float
    cluster: str | None = None
    name: str = ""
    line: int | None = None
    source: str | None = None


_RESERVATION_COLUMNS = ("start", "end", "gpus", "scope")
_RESERVATION_OPTIONAL = ("cluster", "name")


def read_reservations(path: str | Path) -> list[Reservation]:
    """Read known future jobs from a CSV file: ``start, end, gpus, scope [, cluster, name]``.

    Times are ISO 8601 (a zone converts to UTC; naive times are taken as UTC, as stored).

    Raises:
        IngestError: for a missing file or column, an unknown column, or a bad row, naming
            the file, the line and the field.
    """
    p = Path(path)
    if not p.is_file():
        raise IngestError("no such file", path=str(p),
                          fix="pass --reservations with a CSV file of start,end,gpus,scope")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError("not UTF-8 text", path=str(p), fix="save the file as UTF-8") from exc
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise IngestError("empty file", path=str(p), line=1,
                          fix="write a header start,end,gpus,scope and one row per job")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in _RESERVATION_COLUMNS if c not in header]
    if missing:
        raise IngestError(f"missing column(s) {', '.join(missing)}", path=str(p), line=1,
                          column=missing[0],
                          fix="the header needs start,end,gpus,scope (cluster, name optional)")
    unknown = [c for c in header if c not in (*_RESERVATION_COLUMNS, *_RESERVATION_OPTIONAL)]
    if unknown:
        raise IngestError(f"unknown column {unknown[0]!r}", path=str(p), line=1,
                          column=unknown[0],
                          fix="use only start, end, gpus, scope, cluster and name")
    out = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise IngestError(f"{len(row)} fields where the header has {len(header)}",
                              path=str(p), line=number, fix="give every row the header's fields")
        cells = {h: c.strip() for h, c in zip(header, row, strict=True)}

        def bad(column: str, message: str, fix: str, *, _n: int = number,
                _cells: dict[str, str] = cells) -> IngestError:
            return IngestError(f"{message} (value {_cells[column]!r})", path=str(p),
                               line=_n, column=column, fix=fix)

        times = {}
        for column in ("start", "end"):
            ts = _time(cells[column])
            if ts is None:
                raise bad(column, "not a time", "write an ISO time such as 2026-01-12T08:00")
            times[column] = ts
        if times["end"] <= times["start"]:
            raise bad("end", "end is not after start", "check the row's start and end")
        try:
            gpus = float(cells["gpus"])
        except ValueError:
            gpus = float("nan")
        if not math.isfinite(gpus) or gpus < 0:
            raise bad("gpus", "not a number of GPUs >= 0", "write e.g. 8 or 0.5")
        if not cells["scope"]:
            raise bad("scope", "empty scope", "name the VC/tenant, or 'all'")
        out.append(Reservation(scope=cells["scope"], start=times["start"], end=times["end"],
                               gpus=gpus, cluster=cells.get("cluster") or None,
                               name=cells.get("name", ""), line=number, source=str(p)))
    return out


def parse_reservation(text: str) -> Reservation:
    """``"SCOPE,START,END,GPUS"`` (the API's ``reservation=`` query value) -> a reservation.

    Raises:
        ConfigError: for another shape or a bad field (named).
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 4:
        raise ConfigError(f"reservation {text!r}: write SCOPE,START,END,GPUS, e.g. "
                          "vc-27a,2026-01-12T08:00,2026-01-12T20:00,8")
    scope, start, end, gpus = parts
    lo, hi = _time(start), _time(end)
    try:
        n = float(gpus)
    except ValueError:
        n = float("nan")
    if lo is None or hi is None or hi <= lo:
        raise ConfigError(f"reservation {text!r}: end must be a time after start")
    if not math.isfinite(n) or n < 0:
        raise ConfigError(f"reservation {text!r}: GPUS must be a number >= 0")
    if not scope:
        raise ConfigError(f"reservation {text!r}: name the scope (a VC, or all)")
    return Reservation(scope=scope, start=lo, end=hi, gpus=n)


def _time(text: str) -> pd.Timestamp | None:
    """An ISO time as naive UTC (a zone converts), or ``None`` when it is not one."""
    try:
        ts = pd.Timestamp(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(ts, pd.Timestamp) or pd.isna(ts):
        return None
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo else ts


def read_capacity_table(path: str | Path) -> pd.DataFrame:
    """Read a capacity table from CSV: ``scope, gpus [, cluster]`` (one row per scope).

    Raises:
        IngestError: for a missing file or column, or a bad row (file, line and field named).
    """
    p = Path(path)
    if not p.is_file():
        raise IngestError("no such file", path=str(p),
                          fix="pass --capacity with a CSV file of scope,gpus[,cluster]")
    rows = list(csv.reader(p.read_text(encoding="utf-8", errors="replace").splitlines()))
    header = [h.strip() for h in rows[0]] if rows else []
    for column in ("scope", "gpus"):
        if column not in header:
            raise IngestError(f"missing column {column!r}", path=str(p), line=1, column=column,
                              fix="the header needs scope,gpus (cluster optional)")
    extra = [h for h in header if h not in ("scope", "gpus", "cluster", "gpu_type")]
    if extra:
        raise IngestError(f"unknown column {extra[0]!r}", path=str(p), line=1, column=extra[0],
                          fix="use only scope, gpus, cluster and gpu_type")
    records = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise IngestError(f"{len(row)} fields where the header has {len(header)}",
                              path=str(p), line=number, fix="give every row the header's fields")
        cells = {h: c.strip() for h, c in zip(header, row, strict=True)}
        try:
            gpus = float(cells["gpus"])
        except ValueError:
            gpus = float("nan")
        if not math.isfinite(gpus) or gpus < 0:
            raise IngestError(f"not a number of GPUs >= 0 (value {cells['gpus']!r})",
                              path=str(p), line=number, column="gpus", fix="write e.g. 64")
        if not cells["scope"]:
            raise IngestError("empty scope", path=str(p), line=number, column="scope",
                              fix="name the VC/tenant, or 'all'")
        records.append({"cluster": cells.get("cluster") or None, "scope": cells["scope"],
                        "gpus": gpus})
    if not records:
        raise IngestError("no rows", path=str(p), line=2, fix="add one row per scope")
    frame = pd.DataFrame(records, columns=["cluster", "scope", "gpus"])
    # several GPU types of one scope add up
    return (frame.groupby(["cluster", "scope"], dropna=False, sort=True)["gpus"].sum()
            .reset_index())


# -- what-if -----------------------------------------------------------------------------------
def reservation_load(reservations: Iterable[Reservation], *, scope: str, ts: pd.DatetimeIndex,
                     freq_s: int, cluster: str | None = None) -> FloatArray:
    """GPUs the reservations hold in each bucket ``[ts, ts + freq)`` of ``scope``.

    A reservation counts in proportion to its overlap with the bucket; those of every scope
    count for ``all``; those naming another cluster are left out.
    """
    start = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    end = start + int(freq_s) * 10**9
    load = np.zeros(len(ts))
    for r in reservations:
        if r.cluster is not None and cluster is not None and r.cluster != cluster:
            continue
        if r.scope != scope and scope != ALL_SCOPE:
            continue
        lo, hi = pd.Timestamp(r.start).value, pd.Timestamp(r.end).value
        overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None)
        load += r.gpus * overlap / (int(freq_s) * 10**9)
    return load


def apply_what_if(forecast: pd.DataFrame, *, freq_s: int, growth: float = 1.0,
                  reservations: Sequence[Reservation] = ()) -> pd.DataFrame:
    """The forecast under a growth factor plus known future jobs (see the module docstring).

    Args:
        forecast: the forecast contract of one cluster's series.
        freq_s: its step in seconds.
        growth: multiplies the demand (``1.1``: 10 % more).
        reservations: known future jobs added on top.

    Returns:
        A copy with ``mean`` and every ``p..`` column moved, plus ``reserved`` (the GPUs the
        reservations hold in each step).

    Raises:
        ConfigError: for a growth factor that is not a positive number.
    """
    if not math.isfinite(growth) or growth <= 0:
        raise ConfigError(f"growth {growth!r} must be a positive factor such as 1.1")
    out = forecast.copy()
    qcols = [c for c in out.columns if str(c).startswith("p") and _is_level(str(c))]
    reserved = np.zeros(len(out))
    for sid, index in out.groupby(SERIES_ID, sort=False).indices.items():
        cluster, scope, _ = split_series_id(str(sid))
        reserved[index] = reservation_load(
            reservations, scope=scope, ts=pd.DatetimeIndex(out[TS].to_numpy()[index]),
            freq_s=freq_s, cluster=cluster)
    for col in ["mean", *qcols]:
        out[col] = out[col].to_numpy(dtype=np.float64) * growth + reserved
    out["reserved"] = reserved
    return out


def _is_level(name: str) -> bool:
    try:
        return 0 < float(name[1:]) / 100 < 1
    except ValueError:
        return False
