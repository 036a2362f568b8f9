"""Differential inverse kinematics for one arm (damped least squares on the grasp site's pose).

Runs on MuJoCo C kinematics with its own scratch `MjData`, so it works the same whatever physics backend steps
the world. Used by the task to turn end-effector pose actions into joint targets, and by controllers.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from r2s2r.cell.mjcf import arm_joint_names
from r2s2r.geometry import rotation_error


class ArmIK:
    """Iterated damped-least-squares IK from a seed configuration to an absolute site pose."""

    def __init__(self, model: mujoco.MjModel, side: str, site: str | None = None, damping: float = 0.05,
                 rot_weight: float = 0.5, posture_gain: float = 0.02, home_q: np.ndarray | None = None):
        self.model = model
        self.data = mujoco.MjData(model)
        self.site_id = model.site(site or f"{side}_grasp").id
        joints = [model.joint(n) for n in arm_joint_names(side)]
        self.qadr = np.array([j.qposadr[0] for j in joints])
        self.dadr = np.array([j.dofadr[0] for j in joints])
        self.lower = np.array([j.range[0] for j in joints])
        self.upper = np.array([j.range[1] for j in joints])
        self.damping = damping
        self.rot_weight = rot_weight
        self.posture_gain = posture_gain
        self.home_q = home_q
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    def site_pose(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Forward kinematics of the site for arm joints `q` (other joints at the scratch state)."""
        self.data.qpos[self.qadr] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.site_id].copy(), self.data.site_xmat[self.site_id].reshape(3, 3).copy()

    def solve(self, q_seed: np.ndarray, pos: np.ndarray, rot: np.ndarray, iterations: int = 20,
              tol: float = 1e-4, min_step: float = 0.0) -> tuple[np.ndarray, float]:
        """Joint angles reaching `pos`/`rot` from `q_seed`; returns (q, position error in m).

        `min_step` (rad): stop once an update moves the joints less than this (the pose is as close as it gets,
        e.g. out of reach); 0 runs to `tol` or `iterations`."""
        q = np.clip(np.asarray(q_seed, dtype=float), self.lower, self.upper)
        err_pos = np.inf
        for _ in range(iterations):
            x, r = self.site_pose(q)
            e_pos, e_rot = pos - x, self.rot_weight * rotation_error(r, rot)
            # Norms as math.sqrt of a dot product (what np.linalg.norm computes for a vector, at a fraction of its
            # call cost: a converged solve is a single pass through this check).
            err_pos = math.sqrt(e_pos.dot(e_pos))
            if err_pos < tol and math.sqrt(e_rot.dot(e_rot)) < tol:
                break
            e = np.concatenate([e_pos, e_rot])
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site_id)
            jac = np.vstack([self._jacp[:, self.dadr], self.rot_weight * self._jacr[:, self.dadr]])
            jjt = jac @ jac.T + self.damping**2 * np.eye(6)
            dq = jac.T @ np.linalg.solve(jjt, e)
            if self.home_q is not None:  # null-space pull toward the home posture keeps the elbow where it belongs
                null = np.eye(len(q)) - jac.T @ np.linalg.solve(jjt, jac)
                dq += null @ (self.posture_gain * (self.home_q - q))
            step = np.linalg.norm(dq)
            if step > 0.5:
                dq *= 0.5 / step
            q_next = np.clip(q + dq, self.lower, self.upper)
            if np.linalg.norm(q_next - q) < min_step:
                break
            q = q_next
        return q, err_pos
