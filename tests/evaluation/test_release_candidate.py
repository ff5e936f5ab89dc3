"""The job-aware candidate of PRISM (evaluation only): wired into the stacker, blind to the
future."""

from __future__ import annotations

import numpy as np
import pandas as pd

from evaluation.benchmarks.release_candidate import CANDIDATE, ReleasePrism
from prism.forecasters.hybrid import PrismForecaster


def _trace(days: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Jobs of 1-8 GPUs lasting 1-6 h, and the 10-minute mean of the GPUs they hold."""
    rng = np.random.default_rng(0)
    t0 = pd.Timestamp("2024-01-01")
    n_jobs = 40 * days
    start = t0 + pd.to_timedelta(rng.uniform(0, days * 86_400, n_jobs), unit="s")
    end = start + pd.to_timedelta(rng.uniform(3_600, 6 * 3_600, n_jobs), unit="s")
    jobs = pd.DataFrame({"num_gpus": rng.choice([1.0, 2.0, 4.0, 8.0], n_jobs),
                         "submit_ts": start, "start_ts": start, "end_ts": end})
    ts = pd.date_range(t0, periods=days * 144, freq="10min")
    mid = (ts + pd.Timedelta("5min")).to_numpy()
    held = ((jobs["start_ts"].to_numpy()[None, :] <= mid[:, None])
            & (jobs["end_ts"].to_numpy()[None, :] > mid[:, None]))
    value = held.astype(float) @ jobs["num_gpus"].to_numpy()
    return jobs, pd.DataFrame({"series_id": "c/vc/gpus_in_use", "ts": ts, "value": value})


def test_the_job_candidate_is_stacked_and_sees_no_job_after_its_origin() -> None:
    jobs, panel = _trace()
    sid = "c/vc/gpus_in_use"
    model = ReleasePrism(jobs={sid: {"jobs": jobs, "reference": jobs}}).fit(panel)
    plain = PrismForecaster().fit(panel)
    # one more column of weights than PRISM's, in the last place
    assert model.stacker_ is not None and plain.stacker_ is not None
    assert model.stacker_.weights_.shape[-1] == plain.stacker_.weights_.shape[-1] + 1
    history = panel["value"].to_numpy()
    origins = np.array([300, 400], dtype=np.int64)
    paths = model._candidates(sid, history, origins, 36)
    assert model._stack_names(paths)[-1] == CANDIDATE
    assert np.isfinite(paths[CANDIDATE]).all()
    # a 64-GPU job that starts after the first origin changes nothing there, but is seen by
    # the second origin, which it is running at
    late = pd.DataFrame({"num_gpus": [64.0], "submit_ts": [panel["ts"][350]],
                         "start_ts": [panel["ts"][350]],
                         "end_ts": [panel["ts"][350] + pd.Timedelta(days=2)]})
    more = pd.concat([jobs, late], ignore_index=True)
    other = ReleasePrism(jobs={sid: {"jobs": more, "reference": more}})
    other.__dict__.update({k: v for k, v in vars(model).items() if k.endswith("_")
                           and k != "release_models_"})
    seen = other._candidates(sid, history, origins, 36)[CANDIDATE]
    np.testing.assert_array_equal(seen[0], paths[CANDIDATE][0])
    assert (seen[1] > paths[CANDIDATE][1] + 30).all()


def test_a_series_without_jobs_has_no_job_forecast() -> None:
    _, panel = _trace(days=3)
    model = ReleasePrism(jobs={}).fit(panel)
    paths = model._candidates("c/vc/gpus_in_use", panel["value"].to_numpy(),
                              np.array([200], dtype=np.int64), 6)
    assert np.isnan(paths[CANDIDATE]).all()
