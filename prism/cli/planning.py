"""``prism capacity`` and ``prism report``, and the tables ``prism backtest`` prints.

Both plan with the newest saved model of each series by default (as the API does), fit one
only with ``--refit`` or when there is none (and say so on stderr), so that the CLI, the API
and the report give one set of numbers. ``--max-unmet 0.3%`` chooses each scope's quantile
from the planning backtest. ``prism capacity --procurement 30d`` adds the plan for buying
beside the day-ahead plan (a flag rather than a command: one run answers both "what to lend
today" and "what to buy this month", with the same cluster, capacities and growth, and as
``GET /v1/capacity?procurement=30d``). ``--pool`` adds the shared-pool alternative (a quota
per VC and one pool they borrow from; :mod:`prism.usecases.pool`). Both show a progress bar
per stage on a terminal.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prism import usecases
from prism.cli.common import (
    check_output,
    json_default,
    messages,
    print_json,
    progress_bar,
    progress_wanted,
)
from prism.cli.common import err as _err
from prism.cli.common import out as _out
from prism.cli.common import pairs as _pairs
from prism.cli.common import table as _table
from prism.cli.parser import db_flag, output_flags, quiet_flag
from prism.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from prism.capacity import CapacityPlan, Watts
    from prism.capacity_pool import PoolAdvice
    from prism.procurement import ProcurementPlan
    from prism.usecases.capacity import QuantileChoices, SavedModels


def print_planning(table: pd.DataFrame, title: str, console: Console = _out) -> None:
    """The planning backtest table (``prism backtest --planning``)."""
    shown = table.copy()
    shown["saved"] = (shown.pop("saved_share") * 100).round(1).astype(str) + " %"
    shown["unmet"] = (shown.pop("unmet_share") * 100).round(2).astype(str) + " %"
    shown = shown.drop(columns=["model", "quantile", "demand_gpu_hours"])
    for col in ("idle_gpu_hours", "unmet_gpu_hours"):
        shown[col] = shown[col].round(1)
    console.print(_table(shown, title=title))


def print_summary(table: pd.DataFrame, args: argparse.Namespace, models: list[str]) -> None:
    """The accuracy table (``prism backtest --summary``): one column per model, then each
    model against the last value (:func:`print_relative`)."""
    shown = [c for c in table.columns if not c.startswith(("pinball_", "avg_rel_mae"))
             and c not in ("model", "mase_undefined", "burst_steps", "catastrophes", "compared")]
    # one column per model, one row per metric: readable with many metrics
    wide = table.set_index("model")[shown].T.astype(float).round(4)
    messages(args.output).print(_table(wide.reset_index(names="metric"), title=f"backtest: horizon "
                      f"{args.horizon}, {args.windows} windows (means over windows)"))
    print_relative(table, args, models)


def print_relative(table: pd.DataFrame, args: argparse.Namespace, models: list[str]) -> None:
    """Each model against the last value (the accuracy's ``avg_rel_mae`` columns): AvgRelMAE
    [interval], catastrophes, coverage; or how to get them when ``naive`` was not
    backtested."""
    from prism.usecases.evaluation import BASELINE

    say = messages(args.output)
    if "avg_rel_mae" not in table.columns:
        if BASELINE not in models:  # naive alone: nothing to compare
            say.print(f"add {BASELINE} to --models to see each model against the last value "
                      "(AvgRelMAE with its 95 % interval, catastrophes)", markup=False)
        return
    import pandas as pd

    rows = table[table["model"] != BASELINE]
    if len(rows) and not (rows["compared"] > 0).any():
        say.print(f"against the last value ({BASELINE}): no window to compare; in every window "
                  f"both {BASELINE} and the other models were exact (AvgRelMAE leaves such "
                  "windows out)", markup=False)
        return
    shown = pd.DataFrame({
        "model": rows["model"],
        "AvgRelMAE [95 %]": [f"{r.avg_rel_mae:.3f} [{r.avg_rel_mae_lo:.3f}, "
                             f"{r.avg_rel_mae_hi:.3f}]" for r in rows.itertuples()],
        "catastrophes": [f"{c:.1%}" for c in rows["catastrophes"]],
        # no p5/p95 forecast (a batch run's quantiles, say): no coverage to show
        "coverage_90": (rows["coverage_90"].round(3) if "coverage_90" in rows.columns
                        else float("nan")),
        "windows": rows["compared"],
    })
    say.print(_table(shown, title=f"against the last value ({BASELINE}): AvgRelMAE < 1 is "
                     f"better; catastrophes: windows with MAE > 2x {BASELINE}'s"))


def _watts(text: str | None) -> Watts | None:
    from prism.capacity import parse_watts

    return parse_watts(text) if text else None


def _source(args: argparse.Namespace,
            progress: Callable[[int], None] | None = None) -> SavedModels:
    """The saved models of ``--model``; ``progress`` is called with the number of forecasts
    done (one per cluster planned) after each."""
    from prism.usecases.capacity import SavedModels

    class _Counted(SavedModels):
        done = 0

        def forecast(self, *a: Any, **kw: Any) -> tuple[pd.DataFrame, int]:
            result = super().forecast(*a, **kw)
            self.done += 1
            if progress is not None:
                progress(self.done)
            return result

    return _Counted(args.model, _pairs(args.param, "--param"), models_dir=args.models_dir,
                    refit=args.refit)


def _notes(source: SavedModels) -> None:
    for note in source.notes:
        _err.print(f"note: {note}", markup=False)


def _max_unmet(args: argparse.Namespace) -> float | None:
    from prism.usecases.capacity import parse_max_unmet

    return None if args.max_unmet is None else parse_max_unmet(args.max_unmet)


#: Loggers whose warnings ``prism capacity`` prints as its own ``warning:`` lines.
_PLANNING_LOGGERS = ("prism.capacity", "prism.usecases.capacity", "prism.usecases.pool",
                     "prism.evaluation.planning", "prism.procurement")


@contextmanager
def _plain_warnings() -> Iterator[None]:
    """Print what the planning warns about (a ``--capacity`` scope without series, a
    reservation outside the window, a target no quantile meets) as the CLI's own ``warning:``
    lines on stderr once the work is done, not as time-stamped log records; the API keeps
    logging them, and ``-v`` still shows the other records."""
    seen: list[str] = []

    def keep(record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        seen.append(record.getMessage())
        return False

    loggers = [logging.getLogger(name) for name in _PLANNING_LOGGERS]
    for logger in loggers:
        logger.addFilter(keep)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(keep)
        for message in dict.fromkeys(seen):
            _err.print(f"warning: {message}", markup=False)


def _cmd_capacity(args: argparse.Namespace) -> int:
    """``prism capacity``: the plan of a cluster, its moves and the reasons; with
    ``--procurement``, the plan for buying beside it."""
    from prism.capacity import read_capacity_table, read_reservations
    from prism.cli.common import write_output
    from prism.usecases.capacity import (
        choose_cluster_quantiles,
        plan_cluster_capacity,
        plan_cluster_procurement,
        procurement_days,
    )
    from prism.usecases.pool import plan_cluster_pool

    check_output(args.output, args.format)
    if args.output == "-" and args.json:
        raise ConfigError("--json and --output - both write to stdout: drop one (--format json "
                          "--output - writes the steps as JSON)")
    max_unmet = _max_unmet(args)  # bad values fail before any work
    if args.procurement is not None:
        procurement_days(args.procurement)
    if args.pool and args.scope:
        raise ConfigError("--pool pools every VC of the cluster: drop --scope")
    source = _source(args)
    capacities = read_capacity_table(args.capacity) if args.capacity else None
    reservations = read_reservations(args.reservations) if args.reservations else []
    choice, procurement, pool = None, None, None
    with (_plain_warnings(), progress_bar(progress_wanted(args.quiet)) as bar,
          usecases.open_store(args.db, must_exist=True) as store):
        if max_unmet is not None:
            choice = choose_cluster_quantiles(
                store, args.cluster, source, max_unmet=max_unmet, horizon=args.horizon,
                fallback=args.quantile, capacity_table=capacities, progress=bar,
                day_floor=not args.no_day_floor)
        plan = plan_cluster_capacity(
            store, args.cluster, source, scope=args.scope, horizon=args.horizon,
            quantile=args.quantile, capacity_table=capacities, reservations=reservations,
            growth=args.growth, watts=_watts(args.watts_per_gpu), choice=choice,
            progress=bar, record=None if args.no_record else "cli", day_floor=not args.no_day_floor)
        if args.procurement is not None:
            procurement = plan_cluster_procurement(
                store, args.cluster, scope=args.scope, horizon=args.procurement,
                weeks=args.trend_weeks, quantile=args.quantile, growth=args.growth,
                capacity_table=capacities, progress=bar)
        if args.pool:
            pool = plan_cluster_pool(store, plan, max_unmet=max_unmet,
                                     record=None if args.no_record else "cli",
                                     model=source.label, growth=args.growth)
    _notes(source)
    if args.output:
        where = write_output(plan.steps, args.output, args.format)
        _err.print(f"wrote the GPUs needed at each step ({len(plan.steps):,} rows) to {where}",
                   markup=False)
        if args.output == "-":
            return 0  # stdout holds the data only
    if args.json:
        import json

        from prism.capacity import tidy

        data: dict[str, Any] = {
            "cluster": plan.cluster, "horizon": args.horizon, "quantile": plan.quantile,
            "model": source.label, "watts_idle": plan.watts.idle,
            "watts_busy": plan.watts.busy, "rows": plan.records(steps=args.steps),
            "moves": plan.move_records(), "max_unmet": max_unmet,
            "quantile_choice": [{k: tidy(v) for k, v in c.items()}
                                for c in (choice.records() if choice is not None else [])]}
        if procurement is not None:
            data["procurement"] = procurement_json(procurement, steps=args.steps)
        if pool is not None:
            data["pool"] = pool.records()
        _out.print_json(json.dumps(data, default=json_default))
        return 0
    print_plan(plan, growth=args.growth, choice=choice)
    if procurement is not None:
        print_procurement(procurement)
    if pool is not None:
        print_pool(pool)
    return 0


def print_pool(pool: PoolAdvice) -> None:
    """The shared-pool alternative: each VC's quota and the pool, and why."""
    _out.print("shared pool (the alternative to sizing each VC apart):")
    for scope in sorted(pool.quotas):
        _out.print(f"  {scope}: {pool.keeps(scope)}", markup=False)
    installed = (f"the VCs' {pool.capacity:g} installed" if pool.capacity else "")
    change = (f"add {pool.net_gpus}" if pool.net_gpus and pool.net_gpus > 0 else
              f"{-pool.net_gpus} spare" if pool.net_gpus and pool.net_gpus < 0 else "")
    if pool.extra_gpus > 0:  # more GPUs than sizing apart: not a saving, whatever it adds
        line = (f"in all {pool.pooled_gpus} GPUs, {pool.extra_gpus} more than the "
                f"{pool.per_vc_gpus} sized VC by VC: the pool does not pay off here"
                + (f" ({installed}: {change})" if installed and change else ""))
    else:
        line = (f"in all {pool.pooled_gpus} GPUs against {pool.per_vc_gpus} sized VC by VC"
                + (f" and {installed}" if installed else "") + (f": {change}" if change else ""))
    _out.print(f"  pool: {pool.pool_gpus} GPUs; {line}", markup=False)
    _out.print(f"  why: {pool.text}", markup=False)


def procurement_json(plan: ProcurementPlan, *, steps: bool = False) -> dict[str, Any]:
    """The procurement plan as ``GET /v1/capacity/procurement`` answers it."""
    return {"cluster": plan.cluster, "horizon_days": plan.horizon_days, "weeks": plan.weeks,
            "rows": plan.records(steps=steps)}


def print_procurement(plan: ProcurementPlan) -> None:
    """The procurement table and each row's advice and reason."""
    import pandas as pd

    table = plan.table()
    cols = ["scope", "capacity", "trend_now", "slope_per_day", "slope_low", "slope_high",
            "projected_peak", "projected_low", "projected_high", "exceeds_on", "needed_gpus",
            "action"]
    shown = table[cols].rename(columns={
        "trend_now": "trend now", "slope_per_day": "GPUs/day", "slope_low": "low",
        "slope_high": "high", "projected_peak": "peak", "projected_low": "peak low",
        "projected_high": "peak high", "exceeds_on": "exceeds on", "needed_gpus": "needs"})
    shown["exceeds on"] = [f"{r.exceeds_on:%Y-%m-%d}" if r.exceeds_on is not None else "-"
                           for r in plan.rows]
    for col in shown.columns:
        if pd.api.types.is_float_dtype(shown[col]):
            shown[col] = shown[col].round(2 if col in ("GPUs/day", "low", "high") else 1)
    row = plan.rows[0]
    _out.print(_table(shown, title=f"{plan.cluster} procurement: {row.start:%Y-%m-%d} to "
                      f"{row.end - pd.Timedelta(days=1):%Y-%m-%d} ({plan.horizon_days} d, "
                      f"trend of the daily peaks over {plan.weeks} weeks)"))
    _out.print("procurement:")
    for r in plan.rows:
        _out.print(f"  {r.scope}: {r.text}", markup=False)
        _out.print(f"    {r.reason}", markup=False)


def print_plan(plan: CapacityPlan, *, growth: float = 1.0,
               choice: QuantileChoices | None = None) -> None:
    """The capacity table, the moves between VCs and each row's reason (with ``choice``, the
    quantile of each scope and the scopes where none meets the target)."""
    import pandas as pd

    from prism.capacity import gpus_text

    table = plan.table()
    start, end = plan.rows[0].start, plan.rows[0].end
    q = f"p{plan.quantile * 100:g}" if choice is None else "at q"
    cols = ["scope", "in_use_needed", "queue_allowance", "gpus_needed", "capacity",
            "net_gpus", "shortfall_gpu_hours", "queue_risk", "idle_gpu_hours",
            "idle_energy_kwh", "recommendation"]
    if choice is not None:
        cols.insert(1, "quantile")
    shown = table[cols].rename(columns={
        "in_use_needed": f"in use {q}", "queue_allowance": "queue", "gpus_needed": f"needed {q}",
        "net_gpus": "net", "shortfall_gpu_hours": "short GPU-h", "idle_gpu_hours": "idle GPU-h",
        "idle_energy_kwh": "idle kWh"})
    if choice is not None:
        shown["quantile"] = [f"p{v * 100:g}" for v in table["quantile"]]
    for col in shown.columns:
        if pd.api.types.is_float_dtype(shown[col]):
            shown[col] = shown[col].round(3 if col == "queue_risk" else 1)
    # a need just over capacity shows the decimals that make it so (16.01 against 16)
    shown[f"needed {q}"] = [gpus_text(r.gpus_needed, r.capacity) for r in plan.rows]
    _out.print(_table(shown, title=f"{plan.cluster}: {start:%Y-%m-%d %H:%M} to "
                      f"{end:%Y-%m-%d %H:%M} UTC ({plan.rows[0].model})"))
    if plan.moves:
        _out.print("moves between VCs (before anything is added):")
        for move in plan.moves:
            _out.print(f"  {move.text}")
    if choice is not None:
        missed = [c for c in choice.rows if c.meets_target is False]
        _out.print(f"quantile per scope: the cheapest with at most "
                   f"{choice.max_unmet * 100:.3g} % of demand unmet in {choice.model}'s "
                   f"planning backtest ({choice.block} levels)"
                   + (f"; none meets it for {', '.join(c.scope for c in missed)}: the highest "
                      "quantile is used there" if missed else ""), markup=False)
    _out.print("why:")
    for row in plan.rows:
        _out.print(f"  {row.scope}: {row.reason}", markup=False)
    extras = []
    if growth != 1.0:
        extras.append(f"growth x{growth:g}")
    reserved = sum(r.reserved_gpu_hours for r in plan.rows)
    if reserved:
        extras.append(f"reservations {reserved:,.1f} GPU-h")
    _out.print(f"energy at {plan.watts.idle:g} W idle / {plan.watts.busy:g} W busy per GPU"
               + (f"; {', '.join(extras)}" if extras else ""))


def _cmd_report(args: argparse.Namespace) -> int:
    """``prism report``: the capacity report as one HTML file (and a PDF)."""
    from prism.capacity import read_capacity_table
    from prism.usecases.report import capacity_report

    max_unmet = _max_unmet(args)  # bad values fail before any work
    capacities = read_capacity_table(args.capacity) if args.capacity else None
    # one step per cluster (counted as the source forecasts): a bar once the clusters are
    # named, else a count without a total; the use case's own stages where it reports them
    total = len(args.cluster) if args.cluster else 0
    with (_plain_warnings(), progress_bar(progress_wanted(args.quiet)) as bar,
          usecases.open_store(args.db, must_exist=True) as store):
        if bar is not None:
            bar("clusters", 0, total)
        source = _source(args, (lambda n: bar("clusters", n, max(total, n))) if bar else None)
        result = capacity_report(
            store, source, clusters=args.cluster, horizon=args.horizon,
            quantile=args.quantile, capacity_table=capacities, watts=_watts(args.watts_per_gpu),
            output=args.output, pdf=args.pdf, max_unmet=max_unmet, record=not args.no_record,
            day_floor=not args.no_day_floor, pool=args.pool,
            # its stages, counted on one bar
            progress=(lambda _stage, done, n: bar("report", done, n)) if bar else None)
    _notes(source)
    _out.print(f"wrote {result.path} ({', '.join(result.clusters) or 'no cluster'})"
               + (f" and {result.pdf}" if result.pdf else ""))
    return 0


def _cmd_track_record(args: argparse.Namespace) -> int:
    """``prism track-record``: the served plans of a cluster whose window has ended, against
    the GPUs in use and yesterday's peak (the report's section, on the terminal or as JSON)."""
    from prism.usecases.report import track_record

    with usecases.open_store(args.db, must_exist=True) as store:
        data = track_record(store, args.cluster).records(plans=args.plans)
    if args.json:
        print_json(data)
    else:
        print_track_record(data)
    return 0


def print_track_record(data: dict[str, Any]) -> None:
    """The track record (:meth:`~prism.track_record.TrackRecord.records`) as tables, its note
    and its warnings."""
    import pandas as pd

    _out.print(data["note"], markup=False)
    if data["summary"]:
        table = pd.DataFrame(data["summary"])
        shown = pd.DataFrame({
            "model": table["model"], "scope": table["scope"], "plans": table["plans"],
            "quantile": ["-" if q is None or q != q else f"p{q * 100:.3g}"
                         for q in table["quantile"]],
            "in use GPU-h": table["in_use_gpu_hours"].round(1),
            "unmet": [_share(v) for v in table["unmet_share"]],
            "idle GPU-h": table["idle_gpu_hours"].round(1),
            "coverage": [f"{v * 100:.1f} %" for v in table["coverage"]],
            "rule unmet": [_share(v) for v in table["rule_unmet_share"]],
            "rule idle GPU-h": table["rule_idle_gpu_hours"].round(1),
            "rule coverage": [f"{v * 100:.1f} %" for v in table["rule_coverage"]],
            "beats rule": ["yes" if v else "no" for v in table["beats"]]})
        _out.print(_table(shown, title=f"{data['cluster']}: served plans against what was in "
                          f"use, and against yesterday's peak (rule) on the same windows "
                          f"(scopes: {', '.join(data['scopes'])})"))
    if data.get("plans"):
        plans = pd.DataFrame(data["plans"])
        cols = ["scope", "model", "quantile", "valid_from", "valid_to", "gpus_planned",
                "yesterday_peak", "peak_in_use", "unmet_gpu_hours", "idle_gpu_hours"]
        shown = plans[cols].copy()
        for col in ("valid_from", "valid_to"):  # datetimes, or the API's UTC text
            shown[col] = [f"{pd.Timestamp(t):%Y-%m-%d %H:%M}" for t in shown[col]]
        _out.print(_table(shown.round(2), title="each scored plan (times in UTC)"))
    for warning in data["warnings"]:
        _err.print(f"warning: {warning}", markup=False)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.2f} %"


def _plan_flags(p: argparse.ArgumentParser) -> None:
    """The window, quantile and forecast source of ``capacity`` and ``report``."""
    p.add_argument("--horizon", default="1d", help="the planning window")
    p.add_argument("--quantile", type=float, default=0.95,
                   help="the planning quantile of GPUs in use")
    p.add_argument("--max-unmet", metavar="SHARE",
                   help="choose each scope's quantile from the planning backtest: the "
                   "cheapest leaving at most this share of demand unmet, e.g. 0.3%% or 0.003 "
                   "(--quantile is then the fallback of a scope without a backtest)")
    p.add_argument("--no-record", action="store_true",
                   help="do not keep the plan (nor the shared pool of --pool) in the store "
                   "for the report's track record")
    p.add_argument("--no-day-floor", action="store_true",
                   help="size at the forecast's quantile alone; by default a scope gets at "
                   "least what the last 24 h used and, if its weekends differ from its "
                   "weekdays, what the latest day of its kind used: Monday is sized for the "
                   "Friday before, not for Sunday")
    _model_flags(p)


def _model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="prism", help="the forecaster (see `prism models "
                   "aliases`)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a model hyperparameter (repeatable)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from-model", dest="refit", action="store_false",
                   help="forecast with the newest saved model of each series, as the API does "
                   "(the default; a series without one is fitted now, and the model saved)")
    g.add_argument("--refit", dest="refit", action="store_true",
                   help="fit the model now on the cluster's series (and save it)")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="the model registry (default: $PRISM_MODELS_DIR or ./models)")
    quiet_flag(p, "no progress bar or spinner")
    db_flag(p)
    p.set_defaults(refit=False)


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``capacity`` and ``report`` to the ``prism`` parser (their functions keep the names
    ``_cmd_capacity`` and ``_cmd_report``: the dispatcher and :mod:`prism.cli.remote` know
    the commands by them)."""
    p = sub.add_parser("capacity", help="GPUs each scope needs, moves between VCs, advice")
    p.add_argument("--cluster", required=True, help="the cluster to plan")
    p.add_argument("--scope", help="show one scope only (the whole cluster is planned)")
    _plan_flags(p)
    p.add_argument("--capacity", type=Path, metavar="FILE",
                   help="CSV scope,gpus[,cluster]: capacities that override the store's")
    p.add_argument("--reservations", type=Path, metavar="FILE",
                   help="CSV start,end,gpus,scope[,cluster,name]: known future jobs added on "
                   "top of the forecast")
    p.add_argument("--growth", type=float, default=1.0,
                   help="demand growth factor, e.g. 1.1 for 10%% more")
    p.add_argument("--watts-per-gpu", metavar="IDLE,BUSY",
                   help="power of one GPU idle and busy in watts (default 60,300)")
    p.add_argument("--json", action="store_true", help="one JSON object (as GET /v1/capacity; "
                   "times in UTC, with Z)")
    p.add_argument("--procurement", metavar="HORIZON",
                   help="also the plan for buying: each scope's daily peak projected over "
                   "HORIZON (e.g. 30d, 12w) from its trend, and when capacity runs out")
    p.add_argument("--trend-weeks", type=int, default=4, metavar="N",
                   help="with --procurement: weeks of daily peaks the trend is fitted on")
    p.add_argument("--pool", action="store_true",
                   help="also the shared-pool alternative: a quota per VC and one pool they "
                   "all borrow from, its shares chosen on the VCs' last 7 days (at most "
                   "--max-unmet unmet there, 0.3%% by default); for a scheduler that lends "
                   "quota between VCs")
    p.add_argument("--steps", action="store_true", help="with --json: the GPUs needed at "
                   "each step too (and each projected day)")
    output_flags(p, "also write the GPUs needed at each step", table=False)
    p.set_defaults(func=_cmd_capacity)

    p = sub.add_parser("report", help="the capacity report: one self-contained HTML file")
    p.add_argument("--output", required=True, help="FILE.html")
    p.add_argument("--pdf", action="store_true",
                   help="also print FILE.pdf (needs Chromium: apt-get install chromium)")
    p.add_argument("--cluster", action="append", help="a cluster (repeatable; default all)")
    _plan_flags(p)
    p.add_argument("--capacity", type=Path, metavar="FILE",
                   help="CSV scope,gpus[,cluster] overriding the store's capacities")
    p.add_argument("--watts-per-gpu", metavar="IDLE,BUSY",
                   help="power of one GPU idle and busy in watts (default 60,300)")
    p.add_argument("--pool", action="store_true",
                   help="also each cluster's shared-pool alternative (as capacity --pool)")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("track-record", help="served capacity plans whose window has ended, "
                       "against what was in use and against yesterday's peak")
    p.add_argument("--cluster", required=True, help="the cluster")
    p.add_argument("--plans", action="store_true", help="also each scored plan row")
    p.add_argument("--json", action="store_true", help="one JSON object (as GET "
                   "/v1/capacity/track-record; times in UTC, with Z)")
    db_flag(p)
    p.set_defaults(func=_cmd_track_record)
