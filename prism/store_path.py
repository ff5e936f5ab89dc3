"""Checks on the path given as a store (``--db``, ``PRISM_DB``) before DuckDB opens it."""

from __future__ import annotations

from pathlib import Path

from prism.errors import ConfigError

#: Extensions of data files that DuckDB would open as a throw-away database with the file
#: attached as a view (an ingest into it would be lost).
_DATA_SUFFIXES = {".csv", ".tsv", ".txt", ".parquet", ".json", ".jsonl", ".gz", ".zip", ".xlsx"}


def check_store_path(path: Path) -> None:
    """Refuse a ``--db`` that is not a DuckDB store (or a new path for one).

    Raises:
        ConfigError: for a data file (CSV, Parquet, ...), or an existing file whose header is
            not DuckDB's.
    """
    if path.is_dir():
        raise ConfigError(f"--db {str(path)!r} is a folder; pass a store file such as "
                          f"{str(path / 'prism.duckdb')!r}")
    suffixes = {s.lower() for s in path.suffixes}
    if suffixes & _DATA_SUFFIXES:
        raise ConfigError(
            f"--db {str(path)!r} looks like a data file, not a store: ingest it with "
            f"`prism --db prism.duckdb ingest {path} --format FORMAT`")
    if path.is_file() and path.stat().st_size > 0:
        with path.open("rb") as fh:
            header = fh.read(12)
        if header[8:12] != b"DUCK":
            raise ConfigError(
                f"--db {str(path)!r} is not a DuckDB store (its header is not DuckDB's): pass "
                "the store's file or a new path")
