"""A meta-learner that combines candidate forecasts, with the last value as its prior.

:class:`NaiveAnchoredStacker` learns, per block of horizon steps and per *regime* of the
forecast origin, how far to move from the last value towards each candidate forecast:

    forecast = last + sum_c w_c * (candidate_c - last),   w_c >= 0,  sum_c w_c <= 1

so the weights are a convex combination in which the last value keeps whatever weight the
candidates do not earn (``1 - sum w``). They are fitted by least absolute deviation
(a linear program, solved by HiGHS: :mod:`prism.forecasters.lp`) on out-of-sample
forecasts from rolling origins of all series of a panel, each window's errors divided by the
last value's error in that window and block, so the loss is the mean relative MAE against the
last value that the benchmark reports, and a near-idle series weighs as much as a busy one.
That unit is floored at a share of the series' mean error in the block, larger for blocks of
few steps, whose last-value error is as noisy as the error it divides (hourly series an hour
ahead: one step).
A small penalty on ``sum w`` pulls ties to the last value.

**Naive is the prior.** A block's weights are kept only if, fitted on two of three
time-ordered folds of the training origins, they beat the last value on the third, on every
fold and by at least ``min_gain`` over all three, surely (:func:`beats_the_last_value`: the
one-sided upper bound of the mean log ratio below 0); then they are refitted on all origins.
Otherwise the block forecasts the last value. A regime with too few origins uses the weights
of all regimes pooled, and so does a regime whose own weights fail the validation while the
pooled ones pass it: the pooled weights beat the last value out of sample on every fold of all
origins, this regime's included, whereas a regime's own folds hold a fraction of them (on the
accuracy benchmark this took Alibaba cluster a day ahead from 0.995 to 0.967 of the last
value's MAE, paired ratio 0.972 [0.94, 1.00], and left the Helios VCs the last value). Unless
the pooled weights lost to the last value on this regime's own windows, out of sample (the
mean of their log ratios on the folds above 0): then the regime keeps the last value.

**Redirects** (only when the data give each origin an ``alternative`` regime: the one it
would be in were it not split off, e.g. an origin after a jump without the jump). Per block,
a regime whose origins did surely better (a paired one-sided test of the log ratios) under
their alternative regimes' weights, which were fitted without them, than under its own
weights out of fold, sends its origins there (``redirect_``). PRISM offers alternatives only
with ``use_redirect``, off by default (no gain since the periodic series' jumps have regimes of
their own; see `evaluation/README.md`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from prism.forecasters.lp import row_marginals

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

logger = logging.getLogger(__name__)

#: At most this many (origin, step) rows per linear program (a seeded sample beyond). 1500
#: rows fit as well as 4000 on Philly, Alibaba and the generated arrivals (AvgRelMAE within
#: 0.003 at 1 h, 6 h and 1 d over 28 cutoffs) at half the fit time of a single-series panel.
MAX_ROWS = 1500
#: A regime needs this many origins to get weights of its own.
MIN_ORIGINS = 24
#: A window's loss unit is at least this share of its series' mean error in the block...
FLOOR_SHARE = 0.1
#: ... and at least this share divided by the square root of the block's steps: the last
#: value's error over a few steps is a noisy unit (see :meth:`NaiveAnchoredStacker._scales`).
FLOOR_ONE_STEP = 0.5
#: Time-ordered folds of the validation (each must not lose to the last value).
FOLDS = 3
#: The validation's gain must also be sure: the mean log ratio to the last value plus this many
#: standard errors (one-sided 95 %) below 0. On generated deployments (seed 1) a 3.3 % gain on
#: the 31 windows that moved in the first hour took a regime to a candidate there, and one
#: window with 25 times the last value's error made the panel 1.019 of it at 1 h. (The windows
#: are taken as independent; clustered by series and half-day, the bound cost 1-2 % on Philly
#: and Alibaba cluster, single series, on both weeks of the accuracy benchmark.)
SURE_Z = 1.645


@dataclass
class StackingData:
    """Out-of-sample candidate forecasts of a panel, from many origins.

    Attributes:
        deltas: ``(candidates, origins, steps)`` candidate minus the last value (0 where a
            candidate has no forecast).
        target: ``(origins, steps)`` actual minus the last value (NaN past the data).
        group: ``(origins,)`` the series each origin belongs to (an integer id).
        order: ``(origins,)`` the origin's position in time within its series, 0..1 (for the
            time split).
        regime: ``(origins,)`` the origin's regime (small non-negative integers).
        alternative: ``(origins,)`` the regime each origin would be in were it not split off
            (for an origin after a jump: the regime the same origin has without it), or None.
        level: ``(origins,)`` the series' level at the origin (``|last|``): a window's MAE is
            floored at ``1e-3`` of it when ratios are taken. The benchmark floors at the
            series' mean level instead; at a last value of 0 this floor is far stricter, on
            purpose: the stacker with the series' floor moved from a 0 it should have kept
            (a generated app scaled to 0 got forecast back towards its old 4 GPUs, 2,775 times
            the last value's error), which cost deployments 0.3 % and 1.7 % a day ahead on two
            weeks while it won 5 % on arrivals an hour ahead.
    """

    deltas: FloatArray
    target: FloatArray
    group: IntArray
    order: FloatArray
    regime: IntArray
    level: FloatArray
    alternative: IntArray | None = None


class NaiveAnchoredStacker:
    """Convex weights over candidates per (horizon block, regime); see the module docstring.

    Args:
        edges: upper edges (in steps, increasing) of the horizon blocks.
        n_regimes: regimes are ``0 .. n_regimes - 1``.
        parents: per regime, the regime it was split from (itself if none); regimes with one
            parent are a family. A regime with too few origins of its own learns from its
            family's origins together (the regime before the split), then the pooled ones.
        min_gain: a block's weights must cut the validation loss by this share.
        penalty: weight of ``sum w`` in the loss, as a share of the last value's loss.
        redirect_after: only blocks starting at this step or later may redirect a regime to
            its origins' alternative regimes (see ``StackingData.alternative``).
        floor_one_step: a window's loss unit is at least this share of its series' mean error
            in the block divided by the square root of the block's steps (and at least
            ``FLOOR_SHARE``; see :meth:`_scales`).
        random_state: seed of the row sample.
    """

    def __init__(self, *, edges: list[int], n_regimes: int, parents: list[int] | None = None,
                 min_gain: float = 0.02,
                 penalty: float = 0.002, redirect_after: int = 0,
                 floor_one_step: float = FLOOR_ONE_STEP,
                 random_state: int | None = 0) -> None:
        self.edges = edges
        self.n_regimes = n_regimes
        self.parents = parents
        self.min_gain = min_gain
        self.penalty = penalty
        self.redirect_after = redirect_after
        self.floor_one_step = floor_one_step
        self.random_state = random_state

    def fit(self, data: StackingData) -> NaiveAnchoredStacker:
        """Learn ``weights_`` ``(blocks, regimes, candidates)`` from ``data``, and
        ``group_logs_`` ``(groups, blocks)``: per series, the mean log ratio of its windows'
        MAE under the kept weights (out of fold; 0 where the last value is kept) to the last
        value's, NaN for a series without scored windows."""
        n_cand = data.deltas.shape[0]
        n_blocks = len(self.edges)
        self.weights_ = np.zeros((n_blocks, self.n_regimes, n_cand))
        self.gain_ = np.zeros((n_blocks, self.n_regimes))  # validation loss cut (share)
        # per block and regime: its origins take their alternative regime's weights
        self.redirect_ = np.zeros((n_blocks, self.n_regimes), dtype=bool)
        parents = np.asarray(self.parents if self.parents is not None
                             else range(self.n_regimes))
        # each regime's family: the origins of every regime split from the same parent
        families = [parents[data.regime] == parents[r] for r in range(self.n_regimes)]
        # per series and block: the mean out-of-fold log ratio of the kept weights
        n_groups = int(data.group.max()) + 1 if len(data.group) else 0
        self.group_logs_ = np.full((n_groups, n_blocks), np.nan)
        lo = 0
        for b, hi in enumerate(self.edges):
            hi = min(hi, data.target.shape[1])
            if hi <= lo:
                break
            scale = self._scales(data, lo, hi)
            pooled, pooled_gain, held_out = self._fit_block(data, lo, hi, scale,
                                                            np.ones(len(data.group), bool),
                                                            self._rng(b, -1))
            scored = np.full(len(data.group), np.nan)  # out-of-fold logs of the kept weights
            for r in range(self.n_regimes):
                mask = data.regime == r
                family = families[r]
                if mask.sum() >= MIN_ORIGINS:
                    w, gain, own_out = self._fit_block(data, lo, hi, scale, mask,
                                                       self._rng(b, r))
                elif family.sum() >= MIN_ORIGINS and family.sum() > mask.sum():
                    # too few of its own: the regime it was split from, as if unsplit
                    w, gain, own_out = self._fit_block(data, lo, hi, scale, family,
                                                       self._rng(b, r))
                else:
                    w, gain, own_out = np.zeros(n_cand), 0.0, held_out
                if not w.any():  # failed its validation: the pooled weights, if any, unless
                    # they lost to the last value on this regime's windows out of sample
                    own = held_out[mask & np.isfinite(held_out)]
                    if not len(own) or own.mean() <= 0:
                        w, gain, own_out = pooled, pooled_gain, held_out
                if not w.any():
                    own_out = np.zeros(len(data.group))  # the last value: log ratio 0
                scored[mask] = own_out[mask]
                self.weights_[b, r] = w
                self.gain_[b, r] = gain
            if data.alternative is not None and lo >= self.redirect_after:
                self._redirect(data, lo, hi, b, scored)
            ok = np.isfinite(scored)
            count = np.bincount(data.group[ok], minlength=n_groups)
            total = np.bincount(data.group[ok], weights=scored[ok], minlength=n_groups)
            self.group_logs_[:, b] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
            lo = hi
        return self

    def _rng(self, block: int, regime: int) -> np.random.Generator:
        """The row sample's generator of one fit: its own per block and regime (-1: pooled),
        so a regime's weights do not depend on which other regimes had origins to fit."""
        if self.random_state is None:
            return np.random.default_rng()
        return np.random.default_rng([self.random_state, block, regime + 1])

    def _redirect(self, data: StackingData, lo: int, hi: int, b: int,
                  scored: FloatArray) -> None:
        """Send a split-off regime's origins to their alternative regime's weights in this
        block where those did surely better on them (paired, out of sample: the alternative
        regimes' weights were fitted without these origins) than the regime's own weights
        did out of fold."""
        assert data.alternative is not None
        target = data.target[:, lo:hi]
        for r in range(self.n_regimes):
            mask = (data.regime == r) & (data.alternative != r) & np.isfinite(scored)
            if mask.sum() < MIN_ORIGINS:
                continue
            idx = np.flatnonzero(mask)
            w = self.weights_[b, data.alternative[idx]]  # (O, C)
            moved = np.einsum("oc,cos->os", w, data.deltas[:, idx, lo:hi])
            t = target[idx]
            ok = np.isfinite(t)
            origin = np.repeat(idx[:, None], hi - lo, axis=1)[ok]
            ids, alt = _log_ratios(np.abs(t - moved)[ok], np.abs(t)[ok], origin, data.level)
            if len(ids) < 2:
                continue
            diff = alt - scored[ids]
            if beats_the_last_value(diff, 0.0):
                self.redirect_[b, r] = True

    def _scales(self, data: StackingData, lo: int, hi: int) -> FloatArray:
        """Per origin: the last value's MAE in this block (the loss's unit), floored.

        Dividing each window's errors by the last value's error in that window makes the loss
        the mean ratio to the last value; the floor (a share of the series' mean error in the
        block) keeps a window the last value got exactly right from weighing infinitely.

        The share grows as the block shortens (``floor_one_step / sqrt(steps)``, at least
        ``FLOOR_SHARE``): over one step the last value's error is as noisy as the error it
        scales, so the windows where it happened to be nearly right outweighed the rest and
        shrank every weight towards the last value. On a one-step block whose candidate is
        exactly the cycle under noise of 0.4 of its amplitude, the weight was 0.49 (the
        benchmark's ratio 0.58, 0.43 at the best weight); with half the series' mean error as
        the floor it is 0.76 (0.48). A block of 25 or more steps keeps the floor of 0.1 (an
        hour of 10-minute steps: 0.20). The full mean error as the one-step floor (0.89, 0.43
        there) also moved 10-minute series' short blocks further than the windows where the
        last value was right allow (`evaluation/README.md`, Accuracy).
        """
        floor_share = max(FLOOR_SHARE, self.floor_one_step / np.sqrt(max(hi - lo, 1)))
        err = np.abs(data.target[:, lo:hi])
        finite = np.isfinite(err)
        count = finite.sum(axis=1)
        per_origin = np.where(finite, err, 0.0).sum(axis=1) / np.maximum(count, 1)
        scale = per_origin.copy()
        for g in np.unique(data.group):
            m = (data.group == g) & (count > 0)
            level = float(per_origin[m].mean()) if m.any() else 0.0
            scale[data.group == g] = np.maximum(per_origin[data.group == g],
                                                floor_share * level)
        floor = 1e-3 * max(float(per_origin.mean()) if len(per_origin) else 0.0, 1e-9)
        return np.maximum(scale, floor)

    def _rows(self, data: StackingData, lo: int, hi: int, scale: FloatArray,
              mask: npt.NDArray[np.bool_]
              ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, IntArray]:
        x = data.deltas[:, mask, lo:hi]  # (C, O, S)
        t = data.target[mask, lo:hi]
        w = np.repeat((1.0 / scale[mask])[:, None], hi - lo, axis=1)
        order = np.repeat(data.order[mask][:, None], hi - lo, axis=1)
        origin = np.repeat(np.flatnonzero(mask)[:, None], hi - lo, axis=1)
        ok = np.isfinite(t)
        xs = x[:, ok].T  # (rows, C)
        return xs, t[ok], w[ok], order[ok], origin[ok]

    def _fit_block(self, data: StackingData, lo: int, hi: int, scale: FloatArray,
                   mask: npt.NDArray[np.bool_], rng: np.random.Generator
                   ) -> tuple[FloatArray, float, FloatArray]:
        """Weights, validation gain and, per origin, the log MAE ratio to the last value of
        the weights fitted without its fold (NaN for origins outside ``mask`` or unscored)."""
        n_cand = data.deltas.shape[0]
        zero = np.zeros(n_cand)
        held_out = np.full(len(data.group), np.nan)
        x, t, w, order, origin = self._rows(data, lo, hi, scale, mask)
        if len(t) < 2 * n_cand + 10:
            return zero, 0.0, held_out
        # time-ordered folds: weights fitted on the other folds must not lose to the last
        # value on any fold, and must beat it by ``min_gain`` over all folds, in the
        # benchmark's terms (geometric mean over windows of the MAE ratio)
        logs: list[FloatArray] = []
        for k in range(FOLDS):
            held = (order >= k / FOLDS) & (order < (k + 1) / FOLDS) if k < FOLDS - 1 else (
                order >= k / FOLDS)
            if (~held).sum() < n_cand + 5 or held.sum() < 5:
                return zero, 0.0, held_out
            beta = self._lad(x[~held], t[~held], w[~held], rng)
            ids, fold = _log_ratios(np.abs(t[held] - x[held] @ beta), np.abs(t[held]),
                                    origin[held], data.level)
            if len(fold) and fold.mean() > 0:
                return zero, float(-np.expm1(fold.mean())), held_out
            held_out[ids] = fold
            logs.append(fold)
        pooled = np.concatenate(logs)
        gain = float(-np.expm1(pooled.mean())) if len(pooled) else 0.0
        if not beats_the_last_value(pooled, self.min_gain):
            return zero, gain, held_out
        return self._lad(x, t, w, rng), gain, held_out

    def _lad(self, x: FloatArray, t: FloatArray, w: FloatArray,
             rng: np.random.Generator) -> FloatArray:
        """``argmin sum w |t - x b| + penalty * sum(w |t|) * sum b`` over ``b >= 0, sum b <= 1``.

        Solved as its dual linear program, which has one variable per row and one constraint
        per candidate (the primal has two variables per row and one equality per row):

            max t.d - s   s.t.   x'd - s <= lam,   -w <= d <= w,   s >= 0,

        whose constraints' marginals are ``-b``. Same optimum, about 9x faster with HiGHS on
        1,500 rows and 8 candidates.
        """
        if len(t) > MAX_ROWS:
            pick = rng.choice(len(t), MAX_ROWS, replace=False)
            x, t, w = x[pick], t[pick], w[pick]
        m, c = x.shape
        lam = self.penalty * float(np.sum(w * np.abs(t)))
        cost = np.concatenate([-t, [1.0]])
        a_ub = np.hstack([x.T, -np.ones((c, 1))])
        marginals = row_marginals(cost, a_ub, np.full(c, lam), np.concatenate([-w, [0.0]]),
                                  np.concatenate([w, [np.inf]]))
        if marginals is None:
            logger.info("stacking LP has no optimum: the block keeps the last value")
            return np.zeros(c)
        return np.clip(-marginals, 0.0, 1.0)

    def _spans(self, steps: int) -> Iterator[tuple[int, int, int]]:
        """``(block, first step, end)`` of each block a forecast of ``steps`` reaches; the
        last block runs to ``steps``."""
        lo = 0
        for b, hi in enumerate(self.edges):
            top = steps if b == len(self.edges) - 1 else min(hi, steps)
            if top <= lo:
                return
            yield b, lo, top
            lo = top

    def step_mask(self, blocks: npt.NDArray[np.bool_], steps: int) -> npt.NDArray[np.bool_]:
        """``(steps,)``: the horizon steps in the flagged blocks (one flag per block)."""
        out = np.zeros(steps, dtype=bool)
        for b, lo, top in self._spans(steps):
            out[lo:top] = bool(blocks[b])
        return out

    def combine(self, deltas: FloatArray, regime: IntArray,
                alternative: IntArray | None = None) -> FloatArray:
        """``(origins, steps)`` changes from the last value: the weighted candidate deltas.

        Args:
            deltas: ``(candidates, origins, steps)`` candidate minus last (NaN counts as 0).
            regime: ``(origins,)``; a regime this stacker has no weights for (one added to
                PRISM after a saved model was fitted) forecasts the last value.
            alternative: ``(origins,)`` each origin's alternative regime (see
                :class:`StackingData`); where a block redirects a regime, its origins take it.
        """
        n_cand, n_orig, steps = deltas.shape
        known = regime < self.weights_.shape[1]
        regime = np.where(known, regime, 0)
        redirect = getattr(self, "redirect_", None)  # None in a model saved before it
        d = np.nan_to_num(deltas, nan=0.0, posinf=0.0, neginf=0.0)
        out = np.zeros((n_orig, steps))
        for b, lo, top in self._spans(steps):
            here = regime
            if redirect is not None and alternative is not None:
                here = np.where(redirect[b, regime] & known, alternative, regime)
            w = self.weights_[b, here] * known[:, None]  # (O, C)
            out[:, lo:top] = np.einsum("oc,cos->os", w, d[:, :, lo:top])
        return out


def beats_the_last_value(logs: FloatArray, min_gain: float, z: float = SURE_Z) -> bool:
    """Whether out-of-sample windows' log MAE ratios to the last value show a sure gain.

    The geometric mean ratio must be at most ``1 - min_gain``, and its one-sided upper bound
    (``z`` standard errors of the mean log ratio above it) below 1: a gain as large as
    ``min_gain`` on a handful of windows that moved is no evidence.
    """
    if len(logs) < 2:
        return False
    mean = float(logs.mean())
    sure = mean + z * float(logs.std(ddof=1)) / np.sqrt(len(logs))
    return bool(-np.expm1(mean) >= min_gain and sure < 0.0)


def _log_ratios(model_err: FloatArray, naive_err: FloatArray, origin: IntArray,
                level: FloatArray) -> tuple[IntArray, FloatArray]:
    """Per window (origin): its id and the log of the model's MAE over the last value's,
    both floored.

    Windows where both MAEs are 0 are left out, as in the benchmark's AvgRelMAE.
    """
    ids, inverse = np.unique(origin, return_inverse=True)
    count = np.bincount(inverse).astype(np.float64)
    model = np.bincount(inverse, weights=model_err) / count
    naive = np.bincount(inverse, weights=naive_err) / count
    floor = np.maximum(1e-3 * level[ids], 1e-9)
    keep = (model > 0) | (naive > 0)
    logs = np.log(np.maximum(model, floor) / np.maximum(naive, floor))
    return ids[keep].astype(np.int64), np.asarray(logs[keep], dtype=np.float64)
