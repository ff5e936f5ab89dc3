"""``/v1/models``: the server's models (``prism refit`` goes through it while a server runs)."""

from __future__ import annotations

from fastapi import APIRouter, status

from prism.usecases.forecast import refit_served
from service.deps import ServerDep
from service.schemas import ErrorOut, RefitOut, RefitRequest

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.post("/refit", response_model=RefitOut, status_code=status.HTTP_202_ACCEPTED,
             responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut},
                        503: {"model": ErrorOut, "description": "the job queue is full"}})
def refit_models(body: RefitRequest, server: ServerDep) -> RefitOut:
    """Queue refits of the models serving these series on the data the server holds now;
    each new model is saved to the registry when its job finishes."""
    refits, fits = refit_served(server, body.series_ids, model=body.model,
                                params=body.text_params)
    return RefitOut(refits=refits, fits=fits)
