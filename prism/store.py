"""The DuckDB store: the only module that imports :mod:`duckdb`.

``Store.open(path)`` opens (or creates) a database file; ``Store(connection)`` wraps an existing
connection. Every statement goes through :meth:`Store.execute` with values bound as ``?``
parameters, never formatted into the SQL text. The DDL is idempotent and versioned.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from prism.config import get_settings
from prism.errors import ConfigError, PrismError, SeriesNotFound

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_DDL = (
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE SEQUENCE IF NOT EXISTS ingest_id_seq START 1",
    """CREATE TABLE IF NOT EXISTS ingests (
        ingest_id BIGINT PRIMARY KEY, content_hash VARCHAR NOT NULL UNIQUE, format VARCHAR,
        path VARCHAR, cluster VARCHAR, kind VARCHAR, rows BIGINT, rejected BIGINT,
        obs_start TIMESTAMP, obs_end TIMESTAMP, options VARCHAR, ingested_at TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS jobs (
        ingest_id BIGINT, source VARCHAR, cluster VARCHAR, scope VARCHAR, job_id VARCHAR,
        gpu_type VARCHAR, num_gpus DOUBLE, num_cpus DOUBLE, submit_ts TIMESTAMP,
        start_ts TIMESTAMP, end_ts TIMESTAMP, status VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS samples (
        ingest_id BIGINT, cluster VARCHAR, series_id VARCHAR, ts TIMESTAMP, value DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS capacity (
        ingest_id BIGINT, cluster VARCHAR, scope VARCHAR, gpu_type VARCHAR,
        valid_from TIMESTAMP, gpus DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS rejects (
        ingest_id BIGINT, path VARCHAR, line BIGINT, column_name VARCHAR, reason VARCHAR,
        raw VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS clusters (
        cluster VARCHAR PRIMARY KEY, freq_s INTEGER, fill VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS series (
        series_id VARCHAR PRIMARY KEY, source VARCHAR, cluster VARCHAR, scope VARCHAR,
        metric VARCHAR, freq VARCHAR, first_ts TIMESTAMP, last_ts TIMESTAMP, n_points BIGINT,
        n_filled BIGINT, unit VARCHAR, aggregation VARCHAR, fill VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS series_values (
        cluster VARCHAR, series_id VARCHAR, ts TIMESTAMP, value DOUBLE, filled BOOLEAN)""",
)


class Store:
    """A PRISM store on one DuckDB connection.

    Args:
        connection: an open DuckDB connection; the schema is created on it if missing.
        init_schema: create or check the schema (off for cursors of an already open store).

    Raises:
        PrismError: when the database was written by a newer PRISM schema.
    """

    def __init__(self, connection: duckdb.DuckDBPyConnection, *, init_schema: bool = True) -> None:
        self._conn = connection
        self._lock = threading.RLock()
        self._in_transaction = False
        if init_schema:
            self._init_schema()

    @classmethod
    def open(
        cls, path: str | Path = ":memory:", *, read_only: bool = False,
        memory_limit: str | None = None,
    ) -> Store:
        """Open or create the store at ``path`` (``:memory:`` for a throw-away one).

        ``memory_limit`` (e.g. ``"1GB"``; default ``PRISM_MEMORY_LIMIT``, else DuckDB's 80 % of
        RAM) bounds DuckDB's memory: larger joins and aggregations spill to disk next to the
        file.

        Raises:
            ConfigError: when the file cannot be opened (locked by another process, not a
                DuckDB file, missing folder).
        """
        target = str(path)
        if target != ":memory:":
            parent = Path(target).expanduser().resolve().parent
            if not parent.exists():
                raise ConfigError(
                    f"cannot open store {target!r}: folder {str(parent)!r} does not exist; "
                    "create it or pass another --db"
                )
        try:
            # Rows carry their order in columns (ts, _line): DuckDB may insert in parallel.
            config: dict[str, str | bool | int | float | list[str]] = {
                "preserve_insertion_order": False}
            limit = memory_limit or get_settings().memory_limit
            if limit:
                config["memory_limit"] = limit
            conn = duckdb.connect(target, read_only=read_only, config=config)
        except duckdb.Error as exc:
            raise ConfigError(
                f"cannot open store {target!r}: {exc}. Fix: close the other process using it, "
                "or pass another --db / PRISM_DB"
            ) from exc
        return cls(conn, init_schema=not read_only)

    def cursor(self) -> Store:
        """A store on a new cursor of the same database, for use by another thread."""
        return Store(self._conn.cursor(), init_schema=False)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one way SQL runs -------------------------------------------------------------
    def execute(self, query: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyConnection:
        """Run one SQL statement with ``?`` parameters bound from ``params``.

        Returns:
            The cursor, on which ``.df()``, ``.fetchall()``, ``.fetchone()``, ``.arrow()`` work.
        """
        with self._lock:
            return self._conn.execute(query, list(params) if params is not None else None)

    def fetch_df(self, query: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run a query and return its result as a pandas frame."""
        return self.execute(query, params).df()

    def fetch_all(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a query and return all rows."""
        return self.execute(query, params).fetchall()

    def fetch_one(self, query: str, params: Sequence[Any] | None = None) -> tuple[Any, ...] | None:
        """Run a query and return its first row (or ``None``)."""
        rows = self.execute(query, params).fetchall()
        return rows[0] if rows else None

    def insert_frame(
        self,
        table: str,
        frame: pd.DataFrame | pa.Table,
        columns: Sequence[str],
        constants: dict[str, Any] | None = None,
    ) -> int:
        """Append the named ``columns`` of ``frame`` (pandas or Arrow) to ``table``.

        Args:
            table: a canonical table.
            frame: the rows; columns matched by name.
            columns: the columns of ``frame`` to insert.
            constants: column -> value set on every row (bound as parameters).

        Returns:
            The number of rows inserted.
        """
        if table not in _INSERTABLE:
            raise PrismError(f"insert_frame into unknown table {table!r}")
        constants = constants or {}
        view = f"_prism_insert_{threading.get_ident()}"
        target = ", ".join(f'"{c}"' for c in [*constants, *columns])
        source = ", ".join(["?"] * len(constants) + [f'"{c}"' for c in columns])
        with self._lock:
            self._settle()
            self._conn.register(view, frame)
            try:
                self.execute(f'INSERT INTO {table} ({target}) SELECT {source} FROM "{view}"',
                             list(constants.values()))
            finally:
                self._conn.unregister(view)
        return len(frame) if isinstance(frame, pd.DataFrame) else frame.num_rows

    def _settle(self) -> None:
        # DuckDB refuses register() while a result of an earlier execute() is unread.
        self._conn.complete()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Store]:
        """All statements inside run in one transaction: committed together or not at all."""
        with self._lock:
            if self._in_transaction:
                yield self
                return
            self.execute("BEGIN TRANSACTION")
            self._in_transaction = True
            try:
                yield self
            except BaseException:
                self._in_transaction = False
                self.execute("ROLLBACK")
                raise
            self._in_transaction = False
            self.execute("COMMIT")

    # -- schema ---------------------------------------------------------------------------
    def _init_schema(self) -> None:
        with self.transaction():
            for statement in _DDL:
                self.execute(statement)
            row = self.fetch_one("SELECT value FROM meta WHERE key = 'schema_version'")
            if row is None:
                self.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
                )
            elif int(row[0]) > SCHEMA_VERSION:
                raise PrismError(
                    f"this store has schema version {row[0]}, newer than this PRISM "
                    f"({SCHEMA_VERSION}); upgrade PRISM or use another --db"
                )

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the store."""
        row = self.fetch_one("SELECT value FROM meta WHERE key = 'schema_version'")
        return int(row[0]) if row else 0

    # -- reads used by services -------------------------------------------------------------
    def list_series(
        self, *, cluster: str | None = None, scope: str | None = None, metric: str | None = None
    ) -> pd.DataFrame:
        """The series catalogue, optionally filtered by cluster, scope and metric."""
        return self.fetch_df(
            """SELECT series_id, source, cluster, scope, metric, freq, first_ts, last_ts,
                      n_points, n_filled, unit, aggregation, fill
               FROM series
               WHERE (?::VARCHAR IS NULL OR cluster = ?) AND (?::VARCHAR IS NULL OR scope = ?)
                 AND (?::VARCHAR IS NULL OR metric = ?)
               ORDER BY series_id""",
            [cluster, cluster, scope, scope, metric, metric],
        )

    def require_series(self, series_ids: Sequence[str]) -> None:
        """Check that every named series is in the store.

        Raises:
            SeriesNotFound: for the first missing one, with the closest ids there are.
        """
        ids = list(dict.fromkeys(series_ids))
        known = {r[0] for r in self.fetch_all(
            "SELECT series_id FROM series WHERE list_contains(?, series_id)", [ids])}
        missing = [s for s in ids if s not in known]
        if not missing:
            return
        every = [r[0] for r in self.fetch_all("SELECT series_id FROM series")]
        close = difflib.get_close_matches(missing[0], every, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else (
            "; `prism series list` shows the series there are")
        raise SeriesNotFound(f"series {missing[0]!r} is not in the store{hint}")

    def load_panel(
        self,
        series_ids: Sequence[str] | None = None,
        *,
        start: pd.Timestamp | None = None,
        end: pd.Timestamp | None = None,
    ) -> pd.DataFrame:
        """Return the panel (``series_id, ts, value``) of the named series, or of all series.

        Raises:
            SeriesNotFound: when a named series is not in the store.
        """
        if series_ids is not None:
            self.require_series(series_ids)
        frame = self.fetch_df(
            """SELECT series_id, ts, value FROM series_values
               WHERE (?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], series_id))
                 AND (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)
               ORDER BY series_id, ts""",
            [series_ids and list(series_ids), series_ids and list(series_ids),
             start, start, end, end],
        )
        frame["ts"] = frame["ts"].astype("datetime64[ns]")
        frame["value"] = frame["value"].astype("float64")
        return frame


_INSERTABLE = {"jobs", "samples", "capacity", "rejects", "series_values", "series", "ingests"}
