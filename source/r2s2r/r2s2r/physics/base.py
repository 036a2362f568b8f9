"""The physics interface the task talks to; implementations step the same `MjModel`.

Every backend holds `nworld` copies of the world. Arrays it returns are host (numpy) arrays with a leading world
axis. `host_data(world)` gives a `MjData` holding that world's state, which is what renderers, the USD pose sync
and kinematic queries read, so nothing downstream branches on the backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import mujoco
import numpy as np

from r2s2r.cell.mjcf import PeriodicJoint

# The `MjData` fields that make up a world's state as `host_data` exposes it for writing (see there).
STATE_FIELDS = ("qpos", "qvel", "ctrl", "act", "mocap_pos", "mocap_quat")


class PhysicsBackend(ABC):
    name: str

    def __init__(self, model: mujoco.MjModel, nworld: int = 1, periodic: tuple[PeriodicJoint, ...] = ()):
        if nworld < 1:
            raise ValueError(f"nworld = {nworld!r}: expected an integer >= 1")
        self.model = model
        self.nworld = nworld
        self.periodic = periodic

    @abstractmethod
    def reset(self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> None:
        """Set every world's state ((nworld, nq), (nworld, nv), (nworld, nu); a single row is broadcast)."""

    @abstractmethod
    def set_ctrl(self, ctrl: np.ndarray) -> None:
        """Set controls, (nworld, nu) or (nu,) broadcast to all worlds."""

    @abstractmethod
    def step(self, nsteps: int = 1) -> None:
        """Advance every world by `nsteps` physics steps."""

    @abstractmethod
    def qpos(self) -> np.ndarray: ...

    @abstractmethod
    def qvel(self) -> np.ndarray: ...

    @abstractmethod
    def xpos(self) -> np.ndarray:
        """Body positions (nworld, nbody, 3)."""

    @abstractmethod
    def xquat(self) -> np.ndarray:
        """Body orientations (nworld, nbody, 4), w first."""

    @abstractmethod
    def host_data(self, world: int = 0) -> mujoco.MjData:
        """A `MjData` holding world `world`'s current state with kinematics and contacts computed.

        It reflects the state as of this call: call again after `reset` or `step` (on MuJoCo C it is the live data
        and stays current, elsewhere it is a host copy). Writing into its state fields (`STATE_FIELDS`) sets those
        entries of the world's state, as writing into a live `MjData` would: every backend applies such writes
        before its next call (`reset` then overrides them). Other fields are derived and are recomputed.
        """

    @abstractmethod
    def unstable(self) -> np.ndarray:
        """(nworld,) bool: the world's state is not finite or the solver raised a warning since reset."""

    @staticmethod
    def _rows(x: np.ndarray, nworld: int, width: int, name: str) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1:
            x = np.broadcast_to(x, (nworld, x.shape[0]))
        if x.shape != (nworld, width):
            raise ValueError(f"{name} has shape {x.shape}: expected ({nworld}, {width}) or ({width},)")
        return x

    def _wrap(self, qpos: np.ndarray) -> None:
        """Wrap one world's `qpos` (after every physics step). In Python floats: the IEEE operations of the array
        expression `(q + p/2) % p - p/2` (Python's float % and NumPy's remainder agree to the bit), at a fraction
        of NumPy's per-call cost on a scalar."""
        for p in self.periodic:
            half = p.period / 2
            qpos[p.qpos_adr] = (float(qpos[p.qpos_adr]) + half) % p.period - half
