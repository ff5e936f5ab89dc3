"""``prism watch``: pull from Prometheus on a schedule and refit the models of the series
that get new data (:mod:`prism.usecases.watch`).

One line per tick on stdout (what was pulled, which series were refit); failures on stderr.
Exit status: 0, or 1 when a tick had a failed pull or refit (the loop goes on after one; the
status is given when it ends: after ``--once``, ``--ticks N``, or Ctrl-C).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from prism import usecases
from prism.cli.common import err as _err
from prism.cli.common import out as _out
from prism.cli.common import pairs as _pairs
from prism.cli.parser import FILL_POLICIES, _model_choice, _models_dir, db_flag

if TYPE_CHECKING:
    import pandas as pd

    from prism.usecases.watch import TickReport, WatchPlan

#: Series named in a tick's line before "+N more".
_SHOWN = 5


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``watch`` to the ``prism`` parser."""
    p = sub.add_parser(
        "watch", help="pull from Prometheus on a schedule and refit the models of the series "
        "that get new data",
        description="At each tick: pull each --query from one step after the newest sample "
        "the store holds of its series (--since back on the first pull) up to now, in one "
        "transaction per query, then refit and save the models of the series with at least "
        "--refit-every new points (a batch refit, as `prism refit`). A failed pull is "
        "reported and the watch goes on. Exit status 1 when a tick failed.")
    p.add_argument("--prometheus-url", required=True, metavar="URL",
                   help="the Prometheus server (HTTP API /api/v1/query_range), e.g. "
                   "http://prometheus:9090")
    p.add_argument("--query", required=True, action="append", metavar="PROMQL",
                   help="a PromQL expression, e.g. 'sum by (namespace) (DCGM_FI_DEV_GPU_UTIL)' "
                   "(repeatable)")
    p.add_argument("--step", default="1m", metavar="DURATION",
                   help="resolution of the pulls, e.g. 10s, 1m")
    p.add_argument("--since", default="7d", metavar="DURATION",
                   help="how far back the first pull of a query reaches (when the store holds "
                   "none of its samples)")
    p.add_argument("--every", default="60s", metavar="DURATION", help="time between ticks")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--once", action="store_true", help="run one tick and exit")
    stop.add_argument("--ticks", type=int, metavar="N", help="run N ticks and exit "
                      "(default: until Ctrl-C)")
    p.add_argument("--refit-every", type=int, default=1, metavar="N",
                   help="refit a series once its derived series has N new points since its "
                   "latest saved model (new series are fitted at once)")
    _model_choice(p)
    _models_dir(p)
    p.add_argument("--keep", type=int, default=0, metavar="N",
                   help="after a refit, prune the model's registry to the N newest models per "
                   "series (prism models prune --keep N); 0 keeps every model")
    p.add_argument("--cluster", help="cluster name of the pulled series (default: the "
                   "result's cluster label, else prometheus)")
    p.add_argument("--scope", help="scope of every pulled series")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="as for prism ingest --prometheus-url: token=TOKEN (or "
                   "$PRISM_PROMETHEUS_TOKEN), timeout=2m, max_points=N, metric=NAME, "
                   "scale=X, combine=..., scope_label=LABEL (repeatable)")
    p.add_argument("--freq", help="bucket size of the derived series, e.g. 1m, 10min "
                   "(default 10min, kept per cluster)")
    p.add_argument("--fill", choices=FILL_POLICIES,
                   help="gap policy of the derived series (default: auto, kept per cluster)")
    db_flag(p)
    p.set_defaults(func=_cmd_watch)


def _cmd_watch(args: argparse.Namespace) -> int:
    from prism.cli import remote
    from prism.config import get_settings
    from prism.ingest.base import IngestOptions
    from prism.usecases.watch import make_plan, schedule, watch_tick

    info = remote.server_for(args)
    if info is not None:
        remote.refuse(args, info, "watch")
    plan = make_plan(
        args.prometheus_url, args.query, step=args.step, since=args.since,
        options=IngestOptions(cluster=args.cluster, scope=args.scope,
                              extra=_pairs(args.option, "--option")),
        token=get_settings().prometheus_token, freq=args.freq, fill=args.fill,
        model=args.model, params=_pairs(args.param, "--param"), models_dir=args.models_dir,
        refit_every=args.refit_every, keep=args.keep)
    ticks = 1 if args.once else args.ticks
    ticking = schedule(args.every, ticks)  # checks --every and --ticks before any tick
    _err.print(f"watching {len(plan.queries)} "
               f"{'query' if len(plan.queries) == 1 else 'queries'} on {plan.endpoint()} "
               f"every {args.every} into {args.db}, refitting {plan.model}"
               + ("" if ticks else "; Ctrl-C stops"), markup=False)
    done = failed = 0
    with _quiet_empty_pulls():
        try:
            for n in ticking:
                with usecases.open_store(args.db) as store:
                    report = watch_tick(store, plan)
                done, failed = n, failed + report.failed
                _print_tick(n, plan, report)
        except KeyboardInterrupt:
            _err.print(f"stopped after {done} tick{'' if done == 1 else 's'} (Ctrl-C); an "
                       "interrupted pull stored nothing", markup=False)
    if failed:
        _err.print(f"{failed} of {done} tick{'' if done == 1 else 's'} failed", markup=False)
    return 1 if failed else 0


class _NotEmptyPulls(logging.Filter):
    """Drops the pull's warning that a query returned no samples: at a tick that comes
    before the server's next sample that is expected (the tick's line says 0 new samples)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "the query returned no samples" not in record.getMessage()


@contextmanager
def _quiet_empty_pulls() -> Iterator[None]:
    quiet = _NotEmptyPulls()
    pull_logger = logging.getLogger("prism.ingest.prometheus_pull")
    pull_logger.addFilter(quiet)
    try:
        yield
    finally:
        pull_logger.removeFilter(quiet)


def _print_tick(n: int, plan: WatchPlan, report: TickReport) -> None:
    """One line on stdout; each failure on stderr."""
    parts = []
    for pull in report.pulls:
        if pull.error is not None:
            parts.append(f"{pull.query!r} failed")
            _err.print(f"tick {n}: pull of {pull.query!r} from {plan.endpoint()} failed: "
                       f"{pull.error}", markup=False)
        elif pull.start is None:
            parts.append(f"{pull.query!r} up to date")
        else:
            parts.append(f"{pull.query!r} {_utc(pull.start)}..{_utc(pull.end)}: "
                         f"{pull.rows:,} new samples in {len(pull.changed)} series")
    if report.refit:
        parts.append(f"refit {plan.model} on {len(report.refit)} series: "
                     f"{_names(report.refit)} as {', '.join(report.model_ids)}")
    elif report.refit_error is None:
        parts.append("no refit")
    if report.waiting:
        parts.append(f"{len(report.waiting)} series wait for --refit-every "
                     f"{plan.refit_every}: {_names(sorted(report.waiting))}")
    if report.pruned:
        parts.append(f"pruned {report.pruned} models")
    _out.print(f"tick {n} at {_utc(report.now)}: " + "; ".join(parts), markup=False)
    if report.refit_error is not None:
        _err.print(f"tick {n}: refit of {plan.model} failed: {report.refit_error}",
                   markup=False)
    for sid, status, reason in report.refit_notes:
        _err.print(f"tick {n}: note: {sid}: {status}: {reason}", markup=False)


def _names(ids: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(ids[:_SHOWN])
    return shown + (f" (+{len(ids) - _SHOWN} more)" if len(ids) > _SHOWN else "")


def _utc(stamp: pd.Timestamp | None) -> str:
    return "" if stamp is None else f"{stamp:%Y-%m-%dT%H:%M:%S}Z"
