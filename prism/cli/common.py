"""What the CLI's command modules share: the consoles, tables, ``KEY=VALUE`` options,
quantile lists and the printing of a forecast frame."""

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


def quantile_list(text: str) -> list[float]:
    """``--quantiles 0.5,0.9,0.99`` as numbers.

    Raises:
        ConfigError: for anything but a comma-separated list of numbers.
    """
    try:
        return [float(q) for q in text.split(",") if q.strip()]
    except ValueError as exc:
        raise ConfigError(f"--quantiles {text!r} is not a list of numbers such as "
                          "0.5,0.9,0.99") from exc


def print_forecast(frame: pd.DataFrame, output: str | None, *, source: str = "") -> None:
    """Write a forecast frame to ``output`` (CSV, Parquet or JSON) and say so, or print it."""
    from prism.usecases.files import write_frame

    model = frame["model"].iloc[0]
    if output:
        path = write_frame(frame, output)
        out.print(f"wrote {len(frame):,} rows ({frame['series_id'].nunique()} series, model "
                  f"{model}) to {path}")
    else:
        out.print(table(frame, title=f"forecast ({model}{', from ' + source if source else ''})"))
