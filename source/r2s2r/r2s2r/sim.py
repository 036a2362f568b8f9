"""The simulation core: one cell's compiled model, the physics backend that steps it, the drive model and the
index tables, shared by the task, the twin, calibration's reference renders and the behaviour generators.

The drive model is what sits between a command and the physics: the right arm's targets reach its drives a whole
number of physics steps late (`latency`), and the belt runs at its commanded speed times the cell's `speed_scale`,
with a small per-control-period jitter (`belt_drive_speed`). Colours and lights are set on the host model; every
renderer reads them from there at each frame (the MuJoCo Warp renderer pushes them to its device copy), and
physics does not depend on them.
"""

from __future__ import annotations

import time

import mujoco
import numpy as np

from r2s2r.cell.mjcf import CellIndex, belt_periodic, build_model, object_body_name
from r2s2r.cell.spec import BeltCfg, CellCfg, LightingCfg, ObjectCfg
from r2s2r.physics import make_physics

PARKED_RGBA = (0.8, 0.8, 0.8, 1.0)  # every object but the episode's is a clean grey


def delayed(targets: np.ndarray, latency: int) -> np.ndarray:
    """What the arm's drives act on at each physics step of a (steps, 7) target log: the targets `latency` steps
    late, the first held before that."""
    return targets[np.maximum(np.arange(len(targets)) - latency, 0)]


def belt_drive_speed(belt: BeltCfg, setpoint: float, rng: np.random.Generator | None) -> float:
    """The belt's true speed for one control period under `setpoint` (m/s): scaled, with its jitter drawn from `rng`
    (None: no jitter)."""
    jitter = 1.0 + belt.speed_jitter * rng.standard_normal() if belt.speed_jitter and rng is not None else 1.0
    return setpoint * belt.speed_scale * jitter


def lighting_gain(lighting: LightingCfg, rng: np.random.Generator) -> np.ndarray:
    """One trial's lighting of the cell (its `LightingCfg`): an intensity factor times per-channel tint factors."""
    return rng.uniform(*lighting.intensity_range) * (1.0 + rng.uniform(-lighting.tint, lighting.tint, 3))


def light_draw(nominal_pos: np.ndarray, nominal_diffuse: np.ndarray, rng: np.random.Generator,
               scale: tuple[float, float] = (1.0, 1.0), tint: float = 0.0, jitter: float = 0.0,
               gain: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The lights (positions, diffuse colours; (nlight, 3) each) at a draw around their nominal state: each light's
    intensity scaled by a factor in `scale` and each of its colour channels by 1 + U(-tint, tint), its position moved
    by up to `jitter` m per axis; then every light multiplied by the RGB `gain` (see `lighting_gain`)."""
    pos = nominal_pos + rng.uniform(-jitter, jitter, nominal_pos.shape)
    factor = rng.uniform(*scale, (len(nominal_diffuse), 1))
    tints = 1.0 + rng.uniform(-tint, tint, nominal_diffuse.shape)
    gain = np.ones(3) if gain is None else gain
    return pos, np.clip(nominal_diffuse * factor * tints * gain, 0.0, 1.0)


def painted(model: mujoco.MjModel, cell: CellCfg, active: ObjectCfg | None = None, rgba=None) -> np.ndarray:
    """The model's geom colours (ngeom, 4) with every object grey, `active` (if given) in `rgba`."""
    colours = model.geom_rgba.copy()
    for o in cell.objects + cell.novel_objects:
        colours[model.geom(object_body_name(o)).id] = PARKED_RGBA
    if active is not None:
        colours[model.geom(object_body_name(active)).id] = rgba
    return colours


class CellSim:
    """A cell (`CellCfg`) compiled and on a physics backend, with the drive model, index tables and appearance
    setters everything that simulates it uses.

    Args:
        cell: the cell, with a world file's parameters already applied.
        physics: the backend name (`r2s2r.physics.make_physics`).
        nworld: parallel copies of the world on the backend.
    """

    def __init__(self, cell: CellCfg, physics: str = "mujoco", nworld: int = 1):
        self.cell = cell
        self.model = build_model(cell)
        self.physics = make_physics(physics, self.model, nworld, (belt_periodic(self.model, cell),))
        self.index = CellIndex.of(self.model)
        self.latency = cell.arm("right").latency_steps
        self.lights_nominal = (self.model.light_pos.copy(), self.model.light_diffuse.copy())
        self.physics_s = 0.0  # wall time of every control period's physics so far (what generation reports)

    def renderer(self, kind: str, cameras, width: int, height: int, **options):
        """A renderer (`r2s2r.render.make_renderer`) of this model's cameras, with the cell's shadows setting."""
        from r2s2r.render import make_renderer

        return make_renderer(kind, self.model, self.cell, list(cameras), width, height, shadows=self.cell.shadows,
                             **options)

    def home(self) -> mujoco.MjData:
        """Every world at the home keyframe, at rest; returns world 0's data."""
        m = self.model
        self.physics.reset(m.key_qpos[0], np.zeros(m.nv), m.key_ctrl[0])
        return self.physics.host_data(0)

    def object_address(self, obj: ObjectCfg) -> tuple[int, int, int, int]:
        """(body id, geom id, qpos address, dof address) of an object's free body."""
        m, name = self.model, object_body_name(obj)
        joint = m.joint(name)
        return m.body(name).id, m.geom(name).id, int(joint.qposadr[0]), int(joint.dofadr[0])

    # -- the drive model ---------------------------------------------------------------------------------------
    def control_period(self, ctrl: np.ndarray, arm: np.ndarray, hand: np.ndarray, substeps: int) -> None:
        """Run one control period of `substeps` physics steps with new arm and hand targets.

        The previous targets (in `ctrl`) stay in force for the arm's `latency` steps, then the new ones act; `ctrl`
        is updated in place to what the drives hold at the end.
        """
        started = time.perf_counter()
        if self.latency:
            self.physics.set_ctrl(ctrl)
            self.physics.step(self.latency)
        ctrl[self.index.arm_act] = arm
        ctrl[self.index.hand_act] = hand
        self.physics.set_ctrl(ctrl)
        self.physics.step(substeps - self.latency)
        self.physics_s += time.perf_counter() - started

    # -- appearance --------------------------------------------------------------------------------------------
    def paint_objects(self, active: ObjectCfg | None = None, rgba=None) -> None:
        """Every object grey, `active` (if given) in `rgba`."""
        self.model.geom_rgba[:] = painted(self.model, self.cell, active, rgba)

    def vary_lights(self, rng: np.random.Generator, **draw) -> None:
        """The lights at a draw around their nominal state (`light_draw`'s keywords)."""
        self.set_light_state(*light_draw(*self.lights_nominal, rng, **draw))

    def set_light_state(self, pos: np.ndarray, diffuse: np.ndarray) -> None:
        """Every light's position and diffuse colour ((nlight, 3) each), e.g. an episode's draw."""
        self.model.light_pos[:] = pos
        self.model.light_diffuse[:] = diffuse

    def set_lights(self, gain=1.0, levels: dict[str, float] | None = None) -> None:
        """The lights at their nominal poses, their colours times `gain` (a scalar or RGB); 1.0: as built.
        `levels` (light name -> factor) dims lights one by one; a light it does not name is off (no diffuse or
        specular light, no shadow)."""
        m = self.model
        nominal_pos, nominal_diffuse = self.lights_nominal
        factor = np.ones(m.nlight) if levels is None else np.array([levels.get(m.light(i).name, 0.0)
                                                                    for i in range(m.nlight)])
        m.light_active[:] = factor > 0
        m.light_pos[:] = nominal_pos
        m.light_diffuse[:] = np.clip(nominal_diffuse * factor[:, None] * np.asarray(gain, dtype=float), 0.0, 1.0)
