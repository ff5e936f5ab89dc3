"""Covariates of the global learners: do queued GPUs, submissions and capacity help?

    python -m evaluation.benchmarks.covariates [--models gbm,prism] [--before 7d] [--output DIR]

Where the store holds them beside a panel's series (the Helios VCs: ``gpus_pending`` and
``gpu_capacity``; Alibaba v2023 by QoS and for the cluster: ``gpus_pending`` and
``gpus_submitted``), the gradient-boosting learner gets them as features of each origin, in
the units of the series' own scale like its other features (see :class:`CovariateGbm`):

- ``pending_last``, ``pending_1h``: the queued GPUs at the last point and their mean over the
  last hour;
- ``pending_change``: how the queue moved over that hour;
- ``headroom``: capacity minus the last value (``NaN`` where the store has no capacity);
- ``startable``: the queued GPUs that fit in that headroom (the smaller of the two, at least
  0): a full VC's queue says "can only fall", not "will grow";
- ``submitted_1h``, ``submitted_6h``: the GPUs submitted over the last hour and 6 hours.

Only values up to the origin's last point are read, so the features are known at the origin
(the future of a covariate is not). Two models are measured, each paired window by window
against the same model without covariates, on the accuracy benchmark's protocol (28 cutoffs
6 h apart, a day ahead, scored at 1 h, 6 h and 1 d; :mod:`evaluation.benchmarks.accuracy`):

- ``gbm+covariates`` against ``gbm``;
- ``prism+covariates`` (PRISM whose ``gbm`` candidate has them) against ``prism``.

The result decides whether they go into the product: a part that does not earn its keep
stays out, and the README says what was measured. Writes ``covariates.{csv,md}`` under
``--output`` (default ``evaluation/results``; ``--before 7d`` the week before).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evaluation.benchmarks.accuracy import (
    BACKTEST_HORIZON,
    HORIZONS,
    N_BOOT,
    QUANTILES,
    STEP,
    TRACES,
    WINDOWS,
    _series_of_panels,
    end_before,
    horizon_frames,
)
from prism.evaluation.backtest import backtest
from prism.evaluation.metrics import evaluate, relative_to
from prism.forecasters.base import FloatArray
from prism.forecasters.gbm import GbmForecaster
from prism.forecasters.hybrid import PrismForecaster
from prism.ingest.pipeline import ingest
from prism.schema import SERIES_ID, TS, parse_duration
from prism.store import Store

ROOT = Path(__file__).resolve().parents[2]
#: Covariate metrics, in the order of :attr:`Covariates.values`' columns.
COVARIATES = ("gpus_pending", "gpu_capacity", "gpus_submitted")
#: The panels with covariates in the store: target metric and scope filter.
PANELS = ("helios_in_use", "helios_demand", "alibaba_qos", "alibaba_gpu")
#: The extra features, in order (see the module docstring).
FEATURES = ("pending_last", "pending_1h", "pending_change", "headroom", "startable",
            "submitted_1h", "submitted_6h")


@dataclass(frozen=True)
class Covariates:
    """A target series' covariates on a regular grid: ``values[i]`` is at ``first + i * step``.

    Columns in the order of :data:`COVARIATES`, ``NaN`` where the store has none.
    """

    first: int
    step: int
    values: FloatArray

    def window(self, at: FloatArray, width: int) -> FloatArray:
        """``(len(at), width)``: each column's values over the ``width`` points up to the
        grid time ``at`` (epoch seconds) included, ``NaN`` outside the grid."""
        i = np.floor((at - self.first) / self.step).astype(np.int64)
        idx = i[:, None] - width + 1 + np.arange(width)[None, :]
        ok = (idx >= 0) & (idx < len(self.values))
        out = self.values[np.clip(idx, 0, len(self.values) - 1)]  # (m, width, k)
        return np.where(ok[:, :, None], out, np.nan)


def covariate_features(cov: Covariates | None, at: FloatArray, last: FloatArray,
                       scale: FloatArray, hour: int) -> FloatArray:
    """``(len(at), len(FEATURES))``: the covariate features of origins whose last point is at
    ``at`` (epoch seconds), in units of ``scale``; all ``NaN`` without covariates."""
    m = len(at)
    if cov is None:
        return np.full((m, len(FEATURES)), np.nan)
    six = 6 * hour
    block = cov.window(at, six)  # (m, six, k)
    pending, capacity, submitted = block[:, :, 0], block[:, :, 1], block[:, :, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of a window of NaN is NaN
        cols = [
            pending[:, -1],
            np.nanmean(pending[:, -hour:], axis=1),
            pending[:, -1] - pending[:, -1 - hour],
            capacity[:, -1] - last,
            np.clip(np.minimum(pending[:, -1], capacity[:, -1] - last), 0.0, None),
            np.nansum(submitted[:, -hour:], axis=1),
            np.nansum(submitted, axis=1),
        ]
    out = np.column_stack(cols) / scale[:, None]
    # a sum over no values is 0 for numpy: NaN where the column is missing at the origin
    missing = np.isnan(submitted[:, -1])
    out[missing, 5:] = np.nan
    return np.asarray(out, dtype=np.float64)


class CovariateGbm(GbmForecaster):
    """:class:`GbmForecaster` with the covariate features of each origin appended.

    Args:
        covariates: target series id -> its :class:`Covariates` (series without them get
            ``NaN`` features, which the trees handle natively).
        max_horizon: as :class:`GbmForecaster`.
        random_state: as :class:`GbmForecaster`.
    """

    def __init__(self, *, covariates: dict[str, Covariates] | None = None,
                 max_horizon: str = "1d", random_state: int | None = None) -> None:
        super().__init__(max_horizon=max_horizon, random_state=random_state)
        self.covariates = covariates

    def _features(self, series_id: str, tails: FloatArray, rows: Any, ends: Any,
                  k: Any) -> tuple[FloatArray, FloatArray, FloatArray]:
        x, last, scale = super()._features(series_id, tails, rows, ends, k)
        at = self.epoch_seconds(series_id, np.asarray(ends) - 1).astype(np.float64)
        cov = (self.covariates or {}).get(series_id)
        extra = covariate_features(cov, at, last, scale, max(1, 3600 // self.freq_s_))
        return np.column_stack([x, extra]), last, scale


class CovariatePrism(PrismForecaster):
    """PRISM (its defaults) whose ``gbm`` candidate is a :class:`CovariateGbm`."""

    def __init__(self, *, covariates: dict[str, Covariates] | None = None) -> None:
        super().__init__()
        self.covariates = covariates

    def _new_gbm(self) -> GbmForecaster:
        return CovariateGbm(covariates=self.covariates, max_horizon=self.horizon,
                            random_state=self.random_state)


# -- data -------------------------------------------------------------------------------------
def load(names: list[str]) -> tuple[dict[str, pd.DataFrame], dict[str, Covariates]]:
    """The panels (as the accuracy benchmark's) and every target series' covariates."""
    helios = TRACES / "helios_earth_vc"
    with Store.open(":memory:") as store:
        if any(n.startswith("helios") for n in names):
            ingest(store, sorted(helios.glob("earth_vc*_1min.csv.gz")), "helios-vc")
        if any(n.startswith("alibaba") for n in names):
            ingest(store, [TRACES / "alibaba_gpu" / "v2023_openb_pod_list_default.csv.gz"],
                   "alibaba-pods")
        series = store.list_series()
        wanted_ids = _series_of_panels(series, [])  # the accuracy benchmark's panels
        panels = {n: store.load_panel(wanted_ids[n]) for n in names}
        known = set(series[SERIES_ID].astype(str))
        wanted = sorted({f"{c}/{s}/{m}" for p in panels.values()
                         for c, s, _ in (sid.split("/") for sid in p[SERIES_ID].unique())
                         for m in COVARIATES} & known)
        raw = store.load_panel(wanted)
    by_id = {str(sid): part.set_index(TS)["value"] for sid, part in raw.groupby(SERIES_ID)}
    covs: dict[str, Covariates] = {}
    for panel in panels.values():
        for sid, grid in panel.groupby(SERIES_ID)[TS]:
            c, s, _ = str(sid).split("/")
            first, last = grid.min(), grid.max()
            step = int((grid.iloc[1] - grid.iloc[0]).total_seconds())
            index = pd.date_range(first, last, freq=f"{step}s")
            missing = pd.Series(np.nan, index=index)
            cols = [by_id.get(f"{c}/{s}/{m}", missing).reindex(index).to_numpy(
                dtype=np.float64) for m in COVARIATES]
            covs[str(sid)] = Covariates(first=int(first.timestamp()), step=step,
                                        values=np.column_stack(cols))
    return panels, covs


# -- run --------------------------------------------------------------------------------------
def run(panels: dict[str, pd.DataFrame], covs: dict[str, Covariates],
        learners: list[str]) -> pd.DataFrame:
    """Paired ratios of each learner (``gbm``, ``prism``) with covariates to the same learner
    without, per panel and horizon (``dataset, horizon, model, reference, ratio, lo, hi,
    windows``)."""
    every: dict[str, Any] = {
        "gbm": GbmForecaster(random_state=0),
        "gbm+covariates": CovariateGbm(covariates=covs, random_state=0),
        "prism": PrismForecaster(),
        "prism+covariates": CovariatePrism(covariates=covs),
    }
    models = {m: f for m, f in every.items() if m.split("+")[0] in learners}
    pairs = [(f"{m}+covariates", m) for m in learners]
    rows = []
    for name, panel in panels.items():
        frames = []
        for model, forecaster in models.items():
            began = time.perf_counter()
            frames.append(backtest({model: forecaster}, panel, horizon=BACKTEST_HORIZON,
                                   windows=WINDOWS, step=STEP, quantiles=QUANTILES))
            print(f"{name:<14} {model:<18} {time.perf_counter() - began:7.1f} s", flush=True)
        frame = pd.concat(frames, ignore_index=True)
        for horizon, cut in horizon_frames(frame, panel, WINDOWS).items():
            windows = evaluate(cut, panel)
            for model, reference in pairs:
                r = relative_to(windows, model, reference, n_boot=N_BOOT, random_state=0)
                r.insert(0, "horizon", horizon)
                r.insert(0, "dataset", name)
                rows.append(r)
    return pd.concat(rows, ignore_index=True)


def markdown(table: pd.DataFrame, title: str) -> str:
    """One row per model pair, one column per panel and horizon: ratio [lo, hi]."""
    cols = [(d, h) for d in table["dataset"].unique() for h in (*HORIZONS, "1d-daily")]
    head = ["model / reference", *[f"{d} {h}" for d, h in cols]]
    lines = [f"# {title}", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for (model, ref), part in table.groupby(["model", "reference"], sort=False):
        cells = []
        for d, h in cols:
            hit = part[(part["dataset"] == d) & (part["horizon"] == h)]
            cells.append("" if hit.empty else "{:.3f} [{:.2f}, {:.2f}]".format(
                *hit[["ratio", "lo", "hi"]].iloc[0]))
        lines.append(f"| {model} / {ref} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default=",".join(PANELS))
    parser.add_argument("--models", default="gbm,prism",
                        help="learners measured with and without covariates: gbm, prism")
    parser.add_argument("--before", default=None,
                        help="drop each series' last span first (7d: the week before)")
    parser.add_argument("--output", type=Path, default=ROOT / "evaluation" / "results")
    args = parser.parse_args(argv)
    names = [n for n in args.datasets.split(",") if n]
    learners = [m for m in args.models.split(",") if m]
    unknown = [n for n in names if n not in PANELS] + [
        m for m in learners if m not in ("gbm", "prism")]
    if unknown:
        print(f"error: unknown data sets or models {unknown}; choose among "
              f"{', '.join(PANELS)} and gbm, prism",
              file=sys.stderr)
        return 2
    panels, covs = load(names)
    if args.before:
        panels = {n: end_before(p, parse_duration(args.before)) for n, p in panels.items()}
    table = run(panels, covs, learners)
    args.output.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output / "covariates.csv", index=False)
    week = f"the week before the last ({args.before} dropped)" if args.before else "last week"
    text = markdown(table, f"Covariates: MAE ratio with / without them [95 %], {week}")
    (args.output / "covariates.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
