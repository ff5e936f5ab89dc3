"""The hold gate: how long a value that held exactly still goes on holding."""

from __future__ import annotations

import numpy as np
import pandas as pd

from prism.forecasters.hold import hold_steps, runs
from prism.forecasters.hybrid import PrismForecaster


def _jobs(lengths: list[int], gpus: float = 8.0, gap: int = 5) -> list[float]:
    """An idle series running one job after another, each ``lengths[i]`` points long."""
    out = [0.0] * gap
    for n in lengths:
        out += [gpus] * n + [0.0] * gap
    return out


def test_runs_are_the_stretches_of_equal_values() -> None:
    starts, lengths = runs(np.array([0, 0, 8, 8, 8, 0, 16.0]))
    assert starts.tolist() == [0, 2, 5, 6]
    assert lengths.tolist() == [2, 3, 1, 1]


def test_holds_through_the_steps_past_runs_as_long_held() -> None:
    # past jobs ran 5, 6 and 8 points; the running one has run 3: all three ran at least 5
    # (2 more), two ran 6 (3 more: 2/3), one ran 7 and 8 (1/3), none 9
    history = np.array(_jobs([5, 6, 8]) + [8.0, 8.0, 8.0])
    assert hold_steps(history, np.array([len(history)]), 10).tolist() == [5]
    # a bar of one third and more: through 3 more steps (2/3), not the 1/3 after
    assert hold_steps(history, np.array([len(history)]), 10, share=0.5).tolist() == [3]
    # a forecast shorter than the hold holds all of it
    assert hold_steps(history, np.array([len(history)]), 2).tolist() == [2]


def test_a_run_longer_than_every_past_one_is_not_held() -> None:
    history = np.array(_jobs([5, 6, 8]) + [8.0] * 9)
    assert hold_steps(history, np.array([len(history)]), 10).tolist() == [0]


def test_too_few_comparable_runs_say_nothing() -> None:
    history = np.array(_jobs([5, 6]) + [8.0, 8.0, 8.0])
    assert hold_steps(history, np.array([len(history)]), 10).tolist() == [0]
    # runs of another kind do not count: the idle gaps between jobs are runs at 0
    assert hold_steps(history, np.array([len(history)]), 10, min_runs=2).tolist() == [3]


def test_a_value_that_just_moved_an_idle_one_or_a_noisy_series_is_not_held() -> None:
    history = np.array(_jobs([5, 6, 8]) + [8.0])
    assert hold_steps(history, np.array([len(history)]), 10).tolist() == [0]
    # at 0 the stacker's idle regime decides (every past gap of 5 idle points held on)
    idle = np.array(_jobs([5, 6, 8, 9], gap=9)[:-6])
    assert idle[-3:].tolist() == [0.0] * 3
    assert hold_steps(idle, np.array([len(idle)]), 10).tolist() == [0]
    noisy = np.random.default_rng(0).normal(100, 5, 500)
    assert hold_steps(noisy, np.arange(10, 500, 7), 36).max() == 0


def test_only_the_past_of_each_origin_counts() -> None:
    # at the origin after the second job's third point, only the first job (5) is complete
    # before it: too few; the later jobs may not be read
    history = np.array(_jobs([5, 9, 9, 9]))
    end = 5 + 5 + 5 + 3
    assert history[end - 1] == 8.0 and history[end - 4] == 0.0
    assert hold_steps(history, np.array([end]), 10).tolist() == [0]
    assert hold_steps(history[:end], np.array([end]), 10).tolist() == [0]
    # at the third job's third point, two complete before it (5 and 9): still too few...
    third = 5 + (5 + 5) + (9 + 5) + 3
    assert hold_steps(history, np.array([third]), 10).tolist() == [0]
    assert hold_steps(history, np.array([third]), 10, min_runs=2).tolist() == [6]
    # ... at the fourth's, three: held while one in 0.15 of them (the 9s) held on
    fourth = third + 6 + 5 + 3
    assert history[fourth - 1] == 8.0 and history[fourth - 4] == 0.0
    assert hold_steps(history, np.array([fourth]), 10).tolist() == [6]


def test_held_through_the_last_horizon_block_it_reaches() -> None:
    # held step by step through 5 steps (see above); by blocks of 2, 4 and 8 steps, through 4
    history = np.array(_jobs([5, 6, 8]) + [8.0, 8.0, 8.0])
    end = np.array([len(history)])
    assert hold_steps(history, end, 10, edges=[2, 4, 8, 10]).tolist() == [4]
    assert hold_steps(history, end, 10, edges=[6, 10]).tolist() == [0]
    assert hold_steps(history, end, 10, edges=[5, 10]).tolist() == [5]


def test_prism_holds_a_job_as_long_as_past_jobs_as_old_held() -> None:
    # Idle VCs that ran jobs of 40 min to 33 h; each has run a 16-GPU job for 16 points. Most
    # past jobs had ended within 4 h, and the panel's weights forecast this one to end too;
    # where at least 15 % of the VC's jobs that had run 16 points ran on through a horizon
    # block, the gate holds it there: had it run on, any move would lose to the last value
    # without bound.
    rng = np.random.default_rng(3)
    values = {}
    for i in range(4):
        v: list[float] = []
        while len(v) < 144 * 21:
            v += [0.0] * int(rng.integers(100, 400))
            v += [float(rng.choice([8, 16]))] * int(rng.choice([4, 8, 20, 30, 40, 200]))
        values[f"c/idle{i}/gpus_in_use"] = np.array(v[:144 * 21 - 40] + [0.0] * 24
                                                    + [16.0] * 16)
    panel = pd.concat([pd.DataFrame({
        "series_id": sid, "ts": pd.date_range("2026-01-05", periods=len(v), freq="10min"),
        "value": v}) for sid, v in values.items()], ignore_index=True)
    gated = PrismForecaster(use_rnn=False, use_hold_gate=True).fit(panel)
    plain = PrismForecaster(use_rnn=False, use_hold_gate=False).fit(panel)
    out, before = gated.predict("1d", ()), plain.predict("1d", ())
    edges = gated._block_edges(144)
    long_held = 0
    for sid, v in values.items():
        assert not (gated.state_[sid].periodic or gated.state_[sid].repeats)
        hold = int(hold_steps(v, np.array([len(v)]), 144, edges=edges)[0])
        mean = out.loc[out["series_id"] == sid, "mean"].to_numpy()
        was = before.loc[before["series_id"] == sid, "mean"].to_numpy()
        np.testing.assert_array_equal(mean[:hold], 16.0)
        np.testing.assert_array_equal(mean[hold:], was[hold:])  # past it, as before
        if hold >= 72 and was[:hold].min() < 16.0:
            long_held += 1
    assert long_held >= 2
    # the gate moves forecasts, not what the stacker learned
    assert gated.stacker_ is not None and plain.stacker_ is not None
    np.testing.assert_array_equal(gated.stacker_.weights_, plain.stacker_.weights_)
