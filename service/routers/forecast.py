"""``/v1/forecast``: one series (GET) or many (POST)."""

from __future__ import annotations

from collections import OrderedDict

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from prism import services
from prism.serving import ServedForecast
from service.deps import ServerDep, parse_query, query_parameters, server_of
from service.schemas import ErrorOut, ForecastOut, ForecastQuery, ForecastRequest, ForecastsOut

router = APIRouter(prefix="/v1/forecast", tags=["forecast"])

_ERRORS: dict[int | str, dict[str, object]] = {
    404: {"model": ErrorOut, "description": "unknown series"},
    503: {"model": ErrorOut, "description": "the model is being fitted or updated; retry "
          "after Retry-After seconds"},
}


class RenderedForecasts:
    """Cached forecasts already rendered as ``ForecastOut`` JSON, most recent kept.

    Used on the event loop only (no lock). The key names the forecast's content (series,
    model version, data watermark, horizon, quantiles), so a stale entry is never served: it
    is only evicted.
    """

    def __init__(self, size: int) -> None:
        self._size = max(size, 1)
        self._bodies: OrderedDict[tuple[object, ...], bytes] = OrderedDict()

    def body(self, served: ServedForecast) -> bytes:
        """The JSON of a cached forecast, rendered once."""
        key = (served.series_id, served.model, served.model_version, served.watermark,
               served.horizon_steps, served.quantiles)
        body = self._bodies.get(key)
        if body is None:
            out = ForecastOut.model_validate(served, from_attributes=True)
            body = self._bodies[key] = out.model_dump_json().encode()
            if len(self._bodies) > self._size:
                self._bodies.popitem(last=False)
        else:
            self._bodies.move_to_end(key)
        return body


@router.get("", response_model=ForecastOut,
            responses={**_ERRORS, 422: {"model": ErrorOut, "description": "a bad field "
                                        "(named in loc) or a horizon, model or parameter "
                                        "the series cannot take"}},
            openapi_extra={"parameters": query_parameters(ForecastQuery)})
async def get_forecast(request: Request) -> Response | ForecastOut:
    """The forecast of one series (cached; a series without a model gets one fitted)."""
    # The hot path of the API, lean on purpose: the query is parsed here (by the same
    # pydantic schema), a cached answer is served on the event loop already rendered (the
    # same ForecastOut JSON, validated when it was rendered), and anything else (a DuckDB
    # read, a forecast, a wait for a fit) runs on a worker thread.
    q = parse_query(ForecastQuery, request)
    server = server_of(request)
    served = services.cached_forecast(server, q.series_id, horizon=q.horizon,
                                      quantiles=q.levels, model=q.model, params=q.params)
    if served is not None:
        rendered: RenderedForecasts = request.app.state.rendered
        return Response(rendered.body(served), media_type="application/json")
    [served] = await run_in_threadpool(
        services.serve_forecasts, server, [q.series_id], horizon=q.horizon,
        quantiles=q.levels, model=q.model, params=q.params)
    return ForecastOut.model_validate(served, from_attributes=True)


@router.post("", response_model=ForecastsOut, responses=_ERRORS)
def post_forecast(body: ForecastRequest, server: ServerDep) -> ForecastsOut:
    """Forecasts of several series with one model; their fits share one time budget."""
    served = services.serve_forecasts(server, body.series_ids, horizon=body.horizon,
                                      quantiles=body.quantiles, model=body.model,
                                      params=body.text_params)
    return ForecastsOut(forecasts=[ForecastOut.model_validate(s, from_attributes=True)
                                   for s in served])
