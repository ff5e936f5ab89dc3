"""What the ingest tests check of a refused file, as a user meets it: ``prism ingest`` exits
with 1 and a message (no traceback), and every table an ingest writes to is as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prism.cli import main
from prism.store import Store

#: Every table an ingest writes to.
TABLES = ("ingests", "jobs", "samples", "capacity", "rejects", "clusters", "series",
          "series_values")


def ingest(db: Path, path: Path, fmt: str, *extra: str) -> int:
    """``prism --db DB ingest PATH --format FMT -q ...``: its exit code."""
    return main(["--db", str(db), "ingest", str(path), "--format", fmt, "-q", *extra])


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table an ingest writes to."""
    with Store.open(db) as store:
        return {t: store.fetch_all(f"SELECT * FROM {t} ORDER BY ALL") for t in TABLES}


def refused(db: Path, path: Path, fmt: str, capsys: pytest.CaptureFixture[str],
            *extra: str) -> str:
    """Ingest a bad file: exit code 1, no traceback, the store as it was; the message, its
    whitespace collapsed."""
    before = snapshot(db)
    capsys.readouterr()
    assert ingest(db, path, fmt, *extra) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: ")
    assert snapshot(db) == before
    return " ".join(err.split())
