"""The base layer every package builds on; it imports nothing else of r2s2r, so any module can use it.

* `ConfigError` and the checks that raise it: a configuration value outside what is accepted, the message naming
  the field, the value and what was expected.
* Typed overrides of frozen config dataclasses, from nested mappings (world files) or `a.b.c=value` arguments.
  One path for both: a dotted command-line override becomes a nested mapping and goes through the same type checks
  as a world file. Collections of named items (arms, cameras, objects, ...) are addressed by item name.
* The project's `configs/` and `assets/` folders.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

# The repository root (core.py is source/r2s2r/r2s2r/core.py); installed copies point the folders elsewhere.
_ROOT = Path(__file__).resolve().parents[3]


class ConfigError(ValueError):
    """A configuration value (a world file, a training or run config, a command-line option) is outside what is
    accepted; the message names the field."""


def require(ok: bool, fieldname: str, value: object, expected: str) -> None:
    if not ok:
        raise ConfigError(f"{fieldname} = {value!r}: expected {expected}")


def check_number(fieldname: str, value: object, lo: float, hi: float, unit: str = "", *, n: int | None = None,
                 integer: bool = False, lo_open: bool = False, hi_open: bool = False) -> None:
    """`value` is a number (an integer if `integer`) between `lo` and `hi` (inclusive unless an end is open); with
    `n`, a list of `n` such numbers.

    Every numeric field of a world file and of a training config goes through here. The bounds are finite, so NaN
    and +-inf fail the range test; strings, booleans and lists of the wrong length fail the type test. Errors name
    the field (the element, for a list), the value and the range (`optim.lr = inf: expected a finite number in
    (0, 1]`)."""
    if n is not None:
        require(isinstance(value, tuple | list) and len(value) == n, fieldname, value, f"a list of {n} numbers")
        for i, v in enumerate(value):  # type: ignore[arg-type]
            check_number(f"{fieldname}[{i}]", v, lo, hi, unit, integer=integer, lo_open=lo_open, hi_open=hi_open)
        return
    kind = numbers.Integral if integer else numbers.Real
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if ok:
        above = lo < value if lo_open else lo <= value  # type: ignore[operator]
        below = value < hi if hi_open else value <= hi  # type: ignore[operator]
        ok = bool(above and below)
    interval = f"{'(' if lo_open else '['}{_bound(lo)}, {_bound(hi)}{')' if hi_open else ']'}"
    require(ok, fieldname, value, f"{'an integer' if integer else 'a finite number'} in {interval}"
            + (f" {unit}" if unit else ""))


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def configs_dir() -> Path:
    """The project's `configs/` folder (overridable with R2S2R_CONFIGS for installed copies)."""
    env = os.environ.get("R2S2R_CONFIGS")
    return Path(env) if env else _ROOT / "configs"


def assets_dir() -> Path:
    """The project's `assets/` folder (overridable with R2S2R_ASSETS for installed copies)."""
    env = os.environ.get("R2S2R_ASSETS")
    return Path(env) if env else _ROOT / "assets"


def item_key(item: Any) -> str:
    return getattr(item, "name", None) or getattr(item, "colour")


def is_named_collection(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and dataclasses.is_dataclass(value[0])


def apply_overrides(obj: Any, overrides: Any, where: str) -> Any:
    """A copy of dataclass `obj` with `overrides` (a nested mapping) applied, every value type-checked."""
    if not isinstance(overrides, dict):
        raise ConfigError(f"{where} = {overrides!r}: expected a mapping of field names to values")
    fields = {f.name for f in dataclasses.fields(obj)}
    changes = {}
    for key, value in overrides.items():
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown field; expected one of {', '.join(sorted(fields))}")
        changes[key] = _convert(getattr(obj, key), value, f"{where}.{key}")
    return dataclasses.replace(obj, **changes)


def parse_dotted(arguments: Iterable[str], where: str = "override") -> dict:
    """`["env.image_size=[64,64]", "generator.nn_k=5"]` -> nested mapping; values are parsed as YAML."""
    out: dict = {}
    for arg in arguments:
        key, eq, text = arg.partition("=")
        if not eq or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"{where} {arg!r}: expected key.path=value (e.g. env.image_size=[64,64])")
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"{where} {arg!r}: the value is not valid YAML ({e})") from None
        # No setting is NaN or infinite, and range checks written `x < 0` would let NaN (and `x >= 0` +inf) through:
        # such values (YAML's .nan, .inf, 1.0e999) are refused here, where every command-line override arrives.
        bad = _non_finite(value)
        if bad is not None:
            raise ConfigError(f"{where} {arg!r}: {bad} is not a finite number; expected finite numbers")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where} {arg!r}: {part!r} is set to a value and overridden inside as well")
        node[leaf] = value
    return out


def _non_finite(value: Any) -> float | None:
    """The first NaN or infinity in a parsed value (nested lists and mappings included), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((bad for bad in map(_non_finite, items) if bad is not None), None)


def _convert(current: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(current):
        return apply_overrides(current, value, where)
    if is_named_collection(current):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} = {value!r}: expected a mapping from item name to overrides")
        items = {item_key(x): x for x in current}
        for name, sub in value.items():
            if name not in items:
                raise ConfigError(f"{where}.{name}: no such item; expected one of {', '.join(items)}")
            items[name] = apply_overrides(items[name], sub, f"{where}.{name}")
        return tuple(items.values())
    if isinstance(current, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} = {value!r}: expected a mapping")
        merged = dict(current)
        open_keys = not current or isinstance(next(iter(current.values())), tuple)  # e.g. colours: name -> RGBA
        for name, sub in value.items():
            if name not in current and not open_keys:
                raise ConfigError(f"{where}.{name}: unknown key; expected one of {', '.join(map(str, current))}")
            merged[name] = _convert(current.get(name, (0.0, 0.0, 0.0, 1.0)), sub, f"{where}.{name}")
        return merged
    if isinstance(current, tuple):
        names = all(isinstance(c, str) for c in current)  # a list of names (e.g. cameras) may change length
        if not isinstance(value, list | tuple) or (not names and len(value) != len(current)):
            expected = "a list of names" if names else f"a list of {len(current)} numbers"
            raise ConfigError(f"{where} = {value!r}: expected {expected}")
        if names:
            return tuple(_convert("", v, f"{where}[{i}]") for i, v in enumerate(value))
        return tuple(_convert(c, v, f"{where}[{i}]") for i, (c, v) in enumerate(zip(current, value)))
    if current is None:  # an optional field that is unset: a plain value sets it
        if isinstance(value, dict | list):
            raise ConfigError(f"{where} = {value!r}: expected a single value")
        return value
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} = {value!r}: expected true or false")
        return value
    if isinstance(current, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} = {value!r}: expected an integer")
        return value
    if isinstance(current, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} = {value!r}: expected a number")
        try:
            return float(value)
        except OverflowError:  # an integer no float holds
            raise ConfigError(f"{where} = an integer of {len(str(abs(value)))} digits: expected a number of "
                              f"magnitude below 1e308") from None
    if isinstance(current, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where} = {value!r}: expected a string")
        return value
    raise ConfigError(f"{where}: cannot be overridden")
