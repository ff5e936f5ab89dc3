"""The decomposition as a whole: ground truth it must recover, exact sums, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prism.cli import main
from prism.primitives.decompose import COMPONENTS, decompose

FREQ = "10min"
DAY, WEEK = 144, 1008


def _synthetic(seed: int, n: int = 4 * WEEK) -> tuple[pd.DataFrame, dict[str, object]]:
    """A panel of 6 series; the first has injected bursts and a level shift."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    ts = pd.date_range("2026-01-05", periods=n, freq=FREQ)
    frames, truth = [], {}
    for i in range(6):
        phase = rng.uniform(0, 2 * np.pi)
        y = (100 + 30 * np.sin(2 * np.pi * t / DAY + phase) + 12 * np.sin(2 * np.pi * t / WEEK)
             + rng.normal(0, 2, n))
        if i == 0:
            starts = rng.choice(np.arange(50, n - 50, 60), size=15, replace=False)
            spans = []
            for s in sorted(starts):
                length = int(rng.integers(1, 5))
                y[s:s + length] += rng.uniform(40, 70)
                spans.append((int(s), int(s) + length))
            shift_at = int(rng.integers(n // 3, 2 * n // 3))
            y[shift_at:] += 40
            truth = {"bursts": spans, "shift_at": shift_at}
        frames.append(pd.DataFrame({"series_id": f"c/vc{i}/gpus_in_use", "ts": ts, "value": y}))
    return pd.concat(frames, ignore_index=True), truth


@pytest.mark.parametrize("seed", [0, 1])
def test_ground_truth_recovered_and_components_sum(seed: int) -> None:
    panel, truth = _synthetic(seed)
    result = decompose(panel, series_ids=["c/vc0/gpus_in_use", "c/vc1/gpus_in_use"])
    d = result.series["c/vc0/gpus_in_use"]
    assert list(d.components) == list(COMPONENTS)
    np.testing.assert_allclose(sum(d.components.values()), d.values, rtol=0, atol=1e-9)

    seconds = sorted(p.seconds for p in d.periods)
    for expected in (86_400, 604_800):
        assert any(abs(s - expected) <= 0.02 * expected for s in seconds), seconds

    spans = truth["bursts"]
    assert isinstance(spans, list)
    found = [(b.start, b.end) for b in d.bursts]
    hit = [any(s < fe and fs < e for fs, fe in found) for s, e in spans]
    true_found = [any(s < fe and fs < e for s, e in spans) for fs, fe in found]
    assert np.mean(hit) >= 0.9, (spans, found)  # recall
    assert np.mean(true_found) >= 0.9, (spans, found)  # precision

    assert len(d.level_shifts) >= 1
    nearest = min(d.level_shifts, key=lambda s: abs(s.at - int(truth["shift_at"])))  # type: ignore[call-overload]
    assert abs(nearest.at - int(truth["shift_at"])) <= 2  # type: ignore[call-overload]
    assert nearest.delta == pytest.approx(40, rel=0.25)

    long = result.components
    assert set(long.columns) == {"series_id", "ts", "component", "value"}
    summed = long.groupby(["series_id", "ts"])["value"].sum().sort_index()
    original = panel.set_index(["series_id", "ts"])["value"].loc[summed.index]
    np.testing.assert_allclose(summed.to_numpy(), original.to_numpy(), atol=1e-9)
    usage = result.usage
    assert set(usage["series_id"]) == {"c/vc0/gpus_in_use", "c/vc1/gpus_in_use"}
    assert (usage["share"] > 0).all() and usage.groupby("series_id")["share"].sum().le(1).all()


def test_cli_decompose_json_and_plot(tmp_path: Path, traces: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "prism.duckdb")
    files = sorted((traces / "helios_earth_vc").glob("earth_vc*_1min.csv.gz"))[:6]
    assert main(["--db", db, "ingest", *map(str, files), "--format", "helios-vc", "-q"]) == 0
    capsys.readouterr()
    series = "earth/vc6YE/gpus_in_use" if any("vc6YE" in f.name for f in files) else (
        f"earth/{files[0].name.split('_')[1]}/gpus_in_use")
    plot = tmp_path / "d.png"
    assert main(["--db", db, "decompose", series, "--json", "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"periods", "primitives", "bursts"} <= set(out)
    for p in out["periods"]:
        assert p["seconds"] > 0 and 0 <= p["strength"] <= 1
    for p in out["primitives"]:
        assert isinstance(p["id"], str) and 0 < p["share"] <= 1
    for b in out["bursts"]:
        start, end, peak = (pd.Timestamp(b[k]) for k in ("start", "end", "peak"))
        assert start <= peak < end
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert main(["--db", db, "decompose", series]) == 0
    text = capsys.readouterr().out
    assert "periods" in text and "top primitives" in text and "variance share" in text
    assert main(["--db", db, "decompose", "earth/vcNope/gpus_in_use"]) == 1
    assert "not in the store" in capsys.readouterr().err


def test_an_idle_cluster_decomposes_without_primitives_and_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # every series of the cluster flat (idle VCs, a constant reservation) or a few hours long:
    # no dictionary can be learned, which used to fail the whole decomposition
    t0 = pd.Timestamp("2026-01-05")
    rows = [("idle/zero/gpus_in_use", t0 + pd.Timedelta(minutes=10 * i), 0.0)
            for i in range(2 * DAY)]
    rows += [("idle/held/gpus_in_use", t0 + pd.Timedelta(minutes=10 * i), 8.0 + (i >= DAY))
             for i in range(2 * DAY)]
    rows += [("idle/new/gpus_in_use", t0 + pd.Timedelta(minutes=10 * i), 5.0) for i in range(3)]
    panel = pd.DataFrame(rows, columns=["series_id", "ts", "value"])
    out = decompose(panel[panel["series_id"] != "idle/new/gpus_in_use"])
    assert out.dictionary is None
    for sid, part in out.series.items():
        assert part.note.startswith("no primitives: no dictionary could be learned"), sid
        assert not part.components["primitives"].any() and part.usage.empty
        np.testing.assert_allclose(sum(part.components[c] for c in COMPONENTS), part.values,
                                   atol=1e-9)
    held = out.series["idle/held/gpus_in_use"]
    assert [round(s.delta) for s in held.level_shifts] == [1]  # the step is still found
    # the CLI, as a user meets it: exit 0, the tables, and the note on stderr
    path = tmp_path / "idle.csv"
    panel.to_csv(path, index=False)
    db = str(tmp_path / "s.duckdb")
    assert main(["--db", db, "ingest", str(path), "--format", "long-csv", "-q"]) == 0
    capsys.readouterr()
    for sid in ("idle/zero/gpus_in_use", "idle/new/gpus_in_use"):
        assert main(["--db", db, "decompose", sid]) == 0
        captured = capsys.readouterr()
        assert "variance share" in captured.out and "note: no primitives" in captured.err
    assert main(["--db", db, "decompose", "idle/held/gpus_in_use", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["note"].startswith("no primitives")


def test_the_plot_labels_its_axes_in_the_series_unit(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.figure

    from prism.primitives.plot import axis_unit, plot_decomposition

    assert [axis_unit(f"c/s/{m}") for m in ("gpus_in_use", "jobs_submitted", "nodes_in_use",
                                             "gpu_util", "my_gauge")] == [
        "GPUs", "jobs", "nodes", "ratio", "value"]
    panel, _ = _synthetic(0, n=2 * WEEK)
    part = decompose(panel, series_ids=[panel["series_id"].iloc[0]]).series
    drawn: list[matplotlib.figure.Figure] = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda self, *a, **k: drawn.append(self))
    plot_decomposition(next(iter(part.values())), tmp_path / "d.png")
    [figure] = drawn
    labels = [ax.get_ylabel() for ax in figure.axes]
    assert labels[0] == "GPUs" and all(label.endswith("(GPUs)") for label in labels[1:-1])
    assert labels[-1] == "top atoms\n(unit norm)"
    assert "time (UTC)" in [ax.get_xlabel() for ax in figure.axes]


def test_a_period_of_the_series_is_kept_when_the_search_without_its_shifts_finds_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a demo VC with a daily cycle and a detected shift of -180 GPUs showed "periods: none":
    # the search on the series less its level found nothing and replaced what it had found
    import prism.primitives.decompose as module

    real = module.find_periods
    panel, _ = _synthetic(1, n=2 * WEEK)  # its first series has a level shift
    raw = {g["value"].to_numpy().tobytes() for _, g in panel.groupby("series_id")}
    less_level: list[int] = []

    def none_without_the_level(y: np.ndarray, **kwargs: object) -> list[object]:
        if np.asarray(y, dtype=np.float64).tobytes() in raw:
            return real(y, **kwargs)  # type: ignore[arg-type]
        less_level.append(len(y))
        return []

    monkeypatch.setattr(module, "find_periods", none_without_the_level)
    sid = panel["series_id"].iloc[0]
    part = decompose(panel, series_ids=[sid]).series[sid]
    assert part.level_shifts and less_level
    assert [round(p.steps) for p in part.periods][:1] in ([DAY], [WEEK])
