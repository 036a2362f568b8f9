"""Configuration of the pick-and-sort cell as an Isaac Lab direct environment on Newton (MuJoCo Warp solver).

The scene is the cell's USD stage (`r2s2r.cell.usd.build_stage` of a world file), referenced once per environment;
the right arm (arm + hand), the left arm and the conveyor are articulations inside it, each object a rigid object;
the drives keep the gains the stage carries. The articulations' world anchors are moved with each environment's
origin as the stage is spawned (`spawn_cell`), so every environment is the same cell at its own origin. Time
step, control rate, episode length and the MuJoCo solver options come from the same cell and task configuration
as `R2S2R-PickSort-v0`.

Cameras (`cameras`, none by default) are Isaac Lab camera sensors rendered by `renderer`: each draws the ideal
pinhole image its lens' `CameraModel` asks for (`camera_cfg`), which the environment then warps through that lens,
as the project's MuJoCo renderers do.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import isaaclab.sim as sim_utils
import mujoco
import numpy as np
import torch
from isaaclab.actuators import ImplicitActuatorCfg
from isaaclab.assets import ArticulationCfg, AssetBaseCfg, RigidObjectCfg
from isaaclab.envs import DirectRLEnvCfg
from isaaclab.envs.mimic_env_cfg import DataGenConfig, MimicEnvCfg, SubTaskConfig
from isaaclab.managers import EventTermCfg
from isaaclab.renderers import RendererCfg
from isaaclab.scene import InteractiveSceneCfg
from isaaclab.sensors import CameraCfg, ContactSensorCfg
from isaaclab.utils import configclass
from isaaclab_newton.assets import Articulation as NewtonArticulation
from isaaclab_newton.assets import RigidObject as NewtonRigidObject
from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg
from isaaclab_newton.sensors import ContactSensor as NewtonContactSensor
from isaaclab_newton.renderers import NewtonWarpRendererCfg
from isaaclab_physx.renderers import IsaacRtxRendererCfg
from pxr import Gf, Usd, UsdGeom, UsdPhysics

from r2s2r.cell import usd
from r2s2r.cell.mjcf import build_model, object_body_name
from r2s2r.cell.spec import CellCfg
from r2s2r.cell.world import load_world
from r2s2r.core import ConfigError
# The Mimic names the demo files use too: the end-effector (the right grasp site) and the two subtask frames.
from r2s2r.data.datagen_info import EEF, OBJECT, TARGET_BIN
from r2s2r.physics.mujoco_warp import DEFAULT_NCONMAX, default_njmax
from r2s2r.render.camera_model import CameraModel
from r2s2r.tasks.pick_sort import mdp
from r2s2r.tasks.pick_sort.env_cfg import PickSortEnvCfg
from r2s2r.isaaclab_tasks.pick_sort.cpu_graph import NewtonCpuGraphMJWarpManager

CELL = "{ENV_REGEX_NS}/Cell"
# stiffness/damping None: the drives keep the gains the stage carries (the MuJoCo model's, per degree).
STAGE_DRIVES = {"all": ImplicitActuatorCfg(joint_names_expr=[".*"], stiffness=None, damping=None)}
PROPRIO_DIM = 7 + 7 + 20 + 7 + 1  # arm_q, arm_dq, hand_q, ee_pose, belt_setpoint (the reference's proprio)
# Mimic's action noise, added to the absolute target pose before IK: metres on the position, radians on a random
# rotation. Isaac Lab's default (0.03) is meant for normalized delta actions; 3 cm would miss a grasp.
ACTION_NOISE = 0.003

# The subtasks of `r2s2r.data.annotate`, each ending where its term signal switches on. Intercept and grasp move
# relative to the object; carry and release relative to the episode's target bin (`get_object_poses` names both).
MIMIC_SUBTASKS = {EEF: [
    SubTaskConfig(object_ref=OBJECT, subtask_term_signal="intercept", selection_strategy="nearest_neighbor_object",
                  action_noise=ACTION_NOISE, description="approach and follow the object, descend over it"),
    SubTaskConfig(object_ref=OBJECT, subtask_term_signal="grasp", action_noise=ACTION_NOISE,
                  description="close the hand on the object and lift it off the belt"),
    SubTaskConfig(object_ref=TARGET_BIN, subtask_term_signal="carry", action_noise=ACTION_NOISE,
                  description="carry the object above the bin of its colour"),
    SubTaskConfig(object_ref=TARGET_BIN, subtask_term_signal=None, action_noise=ACTION_NOISE,
                  description="lower, open the hand and retreat"),
]}


# Isaac Lab's renderer configurations by the name `PickSortCellEnvCfg.renderer` takes. Newton Warp ray-traces the
# Newton model kit-less (also on Warp's CPU device); Isaac RTX needs Kit (Isaac Sim on an RTX GPU).
def newton_warp_cfg() -> NewtonWarpRendererCfg:
    """Newton's ray tracer without its default light: the environment lights the cell with the cell's own key
    light (`NewtonLooks`)."""
    return NewtonWarpRendererCfg(create_default_light=False)


RENDERERS = {"newton_warp": newton_warp_cfg, "isaac_rtx": IsaacRtxRendererCfg}


def stage_path(cell: CellCfg) -> str:
    """The cell's USD stage, written once per distinct cell into the temporary folder and reused after that."""
    folder = os.path.join(os.environ.get("R2S2R_USD_CACHE", tempfile.gettempdir()), "r2s2r-usd")
    os.makedirs(folder, exist_ok=True)
    # Keyed by the cell and the stage builder's source, so a changed builder never serves an old stage.
    key = hashlib.sha256(repr(cell).encode() + Path(usd.__file__).read_bytes()).hexdigest()[:16]
    path = os.path.join(folder, key + ".usda")
    if not os.path.exists(path):
        usd.write_stage(usd.build_stage(build_model(cell), cell), path)  # atomically, so concurrent builders agree
    return path


def _asset(root: str) -> str:
    return f"{CELL}/Assets/{root}"


def spawn_cell(prim_path: str, cfg: sim_utils.UsdFileCfg, *args, **kwargs) -> Usd.Prim:
    """Isaac Lab's USD file spawner, then the cell's world anchors moved to where the spawned cell is.

    The stage fixes each articulation's root link to the world with a FixedJoint that has no body0. Its anchor
    (localPos0, localRot0) is therefore a pose in the world frame, which the prims above the cell (the
    environment's, at its origin) do not move. Newton imports the source environment so, and Isaac Lab's clone
    step then moves each copy by origin_i - origin_0: without this the arms and the conveyor of environment i
    sat at their cell pose + origin_i - origin_0 while its bins and objects sat at their cell pose + origin_i.
    Isaac Lab's own world joints (`create_world_fixed_joint`, for `fix_root_link`) are anchored at the root
    link's world pose in the source environment, so that is what each anchor is set to here (on the stage in
    memory; the file is shared)."""
    prim = sim_utils.spawn_from_usd(prim_path, cfg, *args, **kwargs)
    cell_to_world = UsdGeom.XformCache().GetLocalToWorldTransform(prim).RemoveScaleShear()
    for joint in map(UsdPhysics.FixedJoint, Usd.PrimRange(prim)):
        if not joint or joint.GetBody0Rel().GetTargets():
            continue
        anchor = Gf.Matrix4d().SetTransform(Gf.Rotation(Gf.Quatd(joint.GetLocalRot0Attr().Get())),
                                            Gf.Vec3d(joint.GetLocalPos0Attr().Get()))
        anchor = anchor * cell_to_world  # USD's row vectors: cell frame first, then the cell's pose in the world
        joint.GetLocalPos0Attr().Set(Gf.Vec3f(anchor.ExtractTranslation()))
        joint.GetLocalRot0Attr().Set(Gf.Quatf(anchor.ExtractRotationQuat()))
    return prim


class _AccelerationsWhenRead:
    """An asset of the cell whose accelerations are derived when read, over the time since they were last read, as
    Isaac Lab derives them when Newton steps the whole decimation itself. Isaac Lab's assets derive them at every
    physics step (one kernel per asset, 25 per control step) for whoever might read them; no rule of the cell does.
    Every other buffer stays as it is: each is marked stale by the simulation time the update advances."""

    def update(self, dt: float) -> None:
        self.data._sim_timestamp += dt  # what the base update does before it derives the accelerations


class CellArticulation(_AccelerationsWhenRead, NewtonArticulation):
    """The cell's arms and conveyor. Their drives are implicit (the stage's PD gains, in the solver), whose command
    the solver holds from one physics step to the next, so joint commands are submitted only after they change:
    a control step changes them at most twice (its targets after the drive latency, the belt's speed), where Isaac
    Lab submits them at every physics step. The implicit actuators' computed-effort telemetry, which the submission
    also refreshes, is read by no rule of the cell. External wrenches, which the cell does not use, go the base
    way."""

    _commands_changed = True

    def write_data_to_sim(self) -> None:
        wrenches = self._instantaneous_wrench_composer.active or self._permanent_wrench_composer.active
        if self._commands_changed or wrenches:
            super().write_data_to_sim()
            self._commands_changed = False

    def reset(self, *args, **kwargs) -> None:
        self._commands_changed = True
        super().reset(*args, **kwargs)


def _marks_commands_changed(name: str):
    def setter(self, *args, **kwargs):
        self._commands_changed = True
        return getattr(NewtonArticulation, name)(self, *args, **kwargs)

    setter.__name__ = name
    return setter


# Every way a joint command is set (Isaac Lab's index and mask setters, and their older names).
for _name in [f"set_joint_{kind}_target{suffix}" for kind in ("position", "velocity", "effort")
              for suffix in ("", "_index", "_mask")]:
    setattr(CellArticulation, _name, _marks_commands_changed(_name))


class CellContactSensor(NewtonContactSensor):
    """The objects' contacts with the right arm and hand, read once per control step (the outcome's `touching`): its
    clock is advanced when it is read, by the time since, where Isaac Lab advances it (a kernel launch) at every
    physics step. Its forces are Newton's at the read either way; the cell keeps no contact history."""

    _unclocked = 0.0  # s simulated since the clock last moved

    def update(self, dt: float, force_recompute: bool = False) -> None:
        self._unclocked += dt
        self._data_dirty = True
        if force_recompute:
            self._clock()
            self._update_outdated_buffers(force_recompute=True)

    def _clock(self) -> None:
        if self._unclocked:
            dt, self._unclocked = self._unclocked, 0.0
            super().update(dt)

    @property
    def data(self):
        self._clock()
        return super().data


class CellRigidObject(_AccelerationsWhenRead, NewtonRigidObject):
    pass


def _fixed_base(model: mujoco.MjModel, root: str) -> ArticulationCfg:
    """The articulation rooted at body `root` (a child of the world), with the drives the stage carries. Its
    default root pose, which Isaac Lab takes relative to the environment's origin, is the body's pose in the cell:
    where `spawn_cell` anchors it."""
    body = model.body(root)
    init = ArticulationCfg.InitialStateCfg(pos=tuple(map(float, body.pos)),
                                           rot=tuple(map(float, body.quat[[1, 2, 3, 0]])))  # x, y, z, w
    return ArticulationCfg(class_type=CellArticulation, prim_path=_asset(root), spawn=None, init_state=init,
                           actuators=STAGE_DRIVES)


def camera_cfg(
    model: mujoco.MjModel, name: str, lens: CameraModel, renderer: RendererCfg, depth: bool = False
) -> CameraCfg:
    """The Isaac Lab camera drawing `lens`'s source image: a centred pinhole of `lens.render_width` x
    `render_height` pixels and `lens.render_fovy_deg`, where the MuJoCo model has camera `name` (on the body the
    model mounts it on, or fixed in the environment). The stage's own camera prim there carries the lens' final
    intrinsics, so this one is a sibling, `<name>_pinhole`. `depth` adds the depth along the optical axis."""
    c = model.camera(name).id
    body = int(model.cam_bodyid[c])
    parent = f"{CELL}/Cameras" if body == 0 else CELL + usd.body_prim_path(model, body).removeprefix("/World")
    w, h = lens.render_width, lens.render_height
    # CameraModel puts pixel j's centre at u = j (OpenCV); Isaac Lab and USD's film at u = j + 0.5.
    k = lens.source_intrinsic_matrix() + np.array([[0.0, 0.0, 0.5], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    # Near and far as the MuJoCo renderers clip (Newton's ray tracer applies only the far plane).
    far = float(model.vis.map.zfar * model.stat.extent)
    # MuJoCo's camera frame is OpenGL's (looks along -z, +y up); Isaac Lab's quaternions are x, y, z, w.
    offset = CameraCfg.OffsetCfg(
        pos=tuple(map(float, model.cam_pos[c])),
        rot=tuple(map(float, model.cam_quat[c][[1, 2, 3, 0]])),
        convention="opengl",
    )
    return CameraCfg(
        prim_path=f"{parent}/{name}_pinhole",
        offset=offset,
        spawn=sim_utils.PinholeCameraCfg.from_intrinsic_matrix(k.ravel().tolist(), w, h, clipping_range=(0.001, far)),
        data_types=["rgb", "depth"] if depth else ["rgb"],
        width=w,
        height=h,
        update_latest_camera_pose=body != 0,  # a wrist camera moves with its palm
        background_color=(0.0, 0.0, 0.0),  # what the project's renderers show where no surface is hit
        renderer_cfg=renderer,
    )


def paint_episodes(env, env_ids: torch.Tensor) -> None:
    """Reset event: each reset environment's episode paint (`PickSortCellEnv.geom_rgba`, drawn with the episode from
    its seed: the object's colour, the bins') and lights (`light_pos`, `light_diffuse`: the trial-to-trial draw and
    the `lighting` condition's), shown by the renderer's looks (`NewtonLooks` on Newton's ray tracer, `RtxLooks`
    with Replicator under Kit). Without cameras there is nothing to paint."""
    if env.looks is not None:
        ids = [int(i) for i in env_ids]
        env.looks.paint(ids, env.geom_rgba[ids], env.light_pos[ids], env.light_diffuse[ids])


def drive_belts(env, env_ids: torch.Tensor | slice | None) -> None:
    """Control-period event: every environment's belt speed for the coming control period, its episode's set-point
    through the world's drive model (speed scale, and jitter drawn from the episode's belt stream:
    `mdp.drive_speeds`, as `R2S2R-PickSort-v0` draws it each step), sent as the conveyor's velocity target."""
    speeds = mdp.drive_speeds(env.cell.belt, env.setpoint, env.belt_rngs)
    env.belt_speed = torch.tensor(speeds, dtype=torch.float32, device=env.device)
    env.conveyor.set_joint_velocity_target_index(target=env.belt_speed[:, None])


# An event mode of the cell's own, applied by the environment at the start of every control period, before its
# physics steps (Isaac Lab's `interval` events come after them, and after the step's resets).
CONTROL_PERIOD = "control_period"


@configclass
class PickSortEventsCfg:
    """Per-episode randomization as Isaac Lab event terms, applied to the episodes the environment draws: their
    appearance on every reset, the belt's drive every control period."""

    paint = EventTermCfg(func=paint_episodes, mode="reset")
    belt = EventTermCfg(func=drive_belts, mode=CONTROL_PERIOD)


@configclass
class PickSortCellEnvCfg(DirectRLEnvCfg, MimicEnvCfg):
    """Set `world` (a world file name or path) and call `bind()`; the factories below do both. Also a Mimic
    configuration (Isaac Lab Mimic's data generator requires its environment's cfg to be a `MimicEnvCfg`)."""

    world: str = "ungrounded"
    action_space: int = 27  # 7 arm values + 20 right-hand joint targets, as `action_mode` reads them
    # As the reference's: "joint" (7 right-arm joint targets; Isaac Lab Mimic's and rsl-rl's actions) or "ee_pose"
    # (grasp-site position and quaternion w,x,y,z, turned into joint targets by the reference's IK; the project's
    # datasets and policies).
    action_mode: str = "joint"
    observation_space: int = PROPRIO_DIM
    state_space: int = 0
    decimation: int = 25
    episode_length_s: float = 25.0
    sim: sim_utils.SimulationCfg = sim_utils.SimulationCfg(device="cpu")
    scene: InteractiveSceneCfg = InteractiveSceneCfg(num_envs=1, env_spacing=4.0, replicate_physics=True)
    datagen_config: DataGenConfig = DataGenConfig(name="r2s2r_pick_sort")
    subtask_configs: dict[str, list[SubTaskConfig]] = MIMIC_SUBTASKS
    # Image observations, as the reference's: none by default (no rendering); names from the world's cell.
    cameras: tuple[str, ...] = ()
    image_size: tuple[int, int] = (128, 128)  # (height, width)
    depth: bool = False  # each camera's depth as well, `<name>_depth`
    renderer: str = "newton_warp"  # a key of RENDERERS
    events: PickSortEventsCfg = PickSortEventsCfg()

    def renderer_cfg(self) -> RendererCfg:
        """Isaac Lab's configuration of the renderer `renderer` names."""
        if self.renderer not in RENDERERS:
            raise ConfigError(f"renderer = {self.renderer!r}: expected one of {', '.join(RENDERERS)}")
        return RENDERERS[self.renderer]()

    def bind(self) -> PickSortCellEnvCfg:
        """Build the world's stage and set the scene, rates and solver from its cell."""
        cell = load_world(self.world).cell
        model = build_model(cell)
        opt = model.opt
        task = PickSortEnvCfg()  # the reference task's control rate and episode length
        self.decimation = round(1.0 / (task.control_hz * opt.timestep))
        self.episode_length_s = task.episode_seconds
        self.sim.dt = float(opt.timestep)
        self.sim.render_interval = self.decimation
        # The reference's MuJoCo options, given as MuJoCo's integer constants, multi-contact convex collisions
        # included (Newton's default turns them off: one contact per cylinder or hull pair instead of up to four). Contact and constraint buffers sized
        # as the project's MuJoCo Warp backend sizes them: with Isaac Lab's defaults a grasp overflowed the contact
        # buffer (MuJoCo Warp then drops contacts). The manager replays each physics step as a Warp graph on the
        # CPU (cpu_graph.py); CUDA graphs stay off, as there is no CUDA device here.
        self.sim.physics = NewtonCfg(
            solver_cfg=MJWarpSolverCfg(class_type=NewtonCpuGraphMJWarpManager,
                                       integrator=int(opt.integrator), cone=int(opt.cone), solver=int(opt.solver),
                                       impratio=float(opt.impratio), iterations=int(opt.iterations),
                                       ls_iterations=int(opt.ls_iterations), tolerance=float(opt.tolerance),
                                       nconmax=DEFAULT_NCONMAX, njmax=default_njmax(model, DEFAULT_NCONMAX),
                                       enable_multiccd=not opt.disableflags & mujoco.mjtDisableBit.mjDSBL_MULTICCD),
            num_substeps=1, use_cuda_graph=False)
        scene = self.scene
        scene.cell = AssetBaseCfg(prim_path=CELL, spawn=sim_utils.UsdFileCfg(func=spawn_cell, usd_path=stage_path(cell)))
        scene.right_arm = _fixed_base(model, "right_base")
        scene.left_arm = _fixed_base(model, "left_base")
        scene.conveyor = _fixed_base(model, "conveyor")
        # One rigid object per object body (named as the body). Not a RigidObjectCollectionCfg: the scene creates
        # entities in the order of their prim path depth, and a collection, having no prim path of its own, would
        # come before the stage that holds its bodies.
        for obj in cell.objects + cell.novel_objects:
            name = object_body_name(obj)
            setattr(scene, name, RigidObjectCfg(class_type=CellRigidObject, prim_path=f"{_asset(name)}/{name}",
                                                spawn=None))
        # Each object's contacts with the right arm and hand (one articulation), which decide whether a lifted
        # object at rest outside the bins is still held.
        scene.object_contacts = ContactSensorCfg(class_type=CellContactSensor,
                                                 prim_path=f"{_asset('obj_.*')}/obj_.*",
                                                 filter_prim_paths_expr=[f"{_asset('right_base')}/.*"])
        return self


def grounded_cfg() -> PickSortCellEnvCfg:
    """The cell of `configs/world/grounded.yaml` (calibrated from the recorded session)."""
    return PickSortCellEnvCfg(world="grounded").bind()


def ungrounded_cfg() -> PickSortCellEnvCfg:
    """The cell of `configs/world/ungrounded.yaml` (datasheets and drawings)."""
    return PickSortCellEnvCfg(world="ungrounded").bind()


def twin_cfg() -> PickSortCellEnvCfg:
    """The reality twin's cell. Only the twin resolves its truth file, so the path is taken from the twin's
    environment (headless, MuJoCo C) rather than read here."""
    from r2s2r.real.twin import make_twin_env

    twin = make_twin_env(cameras=())
    try:
        return PickSortCellEnvCfg(world=str(twin.world.path)).bind()
    finally:
        twin.close()
