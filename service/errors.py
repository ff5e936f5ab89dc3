"""The one mapping from PRISM's errors to HTTP answers: ``{"detail": message}``.

- ``SeriesNotFound`` -> 404
- ``IngestError``, ``DataContractError``, ``ConfigError`` -> 422 (the input cannot be used)
- ``PayloadTooLarge`` -> 413
- ``ModelNotReady`` -> 503 with ``Retry-After``
- any other ``PrismError`` -> 400
- a write that failed because the disk is full (``ENOSPC``, also behind a ``PrismError``, as
  an ingest wraps what its writes raise) -> 507, saying nothing of the request was stored
- a body that is not JSON -> 400 naming where it stops being JSON; other request fields
  pydantic refuses -> 422 (FastAPI's list of errors); a query parameter or body field the
  route does not take -> 422 naming the route's close ones and all it takes
- anything else -> 500 ``{"detail": ...}`` (the traceback goes to the server's log)

The use cases are shared with the CLI, and their messages say how to fix the input in the
CLI's words (``pass --on-error skip``): :func:`api_wording` names the API's parameters instead
(``on_error=skip``).
"""

from __future__ import annotations

import difflib
import errno
import json
import logging
import math
import re
from typing import Any

from fastapi import Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
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
from service.deps import route_fields
from service.schemas import IngestQuery, _is_number

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


def error_response(exc: PrismError, detail: str | None = None) -> JSONResponse:
    """The JSON answer to a PRISM error (with ``Retry-After`` for a model not ready); its
    ``detail`` is the error's message unless given."""
    if _disk_full(exc):
        return _disk_full_response(exc)
    status = status_of(exc)
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, ModelNotReady) else None
    if status >= 500 or status == 413:
        logger.info("%d: %s", status, exc)
    return JSONResponse({"detail": str(exc) if detail is None else detail},
                        status_code=status, headers=headers)


async def handle_prism_error(request: Request, exc: Exception) -> JSONResponse:
    """Exception handler of the app for every :class:`PrismError`: its message with the
    CLI's flags named as the route's parameters (:func:`api_wording`)."""
    assert isinstance(exc, PrismError)
    return error_response(exc, api_wording(str(exc), request))


#: A CLI flag, and the word after it, which may be its value (``--on-error skip``).
_FLAG = re.compile(r"(?<![\w-])--(no-)?([a-z][a-z0-9]*(?:-[a-z0-9]+)*)"
                   r"(?: ('[^']*'|\"[^\"]*\"|[^\s,;()]*[^\s,;:().]))?")
#: A CLI command the message tells an operator to run (`prism refit --all`, (prism derive
#: --fill zero)): its flags are the CLI's, and stay.
_COMMAND = re.compile(r"`prism [^`]*`|\bprism [a-z][a-z-]*[^,;()`\n]*")
#: Where series are derived (``--freq``, ``--fill``): a message of another route may say how
#: to ingest again.
_INGEST = "POST /v1/ingest"


def api_wording(message: str, request: Request) -> str:
    """``message`` with each CLI flag named as the API parameter a client passes instead.

    A flag the route takes becomes its query parameter (``--on-error skip`` ->
    ``on_error=skip``, ``--pool`` -> ``pool=true``, ``--no-record`` -> ``record=false``) or
    body field (``"model": "naive"``); one only ``POST /v1/ingest`` takes (``--fill zero`` in
    a forecast's message) is named with that route. Flags inside a CLI command the message
    quotes (`prism refit --all`), and flags without an API twin (``--db``), stay.

    Args:
        message: a message of the use cases, worded for the CLI.
        request: the request it answers (its route names the parameters).
    """
    if "--" not in message:
        return message
    route = request.scope.get("route")
    sources = ((route_fields(route, "query"), False, ""), (route_fields(route, "body"), True, ""),
               (_ingest_fields(), False, _INGEST))
    commands = [m.span() for m in _COMMAND.finditer(message)]
    named: set[str] = set()

    def rename(match: re.Match[str]) -> str:
        if any(start <= match.start() < end for start, end in commands):
            return match.group(0)
        negated, flag, value = match.group(1) is not None, match.group(2), match.group(3)
        name = flag.replace("-", "_")
        follows = message[match.end():match.end() + 1]
        for fields, in_body, where in sources:
            if name in fields:
                text, used = _parameter(name, fields[name], negated, value, follows,
                                        in_body=in_body)
                if text is None:
                    return match.group(0)
                if where and name not in named:
                    named.add(name)
                    text += f" (of {where})"
                return text if used or value is None else f"{text} {value}"
        return match.group(0)

    return _FLAG.sub(rename, message)


def _ingest_fields() -> dict[str, dict[str, Any]]:
    return dict(IngestQuery.model_json_schema()["properties"])


def _parameter(name: str, schema: dict[str, Any], negated: bool, value: str | None,
               follows: str, *, in_body: bool) -> tuple[str | None, bool]:
    """How an API client writes a flag: ``(text, whether the value was used)``; ``None``
    for a ``--no-...`` flag whose parameter is not a switch."""
    kinds = [schema, *schema.get("anyOf", ())]
    if any(k.get("type") == "boolean" for k in kinds):
        setting = "false" if negated else "true"
        return (f'"{name}": {setting}' if in_body else f"{name}={setting}"), False
    if negated:
        return None, False
    choices = {str(c) for k in kinds for c in k.get("enum", ())}
    is_list = any(k.get("type") == "array" for k in kinds)
    if value is None or not (
            value[0] in "'\"" or value[0].isdigit() or value[0].isupper() or value in choices
            or any(c in value for c in "=-_{<") or any(c.isdigit() for c in value)
            or (is_list and follows in (":", ","))):
        return name, False  # the word after the flag is the message's, not a value
    if in_body:
        text = value.strip("'\"")
        return f'"{name}": {text if _is_number(text) else json.dumps(text)}', True
    return f"{name}={value}", True


async def handle_validation_error(request: Request, exc: Exception) -> JSONResponse:
    """Exception handler of the app for :class:`RequestValidationError`: a body that is not
    JSON is 400 ``{"detail": "...at line L column C..."}``; other refused fields keep
    FastAPI's 422 list."""
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    for error in errors:
        if error.get("type") == "json_invalid":
            return JSONResponse({"detail": _json_error(error, exc.body)}, status_code=400)
    unknown = {e["loc"][0] for e in errors if _unknown_field(e)}
    if unknown:
        names = {where: _field_names(request, where) for where in unknown}
        errors = [{**e, "msg": _unknown_message(str(e["loc"][0]), str(e["loc"][1]),
                                                names[e["loc"][0]])}
                  if _unknown_field(e) else e for e in errors]
    # a refused NaN or Infinity (JSON bodies may hold them) is shown as text: JSON cannot
    # hold it, and the 422 itself failed as a 500 ("Out of range float values")
    errors = [{**e, "input": _printable(e.get("input"))} if "input" in e else e
              for e in errors]
    exc = RequestValidationError(errors, body=exc.body)
    return await request_validation_exception_handler(request, exc)


def _printable(value: Any) -> Any:
    """``value`` with its non-finite floats (at any depth) as text (``'NaN'``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value).replace("nan", "NaN").replace("inf", "Infinity")
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    return value


def _unknown_field(error: dict[str, Any]) -> bool:
    """A query parameter or a top-level body field the route does not take."""
    loc: tuple[Any, ...] = tuple(error.get("loc") or ())
    return (error.get("type") == "extra_forbidden" and len(loc) == 2
            and loc[0] in ("query", "body"))


def _unknown_message(where: str, name: str, names: list[str]) -> str:
    """``unknown query parameter 'quantiles': did you mean 'quantile'? (this route takes
    ...)``, or ``unknown field ...`` of a body."""
    close = difflib.get_close_matches(name, names, n=2, cutoff=0.6)
    hint = f": did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    takes = f" (this route takes {', '.join(names)})" if names else ""
    what = "query parameter" if where == "query" else "field"
    return f"unknown {what} {name!r}{hint}{takes}"


def _field_names(request: Request, where: str) -> list[str]:
    """The query parameters (``where="query"``) or top-level body fields (``"body"``) the
    request's route takes (:func:`service.deps.route_fields`)."""
    return sorted(route_fields(request.scope.get("route"), where))


def unexpected_error_response(exc: Exception) -> JSONResponse:
    """The JSON answer to an exception no handler took (given by
    :class:`service.middleware.ServerErrors`, which logs the traceback): 507 for a full disk,
    else 500, as ``{"detail": ...}`` rather than a text page or a dropped connection."""
    if _disk_full(exc):
        return _disk_full_response(exc)
    text = (str(exc).splitlines() or [""])[0][:300]
    return JSONResponse(
        {"detail": f"the server failed on this request ({type(exc).__name__}: {text}); it "
                   "is logged on the server. Other requests are not affected: send it again, "
                   "or report it with the log if it fails again"},
        status_code=500)


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc``, or an error behind it, is a write refused for want of disk space."""
    return _disk_full(exc)


#: ``strerror`` of a full disk or quota, as DuckDB and the OS word it in messages.
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded")


def _from_io(exc: BaseException) -> bool:
    """An error of the OS or of DuckDB, whose message can tell a full disk (a PRISM error's
    message can echo what a client sent, such as ``end='Disk quota exceeded'``)."""
    module = type(exc).__module__ or ""
    return isinstance(exc, OSError) or module.split(".")[0] in ("duckdb", "_duckdb")


def _disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` or an error behind it (``raise ... from``) is a full disk."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if _from_io(current) and any(text in str(current) for text in _DISK_FULL_TEXT):
            return True
        current = current.__cause__ or current.__context__
    return False


def _disk_full_response(exc: BaseException) -> JSONResponse:
    logger.error("507: a write failed, the disk is full: %s", exc)
    return JSONResponse(
        {"detail": "the server's disk is full (No space left on device): the write failed "
                   "and nothing of this request was stored (the store keeps what it held "
                   "before); free space on the disk of the store (PRISM_DB) and of the "
                   "temporary folder, then send the request again"},
        status_code=507)


def _json_error(error: dict[str, object], body: object) -> str:
    """Where and why a body is not JSON, from FastAPI's error (``loc`` ``("body", offset)``,
    ``ctx.error`` "Expecting value") or pydantic's (the message names line and column)."""
    ctx = error.get("ctx")
    reason = str(ctx.get("error", "") if isinstance(ctx, dict) else "") or str(
        error.get("msg", ""))
    loc = error.get("loc")
    offset = loc[-1] if isinstance(loc, list | tuple) and loc else None
    if isinstance(offset, int) and not re.search(r"line \d+ column \d+", reason):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        reason = f"{reason} at line {line} column {column} (char {offset})"
    return (f"the request body is not valid JSON: {reason}; send a JSON object (Content-Type: "
            "application/json) as the route's schema in /docs shows")
