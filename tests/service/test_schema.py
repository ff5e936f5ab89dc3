"""schemathesis against the app's own OpenAPI schema: no 5xx, every answer matches it.

Each operation gets its own bounded hypothesis run (``max_examples`` cases, explicit
examples first), all against one running app whose fits answer within half a second.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from prism.config import Settings
from service.app import create_app

#: Cases per operation (``PRISM_SCHEMA_EXAMPLES`` raises it for a longer hunt).
EXAMPLES = int(os.environ.get("PRISM_SCHEMA_EXAMPLES", "15"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
OPERATIONS = ["GET /healthz", "GET /readyz", "GET /metrics", "GET /v1/series",
              "GET /v1/series/values", "POST /v1/ingest", "GET /v1/forecast",
              "POST /v1/forecast", "GET /v1/decomposition", "GET /v1/capacity",
              "GET /v1/reports/capacity"]


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


@pytest.mark.parametrize("label", OPERATIONS)
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
