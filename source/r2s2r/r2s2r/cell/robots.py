"""Kinematic and inertial facts of the Flexiv Rizon 4s arm and the Wuji hand.

Read from `assets/robots/robots.yaml`, which transcribes the makers' public descriptions:
- Rizon 4s: flexivrobotics/flexiv_ros2 `flexiv_description/urdf/rizon4_joints_links.xacro` at a8fa360 (Apache-2.0);
- Wuji hand (right): Wuji-Technology-Co-Ltd/wujihand-urdf `urdf/right.urdf` at 559eba9 (MIT);
Only numbers are used; no meshes. Collision primitives are sized from the mesh extents listed in the YAML's NOTES
(capsule radii 0.062 / 0.051 m on the arm, 0.0075 m on the fingers, a box for the palm).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import yaml

from r2s2r.core import assets_dir


@dataclass(frozen=True)
class Inertial:
    mass: float
    com: np.ndarray  # (3,)
    inertia: np.ndarray  # (3, 3) about the COM, in the link frame

    def merged(self, other: Inertial, other_offset: np.ndarray) -> Inertial:
        """This inertial plus `other`, whose frame sits at `other_offset` (same orientation), about the new COM."""
        m = self.mass + other.mass
        c2 = other.com + other_offset
        com = (self.mass * self.com + other.mass * c2) / m

        def shifted(inertia: np.ndarray, mass: float, c: np.ndarray) -> np.ndarray:
            d = c - com
            return inertia + mass * (d @ d * np.eye(3) - np.outer(d, d))

        return Inertial(m, com, shifted(self.inertia, self.mass, self.com) + shifted(other.inertia, other.mass, c2))


@dataclass(frozen=True)
class Link:
    """A link and the revolute joint that carries it (URDF semantics: origin is the child frame in the parent)."""

    name: str
    parent: str
    origin_xyz: np.ndarray
    origin_rpy: np.ndarray
    axis: np.ndarray
    lower: float
    upper: float
    effort: float
    velocity: float
    inertial: Inertial


def _vec(s: str) -> np.ndarray:
    return np.array([float(t) for t in s.split()], dtype=float)


def _inertial(entry: dict) -> Inertial:
    i = entry["inertia"]
    tensor = np.array(
        [[i["ixx"], i["ixy"], i["ixz"]], [i["ixy"], i["iyy"], i["iyz"]], [i["ixz"], i["iyz"], i["izz"]]], dtype=float
    )
    return Inertial(float(entry["mass"]), _vec(entry["com_xyz"]), tensor)


@functools.cache
def _facts() -> dict:
    path = assets_dir() / "robots" / "robots.yaml"
    with open(path) as f:
        # libyaml's scanner (PyYAML's wheels include it): the same document as safe_load, several times faster on
        # this file, which every generation worker reads at start.
        return yaml.load(f, Loader=yaml.CSafeLoader)


def _chain(robot: dict, joints: list[dict], soft_limits: bool) -> list[Link]:
    inertials = {e["name"]: e for e in robot["links"] if "mass" in e}
    out = []
    for j in joints:
        rpy = np.array(j["rpy_eval"], dtype=float) if "rpy_eval" in j else _vec(j["rpy"])
        lo, hi = (j["soft_lower"], j["soft_upper"]) if soft_limits and "soft_lower" in j else (j["lower"], j["upper"])
        out.append(
            Link(
                name=j["child"],
                parent=j["parent"],
                origin_xyz=_vec(j["xyz"]),
                origin_rpy=rpy,
                axis=_vec(j["axis"]),
                lower=float(lo),
                upper=float(hi),
                effort=float(j["effort"]),
                velocity=float(j["velocity"]),
                inertial=_inertial(inertials[j["child"]]),
            )
        )
    return out


@dataclass(frozen=True)
class ArmFacts:
    base: Inertial
    links: list[Link]  # link1..link7
    flange_xyz: np.ndarray  # flange origin in link7
    flange_rpy: np.ndarray
    # Collision capsule radius per link (base cylinder radius first), from the mesh extents.
    radii: tuple[float, ...] = (0.083, 0.062, 0.062, 0.051, 0.051, 0.051, 0.051, 0.05)
    base_height: float = 0.149


@functools.cache
def rizon4s() -> ArmFacts:
    robot = _facts()["robots"]["flexiv_rizon4s"]
    revolute = [j for j in robot["joints"] if j["type"] == "revolute"]
    flange = next(j for j in robot["joints"] if j["name"] == "link7_to_flange")
    base = next(e for e in robot["links"] if e["name"] == "base_link")
    # The soft (safety-controller) limits are the operating range, and equal the previous release's hard limits.
    return ArmFacts(
        base=_inertial(base),
        links=_chain(robot, revolute, soft_limits=True),
        flange_xyz=_vec(flange["xyz"]),
        flange_rpy=np.array(flange["rpy_eval"], dtype=float),
    )


@dataclass(frozen=True)
class FingerFacts:
    links: list[Link]  # link1..link4, link4 carrying the merged tip mass
    tip_xyz: np.ndarray  # tip frame origin in link4


@dataclass(frozen=True)
class HandFacts:
    palm: Inertial
    fingers: list[FingerFacts]  # thumb, index, middle, ring, little
    # Collision primitives from the mesh extents: palm box (centre, half sizes) and capsule radii.
    palm_box_center = np.array([-0.0019, -0.0024, 0.0434])
    palm_box_half = np.array([0.016, 0.0406, 0.0524])
    finger_radius = 0.0075
    thumb_base_radius = 0.009


@functools.cache
def wuji_right() -> HandFacts:
    facts = _facts()
    robot = facts["robots"]["wuji_hand_right"]
    links = {e["name"]: e for e in robot["links"]}
    tips = {t["parent"]: t for t in robot["tip_frames"]}
    fingers = []
    for f in range(1, 6):
        joints = [j for j in robot["joints"] if j["name"].startswith(f"finger{f}_")]
        chain = _chain(robot, joints, soft_limits=False)
        tip = tips[f"finger{f}_link4"]
        tip_xyz = _vec(tip["xyz"])
        # The tip frame is a fixed child carrying 4 g: merge it into link4 so each finger has four bodies.
        merged = chain[3].inertial.merged(_inertial(links[tip["child"]]), tip_xyz)
        chain[3] = Link(**{**chain[3].__dict__, "inertial": merged})
        fingers.append(FingerFacts(chain, tip_xyz))
    return HandFacts(_inertial(links["palm_link"]), fingers)
