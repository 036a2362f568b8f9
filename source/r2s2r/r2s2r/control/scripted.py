"""A scripted privileged controller for the pick-and-sort task.

It reads the privileged observation group (object pose and velocity, belt speed, target bin), intercepts the
object on the moving belt with a palm-down power grasp, carries it to its bin and releases it. It proves the cell
is physically workable and is the seed of the motion planner. Output: the task's `ee_pose` action.
"""

from __future__ import annotations

import numpy as np

from r2s2r.geometry import mat_to_quat

# Palm down (volar normal -z), fingers across the belt (+y), thumb upstream (-x).
GRASP_ROT = np.column_stack([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
GRASP_QUAT = mat_to_quat(GRASP_ROT)
# Grasp-site offset from the object's centre (world): slightly toward the robot and below the centre, so the
# object sits under the proximal phalanges and the palm presses on its top.
GRASP_OFFSET = np.array([0.0, -0.015, 0.012])
HAND_OPEN = np.zeros(20)
HAND_CLOSED = np.array([1.2, 0.6, 0.8, 0.6] + [1.5, 0.0, 1.4, 1.2] * 4)


class ScriptedPickPlace:
    """Phase machine: approach -> descend -> close -> lift -> carry -> release -> retreat."""

    hover_height = 0.12  # m above the grasp point while waiting for the object
    pick_x_min = 0.18  # the arm meets objects downstream of this x (comfortable reach)
    lead = 0.15  # s of belt travel added to the tracked position, to cover the arm's tracking lag
    max_speed = 0.8  # m/s limit on the commanded target's motion
    carry_height = 0.30

    def __init__(self, control_hz: float = 20.0):
        self.dt = 1.0 / control_hz
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self.phase_time = 0.0
        self.target: np.ndarray | None = None
        self.home: np.ndarray | None = None

    def _go(self, phase: str) -> None:
        self.phase, self.phase_time = phase, 0.0

    def __call__(self, obs: dict) -> np.ndarray:
        priv, proprio = obs["privileged"], obs["proprio"]
        ee = proprio["ee_pose"][:3]
        if self.target is None:
            self.target, self.home = ee.copy(), ee.copy()
        obj = priv["object_pos"]
        v = float(priv["belt_speed"][0])
        tracked = obj + np.array([v * self.lead, 0.0, 0.0]) + GRASP_OFFSET
        hand = HAND_OPEN
        t = self.phase_time
        if self.phase == "approach":
            goal = np.array([max(tracked[0], self.pick_x_min), tracked[1], tracked[2] + self.hover_height])
            in_zone = tracked[0] >= self.pick_x_min and np.linalg.norm(ee[:2] - tracked[:2]) < 0.02
            if in_zone:
                self._go("descend")
        elif self.phase == "descend":
            a = min(t / 0.8, 1.0)
            goal = tracked + np.array([0.0, 0.0, self.hover_height * (1 - a * a * (3 - 2 * a))])
            if t >= 0.8:
                self._go("close")
        elif self.phase == "close":
            goal, hand = tracked, HAND_CLOSED
            if t >= 0.5:
                self._go("lift")
        elif self.phase == "lift":
            goal, hand = np.array([self.target[0], self.target[1], self.carry_height]), HAND_CLOSED
            if ee[2] > self.carry_height - 0.03 or t > 1.5:
                self._go("carry")
        elif self.phase == "carry":
            bin_pos = priv["target_bin_pos"]
            goal, hand = np.array([bin_pos[0], bin_pos[1], self.carry_height]), HAND_CLOSED
            if np.linalg.norm(ee - goal) < 0.03 or t > 2.5:
                self._go("release")
        elif self.phase == "release":
            goal = self.target
            if t >= 0.6:
                self._go("retreat")
        else:
            goal = self.home
        self.phase_time += self.dt
        step = goal - self.target
        n = np.linalg.norm(step)
        limit = self.max_speed * self.dt
        self.target = self.target + (step if n <= limit else step * limit / n)
        return np.concatenate([self.target, GRASP_QUAT, hand])
