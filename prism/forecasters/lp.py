"""The stacker's linear programs, solved by HiGHS with less overhead than ``linprog``.

:func:`row_marginals` solves ``min c.x  s.t.  A x <= b,  lb <= x <= ub`` and returns the
marginals of the rows of ``A`` (what :func:`scipy.optimize.linprog` reports as
``res.ineqlin.marginals``), or ``None`` where the program has no optimum.

The stacker's programs have one column per (origin, step) row of its training data, up to
1,500, and a handful of rows. ``linprog`` then spends more time around HiGHS than in it: it
turns the bounds' marginals into arrays in a Python loop over the columns, and checks its
options one by one; on a single-series fit that was 0.4 s of the stacker's 0.7 s. This module
hands HiGHS the same model with the same options (``method="highs"``: presolve on, the dual
simplex strategy) through SciPy's own HiGHS binding, so the solution is the same bit for bit
(``tests/forecasters/test_lp.py`` checks it against ``linprog``), and reads back only the row
duals. Where that binding is not there (a SciPy before 1.15) it goes through ``linprog``; where
it is there but of another shape, it says so once in the log and goes through ``linprog`` from
then on.
"""

from __future__ import annotations

import logging

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.sparse import csc_array

FloatArray = npt.NDArray[np.float64]

logger = logging.getLogger(__name__)

try:  # SciPy >= 1.15 ships HiGHS as this pybind11 module (private: hence the fallback)
    from scipy.optimize._highspy import _core as _highs
except ImportError:  # pragma: no cover - exercised only on other SciPy layouts
    _highs = None

#: ``linprog``'s tolerance for a solution outside its bounds or rows (its ``_check_result``:
#: ``sqrt(1e-9) * 10``).
_TOL = float(np.sqrt(1e-9) * 10)


def row_marginals(cost: FloatArray, a_ub: FloatArray, b_ub: FloatArray, lower: FloatArray,
                  upper: FloatArray, *, fast: bool = True) -> FloatArray | None:
    """The marginals of ``a_ub x <= b_ub`` at the optimum, ``None`` if there is none.

    Args:
        cost: ``(n,)`` objective of the minimisation.
        a_ub: ``(m, n)`` dense constraint matrix.
        b_ub: ``(m,)`` right-hand sides.
        lower, upper: ``(n,)`` bounds of the variables (``inf`` allowed).
        fast: ``False`` solves through ``linprog`` (the reference the tests compare with).
    """
    global _highs
    if fast and _highs is not None:
        try:
            return _direct(cost, a_ub, b_ub, lower, upper)
        except (AttributeError, TypeError) as exc:  # the private binding changed shape
            logger.warning("SciPy's HiGHS binding is not as expected (%s): the stacker's "
                           "linear programs go through linprog from now on", exc)
            _highs = None
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=np.column_stack([lower, upper]),
                  method="highs")
    return np.asarray(res.ineqlin.marginals, dtype=np.float64) if res.success else None


def _direct(cost: FloatArray, a_ub: FloatArray, b_ub: FloatArray, lower: FloatArray,
            upper: FloatArray) -> FloatArray | None:
    """:func:`row_marginals` through ``scipy.optimize._highspy._core``."""
    assert _highs is not None
    m, n = a_ub.shape
    matrix = csc_array(a_ub)  # as linprog builds it: explicit zeros dropped
    inf = float(_highs.kHighsInf)
    lp = _highs.HighsLp()
    lp.num_col_, lp.num_row_ = n, m
    lp.a_matrix_.format_ = _highs.MatrixFormat.kColwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, m
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_ = np.nan_to_num(np.asarray(lower, dtype=np.float64), posinf=inf, neginf=-inf)
    lp.col_upper_ = np.nan_to_num(np.asarray(upper, dtype=np.float64), posinf=inf, neginf=-inf)
    lp.row_lower_ = np.full(m, -inf)
    lp.row_upper_ = np.nan_to_num(np.asarray(b_ub, dtype=np.float64), posinf=inf, neginf=-inf)
    options = _highs.HighsOptions()
    options.presolve = "on"
    options.simplex_strategy = _highs.simplex_constants.SimplexStrategy.kSimplexStrategyDual
    options.highs_debug_level = _highs.HighsDebugLevel.kHighsDebugLevelNone
    options.log_to_console = False
    options.output_flag = False
    solver = _highs._Highs()
    if (solver.passOptions(options) == _highs.HighsStatus.kError
            or solver.passModel(lp) == _highs.HighsStatus.kError
            or solver.run() == _highs.HighsStatus.kError
            or solver.getModelStatus() != _highs.HighsModelStatus.kOptimal):
        return None
    solution = solver.getSolution()
    x = np.asarray(solution.col_value, dtype=np.float64)
    slack = b_ub - np.asarray(solution.row_value, dtype=np.float64)
    # linprog's own check of an optimal solution: finite, within the bounds and the rows
    if (not np.isfinite(x).all() or not np.isfinite(slack).all()
            or (x < lower - _TOL).any() or (x > upper + _TOL).any() or (slack < -_TOL).any()):
        return None
    return np.asarray(solution.row_dual, dtype=np.float64)
