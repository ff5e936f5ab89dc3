"""``/v1/series``: the catalogue and the values of a series."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from prism import services
from service.deps import StoreDep
from service.schemas import ErrorOut, SeriesListOut, SeriesOut, SeriesQuery, ValuesOut, ValuesQuery

router = APIRouter(prefix="/v1/series", tags=["series"])


@router.get("", response_model=SeriesListOut)
def list_series(q: Annotated[SeriesQuery, Query()], store: StoreDep) -> SeriesListOut:
    """The series, filtered by cluster, scope and metric."""
    rows = services.series_records(store, cluster=q.cluster, scope=q.scope, metric=q.metric)
    return SeriesListOut(count=len(rows), series=[SeriesOut(**r) for r in rows])


@router.get("/values", response_model=ValuesOut,
            responses={404: {"model": ErrorOut}})
def series_values(q: Annotated[ValuesQuery, Query()], store: StoreDep) -> ValuesOut:
    """Values of one series between ``start`` (inclusive) and ``end`` (exclusive)."""
    points = services.series_points(store, q.series_id, start=q.start, end=q.end, tail=q.tail)
    return ValuesOut.model_validate({"series_id": q.series_id, "points": points})
