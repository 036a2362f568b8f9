"""Sampled truths: plausible reality files drawn around the nominal world, for testing calibration on many cells.

`sample_truth(seed)` perturbs every parameter calibration estimates and every residual-gap parameter the twin has
(what calibration does not estimate) by an amount drawn from `RANGES`, and returns a world mapping of kind
`reality`. `scripts/sample_truths.py` writes such files; like `configs/world/reality*.yaml`, only the twin, the
mismatch report and tests read them. Calibration never imports this module: an estimator that knew the ranges
could be tuned to them.

Every range states where its numbers come from. The rule for parameters both truth files move: the largest
perturbation is about twice the largest deviation from the ungrounded world in `reality.yaml` and
`reality_alt.yaml`, the smallest about half their smallest, so every sample differs from the nominal. A perturbation
has a random sign unless the nominal sits at a physical bound (no blur, no latency, no noise); a drawn sign that
would leave a value's valid range (an RGB channel above 1) is flipped.
"""

from __future__ import annotations

import copy
import zlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from r2s2r.cell.spec import CellCfg
from r2s2r.cell.world import check_world, get_path, load_world, world_to_yaml
from r2s2r.core import apply_overrides, item_key

Mode = Literal["add", "factor"]


@dataclass(frozen=True)
class Range:
    """A parameter's perturbation: its magnitude m lies in [low, high].

    `mode` "add": value = nominal +- m. "factor": value = nominal * (1 + m) or nominal / (1 + m), so a large m
    can neither turn a gain negative nor favour one direction. `signs` "+" only adds (nominal at a lower bound).
    Integer parameters (latency, clutter) draw integer m. `limits` are the value's valid range (where flipping the
    sign is needed to stay inside it). `gap`: a residual-gap parameter (the twin has it, calibration does not
    estimate it)."""

    low: float
    high: float
    unit: str
    mode: Mode
    why: str
    signs: Literal["+-", "+"] = "+-"
    limits: tuple[float, float] | None = None
    gap: bool = False


TRUTHS = "reality.yaml/reality_alt.yaml"
HEADS = ("head_left", "head_right")
WRISTS = ("right_wrist", "left_wrist")
RGB = (0.0, 1.0)

# Parameter path -> range. A path is dotted as in world files (`*` = every item of a collection); `[i,j]` picks
# elements of a list, the others staying nominal. Deviations quoted are from configs/world/ungrounded.yaml.
RANGES: dict[str, Range] = {
    # -- cameras (calibration: intrinsics, distortion, blur, exposure; head extrinsics) ---------------------------
    "cameras.*.lens.fx": Range(0.0045, 0.055, "relative", "factor",
                               f"focal length: 2x the largest deviation in {TRUTHS} (2.7 %), half the smallest (0.95 %)"),
    "cameras.*.lens.fy": Range(0.002, 0.038, "relative", "factor",
                               f"focal length: 2x the largest deviation in {TRUTHS} (1.9 %), half the smallest (0.44 %)"),
    "cameras.*.lens.cx": Range(0.002, 0.024, "image width", "add",
                               f"principal point: 2x the largest offset in {TRUTHS} (0.012), half the smallest"),
    "cameras.*.lens.cy": Range(0.002, 0.024, "image height", "add",
                               f"principal point: 2x the largest offset in {TRUTHS} (0.012), half the smallest"),
    # Fisheye k1-k3 only: pinhole lenses ignore distortion and calibration holds k4 at 0 (both truths keep it 0).
    **{f"cameras.{c}.lens.distortion[0]": Range(0.0045, 0.028, "(k1)", "add",
                                                f"2x the largest k1 deviation in {TRUTHS} (0.014)") for c in WRISTS},
    **{f"cameras.{c}.lens.distortion[1]": Range(0.00045, 0.0064, "(k2)", "add",
                                                f"2x the largest k2 deviation in {TRUTHS} (0.0032)") for c in WRISTS},
    **{f"cameras.{c}.lens.distortion[2]": Range(0.0002, 0.0022, "(k3)", "add",
                                                f"2x the largest k3 deviation in {TRUTHS} (0.0011)") for c in WRISTS},
    "cameras.*.lens.blur_sigma": Range(0.25, 2.2, "px at 128 px", "add",
                                       f"nominal lenses are sharp; {TRUTHS} blur 0.5-1.1 px, 2x the largest",
                                       signs="+"),
    "cameras.*.lens.exposure": Range(0.025, 0.24, "relative", "factor",
                                     f"2x the largest exposure deviation in {TRUTHS} (12 %), half the smallest (5 %)"),
    **{f"cameras.{c}.pose.pos": Range(0.0044, 0.032, "m", "add",
                                      f"head rig: 2x the largest offset per axis in {TRUTHS} (16 mm)") for c in HEADS},
    **{f"cameras.{c}.pose.rpy": Range(0.004, 0.024, "rad", "add",
                                      f"head rig: 2x the largest angle in {TRUTHS} (0.012 rad)") for c in HEADS},
    # -- registration: robot base and conveyor -------------------------------------------------------------------
    "arms.right.base.pos[0,1]": Range(0.004, 0.048, "m", "add",
                                      f"2x the largest horizontal base offset in {TRUTHS} (23.9 mm, alt x)"),
    "arms.right.base.pos[2]": Range(0.00125, 0.007, "m", "add",
                                    f"2x the largest base height offset in {TRUTHS} (3.5 mm)"),
    "arms.right.base.rpy[0,1]": Range(0.0005, 0.003, "rad", "add",
                                      "chosen: both truths keep the base level, but registration and the kinematic "
                                      "fit estimate a tilt; 3 mrad is a base levelled to 3 mm per metre"),
    "arms.right.base.rpy[2]": Range(0.0048, 0.024, "rad", "add",
                                    f"2x the largest base yaw in {TRUTHS} (0.012 rad)"),
    "belt.center[0,1]": Range(0.00375, 0.0224, "m", "add",
                              f"2x the largest horizontal conveyor offset in {TRUTHS} (11.2 mm)"),
    "belt.center[2]": Range(0.0014, 0.006, "m", "add", f"2x the largest conveyor height offset in {TRUTHS} (3 mm)"),
    "belt.yaw": Range(0.0035, 0.018, "rad", "add", f"2x the largest conveyor yaw in {TRUTHS} (0.009 rad)"),
    # -- kinematics and drives -----------------------------------------------------------------------------------
    "arms.right.link_length_offsets": Range(0.00045, 0.0064, "m", "add",
                                            f"2x the largest link deviation in {TRUTHS} (3.2 mm); link 7, which "
                                            "both truths keep at 0, shares the tolerance"),
    "arms.right.kp": Range(0.035, 0.30, "relative", "factor",
                           f"2x the largest gain deviation in {TRUTHS} (15 %), half the smallest (7.5 %)"),
    "arms.right.joint_damping": Range(0.05, 3.0, "relative", "factor",
                                      f"{TRUTHS} damping is 0.4-1.6x nominal: 2x the largest (x2.5, m = 1.5)"),
    "arms.right.joint_frictionloss": Range(0.055, 4.0, "relative", "factor",
                                           f"{TRUTHS} friction is 0.5-3x nominal: 2x the largest (x3, m = 2)"),
    "arms.right.latency_steps": Range(3, 18, "physics steps", "add",
                                      f"no latency nominal; {TRUTHS} have 6 and 9 steps, 2x the largest "
                                      "(the world file allows 20)", signs="+"),
    # -- belt and objects ----------------------------------------------------------------------------------------
    "belt.speed_scale": Range(0.032, 0.14, "relative", "factor",
                              f"2x the largest speed error in {TRUTHS} (7 %), half the smallest (6.4 %)"),
    "belt.speed_jitter": Range(0.01, 0.06, "(relative std)", "add",
                               f"a steady belt nominal; {TRUTHS} jitter 2-3 %, 2x the largest", signs="+"),
    **{f"{group}.*.mass": Range(0.03, 0.33, "relative", "factor",
                                f"2x the largest mass deviation in {TRUTHS} (16 %), half the smallest (6 %)")
       for group in ("objects", "novel_objects")},
    # -- appearance ----------------------------------------------------------------------------------------------
    "colours.*[0,1,2]": Range(0.01, 0.2, "RGB", "add",
                              f"2x the largest channel deviation in {TRUTHS} (0.1); alpha stays 1", limits=RGB),
    "lighting.intensity_range": Range(0.08, 0.6, "intensity factor", "add",
                                      f"each end: 2x the largest in {TRUTHS} (0.3, alt low end); sorted low <= high"),
    "lighting.tint": Range(0.025, 0.16, "(relative)", "add",
                           f"constant light nominal; {TRUTHS} tint 0.05-0.08, 2x the largest", signs="+"),
    "lights.*.intensity": Range(0.036, 0.33, "relative", "factor",
                                f"2x the largest lamp deviation in {TRUTHS} (fill, x1/1.17)"),
    # A lamp's colour is its chromaticity (the brightest channel 1) and its intensity the brightness: only their
    # product lights the cell, so the brightest channel stays 1 and the other two move (within 0..1, below it).
    **{f"lights.{lamp}.colour[{channels}]": Range(0.005, 0.2, "RGB", "add", f"2x the largest lamp colour deviation "
                                                  f"in {TRUTHS} (0.1); the brightest channel stays 1", limits=RGB)
       for lamp, channels in (("key", "1,2"), ("fill", "0,1"))},  # key: red brightest, fill: blue
    # -- residual gap: the twin has these, calibration does not estimate them -------------------------------------
    "cameras.*.lens.noise_std": Range(0.005, 0.03, "intensity", "add",
                                      f"noise-free nominal; {TRUTHS} 0.01-0.015, 2x the largest", signs="+", gap=True),
    **{f"{group}.*.friction": Range(0.025, 0.7, "relative", "factor", f"{TRUTHS} frictions are 1.0-1.35x the "
                                    "catalogue: 2x the largest (m = 0.35), either way", gap=True)
       for group in ("objects", "novel_objects")},
    "clutter": Range(2, 16, "items", "add", f"a clean cell nominal; {TRUTHS} have 5 and 8 items, 2x the largest",
                     signs="+", gap=True),
}
# Residual gap the truths have in full and nominal lacks: fixed, not sampled.
FIXED_GAP = {"shadows": True, "floor_texture": True}
INTEGER_PATHS = ("arms.right.latency_steps", "clutter")
SIGNIFICANT_DIGITS = 6  # written values; far finer than any range's smallest step


def split_key(key: str) -> tuple[str, tuple[int, ...] | None]:
    """`"belt.center[0,1]"` -> ("belt.center", (0, 1)); no brackets: every element (None)."""
    path, bracket, rest = key.partition("[")
    if not bracket:
        return path, None
    return path, tuple(int(i) for i in rest.rstrip("]").split(","))


def expand(pattern: str, cell: CellCfg) -> list[str]:
    """`pattern` with `*` replaced by each item name of the cell's collection."""
    head, star, tail = pattern.partition(".*")
    if not star:
        return [pattern]
    items = getattr(cell, head)
    names = list(items) if isinstance(items, dict) else [item_key(x) for x in items]
    return [f"{head}.{name}{tail}" for name in names]


def perturb(nominal: float, m: float, sign: int, r: Range) -> float:
    if r.mode == "factor":
        return nominal * (1 + m) ** sign
    return nominal + sign * m


def deviation(nominal: float, value: float, r: Range) -> float:
    """The signed perturbation that took `nominal` to `value` (the inverse of `perturb`)."""
    if r.mode == "factor":
        return value / nominal - 1 if value >= nominal else -(nominal / value - 1)
    return value - nominal


def nominal_cell(base: dict) -> CellCfg:
    return apply_overrides(CellCfg(), base["cell"], "cell")


def sample_truth(seed: int, base: dict | None = None) -> dict:
    """A reality world mapping drawn around `base` (a world file's mapping; the ungrounded world by default).

    Each ranged element gets its own magnitude and sign; each `RANGES` entry draws from its own stream (seeded by
    the seed and the entry's key), so adding an entry leaves the others' draws as they were. The result is checked
    by `check_world`, as `load_world` checks a file."""
    if base is None:
        base = load_world("ungrounded").data
    nominal = nominal_cell(base)
    cell = copy.deepcopy(base["cell"])
    for key, r in RANGES.items():
        rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
        pattern, index = split_key(key)
        for path in expand(pattern, nominal):
            value = _current(cell, nominal, path)
            vector = isinstance(value, list)
            values = value if vector else [value]
            for i in index if index is not None else range(len(values)):
                if r.mode == "add" and path in INTEGER_PATHS:
                    m = int(rng.integers(int(r.low), int(r.high) + 1))
                else:
                    m = float(rng.uniform(r.low, r.high))
                sign = 1 if r.signs == "+" else int(rng.choice((-1, 1)))
                new = perturb(values[i], m, sign, r)
                if r.limits and not r.limits[0] <= new <= r.limits[1]:
                    new = perturb(values[i], m, -sign, r)  # the other direction stays inside (m < half the span)
                values[i] = new if path in INTEGER_PATHS else float(f"{new:.{SIGNIFICANT_DIGITS}g}")
            if path == "lighting.intensity_range":
                values.sort()  # both ends drawn alike, so each sorted end is still a draw from the range
            _set(cell, path, values if vector else values[0])
    cell.update(FIXED_GAP)
    data = {"name": f"truth_{seed}", "kind": "reality",
            "description": f"A sampled truth (seed {seed}) around the {base.get('name', 'given')} world: every "
                           "calibrated parameter and the residual gap perturbed within r2s2r.real.truths.RANGES.",
            "cell": cell,
            "provenance": {"sampler": "r2s2r.real.truths", "seed": int(seed), "base": base.get("name", "")}}
    check_world(data)
    return data


def truth_text(data: dict) -> str:
    """The file text: a header naming the seed and who may read the file, then the YAML."""
    seed = data["provenance"]["seed"]
    return (f"# Sampled truth, seed {seed}: r2s2r.real.truths.sample_truth({seed}) (scripts/sample_truths.py).\n"
            "# Only the twin, the mismatch report and tests read this file (pass it as --reality-file).\n"
            + world_to_yaml(data))


def _current(cell: dict, nominal: CellCfg, path: str) -> Any:
    """The value at `path` as sampled so far (another entry may have set other elements), else the nominal."""
    node: Any = cell
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            value = get_path(nominal, path)
            return list(value) if isinstance(value, tuple) else value
        node = node[part]
    return list(node) if isinstance(node, list | tuple) else node


def _set(cell: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = cell
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def describe_ranges() -> str:
    """The range table as text (the script's --help shows it)."""
    lines = []
    for key, r in RANGES.items():
        how = ("x (1 + m)" if r.signs == "+" else "x or / (1 + m)") if r.mode == "factor" else f"{r.signs} m"
        lines.append(f"  {key:<40} m in [{r.low:g}, {r.high:g}] {r.unit}, {how}{', gap' if r.gap else ''}")
    return "\n".join(lines)

