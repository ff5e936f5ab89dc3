"""The stacker's linear programs: the direct HiGHS call is linprog, bit for bit."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest

import prism.forecasters.lp as lp
import prism.forecasters.stacking as stacking
from prism.forecasters import get_forecaster
from prism.forecasters.lp import row_marginals


def _stacking_program(seed: int, rows: int, cands: int) -> tuple[np.ndarray, ...]:
    """The dual least-absolute-deviation program of ``NaiveAnchoredStacker._lad``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cands))
    x[:, 0] = 0.0  # a candidate that never moves (explicit zeros in the matrix)
    x[rng.random(x.shape) < 0.2] = 0.0
    t = x @ rng.dirichlet(np.ones(cands)) * 0.6 + rng.laplace(size=rows) * 0.3
    w = rng.uniform(0.2, 3.0, rows)
    lam = 0.002 * float(np.sum(w * np.abs(t)))
    cost = np.concatenate([-t, [1.0]])
    a_ub = np.hstack([x.T, -np.ones((cands, 1))])
    return cost, a_ub, np.full(cands, lam), np.concatenate([-w, [0.0]]), np.concatenate(
        [w, [np.inf]])


@pytest.mark.parametrize("seed, rows, cands", [(0, 40, 3), (1, 600, 8), (2, 1500, 11),
                                               (3, 25, 9)])
def test_the_direct_call_is_linprog_bit_for_bit(seed: int, rows: int, cands: int) -> None:
    program = _stacking_program(seed, rows, cands)
    fast = row_marginals(*program)
    slow = row_marginals(*program, fast=False)
    assert fast is not None and slow is not None
    np.testing.assert_array_equal(fast, slow)
    assert (fast <= 1e-12).all() and fast.sum() < 0  # the weights -marginals are >= 0


def test_a_program_without_an_optimum_gives_none_either_way() -> None:
    # x >= 1 and x <= 0: infeasible
    program = (np.array([1.0]), np.array([[1.0]]), np.array([0.0]), np.array([1.0]),
               np.array([np.inf]))
    assert row_marginals(*program) is None
    assert row_marginals(*program, fast=False) is None


def test_without_scipys_highs_binding_it_falls_back_to_linprog(monkeypatch) -> None:
    program = _stacking_program(4, 300, 5)
    expected = row_marginals(*program)
    monkeypatch.setattr(lp, "_highs", None)
    np.testing.assert_array_equal(row_marginals(*program), expected)


def test_a_binding_of_another_shape_falls_back_to_linprog_and_says_so(monkeypatch,
                                                                      caplog) -> None:
    class Elsewhere:  # a SciPy whose private module has other names
        kHighsInf = 1e30

    program = _stacking_program(5, 200, 4)
    expected = row_marginals(*program, fast=False)
    monkeypatch.setattr(lp, "_highs", Elsewhere())
    with caplog.at_level("WARNING", logger="prism.forecasters.lp"):
        np.testing.assert_array_equal(row_marginals(*program), expected)
    assert "through linprog from now on" in caplog.text
    assert lp._highs is None  # once: later programs go straight to linprog


def test_prism_learns_the_same_stacker_through_linprog(monkeypatch) -> None:
    rng = np.random.default_rng(7)
    n = 12 * 144
    t = np.arange(n)
    frames = [pd.DataFrame({
        "series_id": f"c/vc{i}/gpus_in_use",
        "ts": pd.date_range("2026-01-05", periods=n, freq="10min"),
        "value": np.round(40 + 20 * np.sin(2 * np.pi * t / 144 + i) + rng.normal(0, 3, n))})
        for i in range(3)]
    panel = pd.concat(frames, ignore_index=True)
    params = {"use_gbm": False, "use_rnn": False}
    fast = get_forecaster("prism", **params).fit(panel)
    monkeypatch.setattr(stacking, "row_marginals",
                        functools.partial(row_marginals, fast=False))
    slow = get_forecaster("prism", **params).fit(panel)
    assert fast.stacker_.weights_.any()  # something was learned, not all last value
    np.testing.assert_array_equal(fast.stacker_.weights_, slow.stacker_.weights_)
    pd.testing.assert_frame_equal(fast.predict("1d", (0.1, 0.5, 0.9)),
                                  slow.predict("1d", (0.1, 0.5, 0.9)))
