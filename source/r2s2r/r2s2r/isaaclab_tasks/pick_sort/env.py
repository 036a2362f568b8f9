"""The pick-and-sort cell as an Isaac Lab `DirectRLEnv`: Newton physics (MuJoCo Warp solver) on the cell's stage.

The physics is Newton's, and so is the state every rule reads. What the task means is written once, in
`r2s2r.tasks.pick_sort.mdp`, over batched state: this environment calls those functions on Newton's arrays for all
its environments at once, as `R2S2R-PickSort-v0` calls them on MuJoCo's state. Episodes are drawn per seed by
`mdp.sample_episodes` (object, colour, spawn, belt set-point, lighting), so both environments give the same episode
for the same seed; the outcome is `mdp.Judge`'s, with the object's contact with the right arm or hand from a contact
sensor (`object_contacts`). The cell's compiled MuJoCo model is kept as its description only: the address tables
between MuJoCo's state layout and Isaac Lab's, the episodes' paint and the IK.

Actions (27, absolute), as `cfg.action_mode`: "joint", 7 right-arm and 20 right-hand joint targets; or "ee_pose",
the grasp-site position and quaternion (w,x,y,z) and the 20 hand targets, turned into arm targets by
`mdp.ee_pose_targets` from the previous targets. They reach the drives `latency_steps` physics steps into the
control period (the drive model); the belt runs at `mdp.drive_speeds` of the episode's set-point, sent each
control period by the `belt` event term (`env_cfg.drive_belts`). The Mimic
methods speak the configured mode.

Observations: `policy`, `mdp.PROPRIO`'s terms flattened in order: arm_q (7), arm_dq (7), hand_q (20), ee_pose (7:
grasp-site position, quaternion w,x,y,z), belt_setpoint (1); `privileged` (simulator truth for generators and
evaluation, never for policies), `mdp.PRIVILEGED`'s terms in order. With `cfg.cameras`, `images` holds each
camera's image {name: (num_envs, H, W, 3) uint8} and, with `cfg.depth`, {name_depth: (num_envs, H, W) float32
metres along the optical axis, 0 where nothing was hit}: Isaac Lab's camera sensor draws the lens' pinhole source
image with `cfg.renderer`, and the lens' `CameraModel.apply` (the project's renderers' own lens, blur, exposure and
noise) forms the image from it. Reward: 1 on success. `extras["outcome"]` names each environment's end after a
step: "success", one of `mdp.FAILURES`, or None while running.

Isaac Lab Mimic: the methods of `ManagerBasedRLMimicEnv` under the same names and signatures, for the end-effector
"right" (the right grasp site), with the four subtasks of `r2s2r.data.annotate` (`PickSortCellEnvCfg` is the
`MimicEnvCfg`). They are written here rather than inherited: `ManagerBasedRLMimicEnv` derives from
`ManagerBasedRLEnv`, so mixing it in would make this direct environment pass Isaac Lab's
`isinstance(env, ManagerBasedRLEnv)` checks (its policy export then patches observation and action managers this
environment does not have) and would add manager-based methods (`load_managers`, `reset_to`,
`export_IO_descriptors`) that fail here. Poses are 4x4 in the environment's frame (the cell's world frame):
world poses less the environment's origin, as Isaac Lab Mimic's own environments give them (its default
`get_object_poses` reads `scene.get_state(is_relative=True)`).
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import mujoco
import numpy as np
import torch
from isaaclab.envs import DirectRLEnv
from isaaclab.utils.math import make_pose, matrix_from_quat, quat_from_angle_axis, quat_from_matrix, unmake_pose
import warp as wp
from newton import ShapeFlags
from newton.utils import color_linear_to_srgb, color_srgb_to_linear

from r2s2r.cell import usd
from r2s2r.cell.mjcf import CellIndex, arm_joint_names, build_model, hand_joint_names, object_body_name
from r2s2r.cell.spec import ObjectCfg
from r2s2r.cell.world import load_world
from r2s2r.control.ik import ArmIK
from r2s2r.core import ConfigError
from r2s2r.data.annotate import TERM_SIGNALS, ends_so_far, traces
from r2s2r.geometry import quat_to_mat
from r2s2r.data.datagen_info import EEF, OBJECT, TARGET_BIN
from r2s2r.isaaclab_tasks.pick_sort.env_cfg import CONTROL_PERIOD, PickSortCellEnvCfg, camera_cfg
from r2s2r.render.camera_model import CameraModel
from r2s2r.render.isaac_rtx import (apply_appearance_with_replicator, appearance_values, bind_object_materials,
                                    kit_running, object_rgba)
from r2s2r.tasks.pick_sort import mdp
from r2s2r.tasks.pick_sort.env_cfg import PickSortEnvCfg

PRIVILEGED_DIM = sum(mdp.PRIVILEGED.values())
WXYZ_TO_XYZW = [1, 2, 3, 0]
XYZW_TO_WXYZ = [3, 0, 1, 2]
# Mimic's targets are absolute and may lie farther from the current posture than a control period's step of the
# task's ee_pose mode (15 iterations), so the IK runs to its tolerance (1e-4) or until it stalls.
MIMIC_IK_ITERATIONS = 100
UP = np.array([0.0, 0.0, 1.0])
TRACKING = ("eef_pos", "object_pos", "hand", "bin_pos")  # what annotate's signal traces read


def _encloses(model: mujoco.MjModel, data: mujoco.MjData, g: int, point: np.ndarray) -> bool:
    """Whether the solid of (convex, primitive) geom `g` holds `point`: a line through a point outside a convex
    solid meets it on one side of the point at most."""
    pose = (data.geom_xpos[g], data.geom_xmat[g], model.geom_size[g])
    return all(mujoco.mju_rayGeom(*pose, point, v, int(model.geom_type[g])) >= 0 for v in (UP, -UP))


class NewtonLooks:
    """The MuJoCo geoms on Newton's model as the project's MuJoCo renderers draw them, for Newton's ray tracer: which
    shapes each camera sees, and their colours.

    MuJoCo draws every geom of the cell (groups 0-2). Isaac Lab imports the stage with Newton's
    `hide_collision_shapes`, which hides a collider on any body that also has a visual-only geom: the arm links'
    capsules (beside their joint rings) and the belt's surface (under its slats). Those are shown again, except to
    a camera inside one (a camera mounted within a link's capsule): MuJoCo's renderers do not draw a surface
    from inside (GL culls back faces; MuJoCo Warp's ray tracer skips it) while Newton's ray tracer would fill that
    camera's view with it.

    Light: Newton's ray tracer shades with lights shared by every environment (world-space, so a spot light would
    light one environment's cell only), without colour or intensity, over a hemispheric ambient term. The cell's
    key light (its brightest) becomes its one directional light, in the key light's direction; each episode's
    lighting (`mdp.light_gains`) multiplies its environment's colours. What this cannot show: the fill light's own
    direction and a shifted light's moved position."""

    def __init__(self, manager, sensor, model: mujoco.MjModel, env_paths: list[str], cameras: list[str]):
        self.manager = manager  # Isaac Lab's Newton manager: the Newton model and state
        newton_model = manager.get_model()
        labels = {label: s for s, label in enumerate(newton_model.shape_label)}
        rows = [
            (labels[path], i, g)
            for i, env in enumerate(env_paths)
            for g in range(model.ngeom)
            if (path := f"{env}/Cell{usd.geom_prim_path(model, g).removeprefix('/World')}") in labels
        ]
        self.shapes, self.envs, self.geoms = map(np.array, zip(*rows))
        self.flags = newton_model.shape_flags.numpy().copy()
        # Newton keeps the authored mesh of an approximated collider (the ellipsoid's hull) as "<path>_visual",
        # which is drawn instead.
        shown = [s for s in self.shapes if newton_model.shape_label[s] + "_visual" not in labels]
        self.flags[shown] |= int(ShapeFlags.VISIBLE)
        # MuJoCo draws a plane geom (the floor) as the rectangle its half-sizes give, while Newton's import of the
        # stage leaves it unbounded, up to the horizon of a wrist camera. Both collide with it unbounded, and the
        # solver keeps the geometry it was built with.
        plane = model.geom_type[self.geoms] == mujoco.mjtGeom.mjGEOM_PLANE
        scale = newton_model.shape_scale.numpy()
        scale[self.shapes[plane], :2] = 2.0 * model.geom_size[self.geoms[plane], :2]  # Newton's: full extents
        newton_model.shape_scale.assign(scale)
        home = mujoco.MjData(model)
        mujoco.mj_resetDataKeyframe(model, home, 0)
        mujoco.mj_forward(model, home)
        self.nominal_diffuse = model.light_diffuse.copy()
        key = int(np.argmax(model.light_diffuse.sum(axis=1)))
        # `sensor` is the renderer's newton.sensors.SensorTiledCamera (Isaac Lab's NewtonWarpRenderer.newton_sensor).
        sensor.utils.create_default_light(enable_shadows=sensor.default_render_config.enable_shadows,
                                          direction=wp.vec3f(*home.light_xdir[key]))
        eyes = {name: home.cam_xpos[model.camera(name).id] for name in cameras}
        self.inside = {
            name: self.shapes[[_encloses(model, home, g, eye) for g in self.geoms]] for name, eye in eyes.items()
        }
        self.hidden: np.ndarray | None = None

    def show_to(self, camera: str) -> None:
        """Make the shapes visible that `camera` is to see (the BVH is rebuilt, in under a millisecond here, only
        when that set changes)."""
        hidden = self.inside[camera]
        if self.hidden is not None and np.array_equal(hidden, self.hidden):
            return
        model = self.manager.get_model()
        flags = self.flags.copy()
        flags[hidden] &= ~int(ShapeFlags.VISIBLE)
        model.shape_flags.assign(flags)
        model.bvh_build_shapes(self.manager.get_state_0())  # the ray tracer's BVH holds the visible shapes
        self.hidden = hidden

    def paint(self, env_ids: list[int], colours: np.ndarray, light_pos: np.ndarray, light_diffuse: np.ndarray) -> None:
        """Environments `env_ids`' geom colours ((len(env_ids), ngeom, 4), each its episode's paint) under their
        lights ((len(env_ids), nlight, 3) positions and diffuse colours; Newton shows their `mdp.light_gains`, not
        where they moved) on Newton's shapes. Newton's colours are display (sRGB) values, as MuJoCo's rgba are;
        the light scales their linear values, as it scales reflected light."""
        model = self.manager.get_model()
        shape_colours = model.shape_color.numpy()
        for i, rgba, gain in zip(env_ids, colours, mdp.light_gains(light_diffuse, self.nominal_diffuse)):
            mine = self.envs == i
            lit = [color_linear_to_srgb(np.clip(np.multiply(color_srgb_to_linear(c), gain), 0.0, 1.0))
                   for c in rgba[self.geoms[mine], :3]]
            shape_colours[self.shapes[mine]] = lit
        model.shape_color.assign(shape_colours)  # in place: the renderer holds this array


class RtxLooks:
    """The episodes' paint and lights on the stage Isaac Sim's RTX renderer draws (Kit): every environment's cell
    gets object materials of its own (`bind_object_materials`), and each reset writes its episode's object colours
    and lights there with Replicator (`apply_appearance_with_replicator`), as the MuJoCo tasks' RTX renderer does
    for its one cell."""

    def __init__(self, stage, model: mujoco.MjModel, cell, env_paths: list[str]):
        self.model, self.cell = model, cell
        self.roots = [f"{env}/Cell" for env in env_paths]
        for root in self.roots:
            bind_object_materials(stage, model, cell, root)

    def values(self, env_ids: list[int], colours: np.ndarray, light_pos: np.ndarray,
               light_diffuse: np.ndarray) -> dict[str, dict]:
        """{prim path: {attribute: value}} of the environments' episodes (`NewtonLooks.paint`'s arguments)."""
        out: dict[str, dict] = {}
        for i, rgba, pos, diffuse in zip(env_ids, colours, light_pos, light_diffuse):
            out.update(appearance_values(self.model, pos, diffuse, object_rgba(self.model, self.cell, rgba),
                                         self.roots[i]))
        return out

    def paint(self, env_ids: list[int], colours: np.ndarray, light_pos: np.ndarray, light_diffuse: np.ndarray) -> None:
        apply_appearance_with_replicator(self.values(env_ids, colours, light_pos, light_diffuse))


class PickSortCellEnv(DirectRLEnv):
    cfg: PickSortCellEnvCfg

    def __init__(self, cfg: PickSortCellEnvCfg, render_mode: str | None = None, **kwargs):
        renderer = cfg.renderer_cfg()  # a bad renderer, action mode or belt drive fails before anything is built
        if cfg.action_mode not in ("joint", "ee_pose"):
            raise ConfigError(f"action_mode = {cfg.action_mode!r}: expected 'joint' or 'ee_pose'")
        terms = vars(cfg.events).values() if cfg.events is not None else ()
        if not any(getattr(term, "mode", None) == CONTROL_PERIOD for term in terms):
            raise ConfigError(f"events: no term of mode {CONTROL_PERIOD!r} drives the belt; keep "
                              "PickSortEventsCfg.belt (env_cfg.drive_belts) or give one of your own")
        # The cell's description (no simulation of it): the world's cell, its compiled model for the address
        # tables, the paint and the IK, and the task's episode parameters.
        self.world = load_world(cfg.world)
        self.cell = self.world.cell
        self.task = PickSortEnvCfg(cell=self.cell, world=cfg.world, cameras=tuple(cfg.cameras), action_mode=cfg.action_mode)
        self.model = build_model(self.cell)
        self.index = CellIndex.of(self.model)
        self.ik = ArmIK(self.model, "right", home_q=np.array(self.cell.arm("right").home_q))
        self.all_objects = self.cell.objects + self.cell.novel_objects
        self.colours = sorted(self.cell.colours)
        self.bins = {b.colour: b for b in self.cell.bins}
        self.latency = self.cell.arm("right").latency_steps
        self.lenses = self._add_cameras(cfg, renderer)
        super().__init__(cfg, render_mode, **kwargs)
        model = self.model
        self.single_observation_space["privileged"] = gym.spaces.Box(-np.inf, np.inf, (PRIVILEGED_DIM,), np.float32)
        if self.lenses:
            h, w = cfg.image_size
            images = {name: gym.spaces.Box(0, 255, (h, w, 3), np.uint8) for name in self.lenses}
            if cfg.depth:
                images.update({f"{name}_depth": gym.spaces.Box(0, np.inf, (h, w), np.float32) for name in self.lenses})
            self.single_observation_space["images"] = gym.spaces.Dict(images)
        self.looks: NewtonLooks | RtxLooks | None = None  # shows each episode's paint and lights (`paint` event)
        if self.lenses and cfg.renderer == "isaac_rtx":
            self.looks = RtxLooks(self.sim.stage, model, self.cell, self.scene.env_prim_paths)
        elif self.lenses and cfg.renderer == "newton_warp":
            sensor = self.sim.get_or_create_backend(renderer).newton_sensor  # the cameras' shared renderer
            self.looks = NewtonLooks(self.sim.physics_manager, sensor, model, self.scene.env_prim_paths,
                                     list(self.lenses))
        self.right, self.left = self.scene["right_arm"], self.scene["left_arm"]
        self.conveyor = self.scene["conveyor"]
        self.contacts = self.scene["object_contacts"]
        names = [object_body_name(o) for o in self.all_objects]
        self.objects = [self.scene[n] for n in names]
        # Each object's row of the contact sensor, and each articulation's joints in Isaac Lab's order as MuJoCo
        # qpos/qvel addresses and actuator ids (the actuators are named after their joints).
        self._contact_rows = torch.tensor([self.contacts.sensor_names.index(n) for n in names], device=self.device)
        self._joint_maps = [
            (art, np.array([model.joint(n).qposadr[0] for n in art.joint_names]),
             np.array([model.joint(n).dofadr[0] for n in art.joint_names]),
             np.array([model.actuator("belt_drive" if n == "belt_slide" else n).id for n in art.joint_names]))
            for art in (self.right, self.left, self.conveyor)]
        self._object_adr = [(int(model.joint(n).qposadr[0]), int(model.joint(n).dofadr[0])) for n in names]
        self._action_ids, _ = self.right.find_joints(arm_joint_names("right") + hand_joint_names("right"),
                                                     preserve_order=True)
        self._belt_joint = self.conveyor.find_joints("belt_slide")[0]
        # The grasp site: a fixed offset (MuJoCo's site_pos/site_quat) on a body of the right articulation.
        site = model.site(self.index.grasp_site)
        self._site_body = self.right.body_names.index(model.body(site.bodyid[0]).name)
        self._site_offset = make_pose(torch.tensor(site.pos, dtype=torch.float32, device=self.device),
                                      matrix_from_quat(torch.tensor(site.quat[WXYZ_TO_XYZW], dtype=torch.float32,
                                                                    device=self.device)))
        self.judge = mdp.Judge(self.cell, self.device, torch.float32)
        self._half_extents = torch.tensor(np.array([o.half_extents for o in self.all_objects]), dtype=torch.float32,
                                          device=self.device)
        # Each environment's episode: what it drew (object, colour, set-point, condition) and its streams.
        n = self.num_envs
        self.object_index = torch.zeros(n, dtype=torch.long, device=self.device)
        self.colour_index = torch.zeros(n, dtype=torch.long, device=self.device)
        self.setpoint = np.zeros(n)
        self.belt_speed = torch.zeros(n, device=self.device)  # this control period's drive speeds (`drive_belts`)
        self.conditions = ["nominal"] * n
        self.episode_objects: list[ObjectCfg] = [self.all_objects[0]] * n
        self.episode_colours = [self.colours[0]] * n
        self.rngs = [np.random.default_rng() for _ in range(n)]
        self.belt_rngs = [np.random.default_rng() for _ in range(n)]
        self.lifted = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.geom_rgba = np.tile(self.model.geom_rgba, (n, 1, 1))  # each episode's paint of the cell's geoms
        self.light_pos = np.tile(self.model.light_pos, (n, 1, 1))  # each episode's lights (positions, diffuse)
        self.light_diffuse = np.tile(self.model.light_diffuse, (n, 1, 1))
        self._tracking: list[dict[str, list[np.ndarray]]] = [{k: [] for k in TRACKING} for _ in range(n)]
        self._pending = torch.zeros(n, 27, device=self.device)
        # ee_pose mode: the arm targets last sent, each IK's seed (set at reset and set_state, then per step)
        self._arm_targets = np.zeros((n, 7))
        self._substep = 0
        self._next_seed: int | None = None
        self._options: dict | None = None
        self.success = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.outcome: list[str | None] = [None] * n

    def _add_cameras(self, cfg: PickSortCellEnvCfg, renderer) -> dict[str, CameraModel]:
        """Each of `cfg.cameras` as a camera sensor of the scene; returns their lens models."""
        lenses = {c.name: c.lens for c in self.cell.cameras}
        for name in cfg.cameras:
            if name not in lenses:
                raise ConfigError(f"cameras: {name!r} is not a camera of the cell; expected any of {', '.join(lenses)}")
        if cfg.cameras and cfg.renderer == "isaac_rtx" and not kit_running():
            raise ConfigError(
                "renderer = 'isaac_rtx' (Isaac Lab's IsaacRtxRendererCfg) needs Kit: run inside Isaac Sim "
                "(`isaaclab -p`, or start isaacsim.SimulationApp first); without it use 'newton_warp'"
            )
        h, w = cfg.image_size
        models = {name: CameraModel(lenses[name], w, h) for name in cfg.cameras}
        for name, lens in models.items():
            setattr(cfg.scene, name, camera_cfg(self.model, name, lens, renderer, cfg.depth))
        return models

    # -- episodes ----------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        """With `seed`, environment i's episode is `R2S2R-PickSort-v0`'s `reset(seed=seed + i)`; later episodes
        (after automatic resets) take the following seeds in the order they start. `options` (e.g.
        `{"condition": "belt_speed"}`) hold for this reset and the automatic ones after it."""
        if seed is not None:
            self._next_seed = seed
        self._options = options
        return super().reset(seed=seed, options=options)

    def _reset_idx(self, env_ids: Sequence[int] | torch.Tensor | None):
        if env_ids is None:
            env_ids = torch.arange(self.num_envs, device=self.device)
        ids = [int(i) for i in env_ids]
        seeds = []
        for _ in ids:
            seeds.append(self._next_seed)
            if self._next_seed is not None:
                self._next_seed += 1
        condition = (self._options or {}).get("condition", self.task.condition)
        self._start(ids, mdp.sample_episodes(self.task, seeds, [condition] * len(ids), self.lights_nominal))
        super()._reset_idx(env_ids)  # episode counters, and the reset events on the new episodes

    def start_episodes(self, env_ids: list[int], seeds: list[int | None], conditions: list[str]) -> dict:
        """Start environment `env_ids[k]`'s next episode as `R2S2R-PickSort-v0`'s `reset(seed=seeds[k],
        options={"condition": conditions[k]})` while the others run on (a batched generator's next attempts).
        Returns every environment's observation groups. An unknown condition fails before anything is reset."""
        self._start(list(env_ids), mdp.sample_episodes(self.task, list(seeds), list(conditions), self.lights_nominal))
        super()._reset_idx(torch.tensor(env_ids, device=self.device))  # episode counters and reset events
        return self.observe()

    def _start(self, ids: list[int], episodes: mdp.Episodes) -> None:
        """Episodes drawn by `mdp.sample_episodes` into environments `ids`: their initial states written into
        Newton, their paint on the Newton renderer's shapes."""
        qpos, qvel, ctrl = mdp.initial_states(self.model, self.index, episodes)
        for k, i in enumerate(ids):
            self.conditions[i] = episodes.condition[k]
            self.episode_objects[i], self.episode_colours[i] = episodes.objects[k], episodes.colour[k]
            self.rngs[i], self.belt_rngs[i] = episodes.rngs[k], episodes.belt_rngs[k]
            self.outcome[i] = None
            self._tracking[i] = {key: [] for key in TRACKING}
        self.setpoint[ids] = episodes.belt_setpoint
        env_ids = torch.tensor(ids, device=self.device)
        self.object_index[env_ids] = torch.as_tensor(episodes.object_index, device=self.device)
        self.colour_index[env_ids] = torch.as_tensor(episodes.colour_index, device=self.device)
        self.lifted[env_ids] = False
        self._arm_targets[ids] = ctrl[:, self.index.arm_act]
        self._write_state(ids, qpos, qvel, ctrl)
        self.sim.forward()  # the bodies' poses of the new states, which the observations read
        # Shown by the `paint` event:
        self.geom_rgba[ids] = mdp.geom_colours(self.model, self.cell, episodes)
        self.light_pos[ids], self.light_diffuse[ids] = episodes.light_pos, episodes.light_diffuse

    @property
    def lights_nominal(self) -> tuple[np.ndarray, np.ndarray]:
        return self.model.light_pos.copy(), self.model.light_diffuse.copy()

    def set_state(self, state: np.ndarray, env_id: int = 0) -> None:
        """Put environment `env_id` at a simulator state in MuJoCo's layout (qpos | qvel, as `R2S2R-PickSort-v0`'s
        `state()` and a recorded demo's `states[t]` hold it) within its current episode; the drives keep their
        targets and the subtask signals start over from there."""
        state = np.asarray(state, dtype=float)
        nq, nv = self.model.nq, self.model.nv
        if state.shape != (nq + nv,):
            raise ValueError(f"state has shape {state.shape}: expected ({nq + nv},) = qpos ({nq}) | qvel ({nv})")
        self._arm_targets[env_id] = state[self.index.arm_qadr]  # the next ee_pose action's IK starts there
        self._write_state([env_id], state[None, :nq], state[None, nq:])
        self.sim.forward()  # body poses of the new state, as reset() has them
        self._tracking[env_id] = {k: [] for k in TRACKING}

    def _write_state(self, ids: list[int], qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray | None = None) -> None:
        """States in MuJoCo's layout (rows of qpos, qvel; with `ctrl`, the drive targets too) into Newton for
        environments `ids`."""
        env_ids = torch.tensor(ids, device=self.device)
        as_tensor = lambda x: torch.tensor(np.asarray(x), dtype=torch.float32, device=self.device)  # noqa: E731
        for art, qadr, dadr, act in self._joint_maps:
            art.write_joint_position_to_sim_index(position=as_tensor(qpos[:, qadr]), env_ids=env_ids)
            art.write_joint_velocity_to_sim_index(velocity=as_tensor(qvel[:, dadr]), env_ids=env_ids)
            if ctrl is None:
                continue
            if art is self.conveyor:
                art.set_joint_velocity_target_index(target=as_tensor(ctrl[:, act]), env_ids=env_ids)
            else:
                art.set_joint_position_target_index(target=as_tensor(ctrl[:, act]), env_ids=env_ids)
        origins = self.scene.env_origins[env_ids].cpu().numpy()
        for obj, (q, v) in zip(self.objects, self._object_adr):
            # MuJoCo's free joint: position, quaternion w,x,y,z; linear velocity in the world, angular in the body.
            quat = qpos[:, q + 3:q + 7]
            pose = np.concatenate([qpos[:, q:q + 3] + origins, quat[:, WXYZ_TO_XYZW]], axis=1)
            spin = np.einsum("nij,nj->ni", np.array([quat_to_mat(x) for x in quat]), qvel[:, v + 3:v + 6])
            obj.write_root_link_pose_to_sim_index(root_pose=as_tensor(pose), env_ids=env_ids)
            obj.write_root_link_velocity_to_sim_index(root_velocity=as_tensor(np.concatenate([qvel[:, v:v + 3], spin], axis=1)),
                                                      env_ids=env_ids)

    def mujoco_states(self) -> np.ndarray:
        """Every environment's state in MuJoCo's layout (num_envs, nq + nv): qpos | qvel, objects relative to the
        environment's origin, angular velocities in their bodies' frames."""
        n, model = self.num_envs, self.model
        qpos, qvel = np.tile(model.key_qpos[0], (n, 1)), np.zeros((n, model.nv))
        for art, qadr, dadr, _ in self._joint_maps:
            qpos[:, qadr] = art.data.joint_pos.torch.cpu().numpy()
            qvel[:, dadr] = art.data.joint_vel.torch.cpu().numpy()
        origins = self.scene.env_origins.cpu().numpy()
        for obj, (q, v) in zip(self.objects, self._object_adr):
            pose = obj.data.root_link_pose_w.torch.cpu().numpy().astype(float)
            vel = obj.data.root_link_vel_w.torch.cpu().numpy().astype(float)
            quat = pose[:, 3:7][:, XYZW_TO_WXYZ]
            qpos[:, q:q + 3], qpos[:, q + 3:q + 7] = pose[:, :3] - origins, quat
            qvel[:, v:v + 3] = vel[:, :3]
            qvel[:, v + 3:v + 6] = np.einsum("nji,nj->ni", np.array([quat_to_mat(x) for x in quat]), vel[:, 3:6])
        return np.concatenate([qpos, qvel], axis=1)

    # -- control -----------------------------------------------------------------------------------------------
    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        if actions.shape != (self.num_envs, 27):
            raise ValueError(f"actions have shape {tuple(actions.shape)}: expected ({self.num_envs}, 27) = 7 arm "
                             f"values ({self.cfg.action_mode}) + 20 hand joint targets per environment")
        if not torch.isfinite(actions).all():
            raise ValueError("actions contain NaN or inf")
        if self.cfg.action_mode == "ee_pose":
            poses = actions[:, :7].cpu().numpy().astype(float)
            self._arm_targets = mdp.ee_pose_targets(self.ik, poses, self._arm_targets, self.task.ik_iterations)
            actions = torch.cat([torch.tensor(self._arm_targets, dtype=torch.float32, device=self.device),
                                 actions[:, 7:]], dim=1)
        self._pending = actions.clone()
        self._substep = 0
        self._record_tracking(actions)
        self.event_manager.apply(mode=CONTROL_PERIOD)  # the belt's drive for this period (`drive_belts`)

    def _apply_action(self) -> None:
        # The previous targets hold for the first `latency` physics steps of the period (the drive model).
        if self._substep == self.latency:
            self.right.set_joint_position_target_index(target=self._pending, joint_ids=self._action_ids)
        self._substep += 1

    # -- outcome and observations ------------------------------------------------------------------------------
    def _episode_object(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each environment's episode object: its pose (N, 7: position relative to the origin, quaternion x,y,z,w)
        and velocity (N, 6: linear, angular; world axes)."""
        pose = torch.empty(self.num_envs, 7, device=self.device)
        vel = torch.empty(self.num_envs, 6, device=self.device)
        # Only the objects some environment's episode uses: reading an object's state can launch its kernels.
        for k in torch.unique(self.object_index).tolist():
            rows = self.object_index == k
            data = self.objects[k].data
            pose[rows], vel[rows] = data.root_link_pose_w.torch[rows], data.root_link_vel_w.torch[rows]
        return torch.cat([pose[:, :3] - self.scene.env_origins, pose[:, 3:]], dim=1), vel

    def _touching_robot(self) -> torch.Tensor:
        """(N,) whether each episode's object is in contact with the right arm or hand."""
        forces = self.contacts.data.force_matrix_w.torch  # (N, objects, right-arm bodies, 3)
        rows = torch.arange(self.num_envs, device=self.device)
        return (forces[rows, self._contact_rows[self.object_index]].norm(dim=-1) > 0).any(-1)

    def _unstable(self) -> torch.Tensor:
        parts = [art.data.joint_pos.torch for art in (self.right, self.left, self.conveyor)]
        parts += [art.data.joint_vel.torch for art in (self.right, self.left, self.conveyor)]
        parts += [o.data.root_link_pose_w.torch for o in self.objects]
        return ~torch.isfinite(torch.cat(parts, dim=1)).all(-1)

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        pose, vel = self._episode_object()
        code, self.lifted = self.judge.outcome(pose[:, :3], vel[:, :3], self.object_index, self.colour_index,
                                               self.lifted, self._touching_robot(), self._unstable())
        self.success = code == mdp.SUCCESS
        terminated = code != mdp.RUNNING
        time_out = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        code = torch.where(time_out, mdp.TIMEOUT, code)
        self.outcome = [None if c == mdp.RUNNING else mdp.OUTCOMES[c] for c in code.tolist()]
        self.extras["outcome"] = list(self.outcome)
        return terminated, time_out

    def _get_rewards(self) -> torch.Tensor:
        return self.success.float()

    def observe(self) -> dict:
        """The observation groups of the current state (what a step returns; after `set_state`, what the cameras
        see there)."""
        return self._get_observations(rerender=True)

    def hold_actions(self, obs: dict) -> np.ndarray:
        """Actions (num_envs, 27) that hold every environment where observation groups `obs` have it: in the
        configured action mode, the arm's posture (its grasp-site pose) and the hand's joints."""
        proprio = {k: v.cpu().numpy().astype(float) for k, v in mdp.split(obs["policy"], mdp.PROPRIO).items()}
        arm = proprio["ee_pose"] if self.cfg.action_mode == "ee_pose" else proprio["arm_q"]
        return np.concatenate([arm, proprio["hand_q"]], axis=1)

    @staticmethod
    def observation_dict(obs: dict, env_id: int) -> dict:
        """Environment `env_id`'s part of observation groups `obs` in `R2S2R-PickSort-v0`'s form: `proprio` and
        `privileged` as dicts of float64 terms, `images` of uint8 (float32 depth) arrays."""
        row = lambda x: x[env_id].cpu().numpy().astype(float)  # noqa: E731
        return {"proprio": mdp.split(row(obs["policy"]), mdp.PROPRIO),
                "privileged": mdp.split(row(obs["privileged"]), mdp.PRIVILEGED),
                "images": {name: image[env_id].cpu().numpy() for name, image in obs.get("images", {}).items()}}

    def _get_observations(self, rerender: bool = False) -> dict:
        """`rerender`: draw the cameras again (a state written since the last step is not a step: their data would
        still be the step's)."""
        obs = {"policy": self._proprio(), "privileged": self._privileged()}
        if self.lenses:
            obs["images"] = {k: v for name in self.lenses for k, v in self._images(name, rerender).items()}
        return obs

    def _proprio(self) -> torch.Tensor:
        """The `policy` group: `mdp.PROPRIO`'s terms in order (N, 42)."""
        q, dq = self.right.data.joint_pos.torch, self.right.data.joint_vel.torch
        arm, hand = self._action_ids[:7], self._action_ids[7:]
        pos, rot = unmake_pose(self.get_robot_eef_pose(EEF))
        quat = mdp.canonical_quat(quat_from_matrix(rot)[:, XYZW_TO_WXYZ])
        setpoint = torch.tensor(self.setpoint, dtype=torch.float32, device=self.device)[:, None]
        return torch.cat([q[:, arm], dq[:, arm], q[:, hand], pos, quat, setpoint], dim=1)

    def _privileged(self) -> torch.Tensor:
        """The `privileged` group (simulator truth for generators and evaluation): `mdp.PRIVILEGED`'s terms in
        order (N, 22), the object's quaternion w,x,y,z and its angular velocity in its own frame, as MuJoCo's free
        joint has them."""
        pose, vel = self._episode_object()
        quat = pose[:, 3:][:, XYZW_TO_WXYZ]
        spin = (matrix_from_quat(pose[:, 3:]).transpose(1, 2) @ vel[:, 3:, None])[..., 0]
        belt = self.conveyor.data.joint_vel.torch[:, self._belt_joint]
        as_column = lambda x: x.to(torch.float32)[:, None]  # noqa: E731
        return torch.cat([pose[:, :3], quat, vel[:, :3], spin, belt, self._half_extents[self.object_index],
                          self.judge.bin_center[self.colour_index], as_column(self.colour_index),
                          as_column(self.object_index)], dim=1)

    def _images(self, name: str, rerender: bool = False) -> dict[str, torch.Tensor]:
        """Camera `name`'s image of every environment, and with `cfg.depth` its depth: the lens applied to the
        sensor's pinhole render, sensor noise drawn from each episode's generator."""
        if self.looks is not None:
            self.looks.show_to(name)  # before the sensor's data is read, which renders it
        if rerender:
            self.scene[name].update(0.0, force_recompute=True)
        output = self.scene[name].data.output
        rgb = output["rgb"].torch.cpu().numpy()
        depth = output["depth"].torch[..., 0].cpu().numpy() if self.cfg.depth else [None] * len(rgb)
        frames = [self.lenses[name].apply(c, d, rng=rng) for c, d, rng in zip(rgb, depth, self.rngs)]
        images = {name: torch.from_numpy(np.stack([f[0] for f in frames])).to(self.device)}
        if self.cfg.depth:
            images[f"{name}_depth"] = torch.from_numpy(np.stack([f[1] for f in frames])).to(self.device)
        return images

    # -- Isaac Lab Mimic ---------------------------------------------------------------------------------------
    def _ids(self, env_ids: Sequence[int] | torch.Tensor | None) -> list[int]:
        return list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]

    def get_robot_eef_pose(self, eef_name: str, env_ids: Sequence[int] | None = None) -> torch.Tensor:
        """The right grasp site's pose (len(env_ids), 4, 4) from Newton's body state."""
        if eef_name != EEF:
            raise ValueError(f"end effector {eef_name!r}: this cell has one, {EEF!r} (the right grasp site)")
        ids = self._ids(env_ids)
        body = self.right.data.body_link_pose_w.torch[ids, self._site_body]  # position, quaternion x,y,z,w
        pose = make_pose(body[:, :3] - self.scene.env_origins[ids], matrix_from_quat(body[:, 3:7]))
        return pose @ self._site_offset

    def get_object_poses(self, env_ids: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """The subtasks' reference frames: `object` (the episode's object, whichever of the cell's it is) and
        `target_bin` (the centre of the bin of its colour, axes of the world)."""
        ids = torch.tensor(self._ids(env_ids), device=self.device)
        pose, _ = self._episode_object()
        obj, bins = pose[ids], self.judge.bin_center[self.colour_index[ids]]
        eye = torch.eye(3, device=self.device).expand(len(ids), 3, 3)
        return {OBJECT: make_pose(obj[:, :3], matrix_from_quat(obj[:, 3:7])),
                TARGET_BIN: make_pose(bins, eye)}

    def target_eef_pose_to_action(self, target_eef_pose_dict: dict, gripper_action_dict: dict,
                                  action_noise_dict: dict | None = None, env_id: int = 0) -> torch.Tensor:
        """The 27-dim action reaching a 4x4 grasp-site target, then the 20 hand targets. "joint": arm joints by the
        cell's `ArmIK` (seeded at the measured arm posture); "ee_pose": the pose itself (position, quaternion
        w,x,y,z). `action_noise_dict[eef]` perturbs the target first: a Gaussian of that many metres on the
        position and radians on a rotation."""
        pos, rot = unmake_pose(target_eef_pose_dict[EEF].to(self.device, torch.float32))
        if action_noise_dict is not None and action_noise_dict.get(EEF):
            sigma = float(action_noise_dict[EEF])
            pos = pos + sigma * torch.randn_like(pos)
            turn = sigma * torch.randn(3, device=self.device)
            rot = matrix_from_quat(quat_from_angle_axis(turn.norm(), turn / turn.norm().clamp_min(1e-12))) @ rot
        hand = torch.as_tensor(gripper_action_dict[EEF], dtype=torch.float32, device=self.device).reshape(20)
        if self.cfg.action_mode == "ee_pose":
            return torch.cat([pos, quat_from_matrix(rot)[XYZW_TO_WXYZ], hand])
        ik = self.ik
        arm_ids = self._action_ids[:7]
        seed = self.right.data.joint_pos.torch[env_id, arm_ids].cpu().numpy().astype(float)
        q, _ = ik.solve(seed, pos.cpu().numpy().astype(float), rot.cpu().numpy().astype(float),
                        iterations=MIMIC_IK_ITERATIONS, min_step=1e-7)
        return torch.cat([torch.tensor(q, dtype=torch.float32, device=self.device), hand])

    def action_to_target_eef_pose(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        """The grasp-site poses (N, 4, 4) that actions (N, 27) command: "joint", forward kinematics of their arm
        targets on the cell's model; "ee_pose", the poses they hold."""
        if self.cfg.action_mode == "ee_pose":
            a = torch.as_tensor(action, dtype=torch.float32, device=self.device).reshape(-1, 27)
            quat = a[:, 3:7] / a[:, 3:7].norm(dim=1, keepdim=True).clamp_min(1e-9)
            return {EEF: make_pose(a[:, :3], matrix_from_quat(quat[:, WXYZ_TO_XYZW]))}
        poses = []
        for q in torch.as_tensor(action).reshape(-1, 27)[:, :7].cpu().numpy().astype(float):
            pos, rot = self.ik.site_pose(q)
            poses.append(np.vstack([np.column_stack([rot, pos]), [0.0, 0.0, 0.0, 1.0]]))
        return {EEF: torch.tensor(np.array(poses), dtype=torch.float32, device=self.device)}

    def actions_to_gripper_actions(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """The 20 hand-joint targets of actions (..., 27)."""
        return {EEF: torch.as_tensor(actions)[..., 7:]}

    def _record_tracking(self, actions: torch.Tensor) -> None:
        """One row per control step of what annotate's signals read: the state the action starts from and the
        action's hand targets (the rows of a recorded demo's `obs/datagen_info`)."""
        eef = self.get_robot_eef_pose(EEF)[:, :3, 3].cpu().numpy()
        frames = self.get_object_poses()
        obj = frames[OBJECT][:, :3, 3].cpu().numpy()
        bins = frames[TARGET_BIN][:, :3, 3].cpu().numpy()
        hand = actions[:, 7:].cpu().numpy()
        for i, rows in enumerate(self._tracking):
            for key, value in zip(TRACKING, (eef[i], obj[i], hand[i], bins[i])):
                rows[key].append(value.astype(float))

    def get_subtask_term_signals(self, env_ids: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """Annotate's term signals for the last step taken (row t of a demo after `step(action_t)`), from the
        episode's tracking so far: `grasp` once the object has been lifted near the hand, `carry` once it has
        been above its bin after that, `intercept` once lifted or while the hand is closing. Annotate, which sees
        the whole demo, leaves a closure that opens again before the lift (a failed try) inside intercept; seen
        step by step such a closure switches `intercept` on and off again, so the two agree on episodes without a
        retry. All False before the first step of an episode."""
        signals = {name: [] for name in TERM_SIGNALS}
        for i in self._ids(env_ids):
            rows = self._tracking[i]
            reached = len(ends_so_far(traces(**{k: np.array(v) for k, v in rows.items()}))) if rows["eef_pos"] else 0
            for k, name in enumerate(TERM_SIGNALS):  # a subtask's signal is on once its end has been reached
                signals[name].append(k < reached)
        return {name: torch.tensor(v, device=self.device) for name, v in signals.items()}
