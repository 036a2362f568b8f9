"""The pick-and-sort rules, written once over batched state: episode sampling, the drive model, the observation
layout and the outcome.

Both environments call these functions, each on its own physics: `R2S2R-PickSort-v0` on MuJoCo's state as a batch
of one, the Isaac Lab environment on Newton's state for all its environments at once. State arrays are torch
tensors of shape (num_envs, ...) on the environment's device; what is drawn per episode is drawn on the host from
each episode's own seeded generators, so a seed means the same episode on every backend and at every batch size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import mujoco
import numpy as np
import torch

from r2s2r.cell.mjcf import CellIndex, object_body_name
from r2s2r.cell.spec import BeltCfg, CellCfg, ObjectCfg
from r2s2r.control.ik import ArmIK
from r2s2r.core import ConfigError
from r2s2r.geometry import quat_to_mat
from r2s2r.sim import belt_drive_speed, light_draw, lighting_gain, painted
from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS, ConditionCfg, PickSortEnvCfg

FAILURES = ("dropped", "fell_off_belt", "wrong_bin", "timeout", "unstable")
OUTCOMES = ("running", "success", *FAILURES)  # an outcome code is an index into this
RUNNING, SUCCESS = 0, 1
DROPPED, FELL_OFF_BELT, WRONG_BIN, TIMEOUT, UNSTABLE = (OUTCOMES.index(f) for f in FAILURES)
SETTLE_SPEED = 0.05  # m/s: an object slower than this is at rest
LIFTED_HEIGHT = 0.06  # m above the belt surface: the object has been picked up
BELOW_BELT = 0.02  # m under the belt surface: the object has left it
SPAWN_MARGIN = 0.08  # m: the object spawns at least this far inside the belt's upstream end

# The observation groups' terms and widths, in the order a flat observation concatenates them.
PROPRIO = {"arm_q": 7, "arm_dq": 7, "hand_q": 20, "ee_pose": 7, "belt_setpoint": 1}
PRIVILEGED = {"object_pos": 3, "object_quat": 4, "object_vel": 6, "belt_speed": 1, "object_half_extents": 3,
              "target_bin_pos": 3, "colour_id": 1, "object_id": 1}


def split(flat: np.ndarray, layout: dict[str, int]) -> dict[str, np.ndarray]:
    """A flat observation group (its terms concatenated in `layout`'s order) as {term: values}."""
    bounds = np.cumsum([0, *layout.values()])
    return {name: flat[..., a:b] for name, a, b in zip(layout, bounds[:-1], bounds[1:])}


# -- episodes ------------------------------------------------------------------------------------------------------
@dataclass
class Episodes:
    """What reset draws for a batch of episodes; rows follow the seeds given to `sample_episodes`."""

    condition: list[str]
    objects: list[ObjectCfg]  # the episode's object
    object_index: np.ndarray  # (N,) int: its index in cell.objects + cell.novel_objects
    colour: list[str]  # its colour, which names its bin
    colour_index: np.ndarray  # (N,) int: the colour's index in sorted(cell.colours)
    belt_setpoint: np.ndarray  # (N,) m/s: the conveyor's commanded speed
    belt_speed: np.ndarray  # (N,) m/s: the belt's true speed at the start (set-point times the cell's scale)
    object_pose: np.ndarray  # (N, 7): the object's spawn position and quaternion (w, x, y, z) in the cell
    light_pos: np.ndarray  # (N, nlight, 3)
    light_diffuse: np.ndarray  # (N, nlight, 3)
    rngs: list[np.random.Generator]  # each episode's own stream after sampling (sensor noise draws from it)
    belt_rngs: list[np.random.Generator]  # each episode's belt-jitter stream (see `drive_speeds`)


def sample_episodes(cfg: PickSortEnvCfg, seeds: Sequence[int | None], conditions: Sequence[str],
                    lights_nominal: tuple[np.ndarray, np.ndarray]) -> Episodes:
    """Draw one episode per seed under its condition (a key of `CONDITIONS`): belt set-point, object, colour,
    lighting, spawn delay, lateral offset and yaw, in that order from the seed's stream. The belt's jitter and the
    cell's trial-to-trial lighting draw from streams of their own, so rendering (which draws sensor noise from the
    episode's stream) or not leaves the physics of a seeded episode unchanged."""
    cell = cfg.cell
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        raise ConfigError(f"condition = {bad[0]!r}: expected one of {', '.join(CONDITIONS)}")
    colours = sorted(cell.colours)
    all_objects = cell.objects + cell.novel_objects
    rows = []
    for seed, name in zip(seeds, conditions):
        condition: ConditionCfg = CONDITIONS[name]
        rng = np.random.default_rng(seed)
        belt_rng = np.random.default_rng(None if seed is None else (seed, 1))
        light_rng = np.random.default_rng(None if seed is None else (seed, 2))
        objects = cell.novel_objects if condition.novel_objects else cell.objects
        lo, hi = condition.belt_speed or cell.belt.speed_range
        setpoint = float(rng.uniform(lo, hi))
        obj = objects[rng.integers(len(objects))]
        colour = colours[rng.integers(len(colours))]
        lights = light_draw(*lights_nominal, rng, scale=condition.light_scale, tint=condition.light_tint,
                            jitter=condition.light_jitter, gain=lighting_gain(cell.lighting, light_rng))
        delay = rng.uniform(*cfg.spawn_delay)
        x0 = max(cfg.spawn_x - setpoint * delay, -cell.belt.length / 2 + SPAWN_MARGIN + cell.belt.center[0])
        y0 = cell.belt.center[1] + rng.uniform(*cfg.lateral_range)
        z0 = cell.belt.center[2] + obj.half_height + 0.001
        yaw = rng.uniform(-np.pi, np.pi) if obj.shape in ("box", "ellipsoid") else 0.0
        pose = (x0, y0, z0, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        rows.append((name, obj, colour, setpoint, pose, lights, rng, belt_rng))
    names, objs, cols, setpoints, poses, lights, rngs, belt_rngs = map(list, zip(*rows))
    setpoints = np.array(setpoints)
    return Episodes(
        condition=names, objects=objs, object_index=np.array([all_objects.index(o) for o in objs]),
        colour=cols, colour_index=np.array([colours.index(c) for c in cols]), belt_setpoint=setpoints,
        belt_speed=drive_speeds(cell.belt, setpoints, None), object_pose=np.array(poses),
        light_pos=np.array([p for p, _ in lights]), light_diffuse=np.array([d for _, d in lights]),
        rngs=rngs, belt_rngs=belt_rngs)


def initial_states(model: mujoco.MjModel, index: CellIndex, episodes: Episodes
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each episode's first state in the model's layout, (qpos (N, nq), qvel (N, nv), ctrl (N, nu)): the robot at
    its home keyframe and at rest, the belt and the episode's object moving at the belt's speed, the object at its
    spawn pose, every other object parked."""
    n = len(episodes.objects)
    qpos, ctrl = np.tile(model.key_qpos[0], (n, 1)), np.tile(model.key_ctrl[0], (n, 1))
    qvel = np.zeros((n, model.nv))
    rows = np.arange(n)
    joints = [model.joint(object_body_name(o)) for o in episodes.objects]
    qadr = np.array([int(j.qposadr[0]) for j in joints])
    dadr = np.array([int(j.dofadr[0]) for j in joints])
    qpos[rows[:, None], qadr[:, None] + np.arange(7)] = episodes.object_pose
    qvel[rows, dadr] = episodes.belt_speed
    qvel[:, index.belt_dof] = episodes.belt_speed
    ctrl[:, index.belt_act] = episodes.belt_speed
    return qpos, qvel, ctrl


def geom_colours(model: mujoco.MjModel, cell: CellCfg, episodes: Episodes) -> np.ndarray:
    """(N, ngeom, 4): each episode's paint, its object in its colour and every other object grey."""
    return np.stack([painted(model, cell, obj, cell.colours[colour])
                     for obj, colour in zip(episodes.objects, episodes.colour)])


def light_gains(light_diffuse: np.ndarray, nominal_diffuse: np.ndarray) -> np.ndarray:
    """(N, 3): episodes' lighting (their lights' diffuse colours, (N, nlight, 3), as `Episodes.light_diffuse`)
    relative to the cell's nominal lights (`nominal_diffuse`, (nlight, 3)), per colour channel: the total diffuse
    light of each draw over the nominal total. A renderer whose lights cannot change from one environment to the
    next (Newton's ray tracer) shows an episode's lighting by multiplying its surface colours by this, which is exact
    for the diffuse light of lights that keep their poses."""
    nominal = nominal_diffuse.sum(axis=0)
    total = np.asarray(light_diffuse).sum(axis=1)
    return np.divide(total, nominal, out=np.ones_like(total), where=nominal > 0)


# -- the drive model -----------------------------------------------------------------------------------------------
def drive_speeds(belt: BeltCfg, setpoints: np.ndarray, rngs: Sequence[np.random.Generator] | None) -> np.ndarray:
    """The belt's true speed (m/s) for one control period of each episode under its set-point: scaled by the cell's
    `speed_scale`, with the jitter drawn from that episode's belt stream (`rngs` None: no jitter)."""
    rngs = [None] * len(setpoints) if rngs is None else rngs
    return np.array([belt_drive_speed(belt, float(s), rng) for s, rng in zip(setpoints, rngs)])


def ee_pose_targets(ik: ArmIK, poses: np.ndarray, seeds: np.ndarray, iterations: int) -> np.ndarray:
    """The right arm's joint targets (N, 7) of `ee_pose` actions' grasp-site poses (N, 7: position, quaternion
    w,x,y,z, normalized here): each the IK from its seed, the targets the drives hold."""
    targets = np.empty((len(poses), 7))
    for i, (pose, seed) in enumerate(zip(poses, seeds)):
        quat = pose[3:7] / max(np.linalg.norm(pose[3:7]), 1e-9)
        targets[i], _ = ik.solve(seed, pose[:3], quat_to_mat(quat), iterations=iterations)
    return targets


# -- the outcome ---------------------------------------------------------------------------------------------------
class Judge:
    """The success and failure rules of a cell, on a device: `outcome` of a batch of object states.

    An episode succeeds when its object is at rest inside the bin of its colour. It fails, in this order of
    precedence, when the physics went unstable; when the object is at rest in another bin (wrong_bin); when it
    has gone past the belt's downstream end and below its surface (fell_off_belt); when, having been lifted, it
    is at rest outside every bin and touches no part of the right arm or hand (dropped); or when it fell below the
    belt without having been lifted (dropped). A timeout is the environment's to declare."""

    def __init__(self, cell: CellCfg, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float64):
        as_tensor = lambda x: torch.tensor(np.asarray(x, dtype=float), dtype=dtype, device=device)  # noqa: E731
        bins = {b.colour: b for b in cell.bins}
        ordered = [bins[c] for c in sorted(cell.colours)]  # row k: the bin of colour index k
        self.bin_center = as_tensor([b.center for b in ordered])  # (B, 3)
        self.bin_half = as_tensor([(b.inner_size[0] / 2, b.inner_size[1] / 2) for b in ordered])  # (B, 2)
        self.bin_top = as_tensor([b.center[2] + b.wall_height for b in ordered])  # (B,)
        self.half_height = as_tensor([o.half_height for o in cell.objects + cell.novel_objects])
        self.belt_z = float(cell.belt.center[2])
        self.belt_end = float(cell.belt.center[0] + cell.belt.length / 2)

    def bin_containing(self, pos: torch.Tensor) -> torch.Tensor:
        """(N,) the colour index of the bin each position lies in, -1 outside every bin."""
        offset = (pos[:, None, :2] - self.bin_center[None, :, :2]).abs()
        inside = (offset < self.bin_half).all(-1) & (pos[:, None, 2] < self.bin_top)  # (N, B)
        index = torch.arange(inside.shape[1], device=pos.device).expand_as(inside)
        return torch.where(inside, index, -1).max(-1).values

    def outcome(self, pos: torch.Tensor, velocity: torch.Tensor, object_index: torch.Tensor,
                colour_index: torch.Tensor, lifted: torch.Tensor, touching: torch.Tensor,
                unstable: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(outcome codes (N,) indexing OUTCOMES, lifted (N,)) of objects at `pos` (N, 3) moving at linear
        `velocity` (N, 3), each episode's object and colour indices, whether each was lifted before, touches the
        right arm or hand, and whether its physics went unstable. Call once per control period: `lifted` carries
        from one call to the next."""
        half_height = self.half_height[object_index]
        lifted = lifted | (pos[:, 2] > self.belt_z + half_height + LIFTED_HEIGHT)
        at_rest = velocity.norm(dim=-1) < SETTLE_SPEED
        in_bin = self.bin_containing(pos)
        below_belt = pos[:, 2] < self.belt_z - BELOW_BELT
        code = torch.full_like(object_index, RUNNING)
        # From the lowest precedence to the highest: each later rule overrides the ones before it.
        code = torch.where(~lifted & below_belt, DROPPED, code)
        code = torch.where(lifted & (in_bin < 0) & at_rest & ~touching, DROPPED, code)
        code = torch.where((pos[:, 0] > self.belt_end) & below_belt, FELL_OFF_BELT, code)
        settled = (in_bin >= 0) & at_rest
        code = torch.where(settled, torch.where(in_bin == colour_index, SUCCESS, WRONG_BIN), code)
        code = torch.where(unstable, UNSTABLE, code)
        return code, lifted


def canonical_quat(quat: torch.Tensor) -> torch.Tensor:
    """Quaternions (..., 4; w first) with w >= 0: one sign for each rotation, as MuJoCo's conversions give it."""
    return torch.where(quat[..., :1] < 0, -quat, quat)
