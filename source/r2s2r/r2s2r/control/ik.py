"""Differential inverse kinematics for one arm (damped least squares on the grasp site's pose).

Runs on MuJoCo C kinematics with its own scratch `MjData`, so it works the same whatever physics backend steps
the world. Used by the task to turn end-effector pose actions into joint targets, and by controllers.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
from numpy.linalg import _umath_linalg

from r2s2r.cell.mjcf import arm_joint_names
from r2s2r.core import ConfigError
from r2s2r.geometry import rotation_error

# The gufunc np.linalg.solve dispatches to (LAPACK gesv, one or many right-hand sides), called without the wrapper's
# per-call error-state context, which costs twice the 6x6 solve itself. numpy is pinned (requirements.txt); the
# damped J J^T it solves with is positive definite, so the singular-matrix error the wrapper reports cannot occur.
_solve1, _solve_many = _umath_linalg.solve1, _umath_linalg.solve


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_solve1 if b.ndim == 1 else _solve_many)(a, b, signature="dd->d")


def _consecutive(addresses: list[int], what: str) -> slice:
    first = int(addresses[0])
    if list(addresses) != list(range(first, first + len(addresses))):
        raise ConfigError(f"{what} = {list(addresses)}: expected consecutive addresses")
    return slice(first, first + len(addresses))


class ArmIK:
    """Iterated damped-least-squares IK from a seed configuration to an absolute site pose."""

    def __init__(self, model: mujoco.MjModel, side: str, site: str | None = None, damping: float = 0.05,
                 rot_weight: float = 0.5, posture_gain: float = 0.02, home_q: np.ndarray | None = None):
        self.model = model
        self.data = mujoco.MjData(model)
        self.site_id = model.site(site or f"{side}_grasp").id
        joints = [model.joint(n) for n in arm_joint_names(side)]
        # An arm's hinges are consecutive in its kinematic chain, so its coordinates are one slice of qpos and qvel.
        self.qadr = _consecutive([j.qposadr[0] for j in joints], f"{side} arm qpos addresses")
        self.dadr = _consecutive([j.dofadr[0] for j in joints], f"{side} arm dof addresses")
        self.lower = np.array([j.range[0] for j in joints])
        self.upper = np.array([j.range[1] for j in joints])
        self.damping = damping
        self.rot_weight = rot_weight
        self.posture_gain = posture_gain
        self.home_q = home_q
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        # The arm's 6x7 Jacobian, column-major: the layout its first version (a stack of fancy-indexed rows) had,
        # which decides how BLAS sums the products below, and so the last bits of every solution.
        self._jac = np.zeros((6, len(joints)), order="F")
        self._damping_eye = damping**2 * np.eye(6)
        self._eye = np.eye(len(joints))

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
        m, d, jac = self.model, self.data, self._jac
        x, r = d.site_xpos[self.site_id], d.site_xmat[self.site_id].reshape(3, 3)  # views, current after mj_kinematics
        err_pos = np.inf
        for _ in range(iterations):
            d.qpos[self.qadr] = q
            mujoco.mj_kinematics(m, d)
            e_pos, e_rot = pos - x, self.rot_weight * rotation_error(r, rot)
            # Norms as math.sqrt of a dot product (what np.linalg.norm computes for a vector, at a fraction of its
            # call cost: a converged solve is a single pass through this check).
            err_pos = math.sqrt(e_pos.dot(e_pos))
            if err_pos < tol and math.sqrt(e_rot.dot(e_rot)) < tol:
                break
            e = np.concatenate([e_pos, e_rot])
            mujoco.mj_comPos(m, d)
            mujoco.mj_jacSite(m, d, self._jacp, self._jacr, self.site_id)
            jac[:3] = self._jacp[:, self.dadr]
            np.multiply(self.rot_weight, self._jacr[:, self.dadr], out=jac[3:])
            jjt = jac @ jac.T + self._damping_eye
            dq = jac.T @ _solve(jjt, e)
            if self.home_q is not None:  # null-space pull toward the home posture keeps the elbow where it belongs
                null = self._eye - jac.T @ _solve(jjt, jac)
                dq += null @ (self.posture_gain * (self.home_q - q))
            step = math.sqrt(dq.dot(dq))
            if step > 0.5:
                dq *= 0.5 / step
            # np.minimum/np.maximum: np.clip's result for finite values, without its per-call overhead.
            q_next = np.minimum(np.maximum(q + dq, self.lower), self.upper)
            if min_step > 0.0:
                moved = q_next - q
                if math.sqrt(moved.dot(moved)) < min_step:
                    break
            q = q_next
        return q, err_pos
