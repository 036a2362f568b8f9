"""MuJoCo Warp: `nworld` copies of the cell stepped together on a Warp device (a CUDA GPU, or Warp's CPU device).

The state lives on the device between calls; the host sees it only through the accessors (one `.numpy()` copy
each) and `host_data`, a host copy whose state edits are written back before the next call (see `host_data`).
The belt's periodic joint is wrapped by a small kernel after every step, so stepping never round-trips through
the host.
"""

# No `from __future__ import annotations` here: Warp reads the kernel signatures' annotations as types.

import mujoco
import mujoco_warp as mjw
import numpy as np
import warp as wp

from r2s2r.cell.mjcf import PeriodicJoint
from r2s2r.physics.base import STATE_FIELDS, PhysicsBackend

# Contact and constraint buffers. The cell has a few contacts per object at rest (ten objects on the floor or belt)
# and more while a hand grasps, each finger adding its own; 128 contacts per world leaves room above that. MJWarp
# pools contacts across worlds (naconmax = nconmax * nworld), so one busy world may borrow from quiet ones.
# Constraint rows are a hard per-world limit (njmax): every contact may need 2 * (condim - 1) pyramidal rows (condim
# 4 on objects and fingertips: 6 rows), plus one row per dof with friction loss and per limited joint;
# `default_njmax` sizes it for all of them at once (836 rows for the cell; rows the solver leaves unused cost
# little). Overflow drops contacts/rows silently, so `unstable()` reports it.
DEFAULT_NCONMAX = 128

# Overflow bits that mean contacts or constraint rows were dropped. The solver-iteration bits are left out:
# reaching the iteration limit is routine and the result is still a valid (if less converged) step.
_DROPPED = int(
    mjw.OverflowType.NEFC | mjw.OverflowType.NJMAX_NNZ | mjw.OverflowType.BROADPHASE
    | mjw.OverflowType.NARROWPHASE | mjw.OverflowType.CCD | mjw.OverflowType.HFIELD
    | mjw.OverflowType.NVMAX | mjw.OverflowType.EPA_HORIZON
)


@wp.kernel
def _wrap_periodic(qpos: wp.array2d(dtype=float), adr: wp.array(dtype=int), period: wp.array(dtype=float)):
    # Same rule as PhysicsBackend._wrap: q -> [-p/2, p/2), one thread per (world, periodic joint).
    w, j = wp.tid()
    i = adr[j]
    p = period[j]
    q = qpos[w, i]
    q = q - p * wp.floor((q + 0.5 * p) / p)
    # float32 rounding can land exactly on +p/2 (q just below -p/2 shifted up); keep the interval half-open.
    if q >= 0.5 * p:
        q = q - p
    qpos[w, i] = q


@wp.kernel
def _flag_nonfinite(qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float), flags: wp.array(dtype=int)):
    # One thread per (world, coordinate) over max(nq, nv); every writer stores the same 1, so no atomics needed.
    w, i = wp.tid()
    if i < qpos.shape[1]:
        if not wp.isfinite(qpos[w, i]):
            flags[w] = 1
    if i < qvel.shape[1]:
        if not wp.isfinite(qvel[w, i]):
            flags[w] = 1


def default_device() -> str:
    return "cuda:0" if wp.get_cuda_device_count() > 0 else "cpu"


def default_njmax(model: mujoco.MjModel, nconmax: int) -> int:
    maxcondim = int(model.geom_condim.max(initial=1))
    if model.npair:
        maxcondim = max(maxcondim, int(model.pair_dim.max()))
    rows_per_contact = 2 * (maxcondim - 1) if model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL else maxcondim
    frictionloss_rows = int((model.dof_frictionloss > 0).sum())
    limit_rows = int(model.jnt_limited.sum())
    return nconmax * max(rows_per_contact, 1) + frictionloss_rows + limit_rows + model.neq * 6


class MujocoWarpBackend(PhysicsBackend):
    name = "mujoco_warp"

    def __init__(self, model: mujoco.MjModel, nworld: int = 1, periodic: tuple[PeriodicJoint, ...] = (),
                 device: str | None = None, nconmax: int = DEFAULT_NCONMAX, njmax: int | None = None,
                 graph: bool = True):
        """`graph`: capture one step (MJWarp step + belt wrap) into a Warp graph on the first `step` call and
        replay it for every later step. A step is ~100 small kernel launches, and launching them from Python costs
        more than running them at small `nworld`: replay is a CUDA graph on the GPU and a C++-side replay on
        Warp's CPU device (same results, far less Python per step). `graph=False` launches eagerly. The graph binds
        the `wdata` arrays, so they are only ever written in place (`assign`), never replaced."""
        super().__init__(model, nworld, periodic)
        self.device = wp.get_device(device or default_device())
        self.nconmax = nconmax
        self.njmax = njmax if njmax is not None else default_njmax(model, nconmax)
        self._hosts: dict[int, mujoco.MjData] = {}
        self._pulled: dict[int, dict[str, np.ndarray]] = {}  # per host copy: its state fields as last pulled
        with wp.ScopedDevice(self.device):
            self.wmodel = mjw.put_model(model)
            # Overflows are reported through `unstable()`; in-kernel printing would also fire on the routine
            # "line search iteration limit reached" every step and flood the log.
            self.wmodel.opt.warn_overflow = False
            self.wdata = mjw.make_data(model, nworld=nworld, nconmax=self.nconmax, njmax=self.njmax)
            self._periodic_adr = wp.array([p.qpos_adr for p in periodic], dtype=int)
            self._periodic_period = wp.array([p.period for p in periodic], dtype=float)
            self._flags = wp.zeros(nworld, dtype=int)
        self._use_graph = graph
        self._graph = None  # captured lazily on the first step, after the kernels have compiled

    # ------------------------------------------------------------------------------------------------------------
    def reset(self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> None:
        m = self.model
        qpos = self._rows(qpos, self.nworld, m.nq, "qpos")
        qvel = self._rows(qvel, self.nworld, m.nv, "qvel")
        ctrl = self._rows(ctrl, self.nworld, m.nu, "ctrl")
        self._push_host_edits()  # then overridden below, as a reset overrides writes into a live MjData
        with wp.ScopedDevice(self.device):
            # As mj_resetData: clears time, warm start, applied forces, activations and the overflow flags.
            mjw.reset_data(self.wmodel, self.wdata)
            self.wdata.qpos.assign(qpos.astype(np.float32))
            self.wdata.qvel.assign(qvel.astype(np.float32))
            self.wdata.ctrl.assign(ctrl.astype(np.float32))
            mjw.forward(self.wmodel, self.wdata)

    def set_ctrl(self, ctrl: np.ndarray) -> None:
        ctrl = self._rows(ctrl, self.nworld, self.model.nu, "ctrl")
        self._push_host_edits()
        self.wdata.ctrl.assign(ctrl.astype(np.float32))

    def _step_once(self) -> None:
        mjw.step(self.wmodel, self.wdata)
        if self.periodic:
            wp.launch(_wrap_periodic, dim=(self.nworld, len(self.periodic)),
                      inputs=[self.wdata.qpos, self._periodic_adr, self._periodic_period])

    def step(self, nsteps: int = 1) -> None:
        self._push_host_edits()
        with wp.ScopedDevice(self.device):
            if self._use_graph and self._graph is None:
                # Capture needs compiled kernels and must not advance the state, so the first step runs eagerly
                # and the capture (which records without executing) follows it.
                self._step_once()
                nsteps -= 1
                with wp.ScopedCapture() as capture:
                    self._step_once()
                self._graph = capture.graph
            for _ in range(nsteps):
                if self._graph is not None:
                    wp.capture_launch(self._graph)
                else:
                    self._step_once()

    # ------------------------------------------------------------------------------------------------------------
    def qpos(self) -> np.ndarray:
        self._push_host_edits()
        return self.wdata.qpos.numpy().astype(np.float64)

    def qvel(self) -> np.ndarray:
        self._push_host_edits()
        return self.wdata.qvel.numpy().astype(np.float64)

    def xpos(self) -> np.ndarray:
        self._push_host_edits()
        return self.wdata.xpos.numpy().astype(np.float64)

    def xquat(self) -> np.ndarray:
        self._push_host_edits()
        return self.wdata.xquat.numpy().astype(np.float64)

    def host_data(self, world: int = 0) -> mujoco.MjData:
        if not 0 <= world < self.nworld:
            raise IndexError(f"world = {world}: expected 0 <= world < {self.nworld}")
        self._push_host_edits()
        d = self._hosts.get(world)
        if d is None:
            d = self._hosts[world] = mujoco.MjData(self.model)
        w = self.wdata
        # Only the state comes over (one row per array); MuJoCo C then derives poses and contacts from it, which
        # is cheaper than mjw.get_data_into pulling every derived array of every world.
        d.time = float(w.time[world : world + 1].numpy()[0])
        d.qacc_warmstart[:] = w.qacc_warmstart[world].numpy()
        for name in STATE_FIELDS:
            if getattr(d, name).size:  # act and mocap are empty in models without them
                getattr(d, name)[:] = getattr(w, name)[world].numpy()
        mujoco.mj_forward(self.model, d)
        self._pulled[world] = {name: getattr(d, name).copy() for name in STATE_FIELDS}
        return d

    def _push_host_edits(self) -> None:
        """Write to the device what was written into a `host_data` copy's state fields since it was pulled, so that
        writing into host_data means what it means on MuJoCo C. Only the entries that changed are written: a copy
        left stale by a later step must not roll the rest of the state back."""
        for world, pulled in self._pulled.items():
            d = self._hosts[world]
            for name, before in pulled.items():
                now = getattr(d, name)
                edited = (now != before) & ~(np.isnan(now) & np.isnan(before))
                if edited.any():
                    row = getattr(self.wdata, name)[world]
                    values = row.numpy()
                    values[edited] = now[edited]
                    row.assign(values)
                    before[edited] = now[edited]

    def device_state(self) -> tuple[mjw.Model, mjw.Data]:
        """The device model and data, for code that launches its own kernels on them (the Warp renderer), with the
        writes into `host_data` applied first. The model's arrays are written only in place (`assign`): the
        captured step graph holds them."""
        self._push_host_edits()
        return self.wmodel, self.wdata

    def unstable(self) -> np.ndarray:
        self._push_host_edits()
        with wp.ScopedDevice(self.device):
            self._flags.zero_()
            wp.launch(_flag_nonfinite, dim=(self.nworld, max(self.model.nq, self.model.nv)),
                      inputs=[self.wdata.qpos, self.wdata.qvel, self._flags])
            nonfinite = self._flags.numpy() != 0
        dropped = (self.wdata.overflow.numpy() & _DROPPED) != 0
        return nonfinite | dropped
