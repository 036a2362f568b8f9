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

Vec3 = tuple[float, float, float]
RGBA = tuple[float, float, float, float]


class ConfigError(ValueError):
    """A configuration value is outside what the cell accepts; the message names the field."""


def _require(ok: bool, fieldname: str, value: object, expected: str) -> None:
    if not ok:
        raise ConfigError(f"{fieldname} = {value!r}: expected {expected}")


@dataclass(frozen=True)
class Pose:
    pos: Vec3 = (0.0, 0.0, 0.0)
    rpy: Vec3 = (0.0, 0.0, 0.0)


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
        for attr in ("home_q", "kp", "kd", "joint_damping", "joint_frictionloss", "link_length_offsets"):
            v = getattr(self, attr)
            _require(len(v) == ARM_DOF, f"{prefix}.{attr}", v, f"{ARM_DOF} values")
        _require(all(d >= 0 for d in self.joint_damping), f"{prefix}.joint_damping", self.joint_damping, ">= 0")
        _require(all(f >= 0 for f in self.joint_frictionloss), f"{prefix}.joint_frictionloss",
                 self.joint_frictionloss, ">= 0")
        _require(isinstance(self.latency_steps, int) and 0 <= self.latency_steps <= 20, f"{prefix}.latency_steps",
                 self.latency_steps, "an integer number of physics steps in [0, 20]")
        _require(all(k > 0 for k in self.kp), f"{prefix}.kp", self.kp, "positive gains")
        _require(all(k >= 0 for k in self.kd), f"{prefix}.kd", self.kd, "non-negative gains")
        _require(
            all(abs(o) <= 0.02 for o in self.link_length_offsets),
            f"{prefix}.link_length_offsets",
            self.link_length_offsets,
            "offsets within +-0.02 m",
        )


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
        _require(all(k > 0 for k in self.kp), "hand.kp", self.kp, "positive gains")
        _require(all(k >= 0 for k in self.kd), "hand.kd", self.kd, "non-negative gains")
        _require(0.1 <= self.friction <= 3.0, "hand.friction", self.friction, "a value in [0.1, 3.0]")


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
        lo, hi = self.speed_range
        _require(0.0 <= lo <= hi <= 1.0, "belt.speed_range", self.speed_range, "0 <= low <= high <= 1.0 m/s")
        _require(self.length >= 1.0, "belt.length", self.length, ">= 1.0 m (an episode must fit)")
        _require(0.5 <= self.speed_scale <= 1.5, "belt.speed_scale", self.speed_scale, "a factor in [0.5, 1.5]")
        _require(0.0 <= self.speed_jitter <= 0.2, "belt.speed_jitter", self.speed_jitter, "a value in [0, 0.2]")
        _require(0.1 <= self.width <= 1.0, "belt.width", self.width, "a width in [0.1, 1.0] m")
        _require(0.0 < self.slat_pitch <= 0.2, "belt.slat_pitch", self.slat_pitch, "a pitch in (0, 0.2] m")


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
        _require(self.shape in ("box", "sphere", "cylinder", "capsule", "ellipsoid"), f"{where}.shape",
                 self.shape, "one of box, sphere, cylinder, capsule, ellipsoid")
        _require(all(0.005 <= s <= 0.08 for s in self._used_sizes()), f"{where}.size", self.size,
                 "half-sizes in [0.005, 0.08] m")
        _require(0.005 <= self.mass <= 1.0, f"{where}.mass", self.mass, "a mass in [0.005, 1.0] kg")
        _require(0.1 <= self.friction <= 3.0, f"{where}.friction", self.friction, "a value in [0.1, 3.0]")

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
    lens works at any resolution. `model="fisheye"` uses the equidistant Kannala-Brandt model
    r = theta * (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8), as OpenCV's fisheye module does;
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
        _require(self.model in ("pinhole", "fisheye"), f"{where}.model", self.model, "'pinhole' or 'fisheye'")
        _require(0.05 <= self.fx <= 5.0 and 0.05 <= self.fy <= 5.0, f"{where}.fx/fy", (self.fx, self.fy),
                 "normalised focal lengths in [0.05, 5]")
        _require(0.0 < self.cx < 1.0 and 0.0 < self.cy < 1.0, f"{where}.cx/cy", (self.cx, self.cy),
                 "a principal point inside the image (0, 1)")
        _require(self.blur_sigma >= 0, f"{where}.blur_sigma", self.blur_sigma, ">= 0")
        _require(0.05 <= self.exposure <= 20, f"{where}.exposure", self.exposure, "a gain in [0.05, 20]")
        _require(0 <= self.noise_std <= 0.5, f"{where}.noise_std", self.noise_std, "a value in [0, 0.5]")


Mount = Literal["world", "right_wrist", "left_wrist"]


@dataclass(frozen=True)
class CameraCfg:
    """A camera rigidly attached to the world or to a hand's palm. Looks along its frame's -z, +y up."""

    name: str
    mount: Mount
    pose: Pose
    lens: LensCfg = LensCfg()


@dataclass(frozen=True)
class LightCfg:
    name: str
    pos: Vec3
    direction: Vec3 = (0.0, 0.0, -1.0)
    colour: Vec3 = (1.0, 1.0, 1.0)
    intensity: float = 0.6
    directional: bool = False
    # Whether this light casts shadows when the cell's shadows are on. Each shadow-casting light costs one more
    # render pass (several times the frame time on a CPU rasteriser); a soft fill light adds little to the look.
    casts_shadow: bool = True

    def validate(self, where: str) -> None:
        _require(0.0 <= self.intensity <= 3.0, f"{where}.intensity", self.intensity, "a value in [0, 3]")
        _require(all(0.0 <= c <= 1.0 for c in self.colour), f"{where}.colour", self.colour, "RGB values in [0, 1]")


@dataclass(frozen=True)
class LightingCfg:
    """How the cell's lighting varies from trial to trial under nominal conditions (a real cell's daylight,
    lamps warming up): all lights' intensities are scaled by one factor drawn uniformly from `intensity_range`,
    and each colour channel by 1 + U(-tint, tint). Shifted conditions vary lighting further on top of this."""

    intensity_range: tuple[float, float] = (1.0, 1.0)
    tint: float = 0.0

    def validate(self) -> None:
        lo, hi = self.intensity_range
        _require(0.2 <= lo <= hi <= 3.0, "lighting.intensity_range", self.intensity_range,
                 "0.2 <= low <= high <= 3.0")
        _require(0.0 <= self.tint <= 0.5, "lighting.tint", self.tint, "a value in [0, 0.5]")


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
    # Wrist cameras sit behind the back of the palm (the palm's volar normal is +x, fingers along +z), looking
    # along the fingers and tilted 10 degrees toward the palm side so the view clears the palm's back.
    tilt = math.radians(10)
    wrist_pose = Pose((-0.045, 0.0, 0.0), look_rpy((math.sin(tilt), 0.0, math.cos(tilt)), (-1.0, 0.0, 0.0)))
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
        _require(all(isinstance(n, int) and n >= 3 for n in self.squares), "calibration_board.squares",
                 self.squares, "two integers >= 3")
        _require(0.005 <= self.square_size <= 0.1, "calibration_board.square_size", self.square_size,
                 "a size in [0.005, 0.1] m")


# --------------------------------------------------------------------------------------------------------------
# The whole cell
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhysicsCfg:
    """Solver options. Elliptic friction cones with impratio 10 are MuJoCo's advice for grasping: with pyramidal
    cones and impratio 1, round objects crept out of the Wuji hand's grasp (14/20 vs 5/20 scripted successes)."""

    timestep: float = 0.002
    integrator: Literal["implicitfast", "Euler", "RK4", "implicit"] = "implicitfast"
    cone: Literal["pyramidal", "elliptic"] = "elliptic"
    impratio: float = 10.0
    iterations: int = 50
    ls_iterations: int = 20

    def validate(self) -> None:
        _require(0.0002 <= self.timestep <= 0.01, "physics.timestep", self.timestep, "a step in [0.0002, 0.01] s")


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
        _require(sorted(a.name for a in self.arms) == ["left", "right"], "arms", [a.name for a in self.arms],
                 "one 'right' and one 'left' arm")
        for a in self.arms:
            a.validate()
        self.hand.validate()
        self.belt.validate()
        self.physics.validate()
        names = [o.name for o in self.objects + self.novel_objects]
        _require(len(set(names)) == len(names), "objects", names, "unique object names")
        _require(len(self.objects) >= 1, "objects", self.objects, "at least one nominal object")
        for i, o in enumerate(self.objects):
            o.validate(f"objects[{i}]")
        for i, o in enumerate(self.novel_objects):
            o.validate(f"novel_objects[{i}]")
        for i, b in enumerate(self.bins):
            _require(b.colour in self.colours, f"bins[{i}].colour", b.colour, f"one of {sorted(self.colours)}")
        _require(sorted(b.colour for b in self.bins) == sorted(self.colours), "bins",
                 [b.colour for b in self.bins], f"exactly one bin per colour {sorted(self.colours)}")
        cam_names = self.camera_names
        _require(len(set(cam_names)) == len(cam_names), "cameras", cam_names, "unique camera names")
        for c in self.cameras:
            _require(c.mount in ("world", "right_wrist", "left_wrist"), f"cameras.{c.name}.mount", c.mount,
                     "'world', 'right_wrist' or 'left_wrist'")
            c.lens.validate(f"cameras.{c.name}.lens")
        for li in self.lights:
            li.validate(f"lights.{li.name}")
        self.lighting.validate()
        _require(isinstance(self.clutter, int) and 0 <= self.clutter <= 30, "clutter", self.clutter,
                 "an integer number of clutter items in [0, 30]")
        if self.calibration_board is not None:
            self.calibration_board.validate()
        return self

    def replace(self, **changes: object) -> CellCfg:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
