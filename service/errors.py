"""The one mapping from PRISM's errors to HTTP answers: ``{"detail": message}``.

- ``SeriesNotFound`` -> 404
- ``IngestError``, ``DataContractError``, ``ConfigError`` -> 422 (the input cannot be used)
- ``PayloadTooLarge`` -> 413
- ``ModelNotReady`` -> 503 with ``Retry-After``
- any other ``PrismError`` -> 400
"""

from __future__ import annotations

import logging

from fastapi import Request
from fastapi.responses import JSONResponse

from prism.errors import (
    ConfigError,
    DataContractError,
    IngestError,
    ModelNotReady,
    NotFittedError,
    PrismError,
    SeriesNotFound,
)

logger = logging.getLogger(__name__)


class PayloadTooLarge(PrismError):
    """A request body or upload over the configured size limit (raised by
    :class:`service.middleware.BodyLimit`; a :class:`PrismError`, so the one handler maps
    it)."""


_STATUS: tuple[tuple[type[PrismError], int], ...] = (
    (SeriesNotFound, 404),
    (ModelNotReady, 503),
    (NotFittedError, 503),
    (PayloadTooLarge, 413),
    (IngestError, 422),
    (DataContractError, 422),
    (ConfigError, 422),
)


def status_of(exc: PrismError) -> int:
    """The HTTP status of a PRISM error."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 400


def error_response(exc: PrismError) -> JSONResponse:
    """The JSON answer to a PRISM error (with ``Retry-After`` for a model not ready)."""
    status = status_of(exc)
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, ModelNotReady) else None
    if status >= 500 or status == 413:
        logger.info("%d: %s", status, exc)
    return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)


async def handle_prism_error(request: Request, exc: Exception) -> JSONResponse:
    """Exception handler of the app for every :class:`PrismError`."""
    assert isinstance(exc, PrismError)
    return error_response(exc)
