"""The argument parser of ``prism``: every command, option, help text and default.

Imports no heavy module (``prism --help`` stays fast): the command functions live in
:mod:`prism.cli.app` and :mod:`prism.cli.planning`, imported when the parser is built.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from pathlib import Path

from prism import __version__
from prism.cli.common import HelpFormatter

#: prism.schema.FILL_POLICIES, copied: prism.schema imports pandas, and `prism --help` does
#: not (tests/test_cli_ux.py checks that the two agree).
FILL_POLICIES = ("auto", "hold", "zero", "linear")
#: prism.usecases.files.FRAME_FORMATS, copied alike.
FRAME_FORMATS = ("csv", "parquet", "json")
_DB_HELP = "DuckDB store (default: $PRISM_DB or ./prism.duckdb)"
_MODELS_DIR_HELP = "the model registry (default: $PRISM_MODELS_DIR or ./models)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose help says each option's default (its subparsers too).

    Options must be spelled out: with argparse's abbreviations ``prism forecast --models
    naive`` was read as ``--models-dir naive`` (``--models`` is ``backtest``'s option) and
    forecast with PRISM from a registry at ``naive``. An unknown option names the command's
    closest ones instead.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a command's own parser: say what it has
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggest(extras)}")
        return parsed, extras

    def _suggest(self, extras: Sequence[str]) -> str:
        """`` (did you mean --model?)`` for the options in ``extras`` close to this parser's."""
        known = [o for action in self._actions for o in action.option_strings
                 if o.startswith("--") and o not in ("--help", "--version")]
        hints = []
        for token in extras:
            name = token.split("=", 1)[0]
            if name.startswith("--") and name not in known:
                close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
                if close:
                    hints.append(f"{name}: did you mean {' or '.join(close)}?")
        return f" ({'; '.join(hints)})" if hints else ""


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (``--tail 0`` is refused, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: use a whole number of at least 1")
    return value


def db_flag(p: argparse.ArgumentParser) -> None:
    """``--db`` after the subcommand (``prism series list --db s.duckdb``); it wins over a
    ``--db`` before it. Unset, the one before it (or $PRISM_DB, or the default) holds."""
    p.add_argument("--db", default=argparse.SUPPRESS,
                   help=_DB_HELP + "; wins over a --db before the command")


def quiet_flag(p: argparse.ArgumentParser, what: str = "no progress bar") -> None:
    """``-q`` after the subcommand too (``prism ingest F -q`` as ``prism -q ingest F``);
    unset, the one before the command holds."""
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=what)


def output_flags(p: argparse.ArgumentParser, what: str, *, required: bool = False,
                 table: bool = True, files: tuple[str, ...] = FRAME_FORMATS) -> None:
    """``--output FILE`` or ``-`` (stdout), and ``--format``; ``table``: without
    ``--output``, the command prints a table instead; ``files``: the file types written
    (stdout takes every format)."""
    suffixes = "|".join(f".{f}" for f in files)
    p.add_argument("--output", required=required, metavar="FILE",
                   help=f"{what} to FILE{suffixes}, or - for stdout (messages go to stderr)"
                   + (" (default: print a table)" if table and not required else ""))
    p.add_argument("--format", choices=FRAME_FORMATS, default=None,
                   help="the format of --output (default: the file's suffix; csv for -)")


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


def _model_choice(p: argparse.ArgumentParser) -> None:
    """``--model`` and ``--param`` of the commands that fit a forecaster."""
    p.add_argument("--model", default="prism",
                   help="a forecaster alias (see `prism models aliases`)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a model hyperparameter, e.g. --param season=1w (repeatable)")


def _models_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models-dir", type=Path, default=None, help=_MODELS_DIR_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``prism``."""
    from prism.cli import app, planning, watch

    parser = Parser(prog="prism", description="PRISM: GPU-cluster workload forecasting.")
    parser.add_argument("--version", action="version", version=f"prism {__version__}")
    parser.add_argument("--db", default=None, help=_DB_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help="log each stage")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bar (also after the command)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="ingest trace files, or pull from Prometheus, into the "
                       "store")
    source = p.add_mutually_exclusive_group(required=True)
    # default=[] (one object): argparse then counts no PATH as absent, not as a conflict
    source.add_argument("paths", nargs="*", default=[], metavar="PATH",
                        help="files to ingest (all in one transaction); - reads stdin, e.g. "
                        "sacct ... | prism ingest - --format slurm-sacct")
    source.add_argument("--prometheus-url", metavar="URL",
                        help="pull --query over the Prometheus HTTP API (/api/v1/query_range) "
                        "of this server, e.g. http://prometheus:9090, instead of files")
    p.add_argument("--format", help="input format (see `prism formats`; required with files, "
                   "prometheus with --prometheus-url)")
    pull = p.add_argument_group(
        "pull from Prometheus", "with --prometheus-url: the range is fetched in chunks of at "
        "most 11,000 points per series, then ingested in one transaction (all or nothing); "
        "samples already stored are kept, so pulling a range again adds nothing. "
        "--option token=TOKEN (or $PRISM_PROMETHEUS_TOKEN) sends a bearer token, "
        "--option timeout=2m the query timeout, --option max_points=N smaller chunks")
    pull.add_argument("--query", metavar="PROMQL", help="the PromQL expression, e.g. "
                      "'sum by (namespace) (DCGM_FI_DEV_GPU_UTIL)'")
    pull.add_argument("--start", metavar="TIME", help="first time: 2026-01-05T00:00:00Z (UTC "
                      "unless it has an offset), Unix seconds, now or now-2d")
    pull.add_argument("--end", metavar="TIME", help="last time, written alike (default: now)")
    pull.add_argument("--step", metavar="DURATION",
                      help="resolution, e.g. 10s, 1m, 1h (default: 1m)")
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
    p.add_argument("--fill", choices=FILL_POLICIES,
                   help="gap policy of sampled series (default: auto, kept per cluster)")
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="fail at the first bad row, or store bad rows in `rejects`")
    quiet_flag(p)
    db_flag(p)
    p.set_defaults(func=app._cmd_ingest)

    p = sub.add_parser("formats", help="list the ingestion formats")
    p.set_defaults(func=app._cmd_formats)

    series = sub.add_parser("series", help="list, show and export derived series")
    ssub = series.add_subparsers(dest="series_command", required=True)
    p = ssub.add_parser("list", help="the series catalogue")
    p.add_argument("--cluster", help="only the series of this cluster")
    p.add_argument("--scope", help="only the series of this scope (VC, gpu:<type>, all)")
    p.add_argument("--metric", help="only this metric, e.g. gpus_in_use")
    p.add_argument("--json", action="store_true", help="JSON records (times in UTC, with Z)")
    db_flag(p)
    p.set_defaults(func=app._cmd_series_list)
    p = ssub.add_parser("show", help="values of one series")
    p.add_argument("series_id", help="the series, e.g. lab/all/gpus_in_use")
    p.add_argument("--start", help="first time shown, e.g. 2026-01-05 or 2026-01-05T06:00 "
                   "(UTC; default: the first)")
    p.add_argument("--end", help="last time shown (UTC; default: the last)")
    p.add_argument("--tail", type=positive_int, help="only the last N values (N >= 1)")
    p.add_argument("--json", action="store_true", help="JSON records (times in UTC, with Z)")
    db_flag(p)
    p.set_defaults(func=app._cmd_series_show)
    p = ssub.add_parser("export", help="write the panel (series_id, ts, value)")
    output_flags(p, "write the panel", required=True, files=("csv", "parquet"))
    p.add_argument("--series", action="append", help="a series id (repeatable; default all)")
    db_flag(p)
    p.set_defaults(func=app._cmd_series_export)
    p = ssub.add_parser("rederive", help="re-derive a cluster's series at another --freq (or "
                        "--fill) from the jobs and samples the store holds")
    p.add_argument("--cluster", required=True, help="the cluster to re-derive")
    p.add_argument("--freq", help="the new bucket width, e.g. 1h (>= 1min; default: as now)")
    p.add_argument("--fill", choices=FILL_POLICIES,
                   help="gap policy of sampled series (default: as now)")
    db_flag(p)
    p.set_defaults(func=app._cmd_series_rederive)

    p = sub.add_parser("decompose", help="split a series into primitives, periods and bursts")
    p.add_argument("series_id", help="the series, e.g. lab/all/gpus_in_use")
    p.add_argument("--plot", type=Path, help="draw the decomposition to FILE.png|.svg|.pdf")
    p.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    p.add_argument("--top", type=positive_int, default=5, help="primitives to list")
    db_flag(p)
    p.set_defaults(func=app._cmd_decompose)

    p = sub.add_parser("forecast", help="fit a model on stored series and forecast them")
    p.add_argument("series_ids", nargs="*", help="series ids (or --all, or --cluster)")
    p.add_argument("--all", action="store_true", help="every series in the store")
    p.add_argument("--cluster", action="append", metavar="CLUSTER",
                   help="every series of this cluster (repeatable; with series ids: those too)")
    p.add_argument("--horizon", default="1d", help="a duration (6h, 1d) or a number of steps")
    p.add_argument("--quantiles", default="0.5,0.9,0.99", help="quantile levels forecast")
    _model_choice(p)
    output_flags(p, "write the forecast")
    p.add_argument("--save", action="store_true", help="save the fitted model in the registry "
                   "(in a batch: one registry model per chunk of series)")
    p.add_argument("--from-model", metavar="ID",
                   help="forecast with a saved model (an id, or an alias for its newest)")
    _models_dir(p)
    p.add_argument("--reconcile", choices=("bottom_up", "mint_shrink"),
                   help="make VC and GPU-type forecasts add up to the cluster's")
    quiet_flag(p)
    db_flag(p)
    _batch_flags(p)
    p.set_defaults(func=app._cmd_forecast)

    p = sub.add_parser("refit", help="fit a model on stored series in a batch and save it "
                       "(one registry model per chunk), forecasting nothing")
    p.add_argument("series_ids", nargs="*", help="series ids (or --all)")
    p.add_argument("--all", action="store_true", help="every series in the store")
    _model_choice(p)
    _models_dir(p)
    quiet_flag(p)
    db_flag(p)
    _batch_flags(p)
    p.set_defaults(func=app._cmd_refit, save=True, horizon="1d", quantiles="0.5,0.9,0.99",
                   output=None, format=None)

    p = sub.add_parser("backtest", help="rolling-origin backtest of models on stored series")
    p.add_argument("--models", default="prism,seasonal_naive,naive",
                   help="comma-separated aliases; LABEL=ALIAS runs a variant under its own "
                   "label, e.g. prism,nofloor=prism --param nofloor.use_short_floor=false; "
                   "with naive, the summary shows each model against the last value")
    p.add_argument("--param", action="append", metavar="[LABEL.]NAME=VALUE",
                   help="a model's hyperparameter, e.g. --param prism.use_rnn=true "
                   "(repeatable; NAME=VALUE where one model is named)")
    p.add_argument("--series", action="append", help="a series id (repeatable)")
    p.add_argument("--all", action="store_true", help="every series (too short ones skipped)")
    p.add_argument("--cluster", action="append", metavar="CLUSTER",
                   help="every series of this cluster (repeatable; with --series: those too)")
    p.add_argument("--metric", help="only this metric's series of the clusters (or of every "
                   "cluster), e.g. gpus_in_use")
    p.add_argument("--horizon", default="1d", help="a duration or a number of steps")
    p.add_argument("--windows", type=int, default=7, help="cutoffs")
    p.add_argument("--step", default=None, help="between cutoffs (default: the horizon)")
    p.add_argument("--refit", default="always",
                   help="'always' (refit per cutoff) or K: refit every K cutoffs, update between")
    p.add_argument("--quantiles", default="0.05,0.5,0.9,0.95,0.99",
                   help="quantile levels forecast")
    output_flags(p, "write the backtest forecasts")
    p.add_argument("--summary", action="store_true", help="print the metrics per model (kept "
                   "in the store for `prism report`; the default when neither --output nor "
                   "--planning is given)")
    p.add_argument("--planning", action="store_true",
                   help="score the backtest as a planning backtest: one provisioned level per "
                   "series and day (and hour) from each forecast's quantiles, against the static "
                   "peak, yesterday's peak and the oracle (kept for `prism report`)")
    quiet_flag(p)
    db_flag(p)
    _batch_flags(p)
    p.set_defaults(func=app._cmd_backtest)

    models = sub.add_parser("models", help="the registry of saved models")
    msub = models.add_subparsers(dest="models_command", required=True)
    p = msub.add_parser("list", help="saved models, newest first")
    _models_dir(p)
    p.add_argument("--json", action="store_true", help="JSON records (times in UTC, with Z)")
    p.set_defaults(func=app._cmd_models_list)
    p = msub.add_parser("prune", help="remove saved models but the newest of each series and "
                        "alias (a server holding the registry keeps the models it loaded)")
    _models_dir(p)
    p.add_argument("--keep", type=int, default=1,
                   help="models kept per series and alias, newest first")
    p.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    p.add_argument("--json", action="store_true", help="JSON records (times in UTC, with Z)")
    p.set_defaults(func=app._cmd_models_prune)
    p = msub.add_parser("aliases", help="the forecasters PRISM has")
    p.set_defaults(func=app._cmd_models_aliases)

    p = sub.add_parser("generate", help="write a realistic synthetic job trace (or app GPU "
                       "allocations with --kind deployments)")
    p.add_argument("--output", required=True, type=Path, help="folder for jobs.csv, capacity.csv "
                   "(deployments: deployments.csv)")
    p.add_argument("--kind", choices=("jobs", "deployments"), default="jobs",
                   help="jobs: a job trace; deployments: GPUs allocated to the apps of an "
                   "inference fleet, a long CSV for --format long-csv")
    p.add_argument("--days", type=int, default=28, help="days of trace")
    p.add_argument("--clusters", type=int, default=None, help="clusters (jobs only; default 2)")
    p.add_argument("--seed", type=int, default=0, help="random seed (the same seed, the same "
                   "trace)")
    p.add_argument("--apps", type=int, default=None,
                   help="applications (deployments only; default 24)")
    p.add_argument("--jobs-per-day", type=float, default=None,
                   help="arrivals per cluster per day (default: realistic rates)")
    p.add_argument("--file-format", choices=("csv", "parquet"), default=None,
                   help="the format of the files written (jobs only; default csv)")
    quiet_flag(p)
    p.set_defaults(func=app._cmd_generate)

    datasets = sub.add_parser("datasets", help="the catalogue of public GPU traces")
    dsub = datasets.add_subparsers(dest="datasets_command", required=True)
    p = dsub.add_parser("list", help="list the public traces")
    p.add_argument("--json", action="store_true", help="JSON records")
    p.set_defaults(func=app._cmd_datasets_list)
    p = dsub.add_parser("download", help="fetch a trace into the local cache")
    p.add_argument("name", help="the trace (see `prism datasets list`)")
    p.add_argument("--cache-dir", type=Path,
                   help="where traces are kept (default: $PRISM_CACHE_DIR or ~/.cache/prism)")
    p.add_argument("--base-url", help="a mirror to fetch from (default: $PRISM_CATALOGUE_URL "
                   "or the origin)")
    p.add_argument("--no-verify", action="store_true",
                   help="accept a file whose checksum the catalogue does not know")
    quiet_flag(p)
    p.set_defaults(func=app._cmd_datasets_download)

    planning.add_parsers(sub)
    watch.add_parser(sub)

    p = sub.add_parser("serve", help="serve the REST API (uvicorn, one process)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                   "127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    _models_dir(p)
    p.add_argument("--model", default=None, help="model fitted for requests that name none "
                   "(default: $PRISM_DEFAULT_MODEL or prism)")
    p.add_argument("--insecure-no-auth", action="store_true", help="serve on a non-loopback "
                   "host without PRISM_API_TOKEN (anyone on the network can ingest and read)")
    db_flag(p)
    p.set_defaults(func=app._cmd_serve)
    return parser
