"""What every ingestion adapter shares: options, the batch it returns and file readers (the row
checks are in :mod:`prism.ingest.checks`).

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
from collections.abc import Iterator, Mapping, Sequence
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
    MALFORMED_FIXES,
    describe_malformed_row,
)
from prism.schema import FileScan

Kind = Literal["jobs", "samples", "capacity"]
LINE = "_line"

#: Columns of a ``samples`` batch (plus ``_line``).
SAMPLE_COLUMNS = ("cluster", "series_id", "ts", "value")
#: Columns of a ``capacity`` batch (plus ``_line``).
CAPACITY_COLUMNS = ("cluster", "scope", "gpu_type", "valid_from", "gpus")
#: The CSV fields the readers take as a missing value, in every column (pyarrow's CSV null
#: values, also when quoted): a scope ``NA`` is no scope, a gpu_type ``N/A`` no GPU type. The
#: DuckDB reader (``prism.store_scan``) uses the same list; ``None`` and ``-`` are names.
MISSING_VALUES = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
                  "1.#QNAN", "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null")


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
    #: what the summary says of the file: what the rows stand for, where it is not one row per
    #: input row (``node-list``), or the columns read past (``long-csv``)
    note: str = ""

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
        if len(set(header)) != len(header):
            return None  # the slow path names the repeated column
        types = {c: t for c, t in column_types.items() if c in header}
        convert = pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                       null_values=list(MISSING_VALUES),
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
    literal: bool = False,
) -> pd.DataFrame:
    """Read a CSV (plain or ``.gz``) or Parquet file into a pandas frame with ``_line``.

    With ``column_types`` the typed (fast) read is tried first; when a value does not parse,
    the file is read again as strings so that the caller's checks can name the bad row.
    With ``literal`` (and no ``column_types``) only an empty CSV cell is missing: ``NaN``,
    ``NULL`` or ``N/A`` stay text, which the checks refuse quoting the value.

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
        check_header(path, [str(c) for c in frame.columns], None)
        frame[LINE] = np.arange(1, len(frame) + 1)  # Parquet rows are numbered from 1
    else:
        data = read_bytes(path)
        frame = _read_csv_bytes(path, data, column_types, delimiter, literal)
        check_header(path, [str(c) for c in frame.columns])
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


def check_header(path: Path, names: Sequence[str], line: int | None = 1) -> None:
    """Refuse a header that names a column twice: which of the two is meant would be left to
    chance (and the readers cannot tell them apart).

    Raises:
        IngestError: naming the column, its positions and the fix.
    """
    seen: dict[str, int] = {}
    for i, name in enumerate(names, 1):
        if name in seen:
            raise IngestError(
                f"column {name!r} appears twice in the header (fields {seen[name]} and {i})",
                path=str(path), line=line, column=name,
                fix="give every column its own name: rename or drop one of the two")
        seen[name] = i


def _other_delimiter(columns: list[str], delimiter: str) -> str | None:
    """The delimiter a one-column header holds instead of ``delimiter`` (``;`` from a
    spreadsheet in a locale with decimal commas, tabs, pipes), or ``None``."""
    if len(columns) != 1:
        return None
    counts = {d: str(columns[0]).count(d) for d in (";", "\t", "|") if d != delimiter}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else None


def _read_csv_bytes(
    path: Path, data: bytes, column_types: dict[str, pa.DataType] | None, delimiter: str,
    literal: bool = False,
) -> pd.DataFrame:
    parse = pacsv.ParseOptions(delimiter=delimiter)
    header = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip().split(delimiter)
    check_header(path, [h.strip('"') for h in header])
    if column_types:
        types = {c: t for c, t in column_types.items() if c in header}
        convert = pacsv.ConvertOptions(
            column_types=types, strings_can_be_null=True, null_values=list(MISSING_VALUES),
            timestamp_parsers=[pacsv.ISO8601],
        )
        try:
            table = pacsv.read_csv(io.BytesIO(data), parse_options=parse, convert_options=convert)
            return _to_pandas(path, table)
        except pa.ArrowInvalid:
            pass  # fall back to strings so that the checks can name the bad row
    try:
        convert = pacsv.ConvertOptions(
            column_types={c: pa.string() for c in header}, strings_can_be_null=True,
            null_values=[""] if literal else list(MISSING_VALUES))
        table = pacsv.read_csv(io.BytesIO(data), parse_options=parse, convert_options=convert)
    except (pa.ArrowException, ValueError) as exc:
        line, what, fix = describe_malformed_row(data, len(header), first_line=2,
                                                 delimiter=delimiter)
        if line is not None:
            raise IngestError(f"malformed CSV row: {what}", path=str(path), line=line,
                              fix=fix) from exc
        line = _line_of_arrow_error(str(exc))
        raise IngestError(
            f"malformed CSV ({exc})".replace("\n", " "),
            path=str(path), line=line, fix=MALFORMED_FIXES["fields"],
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
