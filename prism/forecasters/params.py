"""Hyperparameters given as text (``--param season=1w``, the API's ``param``), typed.

Every hyperparameter is a keyword-only ``__init__`` argument of its forecaster; its text is
converted to the type of its default, or, where the default is ``None``, to the type its
annotation names (``d: int | None = None`` takes ``d=1`` as the number 1):

- ``bool``: ``true``/``false``, ``yes``/``no``, ``1``/``0`` (any case);
- ``int``, ``float``: a number;
- a tuple or sequence: comma-separated items, each typed as the annotation's items
  (``seasonal_order=0,1,1`` is ``(0, 1, 1)``, ``periods=1d,1w`` is ``("1d", "1w")``);
- text as it is otherwise;
- ``none`` (any case) is ``None`` where the parameter may be ``None`` (its default is, or its
  annotation allows it).

**Limits.** Hyperparameters that come from a request to the API are bounded
(``typed_params(..., bounded=True)``): :data:`PARAM_LIMITS` holds, per forecaster, the
smallest and largest value of each parameter whose cost grows with it (iterations, rows,
epochs, sizes, windows) or that its library takes only within a range (learning rates,
seeds); ``nan`` is refused for every number, bounded or not. A number is compared with
``least``/``most`` (an integer given to a duration-or-steps parameter is a number of steps),
a duration with ``longest``, each item of a sequence on its own; ``none`` is refused where
it lifts the bound (ARIMA's whole-series ``fit_window``).
The CLI fits on the user's own machine and is not bounded.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prism.errors import ConfigError
from prism.forecasters import FORECASTERS
from prism.schema import parse_duration

__all__ = ["PARAM_LIMITS", "Limit", "check_limits", "typed_params"]

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


@dataclass(frozen=True)
class Limit:
    """The range a request may give one hyperparameter (``None``: no bound on that side).

    Attributes:
        least: the smallest number.
        most: the largest number (for a duration, the most steps it may be given as).
        longest: the longest duration, e.g. ``1w``.
        none: whether ``None`` may be given (not where it means "unbounded").
    """

    least: float | None = None
    most: float | None = None
    longest: str | None = None
    none: bool = True


#: A duration given as a number of steps is bounded as if the steps were 10 minutes long.
_STEP_S = 600


def _count(most: float | None = None, least: float = 1) -> Limit:
    """A count (iterations, rows, epochs, sizes) from ``least`` to ``most``."""
    return Limit(least=least, most=most)


def _span(longest: str, *, none: bool = True) -> Limit:
    """A duration up to ``longest``, or as many 10-minute steps (``none``: may be ``None``)."""
    steps = parse_duration(longest).total_seconds() // _STEP_S
    return Limit(least=1, most=steps, longest=longest, none=none)


#: A seed: what numpy, scikit-learn and torch take.
_SEED = Limit(least=0, most=2**32 - 1)

#: Per forecaster alias, the range of each hyperparameter whose cost grows with it, or that
#: its library refuses or turns into NaN forecasts outside a range (a learning rate of 0 or
#: 1e308, a negative seed), for the requests of the API (the defaults and ``test_params()``
#: are well inside). One table: change a bound here.
PARAM_LIMITS: dict[str, dict[str, Limit]] = {
    "seasonal_naive": {"season": _span("8w")},
    "window_average": {"window": _span("8w")},
    "time_of_day_quantile": {"lookback": _span("26w")},
    "ets": {"season": _span("1w"), "fit_window": _span("26w")},
    "arima": {"max_p": _count(5, least=0), "max_d": _count(2, least=0),
              "max_q": _count(5, least=0), "d": _count(2, least=0),
              "seasonal_order": _count(2, least=0), "season": _span("1w"),
              "fit_window": _span("8w", none=False), "time_budget": Limit(least=0.1, most=60)},
    "theta": {"season": _span("1w"), "theta": Limit(least=1, most=100)},
    "mstl": {"periods": _span("2w"), "iterate": _count(10), "jump": _count()},
    "gbm": {"max_iter": _count(1000), "max_rows": _count(100_000),
            "max_leaf_nodes": _count(255, least=2), "min_samples_leaf": _count(),
            "n_jobs": _count(4), "max_horizon": _span("1w"),
            "learning_rate": Limit(least=1e-4, most=1), "l2_regularization": Limit(least=0,
                                                                                  most=1e6),
            "random_state": _SEED},
    "prism": {"lookback": _span("1w"), "horizon": _span("1w"), "n_atoms": _count(64),
              "sparsity": _count(8), "stack_window": _span("4w"),
              "combiner_window": _span("4w"), "combiner_trim_horizon": _span("1w"),
              "rnn_hidden_size": _count(256), "rnn_epochs": _count(50),
              "combiner_power": Limit(least=0, most=10), "combiner_trim": Limit(least=1),
              "random_state": _SEED},
    "gru": {"lookback": _span("2w"), "horizon": _span("2w"), "resolution": _span("1w"),
            "hidden_size": _count(256), "num_layers": _count(4), "epochs": _count(50),
            "batch_size": _count(1024), "patience": _count(20), "max_windows": _count(4096),
            "learning_rate": Limit(least=1e-6, most=1), "random_state": _SEED},
}
PARAM_LIMITS["lstm"] = PARAM_LIMITS["gru"]


def typed_params(alias: str, params: dict[str, str], *, bounded: bool = False
                 ) -> dict[str, object]:
    """Hyperparameters given as text, converted to the type of each one (module docstring).

    Args:
        alias: the forecaster's alias; an unknown alias gets its parameters back as they are
            (:func:`~prism.forecasters.get_forecaster` names the known aliases).
        params: parameter name -> its value as text.
        bounded: also check the values against :data:`PARAM_LIMITS` (requests to the API).

    Returns:
        Parameter name -> typed value, ready for ``get_forecaster(alias, **typed)``.

    Raises:
        ConfigError: for a parameter the forecaster does not take (listing those it does), a
            value that is not of the parameter's type, or (``bounded``) one out of its range.
    """
    if alias not in FORECASTERS:
        return dict(params)  # get_forecaster names the known aliases
    cls = FORECASTERS[alias]
    defaults = cls().get_params()
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # an annotation that cannot be resolved: defaults only
        hints = {}
    out: dict[str, object] = {}
    for name, text in params.items():
        if name not in defaults:
            takes = ", ".join(sorted(defaults)) or "none"
            raise ConfigError(f"{alias} has no parameter {name!r}; it takes: {takes}")
        out[name] = _typed(name, text, defaults[name], hints.get(name))
    if bounded:
        check_limits(alias, out)
    return out


def check_limits(alias: str, params: Mapping[str, object]) -> None:
    """Check typed hyperparameters against :data:`PARAM_LIMITS`.

    Args:
        alias: the forecaster's alias (one without limits passes).
        params: parameter name -> typed value.

    Raises:
        ConfigError: naming the parameter, its value and the limit it is past.
    """
    limits = PARAM_LIMITS.get(alias, {})
    for name, value in params.items():
        limit = limits.get(name)
        if limit is None:
            continue
        if value is None:
            if not limit.none:
                raise ConfigError(f"{alias} parameter {name}=none lifts its limit; a request "
                                  f"may give {_describe(limit)}")
            continue
        items = value if isinstance(value, tuple | list) else (value,)
        for item in items:
            _check_item(alias, name, value, item, limit)


def _check_item(alias: str, name: str, value: object, item: object, limit: Limit) -> None:
    """One value (or item of a sequence) against its limit."""
    shown = ",".join(map(str, value)) if isinstance(value, tuple | list) else str(value)
    what = f"{alias} parameter {name}={shown}"
    if isinstance(item, str) and item.strip().isdigit():
        item = int(item)  # a duration given as steps
    if isinstance(item, bool):
        return
    if isinstance(item, int | float):
        if limit.least is not None and item < limit.least:
            raise ConfigError(f"{what} is out of range: a request may give at least "
                              f"{limit.least:,g}")
        if limit.most is not None and item > limit.most:
            raise ConfigError(f"{what} is out of range: a request may give at most "
                              f"{limit.most:,g}{' steps' if limit.longest else ''}")
    elif isinstance(item, str) and limit.longest is not None:
        try:
            longer = parse_duration(item) > parse_duration(limit.longest)
        except ConfigError as exc:
            raise ConfigError(f"{what}: {exc}") from None
        if longer:
            raise ConfigError(f"{what} is out of range: a request may give at most "
                              f"{limit.longest}")


def _describe(limit: Limit) -> str:
    """A limit in words: ``1 to 1,000``, ``at most 1w (or 1,008 steps)``."""
    if limit.longest is not None:
        return f"at most {limit.longest} (or {limit.most:,g} steps)"
    if limit.most is not None:
        return f"{limit.least:,g} to {limit.most:,g}" if limit.least is not None else (
            f"at most {limit.most:,g}")
    return f"at least {limit.least:,g}"


def _typed(name: str, text: str, default: object, hint: object) -> object:
    options = _union_args(hint)
    if text.strip().lower() == "none" and (default is None or type(None) in options):
        return None
    kind = _kind(default, options)
    try:
        if kind is tuple:
            item = _item_kind(default, options)
            return tuple(_PARSE[item](v.strip()) for v in text.split(",") if v.strip())
        return _PARSE[kind](text)
    except ValueError as exc:
        if kind is tuple:
            what = f"comma-separated {_WORDS[_item_kind(default, options)][1]}"
        else:
            what = _WORDS[kind][0]
        like = f" like {default!r}" if default is not None else " or none"
        # neutral words: the CLI (--param) and the API (param=, "params") both say this
        raise ConfigError(f"parameter {name}={text!r}: expected {what}{like}") from exc


#: How messages name each type (one, many).
_WORDS: dict[type, tuple[str, str]] = {
    bool: ("true or false", "true/false values"), int: ("a whole number", "whole numbers"),
    float: ("a number", "numbers"), str: ("text", "names")}


def _union_args(hint: object) -> tuple[object, ...]:
    """The members of a union annotation (``int | None``), or the annotation itself."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,) if hint is not None else ()


def _kind(default: object, options: tuple[object, ...]) -> type:
    """What the text becomes: the default's type, else the annotation's first non-None one."""
    if default is not None:
        if isinstance(default, tuple | list):
            return tuple
        return type(default) if type(default) in _PARSE else str
    for option in options:
        origin = typing.get_origin(option) or option
        if origin in (tuple, list, collections.abc.Sequence):
            return tuple
        if isinstance(origin, type) and origin in _PARSE:
            return origin
    return str


def _item_kind(default: object, options: tuple[object, ...]) -> type:
    """The type of a sequence parameter's items (``tuple[int, int, int]``: ``int``)."""
    for option in options:
        args = [a for a in typing.get_args(option) if a is not Ellipsis]
        if args and all(a is args[0] for a in args) and isinstance(args[0], type) and (
                args[0] in _PARSE):
            return args[0]
    if isinstance(default, tuple | list) and default and type(default[0]) in _PARSE:
        return type(default[0])
    return str


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(text)
    return value in _TRUE


def _parse_float(text: str) -> float:
    value = float(text)
    if value != value:  # NaN: no forecaster takes it, and it passes every range check
        raise ValueError(text)
    return value


#: How text becomes each scalar type.
_PARSE: dict[type, Callable[[str], object]] = {bool: _parse_bool, int: int,
                                               float: _parse_float, str: str}
