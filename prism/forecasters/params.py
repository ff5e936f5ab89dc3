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
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Callable

from prism.errors import ConfigError
from prism.forecasters import FORECASTERS

__all__ = ["typed_params"]

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def typed_params(alias: str, params: dict[str, str]) -> dict[str, object]:
    """Hyperparameters given as text, converted to the type of each one (module docstring).

    Args:
        alias: the forecaster's alias; an unknown alias gets its parameters back as they are
            (:func:`~prism.forecasters.get_forecaster` names the known aliases).
        params: parameter name -> its value as text.

    Returns:
        Parameter name -> typed value, ready for ``get_forecaster(alias, **typed)``.

    Raises:
        ConfigError: for a parameter the forecaster does not take (listing those it does), or
            a value that is not of the parameter's type.
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
    return out


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
            what = f"comma-separated {_item_kind(default, options).__name__} values"
        else:
            what = f"a {kind.__name__}"
        like = f" like {default!r}" if default is not None else " or none"
        raise ConfigError(f"--param {name}={text!r}: expected {what}{like}") from exc


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


#: How text becomes each scalar type.
_PARSE: dict[type, Callable[[str], object]] = {bool: _parse_bool, int: int, float: float,
                                               str: str}
