"""Dependencies of the routes, as ``Annotated`` aliases.

- ``StoreDep``: a store on its own cursor of the app's one DuckDB connection, closed after the
  request (a DuckDB connection is not thread-safe; cursors are).
- ``ServerDep``: the app's :class:`~prism.hub.ForecastHub`.
- ``SettingsDep``: the app's settings.
- ``SingleQueryValues``: a query parameter that takes one value, given twice, is a 422.

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
    repeated: list[tuple[str, list[str]]] = []
    for name in model.model_fields:
        values = params.getlist(name)
        if values:
            data[name] = values if name in lists else values[-1]
            if len(values) > 1 and name not in lists:
                repeated.append((name, values))
    if repeated:
        raise RequestValidationError([_repeated(name, values) for name, values in repeated])
    for name in params.keys() - model.model_fields.keys():  # the model forbids them: 422
        data[name] = params[name]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None


def _repeated(name: str, values: list[str]) -> dict[str, Any]:
    """The 422 error of a query parameter that takes one value and was given several
    (``?horizon=1h&horizon=1d`` once served the last one without a word)."""
    return {"type": "repeated_parameter", "loc": ("query", name), "input": values,
            "msg": f"query parameter {name!r} is given {len(values)} times "
                   f"({', '.join(repr(v) for v in values)}) but takes one value: pass it once"}


def _is_list(schema: dict[str, Any]) -> bool:
    """Whether a parameter's JSON schema takes a list (a query parameter that may repeat)."""
    return schema.get("type") == "array" or any(
        s.get("type") == "array" for s in schema.get("anyOf", ()))


_MODEL_SCHEMAS: dict[type[BaseModel], dict[str, dict[str, Any]]] = {}


def _model_fields(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """The JSON schema of each field of ``model`` (cached: models live as long as the
    process)."""
    fields = _MODEL_SCHEMAS.get(model)
    if fields is None:
        fields = _MODEL_SCHEMAS[model] = dict(model.model_json_schema()["properties"])
    return fields


def route_fields(route: object, where: str) -> dict[str, dict[str, Any]]:
    """The query parameters (``where="query"``) or top-level body fields (``"body"``) a route
    takes, each with its JSON schema: its models' fields, its plain parameters and the query
    parameters it documents for parsing itself (``GET /v1/forecast``).

    Args:
        route: the matched route (``request.scope["route"]``); anything else takes nothing.
        where: ``"query"`` or ``"body"``.
    """
    fields: dict[str, dict[str, Any]] = {}
    if where == "query":
        extra = getattr(route, "openapi_extra", None) or {}
        fields.update({p["name"]: p.get("schema", {}) for p in extra.get("parameters", ())
                       if p.get("in") == "query"})
    dependant = getattr(route, "dependant", None)
    stack = [dependant] if dependant is not None else []
    while stack:
        node = stack.pop()
        for field in node.query_params if where == "query" else node.body_params:
            annotation = field.field_info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                fields.update(_model_fields(annotation))
            else:
                fields.setdefault(field.alias, {})
        stack.extend(node.dependencies)
    return fields


async def refuse_repeated_query(request: Request) -> None:
    """Refuse (422) a query parameter given more than once where the route takes one value;
    list parameters (``param``, ``reservation``, ``series_id`` of the export) may repeat.

    Raises:
        RequestValidationError: one error per repeated parameter, ``loc`` ``["query", name]``.
    """
    params = request.query_params
    items = params.multi_items()
    if len(items) == len(params):  # the common case: each name once
        return
    fields = route_fields(request.scope.get("route"), "query")
    errors = [_repeated(name, params.getlist(name)) for name in dict.fromkeys(params)
              if len(params.getlist(name)) > 1 and not _is_list(fields.get(name, {}))]
    if errors:
        raise RequestValidationError(errors)


def server_of(request: Request) -> ForecastHub:
    """The app's forecast hub, for the one route that takes ``request`` instead of
    ``ServerDep`` (``GET /v1/forecast``: a dependency costs more than its cached answer)."""
    hub: ForecastHub = request.app.state.hub
    return hub


SettingsDep = Annotated[Settings, Depends(get_settings)]
#: The dependency of the routers that parse a query model (``GET /v1/forecast`` checks its
#: own query in :func:`parse_query`: no dependency on the hot path).
SingleQueryValues = Depends(refuse_repeated_query)
StoreDep = Annotated[Store, Depends(get_store)]
ServerDep = Annotated[ForecastHub, Depends(get_server)]
