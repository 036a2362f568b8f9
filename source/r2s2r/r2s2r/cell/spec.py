"""The conveyor cell, described once.

Everything here is plain data: no physics engine, renderer or USD import. `r2s2r.cell.mjcf` turns a
`CellCfg` into an `MjModel`, `r2s2r.cell.usd` turns the compiled model into a USD stage, so the two cannot
drift apart. World files (nominal, grounded, the reality twin) are overrides of these fields.

Frames: metres, radians, Z up. The belt runs along +x (objects travel from -x to +x); the robot stands on
the -y side facing +y, so its right arm is at +x (downstream) and its left arm at -x. Orientations are
URDF roll-pitch-yaw, R = Rz(yaw) @ Ry(pitch) @ Rx(roll).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

from r2s2r.core import ConfigError, check_number, require

Vec3 = tuple[float, float, float]
RGBA = tuple[float, float, float, float]


def _check_flag(fieldname: str, value: object) -> None:
    require(isinstance(value, bool), fieldname, value, "true or false")


# Physical ranges shared by several fields (closed intervals).
# Everything placed in the world frame (cameras, robot bases, belt, bins, lights) lies within 5 m of the cell
# origin along each axis: the cell is about 2 m across, so more is a unit slip (mm written as m) or a typo.
CELL_EXTENT = 5.0
# A camera on a palm, or a hand on a flange adapter, sits within 0.3 m of what carries it.
MOUNT_REACH = 0.3
# Angles (rpy, joint positions, belt yaw) stay within one turn either way; beyond it they are degrees given as
# radians.
ANGLE_LIMIT = 2 * math.pi


@dataclass(frozen=True)
class Pose:
    pos: Vec3 = (0.0, 0.0, 0.0)
    rpy: Vec3 = (0.0, 0.0, 0.0)

    def validate(self, where: str, reach: float) -> None:
        """Position within `reach` metres of the parent frame's origin on each axis, finite angles within a turn."""
        check_number(f"{where}.pos", self.pos, -reach, reach, "m", n=3)
        check_number(f"{where}.rpy", self.rpy, -ANGLE_LIMIT, ANGLE_LIMIT, "rad", n=3)


# --------------------------------------------------------------------------------------------------------------
# Robots
# --------------------------------------------------------------------------------------------------------------
ARM_DOF = 7
HAND_DOF = 20


@dataclass(frozen=True)
class ArmCfg:
    """One Rizon 4s arm with a Wuji hand on its flange.

    Gains are joint-space impedance gains (N*m/rad, N*m*s/rad) of position actuators; gravity is compensated
    on the arm links, as Flexiv's joint impedance controller does.
    """

    name: Literal["right", "left"]
    base: Pose
    home_q: tuple[float, ...]
    kp: tuple[float, ...] = (1500.0, 1500.0, 800.0, 800.0, 300.0, 300.0, 300.0)
    kd: tuple[float, ...] = (80.0, 80.0, 40.0, 40.0, 12.0, 12.0, 12.0)
    joint_damping: tuple[float, ...] = (1.0,) * ARM_DOF  # N*m*s/rad, viscous, in the joint (not the controller)
    joint_frictionloss: tuple[float, ...] = (0.1,) * ARM_DOF  # N*m, Coulomb
    armature: float = 0.05
    # Physics steps between a new joint target being sent and the drive acting on it (controller + bus delay).
    latency_steps: int = 0
    # Per-joint offset (m) added to the length of each joint-origin vector; calibration estimates these.
    link_length_offsets: tuple[float, ...] = (0.0,) * ARM_DOF
    # Pose of the hand's palm_link in the arm's flange frame (the adapter is not specified by either vendor).
    hand_mount: Pose = Pose((0.0, 0.0, 0.012), (0.0, 0.0, 0.0))

    def validate(self) -> None:
        prefix = f"arms.{self.name}"
        self.base.validate(f"{prefix}.base", CELL_EXTENT)
        self.hand_mount.validate(f"{prefix}.hand_mount", MOUNT_REACH)
        self._check_palm_beyond_flange(f"{prefix}.hand_mount")
        check_number(f"{prefix}.home_q", self.home_q, -ANGLE_LIMIT, ANGLE_LIMIT, "rad", n=ARM_DOF)
        # The Rizon 4s joints give at most 123 N*m (URDF efforts): a joint stiffness beyond 1e4 N*m/rad, damping
        # beyond 1e3 N*m*s/rad or a Coulomb friction beyond 50 N*m is not something its joint impedance delivers.
        check_number(f"{prefix}.kp", self.kp, 1.0, 1e4, "N*m/rad", n=ARM_DOF)
        check_number(f"{prefix}.kd", self.kd, 0.0, 1e3, "N*m*s/rad", n=ARM_DOF)
        check_number(f"{prefix}.joint_damping", self.joint_damping, 0.0, 100.0, "N*m*s/rad", n=ARM_DOF)
        check_number(f"{prefix}.joint_frictionloss", self.joint_frictionloss, 0.0, 50.0, "N*m", n=ARM_DOF)
        check_number(f"{prefix}.armature", self.armature, 0.0, 5.0, "kg*m^2 (reflected rotor inertia)")
        # 20 steps is 40 ms at the default timestep, over twice the longest delay of the truth files (18 ms).
        check_number(f"{prefix}.latency_steps", self.latency_steps, 0, 20, "physics steps", integer=True)
        # Manufacturing tolerances of the links are millimetres; +-2 cm is already a different arm.
        check_number(f"{prefix}.link_length_offsets", self.link_length_offsets, -0.02, 0.02, "m", n=ARM_DOF)

    def _check_palm_beyond_flange(self, where: str) -> None:
        """The palm must lie beyond the flange face: a mount that sinks it into link7 is physically impossible."""
        import numpy as np

        from r2s2r.cell.robots import HandFacts
        from r2s2r.geometry import rpy_to_mat

        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        corners = signs * HandFacts.palm_box_half + HandFacts.palm_box_center
        lowest = float((corners @ rpy_to_mat(self.hand_mount.rpy).T + np.asarray(self.hand_mount.pos))[:, 2].min())
        if lowest < -1e-3:
            raise ConfigError(f"{where} = {self.hand_mount}: the palm reaches {lowest * 1000:.1f} mm behind the flange "
                              "face into link7; expected a mount whose palm box lies at flange z >= 0")


@dataclass(frozen=True)
class HandCfg:
    """Wuji Hand 2 actuation, per joint index 1..4 along each finger.

    Gains, damping and armature default to the values in the maker's MuJoCo description (wujihand-urdf
    `mjmodel.xml`, PR #1 merge preview 3531204); force limits come from the URDF efforts.
    """

    kp: tuple[float, float, float, float] = (2.0, 2.0, 1.0, 0.8)
    kd: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    joint_damping: tuple[float, float, float, float] = (0.05, 0.05, 0.03, 0.03)
    armature: tuple[float, float, float, float] = (0.0002, 0.0002, 0.0001, 0.0001)
    friction: float = 1.2

    def validate(self) -> None:
        # The finger joints give at most 0.6 N*m (URDF efforts); the bounds sit one to two orders of magnitude above
        # the maker's values.
        check_number("hand.kp", self.kp, 0.01, 50.0, "N*m/rad", n=4)
        check_number("hand.kd", self.kd, 0.0, 5.0, "N*m*s/rad", n=4)
        check_number("hand.joint_damping", self.joint_damping, 0.0, 5.0, "N*m*s/rad", n=4)
        check_number("hand.armature", self.armature, 0.0, 0.01, "kg*m^2", n=4)
        check_number("hand.friction", self.friction, 0.1, 3.0, "(MuJoCo sliding friction coefficient)")


# --------------------------------------------------------------------------------------------------------------
# Conveyor, objects, bins
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BeltCfg:
    """A belt whose top surface moves along +x; objects ride on it by friction.

    The belt is a body on a slide joint driven by a velocity actuator. Its position is wrapped back by one
    slat pitch whenever it has travelled one pitch, so the belt never runs out while its surface velocity
    (what friction sees) stays the commanded speed; the slats make the motion visible.
    """

    center: Vec3 = (0.0, 0.0, 0.08)  # centre of the top surface
    yaw: float = 0.0
    length: float = 2.0
    width: float = 0.30
    thickness: float = 0.04
    slat_pitch: float = 0.05
    friction: float = 1.0
    mass: float = 40.0
    speed_gain: float = 4000.0  # velocity-actuator gain, N per (m/s): holds speed under object loads
    # Range reset() samples the commanded speed from under nominal conditions.
    speed_range: tuple[float, float] = (0.05, 0.20)
    # The drive's true surface speed is speed_scale x the commanded speed, times (1 + speed_jitter * N(0, 1))
    # redrawn every control step: a real belt's speed is neither exactly the set point nor constant.
    speed_scale: float = 1.0
    speed_jitter: float = 0.0

    def validate(self) -> None:
        check_number("belt.center", self.center, -CELL_EXTENT, CELL_EXTENT, "m", n=3)
        # The layout (robot and bins on the -y side) assumes a belt running along +x; turned by more than 45 degrees
        # it would run toward the robot.
        check_number("belt.yaw", self.yaw, -math.pi / 4, math.pi / 4, "rad")
        check_number("belt.length", self.length, 1.0, 10.0, "m (an episode must fit)")
        check_number("belt.width", self.width, 0.1, 1.0, "m")
        check_number("belt.thickness", self.thickness, 0.005, 0.2, "m")
        check_number("belt.slat_pitch", self.slat_pitch, 0.01, 0.2, "m (one visual slat per pitch)")
        check_number("belt.friction", self.friction, 0.1, 3.0, "(MuJoCo sliding friction coefficient)")
        check_number("belt.mass", self.mass, 1.0, 1000.0, "kg")
        check_number("belt.speed_gain", self.speed_gain, 1.0, 1e5, "N/(m/s)")
        check_number("belt.speed_range", self.speed_range, 0.0, 1.0, "m/s", n=2)
        require(self.speed_range[0] <= self.speed_range[1], "belt.speed_range", self.speed_range,
                "0 <= low <= high <= 1.0 m/s")
        check_number("belt.speed_scale", self.speed_scale, 0.5, 1.5, "(true over commanded speed)")
        check_number("belt.speed_jitter", self.speed_jitter, 0.0, 0.2, "(relative standard deviation)")


Shape = Literal["box", "sphere", "cylinder", "capsule", "ellipsoid"]


@dataclass(frozen=True)
class ObjectCfg:
    """A graspable object. `size` follows MuJoCo's geom size convention for `shape` (half-sizes)."""

    name: str
    shape: Shape
    size: Vec3
    mass: float
    friction: float = 1.0

    @property
    def half_extents(self) -> tuple[float, float, float]:
        """Half the object's bounding box along its body axes (capsules lie along body y, cylinders stand up)."""
        sx, sy, sz = self.size
        return {"box": (sx, sy, sz), "sphere": (sx, sx, sx), "cylinder": (sx, sx, sy), "capsule": (sx, sx + sy, sx),
                "ellipsoid": (sx, sy, sz)}[self.shape]

    @property
    def half_height(self) -> float:
        """Half the object's extent along z when it rests in its spawn orientation."""
        return self.half_extents[2]

    def validate(self, where: str) -> None:
        require(isinstance(self.name, str) and bool(self.name), f"{where}.name", self.name, "a non-empty string")
        require(self.shape in ("box", "sphere", "cylinder", "capsule", "ellipsoid"), f"{where}.shape",
                self.shape, "one of box, sphere, cylinder, capsule, ellipsoid")
        # Objects the Wuji hand's ~10 cm fingers can close around: half-sizes of 5 mm to 8 cm, up to 1 kg (its
        # payload). Half-sizes the shape does not use may be 0.
        check_number(f"{where}.size", self.size, 0.0, 0.08, "m", n=3)
        for i, s in enumerate(self._used_sizes()):
            check_number(f"{where}.size[{i}]", s, 0.005, 0.08, f"m (a half-size a {self.shape} uses)")
        check_number(f"{where}.mass", self.mass, 0.005, 1.0, "kg")
        check_number(f"{where}.friction", self.friction, 0.1, 3.0, "(MuJoCo sliding friction coefficient)")

    def _used_sizes(self) -> tuple[float, ...]:
        n = {"box": 3, "sphere": 1, "cylinder": 2, "capsule": 2, "ellipsoid": 3}.get(self.shape, 3)
        return self.size[:n]


def _default_objects() -> tuple[ObjectCfg, ...]:
    # Sizes of everyday sorting items that fit the Wuji hand's ~10 cm fingers.
    return (
        ObjectCfg("cube", "box", (0.025, 0.025, 0.025), 0.08),
        ObjectCfg("cuboid", "box", (0.035, 0.022, 0.022), 0.09),
        ObjectCfg("cylinder", "cylinder", (0.024, 0.03, 0.0), 0.08),
        ObjectCfg("sphere", "sphere", (0.028, 0.0, 0.0), 0.07),
        ObjectCfg("capsule", "capsule", (0.02, 0.025, 0.0), 0.06),
        ObjectCfg("ellipsoid", "ellipsoid", (0.034, 0.026, 0.024), 0.07),
    )


def _novel_objects() -> tuple[ObjectCfg, ...]:
    # Shapes or sizes outside the nominal set, for the shifted `novel_objects` condition.
    return (
        ObjectCfg("big_cube", "box", (0.032, 0.032, 0.032), 0.14),
        ObjectCfg("flat_box", "box", (0.04, 0.03, 0.014), 0.08),
        ObjectCfg("small_sphere", "sphere", (0.02, 0.0, 0.0), 0.04),
        ObjectCfg("tall_cylinder", "cylinder", (0.02, 0.04, 0.0), 0.09),
    )


@dataclass(frozen=True)
class BinCfg:
    colour: str
    center: Vec3  # centre of the bin floor's top face
    inner_size: tuple[float, float] = (0.16, 0.16)
    wall_height: float = 0.08
    wall_thickness: float = 0.01

    def validate(self, where: str) -> None:
        require(isinstance(self.colour, str), f"{where}.colour", self.colour, "a colour name")
        check_number(f"{where}.center", self.center, -CELL_EXTENT, CELL_EXTENT, "m", n=3)
        # A tote that holds the objects (>= 5 cm inside) and stands on the floor of a 2 m cell.
        check_number(f"{where}.inner_size", self.inner_size, 0.05, 1.0, "m", n=2)
        check_number(f"{where}.wall_height", self.wall_height, 0.01, 0.5, "m")
        check_number(f"{where}.wall_thickness", self.wall_thickness, 0.002, 0.1, "m")


def _default_bins() -> tuple[BinCfg, ...]:
    return (
        BinCfg("red", (0.62, -0.30, 0.0)),
        BinCfg("green", (0.62, -0.48, 0.0)),
        BinCfg("blue", (0.62, -0.66, 0.0)),
    )


DEFAULT_COLOURS: dict[str, RGBA] = {
    "red": (0.85, 0.12, 0.10, 1.0),
    "green": (0.10, 0.65, 0.20, 1.0),
    "blue": (0.12, 0.25, 0.85, 1.0),
}


# --------------------------------------------------------------------------------------------------------------
# Cameras and lights
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LensCfg:
    """Intrinsics and image formation of one camera, applied in image space after a pinhole render.

    Focal lengths and principal point are normalised by image width (fx, cx) and height (fy, cy) so the same
    lens works at any resolution (`intrinsics_in_pixels`). `model="fisheye"` uses the equidistant Kannala-Brandt
    model with `distortion` = (k1, k2, k3, k4) (`fisheye_angle`), as OpenCV's fisheye module does;
    `model="pinhole"` ignores `distortion`.
    """

    model: Literal["pinhole", "fisheye"] = "pinhole"
    fx: float = 0.9
    fy: float = 0.9
    cx: float = 0.5
    cy: float = 0.5
    distortion: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    blur_sigma: float = 0.0  # Gaussian blur, in pixels at 128 px width (scaled with resolution)
    exposure: float = 1.0  # linear gain on intensity
    noise_std: float = 0.0  # additive Gaussian noise, in [0, 1] intensity units

    def validate(self, where: str) -> None:
        require(self.model in ("pinhole", "fisheye"), f"{where}.model", self.model, "'pinhole' or 'fisheye'")
        # Normalised focal lengths from far wider than a 180 degree fisheye (0.05) to an 11 degree telephoto (5).
        check_number(f"{where}.fx", self.fx, 0.05, 5.0, "(focal length / image width)")
        check_number(f"{where}.fy", self.fy, 0.05, 5.0, "(focal length / image height)")
        # Real principal points lie within a few per cent of the image centre.
        check_number(f"{where}.cx", self.cx, 0.05, 0.95, "(fraction of the image width)")
        check_number(f"{where}.cy", self.cy, 0.05, 0.95, "(fraction of the image height)")
        # Calibrated lenses have |k_i| well below 1. The radius must also grow with the ray angle over the central
        # field, or one image point would show two rays there (the renderer cuts the image at a fold further out).
        # Pinhole lenses ignore the coefficients but are held to the same rule.
        check_number(f"{where}.distortion", self.distortion, -1.0, 1.0, n=4)
        fold = _fisheye_fold_deg(self.distortion)
        require(fold is None, f"{where}.distortion", self.distortion,
                f"a projection whose radius grows with the ray angle up to {FISHEYE_MIN_FIELD_DEG:g} degrees off "
                f"axis (this one folds back at {fold} degrees)")
        check_number(f"{where}.blur_sigma", self.blur_sigma, 0.0, 10.0, "px at 128 px width (10 px smears out the scene)")
        check_number(f"{where}.exposure", self.exposure, 0.05, 20.0, "(linear gain)")
        check_number(f"{where}.noise_std", self.noise_std, 0.0, 0.5, "(intensity units)")


FISHEYE_MIN_FIELD_DEG = 45.0


def _fisheye_fold_deg(k: tuple[float, ...]) -> float | None:
    """The first angle (degrees, on a half-degree grid) within `FISHEYE_MIN_FIELD_DEG` of the axis at which
    `fisheye_slope` <= 0, or None if there is none."""
    for step in range(int(2 * FISHEYE_MIN_FIELD_DEG) + 1):
        if fisheye_slope(math.radians(step / 2), k) <= 0:
            return step / 2
    return None


# --------------------------------------------------------------------------------------------------------------
# The lens model's conversions, each written once: every backend, exporter and estimator goes through these.
# --------------------------------------------------------------------------------------------------------------
# `LensCfg.distortion` in order, named as OpenCV's fisheye module (and Isaac Sim's OpenCV fisheye schema) names them.
DISTORTION_NAMES = ("k1", "k2", "k3", "k4")


def fisheye_angle(theta, k):
    """Kannala-Brandt: the distorted angle theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8)
    of a ray `theta` radians off the axis (a number or a numpy array); the image point lies theta_d focal lengths
    from the principal point."""
    t2 = theta * theta
    return theta * (1 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3]))))


def fisheye_slope(theta, k):
    """d theta_d / d theta of `fisheye_angle`: where it stops being positive the image folds back on itself."""
    t2 = theta * theta
    return 1 + t2 * (3 * k[0] + t2 * (5 * k[1] + t2 * (7 * k[2] + t2 * 9 * k[3])))


def intrinsics_in_pixels(fx: float, fy: float, cx: float, cy: float, width: int,
                         height: int) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) normalised as in `LensCfg` -> pixels at `width` x `height` (OpenCV's pixel-centre
    convention, as the whole lens model uses)."""
    return fx * width, fy * height, cx * width, cy * height


def normalised_intrinsics(fx: float, fy: float, cx: float, cy: float, width: int,
                          height: int) -> tuple[float, float, float, float]:
    """The inverse of `intrinsics_in_pixels`: (fx, fy, cx, cy) in pixels at `width` x `height` -> as `LensCfg`."""
    return fx / width, fy / height, cx / width, cy / height


def focal_from_fov(fov_deg: float) -> float:
    """The focal length, as a fraction of the image side, of a centred pinhole that sees `fov_deg` across it."""
    return 0.5 / math.tan(math.radians(fov_deg) / 2)


def fov_from_focal(focal: float) -> float:
    """The inverse of `focal_from_fov`: the field of view (degrees) across an image side of a centred pinhole whose
    focal length is `focal` of that side."""
    return math.degrees(2 * math.atan(0.5 / focal))


Mount = Literal["world", "right_wrist", "left_wrist"]


@dataclass(frozen=True)
class CameraCfg:
    """A camera rigidly attached to the world or to a hand's palm. Looks along its frame's -z, +y up."""

    name: str
    mount: Mount
    pose: Pose
    lens: LensCfg = LensCfg()

    def validate(self) -> None:
        where = f"cameras.{self.name}"
        require(isinstance(self.name, str) and bool(self.name), f"{where}.name", self.name, "a non-empty string")
        require(self.mount in ("world", "right_wrist", "left_wrist"), f"{where}.mount", self.mount,
                "'world', 'right_wrist' or 'left_wrist'")
        self.pose.validate(f"{where}.pose", CELL_EXTENT if self.mount == "world" else MOUNT_REACH)
        self.lens.validate(f"{where}.lens")


@dataclass(frozen=True)
class LightCfg:
    name: str
    pos: Vec3
    direction: Vec3 = (0.0, 0.0, -1.0)
    # The light's diffuse RGB is colour x intensity; world files state the colour with its brightest channel at 1
    # (the lamp's chromaticity) and the brightness as the intensity, so calibration can tell the two apart.
    colour: Vec3 = (1.0, 1.0, 1.0)
    intensity: float = 0.6
    directional: bool = False
    # Whether this light casts shadows when the cell's shadows are on. Each shadow-casting light costs one more
    # render pass (several times the frame time on a CPU rasteriser); a soft fill light adds little to the look.
    casts_shadow: bool = True

    def validate(self, where: str) -> None:
        require(isinstance(self.name, str) and bool(self.name), f"{where}.name", self.name, "a non-empty string")
        check_number(f"{where}.pos", self.pos, -CELL_EXTENT, CELL_EXTENT, "m", n=3)
        # Only the direction matters (MuJoCo normalises it); components beyond 1 or a near-zero vector are typos.
        check_number(f"{where}.direction", self.direction, -1.0, 1.0, n=3)
        require(math.hypot(*self.direction) >= 0.1, f"{where}.direction", self.direction,
                "a direction vector of length >= 0.1")
        check_number(f"{where}.colour", self.colour, 0.0, 1.0, "(RGB)", n=3)
        check_number(f"{where}.intensity", self.intensity, 0.0, 3.0)
        _check_flag(f"{where}.directional", self.directional)
        _check_flag(f"{where}.casts_shadow", self.casts_shadow)


@dataclass(frozen=True)
class LightingCfg:
    """How the cell's lighting varies from trial to trial under nominal conditions (a real cell's daylight,
    lamps warming up): all lights' intensities are scaled by one factor drawn uniformly from `intensity_range`,
    and each colour channel by 1 + U(-tint, tint). Shifted conditions vary lighting further on top of this."""

    intensity_range: tuple[float, float] = (1.0, 1.0)
    tint: float = 0.0

    def validate(self) -> None:
        check_number("lighting.intensity_range", self.intensity_range, 0.2, 3.0, "(intensity factor)", n=2)
        require(self.intensity_range[0] <= self.intensity_range[1], "lighting.intensity_range",
                self.intensity_range, "0.2 <= low <= high <= 3.0")
        check_number("lighting.tint", self.tint, 0.0, 0.5)


def look_rpy(forward: Vec3, up: Vec3 = (0.0, 0.0, 1.0)) -> Vec3:
    """Roll-pitch-yaw of a camera frame whose -z axis points along `forward` and whose +y is closest to `up`."""

    def unit(v):
        n = math.sqrt(sum(c * c for c in v))
        return [c / n for c in v]

    def cross(a, b):
        return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]

    z = [-c for c in unit(forward)]  # the camera looks along its -z
    x = cross(up, z)
    if math.sqrt(sum(c * c for c in x)) < 1e-9:
        raise ConfigError(f"camera forward {forward!r} is parallel to up {up!r}; expected distinct directions")
    x = unit(x)
    y = cross(z, x)
    # R has columns x, y, z; recover rpy from R = Rz Ry Rx.
    pitch = math.asin(max(-1.0, min(1.0, -x[2])))
    return (math.atan2(y[2], z[2]), pitch, math.atan2(x[1], x[0]))


def look_at_rpy(eye: Vec3, target: Vec3) -> Vec3:
    return look_rpy(tuple(t - e for t, e in zip(target, eye)))  # type: ignore[arg-type]


FISHEYE = LensCfg(model="fisheye", fx=0.45, fy=0.45, distortion=(-0.02, 0.003, 0.0, 0.0))
HEAD_LENS = LensCfg(model="pinhole", fx=0.85, fy=0.85)
HEAD_POS: Vec3 = (0.0, -0.70, 1.0)
HEAD_TARGET: Vec3 = (0.25, 0.0, 0.08)
STEREO_BASELINE = 0.06


def _default_cameras() -> tuple[CameraCfg, ...]:
    head_rpy = look_at_rpy(HEAD_POS, HEAD_TARGET)
    # Stereo pair: left and right eyes offset along the head's image-x axis (computed in mjcf from the rpy).
    half = STEREO_BASELINE / 2
    yaw = head_rpy[2]
    dx, dy = math.cos(yaw) * half, math.sin(yaw) * half
    # Wrist cameras ride on a ring at the flange, on the palm side (the palm's volar normal is +x, fingers along +z):
    # 6 cm from the wrist axis, just clear of link 7 (5 cm radius), and 2 cm short of the palm's heel, looking along
    # the fingers tilted 20 degrees toward the palm side, image up toward the back of the hand. From there the object
    # stays in view through the approach, the descent and the closure (tests/cell/test_wrist_camera.py holds it to
    # that); a camera behind the palm would have the palm in the way just as the hand closes.
    tilt = math.radians(20)
    wrist_pose = Pose((0.06, 0.0, -0.02), look_rpy((math.sin(tilt), 0.0, math.cos(tilt)), (-1.0, 0.0, 0.0)))
    return (
        CameraCfg("head_left", "world", Pose((HEAD_POS[0] - dx, HEAD_POS[1] - dy, HEAD_POS[2]), head_rpy), HEAD_LENS),
        CameraCfg("head_right", "world", Pose((HEAD_POS[0] + dx, HEAD_POS[1] + dy, HEAD_POS[2]), head_rpy), HEAD_LENS),
        CameraCfg("right_wrist", "right_wrist", wrist_pose, FISHEYE),
        CameraCfg("left_wrist", "left_wrist", wrist_pose, FISHEYE),
    )


def _default_lights() -> tuple[LightCfg, ...]:
    return (
        LightCfg("key", (0.3, -0.6, 2.2), (-0.1, 0.3, -1.0), (1.0, 0.97, 0.92), 0.7),
        LightCfg("fill", (-0.8, 0.6, 1.8), (0.4, -0.3, -1.0), (0.9, 0.93, 1.0), 0.35, casts_shadow=False),
    )


# How far behind the board's printed face the grey card on its back faces outward (m): a 4 mm plate, a 0.2 mm card.
BOARD_CARD_DEPTH = 0.0042


@dataclass(frozen=True)
class BoardCfg:
    """A chessboard calibration target (a mocap body, placed where the calibration session holds it).

    `squares` is (columns, rows) of squares; OpenCV finds the (columns - 1) x (rows - 1) inner corners. The board
    frame has its origin at the centre of the printed face, x along columns, y along rows, z out of the face.
    """

    squares: tuple[int, int] = (9, 7)
    square_size: float = 0.02

    @property
    def inner_corners(self) -> tuple[int, int]:
        return (self.squares[0] - 1, self.squares[1] - 1)

    def corner_points(self):
        """Inner-corner coordinates in the board frame, row-major as OpenCV orders them: (N, 3) float."""
        import numpy as np

        nc, nr = self.inner_corners
        i, j = np.meshgrid(np.arange(nc), np.arange(nr))
        xy = np.stack([(i - (nc - 1) / 2) * self.square_size, (j - (nr - 1) / 2) * self.square_size], -1)
        return np.concatenate([xy.reshape(-1, 2), np.zeros((nc * nr, 1))], 1)

    def validate(self) -> None:
        # A printed board with 3 to 30 squares a side (2 to 29 inner corners, which OpenCV finds).
        check_number("calibration_board.squares", self.squares, 3, 30, "squares", n=2, integer=True)
        check_number("calibration_board.square_size", self.square_size, 0.005, 0.1, "m")


# --------------------------------------------------------------------------------------------------------------
# The whole cell
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhysicsCfg:
    """Solver options. Elliptic friction cones with impratio 10 are MuJoCo's advice for grasping: with pyramidal
    cones and impratio 1, round objects creep out of the Wuji hand's grasp."""

    timestep: float = 0.002
    integrator: Literal["implicitfast", "Euler", "RK4", "implicit"] = "implicitfast"
    cone: Literal["pyramidal", "elliptic"] = "elliptic"
    impratio: float = 10.0
    iterations: int = 50
    ls_iterations: int = 20

    def validate(self) -> None:
        check_number("physics.timestep", self.timestep, 0.0002, 0.01, "s")
        require(self.integrator in ("implicitfast", "Euler", "RK4", "implicit"), "physics.integrator",
                self.integrator, "one of implicitfast, Euler, RK4, implicit")
        require(self.cone in ("pyramidal", "elliptic"), "physics.cone", self.cone, "'pyramidal' or 'elliptic'")
        # MuJoCo's impratio is >= 1 by definition; beyond 100 the friction constraints dominate the solver.
        check_number("physics.impratio", self.impratio, 1.0, 100.0)
        check_number("physics.iterations", self.iterations, 1, 1000, "solver iterations", integer=True)
        check_number("physics.ls_iterations", self.ls_iterations, 1, 1000, "line-search iterations", integer=True)


# Home postures (found by IK, see README): the right hand palm-down 25 cm above the belt, fingers across it;
# the left hand raised at (-0.3, -0.3, 0.55) pointing its wrist camera at the pick zone.
RIGHT_HOME_Q = (-0.51, -1.06, 1.22, 2.09, 0.24, 3.0, -1.04)
LEFT_HOME_Q = (1.82, 0.49, -1.02, 1.73, 1.78, 3.46, -1.47)


@dataclass(frozen=True)
class CellCfg:
    """The full cell. `objects` are the nominal set; `novel_objects` only appear under shifted conditions."""

    arms: tuple[ArmCfg, ArmCfg] = (
        ArmCfg("right", Pose((0.30, -0.60, 0.0), (0.0, 0.0, math.pi / 2)), RIGHT_HOME_Q),
        ArmCfg("left", Pose((-0.30, -0.60, 0.0), (0.0, 0.0, math.pi / 2)), LEFT_HOME_Q),
    )
    hand: HandCfg = HandCfg()
    belt: BeltCfg = BeltCfg()
    objects: tuple[ObjectCfg, ...] = field(default_factory=_default_objects)
    novel_objects: tuple[ObjectCfg, ...] = field(default_factory=_novel_objects)
    colours: dict[str, RGBA] = field(default_factory=lambda: dict(DEFAULT_COLOURS))
    bins: tuple[BinCfg, ...] = field(default_factory=_default_bins)
    cameras: tuple[CameraCfg, ...] = field(default_factory=_default_cameras)
    lights: tuple[LightCfg, ...] = field(default_factory=_default_lights)
    lighting: LightingCfg = LightingCfg()
    physics: PhysicsCfg = PhysicsCfg()
    floor_rgba: RGBA = (0.55, 0.55, 0.52, 1.0)
    shadows: bool = False
    # Visual detail a real cell has and a clean model lacks: textured floor, static clutter around the cell.
    floor_texture: bool = False
    clutter: int = 0
    calibration_board: BoardCfg | None = None

    def arm(self, name: str) -> ArmCfg:
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"arms: no arm named {name!r}; expected one of {[a.name for a in self.arms]}")

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)

    def validate(self) -> CellCfg:
        """Check every field (types, finite values, physical ranges); a ConfigError names the first bad one."""
        require(sorted(a.name for a in self.arms) == ["left", "right"], "arms", [a.name for a in self.arms],
                "one 'right' and one 'left' arm")
        for a in self.arms:
            a.validate()
        self.hand.validate()
        self.belt.validate()
        self.physics.validate()
        for o in self.objects:
            o.validate(f"objects.{o.name}")
        for o in self.novel_objects:
            o.validate(f"novel_objects.{o.name}")
        names = [o.name for o in self.objects + self.novel_objects]
        require(len(set(names)) == len(names), "objects", names, "unique object names")
        require(len(self.objects) >= 1, "objects", self.objects, "at least one nominal object")
        require(all(isinstance(name, str) for name in self.colours), "colours", list(self.colours),
                "colour names")
        for name, rgba in self.colours.items():
            check_number(f"colours.{name}", rgba, 0.0, 1.0, "(RGBA)", n=4)
        for b in self.bins:
            b.validate(f"bins.{b.colour}")
            require(b.colour in self.colours, f"bins.{b.colour}.colour", b.colour, f"one of {sorted(self.colours)}")
        require(sorted(b.colour for b in self.bins) == sorted(self.colours), "bins",
                [b.colour for b in self.bins], f"exactly one bin per colour {sorted(self.colours)}")
        for c in self.cameras:
            c.validate()
        cam_names = self.camera_names
        require(len(set(cam_names)) == len(cam_names), "cameras", cam_names, "unique camera names")
        for li in self.lights:
            li.validate(f"lights.{li.name}")
        self.lighting.validate()
        check_number("floor_rgba", self.floor_rgba, 0.0, 1.0, "(RGBA)", n=4)
        _check_flag("shadows", self.shadows)
        _check_flag("floor_texture", self.floor_texture)
        # Each clutter item is a static box around the cell; 30 already costs rendering time.
        check_number("clutter", self.clutter, 0, 30, "clutter items", integer=True)
        require(self.calibration_board is None or isinstance(self.calibration_board, BoardCfg),
                "calibration_board", self.calibration_board, "none, or a board set in code (BoardCfg)")
        if self.calibration_board is not None:
            self.calibration_board.validate()
        return self

    def replace(self, **changes: object) -> CellCfg:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
