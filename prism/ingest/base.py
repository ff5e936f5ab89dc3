"""What every ingestion adapter shares: options, the batch it returns, readers and row checks.

An adapter turns one source file into a :class:`Batch` of canonical rows (``jobs``, ``samples``
or ``capacity``) without touching the store; :mod:`prism.ingest.pipeline` writes batches in one
transaction. Adapters never import DuckDB.

Row numbers: every frame carries a ``_line`` column, the 1-based line of the row in its file
(the CSV header is line 1, so the first data row is line 2), so that errors can name it.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from prism.errors import ConfigError, IngestError
from prism.ingest.timeparse import (
    STORABLE_YEARS,
    check_tz,
    locate_malformed_row,
    out_of_range,
    parse_local_times,
)
from prism.schema import EARLIEST_TS, JOB_COLUMNS, LATEST_TS, FileScan, metric_info

Kind = Literal["jobs", "samples", "capacity"]
LINE = "_line"

#: Columns of a ``samples`` batch (plus ``_line``).
SAMPLE_COLUMNS = ("cluster", "series_id", "ts", "value")
#: Columns of a ``capacity`` batch (plus ``_line``).
CAPACITY_COLUMNS = ("cluster", "scope", "gpu_type", "valid_from", "gpus")


@dataclass(frozen=True)
class IngestOptions:
    """Options shared by all formats; an adapter reads the ones that apply to it.

    Attributes:
        cluster: cluster name (each adapter has a documented default).
        scope: VC / tenant, where a file holds a single one (``helios-vc``).
        tz: time zone of naive local timestamps in the file; stored times are UTC.
        origin: time origin of traces that count seconds from an epoch (``alibaba-pods``).
        time_col: the time column of ``wide-csv`` files.
        mapping: canonical column -> column in the file (``jobs-csv``, ``long-csv``).
        on_error: ``fail`` (default) stops at the first bad row; ``skip`` keeps the good rows
            and stores the bad ones in ``rejects``.
        extra: adapter-specific settings (``key=value`` pairs from ``--option``).
    """

    cluster: str | None = None
    scope: str | None = None
    tz: str | None = None
    origin: str | None = None
    time_col: str | None = None
    mapping: dict[str, str] = field(default_factory=dict)
    on_error: Literal["fail", "skip"] = "fail"
    extra: dict[str, str] = field(default_factory=dict)

    def content_key(self) -> str:
        """The options that change what a file ingests to (part of the content hash)."""
        parts = [
            f"cluster={self.cluster}",
            f"scope={self.scope}",
            f"tz={self.tz}",
            f"origin={self.origin}",
            f"time_col={self.time_col}",
            "mapping=" + ",".join(f"{k}:{v}" for k, v in sorted(self.mapping.items())),
            "extra=" + ",".join(f"{k}:{v}" for k, v in sorted(self.extra.items())),
        ]
        return ";".join(parts)


@dataclass(frozen=True)
class Reject:
    """A row that was not ingested, and why."""

    line: int | None
    column: str | None
    reason: str
    raw: str = ""


@dataclass
class Batch:
    """Canonical rows read from one file.

    Attributes:
        kind: which table the rows go to.
        frame: the rows: ``JOB_COLUMNS``, ``SAMPLE_COLUMNS`` or ``CAPACITY_COLUMNS``, plus
            ``_line``; times are UTC-naive ``datetime64``.
        rejects: rows left out under ``--on-error skip``.
        obs_start: start of the time the file observes (job traces: first submit unless the
            format documents a window); ``None`` to take it from the rows.
        obs_end: end of the observation window, likewise.
        source: the source name stored with jobs and series (usually the format).
    """

    kind: Kind
    frame: pd.DataFrame | pa.Table
    source: str
    rejects: list[Reject] = field(default_factory=list)
    obs_start: pd.Timestamp | None = None
    obs_end: pd.Timestamp | None = None

    def rows(self) -> pd.DataFrame:
        """The rows as a pandas frame (Arrow batches are converted)."""
        if isinstance(self.frame, pa.Table):
            out = self.frame.to_pandas()
            for col in out.columns:
                if isinstance(out[col].dtype, pd.CategoricalDtype):
                    out[col] = out[col].astype(object)
                elif pd.api.types.is_datetime64_any_dtype(out[col]):
                    out[col] = out[col].astype("datetime64[ns]")
            return out
        return self.frame

    @property
    def clusters(self) -> list[str]:
        """The clusters this batch has rows for."""
        if isinstance(self.frame, pa.Table):
            return sorted(str(c) for c in pc.unique(self.frame["cluster"]).to_pylist()
                          if c is not None)
        if self.frame.empty:
            return []
        return sorted(str(c) for c in self.frame["cluster"].unique())


class Adapter:
    """Base class of ingestion adapters: one subclass per source format.

    Subclasses set ``name``, ``kind``, ``description`` and implement :meth:`read`.
    """

    name: str = ""
    kind: Kind = "jobs"
    description: str = ""
    #: The ``--option KEY=VALUE`` keys the format reads (anything else is refused by name).
    option_keys: tuple[str, ...] = ()
    #: The values allowed for the option keys that take one of a fixed set.
    option_choices: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: Canonical time field -> the file's column, where the format names it otherwise.
    time_columns: ClassVar[Mapping[str, str]] = {}

    def file_column(self, field: str, options: IngestOptions) -> str:
        """The file's column a canonical field comes from (``--map``, ``--time-col``), for
        errors found after the rows were stored."""
        if field == "ts" and options.time_col:
            return options.time_col
        return options.mapping.get(field) or self.time_columns.get(field, field)

    def check_options(self, options: IngestOptions) -> None:
        """Refuse ``--option`` keys this format does not read, and values it cannot use.

        Raises:
            ConfigError: naming the key and the keys the format takes, or the bad value and
                the values the key takes.
        """
        unknown = sorted(set(options.extra) - set(self.option_keys))
        if unknown:
            takes = ", ".join(self.option_keys) or "none"
            raise ConfigError(f"--option {', '.join(unknown)}: {self.name} does not read "
                              f"{'it' if len(unknown) == 1 else 'them'} (its options: {takes})")
        for key, allowed in self.option_choices.items():
            value = options.extra.get(key)
            if value is not None and value not in allowed:
                raise ConfigError(f"--option {key}={value!r}: {self.name} takes "
                                  + " or ".join(f"{key}={v}" for v in allowed))
        unit = options.extra.get("time_unit")
        if unit is not None and unit not in ("s", "ms"):
            raise ConfigError(f"--option time_unit={unit!r}: write time_unit=s or time_unit=ms "
                              "(numbers since the Unix epoch)")

    def identity(self, path: Path, options: IngestOptions) -> str:
        """What, besides the bytes and the options, decides the result (e.g. a VC taken from
        the file name); part of the content hash."""
        return ""

    def stream(self, path: Path, options: IngestOptions) -> Iterator[pa.Table] | None:
        """Canonical ``jobs`` rows in Arrow chunks, for files that need no row-level report:
        memory stays bounded however large the file. ``None`` when the adapter (or this file)
        has no such path; the iterator raises :class:`SlowPath` when a chunk turns out to need
        :meth:`read` after all (the pipeline then drops what it inserted and calls it)."""
        return None

    def native(self, path: Path, options: IngestOptions) -> FileScan | None:
        """How the store can read ``path`` itself (DuckDB's reader) into canonical ``jobs``
        rows, the fastest path; ``None`` when the adapter (or this file) has none. The
        pipeline checks the rows in SQL afterwards: a file with a row that fails a check goes
        to :meth:`read`; a file DuckDB cannot parse rolls the run back, which is then read
        with :meth:`stream` and :meth:`read`."""
        return None

    def read(self, path: Path, options: IngestOptions) -> Batch:
        """Read ``path`` into a batch of canonical rows.

        Raises:
            IngestError: naming file, line and column, and how to fix it.
        """
        raise NotImplementedError


# -- registry ------------------------------------------------------------------------------
_REGISTRY: dict[str, Adapter] = {}


def register(cls: type[Adapter]) -> type[Adapter]:
    """Class decorator: register an adapter under its ``name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def registry() -> dict[str, Adapter]:
    """All registered adapters by format name."""
    return dict(_REGISTRY)


# -- reading files -------------------------------------------------------------------------
def _is_gzip(path: Path) -> bool:
    return path.suffix == ".gz"


def _is_parquet(path: Path) -> bool:
    return path.suffix in (".parquet", ".pq")


def read_bytes(path: Path) -> bytes:
    """Return the (decompressed) content of ``path``.

    Raises:
        IngestError: when the file is missing, empty, or a truncated/corrupt gzip.
    """
    if not path.exists():
        raise IngestError("file not found", path=str(path), fix="check the path")
    raw = path.read_bytes()
    if _is_gzip(path):
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise IngestError(
                f"gzip file is truncated or corrupt ({exc})",
                path=str(path),
                fix="download or copy the file again; `gzip -t FILE` checks it",
            ) from exc
    if not raw.strip():
        raise IngestError("file is empty", path=str(path), fix="pass a file with a header and rows")
    try:  # the header here; pyarrow checks the rows' UTF-8 as it parses them
        raw[: raw.find(b"\n") if b"\n" in raw else len(raw)].decode("utf-8")
    except UnicodeDecodeError as exc:
        line = 1
        raise IngestError(
            f"not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})",
            path=str(path), line=line,
            fix="convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8",
        ) from exc
    return raw


class SlowPath(Exception):  # noqa: N818 - a signal, not an error users see
    """Raised by a streaming fast path when the file needs the slow path after all."""


#: Rows per chunk of a streamed ingest: bounded memory, big enough for fast inserts.
STREAM_BLOCK_BYTES = 64 << 20


def file_columns(
    path: Path,
) -> tuple[Literal["csv", "parquet"], list[str], int, set[str]] | None:
    """The format, column names, expected row count (0 when unknown) and the columns that
    hold zone-less timestamps (Parquet) of a CSV (plain or ``.gz``) or Parquet file, from its
    header or metadata; ``None`` when that cannot be read.

    The CSV header is split on commas as it is: a quoted header gives names that match no
    column, so such a file takes the checked path, which parses quotes.
    """
    if _is_parquet(path):
        try:
            meta = pq.ParquetFile(path)
            schema = meta.schema_arrow
            naive = {f.name for f in schema if pa.types.is_timestamp(f.type) and f.type.tz is None}
            return "parquet", list(schema.names), int(meta.metadata.num_rows), naive
        except (pa.ArrowException, OSError, ValueError):
            return None
    try:
        head, sample = _csv_head(path, 1 << 16)
        names = head.decode("utf-8").rstrip("\r\n").split(",")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        return None
    if not head.strip() or not sample.strip():
        return None
    hint = 0
    lines = sample.count(b"\n")
    if not _is_gzip(path) and lines:  # rows ~ data bytes / bytes per row of the first 64 KiB
        hint = int((path.stat().st_size - len(head)) / (len(sample) / lines))
    return "csv", names, hint, set()


def _csv_head(path: Path, sample: int = 0) -> tuple[bytes, bytes]:
    """The first line of a CSV (plain or ``.gz``) and up to ``sample`` bytes after it."""
    opener = gzip.open if _is_gzip(path) else open
    with opener(path, "rb") as handle:
        return handle.readline(), handle.read(sample) if sample else b""


def stream_arrow(
    path: Path, column_types: dict[str, pa.DataType]
) -> tuple[list[str], Iterator[pa.Table]] | None:
    """The typed fast read in chunks: ``(column names, chunks)``, or ``None`` when the file
    cannot start on the fast path. A chunk that does not parse raises :class:`SlowPath`.

    Raises:
        IngestError: for a missing file.
    """
    if not path.exists():
        raise IngestError("file not found", path=str(path), fix="check the path")
    if _is_parquet(path):
        try:
            handle = pq.ParquetFile(path)
            names = list(handle.schema_arrow.names)
        except (pa.ArrowException, OSError, ValueError):
            return None

        def parquet_chunks() -> Iterator[pa.Table]:
            try:
                for batch in handle.iter_batches(batch_size=1 << 20):
                    table = pa.Table.from_batches([batch])
                    for name, kind in column_types.items():
                        if name in table.column_names and table.schema.field(name).type != kind:
                            i = table.column_names.index(name)
                            table = table.set_column(i, name, pc.cast(table[name], kind))
                    yield table
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise SlowPath(str(exc)) from exc

        return names, parquet_chunks()
    try:
        head = _csv_head(path)[0].decode("utf-8").strip()
        if not head:
            return None
        header = head.split(",")
        types = {c: t for c, t in column_types.items() if c in header}
        convert = pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                       timestamp_parsers=[pacsv.ISO8601])
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(
            block_size=STREAM_BLOCK_BYTES), convert_options=convert)
    except (pa.ArrowException, OSError, EOFError, zlib.error, UnicodeDecodeError):
        return None  # the slow path says what is wrong (empty, truncated, malformed)

    def csv_chunks() -> Iterator[pa.Table]:
        try:
            for batch in reader:
                yield pa.Table.from_batches([batch])
        except (pa.ArrowException, OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
            raise SlowPath(str(exc)) from exc

    return header, csv_chunks()


def read_table(
    path: Path,
    *,
    required: Sequence[str] = (),
    column_types: dict[str, pa.DataType] | None = None,
    delimiter: str = ",",
) -> pd.DataFrame:
    """Read a CSV (plain or ``.gz``) or Parquet file into a pandas frame with ``_line``.

    With ``column_types`` the typed (fast) read is tried first; when a value does not parse,
    the file is read again as strings so that the caller's checks can name the bad row.

    Raises:
        IngestError: empty or truncated file, unreadable CSV, or a required column missing.
    """
    if _is_parquet(path):
        if not path.exists():
            raise IngestError("file not found", path=str(path), fix="check the path")
        try:
            frame = pq.read_table(path).to_pandas()
        except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
            raise IngestError(
                f"not a readable Parquet file ({exc})", path=str(path),
                fix="write the file again with pandas.to_parquet or pyarrow",
            ) from exc
        if frame.empty and not len(frame.columns):
            raise IngestError("file is empty", path=str(path), fix="pass a file with rows")
        frame[LINE] = np.arange(1, len(frame) + 1)  # Parquet rows are numbered from 1
    else:
        data = read_bytes(path)
        frame = _read_csv_bytes(path, data, column_types, delimiter)
        frame[LINE] = _row_lines(data, len(frame))
    missing = [c for c in required if c not in frame.columns]
    if missing:
        columns = list(frame.columns[:-1])
        other = _other_delimiter(columns, delimiter) if not _is_parquet(path) else None
        raise IngestError(
            f"missing column(s) {missing}; the file has {columns}"
            + (f" (one column: its fields are separated by {other!r}, not {delimiter!r})"
               if other else ""),
            path=str(path),
            line=None if _is_parquet(path) else 1,
            fix=(f"write the file with {delimiter!r} between fields (pandas: to_csv(path, "
                 f"sep={delimiter!r}); a spreadsheet: save as comma-separated CSV)" if other
                 else "rename the columns or map them with --map CANONICAL=COLUMN"),
        )
    return frame


def _other_delimiter(columns: list[str], delimiter: str) -> str | None:
    """The delimiter a one-column header holds instead of ``delimiter`` (``;`` from a
    spreadsheet in a locale with decimal commas, tabs, pipes), or ``None``."""
    if len(columns) != 1:
        return None
    counts = {d: str(columns[0]).count(d) for d in (";", "\t", "|") if d != delimiter}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else None


def _read_csv_bytes(
    path: Path, data: bytes, column_types: dict[str, pa.DataType] | None, delimiter: str
) -> pd.DataFrame:
    parse = pacsv.ParseOptions(delimiter=delimiter)
    header = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip().split(delimiter)
    if column_types:
        types = {c: t for c, t in column_types.items() if c in header}
        convert = pacsv.ConvertOptions(
            column_types=types, strings_can_be_null=True,
            timestamp_parsers=[pacsv.ISO8601],
        )
        try:
            table = pacsv.read_csv(io.BytesIO(data), parse_options=parse, convert_options=convert)
            return _to_pandas(path, table)
        except pa.ArrowInvalid:
            pass  # fall back to strings so that the checks can name the bad row
    try:
        convert = pacsv.ConvertOptions(
            column_types={c: pa.string() for c in header}, strings_can_be_null=True
        )
        table = pacsv.read_csv(io.BytesIO(data), parse_options=parse, convert_options=convert)
    except (pa.ArrowException, ValueError) as exc:
        line, what = locate_malformed_row(data, len(header), first_line=2, delimiter=delimiter)
        if line is not None:
            raise IngestError(
                f"malformed CSV row: {what}", path=str(path), line=line,
                fix="every row needs as many fields as the header; quote fields holding the "
                "delimiter",
            ) from exc
        line = _line_of_arrow_error(str(exc))
        raise IngestError(
            f"malformed CSV ({exc})".replace("\n", " "),
            path=str(path), line=line,
            fix="every row needs as many fields as the header; quote fields holding the "
            "delimiter",
        ) from exc
    return _to_pandas(path, table)


def _to_pandas(path: Path, table: pa.Table) -> pd.DataFrame:
    """``table`` as a frame. Its column names come from the first line that is not blank (a
    quoted one may span lines), which :func:`read_bytes`' first-line check may have missed."""
    try:
        return table.to_pandas()
    except UnicodeDecodeError as exc:
        raise IngestError(f"the header (the first line that is not blank) is not UTF-8 text "
                          f"({exc.reason} in a column name)", path=str(path),
                          fix="convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8") from exc


def _row_lines(data: bytes, n_rows: int) -> np.ndarray:
    """1-based line numbers of the data rows (pyarrow skips blank lines; the header is 1)."""
    if b"\n\n" not in data and b"\n\r\n" not in data:
        return np.arange(2, n_rows + 2, dtype=np.int64)
    lines = data.split(b"\n")
    numbers = np.array([i + 1 for i, text in enumerate(lines) if text.strip(b"\r")],
                       dtype=np.int64)[1:]
    if len(numbers) != n_rows:  # quoted newlines: fall back to counting rows
        return np.arange(2, n_rows + 2, dtype=np.int64)
    return numbers


def _line_of_arrow_error(message: str) -> int | None:
    # pyarrow reports "Row #N" counting from 1 for the header line.
    match = re.search(r"[Rr]ow #(\d+)", message)
    return int(match.group(1)) if match else None


# -- row checks ----------------------------------------------------------------------------
#: In fail mode, how many distinct problems (checks that fail) an error lists, each with the
#: first line that has it, so that one run shows what to fix rather than only the first thing.
MAX_PROBLEMS = 5


@dataclass(frozen=True)
class _Problem:
    """One check that failed: the first line failing it, the value there, and how many rows."""

    line: int
    column: str | None
    reason: str
    value: str
    rows: int
    fix: str

    def where(self) -> str:
        return f"line {self.line}" + (f", column '{self.column}'" if self.column else "")

    def what(self) -> str:
        return self.reason + (f" (value {self.value!r})" if self.value else "")


class RowChecker:
    """Collects bad rows (vectorised) and either fails or rejects them all.

    Use :meth:`check` for each rule, then :meth:`finish` to get the good rows. In fail mode
    the error names the first bad row and lists up to :data:`MAX_PROBLEMS` distinct problems,
    each with its first line.
    """

    def __init__(self, path: Path, frame: pd.DataFrame, on_error: str) -> None:
        self.path = path
        self.frame = frame
        self.on_error = on_error
        self._bad = np.zeros(len(frame), dtype=bool)
        self._problems: dict[tuple[str | None, str], _Problem] = {}
        self.rejects: list[Reject] = []

    def check(self, bad: np.ndarray | pd.Series, column: str | None, reason: str, fix: str) -> None:
        """Mark rows where ``bad`` is true as failing ``reason`` (about ``column``)."""
        mask = np.asarray(bad, dtype=bool) & ~self._bad
        if not mask.any():
            return
        lines = self.frame[LINE].to_numpy()[mask]
        first = int(lines.min())
        value = ""
        if column is not None and column in self.frame.columns:
            value = _shown(self.frame[column].to_numpy()[mask][int(np.argmin(lines))])
        seen = self._problems.get((column, reason))
        rows = int(mask.sum()) + (seen.rows if seen else 0)
        if seen is not None and seen.line < first:
            first, value = seen.line, seen.value
        self._problems[(column, reason)] = _Problem(first, column, reason, value, rows, fix)
        raw = self.frame.loc[mask, column].astype(str).to_numpy() if (
            column is not None and column in self.frame.columns
        ) else np.full(int(mask.sum()), "")
        self.rejects.extend(
            Reject(int(line), column, reason, str(value))
            for line, value in zip(lines, raw, strict=True)
        )
        self._bad |= mask

    @property
    def failed(self) -> np.ndarray:
        """Which rows failed a check so far (a copy)."""
        return self._bad.copy()

    def error(self) -> IngestError | None:
        """The error of fail mode: the first bad row, then up to :data:`MAX_PROBLEMS` distinct
        problems in all (each with its first line); ``None`` when every row passed."""
        if not self._problems:
            return None
        problems = sorted(self._problems.values(), key=lambda p: (p.line, p.column or ""))
        first, shown = problems[0], problems[:MAX_PROBLEMS]
        message = f"{first.what()}; {first.rows} row(s) in all"
        if len(problems) > 1:
            message += f"; also {len(problems) - 1} other problem(s)" + (
                f" ({len(shown) - 1} shown)" if len(problems) > MAX_PROBLEMS else "") + ": "
            message += "; ".join(f"{p.where()}: {p.what()}, {p.rows} row(s)" for p in shown[1:])
        fixes = "; ".join(dict.fromkeys(p.fix for p in shown))
        return IngestError(message, path=str(self.path), line=first.line, column=first.column,
                           fix=f"{fixes}, or pass --on-error skip to store such rows in "
                           "`rejects`")

    def finish(self) -> tuple[pd.DataFrame, list[Reject]]:
        """The good rows, and the rejects (sorted by line).

        Raises:
            IngestError: in fail mode, for the bad rows (see :meth:`error`).
        """
        error = self.error()
        if error is not None and self.on_error != "skip":
            raise error
        good = self.frame[~self._bad] if self._bad.any() else self.frame
        return good.reset_index(drop=True), sorted(self.rejects, key=lambda r: r.line or 0)


def _shown(value: object) -> str:
    """A value as the file most likely wrote it (a typed read makes ``-6000`` a float); empty
    for a missing value."""
    if value is None or value is pd.NA or value is pd.NaT or (
            isinstance(value, float | np.floating | np.datetime64) and np.isnan(value)):
        return ""
    if isinstance(value, float | np.floating) and np.isfinite(value) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, np.datetime64 | pd.Timestamp):  # a typed read: as ISO 8601
        return pd.Timestamp(value).isoformat()
    return str(value)


def parse_times(
    values: pd.Series, *, tz: str | None = None, unit: str | None = None,
    origin: pd.Timestamp | None = None,
) -> tuple[pd.Series, np.ndarray]:
    """Parse a column of times into UTC-naive ``datetime64[ns]``.

    Args:
        values: strings, datetimes or numbers.
        tz: zone of naive times (converted to UTC); aware times are converted as they are.
        unit: for numbers, ``s``/``ms``; numbers are seconds since ``origin`` (default epoch).
        origin: origin of numeric times.

    Returns:
        The parsed times (NaT where empty) and a mask of values that were present but did
        not parse.
    """
    present = values.notna().to_numpy()
    check_tz(tz)
    if pd.api.types.is_datetime64_any_dtype(values):
        out = pd.Series(values)
        inside = ((out >= pd.Timestamp("1678-01-02")) & (out <= pd.Timestamp("2262-04-10"))
                  ).to_numpy(dtype=bool) if getattr(out.dt, "tz", None) is None else present
        out = out.where(inside)  # beyond what datetime64[ns] holds: reported as bad
        if getattr(out.dt, "tz", None) is not None:
            out = out.dt.tz_convert("UTC").dt.tz_localize(None)
        elif tz:
            out = out.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT").dt.tz_convert(
                "UTC").dt.tz_localize(None)
        out = out.astype("datetime64[ns]")
        return out, present & (out.isna().to_numpy() | ~inside)
    if unit is not None or pd.api.types.is_numeric_dtype(values):
        numbers = pd.to_numeric(values, errors="coerce")
        base = origin if origin is not None else pd.Timestamp("1970-01-01")
        scale = {"s": 1e9, "ms": 1e6, None: 1e9}[unit]
        raw = numbers.to_numpy(dtype="float64", na_value=np.nan)
        # beyond about +-292 years from the origin, nanoseconds overflow int64
        finite = np.isfinite(raw) & (np.abs(raw * scale) < 9.2e18 - abs(base.value))
        ns = np.where(finite, raw, 0) * scale
        out = pd.Series(
            pd.to_datetime(np.round(ns).astype(np.int64) + base.value, unit="ns"),
            index=values.index,
        ).where(finite)
        return out.astype("datetime64[ns]"), present & ~finite
    parsed, bad, tz_bad = parse_local_times(values, tz)
    return parsed, bad | tz_bad


#: The years a job time can have (:data:`prism.schema.EARLIEST_TS` .. ``LATEST_TS``).
JOB_YEARS = (EARLIEST_TS.year, LATEST_TS.year - 1)


def out_of_range_reason(what: str, years: tuple[int, int] = STORABLE_YEARS) -> str:
    """The reason of a time outside ``years`` (one wording for every format)."""
    return f"{what} is out of range (PRISM takes years {years[0]}..{years[1]})"


def check_times(
    checker: RowChecker, values: pd.Series, bad: np.ndarray, column: str, what: str, fix: str,
    *, years: tuple[int, int] = STORABLE_YEARS, numeric: bool = False,
    reason: str | None = None,
) -> None:
    """Report the times a parser refused: those in a year that cannot be stored (9999-01-05)
    as out of range, naming the range, the others as not a time.

    Args:
        checker: the file's checker.
        values: the column as read.
        bad: the parser's mask of values that did not parse.
        column: the file column.
        what: the name in the message (``submit_ts``).
        fix: how to write a time this format reads.
        years: the range the message gives (jobs: :data:`JOB_YEARS`).
        numeric: the values are numbers of seconds.
        reason: the reason of the others (default ``"<what> is not a time"``).
    """
    far = out_of_range(values, bad, numeric=numeric)
    checker.check(far, column, out_of_range_reason(what, years),
                  "check the number: seconds (or milliseconds, where the format takes "
                  "--option time_unit=ms) since the origin" if numeric else
                  "check the year: fix a typo, and leave a time empty rather than write a "
                  "placeholder such as 9999-12-31")
    checker.check(np.asarray(bad, dtype=bool) & ~far, column, reason or f"{what} is not a time",
                  fix)


def parse_numbers(values: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """Parse a column of numbers to float64; returns the numbers and a mask of bad values."""
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        out = values.astype("float64")
        return out, ~np.isfinite(out.to_numpy()) & out.notna().to_numpy()
    text = values.astype("string").str.strip()
    text = text.where(text != "")
    out = pd.to_numeric(text, errors="coerce").astype("float64")
    bad = text.notna().to_numpy() & ~np.isfinite(out.to_numpy(na_value=np.nan))
    return out, bad


def job_frame(
    columns: dict[str, pd.Series | np.ndarray | object], lines: np.ndarray
) -> pd.DataFrame:
    """Assemble a canonical jobs frame; missing columns become NULL."""
    n = len(lines)
    data: dict[str, object] = {}
    for name in JOB_COLUMNS:
        value = columns.get(name)
        if value is None:
            if name in ("num_gpus", "num_cpus"):
                data[name] = np.full(n, np.nan)
            elif name.endswith("_ts"):
                data[name] = pd.Series(pd.NaT, index=range(n), dtype="datetime64[ns]")
            else:
                data[name] = pd.Series([None] * n, dtype="object")
        elif isinstance(value, pd.Series):
            data[name] = value.to_numpy()
        else:
            data[name] = value
    data[LINE] = lines
    frame = pd.DataFrame(data)
    for name in ("source", "cluster", "scope", "job_id", "gpu_type", "status"):
        frame[name] = frame[name].astype("object").where(frame[name].notna(), None)
    return frame


def check_jobs(checker: RowChecker, frame: pd.DataFrame) -> None:
    """The checks every job-level source gets: ids, GPU counts and time order."""
    checker.check(frame["job_id"].isna().to_numpy(), "job_id", "job id is empty",
                  "give every job an id")
    gpus = frame["num_gpus"].to_numpy(dtype="float64", na_value=np.nan)
    checker.check(np.isnan(gpus), "num_gpus", "GPU count is empty",
                  "write the number of GPUs (0 for CPU-only jobs)")
    checker.check(gpus < 0, "num_gpus", "GPU count is negative", "GPU counts must be >= 0")
    checker.check(frame["submit_ts"].isna().to_numpy(), "submit_ts", "submit time is empty",
                  "every job needs a submit time")
    checker.check(frame.duplicated(["cluster", "job_id"], keep="first").to_numpy(), "job_id",
                  "job id appears more than once in this file",
                  "give every job of a cluster a unique id")
    start, end, submit = frame["start_ts"], frame["end_ts"], frame["submit_ts"]
    for name in ("submit_ts", "start_ts", "end_ts"):
        when = frame[name]
        checker.check(((when < EARLIEST_TS) | (when >= LATEST_TS)).fillna(False).to_numpy(),
                      name, out_of_range_reason(name, JOB_YEARS),
                      "check the year (and the --origin of traces in seconds)")
    checker.check((end < start).fillna(False).to_numpy(), "end_ts", "end time is before start time",
                  "check the row's start and end times")
    checker.check((start < submit).fillna(False).to_numpy(), "start_ts",
                  "start time is before submit time", "check the row's submit and start times")
    checker.check((end < submit).fillna(False).to_numpy() & start.isna().to_numpy(), "end_ts",
                  "end time is before submit time", "check the row's submit and end times")


def value_range(metric: str) -> tuple[float, float] | None:
    """The values a sample of ``metric`` can take, from its unit in ``prism.schema``.

    Returns:
        ``(0, 1)`` for ratios (``gpu_util``), ``(0, inf)`` for quantities (GPUs, jobs, nodes,
        ``*_count`` counters), ``None`` for metrics with no known unit (anything goes).
    """
    unit = metric_info(metric).unit
    if unit == "ratio":
        return 0.0, 1.0
    return (0.0, np.inf) if unit else None


def check_range(checker: RowChecker, values: np.ndarray, column: str, metric: str,
                rows: np.ndarray | None = None) -> None:
    """Mark the rows whose ``values`` of ``metric`` are outside :func:`value_range`.

    Args:
        checker: the file's checker (its frame holds ``column``, so the value is shown).
        values: the parsed numbers (NaN, an empty cell, passes).
        column: the file column the values come from.
        metric: the metric they are samples of.
        rows: which rows hold ``metric`` (default all), for files of several metrics.
    """
    bounds = value_range(metric)
    if bounds is None:
        return
    low, high = bounds
    inside = rows if rows is not None else np.ones(len(values), dtype=bool)
    with np.errstate(invalid="ignore"):
        if np.isinf(high):
            unit = metric_info(metric).unit
            checker.check(inside & (values < low), column,
                          f"{metric} is negative (valid range: >= 0)",
                          f"{metric} ({unit}) cannot be negative: write a value >= 0")
        else:
            checker.check(inside & ((values < low) | (values > high)), column,
                          f"{metric} is outside its valid range {low:g}..{high:g}",
                          f"{metric} is a ratio: write values from {low:g} to {high:g} "
                          "(divide percentages by 100)")


def reject_unknown_columns(
    path: Path, frame: pd.DataFrame, known: Iterable[str], fix: str
) -> None:
    """Fail on columns a strict format does not define (a typo would otherwise be dropped)."""
    unknown = [c for c in frame.columns if c != LINE and c not in set(known)]
    if unknown:
        raise IngestError(
            f"unknown column(s) {unknown}", path=str(path), line=1, column=unknown[0], fix=fix
        )


Parser = Callable[[pd.Series], tuple[pd.Series, np.ndarray]]
