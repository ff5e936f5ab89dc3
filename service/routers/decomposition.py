"""``/v1/decomposition``: periods, primitives, bursts and level shifts of a series."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from prism import services
from service.deps import StoreDep
from service.schemas import DecompositionOut, DecompositionQuery, ErrorOut

router = APIRouter(prefix="/v1/decomposition", tags=["decomposition"])


@router.get("", response_model=DecompositionOut, responses={404: {"model": ErrorOut}})
def decomposition(q: Annotated[DecompositionQuery, Query()], store: StoreDep
                  ) -> DecompositionOut:
    """Decompose a series into primitives (the dictionary learned with its siblings)."""
    return DecompositionOut.model_validate(
        services.decomposition_summary(store, q.series_id, top=q.top))
