"""Grounded behaviour: human demonstrations transformed to new episodes, MimicGen-style, for a moving object.

MimicGen (Mandlekar et al., 2023) cuts each source demo into object-centric subtasks and replays every segment
rigidly transformed to the new object pose. That assumes objects at rest. Here the object rides a belt, so each
subtask is tied to a frame that moves the way its reference does:

* **intercept** (before the grasp) is expressed relative to the *moving* object: the offset between the new object
  (as tracked) and the source's object at the corresponding time is added to the source hand path, weighted by
  how close the source hand was to its object (`track_radius`). Far from the object the hand keeps its recorded
  world path (the operator's reach to a waiting spot); near it, the hand moves with the new object, so a faster
  belt is pursued at the new speed while the motion keeps its human shape. The time the operator spent waiting
  (hand still) is stretched or shrunk so that the new object reaches the source's meeting point when the source
  hand did; where waiting alone cannot absorb it, the whole approach is sped up (down to `min_time_scale`).
* **grasp** keeps the source timing. Shortly before the closure (`latch_steps`) the object reference switches from
  the tracked object to its prediction at the tracked velocity until the lift: once the fingers touch the object
  its measured position moves with the hand, and following it would drag both off the belt.
* **carry** interpolates from the grasp's frame to the bin's (new bin minus source bin, `carry_blend`), so the carry
  ends where the source's did relative to its bin; **release** is bin-relative.

Until the lift an integral loop (`tracking_gain`) biases the commands so the *measured* hand follows the source's
measured hand path, transformed: the simulated arm lags differently from the real one, and millimetres decide a
grasp. The hand yaw is turned with the object (mod the symmetry of a power grasp across the long axis), the grasp height
follows the object's height, and the hand's flexion scales with the object's cross-section so a smaller object
is closed on harder. Source demos are chosen per episode among the `nn_k` nearest in belt speed, lateral position
and size (MimicGen's nearest-neighbour selection with random choice among the k best), or at random.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from r2s2r.behavior.base import BehaviorGenerator, GenerationError
from r2s2r.control.grasp import grasp_yaw
from r2s2r.core import ConfigError
from r2s2r.data.annotate import FLEXORS, demo_annotation
from r2s2r.data.datagen_info import EEF, OBJECT, TARGET_BIN, matrix_poses, positions
from r2s2r.data.hdf5 import DATAGEN, DatasetError, DemoReader
from r2s2r.geometry import mat_to_quat, quat_to_mat, rpy_to_mat
from r2s2r.trajectory import interp_rows, min_jerk


@dataclass(frozen=True)
class MimicCfg:
    """How source demos are chosen and transformed. Defaults are what the generation benchmarks use."""

    source: str = "outputs/real/real.hdf5"  # dataset of annotated (or annotatable) real demos
    selection: str = "nearest"  # "nearest": random among the nn_k nearest; "random": any source demo
    nn_k: int = 3
    # Distance between an episode and a source demo: belt speed / speed_scale + lateral offset / lateral_scale +
    # cross-section size / size_scale, plus shape_penalty when the shapes differ.
    speed_scale: float = 0.03  # m/s
    lateral_scale: float = 0.03  # m
    size_scale: float = 0.005  # m
    shape_penalty: float = 2.0
    # The hand follows the moving object fully within track_radius[0] of it (horizontal distance of the source
    # hand to its object) and not at all beyond track_radius[1].
    track_radius: tuple[float, float] = (0.12, 0.35)
    idle_speed: float = 0.03  # m/s: slower source hand motion counts as waiting (re-timed freely)
    min_time_scale: float = 0.5  # the approach may run at most 1 / min_time_scale times faster than recorded
    # Steps before the source's closure at which the object reference switches from tracked to predicted.
    latch_steps: int = 4
    # Interpolation between the grasp's object frame and the bin frame: the switch spans this fraction of the
    # carry subtask (minimum-jerk), from its start.
    carry_blend: float = 1.0
    action_noise: float = 0.001  # m, standard deviation of Gaussian noise on the commanded position
    # Until the lift, an integral loop adds a bias to the commands so that the *measured* hand follows the source's
    # measured hand path, transformed: the sim arm lags differently from the real one, and a few millimetres
    # decide a grasp. Per-step gain (0 replays the transformed commands open-loop, as MimicGen does) and limit.
    tracking_gain: float = 0.3
    max_bias: float = 0.04  # m
    closure_scale: tuple[float, float] = (0.8, 1.3)  # bounds of the hand-flexion scaling with object size

    def validate(self) -> MimicCfg:
        if self.selection not in ("nearest", "random"):
            raise ConfigError(f"generator.selection = {self.selection!r}: expected 'nearest' or 'random'")
        if self.nn_k < 1:
            raise ConfigError(f"generator.nn_k = {self.nn_k}: expected >= 1")
        if not 0 < self.track_radius[0] < self.track_radius[1]:
            raise ConfigError(f"generator.track_radius = {self.track_radius}: expected 0 < inner < outer (m)")
        if not 0 < self.min_time_scale <= 1:
            raise ConfigError(f"generator.min_time_scale = {self.min_time_scale}: expected in (0, 1]")
        if self.latch_steps < 0:
            raise ConfigError(f"generator.latch_steps = {self.latch_steps}: expected >= 0")
        if not 0 < self.carry_blend <= 1:
            raise ConfigError(f"generator.carry_blend = {self.carry_blend}: expected in (0, 1]")
        if not 0 <= self.tracking_gain <= 1:
            raise ConfigError(f"generator.tracking_gain = {self.tracking_gain}: expected in [0, 1]")
        if self.action_noise < 0:
            raise ConfigError(f"generator.action_noise = {self.action_noise}: expected >= 0 (m)")
        lo, hi = self.closure_scale
        if not 0 < lo <= 1 <= hi:
            raise ConfigError(f"generator.closure_scale = {self.closure_scale}: expected 0 < low <= 1 <= high")
        return self


def cross_section(half_extents: np.ndarray) -> float:
    """Half-size of the section a power grasp wraps: the short horizontal half-extent and the height, averaged."""
    return 0.5 * (min(half_extents[0], half_extents[1]) + half_extents[2])


@dataclass
class SourceDemo:
    """One annotated source demo, reduced to what the transformation needs (quaternions w,x,y,z)."""

    name: str
    shape: str
    actions: np.ndarray  # (T, 27) as recorded
    eef_pos: np.ndarray  # (T, 3) measured grasp-site position
    object_pos: np.ndarray  # (T, 3) tracked
    object_vel: np.ndarray  # (T, 3) tracked linear velocity
    object_quat: np.ndarray  # (4,) at the start
    belt_speed: float  # measured, m/s
    half_extents: np.ndarray  # (3,)
    bin_pos: np.ndarray  # (3,)
    ends: tuple[int, int, int]  # subtask ends: intercept, grasp, carry

    @property
    def length(self) -> int:
        return len(self.actions)


# The tracking signals of a source demo that the generator uses (obs/datagen_info/<key>).
SOURCE_SHAPES = {f"eef_pose/{EEF}": (4, 4), f"object_pose/{OBJECT}": (4, 4), f"object_pose/{TARGET_BIN}": (4, 4),
                 "object_half_extents": (3,)}
SOURCE_FIELDS = (*SOURCE_SHAPES, "object_vel", "belt_speed")


def load_sources(path: str | os.PathLike, shapes: dict[str, str] | None = None) -> list[SourceDemo]:
    """Read and annotate the source demos of `path`; `shapes` maps object names to shapes (default: the cell's)."""
    if shapes is None:
        from r2s2r.cell.spec import CellCfg

        cell = CellCfg()
        shapes = {o.name: o.shape for o in cell.objects + cell.novel_objects}
    out = []
    fields = tuple(f"obs/datagen_info/{k}" for k in SOURCE_FIELDS)
    shapes_of = {f"obs/datagen_info/{k}": shape for k, shape in SOURCE_SHAPES.items()}
    with DemoReader(path, min_demos=1, fields=fields, shapes=shapes_of, finite=fields, attrs=("object",),
                    purpose="the grounded generator transforms real demos with their tracking signals (record them "
                    "with scripts/collect_real.py)") as reader:
        for name in reader.names:
            where = f"{path}: {name}"
            attrs = reader.attrs(name)
            data = reader.load(name, only=(DATAGEN,))
            info = data["obs"]["datagen_info"]
            if attrs["object"] not in shapes:
                raise DatasetError(f"{where}: attr 'object' = {attrs['object']!r}: expected one of {sorted(shapes)}")
            ann = demo_annotation(info, attrs, where)
            object_pos, object_quat = matrix_poses(info["object_pose"][OBJECT])
            out.append(SourceDemo(
                name=name, shape=shapes[attrs["object"]], actions=np.asarray(data["actions"], dtype=float),
                eef_pos=positions(info["eef_pose"][EEF]),
                object_pos=object_pos, object_vel=np.asarray(info["object_vel"], dtype=float)[:, :3],
                object_quat=object_quat[0],
                belt_speed=float(np.median(info["belt_speed"][: ann.ends[0]])),
                half_extents=np.asarray(info["object_half_extents"][0], dtype=float),
                bin_pos=positions(info["object_pose"][TARGET_BIN])[0], ends=ann.ends))
    return out


def _wrap_half_turn(angle: float) -> float:
    """Angle in [-pi/2, pi/2): a power grasp across an axis is the same grasp turned by half a turn."""
    return (angle + np.pi / 2) % np.pi - np.pi / 2


class MimicGenerator(BehaviorGenerator):
    """Transforms real demos to each new episode; see the module docstring."""

    name = "mimic"

    def __init__(self, cfg: MimicCfg | None = None, sources: list[SourceDemo] | None = None):
        self.cfg = (cfg or MimicCfg()).validate()
        self.sources = sources if sources is not None else load_sources(self.cfg.source)
        if not self.sources:
            raise DatasetError(f"{self.cfg.source}: no source demos")

    # -- choosing a source demo --------------------------------------------------------------------------------
    def distances(self, speed: float, lateral: float, half_extents: np.ndarray, shape: str) -> np.ndarray:
        c = self.cfg
        size = cross_section(half_extents)
        return np.array([abs(s.belt_speed - speed) / c.speed_scale
                         + abs(s.object_pos[0, 1] - lateral) / c.lateral_scale
                         + abs(cross_section(s.half_extents) - size) / c.size_scale
                         + (s.shape != shape) * c.shape_penalty for s in self.sources])

    def select(self, speed: float, lateral: float, half_extents: np.ndarray, shape: str,
               rng: np.random.Generator) -> SourceDemo:
        if self.cfg.selection == "random":
            return self.sources[rng.integers(len(self.sources))]
        order = np.argsort(self.distances(speed, lateral, half_extents, shape), kind="stable")
        return self.sources[order[rng.integers(min(self.cfg.nn_k, len(order)))]]

    # -- planning an episode -----------------------------------------------------------------------------------
    def reset(self, env, obs: dict, rng: np.random.Generator) -> dict:
        c = self.cfg
        priv = obs["privileged"]
        self.dt = 1.0 / env.cfg.control_hz
        self.rng = rng
        obj0 = np.asarray(priv["object_pos"], dtype=float)
        self.v_new = float(priv["belt_speed"][0])
        extents = np.asarray(priv["object_half_extents"], dtype=float)
        src = self.select(self.v_new, obj0[1], extents, env.obj.shape, rng)
        self.src = src
        e0, e1, e2 = src.ends
        if self.v_new <= 0:
            raise GenerationError("belt_stopped", f"belt speed {self.v_new:.3f} m/s: the object never arrives")

        # Source object reference: the tracked object until `latch_steps` before the final closure (untouched so
        # far), then its prediction along the belt at its tracked velocity until the lift, frozen after.
        latch = max(e0 - c.latch_steps, 1)
        b_src = src.object_pos.copy()
        steps_after = np.minimum(np.arange(latch, src.length) - latch, e1 - latch)
        b_src[latch:] = src.object_pos[latch] + np.outer(steps_after * self.dt, src.object_vel[latch])
        self.b_src = b_src

        # Re-time the approach: waiting steps absorb the difference in arrival time; beyond that, speed up.
        hand_speed = np.linalg.norm(np.diff(src.actions[: e0 + 1, :3], axis=0), axis=1) / self.dt
        idle = hand_speed < c.idle_speed
        meet_x = src.object_pos[e0, 0]
        needed = (meet_x - obj0[0]) / self.v_new  # s until the new object reaches the source meeting point
        recorded, waiting = e0 * self.dt, idle.sum() * self.dt
        weights = np.ones(e0)
        if needed >= recorded - waiting:
            if waiting > 0:
                weights[idle] = (needed - (recorded - waiting)) / waiting
            scale = 1.0
        else:
            weights[idle] = 0.0
            scale = max(needed / max(recorded - waiting, self.dt), c.min_time_scale)
            weights *= scale
        # New approach steps -> source fractional index, by inverting the cumulative new time.
        new_time = np.concatenate([[0.0], np.cumsum(weights)])  # in steps of dt, at source indices 0..e0
        n_approach = max(int(round(new_time[-1])), 1)
        tau_approach = np.interp(np.arange(n_approach), new_time, np.arange(e0 + 1), right=e0)
        self.tau = np.concatenate([tau_approach, np.arange(e0, src.length, dtype=float)])
        self.shift = n_approach - e0  # new step = source step + shift, from the grasp on

        # The new object is followed as tracked until the step mapped to the source's latch, predicted after.
        self.latch_step = int(np.searchsorted(self.tau, latch))
        self.lift_step = e1 + self.shift
        self.latched: tuple[np.ndarray, np.ndarray] | None = None
        self.dyaw = _wrap_half_turn(grasp_yaw(priv["object_quat"], extents) - grasp_yaw(src.object_quat,
                                                                                           src.half_extents))
        self.dz = float(extents[2] - src.half_extents[2])
        ratio = cross_section(src.half_extents) / cross_section(extents)
        self.closure = float(np.clip(ratio, *c.closure_scale))
        self.bin_offset = np.asarray(priv["target_bin_pos"], dtype=float) - src.bin_pos
        self.start_offset = np.asarray(obs["proprio"]["ee_pose"][:3], dtype=float) - src.actions[0, :3]
        self.bias = np.zeros(3)
        self.step = 0
        return {"source_demo": src.name, "time_scale": float(scale), "yaw_change": float(self.dyaw),
                "closure_scale": self.closure}

    def _object_offset(self, step: int, tau: float, seen: np.ndarray) -> np.ndarray:
        """New object reference minus the source's, at new step `step` / source index `tau`; `seen` is the tracked
        object now. Latched at `latch_step`: from then on the object is predicted, never measured (once the fingers
        touch it, its measured position moves with the hand and following it would drag both off the belt)."""
        if step < self.latch_step or self.latched is None:
            reference = seen
        else:
            pos, vel = self.latched
            reference = pos + vel * (min(step, self.lift_step) - self.latch_step) * self.dt
        return reference - interp_rows(self.b_src, tau) + np.array([0.0, 0.0, self.dz])

    def __call__(self, obs: dict) -> np.ndarray:
        c, src = self.cfg, self.src
        e0, e1, e2 = src.ends
        k = self.step
        self.step += 1
        seen = np.asarray(obs["privileged"]["object_pos"], dtype=float)
        if k == self.latch_step:
            velocity = np.asarray(obs["privileged"]["object_vel"][:3], dtype=float) * np.array([1.0, 1.0, 0.0])
            self.latched = (seen.copy(), velocity)
        tau = float(self.tau[min(k, len(self.tau) - 1)])
        action = interp_rows(src.actions, tau)
        pos_src, rot_src = action[:3], quat_to_mat(action[3:7])
        if tau < e0:  # intercept: follow the moving object as closely as the source hand followed its own
            near = np.linalg.norm(pos_src[:2] - interp_rows(src.object_pos, tau)[:2])
            lo, hi = c.track_radius
            w = float(min_jerk((hi - near) / (hi - lo)))
            offset, turn = self._object_offset(k, tau, seen), w
            offset = w * offset + (1.0 - w) * self.start_offset
        elif tau < e1:  # grasp: with the object's belt prediction
            offset, turn = self._object_offset(k, tau, seen), 1.0
        elif tau < e2:  # carry: from the grasp's frame to the bin's
            u = float(min_jerk((tau - e1) / (c.carry_blend * (e2 - e1))))
            offset = (1.0 - u) * self._object_offset(k, tau, seen) + u * self.bin_offset
            turn = 1.0 - u
        else:
            offset, turn = self.bin_offset, 0.0
        # Turn about the (source) object so the grasp keeps its relation to the object's long axis.
        rz = rpy_to_mat((0.0, 0.0, turn * self.dyaw))
        pivot = interp_rows(self.b_src, tau)

        def transform(p: np.ndarray) -> np.ndarray:
            return pivot + rz @ (p - pivot) + offset

        if tau < e1 and c.tracking_gain > 0:
            error = transform(interp_rows(src.eef_pos, tau)) - np.asarray(obs["proprio"]["ee_pose"][:3], dtype=float)
            self.bias = self.bias + c.tracking_gain * error
            norm = np.linalg.norm(self.bias)
            if norm > c.max_bias:
                self.bias *= c.max_bias / norm
        elif tau >= e1:  # from the lift on, the object sits in the hand: let the bias fade
            self.bias *= 0.9
        pos = transform(pos_src) + self.bias
        if c.action_noise > 0:
            pos = pos + self.rng.normal(0.0, c.action_noise, 3)
        hand = action[7:].copy()
        hand[FLEXORS] *= self.closure
        return np.concatenate([pos, mat_to_quat(rz @ rot_src), hand])
