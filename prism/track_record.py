"""The track record of served capacity plans: each plan against what happened.

``prism capacity``, ``GET /v1/capacity`` and ``prism report`` keep the plans they serve in the
store (``capacity_plans``: per scope the sized level, GPUs in use at the quantile plus the
queue allowance, over the window; :func:`prism.usecases.capacity.record_plan`). Once a plan's
window has passed and the store holds the GPUs in use over all of it, :func:`score_plans`
compares the level with what was in use, step by step:

- **unmet GPU-hours**: ``sum(max(in use - level, 0))`` times the step in hours (demand above
  the plan); the **unmet share** divides them by the GPU-hours in use;
- **idle GPU-hours**: ``sum(max(level - in use, 0))`` times the step (capacity held unused);
- **covered**: the peak in use over the window stayed at or below the level; the
  **coverage** of a set of plans, the share covered, is what the plans' quantile promises.

The same numbers are computed for the simple rule **yesterday's peak** (the level each plan
would have had as the peak of its series over the day before its window) on the same windows,
so that one sees whether the served plans beat it. A plan without data the day before its
window is not scored.

A **shared pool** served beside a plan (``prism capacity --pool``, ``pool=true``;
:func:`prism.usecases.pool.record_pool`) is kept as one row per VC, its quota, and one row
of scope :data:`POOL_SCOPE`, the pool, under its own model label (``<model> pool``). It is
scored as a whole (:func:`score_plans`, one row of scope :data:`POOL_SCOPE`): at each step the
VCs' GPUs in use above their quotas are served from the pool as far as it reaches, so

- unmet ``sum max(sum_v max(y_v - Q_v, 0) - P, 0)`` times the step in hours;
- idle ``sum (sum_v Q_v + P - served)``, where ``served`` is what was in use less the unmet;
- covered: nothing was unmet at any step;

and yesterday's peak is each VC's own, as for the plans sized VC by VC.

Plans whose windows overlap (a plan served every hour for the next day) are each scored on
their own window: sums count such hours once per plan.

Pure functions over frames: :mod:`prism.usecases.report` loads the plans and the series
(:func:`prism.usecases.report.track_record`), the report (:mod:`prism.reports.capacity`)
renders :func:`summarise` and :func:`track_record_warnings`, and ``prism track-record`` and
``GET /v1/capacity/track-record`` give :meth:`TrackRecord.records`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from prism.schema import SERIES_ID, TS

#: The simple rule the plans are compared with.
YESTERDAY = "yesterday's peak"
#: Tolerance below which a difference of GPUs is rounding noise (stored values keep 3 decimals).
_EPS = 1e-6
#: Columns of :func:`score_plans`.
SCORED_COLUMNS = ("cluster", "scope", "series_id", "model", "quantile", "valid_from",
                  "valid_to", "gpus_planned", "yesterday_peak", "in_use_gpu_hours",
                  "peak_in_use", "unmet_gpu_hours", "idle_gpu_hours", "covered",
                  "rule_unmet_gpu_hours", "rule_idle_gpu_hours", "rule_covered")
_DAY = pd.Timedelta(days=1)
FloatArray = npt.NDArray[np.float64]
#: Scope of the row that holds a shared pool's GPUs (the space keeps it from any series' scope).
POOL_SCOPE = "shared pool"
#: What a pool's model label adds to the model of the plan it was served with.
POOL_SUFFIX = " pool"


@dataclass(frozen=True)
class TrackRecord:
    """A cluster's served plans and how those that have ended did.

    Attributes:
        cluster: the cluster.
        plans: every stored plan row (``capacity_plans``).
        scored: one row per plan row scored (:func:`score_plans`).
        summary: per model and scope of the partition, plus a total per model
            (:func:`summarise`).
        scopes: the partition of scopes the summary covers.
        next_end: the end of the first stored plan not scored yet (its window has not
            passed, or the store lacks data over it), or ``None``.
    """

    cluster: str
    plans: pd.DataFrame
    scored: pd.DataFrame
    summary: pd.DataFrame
    scopes: tuple[str, ...]
    next_end: datetime | None

    def note(self) -> str:
        """What the record covers, or why it is empty, in one sentence."""
        if self.plans.empty:
            return ("No served plan is recorded yet: `prism capacity`, `GET /v1/capacity` and "
                    "`prism report` record theirs.")
        if self.scored.empty:
            if self.next_end is None:
                return ("No served plan can be scored: none has a day of data before its "
                        "window (yesterday's peak).")
            return (f"No served plan has ended yet: the first one ends at "
                    f"{self.next_end:%Y-%m-%d %H:%M} UTC.")
        first, last = self.scored["valid_from"].min(), self.scored["valid_to"].max()
        text = (f"{len(self.scored)} served plan row(s) whose window has ended, from "
                f"{first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC, against the GPUs in "
                f"use and against {YESTERDAY} on the same windows")
        pending = plan_rows(self.plans) - len(self.scored)
        if pending and self.next_end is not None:
            text += (f"; {pending} more not scored yet (the next ends at "
                     f"{self.next_end:%Y-%m-%d %H:%M} UTC)")
        return text + "."

    def records(self, *, plans: bool = False) -> dict[str, Any]:
        """The record as ``prism track-record --json`` and ``GET /v1/capacity/track-record``
        give it: the note, the summary rows (per model and scope of the partition, and each
        model's ``total``), the warnings and, with ``plans``, every scored plan row (missing
        shares are ``None``)."""
        out: dict[str, Any] = {
            "cluster": self.cluster, "note": self.note(), "scopes": list(self.scopes),
            "plans_recorded": plan_rows(self.plans), "plans_scored": len(self.scored),
            "next_end": self.next_end,
            "summary": [_plain(r) for r in self.summary.to_dict("records")],
            "warnings": track_record_warnings(self.summary)}
        if plans:
            out["plans"] = [_plain(r) for r in self.scored.to_dict("records")]
        return out


def _plain(row: dict[Any, Any]) -> dict[str, Any]:
    """A frame's record with Python values: times as ``datetime``, NaN as ``None``."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, pd.Timestamp):
            value = value.to_pydatetime()
        elif isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and np.isnan(value):
            value = None
        out[str(key)] = value
    return out


def score_plans(plans: pd.DataFrame, panel: pd.DataFrame, *, freq_s: int) -> pd.DataFrame:
    """Score each plan row whose window the panel covers against the GPUs in use, and
    yesterday's peak on the same window (see the module docstring); a shared pool and its
    quotas as one row.

    Args:
        plans: plan rows (``cluster, scope, series_id, model, quantile, valid_from, valid_to,
            gpus_planned``; ``valid_to`` is the end of the window's last step).
        panel: ``series_id, ts, value`` of the plans' series over their windows and the day
            before.
        freq_s: the series' step in seconds.

    Returns:
        :data:`SCORED_COLUMNS`, one row per plan row (per pool: one row of scope
        :data:`POOL_SCOPE`, no series and no quantile) with every step of its window in the
        panel and at least one value the day before it; GPU-hours in GPU times hours.
    """
    series = {str(sid): (g[TS].to_numpy(dtype="datetime64[ns]"),
                         g["value"].to_numpy(dtype=np.float64))
              for sid, g in panel.sort_values([SERIES_ID, TS]).groupby(SERIES_ID)}
    step = np.timedelta64(int(freq_s), "s")

    def window(plan: Mapping[Any, Any]) -> tuple[FloatArray, float] | None:
        """The values in use over a plan row's window and its series' peak the day before
        (``None``: the window is not over or not stored, or no day before it)."""
        if str(plan["series_id"]) not in series:
            return None
        ts, values = series[str(plan["series_id"])]
        start = np.datetime64(pd.Timestamp(plan["valid_from"]), "ns")
        end = np.datetime64(pd.Timestamp(plan["valid_to"]), "ns")
        lo, hi = np.searchsorted(ts, [start, end])
        before = np.searchsorted(ts, start - np.timedelta64(_DAY))
        if hi - lo < (end - start) // step or before == lo:
            return None
        return values[lo:hi], float(values[before:lo].max())

    hours = freq_s / 3600.0
    pooled = pooled_rows(plans)
    out = []
    for plan in plans[~pooled].to_dict("records"):
        seen = window(plan)
        if seen is not None:
            level = float(plan["gpus_planned"])
            out.append(_scored(plan, seen[0][None, :], np.array([level]), 0.0,
                               np.array([seen[1]]), hours))
    for _, group in plans[pooled].groupby(list(_PLAN_KEY), sort=False):
        pool = group[group["scope"] == POOL_SCOPE]
        vcs = group[group["scope"] != POOL_SCOPE].to_dict("records")
        known = [w for w in map(window, vcs) if w is not None]
        if not vcs or len(known) < len(vcs):
            continue  # a pool is scored once every VC's window has ended
        steps = min(len(seen) for seen, _ in known)
        out.append(_scored(
            {**pool.iloc[0].to_dict(), SERIES_ID: None, "quantile": np.nan},
            np.stack([seen[:steps] for seen, _ in known]),
            np.array([float(vc["gpus_planned"]) for vc in vcs]),
            float(pool["gpus_planned"].iloc[0]), np.array([rule for _, rule in known]), hours))
    return pd.DataFrame(out, columns=list(SCORED_COLUMNS))


#: The columns that make one served plan (its rows are its scopes).
_PLAN_KEY = ("cluster", "model", "quantile", "valid_from", "valid_to")


def plan_rows(plans: pd.DataFrame) -> int:
    """How many plan rows :func:`score_plans` scores ``plans`` as: one per scope of a plan,
    one per shared pool (its VCs' quotas and the pool together)."""
    return int((~pooled_rows(plans) | (plans["scope"] == POOL_SCOPE)).sum())


def pooled_rows(plans: pd.DataFrame) -> pd.Series:
    """Which plan rows belong to a shared pool: the rows of a plan (the same
    :data:`_PLAN_KEY`) that has a :data:`POOL_SCOPE` row."""
    if plans.empty:
        return pd.Series(False, index=plans.index)
    has_pool = (plans["scope"] == POOL_SCOPE).groupby(
        [plans[k] for k in _PLAN_KEY], sort=False).transform("any")
    return has_pool.astype(bool)


def _scored(plan: Mapping[Any, Any], seen: FloatArray, levels: FloatArray, pool: float,
            rule: FloatArray, hours: float) -> dict[str, Any]:
    """One scored row: ``seen`` the in-use values of the plan's scopes ``(scopes, steps)``,
    ``levels`` their planned levels (a pool's quotas), ``pool`` the GPUs shared among them
    (0 for a plan row of one scope), ``rule`` their peaks the day before."""
    over = np.maximum(seen - levels[:, None], 0.0).sum(axis=0)
    unmet = np.maximum(over - pool, 0.0)
    in_use = seen.sum(axis=0)
    idle = levels.sum() + pool - (in_use - unmet)
    rule_over = np.maximum(seen - rule[:, None], 0.0)
    return {
        **{k: plan[k] for k in SCORED_COLUMNS[:7]},
        "gpus_planned": float(levels.sum() + pool), "yesterday_peak": float(rule.sum()),
        "in_use_gpu_hours": float(in_use.sum() * hours), "peak_in_use": float(in_use.max()),
        "unmet_gpu_hours": float(unmet.sum() * hours),
        "idle_gpu_hours": float(idle.sum() * hours),
        "covered": bool(unmet.max() <= _EPS),
        "rule_unmet_gpu_hours": float(rule_over.sum() * hours),
        "rule_idle_gpu_hours": float(np.maximum(rule[:, None] - seen, 0.0).sum() * hours),
        "rule_covered": bool(rule_over.max() <= _EPS)}


def summarise(scored: pd.DataFrame, scopes: Sequence[str]) -> pd.DataFrame:
    """The track record per model and scope of ``scopes`` (one partition of the cluster, so
    that each GPU counts once), plus a ``total`` row per model over them.

    Returns:
        ``model, scope, plans, quantile`` (the plans' mean quantile; NaN for a shared pool,
        whose shares are chosen for a share of demand unmet), ``in_use_gpu_hours,
        unmet_gpu_hours, unmet_share, idle_gpu_hours, coverage`` and the same for yesterday's
        peak prefixed ``rule_``, ``beats`` (whether the plans beat it: :func:`beats_rule`)
        and ``pooled`` (a shared pool's plans: only their ``total`` row, each window's VCs
        and pool together); empty when nothing of ``scopes`` is scored.
    """
    mine = scored[scored["scope"].isin([*scopes, POOL_SCOPE])]
    rows = []
    for model, group in mine.groupby("model", sort=True):
        pooled = bool((group["scope"] == POOL_SCOPE).all())  # its VCs' quotas and one pool
        parts = [] if pooled else sorted(group.groupby("scope"))
        for scope, part in [*parts, ("total", group)]:
            in_use = float(part["in_use_gpu_hours"].sum())
            # a pool's shares are chosen for a share of demand unmet: no quantile
            row: dict[str, Any] = {"model": str(model), "scope": str(scope), "plans": len(part),
                   "quantile": np.nan if pooled else float(part["quantile"].mean()),
                   "in_use_gpu_hours": in_use}
            for prefix in ("", "rule_"):
                unmet = float(part[f"{prefix}unmet_gpu_hours"].sum())
                row.update({f"{prefix}unmet_gpu_hours": unmet,
                            f"{prefix}unmet_share": unmet / in_use if in_use > 0 else np.nan,
                            f"{prefix}idle_gpu_hours": float(part[f"{prefix}idle_gpu_hours"]
                                                             .sum()),
                            f"{prefix}coverage": float(part[f"{prefix}covered"].mean())})
            row["beats"] = beats_rule(row)
            row["pooled"] = pooled
            rows.append(row)
    return pd.DataFrame(rows)


def beats_rule(row: Mapping[str, Any]) -> bool:
    """Whether the plans beat yesterday's peak: they left no more demand unmet (within
    :data:`prism.evaluation.planning.UNMET_TOLERANCE` of the GPU-hours in use) and kept fewer
    GPUs idle (:func:`prism.evaluation.planning.beats_reference`, the test the planning
    backtest uses too). Plans that left more unmet do not beat it, however few GPUs they
    idled."""
    return _lost(row) is None


def _lost(row: Mapping[Any, Any]) -> str | None:
    """How a summary row's plans lost to the rule (``unmet``, ``idle``), or ``None``."""
    from prism.evaluation.planning import lost_to_reference

    return lost_to_reference(row["unmet_share"], row["idle_gpu_hours"],
                             row["rule_unmet_share"], row["rule_idle_gpu_hours"])


def track_record_warnings(summary: pd.DataFrame) -> list[str]:
    """Plain-words warnings on each model's total: where its served plans did not beat
    yesterday's peak (:func:`beats_rule`), saying which way they lost (more demand unmet, or
    as many or more idle GPUs for no less unmet), and where fewer windows stayed within the
    plan than the plans' quantile promises (not for a shared pool: its shares are chosen for
    a share of demand unmet, not for a quantile).

    Returns:
        One sentence per finding (none for an empty summary).
    """
    if summary.empty:
        return []
    out = []
    for r in summary[summary["scope"] == "total"].to_dict("records"):
        name, n = r["model"], int(r["plans"])
        lost = _lost(r)
        mine = (f"{_pct2(r['unmet_share'])} of the GPU-hours in use unmet with "
                f"{r['idle_gpu_hours']:,.1f} idle GPU-hours")
        rule = (f"provisioning each scope at its peak of the day before would have left "
                f"{_pct2(r['rule_unmet_share'])} unmet with {r['rule_idle_gpu_hours']:,.1f} "
                "idle GPU-hours")
        if lost == "unmet":
            out.append(
                f"{name}'s served plans do not beat {YESTERDAY}: they left more demand unmet. "
                f"Over {n} ended plan row(s) they left {mine}, while {rule}"
                + ("; their fewer idle GPU-hours come from leaving demand unmet."
                   if r["idle_gpu_hours"] < r["rule_idle_gpu_hours"] else "."))
        elif lost == "idle":
            less = (float(np.nan_to_num(r["unmet_share"]))
                    < float(np.nan_to_num(r["rule_unmet_share"])) - _EPS)
            more = r["idle_gpu_hours"] > r["rule_idle_gpu_hours"] + _EPS
            out.append(
                f"{name}'s served plans do not beat {YESTERDAY}: they kept "
                f"{'more' if more else 'as many'} GPUs idle for "
                f"{'less' if less else 'no less'} demand unmet. Over {n} ended plan row(s) "
                f"they left {mine}, while {rule}"
                + ("; leaving less unmet is a trade of idle GPUs for it, not a win on both."
                   if less else "."))
        if (not r["pooled"] and not pd.isna(r["quantile"])
                and r["coverage"] < r["quantile"] - _EPS):
            out.append(
                f"{name}'s served plans covered fewer windows than their quantile promises: "
                f"the peak in use stayed within the plan in {_pct1(r['coverage'])} of {n} "
                f"window(s), for plans sized at p{r['quantile'] * 100:.3g} on average.")
    return out


def _pct1(value: float) -> str:
    return f"{float(value) * 100:.1f} %"


def _pct2(value: float) -> str:
    return "n/a" if pd.isna(value) else f"{float(value) * 100:.2f} %"
