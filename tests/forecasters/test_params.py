"""Hyperparameters given as text become constructor arguments of the right type."""

from __future__ import annotations

import pytest

from prism.errors import ConfigError
from prism.forecasters import FORECASTERS, get_forecaster
from prism.forecasters.params import typed_params


def _as_text(value: object) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


@pytest.mark.parametrize("alias", sorted(FORECASTERS))
def test_every_default_written_as_text_comes_back_as_it_was(alias: str) -> None:
    defaults = FORECASTERS[alias]().get_params()
    text = {name: _as_text(value) for name, value in defaults.items()}
    typed = typed_params(alias, text)
    assert typed == {k: tuple(v) if isinstance(v, list) else v for k, v in defaults.items()}
    assert all(type(typed[k]) is type(v) for k, v in defaults.items())
    get_forecaster(alias, **typed)  # the constructor takes them


def test_values_are_typed_from_the_defaults() -> None:
    assert typed_params("seasonal_naive", {"season": "1w"}) == {"season": "1w"}
    assert typed_params("prism", {"n_atoms": "8", "use_rnn": "false", "combiner_power": "2"}
                        ) == {"n_atoms": 8, "use_rnn": False, "combiner_power": 2.0}
    assert typed_params("ets", {"trend": "YES", "damped": "0"}) == {"trend": True,
                                                                    "damped": False}
    assert typed_params("mstl", {"periods": "1d, 1w,"}) == {"periods": ("1d", "1w")}


def test_a_none_default_is_typed_from_the_annotation() -> None:
    # ``d: int | None = None`` and ``jump: int | None = None`` take numbers, not text
    assert typed_params("arima", {"d": "1"}) == {"d": 1}
    assert typed_params("mstl", {"jump": "2"}) == {"jump": 2}
    assert typed_params("gbm", {"random_state": "3"}) == {"random_state": 3}
    assert typed_params("ets", {"fit_window": "2d"}) == {"fit_window": "2d"}
    assert typed_params("arima", {"seasonal_order": "1,1,0"}) == {"seasonal_order": (1, 1, 0)}


def test_none_where_the_parameter_may_be_none() -> None:
    assert typed_params("ets", {"season": "None", "fit_window": "none"}) == {
        "season": None, "fit_window": None}
    assert typed_params("gru", {"random_state": "none"}) == {"random_state": None}
    with pytest.raises(ConfigError, match="expected a whole number like 100"):
        typed_params("gbm", {"max_iter": "none"})


def test_errors_say_what_the_model_takes() -> None:
    with pytest.raises(ConfigError, match="naive has no parameter 'season'; it takes: none"):
        typed_params("naive", {"season": "1d"})
    with pytest.raises(ConfigError, match="it takes: lookback, weekly"):
        typed_params("time_of_day_quantile", {"random_state": "1"})
    with pytest.raises(ConfigError, match="expected a whole number like 8"):
        typed_params("prism", {"n_atoms": "many"})
    with pytest.raises(ConfigError, match="expected true or false"):
        typed_params("prism", {"use_rnn": "maybe"})
    with pytest.raises(ConfigError, match="expected a whole number or none"):
        typed_params("arima", {"d": "one"})
    with pytest.raises(ConfigError, match="expected comma-separated whole numbers"):
        typed_params("arima", {"seasonal_order": "0,x,1"})


def test_an_unknown_alias_is_left_to_get_forecaster() -> None:
    assert typed_params("nope", {"a": "1"}) == {"a": "1"}
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        get_forecaster("nope", **typed_params("nope", {"a": "1"}))


def test_a_duration_hyperparameter_is_rounded_to_whole_steps() -> None:
    """Model defaults are written for 10-minute series: on a store of another step, a
    window or season rounds to the nearest whole number of steps, at least one (a daily
    store's ``lookback="12h"`` is one step); a horizon is never rounded."""
    import numpy as np
    import pandas as pd

    from prism.errors import ConfigError
    from prism.forecasters import get_forecaster
    from prism.forecasters.base import horizon_steps

    panel = pd.DataFrame({"series_id": "a/b/c", "value": np.arange(600.0),
                          "ts": pd.date_range("2026-01-01", periods=600, freq="10min")})
    assert get_forecaster("seasonal_naive", season="15min").fit(panel).season_steps_ == 2
    assert get_forecaster("seasonal_naive", season="1min").fit(panel).season_steps_ == 1
    assert get_forecaster("seasonal_naive", season="1d").fit(panel).season_steps_ == 144
    with pytest.raises(ConfigError, match="whole number of 600-second steps"):
        horizon_steps("15min", 600)


def test_a_bad_duration_hyperparameter_is_named_not_called_a_horizon() -> None:
    import numpy as np
    import pandas as pd

    from prism.errors import ConfigError
    from prism.forecasters import get_forecaster

    panel = pd.DataFrame({"series_id": "a/b/c", "value": np.arange(600.0),
                          "ts": pd.date_range("2026-01-01", periods=600, freq="10min")})
    with pytest.raises(ConfigError, match=r"^seasonal_naive parameter season: 'soon' is not a "
                                          r"duration"):
        get_forecaster("seasonal_naive", season="soon").fit(panel)
    with pytest.raises(ConfigError, match=r"^seasonal_naive parameter season='0' must be"):
        get_forecaster("seasonal_naive", season="0").fit(panel)
