"""``/v1/decomposition``: periods, primitives, bursts and level shifts of a series (as
``prism decompose``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from prism.usecases.series import decompose_series
from service.deps import StoreDep
from service.schemas import DecompositionOut, DecompositionQuery, ErrorOut

router = APIRouter(prefix="/v1/decomposition", tags=["decomposition"])


@router.get("", response_model=DecompositionOut, responses={404: {"model": ErrorOut}})
def get_decomposition(q: Annotated[DecompositionQuery, Query()], store: StoreDep
                      ) -> DecompositionOut:
    """Decompose a series into primitives (the dictionary learned with its siblings)."""
    return DecompositionOut.model_validate(
        decompose_series(store, q.series_id).summary(top=q.top))
