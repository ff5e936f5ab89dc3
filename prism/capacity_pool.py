"""A shared pool for a cluster's VCs: a guaranteed quota each, and a pool they all borrow from.

A capacity plan (:mod:`prism.capacity`) sizes each VC on its own, so a VC's demand above its
level waits while another VC's GPUs idle. Where the scheduler lends quota (a Kueue cohort, a
Slurm partition shared by accounts), the VCs' peaks, which rarely coincide, can share GPUs:
each VC keeps ``quota`` of what its plan needs as its own, and ``pool`` of the VCs' needs
added up is one pool any VC borrows from. The shares are chosen on the cluster's own history
(:func:`prism.evaluation.pooling.choose_pool`: the last days replayed with the day-kind plan,
the most GPU-hours saved with at most ``max_unmet`` of the demand unmet). Pure functions over
a plan: :mod:`prism.usecases.pool` replays the history and calls :func:`pool_advice`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prism.capacity import CapacityPlan, shared_vcs
from prism.capacity_inputs import coarse_step_warning
from prism.errors import ConfigError
from prism.evaluation.pooling import PoolChoice
from prism.schema import ALL_SCOPE, GPU_TYPE_PREFIX

_EPS = 1e-9


@dataclass(frozen=True)
class PoolAdvice:
    """The pooled alternative to a cluster's per-VC plan over the same window.

    Attributes:
        cluster: the cluster.
        choice: the shares and their replay (:class:`~prism.evaluation.pooling.PoolChoice`).
        needed: VC -> GPUs its plan needs over the window (``gpus_needed``).
        quotas: VC -> GPUs it keeps as its own (``ceil(quota * needed)``; above its capacity,
            GPUs move to it as in the per-VC plan).
        pool_gpus: the shared pool (``ceil(pool * sum of needed)``).
        per_vc_gpus: the VCs' needs added up, each rounded up (what the per-VC plan holds).
        pooled_gpus: the quotas plus the pool.
        capacity: the VCs' capacities added up (``None`` where one is unknown).
        net_gpus: ``pooled_gpus - capacity``: GPUs to add (above 0) or spare (below 0), the
            pool formed from what each VC has beyond its quota (``None``: capacity unknown).
        text: the advice in words.
    """

    cluster: str
    choice: PoolChoice
    needed: dict[str, float]
    quotas: dict[str, int]
    pool_gpus: int
    per_vc_gpus: int
    pooled_gpus: int
    capacity: float | None
    net_gpus: int | None
    text: str

    @property
    def extra_gpus(self) -> int:
        """GPUs the quotas and the pool hold beyond sizing each VC apart (above 0: the pool
        does not pay off; 0 or below: it saves that many)."""
        return self.pooled_gpus - self.per_vc_gpus

    def keeps(self, scope: str) -> str:
        """What a VC keeps in words: its quota of what it needs, the rest from the pool (or,
        at a quota of all it needs, nothing from the pool but bursts above it)."""
        quota, need = self.quotas[scope], self.needed[scope]
        if quota + _EPS >= need:
            return (f"keeps {quota} GPUs: all it needs ({need:.1f}"
                    + (", rounded up" if quota > need + _EPS else "")
                    + "), the pool only for demand above that")
        return f"keeps {quota} GPUs of the {need:.1f} it needs; the rest from the pool"

    def records(self) -> dict[str, Any]:
        """As ``GET /v1/capacity?pool=true`` answers it."""
        c = self.choice
        return {"cluster": self.cluster, "quota_share": c.quota, "pool_share": c.pool,
                "pool_gpus": self.pool_gpus, "per_vc_gpus": self.per_vc_gpus,
                "pooled_gpus": self.pooled_gpus, "capacity": self.capacity,
                "net_gpus": self.net_gpus,
                "days": c.windows, "max_unmet": c.max_unmet,
                "saved_share": c.saved_share, "unmet_share": c.unmet_share,
                "per_vc_saved_share": c.per_series_saved_share,
                "per_vc_unmet_share": c.per_series_unmet_share,
                "vcs": [{"scope": s, "needed": self.needed[s], "quota": self.quotas[s]}
                        for s in sorted(self.quotas)],
                "text": self.text}


def pool_vcs(plan: CapacityPlan) -> list[str]:
    """The VC scopes of a plan (not the cluster's ``all``, not its GPU types).

    Raises:
        ConfigError: for fewer than two (nothing to pool), or VCs that share GPUs already
            (their capacities add up to more than the cluster's).
    """
    vcs = sorted(r.scope for r in plan.rows
                 if r.scope != ALL_SCOPE and not r.scope.startswith(GPU_TYPE_PREFIX))
    if len(vcs) < 2:
        raise ConfigError(f"cluster {plan.cluster!r} has {len(vcs)} VC(s) in its plan: a "
                          "shared pool needs at least two VCs (plan the whole cluster, "
                          "without --scope)")
    shared = shared_vcs({r.scope: r.capacity for r in plan.rows})
    if shared is not None:
        raise ConfigError(f"cluster {plan.cluster!r}: its VCs' capacities add up to "
                          f"{shared[0]:g} GPUs, more than its {shared[1]:g}: they share GPUs "
                          "already (partitions over the same nodes), so a pool adds nothing; "
                          "plan without --pool")
    return vcs


def pool_advice(plan: CapacityPlan, choice: PoolChoice) -> PoolAdvice:
    """The quotas and the pool for ``plan``'s window, with the shares of ``choice``.

    Raises:
        ConfigError: as :func:`pool_vcs`.
    """
    vcs = pool_vcs(plan)
    rows = {r.scope: r for r in plan.rows}
    needed = {s: float(rows[s].gpus_needed) for s in vcs}
    caps: Mapping[str, float | None] = {s: rows[s].capacity for s in vcs}
    quotas = {s: math.ceil(choice.quota * needed[s] - _EPS) for s in vcs}
    pool = math.ceil(choice.pool * sum(needed.values()) - _EPS)
    per_vc = sum(math.ceil(n - _EPS) for n in needed.values())
    pooled = sum(quotas.values()) + pool
    known = [c for c in caps.values() if c is not None]
    capacity = float(sum(known)) if len(known) == len(vcs) else None
    net = math.ceil(pooled - capacity - _EPS) if capacity is not None else None
    hours = (plan.rows[0].end - plan.rows[0].start).total_seconds() / 3600.0
    text = _text(choice, pooled=pooled, per_vc=per_vc, quotas=sum(quotas.values()), pool=pool,
                 hours=hours)
    if net is not None and capacity is not None:
        text += (f"; the VCs have {capacity:g} GPUs installed: "
                 + (f"{net} more hold the quotas and the pool" if net > 0 else
                    f"{-net} of them are spare" if net < 0 else
                    "they hold the quotas and the pool exactly"))
    if choice.unmet_share > choice.max_unmet + _EPS:
        text += (f"; no pooling left at most {choice.max_unmet:.2%} unmet there, so these "
                 "shares are the ones leaving least")
    if pooled <= per_vc:
        text += ("; it needs a scheduler that lends quota between VCs (a Kueue cohort, a "
                 "shared Slurm partition)")
    warning = coarse_step_warning(plan.freq_s, plan.cluster)
    if warning is not None:
        text += f"; {warning}"
    return PoolAdvice(plan.cluster, choice, needed, quotas, pool, per_vc, pooled, capacity,
                      net, text)


def _text(choice: PoolChoice, *, pooled: int, per_vc: int, quotas: int, pool: int,
          hours: float) -> str:
    """The advice in words: a saving where the quotas and the pool hold fewer GPUs than the
    VCs sized apart, else plainly that the pool does not pay off, by how many GPUs and why."""
    shares = (f"each VC keeps {choice.quota:.0%} of what it needs as its own ({quotas} "
              f"GPUs) and borrows from a shared pool of {pool} GPUs ({choice.pool:.0%} of the "
              f"{per_vc} needed)")
    replay = (f"over the last {choice.windows} days this pooling saved "
              f"{choice.saved_share:.1%} of the static peak's idle GPU-hours with "
              f"{choice.unmet_share:.2%} of demand unmet, each VC sized apart at its day-kind "
              f"peak {choice.per_series_saved_share:.1%} with "
              f"{choice.per_series_unmet_share:.2%}")
    if pooled < per_vc:
        return (f"keep {pooled} GPUs for the next {hours:g} h instead of {per_vc} sized VC by "
                f"VC ({per_vc - pooled} fewer): {shares}; {replay}")
    if pooled == per_vc:
        return (f"the pool saves no GPUs here: {pooled} GPUs for the next {hours:g} h, as "
                f"many as sized VC by VC; {shares}; {replay}")
    # the quotas and the pool hold quota + pool of the needs: at 100 % or more, more GPUs
    # than sizing apart. The shares are chosen for the unmet target first, so that happens
    # where sizing each VC apart left more unmet than the target on the replayed days.
    why = (f"sizing each VC apart left {choice.per_series_unmet_share:.2%} of demand unmet "
           f"there, over the {choice.max_unmet:.2%} target, and the shares chosen for that target "
           f"hold {choice.quota + choice.pool:.0%} of the VCs' needs"
           if choice.per_series_unmet_share > choice.max_unmet + _EPS else
           f"the shares chosen hold {choice.quota + choice.pool:.0%} of the VCs' needs, "
           "each quota rounded up")
    unmet = ("it leaves less demand unmet only by holding more GPUs"
             if choice.unmet_share < choice.per_series_unmet_share - _EPS else
             "it left no less demand unmet there either")
    return (f"the pool does not pay off here: it needs {pooled - per_vc} GPUs more than "
            f"sizing each VC apart ({pooled} against {per_vc} for the next {hours:g} h), as "
            f"{why}; {shares}; {replay}: {unmet}")
