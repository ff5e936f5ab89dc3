"""Hierarchical coherence: make scope forecasts add up to the cluster forecast.

Series ids say the hierarchy: for a cluster and a metric that adds up across scopes (GPUs,
jobs, nodes; not ratios such as ``gpu_util``), ``{cluster}/all/{metric}`` is the sum of the
VC/tenant scopes (``{cluster}/<vc>/{metric}``, ``unassigned`` included) and also the sum of
the GPU-type scopes (``{cluster}/gpu:<type>/{metric}``). Two groupings share one total:

1. the **primary** grouping (the VCs; the GPU types when a cluster has no VC scopes) is
   reconciled with the total:

   - ``bottom_up``: the total becomes the sum of its members' forecasts;
   - ``mint_shrink``: MinT (Wickramasuriya, Athanasopoulos & Hyndman, 2019) with the
     Schäfer-Strimmer shrinkage of the one-step error covariance:
     ``b~ = (S' W^-1 S)^-1 S' W^-1 y^`` for ``S = [1'; I]``, then the total is ``1' b~``;

2. every other grouping is then moved onto that total with the least change in the same
   metric: ``b~ = b^ + W 1 (1' W 1)^-1 (total - 1' b^)`` (``W`` diagonal error variances for
   ``mint_shrink``; for ``bottom_up``, proportional to the forecasts, i.e. a proportional
   split of the gap).

Quantile columns move by the same amount as the mean of their row (the reconciled mean is
coherent; quantiles of sums do not add up, so no method could make them), then are clipped at
0; their order is kept.

Only whole groupings are reconciled: a total forecast with some of its VCs (or GPU types) but
not all that the store holds would become the sum of those named, so
:func:`check_complete` refuses it, naming the missing series.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.errors import ConfigError, DataContractError
from prism.schema import (
    ALL_SCOPE,
    GPU_TYPE_PREFIX,
    SERIES_ID,
    TS,
    VALUE,
    metric_info,
    split_series_id,
)

if TYPE_CHECKING:
    from prism.forecasters.base import BaseForecaster

logger = logging.getLogger(__name__)

METHODS = ("bottom_up", "mint_shrink")
FloatArray = npt.NDArray[np.float64]


def one_step_residuals(model: BaseForecaster) -> pd.DataFrame:
    """A fitted model's out-of-sample one-step errors on its calibration tail.

    Returns:
        ``series_id, ts, value`` (the error of the forecast made at ``ts`` for ``ts``).
    """
    frames = []
    for sid, calibration in model.calibration_.items():
        ts = model.first_ts_[sid] + pd.to_timedelta(calibration.origins * model.freq_s_,
                                                   unit="s")
        frames.append(pd.DataFrame({SERIES_ID: sid, TS: ts, VALUE: calibration.one_step}))
    if not frames:
        return pd.DataFrame(columns=[SERIES_ID, TS, VALUE])
    return pd.concat(frames, ignore_index=True)


def hierarchy(series_ids: Sequence[str]) -> dict[str, list[list[str]]]:
    """Total series id -> its groupings (each a list of member ids), primary grouping first.

    Only additive metrics with a total and at least one member are listed.
    """
    parsed = {sid: split_series_id(sid) for sid in series_ids}
    out: dict[str, list[list[str]]] = {}
    for sid, (cluster, scope, metric) in parsed.items():
        if scope != ALL_SCOPE or metric_info(metric).unit == "ratio":
            continue
        members = [s for s, (c, sc, m) in parsed.items()
                   if c == cluster and m == metric and sc != ALL_SCOPE]
        vcs = sorted(s for s in members if not parsed[s][1].startswith(GPU_TYPE_PREFIX))
        types = sorted(s for s in members if parsed[s][1].startswith(GPU_TYPE_PREFIX))
        groups = [g for g in (vcs, types) if g]
        if groups:
            out[sid] = groups
    return out


def incomplete_groupings(series_ids: Sequence[str], stored: Collection[str]
                         ) -> dict[str, list[str]]:
    """The totals among ``series_ids`` forecast with only part of a grouping.

    Args:
        series_ids: the series forecast.
        stored: every series the store holds.

    Returns:
        Total series id -> the members of its partly named groupings (its VCs, its GPU
        types) that ``series_ids`` lack, sorted; only totals with missing members are listed.
        A grouping none of whose members is named is left out: nothing of it is reconciled.
    """
    named = set(series_ids)
    whole = hierarchy(sorted(named | set(stored)))
    missing: dict[str, list[str]] = {}
    for total in hierarchy(sorted(named)):
        lacking = [s for group in whole[total] if named.intersection(group)
                   for s in group if s not in named]
        if lacking:
            missing[total] = sorted(lacking)
    return missing


def check_complete(series_ids: Sequence[str], stored: Collection[str]) -> None:
    """Refuse to reconcile a total with only some of its members.

    Reconciliation makes a cluster's VCs (and its GPU types) add up to its ``all`` series; with
    only some of them it would replace the total by the sum of those named.

    Args:
        series_ids: the series forecast.
        stored: every series the store holds.

    Raises:
        DataContractError: naming the total, the missing series and the fix.
    """
    missing = incomplete_groupings(series_ids, stored)
    if not missing:
        return
    total, lacking = next(iter(missing.items()))
    cluster = split_series_id(total)[0]
    types = {split_series_id(s)[1].startswith(GPU_TYPE_PREFIX) for s in lacking}
    kind = {frozenset({False}): "VC", frozenset({True}): "GPU-type"}.get(
        frozenset(types), "VC and GPU-type")
    shown = ", ".join(repr(s) for s in lacking[:5]) + (
        f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
    others = f" ({len(missing) - 1} more totals alike)" if len(missing) > 1 else ""
    raise DataContractError(
        f"cannot reconcile {total!r} with only some of its {kind} series{others}: "
        f"{shown} {'is' if len(lacking) == 1 else 'are'} missing, and the total would become "
        f"the sum of those named. Name them too, or forecast the whole cluster with --cluster "
        f"{cluster} (or drop --reconcile)"
    )


def shrunk_covariance(residuals: FloatArray) -> FloatArray:
    """Schäfer-Strimmer shrinkage of the covariance of ``residuals`` (rows: times).

    The correlations shrink towards 0 by ``lambda* = sum Var(r_ij) / sum r_ij^2`` over the
    off-diagonal pairs, clipped to [0, 1]; the variances stay as they are.
    """
    x = residuals - residuals.mean(axis=0)
    n, k = x.shape
    sd = x.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    z = x / sd
    corr = z.T @ z / n
    if n > 1 and k > 1:
        w = np.einsum("ti,tj->tij", z, z)
        var_r = n / (n - 1) ** 2 * ((w - corr) ** 2).sum(axis=0)
        off = ~np.eye(k, dtype=bool)
        denom = float((corr[off] ** 2).sum())
        lam = float(np.clip(var_r[off].sum() / denom, 0.0, 1.0)) if denom > 0 else 1.0
    else:
        lam = 1.0
    shrunk = (1.0 - lam) * corr
    np.fill_diagonal(shrunk, 1.0)
    return np.asarray(shrunk * np.outer(sd, sd), dtype=np.float64)


def _mint(y: FloatArray, cov: FloatArray) -> FloatArray:
    """Reconciled members (rows of ``y`` after the total: ``y[0]`` total, ``y[1:]`` members)."""
    m = y.shape[0] - 1
    s = np.vstack([np.ones((1, m)), np.eye(m)])
    w_inv = np.linalg.pinv(cov)
    g = np.linalg.solve(s.T @ w_inv @ s, s.T @ w_inv)
    return np.asarray(g @ y, dtype=np.float64)


def reconcile(
    forecast: pd.DataFrame,
    *,
    method: str = "mint_shrink",
    residuals: pd.DataFrame | None = None,
    stored: Collection[str] | None = None,
) -> pd.DataFrame:
    """Make the forecasts of each cluster's scopes add up to the cluster forecast.

    Args:
        forecast: the forecast contract (one model), with totals and members.
        method: ``bottom_up`` or ``mint_shrink``.
        residuals: one-step errors ``series_id, ts, value`` of the series (for
            ``mint_shrink``; e.g. :func:`one_step_residuals` of the fitted model).
        stored: every series the store holds: a total forecast with only some of the
            members the store has is refused (:func:`check_complete`). ``None``: the
            forecast is taken to hold whole groupings.

    Returns:
        The forecast with reconciled ``mean`` and shifted quantile columns; series outside any
        hierarchy are unchanged.

    Raises:
        ConfigError: for an unknown method, or ``mint_shrink`` without residuals.
        DataContractError: when members of a total do not share its timestamps, or (with
            ``stored``) a total is forecast with only some of its members.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown reconciliation {method!r}; use one of {', '.join(METHODS)}")
    if method == "mint_shrink" and residuals is None:
        raise ConfigError("mint_shrink needs the one-step residuals of the series")
    if stored is not None:
        check_complete(forecast[SERIES_ID].astype(str).unique().tolist(), stored)
    out = forecast.copy()
    quantile_cols = [c for c in out.columns if c.startswith("p") and c[1:].replace(".", "")
                     .isdigit()]
    tree = hierarchy(out[SERIES_ID].unique().tolist())
    if not tree:
        logger.info("no hierarchy among the forecast series: nothing to reconcile")
        return out
    wide = out.pivot(index=TS, columns=SERIES_ID, values="mean")
    errors = (residuals.pivot_table(index=TS, columns=SERIES_ID, values=VALUE)
              if residuals is not None else None)
    new = wide.copy()
    for total, groups in tree.items():
        members_all = [total] + [s for g in groups for s in g]
        _check_same_steps(wide, total, members_all[1:])
        block = wide[members_all]
        primary = [total] + groups[0]
        y = block[primary].to_numpy().T
        if method == "bottom_up":
            members = y[1:]
        else:
            assert errors is not None
            members = _mint(y, shrunk_covariance(_aligned(errors, primary)))
        top = members.sum(axis=0)
        new[total] = top
        new[groups[0]] = members.T
        for group in groups[1:]:
            b = block[group].to_numpy().T
            if method == "bottom_up":
                share = np.maximum(b, 0.0)
                share = np.where(share.sum(axis=0) > 0, share / np.where(
                    share.sum(axis=0) > 0, share.sum(axis=0), 1.0), 1.0 / len(group))
            else:
                assert errors is not None
                var = np.diag(shrunk_covariance(_aligned(errors, group)))
                share = np.repeat((var / var.sum() if var.sum() > 0 else
                                   np.full(len(group), 1.0 / len(group)))[:, None],
                                  b.shape[1], axis=1)
            new[group] = (b + share * (top - b.sum(axis=0))).T
    delta = (new - wide).reset_index().melt(id_vars=TS, var_name=SERIES_ID, value_name="delta")
    out = out.merge(delta, on=[TS, SERIES_ID], how="left")
    out["delta"] = out["delta"].fillna(0.0)
    for col in ["mean", *quantile_cols]:
        out[col] = out[col] + out["delta"]
    low = float(np.min(out[["mean", *quantile_cols]].to_numpy()))
    if low < 0:
        logger.info("reconciliation moved some forecasts below 0 (down to %.3g); clipped", low)
    out[["mean", *quantile_cols]] = out[["mean", *quantile_cols]].clip(lower=0.0)
    return out.drop(columns="delta")[list(forecast.columns)]


def _check_same_steps(wide: pd.DataFrame, total: str, members: list[str]) -> None:
    """Refuse a member whose forecast covers other times than its total's (the stored
    series end at different times), naming both and their times."""
    def span(sid: str) -> tuple[pd.Index, str]:
        ts = wide.index[wide[sid].notna()]
        text = f"{ts.min():%Y-%m-%d %H:%M} to {ts.max():%Y-%m-%d %H:%M}" if len(ts) else "no step"
        return ts, text

    total_ts, total_span = span(total)
    for sid in members:
        ts, member_span = span(sid)
        if not ts.equals(total_ts):
            raise DataContractError(
                f"the forecast of {sid!r} covers {member_span} but that of its total {total!r} "
                f"covers {total_span}: their stored series end at different times, so the "
                "forecasts cannot be added up step by step. Ingest the missing points of the "
                "series that ends first (`prism series list` shows each last_ts), or forecast "
                "without --reconcile"
            )


def _aligned(errors: pd.DataFrame, ids: list[str]) -> FloatArray:
    missing = [s for s in ids if s not in errors.columns]
    if missing:
        raise ConfigError(f"no one-step residuals for {missing[0]!r}; refit the model on the "
                          "whole hierarchy")
    rows = errors[ids].dropna()
    if len(rows) < 2:
        raise ConfigError(
            f"the series of {ids[0]!r} share fewer than two residual timestamps; "
            "reconcile with bottom_up, or fit them on the same time range"
        )
    return np.asarray(rows.to_numpy(), dtype=np.float64)
