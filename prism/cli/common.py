"""What the CLI's command modules share: the consoles, tables and ``KEY=VALUE`` options."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd
from rich.console import Console
from rich.table import Table

from prism.errors import ConfigError

# Wide tables when the output is a file or a pipe (rich would assume 80 columns).
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def pairs(values: Sequence[str] | None, flag: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {item!r} is not KEY=VALUE, e.g. {flag} job_id=JobID")
        found[key.strip()] = value.strip()
    return found


def table(frame: pd.DataFrame, title: str | None = None) -> Table:
    shown = Table(title=title, show_lines=False)
    for col in frame.columns:
        shown.add_column(str(col), justify="right" if pd.api.types.is_numeric_dtype(
            frame[col]) else "left")
    for row in frame.itertuples(index=False):
        shown.add_row(*("" if pd.isna(v) else (f"{v:g}" if isinstance(v, float) else str(v))
                        for v in row))
    return shown
