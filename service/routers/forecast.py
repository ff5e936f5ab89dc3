"""``/v1/forecast``: one series (GET) or many (POST).

A request that names hyperparameters (``param=...``, ``params``) gets its model fitted on
demand but not saved to the registry unless it says ``save=true``; the hyperparameters are
bounded (422 naming the one out of range).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from prism.hub import ServedForecast
from prism.usecases.forecast import cached_forecast, serve_forecasts
from service.deps import ServerDep, parse_query, query_parameters, server_of
from service.schemas import ErrorOut, ForecastOut, ForecastQuery, ForecastRequest, ForecastsOut

router = APIRouter(prefix="/v1/forecast", tags=["forecast"])

_ERRORS: dict[int | str, dict[str, object]] = {
    404: {"model": ErrorOut, "description": "unknown series"},
    503: {"model": ErrorOut, "description": "the model is being fitted or updated; retry "
          "after Retry-After seconds"},
}


def _render(served: ServedForecast) -> bytes:
    """A forecast as the ``ForecastOut`` JSON of the answer (validated by the schema)."""
    return ForecastOut.model_validate(served, from_attributes=True).model_dump_json().encode()


@router.get("", response_model=ForecastOut,
            responses={**_ERRORS, 422: {"model": ErrorOut, "description": "a bad field "
                                        "(named in loc), a horizon, model or parameter "
                                        "the series cannot take, a parameter out of its "
                                        "range, or a fit past its time budget"}},
            openapi_extra={"parameters": query_parameters(ForecastQuery)})
async def get_forecast(request: Request) -> Response | ForecastOut:
    """The forecast of one series (cached; a series without a model gets one fitted)."""
    # The hot path of the API, lean on purpose: the query is parsed here (by the same
    # pydantic schema), a cached answer is served on the event loop already rendered (the
    # same ForecastOut JSON, validated when it was rendered once, and kept with the answer in
    # the hub's cache), and anything else (a DuckDB read, a forecast, a wait for a fit) runs
    # on a worker thread.
    q = parse_query(ForecastQuery, request)
    server = server_of(request)
    save = q.save
    served = cached_forecast(server, q.series_id, horizon=q.horizon, quantiles=q.levels,
                             model=q.model, params=q.params, save=save)
    if served is not None:
        return Response(server.rendered(served, _render), media_type="application/json")
    [served] = await run_in_threadpool(
        serve_forecasts, server, [q.series_id], horizon=q.horizon,
        quantiles=q.levels, model=q.model, params=q.params, save=save)
    return ForecastOut.model_validate(served, from_attributes=True)


@router.post("", response_model=ForecastsOut, responses=_ERRORS)
def post_forecast(body: ForecastRequest, server: ServerDep) -> ForecastsOut:
    """Forecasts of several series with one model; their fits share one time budget."""
    served = serve_forecasts(server, body.series_ids, horizon=body.horizon,
                             quantiles=body.quantiles, model=body.model,
                             params=body.text_params, save=body.save)
    return ForecastsOut(forecasts=[ForecastOut.model_validate(s, from_attributes=True)
                                   for s in served])
