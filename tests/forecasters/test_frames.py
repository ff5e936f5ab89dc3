"""The forecasters take Nixtla's frames and zoned times, and answer in the same style."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from prism.errors import DataContractError
from prism.forecasters import get_forecaster
from prism.frames import PRISM_STYLE, FrameStyle, frame_style, to_frame, to_panel
from prism.schema import validate_panel

QUANTILES = (0.1, 0.5, 0.9)
MODELS = [("naive", {}), ("seasonal_naive", {"season": "1d"})]


def _panel(start: str = "2026-03-27", periods: int = 432) -> pd.DataFrame:
    """Two seeded 10-minute series of three days (over the March DST change in Paris)."""
    rng = np.random.default_rng(1)
    ts = pd.date_range(start, periods=periods, freq="10min")
    t = np.arange(periods)
    return pd.concat([
        pd.DataFrame({"series_id": f"c/vc{i}/gpus_in_use", "ts": ts,
                      "value": 50 + 20 * np.sin(2 * np.pi * t / 144 + i)
                      + rng.normal(0, 3, periods)})
        for i in range(2)
    ], ignore_index=True)


def _nixtla(panel: pd.DataFrame) -> pd.DataFrame:
    return panel.rename(columns={"series_id": "unique_id", "ts": "ds", "value": "y"})


def _paris(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    out = frame.copy()
    out[column] = out[column].dt.tz_localize("UTC").dt.tz_convert("Europe/Paris")
    return out


@pytest.mark.parametrize(("alias", "params"), MODELS)
def test_a_nixtla_frame_gives_the_same_numbers_keyed_unique_id_ds(alias: str,
                                                                   params: dict[str, str]) -> None:
    panel = _panel()
    frame = _nixtla(panel)
    before = frame.copy()
    expected = get_forecaster(alias, **params).fit(panel).predict(12, QUANTILES)
    out = get_forecaster(alias, **params).fit(frame).predict(12, QUANTILES)
    pd.testing.assert_frame_equal(frame, before)  # the frame given is not changed
    assert list(out.columns) == ["unique_id", "ds", "model", "mean", "p10", "p50", "p90"]
    pd.testing.assert_frame_equal(
        out.rename(columns={"unique_id": "series_id", "ds": "ts"}), expected)


@pytest.mark.parametrize(("alias", "params"), MODELS)
def test_zoned_times_give_the_same_values_and_come_back_in_their_zone(
        alias: str, params: dict[str, str]) -> None:
    panel = _panel()
    expected = get_forecaster(alias, **params).fit(panel).predict(12, QUANTILES)
    for frame, keys in ((_paris(panel, "ts"), ("series_id", "ts")),
                        (_paris(_nixtla(panel), "ds"), ("unique_id", "ds"))):
        out = get_forecaster(alias, **params).fit(frame).predict(12, QUANTILES)
        time = keys[1]
        assert str(out[time].dt.tz) == "Europe/Paris"  # zoneinfo, or pytz on pandas 2
        # the first step after 2026-03-29 23:50 UTC is 2026-03-30 00:00 UTC, 02:00 in Paris
        assert out[time].iloc[0] == pd.Timestamp("2026-03-30 02:00", tz="Europe/Paris")
        back = out.rename(columns=dict(zip(keys, ("series_id", "ts"), strict=True)))
        back["ts"] = back["ts"].dt.tz_convert("UTC").dt.tz_localize(None)
        pd.testing.assert_frame_equal(back, expected)


def test_update_takes_either_naming_and_zoned_times_and_keeps_the_fit_style() -> None:
    panel = _panel()
    head, tail = panel[panel["ts"] < "2026-03-29 12:00"], panel[panel["ts"] >= "2026-03-29 12:00"]
    expected = get_forecaster("naive").fit(head).update(tail).predict(3, (0.5,))
    model = get_forecaster("naive").fit(_nixtla(head))
    out = model.update(_paris(tail, "ts")).predict(3, (0.5,))
    assert list(out.columns[:2]) == ["unique_id", "ds"] and out["ds"].dt.tz is None
    pd.testing.assert_frame_equal(out.rename(columns={"unique_id": "series_id", "ds": "ts"}),
                                  expected)


def test_a_refit_on_a_prism_panel_answers_in_prism_names_again() -> None:
    panel = _panel()
    model = get_forecaster("naive").fit(_paris(_nixtla(panel), "ds"))
    model = pickle.loads(pickle.dumps(model))  # the style is saved with the model
    assert str(model.predict(2)["ds"].dt.tz) == "Europe/Paris"
    out = model.fit(panel).predict(2)
    assert list(out.columns[:2]) == ["series_id", "ts"] and out["ts"].dt.tz is None


def test_global_models_keep_the_style_through_fit_shared_and_fit_local() -> None:
    panel = _panel()
    model = get_forecaster("gbm", **get_forecaster("gbm").test_params()[0])
    local = model.fit_shared(panel).fit_local(_nixtla(panel))
    assert list(local.predict(2).columns[:2]) == ["unique_id", "ds"]


@pytest.mark.parametrize(("columns", "message"), [
    (["id", "time", "target"], r"has columns \['id', 'time', 'target'\], missing "
                               r"\['series_id', 'ts', 'value'\]; a panel has columns "
                               r"series_id, ts, value \(PRISM\) or unique_id, ds, y \(Nixtla\)"),
    (["unique_id", "ds", "value"], r"mixes PRISM names \['value'\] and Nixtla names "
                                   r"\['unique_id', 'ds'\].*series_id, ts, value \(PRISM\) or "
                                   r"unique_id, ds, y \(Nixtla\), not a mix"),
    (["series_id", "ts", "value", "y"], r"mixes PRISM names .* Nixtla names \['y'\]"),
    (["unique_id", "ds"], r"missing \['y'\]"),
])
def test_a_frame_of_neither_naming_or_a_mix_is_refused(columns: list[str], message: str) -> None:
    panel = _panel(periods=6)
    pool = iter([panel["series_id"], panel["ts"], panel["value"], panel["value"]])
    frame = pd.DataFrame({c: next(pool) for c in columns})
    with pytest.raises(DataContractError, match=message) as exc:
        get_forecaster("naive").fit(frame)
    assert str(exc.value).startswith("panel ")
    fitted = get_forecaster("naive").fit(panel)
    with pytest.raises(DataContractError, match=message) as exc:
        fitted.update(frame)
    assert str(exc.value).startswith("new points ")


def test_other_frame_mistakes_say_how_to_fix_them() -> None:
    frame = _nixtla(_panel(periods=6))
    with pytest.raises(DataContractError, match=r"'unique_id' is the index: reset_index\(\)"):
        get_forecaster("naive").fit(frame.set_index("unique_id"))
    with pytest.raises(DataContractError, match=r"column 'ds' must hold datetimes.*"
                                                r"pd.to_datetime\(df\['ds'\], utc=True\)"):
        get_forecaster("naive").fit(frame.assign(ds=frame["ds"].astype(str)))
    with pytest.raises(DataContractError, match=r"column 'y' must be numeric.*pd.to_numeric"):
        get_forecaster("naive").fit(frame.assign(y=frame["y"].astype(str)))
    days = pd.date_range("2026-03-27", periods=5, freq="D", tz="Europe/Paris")
    with pytest.raises(DataContractError, match=r"gap at 2026-03-29 22:00.*converted from "
                                                r"Europe/Paris.*daylight-saving"):
        get_forecaster("naive").fit(pd.DataFrame({"unique_id": "a", "ds": days, "y": 1.0}))
    with pytest.raises(DataContractError, match="Nixtla frame.*prism.frames.to_panel"):
        validate_panel(frame)  # the core itself speaks PRISM's names only


def test_to_panel_and_to_frame_round_trip() -> None:
    panel = _panel(periods=4)
    same, style = to_panel(panel)
    assert same is panel and style == PRISM_STYLE and to_frame(panel, style) is panel
    zoned = _paris(_nixtla(panel), "ds")
    converted, style = to_panel(zoned)
    assert style == FrameStyle("nixtla", zoned["ds"].dt.tz) == frame_style(zoned)
    assert str(style.tz) == "Europe/Paris"
    assert list(converted.columns) == ["series_id", "ts", "value"]
    pd.testing.assert_series_equal(converted["ts"], panel["ts"])
    pd.testing.assert_frame_equal(to_frame(converted, style), zoned)
    ints = _nixtla(panel).assign(unique_id=lambda f: f["unique_id"].str[4])  # "0", "1"
    as_int = ints.assign(unique_id=ints["unique_id"].astype(int))
    assert to_panel(as_int)[0]["series_id"].tolist() == ints["unique_id"].tolist()


def test_per_series_models_take_a_nixtla_frame_too() -> None:
    from prism.forecasters.compose import SeriesModels

    panel = _panel()
    expected = SeriesModels(model=get_forecaster("naive")).fit(panel).predict(6, QUANTILES)
    model = SeriesModels(model=get_forecaster("naive")).fit(_nixtla(panel))
    out = model.predict(6, QUANTILES)
    assert list(out.columns[:2]) == ["unique_id", "ds"]
    pd.testing.assert_frame_equal(
        out.rename(columns={"unique_id": "series_id", "ds": "ts"}), expected)
