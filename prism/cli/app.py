"""The ``prism`` command line: parses arguments, calls a use case of :mod:`prism.usecases`,
prints.

Exit codes: 0 success, 1 bad input or data (the message says what and how to fix it), 2 bad
usage (argparse).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Literal

from prism import usecases
from prism.cli import planning, stdin
from prism.cli.common import (
    STDOUT,
    check_output,
    messages,
    print_forecast,
    progress_bar,
    progress_wanted,
)
from prism.cli.common import err as _err
from prism.cli.common import out as _out
from prism.cli.common import pairs as _pairs
from prism.cli.common import print_json as _print_json
from prism.cli.common import print_records as _print_records
from prism.cli.common import quantile_list as _quantiles
from prism.cli.common import table as _table
from prism.cli.parser import build_parser
from prism.errors import ConfigError, PrismError

if TYPE_CHECKING:
    from prism.ingest.base import IngestOptions
    from prism.ingest.pipeline import IngestReport
    from prism.store import Store
    from prism.usecases.batch import BatchJob

_progress = progress_bar

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
    if args.prometheus_url:
        return _ingest_prometheus(args, options)
    pulls = [flag for flag in ("query", "start", "end", "step") if getattr(args, flag)]
    if pulls:
        raise ConfigError(f"--{pulls[0]} belongs to a pull: add --prometheus-url URL, or drop "
                          f"--{pulls[0]} to ingest files")
    if not args.format:
        raise ConfigError("--format is required with files: pass --format with one of the "
                          "formats `prism formats` lists, e.g. --format jobs-csv")
    with (stdin.spooled(args.paths) as spool, _progress(not args.quiet) as progress,
          usecases.open_store(args.db) as store):
        report = ingest_files(store, spool.paths, args.format, options, freq=args.freq,
                              fill=args.fill, progress=progress)
    _print_ingest(args, report, spool.name)
    return 0


def _ingest_prometheus(args: argparse.Namespace, options: IngestOptions) -> int:
    """``prism ingest --prometheus-url URL --query Q --start T --end T --step 1m``."""
    from prism.config import get_settings
    from prism.usecases.ingest import ingest_prometheus

    if args.format not in (None, "prometheus"):
        raise ConfigError(f"--prometheus-url pulls JSON of the prometheus format, not "
                          f"--format {args.format}: drop --format")
    missing = [flag for flag in ("query", "start") if not getattr(args, flag)]
    if missing:
        raise ConfigError(f"--prometheus-url needs --{missing[0]}, e.g. --query "
                          "'sum by (namespace) (DCGM_FI_DEV_GPU_UTIL)' --start now-2d")
    with _progress(not args.quiet) as progress, usecases.open_store(args.db) as store:
        report = ingest_prometheus(
            store, args.prometheus_url, args.query, start=args.start, end=args.end or "now",
            step=args.step or "1m", options=options,
            token=get_settings().prometheus_token, freq=args.freq, fill=args.fill,
            progress=progress)
    _print_ingest(args, report, str)
    return 0


def _print_ingest(args: argparse.Namespace, report: IngestReport,
                  name: Callable[[str], str]) -> None:
    """What ``prism ingest`` did, per file (or pull), then in all."""
    for f in report.files:
        note = "unchanged (already ingested)" if f.status == "unchanged" else (
            f"{f.rows:,} rows" + (f" ({f.note})" if f.note else "")
            + (f", {f.rejected:,} rejected" if f.rejected else ""))
        _out.print(f"{name(f.path)}: {note}", markup=False)
        for r in f.rejects[:5]:
            _out.print(f"  rejected line {r.line} column {r.column}: {r.reason} ({r.raw!r})")
        if f.rejected > 5:
            _out.print(f"  ... {f.rejected - 5:,} more in the `rejects` table")
    stored = "; ".join(part for part in (
        f"{report.replaced:,} of them replaced stored values" if report.replaced else "",
        f"{report.same:,} were stored already" if report.same else "") if part)
    _out.print(
        f"{report.rows:,} rows added{f' ({stored})' if stored else ''}, "
        f"{report.rejected:,} rejected; "
        f"{report.series} series in {', '.join(report.clusters) or 'no changed cluster'} "
        f"(store {args.db})"
    )
    for note in report.notes:
        _err.print(f"note: {note}", markup=False)


def _cmd_series_list(args: argparse.Namespace) -> int:
    from prism.usecases.series import list_series

    with usecases.open_store(args.db, must_exist=True) as store:
        frame = list_series(store, cluster=args.cluster, scope=args.scope, metric=args.metric)
    if args.json:
        _print_records(frame)
        return 0
    if frame.empty:
        filters = [f"--{k} {v}" for k, v in (("cluster", args.cluster), ("scope", args.scope),
                                              ("metric", args.metric)) if v]
        _out.print(f"no series match {' '.join(filters)} (`prism series list` without them "
                   "lists every series)" if filters else
                   "no series (ingest something first: prism ingest PATH --format FORMAT)",
                   markup=False)
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
        _print_records(frame)
    else:
        _out.print(_table(frame, title=args.series_id))
    return 0


def _cmd_series_export(args: argparse.Namespace) -> int:
    from prism.cli.common import write_stdout
    from prism.usecases.files import frame_bytes, output_format
    from prism.usecases.series import export_panel, load_panel, panel_bytes

    if args.output != STDOUT:
        output_format(args.output, args.format, (".csv", ".parquet"))  # --format agrees
        with usecases.open_store(args.db, must_exist=True) as store:
            result = export_panel(store, args.output, series_ids=args.series)
        _out.print(f"wrote {result.rows:,} rows of {result.series} series to {result.path}")
        return 0
    fmt = output_format(STDOUT, args.format)
    with usecases.open_store(args.db, must_exist=True) as store:
        if fmt == "json":
            panel = load_panel(store, args.series)
            data, rows = frame_bytes(panel, fmt), len(panel)
            series = panel["series_id"].nunique()
        else:
            data, rows, series = panel_bytes(store, fmt, series_ids=args.series)
    write_stdout(data)
    _err.print(f"wrote {rows:,} rows of {series} series to stdout", markup=False)
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
    print_decomposition(_utc_summary(result.summary(top=args.top)), args)
    if args.plot and not args.json:
        _out.print(f"plot written to {args.plot}")
    return 0


def _utc_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """A decomposition's summary with its times (naive UTC text) as UTC with ``Z``, as the
    API's ``GET /v1/decomposition`` writes them (``service.schemas.UtcTime``)."""
    from datetime import datetime

    from prism.frames import utc_text

    def utc(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
        return [{k: utc_text(datetime.fromisoformat(v)) if k in keys else v
                 for k, v in row.items()} for row in rows]

    return {**summary, "bursts": utc(summary["bursts"], ("start", "end", "peak")),
            "level_shifts": utc(summary["level_shifts"], ("at",))}


def print_decomposition(summary: dict[str, Any], args: argparse.Namespace) -> None:
    """A decomposition's summary (:meth:`SeriesDecomposition.summary`, or ``GET
    /v1/decomposition``'s answer) as tables, or as JSON with ``--json``."""
    import pandas as pd

    if args.json:
        _print_json(summary)
        return
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
    _out.print("variance share: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
               + " (each part's variance over the series'; parts that move together or"
               " against each other need not add up to 100 %)")
    if summary.get("note"):
        _err.print(f"note: {summary['note']}", markup=False)


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"


def _batch_mode(args: argparse.Namespace) -> bool:
    return bool(args.backend or args.ray_address or args.workers is not None
                or args.budget is not None or args.global_sample is not None)


def _run_batch(args: argparse.Namespace, store: Store, task: str, models: list[str],
               series: list[str] | None,
               model_params: dict[str, dict[str, str]] | None = None) -> BatchJob:
    from prism.usecases.batch import run_batch_job

    if args.output == STDOUT or getattr(args, "format", None):
        raise ConfigError("a batch writes --output FILE.csv|.parquet|.json (its suffix says the "
                          "format): --output - and --format are for a run without "
                          "--backend/--workers/--budget")
    if model_params is None:  # forecast and refit: one model, its --param NAME=VALUE
        given = _pairs(getattr(args, "param", None), "--param")
        model_params = {models[0]: given} if given else {}
    with _progress(not args.quiet, eta=True) as progress:
        result = run_batch_job(
            store, series, models=models, task=task, model_params=model_params,
            horizon=args.horizon,
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
    from prism.usecases.forecast import forecast_series, select_series

    if not args.series_ids and not args.all and not args.from_model and not args.cluster:
        raise ConfigError("name one or more series ids, or pass --all or --cluster CLUSTER")
    if args.all and (args.cluster or args.series_ids):
        raise ConfigError("--all forecasts every series: drop it to forecast the series named "
                          "or those of --cluster")
    check_output(args.output, args.format)
    if _batch_mode(args):
        if args.from_model or args.reconcile:
            raise ConfigError("--from-model and --reconcile work on one in-memory model; drop "
                              "them to run a batch (--backend/--workers/--budget)")
        with usecases.open_store(args.db, must_exist=True) as store:
            _run_batch(args, store, "forecast", [args.model],
                       None if args.all else select_series(store, args.series_ids,
                                                           args.cluster))
        return 0
    with (_progress(progress_wanted(args.quiet)) as progress,
          usecases.open_store(args.db, must_exist=True) as store):
        if args.reconcile and not args.all:  # whole hierarchies only, checked before the fit
            _check_hierarchies(store, select_series(store, args.series_ids, args.cluster))
        result = forecast_series(
            store, None if args.all else (args.series_ids or None), horizon=args.horizon,
            quantiles=_quantiles(args.quantiles), model=args.model,
            params=_pairs(args.param, "--param"), save=args.save, from_model=args.from_model,
            models_dir=args.models_dir, reconcile=args.reconcile, clusters=args.cluster,
            progress=progress,
        )
        if args.reconcile and not args.all and not (args.series_ids or args.cluster):
            # --from-model alone: its series are known once the saved models are
            _check_hierarchies(store, result.frame["series_id"].astype(str).unique().tolist())
    frame = result.frame
    for sid, reason in result.fallback.items():
        _err.print(f"note: {sid} is forecast by the seasonal naive fallback: {reason}",
                   markup=False)
    for note in result.notes:
        _err.print(f"note: {note}", markup=False)
    print_forecast(frame, args.output, fmt=args.format)
    say = messages(args.output)
    if result.model_id:
        say.print(f"model {result.model_id}" + (" saved" if args.save else ""), markup=False)
    elif result.model_ids:
        say.print(f"{len(result.model_ids)} models: {', '.join(result.model_ids)}",
                  markup=False)
    return 0


def _check_hierarchies(store: Store, series_ids: Sequence[str] | None) -> None:
    """``--reconcile`` of whole hierarchies only: refuse a cluster's ``all`` series forecast
    with some of its VCs (or GPU types) but not all that the store holds."""
    from prism.reconcile import check_complete
    from prism.usecases.series import list_series

    if series_ids:
        check_complete(series_ids, set(list_series(store)["series_id"].astype(str)))


def _cmd_refit(args: argparse.Namespace) -> int:
    if not args.series_ids and not args.all:
        raise ConfigError("name one or more series ids, or pass --all")
    with usecases.open_store(args.db, must_exist=True) as store:
        _run_batch(args, store, "refit", [args.model], None if args.all else args.series_ids)
    return 0


def _cmd_backtest(args: argparse.Namespace) -> int:
    from prism.cli.common import write_output
    from prism.usecases import evaluation as evaluation_uc
    from prism.usecases.forecast import select_series

    if not args.series and not args.all and not args.cluster and not args.metric:
        raise ConfigError("name series with --series (repeatable), --cluster or --metric, or "
                          "pass --all")
    if not args.output and not args.summary and not args.planning:
        args.summary = True  # what a backtest is run for; --output/--planning ask for others
    check_output(args.output, args.format)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    params = _pairs(args.param, "--param")
    specs = evaluation_uc.model_specs(models, params)  # checked before the store is opened
    quantiles = _quantiles(args.quantiles)
    explicit = bool(args.series or args.metric)  # else the planning plans GPUs in use
    with usecases.open_store(args.db, must_exist=True) as store:
        series = None if args.all and not (args.cluster or args.metric) else select_series(
            store, args.series, args.cluster, args.metric)
        if args.planning and not args.summary and not args.output and not explicit:
            # the planning alone: backtest only the series it plans (each scope's GPUs in use)
            series = list(evaluation_uc.planning_series(store, series, explicit=False).planned)
        if _batch_mode(args):
            if args.refit != "always":
                raise ConfigError("a batch backtest refits at every cutoff; drop --refit")
            if any(s.label != s.alias for s in specs):
                raise ConfigError("a batch labels each run by its model's alias: backtest "
                                  "LABEL=ALIAS variants without --backend/--workers/--budget")
            job = _run_batch(args, store, "backtest", models, series,
                             model_params={s.alias: s.params for s in specs if s.params})
            if not args.summary and not args.planning:
                return 0
            done = evaluation_uc.batch_backtest(store, job.run_ids)
        else:
            refit: int | Literal["always"] = (
                "always" if args.refit == "always" else _positive_int(args.refit))
            with _progress(not args.quiet) as progress:
                done = evaluation_uc.backtest_series(
                    store, series, models=models, horizon=args.horizon, windows=args.windows,
                    step=args.step, quantiles=quantiles, refit=refit, params=params,
                    progress=(lambda n, total: progress("backtest", n, total)) if progress
                    else None,
                    skip_short=not args.series,  # picked by --all/--cluster/--metric
                )
            skipped = sorted(set(done.panel["series_id"].astype(str))
                             - set(done.frame["series_id"].astype(str)))
            if skipped:
                shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more"
                                                   if len(skipped) > 5 else "")
                _err.print(f"note: skipped {len(skipped)} series too short for {args.windows} "
                           f"windows of {args.horizon}: {shown} (fewer --windows or a shorter "
                           "--horizon takes them in)", markup=False)
            if args.output:
                where = write_output(done.frame, args.output, args.format)
                messages(args.output).print(
                    f"wrote {len(done.frame):,} rows ({done.frame['series_id'].nunique()} "
                    f"series, {len(models)} models, {args.windows} windows) to {where}",
                    markup=False)
        # printed and kept in the store, for `prism report`
        scores = evaluation_uc.score_backtest(
            store, done, horizon=args.horizon, windows=args.windows, quantiles=quantiles,
            accuracy=args.summary, planning=args.planning, explicit=explicit)
    if scores.accuracy is not None:
        planning.print_summary(scores.accuracy, args, models)
    if scores.planning is not None:
        planning.print_planning(
            scores.planning, f"planning backtest ({scores.planning_run_id}): one level per "
            f"series and block, set from each {args.horizon} forecast", messages(args.output))
        messages(args.output).print(scores.planning_note, markup=False)
    return 0


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--refit {text!r}: use 'always' or a number of cutoffs >= 1")
    return int(text)


def _cmd_models_aliases(args: argparse.Namespace) -> int:
    import pandas as pd

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
        _print_records(frame)
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
        _print_records(removed.drop(columns=["path"], errors="ignore"))
    elif removed.empty:
        _out.print(f"nothing to prune: each series keeps its {args.keep} newest models per alias")
    else:
        _out.print(_table(removed.drop(columns=["path"], errors="ignore"),
                          title=f"{verb} {len(removed)} models"))
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from prism.usecases import catalogue as catalogue_uc

    # an option of the other kind would be ignored: say so rather than write what was not
    # asked for (deployments are a long CSV; --file-format parquet wrote CSV)
    other = (("--clusters", args.clusters), ("--jobs-per-day", args.jobs_per_day),
             ("--file-format", args.file_format)) if args.kind == "deployments" else (
             ("--apps", args.apps),)
    unused = [flag for flag, value in other if value is not None]
    if unused:
        raise ConfigError(f"{unused[0]} does not apply to --kind {args.kind}: drop it "
                          f"(deployments take --apps, --days and --seed and are written as CSV; "
                          "jobs take --clusters, --jobs-per-day and --file-format)")
    if args.kind == "deployments":
        written = catalogue_uc.generate_deployments(
            args.output, apps=24 if args.apps is None else args.apps, days=args.days,
            seed=args.seed)
        _out.print(f"wrote {written.n_rows:,} samples of {written.n_series} app GPU "
                   f"allocation series to {written.path}")
        _out.print(f"next: prism ingest {written.path} --format long-csv")
        return 0
    with _progress(not args.quiet) as progress:
        result = catalogue_uc.generate_trace(
            args.output, days=args.days, clusters=2 if args.clusters is None else args.clusters,
            seed=args.seed, jobs_per_day=args.jobs_per_day, fmt=args.file_format or "csv",
            progress=(lambda done, total: progress("generate", done, total)) if progress
            else None,
        )
    _out.print(f"wrote {result.n_jobs:,} jobs of {len(result.clusters)} cluster(s) to "
               f"{result.jobs_path} and capacities to {result.capacity_path}")
    _out.print(f"next: prism ingest {result.jobs_path} --format jobs-csv")
    return 0


def _cmd_formats(args: argparse.Namespace) -> int:
    import pandas as pd

    from prism.usecases.ingest import list_formats

    frame = pd.DataFrame(list_formats(), columns=["format", "kind", "description"])
    _out.print(_table(frame, title="ingest formats"))
    return 0


def _cmd_datasets_list(args: argparse.Namespace) -> int:
    from prism.usecases.catalogue import list_datasets

    frame = list_datasets()
    if args.json:
        _print_records(frame)
    else:  # sizes in words (the column is float where some sizes are unknown: 3.41545e+06)
        size = frame["size"].map(lambda b: "?" if b != b else f"{b / 1e6:,.1f} MB")
        _out.print(_table(frame.assign(size=size), title="public GPU traces"))
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

    from prism.config import get_settings
    from prism.remote import (
        announce_server,
        check_exposure,
        client_url,
        served_hosts,
        serving_process,
    )
    from service.app import create_app  # the API sits on top of prism: imported on use

    update = {"db": args.db, "models_dir": args.models_dir, "default_model": args.model}
    settings = get_settings().model_copy(
        update={k: v for k, v in update.items() if v is not None})
    running = serving_process(settings.db)
    if running is not None:  # a second server would fail on the store's lock, and its exit
        # removed the first one's server file, cutting the CLI off from it
        raise ConfigError(f"{settings.db} is already served by process {running.pid} at "
                          f"{running.url}: stop that server first, or serve another --db")
    settings.allowed_hosts = served_hosts(args.host, settings.allowed_hosts)
    warning = check_exposure(args.host, settings.api_token, args.insecure_no_auth)
    if warning:
        _err.print(warning, markup=False)
    _err.print(f"serving {settings.db} on http://{args.host}:{args.port} (API docs at "
               f"/docs, models in {settings.models_dir}); Ctrl-C stops", markup=False)
    # SIGTERM (systemd, Kubernetes) stops the server as Ctrl-C does: uvicorn shuts down and
    # raises the signal again on its way out, whose default action ended the process before
    # the server file below was removed
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        # announce the server beside the store: the CLI and notebooks go through its API
        with announce_server(settings.db, client_url(args.host, args.port)):
            uvicorn.run(create_app(settings), host=args.host, port=args.port,
                        log_level="info" if args.verbose else "warning",
                        access_log=args.verbose)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command on the store, or through the API of the server that holds it."""
    name = getattr(args.func, "__name__", "")
    if name not in _STORE_COMMANDS:
        return int(args.func(args))
    from prism.cli import remote

    if name in ("_cmd_forecast", "_cmd_refit") and _batch_mode(args):
        # a batch needs the store itself (its options would be lost on the server's refit)
        info = remote.server_for(args)
        what = f"{name.removeprefix('_cmd_')} (batch)"
        return remote.refuse(args, info, what) if info else int(args.func(args))
    info = remote.server_for(args)
    if info is None:
        return int(args.func(args))
    if name in remote.LOCAL_ONLY:
        return remote.refuse(args, info, remote.LOCAL_ONLY[name])
    return remote.REMOTE[name](args, info)


#: Commands that open the store (the others work on files or the catalogue only).
_STORE_COMMANDS = {"_cmd_series_list", "_cmd_series_show", "_cmd_series_export", "_cmd_ingest",
                   "_cmd_forecast", "_cmd_refit", "_cmd_capacity", "_cmd_report",
                   "_cmd_backtest", "_cmd_decompose", "_cmd_track_record"}


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
            from prism.config import get_settings

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
