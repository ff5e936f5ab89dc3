"""``prism ingest -``: the data on standard input, spooled to a file the readers take.

The readers read files (some twice: a fast reader, then a checked one that names lines), so
stdin is written to a temporary file first; messages and reports name it ``<stdin>``.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from prism.errors import ConfigError, DataContractError, IngestError

#: What messages call the data of ``-``.
NAME = "<stdin>"
#: The path that means standard input.
DASH = "-"


@dataclass
class Spool:
    """The paths to read (``-`` replaced by the spooled file) and the names to show."""

    paths: list[str]
    _names: dict[str, str] = field(default_factory=dict)

    def name(self, text: str) -> str:
        """``text`` with the spooled file's path replaced by ``<stdin>``."""
        for path, shown in self._names.items():
            text = text.replace(path, shown)
        return text


@contextmanager
def spooled(paths: Sequence[str]) -> Iterator[Spool]:
    """Spool stdin to a temporary file when ``paths`` holds ``-``; errors raised inside the
    block name ``<stdin>``, not the temporary file.

    Raises:
        ConfigError: for ``-`` given twice, or stdin on a terminal (nothing piped).
    """
    if DASH not in paths:
        yield Spool(list(paths))
        return
    if list(paths).count(DASH) > 1:
        raise ConfigError("- (stdin) can be read once; name it once")
    if sys.stdin is None or sys.stdin.isatty():
        raise ConfigError("- reads the data from stdin, which is a terminal: pipe it in, e.g. "
                          "sacct -P -a -o ... | prism ingest - --format slurm-sacct")
    data = sys.stdin.buffer.read()
    with tempfile.TemporaryDirectory(prefix="prism-stdin-") as tmp:
        # the readers tell compressed and Parquet files by their suffix
        suffix = ".gz" if data[:2] == b"\x1f\x8b" else (".parquet" if data[:4] == b"PAR1"
                                                        else "")
        path = Path(tmp) / f"{NAME}{suffix}"
        path.write_bytes(data)
        spool = Spool([str(path) if p == DASH else p for p in paths],
                      {str(path): NAME, tmp: NAME})
        renamed = _Renamed(spool, tmp)
        handlers = list(logging.getLogger().handlers)
        for handler in handlers:  # the readers' warnings name the file too
            handler.addFilter(renamed)
        try:
            yield spool
        except IngestError as exc:
            raise IngestError(spool.name(exc.message),
                              path=None if exc.path is None else spool.name(exc.path),
                              line=exc.line, column=exc.column,
                              fix=exc.fix and spool.name(exc.fix)) from exc
        except (ConfigError, DataContractError) as exc:
            if tmp not in str(exc):
                raise
            raise type(exc)(spool.name(str(exc))) from exc
        finally:
            for handler in handlers:
                handler.removeFilter(renamed)


class _Renamed(logging.Filter):
    """Log records that name the spooled file name ``<stdin>``."""

    def __init__(self, spool: Spool, tmp: str) -> None:
        super().__init__()
        self._spool = spool
        self._tmp = tmp

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if self._tmp in text:
            record.msg, record.args = self._spool.name(text), None
        return True
