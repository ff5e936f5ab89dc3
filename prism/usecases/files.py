"""Files a use case writes: the one check of an output name, and frames as CSV/Parquet/JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from prism.errors import ConfigError

#: The file types a frame is written to.
FRAME_SUFFIXES = (".csv", ".parquet", ".json")


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


def write_frame(frame: pd.DataFrame, output: str | Path) -> Path:
    """Write a frame to ``.csv``, ``.parquet`` or ``.json`` (records, ISO times).

    Raises:
        ConfigError: for another extension or a missing folder.
    """
    path = output_path(output, FRAME_SUFFIXES)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_json(path, orient="records", date_format="iso", indent=1)
    return path
