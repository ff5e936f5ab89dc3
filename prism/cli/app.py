"""The ``prism`` command line: parses arguments, calls a use case of :mod:`prism.usecases`,
prints.

Exit codes: 0 success, 1 bad input or data (the message says what and how to fix it), 2 bad
usage (argparse).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pandas as pd
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from prism import __version__, usecases
from prism.cli import planning
from prism.cli.common import err as _err
from prism.cli.common import out as _out
from prism.cli.common import pairs as _pairs
from prism.cli.common import print_forecast
from prism.cli.common import quantile_list as _quantiles
from prism.cli.common import table as _table
from prism.config import get_settings
from prism.errors import ConfigError, PrismError
from prism.schema import FILL_POLICIES

if TYPE_CHECKING:
    from prism.store import Store
    from prism.usecases.batch import BatchJob

@contextmanager
def _progress(enabled: bool, *, eta: bool = False,
              ) -> Iterator[Callable[[str, int, int], None] | None]:
    if not enabled:
        yield None
        return
    columns = [TextColumn("{task.description:<8}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn()]
    if eta:
        columns += [TextColumn("eta"), TimeRemainingColumn()]
    with Progress(*columns, console=_err, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            # total 0: not known yet (rows of a streamed file): an indeterminate bar
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total or None)
            bar.update(tasks[stage], completed=done, total=max(total, done) or None)

        yield update


# -- commands --------------------------------------------------------------------------------
# Each command parses its arguments, opens the store (usecases.open_store), calls a use case
# of prism.usecases (imported on use: `prism --help` stays fast) and prints what it returns.
def _cmd_ingest(args: argparse.Namespace) -> int:
    from prism.ingest.base import IngestOptions
    from prism.usecases.ingest import ingest_files

    options = IngestOptions(
        cluster=args.cluster, scope=args.scope, tz=args.tz, origin=args.origin,
        time_col=args.time_col, mapping=_pairs(args.map, "--map"),
        on_error=args.on_error, extra=_pairs(args.option, "--option"),
    )
    with _progress(not args.quiet) as progress, usecases.open_store(args.db) as store:
        report = ingest_files(store, args.paths, args.format, options, freq=args.freq,
                              fill=args.fill, progress=progress)
    for f in report.files:
        note = "unchanged (already ingested)" if f.status == "unchanged" else (
            f"{f.rows:,} rows" + (f", {f.rejected:,} rejected" if f.rejected else ""))
        _out.print(f"{f.path}: {note}")
        for r in f.rejects[:5]:
            _out.print(f"  rejected line {r.line} column {r.column}: {r.reason} ({r.raw!r})")
        if f.rejected > 5:
            _out.print(f"  ... {f.rejected - 5:,} more in the `rejects` table")
    _out.print(
        f"{report.rows:,} rows added, {report.rejected:,} rejected; "
        f"{report.series} series in {', '.join(report.clusters) or 'no changed cluster'} "
        f"(store {args.db})"
    )
    return 0


def _cmd_series_list(args: argparse.Namespace) -> int:
    from prism.usecases.series import list_series

    with usecases.open_store(args.db, must_exist=True) as store:
        frame = list_series(store, cluster=args.cluster, scope=args.scope, metric=args.metric)
    if args.json:
        _out.print_json(frame.to_json(orient="records", date_format="iso"))
        return 0
    if frame.empty:
        _out.print("no series (ingest something first: prism ingest PATH --format FORMAT)")
        return 0
    cols = ["series_id", "freq", "first_ts", "last_ts", "n_points", "n_filled", "unit", "source"]
    _out.print(_table(frame[cols], title=f"{len(frame)} series"))
    return 0


def _cmd_series_show(args: argparse.Namespace) -> int:
    from prism.usecases.series import series_values

    with usecases.open_store(args.db, must_exist=True) as store:
        frame = series_values(store, args.series_id, start=args.start, end=args.end,
                              tail=args.tail)
    if args.json:
        _out.print_json(frame.to_json(orient="records", date_format="iso"))
    else:
        _out.print(_table(frame, title=args.series_id))
    return 0


def _cmd_series_export(args: argparse.Namespace) -> int:
    from prism.usecases.series import export_panel

    with usecases.open_store(args.db, must_exist=True) as store:
        result = export_panel(store, args.output, series_ids=args.series)
    _out.print(f"wrote {result.rows:,} rows of {result.series} series to {result.path}")
    return 0


def _cmd_series_rederive(args: argparse.Namespace) -> int:
    from prism.usecases.series import rederive_cluster

    with usecases.open_store(args.db, must_exist=True) as store:
        done = rederive_cluster(store, args.cluster, freq=args.freq, fill=args.fill)
    _out.print(f"re-derived {done.series:,} series of {done.cluster} ({done.points:,} points) "
               f"at {done.freq} (was {done.previous_freq}), fill {done.fill}; its cached "
               "forecasts were dropped", markup=False)
    return 0


def _cmd_decompose(args: argparse.Namespace) -> int:
    from prism.usecases import series as series_uc

    with _err.status(f"decomposing {args.series_id} ...", spinner="dots") if not args.json else (
            nullcontext()):
        with usecases.open_store(args.db, must_exist=True) as store:
            result = series_uc.decompose_series(store, args.series_id)
        if args.plot:
            series_uc.plot_decomposition(result, args.plot)
    summary = result.summary(top=args.top)
    if args.json:
        _out.print_json(data=summary)
        return 0
    periods = pd.DataFrame(summary["periods"], columns=["seconds", "steps", "strength"])
    periods.insert(0, "period", [_human(s) for s in periods["seconds"]])
    _out.print(_table(periods, title=f"{args.series_id}: periods"))
    _out.print(_table(pd.DataFrame(summary["primitives"], columns=["id", "kind", "label",
                                                                    "share"]),
                      title="top primitives (share of the detrended variance)"))
    bursts = pd.DataFrame(summary["bursts"], columns=["start", "end", "peak", "height"])
    _out.print(_table(bursts.tail(args.top * 2), title=f"bursts ({len(bursts)}; latest shown)"))
    shifts = pd.DataFrame(summary["level_shifts"], columns=["at", "delta"])
    if len(shifts):
        _out.print(_table(shifts, title="level shifts"))
    shares = summary["variance_share"]
    _out.print("variance share: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    if args.plot:
        _out.print(f"plot written to {args.plot}")
    return 0


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"


def _batch_mode(args: argparse.Namespace) -> bool:
    return bool(args.backend or args.ray_address or args.workers is not None
                or args.budget is not None or args.global_sample is not None)


def _run_batch(args: argparse.Namespace, store: Store, task: str, models: list[str],
               series: list[str] | None) -> BatchJob:
    from prism.usecases.batch import run_batch_job

    with _progress(not args.quiet, eta=True) as progress:
        result = run_batch_job(
            store, series, models=models, task=task,
            params=_pairs(getattr(args, "param", None), "--param"), horizon=args.horizon,
            quantiles=_quantiles(args.quantiles), windows=getattr(args, "windows", 1),
            step=getattr(args, "step", None), backend=args.backend or "local",
            workers=args.workers, ray_address=args.ray_address, budget_s=args.budget,
            global_sample=args.global_sample, output=args.output,
            save=getattr(args, "save", False), models_dir=getattr(args, "models_dir", None),
            progress=progress,
        )
    for report in result.reports:
        _out.print(
            f"run {report.run_id}: {report.model} {report.task} of {report.n_series:,} series "
            f"on {report.backend} ({report.workers} workers) in {report.seconds:.1f} s: "
            f"{report.ok:,} ok, {report.fallback:,} fallback, {report.skipped:,} skipped, "
            f"{report.failed:,} failed; {report.rows:,} rows in batch_forecasts")
        for sid, status, reason in report.notes:
            _err.print(f"note: {sid}: {status}: {reason}", markup=False)
        hidden = report.fallback + report.skipped + report.failed - len(report.notes)
        if hidden > 0:
            _err.print(f"note: {hidden:,} more in batch_series (run {report.run_id})",
                       markup=False)
        if report.models_dir is not None:
            _out.print(f"{report.saved:,} saved as {len(report.model_ids):,} registry models "
                       f"in {report.models_dir} (prism serve and prism forecast --from-model "
                       f"{report.model} use them)", markup=False)
    if result.output:
        _out.print(f"wrote {sum(r.rows for r in result.reports):,} rows to {result.output}")
    return result


def _cmd_forecast(args: argparse.Namespace) -> int:
    from prism.usecases.forecast import forecast_series

    if not args.series_ids and not args.all and not args.from_model:
        raise ConfigError("name one or more series ids, or pass --all")
    if _batch_mode(args):
        if args.from_model or args.reconcile:
            raise ConfigError("--from-model and --reconcile work on one in-memory model; drop "
                              "them to run a batch (--backend/--workers/--budget)")
        with usecases.open_store(args.db, must_exist=True) as store:
            _run_batch(args, store, "forecast", [args.model],
                       None if args.all else args.series_ids)
        return 0
    with (_err.status(f"fitting {args.from_model or args.model} ...", spinner="dots"),
          usecases.open_store(args.db, must_exist=True) as store):
        result = forecast_series(
            store, None if args.all else (args.series_ids or None), horizon=args.horizon,
            quantiles=_quantiles(args.quantiles), model=args.model,
            params=_pairs(args.param, "--param"), save=args.save, from_model=args.from_model,
            models_dir=args.models_dir, reconcile=args.reconcile,
        )
    frame = result.frame
    for sid, reason in result.fallback.items():
        _err.print(f"note: {sid} is forecast by the seasonal naive fallback: {reason}",
                   markup=False)
    print_forecast(frame, args.output)
    if result.model_id:
        _out.print(f"model {result.model_id}" + (" saved" if args.save else ""))
    elif result.model_ids:
        _out.print(f"{len(result.model_ids)} models: {', '.join(result.model_ids)}")
    return 0


def _cmd_refit(args: argparse.Namespace) -> int:
    if not args.series_ids and not args.all:
        raise ConfigError("name one or more series ids, or pass --all")
    with usecases.open_store(args.db, must_exist=True) as store:
        _run_batch(args, store, "refit", [args.model], None if args.all else args.series_ids)
    return 0


def _cmd_backtest(args: argparse.Namespace) -> int:
    from prism.usecases import evaluation as evaluation_uc
    from prism.usecases.files import write_frame

    if not args.series and not args.all:
        raise ConfigError("name series with --series (repeatable), or pass --all")
    if not args.output and not args.summary and not args.planning:
        raise ConfigError("pass --output FILE.csv for the forecasts, --summary for the table, "
                          "--planning for the planning backtest, or several")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        raise ConfigError("--models is empty; name models, e.g. --models prism,seasonal_naive")
    series = None if args.all else args.series
    quantiles = _quantiles(args.quantiles)
    with usecases.open_store(args.db, must_exist=True) as store:
        if _batch_mode(args):
            if args.refit != "always":
                raise ConfigError("a batch backtest refits at every cutoff; drop --refit")
            job = _run_batch(args, store, "backtest", models, series)
            if not args.summary and not args.planning:
                return 0
            done = evaluation_uc.batch_backtest(store, job.run_ids)
        else:
            refit: int | Literal["always"] = (
                "always" if args.refit == "always" else _positive_int(args.refit))
            with _progress(not args.quiet) as progress:
                done = evaluation_uc.backtest_series(
                    store, series, models=models, horizon=args.horizon, windows=args.windows,
                    step=args.step, quantiles=quantiles, refit=refit,
                    progress=(lambda n, total: progress("backtest", n, total)) if progress
                    else None,
                )
            if args.output:
                path = write_frame(done.frame, args.output)
                _out.print(f"wrote {len(done.frame):,} rows ({done.frame['series_id'].nunique()}"
                           f" series, {len(models)} models, {args.windows} windows) to {path}")
        # printed and kept in the store, for `prism report`
        scores = evaluation_uc.score_backtest(
            store, done, horizon=args.horizon, windows=args.windows, quantiles=quantiles,
            accuracy=args.summary, planning=args.planning)
    if scores.accuracy is not None:
        planning.print_summary(scores.accuracy, args)
    if scores.planning is not None:
        planning.print_planning(
            scores.planning, f"planning backtest ({scores.planning_run_id}): one level per "
            f"series and block, set from each {args.horizon} forecast")
    return 0


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--refit {text!r}: use 'always' or a number of cutoffs >= 1")
    return int(text)


def _cmd_models_aliases(args: argparse.Namespace) -> int:
    from prism.forecasters import FORECASTERS

    rows = [{"alias": alias, "class": cls.__name__,
             "summary": (cls.__doc__ or "").strip().splitlines()[0]}
            for alias, cls in sorted(FORECASTERS.items())]
    _out.print(_table(pd.DataFrame(rows), title="forecasters"))
    return 0


def _cmd_models_list(args: argparse.Namespace) -> int:
    from prism.usecases.forecast import list_models

    frame = list_models(args.models_dir)
    if args.json:
        _out.print_json(frame.to_json(orient="records"))
    elif frame.empty:
        _out.print("no saved models (save one with prism forecast ... --save)")
    else:
        _out.print(_table(frame, title="saved models"))
    return 0


def _cmd_models_prune(args: argparse.Namespace) -> int:
    from prism.usecases.forecast import prune_models

    removed = prune_models(args.models_dir, keep=args.keep, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    if args.json:
        _out.print_json(removed.drop(columns=["path"], errors="ignore").to_json(
            orient="records", date_format="iso"))
    elif removed.empty:
        _out.print(f"nothing to prune: each series keeps its {args.keep} newest models per alias")
    else:
        _out.print(_table(removed.drop(columns=["path"], errors="ignore"),
                          title=f"{verb} {len(removed)} models"))
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from prism.usecases import catalogue as catalogue_uc

    if args.kind == "deployments":
        written = catalogue_uc.generate_deployments(args.output, apps=args.apps,
                                                    days=args.days, seed=args.seed)
        _out.print(f"wrote {written.n_rows:,} samples of {written.n_series} app GPU "
                   f"allocation series to {written.path}")
        _out.print(f"next: prism ingest {written.path} --format long-csv")
        return 0
    with _progress(not args.quiet) as progress:
        result = catalogue_uc.generate_trace(
            args.output, days=args.days, clusters=args.clusters, seed=args.seed,
            jobs_per_day=args.jobs_per_day, fmt=args.file_format,
            progress=(lambda done, total: progress("generate", done, total)) if progress
            else None,
        )
    _out.print(f"wrote {result.n_jobs:,} jobs of {len(result.clusters)} cluster(s) to "
               f"{result.jobs_path} and capacities to {result.capacity_path}")
    _out.print(f"next: prism ingest {result.jobs_path} --format jobs-csv")
    return 0


def _cmd_formats(args: argparse.Namespace) -> int:
    from prism.usecases.ingest import list_formats

    frame = pd.DataFrame(list_formats(), columns=["format", "kind", "description"])
    _out.print(_table(frame, title="ingest formats"))
    return 0


def _cmd_datasets_list(args: argparse.Namespace) -> int:
    from prism.usecases.catalogue import list_datasets

    frame = list_datasets()
    if args.json:
        _out.print_json(frame.to_json(orient="records"))
    else:
        _out.print(_table(frame, title="public GPU traces"))
    return 0


def _cmd_datasets_download(args: argparse.Namespace) -> int:
    from prism.usecases.catalogue import download_dataset

    with _progress(not args.quiet) as progress:
        result = download_dataset(
            args.name, cache_dir=args.cache_dir, base_url=args.base_url,
            verify=not args.no_verify,
            progress=(lambda done, total: progress("download", done, total or done))
            if progress else None,
        )
    state = "already in the cache" if result.cached else "downloaded"
    _out.print(f"{state}: {result.path} (sha256 {result.sha256})")
    if result.ingest_command:
        _out.print(f"next: {result.ingest_command}")
    else:
        _out.print("no PRISM format reads this file yet (download only)")
    return 0
def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from prism.remote import announce_server, check_exposure, client_url, served_hosts
    from service.app import create_app  # the API sits on top of prism: imported on use

    update = {"db": args.db, "models_dir": args.models_dir, "default_model": args.model}
    settings = get_settings().model_copy(
        update={k: v for k, v in update.items() if v is not None})
    settings.allowed_hosts = served_hosts(args.host, settings.allowed_hosts)
    warning = check_exposure(args.host, settings.api_token, args.insecure_no_auth)
    if warning:
        _err.print(warning, markup=False)
    _err.print(f"serving {settings.db} on http://{args.host}:{args.port} (API docs at "
               f"/docs, models in {settings.models_dir}); Ctrl-C stops", markup=False)
    # announce the server beside the store: the CLI and notebooks go through its API
    with announce_server(settings.db, client_url(args.host, args.port)):
        uvicorn.run(create_app(settings), host=args.host, port=args.port,
                    log_level="info" if args.verbose else "warning", access_log=args.verbose)
    return 0


# -- parser ----------------------------------------------------------------------------------
def _batch_flags(p: argparse.ArgumentParser) -> None:
    """The batch engine's options (any of them runs the command as a batch: prism.batch)."""
    g = p.add_argument_group(
        "batch", "fan the series out over processes or a Ray cluster; results stream into the "
        "store's batch_forecasts table (any of these options runs the command as a batch)")
    g.add_argument("--backend", choices=("local", "ray"),
                   help="local processes (default in a batch) or Ray tasks")
    g.add_argument("--workers", type=int, help="local worker processes (default 1), or Ray "
                   "tasks in flight (default: the cluster's CPUs)")
    g.add_argument("--ray-address", help="the Ray cluster, e.g. ray://head:10001 or auto "
                   "(default: start a local one)")
    g.add_argument("--budget", type=float, metavar="SECONDS",
                   help="per-series time budget; a series past it (or that fails) is "
                   "forecast by the seasonal naive fallback, with the reason in batch_series")
    g.add_argument("--global-sample", type=int, metavar="N",
                   help="a global model (prism, gru, lstm, gbm) learns its shared parts from "
                   "at most N series, a stratified sample (default 256)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``prism``."""
    parser = argparse.ArgumentParser(
        prog="prism", description="PRISM: GPU-cluster workload forecasting.")
    parser.add_argument("--version", action="version", version=f"prism {__version__}")
    parser.add_argument("--db", default=None,
                        help="DuckDB store (default: $PRISM_DB or ./prism.duckdb)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each stage")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="ingest trace files into the store")
    p.add_argument("paths", nargs="+", help="files to ingest (all in one transaction)")
    p.add_argument("--format", required=True, help="input format (see `prism formats`)")
    p.add_argument("--cluster", help="cluster name (each format has a default)")
    p.add_argument("--scope", help="VC/tenant of a single-scope file (helios-vc, wide-csv)")
    p.add_argument("--tz", help="time zone of naive local times in the file, e.g. Asia/Shanghai")
    p.add_argument("--origin", help="time origin of traces in seconds (alibaba-pods)")
    p.add_argument("--time-col", help="time column (wide-csv; default 'time')")
    p.add_argument("--map", action="append", metavar="FIELD=COLUMN",
                   help="map a canonical field onto a file column (repeatable)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="format-specific option (repeatable)")
    p.add_argument("--freq", help="bucket size of the derived series, e.g. 10min, 1h "
                   "(default 10min, kept per cluster)")
    p.add_argument("--fill", choices=FILL_POLICIES, help="gap policy of sampled series")
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="fail at the first bad row (default) or store bad rows in `rejects`")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_ingest)

    p = sub.add_parser("formats", help="list the ingestion formats")
    p.set_defaults(func=_cmd_formats)

    series = sub.add_parser("series", help="list, show and export derived series")
    ssub = series.add_subparsers(dest="series_command", required=True)
    p = ssub.add_parser("list", help="the series catalogue")
    p.add_argument("--cluster")
    p.add_argument("--scope")
    p.add_argument("--metric")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_series_list)
    p = ssub.add_parser("show", help="values of one series")
    p.add_argument("series_id")
    p.add_argument("--start")
    p.add_argument("--end")
    p.add_argument("--tail", type=int, help="only the last N values")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_series_show)
    p = ssub.add_parser("export", help="write the panel (series_id, ts, value)")
    p.add_argument("--output", required=True, help="FILE.csv or FILE.parquet")
    p.add_argument("--series", action="append", help="a series id (repeatable; default all)")
    p.set_defaults(func=_cmd_series_export)
    p = ssub.add_parser("rederive", help="re-derive a cluster's series at another --freq (or "
                        "--fill) from the jobs and samples the store holds")
    p.add_argument("--cluster", required=True)
    p.add_argument("--freq", help="the new bucket width, e.g. 1h (>= 1min; default: as now)")
    p.add_argument("--fill", choices=FILL_POLICIES,
                   help="gap policy of sampled series (default: as now)")
    p.set_defaults(func=_cmd_series_rederive)

    p = sub.add_parser("decompose", help="split a series into primitives, periods and bursts")
    p.add_argument("series_id")
    p.add_argument("--plot", type=Path, help="draw the decomposition to FILE.png|.svg|.pdf")
    p.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    p.add_argument("--top", type=int, default=5, help="primitives to list (default 5)")
    p.set_defaults(func=_cmd_decompose)

    p = sub.add_parser("forecast", help="fit a model on stored series and forecast them")
    p.add_argument("series_ids", nargs="*", help="series ids (or --all)")
    p.add_argument("--all", action="store_true", help="every series in the store")
    p.add_argument("--horizon", default="1d", help="a duration (6h, 1d) or a number of steps")
    p.add_argument("--quantiles", default="0.5,0.9,0.99")
    p.add_argument("--model", default="prism",
                   help="a forecaster alias (default prism; see `prism models aliases`)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a model hyperparameter, e.g. --param season=1w (repeatable)")
    p.add_argument("--output", help="FILE.csv, .parquet or .json (default: print a table)")
    p.add_argument("--save", action="store_true", help="save the fitted model in the registry "
                   "(in a batch: one registry model per chunk of series)")
    p.add_argument("--from-model", metavar="ID",
                   help="forecast with a saved model (an id, or an alias for its newest)")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="the model registry (default: $PRISM_MODELS_DIR or ./models)")
    p.add_argument("--reconcile", choices=("bottom_up", "mint_shrink"),
                   help="make VC and GPU-type forecasts add up to the cluster's")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar (batch)")
    _batch_flags(p)
    p.set_defaults(func=_cmd_forecast)

    p = sub.add_parser("refit", help="fit a model on stored series in a batch and save it "
                       "(one registry model per chunk), forecasting nothing")
    p.add_argument("series_ids", nargs="*", help="series ids (or --all)")
    p.add_argument("--all", action="store_true", help="every series in the store")
    p.add_argument("--model", default="prism",
                   help="a forecaster alias (default prism; see `prism models aliases`)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a model hyperparameter, e.g. --param season=1w (repeatable)")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="the model registry (default: $PRISM_MODELS_DIR or ./models)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _batch_flags(p)
    p.set_defaults(func=_cmd_refit, save=True, horizon="1d", quantiles="0.5,0.9,0.99",
                   output=None)

    p = sub.add_parser("backtest", help="rolling-origin backtest of models on stored series")
    p.add_argument("--models", default="prism,seasonal_naive",
                   help="comma-separated aliases (default prism,seasonal_naive)")
    p.add_argument("--series", action="append", help="a series id (repeatable)")
    p.add_argument("--all", action="store_true", help="every series (too short ones skipped)")
    p.add_argument("--horizon", default="1d", help="a duration or a number of steps")
    p.add_argument("--windows", type=int, default=7, help="cutoffs (default 7)")
    p.add_argument("--step", default=None, help="between cutoffs (default: the horizon)")
    p.add_argument("--refit", default="always",
                   help="'always' (refit per cutoff) or K: refit every K cutoffs, update between")
    p.add_argument("--quantiles", default="0.05,0.5,0.9,0.95,0.99")
    p.add_argument("--output", help="FILE.csv, .parquet or .json: the backtest forecasts")
    p.add_argument("--summary", action="store_true", help="print the metrics per model (kept "
                   "in the store for `prism report`)")
    p.add_argument("--planning", action="store_true",
                   help="score the backtest as a planning backtest: one provisioned level per "
                   "series and day (and hour) from each forecast's quantiles, against the static "
                   "peak, yesterday's peak and the oracle (kept for `prism report`)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _batch_flags(p)
    p.set_defaults(func=_cmd_backtest)

    models = sub.add_parser("models", help="the registry of saved models")
    msub = models.add_subparsers(dest="models_command", required=True)
    p = msub.add_parser("list", help="saved models, newest first")
    p.add_argument("--models-dir", type=Path, default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_models_list)
    p = msub.add_parser("prune", help="remove saved models but the newest of each series and "
                        "alias (a server holding the registry keeps the models it loaded)")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="the model registry (default: $PRISM_MODELS_DIR or ./models)")
    p.add_argument("--keep", type=int, default=1,
                   help="models kept per series and alias, newest first (default 1)")
    p.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_models_prune)
    p = msub.add_parser("aliases", help="the forecasters PRISM has")
    p.set_defaults(func=_cmd_models_aliases)

    p = sub.add_parser("generate", help="write a realistic synthetic job trace (or app GPU "
                       "allocations with --kind deployments)")
    p.add_argument("--output", required=True, type=Path, help="folder for jobs.csv, capacity.csv "
                   "(deployments: deployments.csv)")
    p.add_argument("--kind", choices=("jobs", "deployments"), default="jobs",
                   help="jobs: a job trace (default); deployments: GPUs allocated to the apps "
                   "of an inference fleet, a long CSV for --format long-csv")
    p.add_argument("--days", type=int, default=28)
    p.add_argument("--clusters", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--apps", type=int, default=24, help="applications (deployments only)")
    p.add_argument("--jobs-per-day", type=float, default=None,
                   help="arrivals per cluster per day (default: realistic rates)")
    p.add_argument("--file-format", choices=("csv", "parquet"), default="csv")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_generate)

    datasets = sub.add_parser("datasets", help="the catalogue of public GPU traces")
    dsub = datasets.add_subparsers(dest="datasets_command", required=True)
    p = dsub.add_parser("list", help="list the public traces")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_datasets_list)
    p = dsub.add_parser("download", help="fetch a trace into the local cache")
    p.add_argument("name")
    p.add_argument("--cache-dir", type=Path, help="default: $PRISM_CACHE_DIR or ~/.cache/prism")
    p.add_argument("--base-url", help="a mirror to fetch from (default: $PRISM_CATALOGUE_URL "
                   "or the origin)")
    p.add_argument("--no-verify", action="store_true",
                   help="accept a file whose checksum the catalogue does not know")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_datasets_download)

    planning.add_parsers(sub)

    p = sub.add_parser("serve", help="serve the REST API (uvicorn, one process)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                   "127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--models-dir", type=Path, default=None,
                   help="the model registry (default: $PRISM_MODELS_DIR or ./models)")
    p.add_argument("--model", default=None, help="model fitted for requests that name none "
                   "(default: $PRISM_DEFAULT_MODEL or prism)")
    p.add_argument("--insecure-no-auth", action="store_true", help="serve on a non-loopback "
                   "host without PRISM_API_TOKEN (anyone on the network can ingest and read)")
    p.set_defaults(func=_cmd_serve)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command on the store, or through the API of the server that holds it."""
    name = getattr(args.func, "__name__", "")
    if name not in _STORE_COMMANDS:
        return int(args.func(args))
    from prism.cli import remote

    if name == "_cmd_forecast" and _batch_mode(args):
        info = remote.server_for(args)
        return remote.refuse(args, info, "forecast (batch)") if info else int(args.func(args))
    info = remote.server_for(args)
    if info is None:
        return int(args.func(args))
    if name in remote.LOCAL_ONLY:
        return remote.refuse(args, info, remote.LOCAL_ONLY[name])
    return remote.REMOTE[name](args, info)


#: Commands that open the store (the others work on files or the catalogue only).
_STORE_COMMANDS = {"_cmd_series_list", "_cmd_series_show", "_cmd_series_export", "_cmd_ingest",
                   "_cmd_forecast", "_cmd_refit", "_cmd_capacity", "_cmd_report",
                   "_cmd_backtest", "_cmd_decompose"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``prism`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    try:
        if args.db is None:
            args.db = get_settings().db
        return int(_dispatch(args))
    except PrismError as exc:
        _err.print(f"error: {exc}", markup=False)
        return 1
    except KeyboardInterrupt:
        _err.print("interrupted; nothing was written by the unfinished step", markup=False)
        return 130


if __name__ == "__main__":
    sys.exit(main())
