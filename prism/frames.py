"""The ecosystem's frames at the Python API's edge: Nixtla's names and zoned times.

PRISM's core speaks one panel contract, ``series_id, ts, value`` with UTC-naive times
(:mod:`prism.schema`). The forecasters' public methods (``fit``, ``fit_shared``, ``fit_local``,
``update``) and the cross-validation adapter (:mod:`prism.evaluation.crossval`) also take

- Nixtla's naming, ``unique_id, ds, y`` (statsforecast, utilsforecast, neuralforecast), and
- timezone-aware times (any zone), converted to UTC-naive as the rest of PRISM stores them.

:func:`to_panel` renames and converts once, at that edge, and returns the :class:`FrameStyle`
it found; :func:`to_frame` gives a PRISM frame (a forecast, a backtest) back in that style:
``series_id``/``ts``/``value`` become ``unique_id``/``ds``/``y`` for a Nixtla frame, and the
times (``ts`` and ``cutoff``) go back to the zone of the frame given. The forecast's own
columns (``model, mean, p50, p90, ...``) keep their names in either style.

A frame with neither naming complete, or with names of both, is refused with a
:class:`~prism.errors.DataContractError` naming the columns found and the two namings accepted.
Series ids come back as strings (an integer ``unique_id`` of 1 comes back as ``"1"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, Literal

import pandas as pd

from prism.errors import DataContractError
from prism.schema import (
    DS,
    NIXTLA_COLUMNS,
    PANEL_COLUMNS,
    SERIES_ID,
    TS,
    UNIQUE_ID,
    VALUE,
    Y,
)

__all__ = ["PRISM_STYLE", "FrameStyle", "frame_style", "json_records", "to_frame", "to_panel",
           "utc_text"]

#: The time columns a PRISM frame may hold (a backtest adds ``cutoff``).
_TIME_COLUMNS = (TS, "cutoff")
_ACCEPTED = "series_id, ts, value (PRISM) or unique_id, ds, y (Nixtla)"


@dataclass(frozen=True)
class FrameStyle:
    """How a frame named its columns and zoned its times; results are given back in it.

    Attributes:
        naming: ``"prism"`` (``series_id, ts, value``) or ``"nixtla"`` (``unique_id, ds, y``).
        tz: the zone of its times, or ``None`` for UTC-naive times.
    """

    naming: Literal["prism", "nixtla"] = "prism"
    tz: tzinfo | None = None

    @property
    def names(self) -> dict[str, str]:
        """PRISM's panel column -> this style's name for it."""
        if self.naming == "nixtla":
            return dict(zip(PANEL_COLUMNS, NIXTLA_COLUMNS, strict=True))
        return {c: c for c in PANEL_COLUMNS}


#: PRISM's own style: ``series_id, ts, value``, UTC-naive.
PRISM_STYLE = FrameStyle()


def frame_style(frame: pd.DataFrame, *, what: str = "panel") -> FrameStyle:
    """The naming and time zone of a panel-like frame.

    Args:
        frame: a frame with ``series_id, ts, value`` or ``unique_id, ds, y`` (other columns are
            allowed and left alone).
        what: what the frame is, for messages (``"panel"``, ``"new points"``).

    Raises:
        DataContractError: for a frame with neither naming complete or names of both (naming
            the columns found and the two namings accepted), times that are not datetimes or
            values that are not numbers.
    """
    columns = [str(c) for c in frame.columns]
    prism = [c for c in PANEL_COLUMNS if c in columns]
    nixtla = [c for c in NIXTLA_COLUMNS if c in columns]
    if prism and nixtla:
        raise DataContractError(
            f"{what} mixes PRISM names {prism} and Nixtla names {nixtla} (columns: {columns}); "
            f"name its columns either {_ACCEPTED}, not a mix"
        )
    if len(prism) == len(PANEL_COLUMNS):
        naming: Literal["prism", "nixtla"] = "prism"
    elif len(nixtla) == len(NIXTLA_COLUMNS):
        naming = "nixtla"
    else:
        near = NIXTLA_COLUMNS if nixtla else PANEL_COLUMNS
        missing = [c for c in near if c not in columns]
        index = [str(n) for n in frame.index.names if n in (SERIES_ID, UNIQUE_ID)]
        hint = f" ({index[0]!r} is the index: reset_index() first)" if index else ""
        raise DataContractError(
            f"{what} has columns {columns}, missing {missing}{hint}; a panel has columns "
            f"{_ACCEPTED}"
        )
    time = DS if naming == "nixtla" else TS
    if not pd.api.types.is_datetime64_any_dtype(frame[time]):
        raise DataContractError(
            f"{what} column {time!r} must hold datetimes (UTC-naive or timezone-aware), got "
            f"{frame[time].dtype}: parse it with pd.to_datetime(df[{time!r}], utc=True)"
        )
    value = Y if naming == "nixtla" else VALUE
    if not pd.api.types.is_numeric_dtype(frame[value]):
        raise DataContractError(
            f"{what} column {value!r} must be numeric, got {frame[value].dtype}: convert it "
            f"with pd.to_numeric(df[{value!r}])"
        )
    return FrameStyle(naming, getattr(frame[time].dt, "tz", None))


def to_panel(frame: pd.DataFrame, *, what: str = "panel") -> tuple[pd.DataFrame, FrameStyle]:
    """A frame in PRISM's naming with UTC-naive times, and the style it came in.

    Renames Nixtla's ``unique_id, ds, y`` to ``series_id, ts, value`` and converts zoned times
    to UTC-naive; a PRISM frame with UTC-naive times is returned as it is (not copied). The
    frame given is never changed. The result is not validated: :func:`prism.schema.
    validate_panel` does that.

    Args:
        frame: the frame given to the Python API.
        what: what the frame is, for messages.

    Returns:
        ``(panel, style)``: the frame in PRISM's naming and the :class:`FrameStyle` to give
        results back in.

    Raises:
        DataContractError: as :func:`frame_style`.
    """
    style = frame_style(frame, what=what)
    if style == PRISM_STYLE:
        return frame, style
    out = frame.rename(columns={new: old for old, new in style.names.items()})
    if style.tz is not None:
        out[TS] = out[TS].dt.tz_convert("UTC").dt.tz_localize(None)
    if not pd.api.types.is_string_dtype(out[SERIES_ID]):
        out[SERIES_ID] = out[SERIES_ID].astype(str)  # PRISM's ids are strings
    return out, style


def to_frame(frame: pd.DataFrame, style: FrameStyle) -> pd.DataFrame:
    """A PRISM frame (a panel, a forecast, a backtest) in ``style``'s naming and zone.

    ``series_id, ts, value`` take the style's names; ``ts`` and ``cutoff`` (UTC-naive) go to
    its zone. Other columns keep their names. In PRISM's style the frame is returned as it is.
    """
    if style == PRISM_STYLE:
        return frame
    out = frame.copy()
    if style.tz is not None:
        for col in _TIME_COLUMNS:
            if col in out.columns:
                out[col] = out[col].dt.tz_localize("UTC").dt.tz_convert(style.tz)
    names = {old: new for old, new in style.names.items() if old != new}
    return out.rename(columns=names) if names else out


# -- JSON: times in UTC with Z, as the API, the CLI and batch exports write them ----------------
def utc_text(value: Any) -> Any:
    """A time as ISO 8601 text in UTC with ``Z`` (``2026-01-05T00:10:00Z``), as the API
    writes times; a naive time is taken as UTC. Anything else is returned as it is (a
    ``json.dumps`` ``default`` that gives up on other objects wraps this)."""
    if isinstance(value, datetime):  # pd.Timestamp is a datetime
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        text = value.isoformat(timespec="microseconds" if value.microsecond else "seconds")
        return text + "Z"
    return value


def json_records(frame: pd.DataFrame, *, indent: int | None = None) -> str:
    """``frame`` as a JSON array of records, times in UTC with ``Z`` (:func:`utc_text`)."""
    shown = frame.copy()
    for col in shown.columns:
        values = shown[col]
        if isinstance(values.dtype, pd.DatetimeTZDtype):
            values = values.dt.tz_convert("UTC").dt.tz_localize(None)
        if pd.api.types.is_datetime64_any_dtype(values):
            shown[col] = [None if pd.isna(v) else utc_text(v) for v in values]
    return shown.to_json(orient="records", indent=indent)
