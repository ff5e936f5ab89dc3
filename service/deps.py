"""Dependencies of the routes, as ``Annotated`` aliases.

- ``StoreDep``: a store on its own cursor of the app's one DuckDB connection, closed after the
  request (a DuckDB connection is not thread-safe; cursors are).
- ``ServerDep``: the app's :class:`~prism.hub.ForecastHub`.
- ``SettingsDep``: the app's settings.

The bearer token of ``/v1`` is checked by :class:`service.middleware.BearerToken`.

All are ``async``: they run on the event loop, without a trip through the thread pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, TypeVar, get_origin

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from prism.config import Settings
from prism.hub import ForecastHub
from prism.store import Store

Q = TypeVar("Q", bound=BaseModel)


async def get_settings(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


async def get_store(request: Request) -> AsyncIterator[Store]:
    """A store on a new cursor, closed when the request is done."""
    cursor = request.app.state.store.cursor()
    try:
        yield cursor
    finally:
        cursor.close()


async def get_server(request: Request) -> ForecastHub:
    """The app's forecast hub."""
    hub: ForecastHub = request.app.state.hub
    return hub


_LIST_FIELDS: dict[type[BaseModel], frozenset[str]] = {}


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The OpenAPI ``parameters`` of a query model, for a route that parses it itself."""
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    return [{"name": name, "in": "query", "required": name in required, "schema": prop,
             **({"description": prop["description"]} if "description" in prop else {})}
            for name, prop in schema["properties"].items()]


def parse_query(model: type[Q], request: Request) -> Q:
    """The request's query string validated by ``model`` (what FastAPI does for a query
    model, for a fraction of its cost: the hot route parses its own).

    Raises:
        RequestValidationError: 422 with ``loc`` ``["query", field]`` for each bad field.
    """
    lists = _LIST_FIELDS.get(model)
    if lists is None:
        lists = _LIST_FIELDS[model] = frozenset(
            name for name, f in model.model_fields.items() if get_origin(f.annotation) is list)
    params = request.query_params
    data: dict[str, Any] = {}
    for name in model.model_fields:
        values = params.getlist(name)
        if values:
            data[name] = values if name in lists else values[-1]
    for name in params.keys() - model.model_fields.keys():  # the model forbids them: 422
        data[name] = params[name]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None


def server_of(request: Request) -> ForecastHub:
    """The app's forecast hub, for the one route that takes ``request`` instead of
    ``ServerDep`` (``GET /v1/forecast``: a dependency costs more than its cached answer)."""
    hub: ForecastHub = request.app.state.hub
    return hub


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
ServerDep = Annotated[ForecastHub, Depends(get_server)]
