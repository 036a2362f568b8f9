"""World files: a cell's calibratable parameters as YAML overrides of `CellCfg`, loaded through one validated path.

A world file looks like::

    name: grounded
    kind: grounded            # nominal | ungrounded | grounded | reality
    description: ...
    cell:                     # overrides of CellCfg fields, nested as the dataclasses are
      arms: {right: {kp: [...], latency_steps: 3}}
      cameras: {head_left: {lens: {fx: 0.86}}}
      objects: {cube: {mass: 0.083}}

Collections of named items (arms, cameras, objects, novel_objects, lights, bins) are addressed by name. Every
parameter listed in `CALIBRATED` must be stated explicitly, so that any two world files can be compared parameter
by parameter (the mismatch report does exactly that). Errors name the file and the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from r2s2r.cell.spec import CellCfg, ConfigError

KINDS = ("nominal", "ungrounded", "grounded", "reality")

# What calibration estimates, as dotted paths into the `cell` section (`*` = every item of a named collection).
# The reality file states the truth of each; grounded and ungrounded files state their estimate of it.
CALIBRATED: tuple[str, ...] = (
    "cameras.*.lens.fx",
    "cameras.*.lens.fy",
    "cameras.*.lens.cx",
    "cameras.*.lens.cy",
    "cameras.*.lens.distortion",
    "cameras.*.lens.blur_sigma",
    "cameras.*.lens.exposure",
    "cameras.head_left.pose.pos",
    "cameras.head_left.pose.rpy",
    "cameras.head_right.pose.pos",
    "cameras.head_right.pose.rpy",
    "arms.right.base.pos",
    "arms.right.base.rpy",
    "arms.right.link_length_offsets",
    "arms.right.kp",
    "arms.right.joint_damping",
    "arms.right.joint_frictionloss",
    "arms.right.latency_steps",
    "belt.center",
    "belt.yaw",
    "belt.speed_scale",
    "objects.*.mass",
    "novel_objects.*.mass",
    "colours.*",
)


def configs_dir() -> Path:
    """The project's `configs/` folder (overridable with R2S2R_CONFIGS for installed copies)."""
    env = os.environ.get("R2S2R_CONFIGS")
    return Path(env) if env else Path(__file__).resolve().parents[4] / "configs"


def world_path(name_or_path: str | os.PathLike) -> Path:
    """A registered world name (`configs/world/<name>.yaml`) or a path to a world file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        return p
    registered = configs_dir() / "world" / f"{name_or_path}.yaml"
    if not registered.exists():
        known = sorted(f.stem for f in (configs_dir() / "world").glob("*.yaml"))
        raise ConfigError(f"world = {str(name_or_path)!r}: expected a .yaml path or one of {known}")
    return registered


@dataclass(frozen=True)
class World:
    name: str
    kind: str
    path: Path
    sha256: str
    cell: CellCfg
    data: dict  # the file as read, for reports


def load_world(name_or_path: str | os.PathLike, base: CellCfg | None = None) -> World:
    """Read, check and apply a world file on top of `base` (the design cell by default)."""
    path = world_path(name_or_path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the world file ({e.strerror})") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with keys name, kind, cell")
    for key in ("name", "kind", "cell"):
        if key not in data:
            raise ConfigError(f"{path}: missing field {key!r}")
    unknown = set(data) - {"name", "kind", "description", "cell", "provenance"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level field(s) {sorted(unknown)}; expected name, kind, "
                          "description, cell, provenance")
    if data["kind"] not in KINDS:
        raise ConfigError(f"{path}: kind = {data['kind']!r}: expected one of {', '.join(KINDS)}")
    try:
        cell = apply_overrides(base or CellCfg(), data["cell"], "cell")
        check_calibrated_present(cell, data["cell"])
        cell.validate()
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return World(str(data["name"]), data["kind"], path, hashlib.sha256(raw).hexdigest(), cell, data)


# ----------------------------------------------------------------------------------------------------------------
def _item_key(item: Any) -> str:
    return getattr(item, "name", None) or getattr(item, "colour")


def _is_named_collection(value: Any) -> bool:
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


def _convert(current: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(current):
        return apply_overrides(current, value, where)
    if _is_named_collection(current):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} = {value!r}: expected a mapping from item name to overrides")
        items = {_item_key(x): x for x in current}
        for name, sub in value.items():
            if name not in items:
                raise ConfigError(f"{where}.{name}: no such item; expected one of {', '.join(items)}")
            items[name] = apply_overrides(items[name], sub, f"{where}.{name}")
        return tuple(items.values())
    if isinstance(current, dict):  # colours: name -> RGBA
        if not isinstance(value, dict):
            raise ConfigError(f"{where} = {value!r}: expected a mapping")
        merged = dict(current)
        for name, sub in value.items():
            merged[name] = _convert(current.get(name, (0.0, 0.0, 0.0, 1.0)), sub, f"{where}.{name}")
        return merged
    if isinstance(current, tuple):
        if not isinstance(value, list | tuple) or len(value) != len(current):
            raise ConfigError(f"{where} = {value!r}: expected a list of {len(current)} numbers")
        return tuple(_convert(c, v, f"{where}[{i}]") for i, (c, v) in enumerate(zip(current, value)))
    if current is None and isinstance(value, dict):
        raise ConfigError(f"{where}: cannot be set from a world file")
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
        return float(value)
    if isinstance(current, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where} = {value!r}: expected a string")
        return value
    raise ConfigError(f"{where}: cannot be set from a world file")


def calibrated_paths(cell: CellCfg) -> list[str]:
    """`CALIBRATED` with every `*` expanded to the cell's item names."""
    out = []
    for pattern in CALIBRATED:
        head, star, tail = pattern.partition(".*")
        if not star:
            out.append(pattern)
            continue
        items = getattr(cell, head)
        names = list(items) if isinstance(items, dict) else [_item_key(x) for x in items]
        out.extend(f"{head}.{name}{tail}" for name in names)
    return out


def get_path(obj: Any, dotted: str) -> Any:
    """The value at a dotted path, resolving named collections by item name."""
    for part in dotted.split("."):
        if _is_named_collection(obj):
            obj = next(x for x in obj if _item_key(x) == part)
        elif isinstance(obj, dict):
            obj = obj[part]
        else:
            obj = getattr(obj, part)
    return obj


def check_calibrated_present(cell: CellCfg, section: dict) -> None:
    for dotted in calibrated_paths(cell):
        node: Any = section
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"cell.{dotted}: missing; every world file states each calibrated parameter")
            node = node[part]


def world_to_yaml(world_data: dict) -> str:
    return yaml.safe_dump(world_data, sort_keys=False, default_flow_style=None, width=120)
