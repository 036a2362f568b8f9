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
by parameter (the mismatch report does exactly that). A key stated twice in one mapping is refused (plain YAML
keeps the last one silently), and every value is checked by `CellCfg.validate` (types, finite values, physical
ranges). Errors name the file and the field. `check_world` is that check, the only one: `load_world` runs it on each
file, the truth sampler on each mapping it writes, and whatever builds from the cell relies on it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from r2s2r.cell.spec import CellCfg
from r2s2r.core import ConfigError, apply_overrides, configs_dir, is_named_collection, item_key, require

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
    "lights.*.intensity",
    "lights.*.colour",
    "lighting.intensity_range",
    "lighting.tint",
)


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


class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where installed
    """YAML's safe loader, refusing a mapping that states a key twice, integers no float can hold, and documents
    nested or (through aliases) expanded far beyond any world file (a few levels deep, a few hundred values)."""

    MAX_DEPTH = 32
    MAX_NODES = 100_000

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        stack, count = [(node, 1)], 0
        while stack:  # walks aliases as often as they are used, so self-referencing or exploding documents stop here
            item, depth = stack.pop()
            count += 1
            if depth > self.MAX_DEPTH or count > self.MAX_NODES:
                raise ConfigError(f"line {item.start_mark.line + 1}: the document is nested or expanded beyond "
                                  f"{self.MAX_DEPTH} levels or {self.MAX_NODES} values; expected a world file")
            if isinstance(item, yaml.SequenceNode):
                stack.extend((child, depth + 1) for child in item.value)
            elif isinstance(item, yaml.MappingNode):
                stack.extend((child, depth + 1) for pair in item.value for child in pair)
        return self.construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; explicit keys may override it
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                seen = key in first_line
            except TypeError:  # an unhashable key: the base constructor reports it
                break
            if seen:
                raise ConfigError(f"line {line}: key {key!r} is given twice in one mapping (first on line "
                                  f"{first_line[key]}); expected each key once")
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = super().construct_yaml_int(node)
        if abs(value) >= 2**63:
            raise ConfigError(f"line {node.start_mark.line + 1}: integer {node.value}: expected a magnitude below "
                              "2**63")
        return value


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeyLoader.construct_yaml_int)


def read_yaml(raw: bytes | str, path: os.PathLike | str) -> Any:
    """Parse YAML text with `UniqueKeyLoader`; every problem is a ConfigError naming `path`."""
    try:
        return yaml.load(raw, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None


@dataclass(frozen=True)
class World:
    name: str
    kind: str
    path: Path
    sha256: str
    cell: CellCfg
    data: dict  # the file as read, for reports


def load_world(name_or_path: str | os.PathLike, base: CellCfg | None = None) -> World:
    """Read a world file and check it with `check_world` on top of `base` (the design cell by default); every
    error names the file."""
    path = world_path(name_or_path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the world file ({e.strerror})") from None
    data = read_yaml(raw, path)
    try:
        cell = check_world(data, base)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return World(data["name"], data["kind"], path, hashlib.sha256(raw).hexdigest(), cell, data)


def check_world(data: Any, base: CellCfg | None = None) -> CellCfg:
    """The one check of a world's content (a file as read, or a mapping about to be written as one): its top-level
    fields, its `cell` section as overrides of `base` (the design cell by default) stating every calibrated
    parameter, and the resulting cell through `CellCfg.validate`. Returns that cell; a ConfigError names the field.
    Whoever uses the cell afterwards relies on this check and does not repeat it."""
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping with keys name, kind, cell")
    for key in ("name", "kind", "cell"):
        if key not in data:
            raise ConfigError(f"missing field {key!r}")
    unknown = set(data) - {"name", "kind", "description", "cell", "provenance"}
    if unknown:
        raise ConfigError(f"unknown top-level field(s) {', '.join(sorted(map(repr, unknown)))}; expected name, kind, "
                          "description, cell, provenance")
    require(isinstance(data["name"], str) and bool(data["name"]), "name", data["name"], "a non-empty string")
    require(data["kind"] in KINDS, "kind", data["kind"], f"one of {', '.join(KINDS)}")
    require(isinstance(data.get("description", ""), str), "description", data.get("description"), "a string")
    require(isinstance(data.get("provenance", {}), dict), "provenance", data.get("provenance"), "a mapping")
    cell = apply_overrides(base or CellCfg(), data["cell"], "cell")
    check_calibrated_present(cell, data["cell"])
    try:
        return cell.validate()
    except ConfigError as e:  # its messages start with the field's path in the cell section
        raise ConfigError(f"cell.{e}") from None


# ----------------------------------------------------------------------------------------------------------------
def calibrated_paths(cell: CellCfg) -> list[str]:
    """`CALIBRATED` with every `*` expanded to the cell's item names."""
    out = []
    for pattern in CALIBRATED:
        head, star, tail = pattern.partition(".*")
        if not star:
            out.append(pattern)
            continue
        items = getattr(cell, head)
        names = list(items) if isinstance(items, dict) else [item_key(x) for x in items]
        out.extend(f"{head}.{name}{tail}" for name in names)
    return out


def get_path(obj: Any, dotted: str) -> Any:
    """The value at a dotted path, resolving named collections by item name."""
    for part in dotted.split("."):
        if is_named_collection(obj):
            obj = next(x for x in obj if item_key(x) == part)
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
