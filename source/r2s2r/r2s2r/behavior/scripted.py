"""A scripted privileged controller for the pick-and-sort task, registered as the `scripted` behaviour generator.

It reads the privileged observation group (object pose and velocity, belt speed, target bin), intercepts the
object on the moving belt with a palm-down power grasp, carries it to its bin and releases it. It proves the cell
is physically workable and is the seed of the motion planner. Output: the task's `ee_pose` action.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2s2r.behavior.base import BehaviorGenerator
from r2s2r.control.grasp import GRASP_OFFSET, GRASP_ROT, HAND_CLOSED, HAND_OPEN, HAND_RELEASE, grasp_yaw
from r2s2r.geometry import mat_to_quat, rpy_to_mat
from r2s2r.trajectory import smoothstep


@dataclass(frozen=True)
class ScriptedCfg:
    """The phase machine's settings, tuned on the nominal cell."""

    hover_height: float = 0.12  # m above the grasp point while waiting for the object
    pick_x_min: float = 0.18  # the arm meets objects downstream of this x (comfortable reach)
    lead: float = 0.15  # s of belt travel added to the tracked position, to cover the arm's tracking lag
    max_speed: float = 0.5  # m/s limit on the commanded target's motion
    max_yaw_rate: float = 2.0  # rad/s limit on the commanded hand yaw
    hand_rate: float = 4.0  # rad/s limit on hand-joint targets: a step open would fling the object out of the bin
    carry_height: float = 0.30
    release_height: float = 0.16  # grasp-site height above the bin floor when the fingers open


class ScriptedPickPlace(BehaviorGenerator):
    """Phase machine: approach -> descend -> close -> lift -> carry -> lower -> release -> retreat.

    A lift that leaves the object behind on the belt goes back to approach (a second try), as an operator would.
    It acts every 1 / `control_hz` s, or at the environment's control rate once reset on one.
    """

    name = "scripted"

    def __init__(self, control_hz: float = 20.0, cfg: ScriptedCfg | None = None):
        self.cfg = cfg or ScriptedCfg()
        self.dt = 1.0 / control_hz
        self.reset()

    def reset(self, env=None, obs: dict | None = None, rng: np.random.Generator | None = None) -> dict:
        """Start over (deterministic: nothing here is random, so `rng` is not drawn from, and `obs` not needed)."""
        if env is not None:
            self.dt = 1.0 / env.cfg.control_hz
        self.phase = "approach"
        self.phase_time = 0.0
        self.target: np.ndarray | None = None
        self.hand = HAND_OPEN.copy()
        self.yaw = 0.0
        self.home: np.ndarray | None = None
        self.meet: np.ndarray | None = None  # grasp point latched when the descent starts, advanced at belt speed
        return {}

    def _go(self, phase: str) -> None:
        self.phase, self.phase_time = phase, 0.0

    def __call__(self, obs: dict) -> np.ndarray:
        c = self.cfg
        priv, proprio = obs["privileged"], obs["proprio"]
        ee = proprio["ee_pose"][:3]
        if self.target is None:
            self.target, self.home = ee.copy(), ee.copy()
        obj = priv["object_pos"]
        v = float(priv["belt_speed"][0])
        if self.phase == "approach":  # the yaw is chosen before the descent and then held through the grasp
            goal_yaw = grasp_yaw(priv["object_quat"], priv["object_half_extents"])
            self.yaw += float(np.clip(goal_yaw - self.yaw, -c.max_yaw_rate * self.dt, c.max_yaw_rate * self.dt))
        yaw_rot = rpy_to_mat((0.0, 0.0, self.yaw))
        tracked = obj + np.array([v * c.lead, 0.0, 0.0]) + yaw_rot @ GRASP_OFFSET
        hand = HAND_OPEN
        t = self.phase_time
        if self.phase == "approach":
            goal = np.array([max(tracked[0], c.pick_x_min), tracked[1], tracked[2] + c.hover_height])
            aligned = abs(goal_yaw - self.yaw) < 0.05
            in_zone = aligned and tracked[0] >= c.pick_x_min and np.linalg.norm(ee[:2] - tracked[:2]) < 0.02
            if in_zone:
                self._go("descend")
                self.meet = tracked.copy()
        elif self.phase in ("descend", "close"):
            # Follow the belt's prediction, not the measured object: once the fingers touch it, the measured
            # object moves with the hand and chasing it would drag both off the belt.
            self.meet = self.meet + np.array([v * self.dt, 0.0, 0.0])
            if self.phase == "descend":
                goal = self.meet + np.array([0.0, 0.0, c.hover_height * (1 - smoothstep(t / 0.8))])
                if t >= 0.8:
                    self._go("close")
            else:
                goal, hand = self.meet, HAND_CLOSED
                if t >= 0.5:
                    self._go("lift")
        elif self.phase == "lift":
            goal, hand = np.array([self.target[0], self.target[1], c.carry_height]), HAND_CLOSED
            if ee[2] > c.carry_height - 0.03 or t > 1.5:
                left_behind = obj[2] < ee[2] - 0.08
                self._go("approach" if left_behind else "carry")
        elif self.phase in ("carry", "lower"):
            # Bring the held object (wherever it sits in the hand) over the bin's centre, not the grasp site.
            bin_pos = priv["target_bin_pos"]
            height = c.carry_height if self.phase == "carry" else bin_pos[2] + c.release_height
            held_offset = obj[:2] - ee[:2]
            goal, hand = np.array([*(bin_pos[:2] - held_offset), height]), HAND_CLOSED
            if np.linalg.norm(ee - goal) < 0.02 or t > 3.0:
                self._go("lower" if self.phase == "carry" else "release")
        elif self.phase == "release":
            goal, hand = self.target, HAND_RELEASE
            if t >= 0.6:
                self._go("retreat")
        else:
            goal = np.array([self.target[0], self.target[1], c.carry_height]) if t < 0.5 else self.home
        self.phase_time += self.dt
        # Close at once; open gradually (a step open flings the object out of the bin).
        opening = np.clip(hand - self.hand, -c.hand_rate * self.dt, c.hand_rate * self.dt)
        self.hand = np.where(hand > self.hand, hand, self.hand + opening)
        step = goal - self.target
        n = np.linalg.norm(step)
        limit = c.max_speed * self.dt
        self.target = self.target + (step if n <= limit else step * limit / n)
        return np.concatenate([self.target, mat_to_quat(yaw_rot @ GRASP_ROT), self.hand])
