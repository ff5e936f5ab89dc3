"""Shared fixtures: an in-memory store, a synthetic panel and the real public traces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from prism.store import Store
from tests.factories import make_panel

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def store() -> Iterator[Store]:
    """A fresh in-memory store."""
    s = Store.open(":memory:")
    yield s
    s.close()


@pytest.fixture
def panel() -> pd.DataFrame:
    """Two seeded 10-minute series of three days with a daily cycle
    (:func:`tests.factories.make_panel` with its defaults; call it for other shapes)."""
    return make_panel()


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
