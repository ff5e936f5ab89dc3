"""Reusing an earlier accuracy run's windows for the models a run leaves out (``--reuse``).

A change to PRISM needs PRISM and its variants rerun, not the baselines: their per-window
results from an earlier run on the same panels and cutoffs join the new ones before scoring.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from prism.errors import ConfigError
from prism.schema import SERIES_ID


def reuse(directories: Sequence[Path], running: Sequence[str]
          ) -> tuple[pd.DataFrame, dict[tuple[str, str], float]]:
    """The per-window rows and seconds of the models ``running`` leaves out, from earlier runs.

    Args:
        directories: results of earlier runs, first come first taken.
        running: the models this run runs.

    Returns:
        ``(windows, seconds)``: rows as in ``accuracy_windows.csv`` (``dataset, horizon``
        first), seconds per window of each (panel, model).

    Raises:
        ConfigError: for a directory without the results files.
    """
    taken: set[str] = set(running)
    prism_now = "prism" in running
    prism_from: Path | None = None  # the directory the reused prism comes from
    rows: list[pd.DataFrame] = []
    seconds: dict[tuple[str, str], float] = {}
    for directory in directories:
        files = directory / "accuracy_windows.csv", directory / "accuracy.csv"
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise ConfigError(f"--reuse {directory}: no {', '.join(missing)}; give the "
                              "--output directory of an earlier run")
        windows = pd.read_csv(files[0], parse_dates=["cutoff"])
        if not prism_now and prism_from is None and "prism" in set(windows["model"]):
            prism_from = directory
        variant = windows["model"].str.startswith("prism") & (windows["model"] != "prism")
        keep = ~windows["model"].isin(taken) & (~variant | (prism_from == directory))
        rows.append(windows[keep])
        kept = set(windows.loc[keep, "model"])
        table = pd.read_csv(files[1]).drop_duplicates(["dataset", "model"])
        table = table[table["model"].isin(kept)]
        for dataset, model, secs in zip(table["dataset"], table["model"],
                                        table["seconds_per_window"].astype(float),
                                        strict=True):
            seconds[(str(dataset), str(model))] = float(secs)
        taken |= kept
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    return out.drop(columns=["rel_mae"], errors="ignore"), seconds


def with_reused(w: pd.DataFrame, reused: pd.DataFrame | None, dataset: str, horizon: str,
                rank: dict[str, int], baseline: str) -> pd.DataFrame:
    """``w`` (one panel and horizon's per-window rows) with the reused rows of that panel and
    horizon, each model's windows checked against the ``baseline``'s, in ``rank``'s model
    order.

    Raises:
        ConfigError: where a reused model's series and cutoffs are not the baseline's.
    """
    if reused is None or reused.empty:
        return w
    extra = reused[(reused["dataset"] == dataset) & (reused["horizon"] == horizon)]
    extra = extra.drop(columns=["dataset", "horizon"])
    if extra.empty:
        return w
    own = w.loc[w["model"] == baseline, [SERIES_ID, "cutoff"]]
    expected = set(zip(own[SERIES_ID], pd.to_datetime(own["cutoff"]), strict=True))
    for model, rows in extra.groupby("model", sort=False):
        got = set(zip(rows[SERIES_ID], pd.to_datetime(rows["cutoff"]), strict=True))
        if got != expected:
            raise ConfigError(
                f"--reuse: {model} on {dataset} {horizon} has {len(got)} windows, "
                f"{len(got & expected)} of them among this run's {len(expected)}; it ran on "
                "other series or cutoffs (another --before, --windows or --quick): run it "
                "now (--models) or reuse a run made with the same options")
    # the files hold 6 significant digits: the fresh rows get the same, or a model equal to
    # the last value (PRISM on Helios) would differ from a fresh naive in the 7th digit
    w = w.copy()
    for c in w.columns:
        if c in extra.columns and pd.api.types.is_float_dtype(w[c]):
            w[c] = pd.to_numeric(w[c].map(_six_digits))
    out = pd.concat([w, extra[[c for c in w.columns if c in extra.columns]]],
                    ignore_index=True)
    order = out["model"].map(lambda m: rank.get(str(m), len(rank)))
    return out.iloc[np.argsort(order.to_numpy(), kind="stable")].reset_index(drop=True)


def _six_digits(x: float) -> float:
    """``x`` as ``accuracy_windows.csv`` writes it (``%.6g``)."""
    return float(f"{x:.6g}")
