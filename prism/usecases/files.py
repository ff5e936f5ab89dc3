"""Files a use case writes: the one check of an output name, and frames as CSV/Parquet/JSON."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prism.errors import ConfigError
from prism.frames import json_records

if TYPE_CHECKING:
    import pandas as pd

#: The file types a frame is written to.
FRAME_SUFFIXES = (".csv", ".parquet", ".json")
#: The formats a frame is encoded in (``--format``), as :data:`FRAME_SUFFIXES` without dot.
FRAME_FORMATS = tuple(s.lstrip(".") for s in FRAME_SUFFIXES)
#: Times in CSV files (UTC, no zone: the panel's own times).
CSV_TIME = "%Y-%m-%dT%H:%M:%S"


def output_path(output: str | Path, suffixes: Sequence[str], *, verb: str = "write",
                ignore_case: bool = False) -> Path:
    """``output`` as a path, once its extension and folder are known to be usable.

    Args:
        output: the file to write.
        suffixes: the extensions allowed (lower case), e.g. ``(".csv", ".parquet")``.
        verb: what is done to it, for the message (``write``, ``draw``).
        ignore_case: accept ``.PNG`` for ``.png``.

    Raises:
        ConfigError: for another extension, or a folder that does not exist.
    """
    path = Path(output)
    suffix = path.suffix.lower() if ignore_case else path.suffix
    if suffix not in suffixes:
        names = [s for s in suffixes if s not in (".htm",)]
        allowed = ", ".join(names[:-1]) + (" or " if len(names) > 1 else "") + names[-1]
        raise ConfigError(f"cannot {verb} {str(path)!r}: use a {allowed} file name")
    if not path.parent.exists():
        raise ConfigError(f"folder {str(path.parent)!r} does not exist; create it first")
    return path


def frame_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """``frame`` encoded as ``csv`` (UTC times, no zone), ``parquet`` or ``json`` (records,
    UTC times with ``Z``).

    Raises:
        ConfigError: for another format.
    """
    if fmt == "csv":
        return frame.to_csv(index=False, date_format=CSV_TIME).encode("utf-8")
    if fmt == "parquet":
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()
    if fmt == "json":
        return json_records(frame, indent=1).encode("utf-8")
    raise ConfigError(f"unknown format {fmt!r}: use {', '.join(FRAME_FORMATS)}")


def output_format(output: str | Path, fmt: str | None,
                  suffixes: Sequence[str] = FRAME_SUFFIXES) -> str:
    """The format a frame is written in: ``fmt`` (``--format``), or the suffix of ``output``;
    ``csv`` for ``-`` (standard output) without ``fmt``.

    Raises:
        ConfigError: for a format the suffix contradicts, or an unknown one.
    """
    formats = [s.lstrip(".") for s in suffixes]
    if fmt is not None and fmt not in formats:
        raise ConfigError(f"--format {fmt!r}: use {', '.join(formats)}")
    if str(output) == "-":
        return fmt or "csv"
    suffix = Path(output).suffix.lstrip(".")
    if fmt is not None and suffix != fmt:
        raise ConfigError(f"--format {fmt} but the file {str(output)!r} ends in "
                          f"'.{suffix}': name a .{fmt} file, or drop --format")
    return suffix


def write_frame(frame: pd.DataFrame, output: str | Path, *, fmt: str | None = None) -> Path:
    """Write a frame to ``.csv``, ``.parquet`` or ``.json`` (records, UTC times with ``Z``).

    Args:
        frame: the frame.
        output: the file.
        fmt: the format (``--format``), which must agree with the file's suffix.

    Raises:
        ConfigError: for another extension, a missing folder or a contradicting ``fmt``.
    """
    path = output_path(output, FRAME_SUFFIXES)
    path.write_bytes(frame_bytes(frame, output_format(path, fmt)))
    return path
