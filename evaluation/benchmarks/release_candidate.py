"""The job-aware forecast as a candidate of PRISM's stacker: does it earn a weight?

    python -m evaluation.benchmarks.release_candidate [--datasets alibaba,generated] [--before 7d]
        [--windows 28] [--output DIR]

:mod:`evaluation.benchmarks.release` measures the job-aware forecast alone
(:class:`~prism.forecasters.release.JobReleaseModel`: the running jobs' GPUs released by the
survival of job durations, plus arrivals). Here it is one more candidate of PRISM
(:class:`ReleasePrism`): at every origin, for the stacker's training origins, the calibration
origins and the forecast alike, the job model forecasts from the jobs as they were known at
that origin (jobs started by then; ends only once past), and the stacker learns per horizon
block and regime how far to move towards it, with the last value as its prior, as for the
other candidates. A candidate that does not beat the last value out of sample gets no weight.

Panels as :mod:`evaluation.benchmarks.release` (Alibaba v2023 per QoS class and the cluster;
the VCs of a generated trace), cutoffs as the accuracy benchmark (28, 6 h apart; ``--before
7d`` the week before). Models: ``naive``, ``prism`` and ``prism+release``; the table gives
AvgRelMAE against ``naive`` and the paired ratio of ``prism+release`` to ``prism`` with 95 %
intervals. Writes ``release_candidate.{csv,md}`` under ``--output``.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evaluation.benchmarks.accuracy import end_before
from evaluation.benchmarks.release import (
    BACKTEST_HORIZON,
    HORIZONS,
    N_BOOT,
    RESULTS,
    STEP,
    WINDOWS,
    load_panels,
)
from prism.evaluation.backtest import backtest
from prism.evaluation.metrics import evaluate, relative_to, summarize_windows
from prism.forecasters import get_forecaster
from prism.forecasters.base import FloatArray
from prism.forecasters.hybrid import PrismForecaster
from prism.forecasters.release import JobReleaseModel
from prism.schema import TS, parse_duration

CANDIDATE = "release"


class ReleasePrism(PrismForecaster):
    """PRISM (its defaults) with the job-aware forecast as one more stacked candidate.

    Args:
        jobs: series id -> ``{"jobs": its scope's jobs, "reference": its cluster's}``
            (:meth:`prism.store.Store.load_jobs`); a series without them has no such
            candidate (the stacker reads its missing forecast as no move).
    """

    def __init__(self, *, jobs: dict[str, dict[str, pd.DataFrame]] | None = None) -> None:
        super().__init__()
        self.jobs = jobs

    def _release_model(self, series_id: str) -> JobReleaseModel | None:
        # fitted state (its name ends in "_"): a refit starts it anew
        cache: dict[str, JobReleaseModel] = self.__dict__.setdefault("release_models_", {})
        if series_id not in cache:
            given = (self.jobs or {}).get(series_id)
            if given is None:
                return None
            cache[series_id] = JobReleaseModel().fit(
                given["jobs"], self.freq_s_, reference=given["reference"],
                observed_from=self.first_ts_[series_id])
        return cache[series_id]

    def _candidate_names(self) -> list[str]:
        return [*super()._candidate_names(), CANDIDATE]

    @staticmethod
    def _stack_names(paths: Iterable[str]) -> list[str]:
        names = list(paths)
        return [*PrismForecaster._stack_names(names), *([CANDIDATE] if CANDIDATE in names
                                                         else [])]

    def _candidates(self, series_id: str, history: FloatArray, origins: Any, steps: int,
                    *args: Any, **kwargs: Any) -> dict[str, FloatArray]:
        out = super()._candidates(series_id, history, origins, steps, *args, **kwargs)
        model = self._release_model(series_id)
        if model is None:
            out[CANDIDATE] = np.full((len(origins), steps), np.nan)
            return out
        # an origin e has seen the buckets before e: it stands at the end of bucket e - 1
        at = pd.Series(self.first_ts_[series_id]
                       + pd.to_timedelta(np.asarray(origins) * self.freq_s_, unit="s"))
        out[CANDIDATE] = np.asarray(model.forecast(at, steps), dtype=np.float64)
        return out


def run(before: str | None, datasets: list[str], windows: int = WINDOWS) -> pd.DataFrame:
    """``naive``, ``prism`` and ``prism+release`` on each panel: AvgRelMAE against naive and
    the paired ratio to ``prism`` (``dataset, horizon, model, reference, ratio, lo, hi,
    windows``)."""
    panels, jobs = load_panels()
    rows = []
    for name, panel in panels.items():
        if name not in datasets:
            continue
        if before:
            panel = end_before(panel, parse_duration(before))
        frames = []
        for model, forecaster in (("naive", get_forecaster("naive")),
                                  ("prism", PrismForecaster()),
                                  ("prism+release", ReleasePrism(jobs=jobs))):
            began = time.perf_counter()
            frames.append(backtest({model: forecaster}, panel, horizon=BACKTEST_HORIZON,
                                   windows=windows, step=STEP, quantiles=(0.5,)))
            print(f"{name:<10} {model:<14} {time.perf_counter() - began:7.1f} s", flush=True)
        frame = pd.concat(frames, ignore_index=True)
        ahead = frame[TS] - frame["cutoff"]
        for horizon in HORIZONS:
            scored = evaluate(frame[ahead <= parse_duration(horizon)], panel)
            table = summarize_windows(scored, baseline="naive", n_boot=N_BOOT, random_state=0)
            for r in table[table["model"] != "naive"].itertuples():
                rows.append({"dataset": name, "horizon": horizon, "model": r.model,
                             "reference": "naive", "ratio": r.avg_rel_mae, "lo": r.lo,
                             "hi": r.hi, "windows": r.windows})
            paired = relative_to(scored, "prism+release", "prism", n_boot=N_BOOT,
                                 random_state=0)
            for r in paired.itertuples():
                rows.append({"dataset": name, "horizon": horizon, "model": r.model,
                             "reference": r.reference, "ratio": r.ratio, "lo": r.lo,
                             "hi": r.hi, "windows": r.windows})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, title: str) -> str:
    """One row per panel and horizon: each model against naive, and the pair."""
    def cell(r: pd.DataFrame) -> str:
        return "" if r.empty else "{:.3f} [{:.2f}, {:.2f}]".format(
            *r[["ratio", "lo", "hi"]].iloc[0])

    lines = [f"# {title}", "",
             "| panel | horizon | `prism` / naive | `prism+release` / naive | "
             "`prism+release` / `prism` |", "|---|---|---|---|---|"]
    for (d, h), g in table.groupby(["dataset", "horizon"], sort=False):
        lines.append(f"| {d} | {h} | "
                     f"{cell(g[(g['model'] == 'prism') & (g['reference'] == 'naive')])} | "
                     f"{cell(g[(g['model'] == 'prism+release') & (g['reference'] == 'naive')])}"
                     f" | {cell(g[g['reference'] == 'prism'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", default=None,
                        help="drop each series' last span first (7d: the week before)")
    parser.add_argument("--datasets", default="alibaba,generated",
                        help="panels among alibaba, generated")
    parser.add_argument("--windows", type=int, default=WINDOWS,
                        help="cutoffs, 6 h apart (the generated panel's job model is slow)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    table = run(args.before, [d for d in args.datasets.split(",") if d], args.windows)
    args.output.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output / "release_candidate.csv", index=False)
    week = f"the week before the last ({args.before} dropped)" if args.before else "last week"
    text = markdown(table, f"The job-aware forecast as a PRISM candidate, {week}: AvgRelMAE "
                           "[95 %]")
    (args.output / "release_candidate.md").write_text(text)
    print(text)  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
