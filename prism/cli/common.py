"""What the CLI's command modules share: the consoles, tables, ``KEY=VALUE`` options,
quantile lists, the help formatter, ``--output -`` and the printing of a forecast frame.

Heavy modules (pandas) are imported on use: ``prism --help`` imports this module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console

from prism.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

# Wide tables when the output is a file or a pipe (rich would assume 80 columns).
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)

#: ``--output -``: the data goes to standard output.
STDOUT = "-"


class HelpFormatter(argparse.HelpFormatter):
    """Says each option's default, unless its help does already or it has none (``None``,
    a flag's ``False``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (action.option_strings and default not in (None, False, argparse.SUPPRESS)
                and "default" not in text.lower() and not isinstance(
                    action, argparse._HelpAction | argparse._VersionAction)):
            text += " (default: %(default)s)"
        return text


def messages(output: str | None) -> Console:
    """Where a command's messages go: stderr when the data goes to stdout (``--output -``)."""
    return err if output == STDOUT else out


def progress_wanted(quiet: bool) -> bool:
    """Progress bars are drawn on a terminal only, and not with ``-q``."""
    return not quiet and err.is_terminal


@contextmanager
def progress_bar(enabled: bool, *, eta: bool = False,
                 ) -> Iterator[Callable[[str, int, int], None] | None]:
    """A rich progress bar on stderr, one line per stage: yields ``update(stage, done,
    total)``, or None when not ``enabled`` or stderr is no terminal (a log file or a pipe
    gets no bars: :func:`progress_wanted`)."""
    if not enabled or not err.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("{task.description:<8}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn()]
    if eta:
        columns += [TextColumn("eta"), TimeRemainingColumn()]
    with Progress(*columns, console=err, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            # total 0: not known yet (rows of a streamed file): an indeterminate bar
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total or None)
            bar.update(tasks[stage], completed=done, total=max(total, done) or None)

        yield update


def pairs(values: Sequence[str] | None, flag: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {item!r} is not KEY=VALUE, e.g. {flag} job_id=JobID")
        found[key.strip()] = value.strip()
    return found


def table(frame: pd.DataFrame, title: str | None = None) -> Table:
    import pandas as pd
    from rich.table import Table

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


def json_default(value: Any) -> Any:
    """``json.dumps``'s ``default``: times as UTC text with ``Z``, other objects as text."""
    from prism.frames import utc_text

    text = utc_text(value)
    return text if text is not value else str(value)


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout, times in UTC with ``Z`` (as the API writes them)."""
    out.print_json(json.dumps(data, default=json_default))


def print_records(frame: pd.DataFrame) -> None:
    """A frame as a JSON array of records on stdout, times in UTC with ``Z``."""
    from prism.frames import json_records

    out.print_json(json_records(frame))


def write_stdout(data: bytes) -> None:
    """Bytes on standard output, as they are (CSV, JSON or Parquet of ``--output -``)."""
    try:
        sys.stdout.flush()
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:  # a text stream without bytes (some test harnesses)
            sys.stdout.write(data.decode("utf-8", errors="replace"))
        else:
            buffer.write(data)
            buffer.flush()
    except BrokenPipeError:  # `| head` has read what it wanted: stop quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        os.close(devnull)


def write_output(frame: pd.DataFrame, output: str, fmt: str | None) -> str:
    """Write ``frame`` to the file ``output``, or to stdout for ``-``, in ``fmt`` (``--format``,
    else the file's suffix, else csv); returns where it went, for the message.

    Raises:
        ConfigError: for a bad file name, a missing folder or a contradicting ``fmt``.
    """
    from prism.usecases.files import frame_bytes, output_format, write_frame

    if output == STDOUT:
        write_stdout(frame_bytes(frame, output_format(output, fmt)))
        return "stdout"
    return str(write_frame(frame, output, fmt=fmt))


def check_output(output: str | None, fmt: str | None) -> None:
    """Fail on an ``--output`` that :func:`write_output` could not write, before any work is
    done (a fit, a saved model): ``--format`` without ``--output``, a file name of another
    type, a ``--format`` its suffix contradicts, a folder that is missing, not a folder or
    not writable.

    Raises:
        ConfigError: saying what is wrong with ``--output`` and how to fix it.
    """
    from prism.usecases.files import FRAME_SUFFIXES, output_format, output_path

    if fmt is not None and not output:
        raise ConfigError(f"--format {fmt} needs --output FILE or --output - (stdout)")
    if not output or output == STDOUT:
        return
    path = output_path(output, FRAME_SUFFIXES)
    output_format(path, fmt)
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"cannot write {output!r}: {str(folder)!r} is not a folder; name a "
                          "file in a folder")
    if path.is_dir():
        raise ConfigError(f"cannot write {output!r}: it is a folder; name a file in it, e.g. "
                          f"{str(path / ('forecast' + path.suffix))!r}")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists()
                                                    and not os.access(path, os.W_OK)):
        where = "the file" if path.exists() else f"the folder {str(folder)!r}"
        raise ConfigError(f"cannot write {output!r}: {where} is not writable; pick another "
                          "--output")


def print_forecast(frame: pd.DataFrame, output: str | None, *, source: str = "",
                   fmt: str | None = None) -> None:
    """Write a forecast frame to ``output`` (CSV, Parquet or JSON; ``-``: stdout) and say so
    (on stderr for stdout), or print it."""
    model = frame["model"].iloc[0]
    if output:
        where = write_output(frame, output, fmt)
        messages(output).print(f"wrote {len(frame):,} rows ({frame['series_id'].nunique()} "
                               f"series, model {model}) to {where}", markup=False)
    else:
        out.print(table(frame, title=f"forecast ({model}{', from ' + source if source else ''})"))
