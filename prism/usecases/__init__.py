"""Use cases shared by the CLI and the REST API: one function per thing a user asks for.

Each function takes an open :class:`~prism.store.Store` (the CLI opens one per command with
:func:`open_store`; the API passes a cursor of its one store per request) and, where it needs a
forecast, a forecast source (:mod:`prism.usecases.forecast`: a model fitted now, or the
running :class:`~prism.hub.ForecastHub`'s models). The functions take plain values and return
frames or small result objects; they print nothing and know nothing of HTTP or argparse.

- :mod:`~prism.usecases.series`: the catalogue, values, export, decomposition of series;
- :mod:`~prism.usecases.ingest`: ingestion formats, files, uploads;
- :mod:`~prism.usecases.forecast`: forecasts, forecast sources, saved models;
- :mod:`~prism.usecases.capacity`: the capacity plan of a cluster;
- :mod:`~prism.usecases.report`: the capacity report;
- :mod:`~prism.usecases.evaluation`: backtests, their accuracy and planning scores;
- :mod:`~prism.usecases.batch`: batch forecasts, backtests and refits;
- :mod:`~prism.usecases.watch`: scheduled Prometheus pulls that refit the models they change;
- :mod:`~prism.usecases.catalogue`: public traces and synthetic ones;
- :mod:`~prism.usecases.files`: writing frames to files.

Import the modules where they are used (``from prism.usecases import series as series_uc``);
this package imports none of them, so that ``prism --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prism.store import Store


def open_store(db: str | Path, *, must_exist: bool = False) -> Store:
    """Open the store at ``db`` (a context manager: ``with open_store(db) as store:``).

    Args:
        db: a DuckDB file or ``:memory:``.
        must_exist: fail instead of creating an empty store (for commands that read).

    Raises:
        ConfigError: when the file is missing (with ``must_exist``) or cannot be opened.
    """
    from prism.errors import ConfigError
    from prism.store import Store

    if must_exist and str(db) != ":memory:" and not Path(db).exists():
        raise ConfigError(
            f"no store at {str(db)!r}: run `prism ingest` first, or pass --db / PRISM_DB"
        )
    return Store.open(db)
