"""The shared-pool alternative to a cluster's capacity plan (``prism capacity --pool``,
``GET /v1/capacity?pool=true``).

Replays the cluster's VCs over their last days with the day-kind plan, chooses the quota and
pool shares there (:func:`prism.evaluation.pooling.choose_pool`) and applies them to the
plan's window (:func:`prism.capacity_pool.pool_advice`). No model is fitted: the replay reads
the stored history only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pandas as pd

from prism.errors import ConfigError

if TYPE_CHECKING:
    from prism.capacity import CapacityPlan
    from prism.capacity_pool import PoolAdvice
    from prism.store import Store

logger = logging.getLogger(__name__)

#: Days replayed to choose the shares on.
POOL_DAYS = 7


def plan_cluster_pool(store: Store, plan: CapacityPlan, *, days: int = POOL_DAYS,
                      max_unmet: float | None = None, record: str | None = None,
                      model: str = "", growth: float = 1.0) -> PoolAdvice:
    """The quotas and the shared pool for the whole-cluster ``plan``'s window.

    Args:
        store: the store the plan was made on.
        plan: the cluster's plan (every VC: not one scope's).
        days: the days before the plan replayed to choose the shares on (fewer where the
            VCs' history is shorter; the advice says how many).
        max_unmet: the unmet share of demand the choice may leave on them (default 0.3 %).
        record: who serves the pool (``cli``, ``api``, ``report``): keep it in the store for
            its track record (:func:`record_pool`); ``None``: do not.
        model: the label of the forecasts the plan was made with (``prism``).
        growth: the plan's growth factor (a what-if, other than 1, is not recorded).

    Raises:
        ConfigError: for fewer than two VCs, or a history without a whole day before the
            plan.
    """
    from prism.capacity_pool import pool_advice, pool_vcs
    from prism.day_kind import WEEK_DAYS
    from prism.errors import DataContractError
    from prism.evaluation.planning import DAY_KIND, MAX_UNMET, plan_levels, window_rows
    from prism.evaluation.pooling import choose_pool
    from prism.schema import SERIES_ID, TS

    vcs = pool_vcs(plan)  # at least two, or a ConfigError
    rows = {r.scope: r for r in plan.rows}
    ids = {rows[s].series_id: s for s in vcs}
    at = pd.Timestamp(min(r.start for r in plan.rows))
    history = store.load_panel(sorted(ids), start=at - pd.Timedelta(days=days + WEEK_DAYS + 1),
                               end=at)
    capacity = {sid: float(cap) for sid, s in ids.items()
                if (cap := rows[s].capacity) is not None}
    # as many of the last ``days`` whole days as every VC's history holds before the plan
    day = max(1, 86400 // plan.freq_s)
    shortest = int(history.groupby(SERIES_ID).size().min()) if len(history) else 0
    windows = min(days, (shortest - 2 - day) // day + 1)
    span = (history[TS].max() - history[TS].min()) if len(history) else pd.Timedelta(0)
    too_short = (f"cluster {plan.cluster!r}: the shared pool is chosen on the VCs' last days "
                 f"(up to {days}), and their history before {at:%Y-%m-%d %H:%M} spans {span}, "
                 "less than a day and a step; ingest more history or plan without --pool")
    if windows < 1:
        raise ConfigError(too_short)
    try:
        replay = window_rows(history, horizon="1d", windows=windows)
        levels = plan_levels(replay, history, block="1d", horizon="1d", capacity=capacity)
    except (ConfigError, DataContractError):
        raise ConfigError(too_short) from None
    choice = choose_pool(levels, DAY_KIND, freq_s=plan.freq_s,
                         max_unmet=MAX_UNMET if max_unmet is None else max_unmet,
                         capacity=capacity)
    logger.info("pool for %s: quota %.2f, pool %.2f over %d days", plan.cluster, choice.quota,
                choice.pool, choice.windows)
    advice = pool_advice(plan, choice)
    if record is not None:
        record_pool(store, plan, advice, model=model, served_by=record, growth=growth)
    return advice


def record_pool(store: Store, plan: CapacityPlan, advice: PoolAdvice, *, model: str,
                served_by: str, growth: float = 1.0) -> int:
    """Keep a served shared pool in the store for its track record (:mod:`prism.track_record`):
    one row per VC, its quota, and one row of scope :data:`~prism.track_record.POOL_SCOPE`,
    the pool, over the plan's window, under the model label ``<model> pool`` at the plan's
    quantile. Recording never fails the advice (see
    :func:`prism.usecases.capacity.keep_plan_rows`).

    Returns:
        The rows recorded (0 when skipped).
    """
    from prism.track_record import POOL_SCOPE, POOL_SUFFIX
    from prism.usecases.capacity import keep_plan_rows

    rows = {r.scope: r for r in plan.rows}
    first = rows[next(iter(advice.quotas))]
    window = {"valid_from": first.start, "valid_to": first.end,
              "quantile": float(plan.quantile)}
    kept: list[dict[str, object]] = [
        {"scope": vc, "series_id": rows[vc].series_id, "gpus_planned": float(quota), **window}
        for vc, quota in sorted(advice.quotas.items())]
    kept.append({"scope": POOL_SCOPE, "series_id": None,
                 "gpus_planned": float(advice.pool_gpus), **window})
    return keep_plan_rows(store, plan.cluster, kept, model=f"{model}{POOL_SUFFIX}",
                          served_by=served_by, growth=growth, what="shared pool")
