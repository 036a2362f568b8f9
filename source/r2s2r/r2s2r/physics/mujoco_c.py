"""MuJoCo C on the CPU: the embedded default and the oracle the other backends are tested against."""

from __future__ import annotations

import mujoco
import numpy as np

from r2s2r.cell.mjcf import PeriodicJoint
from r2s2r.physics.base import PhysicsBackend

# Warnings that mean the solution can no longer be trusted (see mjtWarning).
_FATAL_WARNINGS = [int(w) for w in (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS,
                                    mujoco.mjtWarning.mjWARN_BADQVEL)]


class MujocoCBackend(PhysicsBackend):
    name = "mujoco"

    def __init__(self, model: mujoco.MjModel, nworld: int = 1, periodic: tuple[PeriodicJoint, ...] = ()):
        super().__init__(model, nworld, periodic)
        self.datas = [mujoco.MjData(model) for _ in range(nworld)]

    def reset(self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> None:
        m = self.model
        qpos = self._rows(qpos, self.nworld, m.nq, "qpos")
        qvel = self._rows(qvel, self.nworld, m.nv, "qvel")
        ctrl = self._rows(ctrl, self.nworld, m.nu, "ctrl")
        for i, d in enumerate(self.datas):
            mujoco.mj_resetData(m, d)
            d.qpos[:], d.qvel[:], d.ctrl[:] = qpos[i], qvel[i], ctrl[i]
            mujoco.mj_forward(m, d)

    def set_ctrl(self, ctrl: np.ndarray) -> None:
        ctrl = self._rows(ctrl, self.nworld, self.model.nu, "ctrl")
        for i, d in enumerate(self.datas):
            d.ctrl[:] = ctrl[i]

    def step(self, nsteps: int = 1) -> None:
        m = self.model
        for d in self.datas:
            for _ in range(nsteps):
                mujoco.mj_step(m, d)
                if self.periodic:
                    self._wrap(d.qpos)

    def qpos(self) -> np.ndarray:
        return np.stack([d.qpos for d in self.datas])

    def qvel(self) -> np.ndarray:
        return np.stack([d.qvel for d in self.datas])

    def xpos(self) -> np.ndarray:
        return np.stack([d.xpos for d in self.datas])

    def xquat(self) -> np.ndarray:
        return np.stack([d.xquat for d in self.datas])

    def host_data(self, world: int = 0) -> mujoco.MjData:
        return self.datas[world]

    def unstable(self) -> np.ndarray:
        return np.array(
            [
                not (np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all())
                or d.warning.number[_FATAL_WARNINGS].any()
                for d in self.datas
            ]
        )
