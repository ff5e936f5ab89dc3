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


def test_with_tail_a_run_older_than_all_but_two_is_read_from_the_three_longest() -> None:
    # past jobs ran 5, 6 and 8 points; the running one has run 9: past the shortest of the
    # three longest (5), two of them ran 1 more point (6, 8), one ran 2 and 3 more (8), none 4
    history = np.array(_jobs([5, 6, 8]) + [8.0] * 9)
    end = np.array([len(history)])
    assert hold_steps(history, end, 10, tail=True).tolist() == [3]
    assert hold_steps(history, end, 10, tail=True, share=0.5).tolist() == [1]
    # a run still younger than the third longest is read as without it
    young = np.array(_jobs([5, 6, 8]) + [8.0] * 3)
    assert (hold_steps(young, np.array([len(young)]), 10, tail=True).tolist()
            == hold_steps(young, np.array([len(young)]), 10).tolist() == [5])
    # too few comparable runs still say nothing
    few = np.array(_jobs([5, 6]) + [8.0] * 9)
    assert hold_steps(few, np.array([len(few)]), 10, tail=True).tolist() == [0]


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


def test_prism_holds_a_step_older_than_all_but_two_past_ones_from_the_longest() -> None:
    # The shapes benchmark's second cluster (seed 2): fleets scaled by hand in steps that
    # hold an exponential time, beside growing and drained VCs. At this cutoff stairs1's
    # last step up has held 172 points, longer than all but two of its past steps up: the
    # plain gate holds nothing and the panel's weights move the forecast; with the tail the
    # three longest past steps say it holds the day, and it held.
    from evaluation.benchmarks.shapes import make_panels

    panel = make_panels(2)["10min-b"]
    cutoff = pd.Timestamp("2026-01-27 11:50")
    train = panel[panel["ts"] <= cutoff]
    model = PrismForecaster(use_rnn=False).fit(train)
    assert model.use_hold_tail  # on by default
    tail = model.predict("1d", ())
    model.use_hold_tail = False
    plain = model.predict("1d", ())
    sid = "s2/stairs1/gpus_in_use"
    v = train.loc[train["series_id"] == sid, "value"].to_numpy()
    end = np.array([len(v)])
    edges = model._block_edges(144)
    assert not model.state_[sid].has_cycle
    assert hold_steps(v, end, 144, edges=edges).tolist() == [0]
    assert hold_steps(v, end, 144, edges=edges, tail=True).tolist() == [144]
    mean = tail.loc[tail["series_id"] == sid, "mean"].to_numpy()
    was = plain.loc[plain["series_id"] == sid, "mean"].to_numpy()
    np.testing.assert_array_equal(mean, v[-1])
    assert np.abs(was - v[-1]).max() > 1.0  # the plain forecast moved a GPU and more
    actual = panel.loc[(panel["series_id"] == sid) & (panel["ts"] > cutoff), "value"]
    actual = actual.to_numpy()[:144]
    assert np.abs(mean - actual).mean() < np.abs(was - actual).mean()
    # the other series are forecast as before wherever their gate reads no tail
    for other, part in train.groupby("series_id"):
        w = part["value"].to_numpy()
        hold = hold_steps(w, np.array([len(w)]), 144, edges=edges)
        if hold.tolist() == hold_steps(w, np.array([len(w)]), 144, edges=edges,
                                       tail=True).tolist():
            np.testing.assert_array_equal(tail.loc[tail["series_id"] == other, "mean"],
                                          plain.loc[plain["series_id"] == other, "mean"])
