"""``/v1/ingest``: files (multipart or a raw body) or JSON records, as ``prism ingest``."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from prism.ingest.base import IngestOptions
from prism.usecases.ingest import ingest_upload
from service.deps import ServerDep
from service.schemas import ErrorOut, IngestFileOut, IngestOut, IngestQuery, IngestRecords

router = APIRouter(prefix="/v1", tags=["ingest"])

_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": {
            "type": "object", "required": ["file"],
            "properties": {"file": {"type": "array",
                                    "items": {"type": "string", "format": "binary"}}}}},
        "application/json": {"schema": IngestRecords.model_json_schema()},
        "text/csv": {"schema": {"type": "string"}},
        "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    },
}
#: Content types a raw body may have. ``text/plain`` and form encodings are refused: browsers
#: send them cross-site without a CORS preflight, so accepting them would let any web page
#: write to a server without a token.
_RAW_TYPES = ("text/csv", "application/vnd.apache.parquet", "application/octet-stream")


@router.post(
    "/ingest", response_model=IngestOut, openapi_extra={"requestBody": _BODY},
    responses={400: {"model": ErrorOut, "description": "a malformed multipart body"},
               413: {"model": ErrorOut, "description": "the body is over the size limit"},
               415: {"model": ErrorOut, "description": "a content type ingest does not take"}},
)
async def ingest(q: Annotated[IngestQuery, Query()], request: Request,
                 server: ServerDep) -> IngestOut:
    """Ingest CSV/Parquet files (multipart field ``file``, repeatable, or the raw body) or
    JSON ``{"records": [...]}`` in one transaction; the same content again is a no-op."""
    if q.format == "prometheus" and _check_kind(request) == "application/json":
        # its input is a query_range answer, a file, not records: say how to send it
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            "format prometheus reads the JSON body of /api/v1/query_range as a file: send it "
            "as multipart/form-data (field `file`) or as a raw body of type "
            "application/octet-stream (with ?filename=NAME.json); application/json here "
            "means {\"records\": [...]} rows")
    files, records = await _read_body(request, q.filename)
    options = IngestOptions(
        cluster=q.cluster, scope=q.scope, tz=q.tz, origin=q.origin, time_col=q.time_col,
        mapping=_pairs(q.map), on_error=q.on_error, extra=_pairs(q.option))
    outcome = await run_in_threadpool(
        ingest_upload, server, q.format, files=files, records=records,
        options=options, freq=q.freq, fill=q.fill)
    report = outcome.report
    return IngestOut(
        status="ingested" if any(f.status == "ingested" for f in report.files) else "unchanged",
        rows=report.rows, rejected=report.rejected,
        files=[IngestFileOut(name=f.path, status="unchanged" if f.status == "unchanged"
                             else "ingested", rows=f.rows, rejected=f.rejected,
                             note=f.note)
               for f in report.files],
        clusters=report.clusters, series=report.series, changed_series=len(outcome.changed),
        scored_points=outcome.scored, notes=report.notes)


async def _read_body(request: Request, filename: str | None
                     ) -> tuple[list[tuple[str, bytes]], list[dict[str, Any]] | None]:
    kind = _check_kind(request)
    if kind == "multipart/form-data":
        return await _read_form(request), None
    body = await request.body()
    if kind == "application/json":
        try:
            parsed = IngestRecords.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            ) from exc
        return [], [dict(r) for r in parsed.records]
    return ([(filename or "upload", body)] if body else []), None


async def _read_form(request: Request) -> list[tuple[str, bytes]]:
    """The files of a multipart body (field ``file``). A body the multipart parser refuses is
    a JSON 400 saying at which line of the body, and why (a part's header line over the
    parser's limit: a file name of thousands of characters)."""
    where = _Where()

    async def counted() -> AsyncGenerator[bytes, None]:
        async for chunk in request.stream():
            where.chunk = chunk
            yield chunk
            where.lines += chunk.count(b"\n")

    parser = MultiPartParser(request.headers, counted(), max_files=100, max_fields=100)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, _form_error(exc, where)) from exc
    try:
        return [(item.filename or "upload", await item.read())
                for item in form.getlist("file") if isinstance(item, UploadFile)]
    finally:
        await form.close()


class _Where:
    """How far the multipart parser read: the newlines before the chunk it is on, and the
    chunk (its errors give an offset into it)."""

    def __init__(self) -> None:
        self.lines = 0
        self.chunk = b""

    def line(self, offset: int) -> int:
        """The line of the body at ``offset`` of the current chunk (1-based)."""
        return self.lines + self.chunk.count(b"\n", 0, max(0, offset)) + 1


def _form_error(exc: MultiPartException, where: _Where) -> str:
    """What is wrong with a multipart body the parser refused, and how to fix it."""
    cause = exc.__cause__
    offset = getattr(cause, "offset", -1)
    if cause is None or not isinstance(offset, int) or offset < 0:
        return (f"the multipart body is refused: {exc.message} Send the files as "
                "multipart/form-data parts of field `file` (curl -F file=@data.csv)")
    line = where.line(offset)
    if "header size" in str(cause):
        limit = _header_limit()
        over = f"over the limit of {limit:,} bytes" if limit else "over the parser's limit"
        return (f"line {line:,} of the multipart body is a part header {over} (the "
                "Content-Disposition of a file with a very long name?): keep each part's "
                "header lines short, e.g. rename the file, or send the file as a raw body "
                "(Content-Type: text/csv, with ?filename=NAME.csv)")
    return (f"the multipart body is malformed at line {line:,} ({cause}): send the files as "
            "multipart/form-data parts of field `file` (curl -F file=@data.csv)")


def _header_limit() -> int | None:
    """The multipart parser's limit on a part's header line (python-multipart's)."""
    try:
        from python_multipart.multipart import DEFAULT_MAX_HEADER_SIZE
    except ImportError:
        return None
    return int(DEFAULT_MAX_HEADER_SIZE)


def _check_kind(request: Request) -> str:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("multipart/form-data", "application/json", *_RAW_TYPES):
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"ingest takes multipart/form-data (field `file`), application/json "
            f"({{\"records\": [...]}}) or a raw body of type {', '.join(_RAW_TYPES)}; got "
            f"{kind or 'no Content-Type'}")
    return kind


def _pairs(items: list[str]) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (i.partition("=") for i in items)}
