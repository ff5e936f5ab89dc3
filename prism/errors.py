"""The exceptions PRISM raises. Every one is a :class:`PrismError`.

Messages say what is wrong, where (file, line, column or series) and how to fix it, so that the
CLI and the API can show them to a user as they are.
"""

from __future__ import annotations


class PrismError(Exception):
    """Base class of every error PRISM raises on purpose."""


class ConfigError(PrismError):
    """A setting or a command-line option has a value PRISM cannot use."""


class DataContractError(PrismError):
    """A frame does not follow a data contract (panel, forecast, jobs)."""


class SeriesNotFound(PrismError):
    """A series id that is not in the store."""


class NotFittedError(PrismError):
    """A model was asked to predict before it was fitted."""


class FileScanError(PrismError):
    """DuckDB's own reader could not take a file as declared (a short row, bad UTF-8, a
    truncated gzip, a Parquet column that does not cast). The store's transaction is aborted:
    the ingest rolls back and reads the files again with the checked reader, which names the
    row."""


class IngestError(PrismError):
    """Input that cannot be ingested, located as precisely as the format allows.

    Args:
        message: what is wrong.
        path: the file, if any.
        line: 1-based line number in the file (header is line 1 for CSV), if known.
        column: the column or field, if known.
        fix: how to fix it.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.fix = fix
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.column is not None:
            where.append(f"column '{self.column}'")
        text = (", ".join(where) + ": " if where else "") + self.message
        if self.fix:
            text += f". Fix: {self.fix}"
        return text


class ModelNotReady(PrismError):
    """A model is being fitted or updated; ask again after ``retry_after`` seconds.

    Args:
        message: what is being prepared, and for which series.
        retry_after: seconds after which the answer is likely ready (at least 1).
    """

    def __init__(self, message: str, *, retry_after: float) -> None:
        self.retry_after = max(1, int(-(-retry_after // 1)))  # whole seconds, rounded up
        super().__init__(message)
