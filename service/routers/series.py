"""``/v1/series``: the catalogue and the values of a series (as ``prism series list|show``)."""

from __future__ import annotations

from typing import Annotated

import pandas as pd
from fastapi import APIRouter, Query, Response

from prism.usecases import series as series_uc
from service.deps import StoreDep
from service.schemas import (
    ErrorOut,
    ExportQuery,
    SeriesListOut,
    SeriesOut,
    SeriesQuery,
    ValuesOut,
    ValuesQuery,
)

router = APIRouter(prefix="/v1/series", tags=["series"])


@router.get("", response_model=SeriesListOut)
def list_series(q: Annotated[SeriesQuery, Query()], store: StoreDep) -> SeriesListOut:
    """The series, filtered by cluster, scope and metric."""
    frame = series_uc.list_series(store, cluster=q.cluster, scope=q.scope, metric=q.metric)
    frame = frame.astype(object).where(frame.notna(), None)
    rows = [SeriesOut(**{str(k): v for k, v in row.items()}) for row in frame.to_dict("records")]
    return SeriesListOut(count=len(rows), series=rows)


@router.get("/values", response_model=ValuesOut,
            responses={404: {"model": ErrorOut}})
def get_series_values(q: Annotated[ValuesQuery, Query()], store: StoreDep) -> ValuesOut:
    """Values of one series between ``start`` (inclusive) and ``end`` (exclusive)."""
    frame = series_uc.series_values(store, q.series_id, start=q.start, end=q.end, tail=q.tail)
    points = [{"ts": pd.Timestamp(ts).to_pydatetime(), "value": float(v), "filled": bool(f)}
              for ts, v, f in zip(frame["ts"], frame["value"], frame["filled"], strict=True)]
    return ValuesOut.model_validate({"series_id": q.series_id, "points": points})


_MEDIA = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet"}


@router.get("/export", response_class=Response,
            responses={404: {"model": ErrorOut},
                       200: {"content": {m: {"schema": {"type": "string", "format": "binary"}}
                                         for m in _MEDIA.values()},
                             "description": "the panel as CSV or Parquet"}})
def export_series(q: Annotated[ExportQuery, Query()], store: StoreDep) -> Response:
    """The panel (``series_id, ts, value``) of the named series, or of all, as CSV or Parquet:
    what ``prism series export`` writes, for notebooks while the server holds the store."""
    data, rows, series = series_uc.panel_bytes(store, q.format, series_ids=q.series_id or None)
    return Response(data, media_type=_MEDIA[q.format],
                    headers={"X-Prism-Rows": str(rows), "X-Prism-Series": str(series),
                             "Content-Disposition": f'attachment; filename="panel.{q.format}"'})
