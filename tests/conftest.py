"""Shared fixtures: an in-memory store and the real public traces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from prism.store import Store

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def store() -> Iterator[Store]:
    """A fresh in-memory store."""
    s = Store.open(":memory:")
    yield s
    s.close()


@pytest.fixture(scope="session")
def traces() -> Path:
    """The folder of real public traces (``../shared/data/traces``)."""
    if not TRACES.exists():
        pytest.fail(f"the real traces are expected at {TRACES}")
    return TRACES


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """The folder of small hand-written fixture files."""
    return FIXTURES
