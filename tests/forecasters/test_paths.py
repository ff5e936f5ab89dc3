"""The plain array functions behind the PRISM hybrid's candidates and regimes."""

from __future__ import annotations

import numpy as np

from prism.forecasters.paths import series_quantum


def test_the_quantum_is_the_step_every_move_is_a_multiple_of() -> None:
    rng = np.random.default_rng(0)
    gpus = np.cumsum(rng.choice([-2, -1, 0, 0, 1, 3], 500)) + 100.0
    assert series_quantum(gpus) == 1.0
    jobs = np.zeros(500)  # 8-GPU jobs on an idle VC
    jobs[100:140] = 8.0
    jobs[120:130] = 16.0
    assert series_quantum(jobs) == 8.0
    halves = np.round(rng.normal(10, 2, 500) * 2) / 2  # fractional GPUs in halves
    assert series_quantum(halves) == 0.5
    tenths = np.round(rng.normal(50, 5, 500), 1)  # 10-minute means of per-minute counts
    assert abs(series_quantum(tenths) - 0.1) < 1e-9


def test_values_that_move_continuously_have_no_quantum() -> None:
    rng = np.random.default_rng(1)
    assert series_quantum(rng.normal(50, 5, 500)) == 0.0
    steps = np.repeat([10.0, 18.0, 12.0], 50)
    assert series_quantum(steps) == 2.0
    steps[-1] = 12.37  # 8, 6 and 0.37 share no step of 0.37/16 or more: none
    assert series_quantum(steps) == 0.0
    steps[-1] = 12.5  # 8, 6 and 0.5 do: half a GPU
    assert series_quantum(steps) == 0.5
    assert series_quantum(np.full(100, 7.0)) == 0.0  # never moved: nothing to go by
    with_gaps = np.array([1.0, np.nan, 3.0, 5.0, np.nan, 9.0])
    assert series_quantum(with_gaps) == 2.0
