"""Shared fixtures: an in-memory store, a synthetic panel and the real public traces."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from prism.store import Store
from tests.factories import make_panel

# A test that saves a model without --models-dir saved it into the checkout's ./models (one
# was committed by mistake): each test process gets a registry of its own, before any test
# reads the settings (they are read once per process). Subprocesses inherit it.
os.environ.setdefault("PRISM_MODELS_DIR", tempfile.mkdtemp(prefix="prism-test-models-"))

ROOT = Path(__file__).resolve().parents[1]
#: Where the real traces are when ``PRISM_TRACES_DIR`` does not say (``../shared/data/traces``
#: next to the repository).
DEFAULT_TRACES = ROOT.parent / "shared" / "data" / "traces"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Set (``make test`` does), a missing trace folder fails the tests that read it instead of
#: skipping them, so a run without the real data cannot pass for a full one.
REQUIRE_TRACES = "PRISM_REQUIRE_TRACES"
_HELIOS_VCS = ("vc3sl", "vc6YE", "vc8Sj", "vcJLV", "vcJkd", "vcLJZ", "vcMod", "vcSoL", "vcTJs",
               "vccaA", "vcdI0", "vcgkz", "vchbv", "vcira", "vcpDC", "vcvlY")
#: Catalogue entry (``prism datasets list``) -> its copy in the traces folder, the layout the
#: tests read: the downloaded file, gzipped (``gzip -9n``) where the name ends in ``.gz``.
TRACE_COPIES: dict[str, str] = {
    **{f"helios-earth-{vc}": f"helios_earth_vc/earth_{vc}_1min.csv.gz" for vc in _HELIOS_VCS},
    "philly-node-sequence": "helios_earth_vc/philly_node_sequence_1min.csv.gz",
    "alibaba-v2023-pods": "alibaba_gpu/v2023_openb_pod_list_default.csv.gz",
    "alibaba-v2023-nodes": "alibaba_gpu/v2023_openb_node_list_gpu_node.csv",
}


def traces_dir() -> Path | None:
    """The folder of real traces: ``$PRISM_TRACES_DIR``, else ``../shared/data/traces`` (from
    the repository root); ``None`` when neither is a folder holding every file of
    :data:`TRACE_COPIES`."""
    env = os.environ.get("PRISM_TRACES_DIR")
    candidates = [Path(env).expanduser()] if env else []
    for folder in [*candidates, DEFAULT_TRACES]:
        if folder.is_dir() and not _missing(folder):
            return folder
    return None


def require_traces() -> Path:
    """The folder of real traces, or skip the test with how to get them (fail instead where
    ``PRISM_REQUIRE_TRACES`` is set, as ``make test`` does)."""
    folder = traces_dir()
    if folder is not None:
        return folder
    reason = _missing_reason()
    if os.environ.get(REQUIRE_TRACES):
        pytest.fail(f"{reason} ({REQUIRE_TRACES} is set, so this fails instead of skipping)")
    pytest.skip(reason)


def _missing(folder: Path) -> list[str]:
    return [rel for rel in TRACE_COPIES.values() if not (folder / rel).is_file()]


def _missing_reason() -> str:
    env = os.environ.get("PRISM_TRACES_DIR")
    looked = [f"$PRISM_TRACES_DIR ({env})"] if env else ["$PRISM_TRACES_DIR (unset)"]
    looked.append(str(DEFAULT_TRACES))
    partial = [f for f in (Path(env).expanduser() if env else None, DEFAULT_TRACES)
               if f is not None and f.is_dir()]
    lacks = f"; {partial[0]} lacks {', '.join(_missing(partial[0])[:3])}" if partial else ""
    names = " ".join(TRACE_COPIES)
    return (
        f"the real traces are not in {' or '.join(looked)}{lacks}. Fetch them with "
        f"`for n in {names}; do prism datasets download $n --cache-dir DIR; done`, "
        "gzip -9n each file into a folder laid out as tests/conftest.py TRACE_COPIES says "
        "(e.g. DIR/helios-earth-vc6YE/earth_vc6YE_1min.csv -> "
        "TRACES/helios_earth_vc/earth_vc6YE_1min.csv.gz) and set PRISM_TRACES_DIR=TRACES"
    )


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
    """The folder of real public traces (:func:`require_traces`: ``$PRISM_TRACES_DIR``, else
    ``../shared/data/traces``); tests that use it skip without it, or fail under ``make test``."""
    return require_traces()


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """The folder of small hand-written fixture files."""
    return FIXTURES


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[object]:
    """One local Ray runtime (2 CPUs) for the session's Ray tests: starting Ray takes tens of
    seconds, so the tests share it. ``make test`` installs Ray (the ``distributed`` extra), so
    a missing Ray fails rather than skips."""
    try:
        import ray
    except ImportError:  # pragma: no cover - make test installs it
        pytest.fail("ray is not installed: pip install -e '.[distributed]' (make test does)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
