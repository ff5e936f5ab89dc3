"""schemathesis against the app's own OpenAPI schema: no 5xx, every answer matches it.

Each operation gets its own bounded hypothesis run (``max_examples`` cases, explicit
examples first), all against one running app whose fits answer within half a second. A fit
that takes longer (a loaded machine) gets the documented answer, 503 with ``Retry-After``
("models are being fitted"): a valid answer, not a server error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.failures import FailureGroup, ServerError
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from prism.config import Settings
from service.app import create_app

#: Cases per operation (``PRISM_SCHEMA_EXAMPLES`` raises it for a longer hunt).
EXAMPLES = int(os.environ.get("PRISM_SCHEMA_EXAMPLES", "15"))
#: Cases per operation on the guarded server with the token: past the token check the same
#: handlers answer as in the unguarded run above, which has ``EXAMPLES`` of its own.
GUARDED_EXAMPLES = max(3, EXAMPLES // 3)


def being_fitted(response: Response, case: schemathesis.Case) -> bool:
    """Whether ``response`` is the documented "retry later": a 503 of an operation whose
    schema lists 503, with a ``Retry-After`` of at least one whole second."""
    documented = "503" in case.operation.definition.raw.get("responses", {})
    retry_after = response.headers.get("retry-after", [""])[0]
    return (response.status_code == 503 and documented and retry_after.isdigit()
            and int(retry_after) >= 1)


def not_a_server_error_but_fitting(ctx: CheckContext, response: Response,
                                   case: schemathesis.Case) -> bool | None:
    """schemathesis' ``not_a_server_error``, except for the answer of :func:`being_fitted`
    (whose body the schema checks still validate)."""
    if being_fitted(response, case):
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [not_a_server_error_but_fitting, status_code_conformance, content_type_conformance,
          response_schema_conformance]
OPERATIONS = ["GET /healthz", "GET /readyz", "GET /metrics", "GET /v1/series",
              "GET /v1/series/values", "POST /v1/ingest", "GET /v1/forecast",
              "POST /v1/forecast", "GET /v1/decomposition", "GET /v1/capacity",
              "GET /v1/reports/capacity", "GET /v1/capacity/track-record",
              "GET /v1/series/export", "POST /v1/models/refit",
              "GET /v1/metrics", "GET /v1/metrics/forecasts"]


@pytest.fixture(scope="module")
def api_schema(trace: object, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[schemathesis.BaseSchema]:
    """The schema of one running app (lifespan entered) for every operation."""
    from tests.service.conftest import make_settings

    folder = tmp_path_factory.mktemp("schema")
    settings: Settings = make_settings(trace, folder, fit_budget_s=0.5)  # type: ignore[arg-type]
    app = create_app(settings)
    with TestClient(app):
        yield schemathesis.openapi.from_asgi("/openapi.json", app)


def test_every_operation_is_covered(api_schema: schemathesis.BaseSchema) -> None:
    labels = {result.ok().label for result in api_schema.get_all_operations()}
    assert labels == set(OPERATIONS)


@pytest.mark.parametrize("label", [pytest.param(op, marks=pytest.mark.slow)
                                   if op == "GET /v1/reports/capacity" else op
                                   for op in OPERATIONS])  # the report fits PRISM: slow
def test_operation_conforms_to_the_schema(api_schema: schemathesis.BaseSchema,
                                          label: str) -> None:
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=CHECKS)

    run()


@pytest.fixture(scope="module")
def fitting_schema(trace: object, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[schemathesis.BaseSchema]:
    """The schema of an app that never waits for a fit: a model not fitted yet is a 503."""
    from tests.service.conftest import make_settings

    folder = tmp_path_factory.mktemp("fitting")
    settings: Settings = make_settings(trace, folder, fit_budget_s=0)  # type: ignore[arg-type]
    app = create_app(settings)
    with TestClient(app):
        yield schemathesis.openapi.from_asgi("/openapi.json", app)


def test_a_model_being_fitted_is_a_valid_answer(fitting_schema: schemathesis.BaseSchema
                                                ) -> None:
    # The answer a loaded machine gives when a fit outlasts the budget: 503 + Retry-After.
    operation = fitting_schema.find_operation_by_label("GET /v1/reports/capacity")
    assert operation is not None
    case = operation.Case(query={"cluster": "cluster-0"})
    response = case.call_and_validate(checks=CHECKS)
    assert response.status_code == 503 and being_fitted(response, case)
    # ... and only that: without Retry-After, or where the schema lists no 503, it is an error
    bare = Response(status_code=503, headers={}, content=response.content,
                    request=response.request, elapsed=0.0, verify=False)
    assert not being_fitted(bare, case)
    with pytest.raises(FailureGroup) as failed:
        case.validate_response(bare, checks=[not_a_server_error_but_fitting])
    assert [type(e) for e in failed.value.exceptions] == [ServerError]
    series = fitting_schema.find_operation_by_label("GET /v1/series")
    assert series is not None
    assert not being_fitted(response, series.Case(query={}))


TOKEN = "schema-token"


@pytest.fixture(scope="module")
def guarded_schema(trace: object, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[schemathesis.BaseSchema]:
    """The schema of an app that asks for a bearer token on ``/v1``."""
    from tests.service.conftest import make_settings

    folder = tmp_path_factory.mktemp("guarded")
    settings: Settings = make_settings(trace, folder, fit_budget_s=0.5,  # type: ignore[arg-type]
                                       api_token=TOKEN)
    app = create_app(settings)
    with TestClient(app):
        yield schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.slow
@pytest.mark.parametrize("with_token", [True, False], ids=["token", "no-token"])
@pytest.mark.parametrize("label", OPERATIONS)
def test_a_guarded_server_conforms_with_and_without_the_token(
        guarded_schema: schemathesis.BaseSchema, label: str, with_token: bool) -> None:
    operation = guarded_schema.find_operation_by_label(label)
    assert operation is not None
    guarded = " /v1/" in label

    @given(case=operation.as_strategy())
    @settings(max_examples=GUARDED_EXAMPLES if with_token else EXAMPLES, deadline=None,
              database=None, suppress_health_check=list(HealthCheck))
    def run(case: schemathesis.Case) -> None:
        if with_token:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {TOKEN}"}
        else:
            case.headers = {k: v for k, v in (case.headers or {}).items()
                            if k.lower() != "authorization"}
        response = case.call_and_validate(checks=CHECKS)
        if guarded and not with_token:
            assert response.status_code == 401, (label, response.status_code)

    run()
