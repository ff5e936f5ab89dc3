"""The public trace catalogue and its download, against a real local HTTP server."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import shlex
import socket
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from prism.config import get_settings
from prism.datasets import (
    Dataset,
    DownloadError,
    IngestArgs,
    download,
    get_dataset,
    ingest_command,
    list_datasets,
)
from prism.errors import ConfigError

#: The formats `prism ingest` has (DESIGN.md), plus capacity-csv and node-list.
PRISM_FORMATS = {
    "helios-vc", "philly-nodes", "helios-jobs", "alibaba-pods", "alibaba-pai", "slurm-sacct",
    "prometheus", "jobs-csv", "long-csv", "wide-csv", "capacity-csv", "node-list",
}
VCS = ["vc3sl", "vc6YE", "vc8Sj", "vcJLV", "vcJkd", "vcLJZ", "vcMod", "vcSoL", "vcTJs",
       "vccaA", "vcdI0", "vcgkz", "vchbv", "vcira", "vcpDC", "vcvlY"]
#: Catalogue entry -> (its copy under ../shared/data/traces, whether that copy is gzipped).
LOCAL_COPIES: dict[str, tuple[str, bool]] = {
    **{f"helios-earth-{vc}": (f"helios_earth_vc/earth_{vc}_1min.csv.gz", True) for vc in VCS},
    "philly-node-sequence": ("helios_earth_vc/philly_node_sequence_1min.csv.gz", True),
    "alibaba-v2023-pods": ("alibaba_gpu/v2023_openb_pod_list_default.csv.gz", True),
    "alibaba-v2023-nodes": ("alibaba_gpu/v2023_openb_node_list_gpu_node.csv", False),
}
FIXTURE = b"time,gpus_in_use\n2026-01-05 00:00:00,3\n2026-01-05 00:10:00,5\n" * 50


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- the catalogue


def test_catalogue_loads_from_the_data_package() -> None:
    raw = json.loads((resources.files("prism") / "catalogue.json").read_text(encoding="utf-8"))
    datasets = list_datasets()
    assert len(datasets) == len(raw["datasets"]) >= 20
    assert all(isinstance(d, Dataset) for d in datasets)


def test_names_are_unique_and_cover_every_public_trace() -> None:
    names = [d.name for d in list_datasets()]
    assert len(names) == len(set(names))
    for name in ("helios-earth-vc6YE", "helios-earth-jobs", "philly-node-sequence",
                 "philly-trace", "alibaba-v2020-pai-tasks", "alibaba-v2023-pods",
                 "alibaba-v2023-nodes", "alibaba-v2025-dlrm", "acme-seren-jobs",
                 "acme-kalos-jobs"):
        assert name in names
    assert {f"helios-earth-{vc}" for vc in VCS} <= set(names)


@pytest.mark.parametrize("dataset", list_datasets(), ids=lambda d: d.name)
def test_every_entry_is_complete(dataset: Dataset) -> None:
    assert dataset.licence.strip() and dataset.citation.strip() and dataset.title.strip()
    assert dataset.origin_url.startswith("https://")
    assert dataset.format is None or dataset.format in PRISM_FORMATS
    if dataset.format is None:
        assert dataset.note and "PRISM format" in dataset.note  # says why it is download-only
    # a checksum is never given without saying where it comes from, and vice versa
    assert (dataset.sha256 is None) == (dataset.checksum_source is None)
    if dataset.sha256 is None:
        assert dataset.note and "--no-verify" in dataset.note


def test_get_dataset_returns_the_entry() -> None:
    entry = get_dataset("helios-earth-vc6YE")
    assert entry.format == "helios-vc"
    assert entry.ingest_options == IngestArgs(cluster="earth", scope="vc6YE", tz="Asia/Shanghai")
    assert "HeliosArtifact" in entry.origin_url and entry.origin_url.endswith("/vc6YE/"
                                                                              "cluster_sequence_vc.csv")


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(ConfigError, match=r"unknown dataset 'helios-earth-vc6ye'.*"
                                          r"'helios-earth-vc6YE'"):
        get_dataset("helios-earth-vc6ye")
    with pytest.raises(ConfigError, match="philly-node-sequence"):
        get_dataset("philly")
    with pytest.raises(ConfigError, match="prism datasets list"):
        get_dataset("no-such-trace")


@pytest.mark.parametrize("name", sorted(LOCAL_COPIES))
def test_checksums_match_the_local_copies(traces: Path, name: str) -> None:
    relative, gzipped = LOCAL_COPIES[name]
    entry = get_dataset(name)
    raw = (traces / relative).read_bytes()
    original = gzip.decompress(raw) if gzipped else raw
    assert entry.sha256 == _sha(original)
    assert entry.size == len(original)
    if gzipped:  # the note records the recompressed copy and its own checksum
        assert entry.note is not None and _sha(raw) in entry.note and str(len(raw)) in entry.note


def test_ingest_command_quotes_the_path() -> None:
    entry = get_dataset("acme-seren-jobs")
    command = ingest_command(entry, Path("/cache dir/trace_seren.csv"))
    assert command is not None
    argv = shlex.split(command)
    assert argv[:5] == ["prism", "ingest", "/cache dir/trace_seren.csv", "--format", "jobs-csv"]
    assert ["--cluster", "seren"] == argv[5:7]
    assert "num_gpus=gpu_num" in argv and "submit_ts=submit_time" in argv
    assert ingest_command(get_dataset("philly-trace"), Path("x")) is None


# --------------------------------------------------------------------------- a real HTTP server


class _Server:
    """A ThreadingHTTPServer on an ephemeral port serving one folder, recording each request."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        handler = functools.partial(_Handler, self, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                       kwargs={"poll_interval": 0.02})

    def publish(self, name: str, data: bytes) -> None:
        (self.root / name).write_bytes(data)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, server_state: _Server, *args: object, **kwargs: object) -> None:
        self.state = server_state
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def do_GET(self) -> None:
        self.state.requests.append(self.path)
        if self.path == "/short.csv":  # announces more bytes than it sends
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"only a few bytes")
            self.close_connection = True
            return
        if self.path == "/endless.csv":  # a bad mirror: no length, never stops
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(4096):  # 256 MiB unless the client hangs up
                    self.wfile.write(b"x" * 65536)
            except OSError:
                pass
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_Server]:
    root = tmp_path / "www"
    root.mkdir()
    srv = _Server(root)
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
    srv.thread.join(timeout=5)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def _entry(**update: object) -> Dataset:
    fields: dict[str, object] = {
        "name": "fixture-trace", "title": "a small fixture", "homepage": "https://example.org",
        "origin_url": "https://example.invalid/fixture.csv", "licence": "CC0-1.0",
        "citation": "none", "format": "wide-csv",
        "ingest_options": {"cluster": "test", "time_col": "time"}, "filename": "fixture.csv",
        "sha256": _sha(FIXTURE), "size": len(FIXTURE),
        "checksum_source": "computed by the test",
    }
    fields.update(update)
    return Dataset.model_validate(fields)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_fetches_verifies_and_says_how_to_ingest(server: _Server, cache: Path) -> None:
    server.publish("fixture.csv", FIXTURE)
    calls: list[tuple[int, int | None]] = []
    result = download(_entry(), cache_dir=cache, base_url=server.url,
                      progress=lambda done, total: calls.append((done, total)))
    assert result.path == cache / "fixture-trace" / "fixture.csv"
    assert result.path.read_bytes() == FIXTURE
    assert result.sha256 == _sha(FIXTURE) and result.verified and not result.cached
    assert result.url == f"{server.url}/fixture.csv"
    assert result.ingest_path == result.path
    assert result.ingest_command == shlex.join(
        ["prism", "ingest", str(result.path), "--format", "wide-csv", "--cluster", "test",
         "--time-col", "time"])
    assert calls[0] == (0, len(FIXTURE)) and calls[-1] == (len(FIXTURE), len(FIXTURE))
    assert server.requests == ["/fixture.csv"]
    assert _files(result.path.parent) == ["fixture.csv"]  # no temporary file left behind


def test_second_download_comes_from_the_cache(server: _Server, cache: Path) -> None:
    server.publish("fixture.csv", FIXTURE)
    first = download(_entry(), cache_dir=cache, base_url=server.url)
    second = download(_entry(), cache_dir=cache, base_url=server.url)
    assert second.cached and second.verified and second.path == first.path
    assert server.requests == ["/fixture.csv"]  # the server saw no second request


def test_a_damaged_cached_file_is_fetched_again(server: _Server, cache: Path) -> None:
    server.publish("fixture.csv", FIXTURE)
    first = download(_entry(), cache_dir=cache, base_url=server.url)
    first.path.write_bytes(FIXTURE[:-1] + b"9")  # same size, other bytes
    again = download(_entry(), cache_dir=cache, base_url=server.url)
    assert not again.cached and again.path.read_bytes() == FIXTURE
    assert len(server.requests) == 2


def test_checksum_mismatch_raises_and_leaves_no_file(server: _Server, cache: Path) -> None:
    server.publish("fixture.csv", FIXTURE + b"tampered\n")
    with pytest.raises(DownloadError) as caught:
        download(_entry(), cache_dir=cache, base_url=server.url)
    message = str(caught.value)
    assert _sha(FIXTURE) in message and _sha(FIXTURE + b"tampered\n") in message
    assert "--no-verify" in message and f"{server.url}/fixture.csv" in message
    assert _files(cache / "fixture-trace") == []


def test_no_verify_keeps_a_mismatching_file(server: _Server, cache: Path) -> None:
    server.publish("fixture.csv", FIXTURE + b"tampered\n")
    result = download(_entry(), cache_dir=cache, base_url=server.url, verify=False)
    assert not result.verified and result.path.read_bytes() == FIXTURE + b"tampered\n"


def test_http_404_names_the_url(server: _Server, cache: Path) -> None:
    with pytest.raises(DownloadError, match=r"404") as caught:
        download(_entry(filename="missing.csv"), cache_dir=cache, base_url=server.url)
    assert f"{server.url}/missing.csv" in str(caught.value)
    assert "PRISM_CATALOGUE_URL" in str(caught.value)
    assert _files(cache / "fixture-trace") == []


def test_a_truncated_response_is_an_error(server: _Server, cache: Path) -> None:
    with pytest.raises(DownloadError, match="short.csv"):
        download(_entry(filename="short.csv", sha256=None, size=None), cache_dir=cache,
                 base_url=server.url, verify=False)
    assert _files(cache / "fixture-trace") == []


def test_unreachable_and_silent_servers(cache: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(DownloadError, match=rf"cannot reach http://127\.0\.0\.1:{port}/"):
        download(_entry(), cache_dir=cache, base_url=f"http://127.0.0.1:{port}", timeout=5)
    with socket.socket() as silent:  # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(DownloadError, match=r"127\.0\.0\.1"):
            download(_entry(), cache_dir=cache, base_url=url, timeout=0.5)
    assert _files(cache / "fixture-trace") == []


def test_unknown_dataset_name(cache: Path) -> None:
    with pytest.raises(ConfigError, match="unknown dataset 'alibaba-2023-pods'.*"
                                          "alibaba-v2023-pods"):
        download("alibaba-2023-pods", cache_dir=cache, base_url="http://127.0.0.1:9")


def test_unknown_checksum_needs_no_verify(server: _Server, cache: Path) -> None:
    server.publish("fixture.csv", FIXTURE)
    unchecked = _entry(sha256=None, checksum_source=None)
    with pytest.raises(ConfigError, match=r"no checksum.*--no-verify"):
        download(unchecked, cache_dir=cache, base_url=server.url)
    assert server.requests == []  # refused before touching the network
    result = download(unchecked, cache_dir=cache, base_url=server.url, verify=False)
    assert result.sha256 == _sha(FIXTURE) and not result.verified
    again = download(unchecked, cache_dir=cache, base_url=server.url, verify=False)
    assert again.cached and server.requests == ["/fixture.csv"]


def test_catalogue_entry_from_a_mirror_set_in_the_environment(
    server: _Server, cache: Path, traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PRISM_CATALOGUE_URL and PRISM_CACHE_DIR, with a real entry and the real trace bytes."""
    original = gzip.decompress(
        (traces / "alibaba_gpu/v2023_openb_pod_list_default.csv.gz").read_bytes())
    server.publish("openb_pod_list_default.csv", original)
    monkeypatch.setenv("PRISM_CATALOGUE_URL", server.url + "/")
    monkeypatch.setenv("PRISM_CACHE_DIR", str(cache))
    get_settings.cache_clear()
    try:
        result = download("alibaba-v2023-pods")
    finally:
        get_settings.cache_clear()
    assert result.verified and result.path == cache / "alibaba-v2023-pods" / (
        "openb_pod_list_default.csv")
    assert server.requests == ["/openb_pod_list_default.csv"]
    assert result.ingest_command == shlex.join(
        ["prism", "ingest", str(result.path), "--format", "alibaba-pods", "--cluster",
         "alibaba-v2023"])


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_zip_member_is_extracted_for_ingest(server: _Server, cache: Path) -> None:
    archive = _zip({"data/Earth/cluster_log.csv": FIXTURE, "data/Venus/cluster_log.csv": b"v"})
    server.publish("helios-data.zip", archive)
    entry = _entry(filename="helios-data.zip", sha256=_sha(archive), size=len(archive),
                   member="Earth/cluster_log.csv", format="helios-jobs",
                   ingest_options={"cluster": "earth"})
    result = download(entry, cache_dir=cache, base_url=server.url)
    assert result.path.name == "helios-data.zip" and result.sha256 == _sha(archive)
    assert result.ingest_path == cache / "fixture-trace" / "cluster_log.csv"
    assert result.ingest_path.read_bytes() == FIXTURE
    assert result.ingest_command is not None and str(result.ingest_path) in result.ingest_command
    assert download(entry, cache_dir=cache, base_url=server.url).cached


def test_tar_member_is_checked_against_its_published_checksum(
    server: _Server, cache: Path
) -> None:
    archive = _tar_gz({"./pai_task_table.csv": FIXTURE})
    server.publish("pai_task_table.tar.gz", archive)
    entry = _entry(filename="pai_task_table.tar.gz", sha256=_sha(archive), size=len(archive),
                   member="pai_task_table.csv", member_sha256=_sha(FIXTURE))
    assert download(entry, cache_dir=cache, base_url=server.url).ingest_path.read_bytes() == (
        FIXTURE)
    wrong = entry.model_copy(update={"member_sha256": "0" * 64, "name": "other"})
    with pytest.raises(DownloadError, match="not the published"):
        download(wrong, cache_dir=cache, base_url=server.url)
    missing = entry.model_copy(update={"member": "pai_job_table.csv", "name": "third"})
    with pytest.raises(DownloadError, match=r"no member matches.*pai_task_table\.csv"):
        download(missing, cache_dir=cache, base_url=server.url)


def test_a_download_stops_past_the_catalogue_size(server: _Server, cache: Path) -> None:
    entry = _entry(filename="endless.csv")
    with pytest.raises(DownloadError, match="sent more than the catalogue's"):
        download(entry, cache_dir=cache, base_url=server.url)
    folder = cache / "fixture-trace"
    assert not folder.exists() or _files(folder) == []  # nothing kept, no partial file
