"""The pick-and-sort cell as an Isaac Lab `DirectRLEnv`: Newton physics (MuJoCo Warp solver) on the cell's stage.

The physics is Newton's. What the task means stays defined once, in `R2S2R-PickSort-v0`
(`r2s2r.tasks.pick_sort.env.PickSortEnv`): each environment keeps a headless reference environment of the same
world that samples its episodes from their seeds (object, colour, spawn, belt speed) and, with Newton's state
written into its MjData, computes the proprio observations and the success and failure rules. So both
environments give the same episode for the same seed and judge it by the same code.

Actions (27, absolute), as the reference's `action_mode` (`cfg.action_mode`): "joint", 7 right-arm and 20
right-hand joint targets; or "ee_pose", the grasp-site position and quaternion (w,x,y,z) and the 20 hand targets,
whose pose each environment's reference turns into arm targets with its IK from the previous targets
(`PickSortEnv.arm_targets`, as its own control step does). They reach the drives `latency_steps` physics steps
into the control period, as the reference's drive model has it; the belt runs at the episode's set-point times the
world's speed scale, with its jitter. The Mimic methods speak the configured mode.

Observations: `policy` is the reference's proprio group flattened in its order: arm_q (7), arm_dq (7), hand_q (20),
ee_pose (7: grasp-site position, quaternion w,x,y,z), belt_setpoint (1). With `cfg.cameras`, `images` holds each
camera's image {name: (num_envs, H, W, 3) uint8} and, with `cfg.depth`, {name_depth: (num_envs, H, W) float32
metres along the optical axis, 0 where nothing was hit}, as the reference's `images`: Isaac Lab's camera sensor
draws the lens' pinhole source image with `cfg.renderer`, and the lens' `CameraModel.apply` (the project's
renderers' own lens, blur, exposure and noise) forms the image from it. Reward: 1 on success. `extras["outcome"]`
names each environment's end after a step: "success", one of the reference's FAILURES, or None while running.

Isaac Lab Mimic: the methods of `ManagerBasedRLMimicEnv` under the same names and signatures, for the end-effector
"right" (the right grasp site), with the four subtasks of `r2s2r.data.annotate` (`PickSortCellEnvCfg` is the
`MimicEnvCfg`). They are written here rather than inherited: `ManagerBasedRLMimicEnv` derives from
`ManagerBasedRLEnv`, so mixing it in would make this direct environment pass Isaac Lab's
`isinstance(env, ManagerBasedRLEnv)` checks (its policy export then patches observation and action managers this
environment does not have) and would add manager-based methods (`load_managers`, `reset_to`,
`export_IO_descriptors`) that fail here. Poses are 4x4 in the environment's frame (the reference's world frame):
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
from newton import ShapeFlags

from r2s2r.cell import usd
from r2s2r.cell.mjcf import arm_joint_names, hand_joint_names, object_body_name
from r2s2r.core import ConfigError
from r2s2r.data.annotate import TERM_SIGNALS, ends_so_far, traces
from r2s2r.geometry import quat_to_mat
from r2s2r.data.datagen_info import EEF, OBJECT, TARGET_BIN
from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PickSortCellEnvCfg, camera_cfg
from r2s2r.render.camera_model import CameraModel
from r2s2r.render.isaac_rtx import kit_running
from r2s2r.sim import belt_drive_speed
from r2s2r.tasks.pick_sort.env import PickSortEnv

PROPRIO = ("arm_q", "arm_dq", "hand_q", "ee_pose", "belt_setpoint")
WXYZ_TO_XYZW = [1, 2, 3, 0]
XYZW_TO_WXYZ = [3, 0, 1, 2]
# Mimic's targets are absolute and may lie farther from the current posture than a control period's step of the
# reference's ee_pose mode (15 iterations), so the IK runs to its tolerance (1e-4) or until it stalls.
MIMIC_IK_ITERATIONS = 100
UP = np.array([0.0, 0.0, 1.0])
TRACKING = ("eef_pos", "object_pos", "hand", "bin_pos")  # what annotate's signal traces read


def _encloses(model: mujoco.MjModel, data: mujoco.MjData, g: int, point: np.ndarray) -> bool:
    """Whether the solid of (convex, primitive) geom `g` holds `point`: a line through a point outside a convex
    solid meets it on one side of the point at most."""
    pose = (data.geom_xpos[g], data.geom_xmat[g], model.geom_size[g])
    return all(mujoco.mju_rayGeom(*pose, point, v, int(model.geom_type[g])) >= 0 for v in (UP, -UP))


class NewtonLooks:
    """The MuJoCo geoms on Newton's model as the reference's renderers draw them, for Newton's ray tracer: which
    shapes each camera sees, and their colours.

    MuJoCo draws every geom of the cell (groups 0-2). Isaac Lab imports the stage with Newton's
    `hide_collision_shapes`, which hides a collider on any body that also has a visual-only geom: the arm links'
    capsules (beside their joint rings) and the belt's surface (under its slats). Those are shown again, except to
    a camera inside one (a camera mounted within a link's capsule): the reference's renderers do not draw a surface
    from inside (GL culls back faces; MuJoCo Warp's ray tracer skips it) while Newton's ray tracer would fill that
    camera's view with it."""

    def __init__(self, manager, model: mujoco.MjModel, env_paths: list[str], cameras: list[str]):
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

    def paint(self, references: list[PickSortEnv]) -> None:
        """Each environment's reference geom colours (its episode's paint) on Newton's shapes. Newton's colours are
        display (sRGB) values, as MuJoCo's rgba are."""
        model = self.manager.get_model()
        colours = model.shape_color.numpy()
        for i, ref in enumerate(references):
            mine = self.envs == i
            colours[self.shapes[mine]] = ref.model.geom_rgba[self.geoms[mine], :3]
        model.shape_color.assign(colours)  # in place: the renderer holds this array


class PickSortCellEnv(DirectRLEnv):
    cfg: PickSortCellEnvCfg

    def __init__(self, cfg: PickSortCellEnvCfg, render_mode: str | None = None, **kwargs):
        renderer = cfg.renderer_cfg()  # an unknown renderer or action mode fails before anything is built
        if cfg.action_mode not in ("joint", "ee_pose"):
            raise ConfigError(f"action_mode = {cfg.action_mode!r}: expected 'joint' or 'ee_pose'")
        self.references = [PickSortEnv(world=cfg.world, cameras=(), action_mode="joint")
                           for _ in range(cfg.scene.num_envs)]
        self.lenses = self._add_cameras(cfg, renderer)
        super().__init__(cfg, render_mode, **kwargs)
        model = self.references[0].model
        if self.lenses:
            h, w = cfg.image_size
            images = {name: gym.spaces.Box(0, 255, (h, w, 3), np.uint8) for name in self.lenses}
            if cfg.depth:
                images.update({f"{name}_depth": gym.spaces.Box(0, np.inf, (h, w), np.float32) for name in self.lenses})
            self.single_observation_space["images"] = gym.spaces.Dict(images)
        self.looks = None
        if self.lenses and cfg.renderer == "newton_warp":
            self.looks = NewtonLooks(self.sim.physics_manager, model, self.scene.env_prim_paths, list(self.lenses))
        self.latency = self.references[0].sim.latency
        self.right, self.left = self.scene["right_arm"], self.scene["left_arm"]
        self.conveyor = self.scene["conveyor"]
        names = [object_body_name(o) for o in self.references[0].all_objects]
        self.objects = [self.scene[n] for n in names]
        # Each articulation's joints, in Isaac Lab's order, as MuJoCo qpos/qvel addresses and actuator ids (the
        # actuators are named after their joints).
        self._joint_maps = [
            (art, np.array([model.joint(n).qposadr[0] for n in art.joint_names]),
             np.array([model.joint(n).dofadr[0] for n in art.joint_names]),
             np.array([model.actuator("belt_drive" if n == "belt_slide" else n).id for n in art.joint_names]))
            for art in (self.right, self.left, self.conveyor)]
        self._object_adr = [(int(model.joint(n).qposadr[0]), int(model.joint(n).dofadr[0])) for n in names]
        self._action_ids, _ = self.right.find_joints(arm_joint_names("right") + hand_joint_names("right"),
                                                     preserve_order=True)
        # The grasp site: a fixed offset (MuJoCo's site_pos/site_quat) on a body of the right articulation.
        site = model.site(self.references[0].index.grasp_site)
        self._site_body = self.right.body_names.index(model.body(site.bodyid[0]).name)
        self._site_offset = make_pose(torch.tensor(site.pos, dtype=torch.float32, device=self.device),
                                      matrix_from_quat(torch.tensor(site.quat[WXYZ_TO_XYZW], dtype=torch.float32,
                                                                    device=self.device)))
        self._tracking: list[dict[str, list[np.ndarray]]] = [{k: [] for k in TRACKING} for _ in range(self.num_envs)]
        self._pending = torch.zeros(self.num_envs, 27, device=self.device)
        # ee_pose mode: the arm targets last sent, each IK's seed (set at reset and set_state, then per step)
        self._arm_targets = np.zeros((self.num_envs, 7))
        self._substep = 0
        self._next_seed: int | None = None
        self._options: dict | None = None
        self.success = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self.outcome: list[str | None] = [None] * self.num_envs

    def _add_cameras(self, cfg: PickSortCellEnvCfg, renderer) -> dict[str, CameraModel]:
        """Each of `cfg.cameras` as a camera sensor of the scene; returns their lens models."""
        ref = self.references[0]
        lenses = {c.name: c.lens for c in ref.cell.cameras}
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
            setattr(cfg.scene, name, camera_cfg(ref.model, name, lens, renderer, cfg.depth))
        return models

    # -- episodes ----------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        """With `seed`, environment i's episode is the reference's `reset(seed=seed + i)`; later episodes (after
        automatic resets) take the following seeds in the order they start. `options` (the reference's, e.g.
        `{"condition": "belt_speed"}`) go to the references' resets, this one's and the automatic ones after it."""
        if seed is not None:
            self._next_seed = seed
        self._options = options
        return super().reset(seed=seed, options=options)

    def _reset_idx(self, env_ids: Sequence[int] | torch.Tensor | None):
        if env_ids is None:
            env_ids = torch.arange(self.num_envs, device=self.device)
        super()._reset_idx(env_ids)
        ids = [int(i) for i in env_ids]
        for i in ids:
            seed = None
            if self._next_seed is not None:
                seed, self._next_seed = self._next_seed, self._next_seed + 1
            ref = self.references[i]
            ref.reset(seed=seed, options=self._options)
            self._arm_targets[i] = ref.physics.host_data(0).ctrl[ref.index.arm_act]
            self.outcome[i] = None
            self._tracking[i] = {k: [] for k in TRACKING}
        self._write_reference_state(ids)
        if self.looks is not None:
            self.looks.paint(self.references)

    def set_state(self, state: np.ndarray, env_id: int = 0) -> None:
        """Put environment `env_id` at a reference simulator state (`PickSortEnv.state()`: qpos | qvel, e.g. a
        recorded demo's `states[t]`) within its current episode; the subtask signals start over from there."""
        ref = self.references[env_id]
        ref.set_state(state)
        self._arm_targets[env_id] = state[ref.index.arm_qadr]  # the next ee_pose action's IK starts at the posture
        self._write_reference_state([env_id])
        self.sim.forward()  # body poses of the new state, as reset() has them
        self._tracking[env_id] = {k: [] for k in TRACKING}

    def _write_reference_state(self, ids: list[int]) -> None:
        """The references' current states (and drive targets) into Newton for environments `ids`."""
        datas = [self.references[i].physics.host_data(0) for i in ids]
        env_ids = torch.tensor(ids, device=self.device)
        as_tensor = lambda rows: torch.tensor(np.array(rows), dtype=torch.float32, device=self.device)  # noqa: E731
        for art, qadr, dadr, act in self._joint_maps:
            art.write_joint_position_to_sim_index(position=as_tensor([d.qpos[qadr] for d in datas]), env_ids=env_ids)
            art.write_joint_velocity_to_sim_index(velocity=as_tensor([d.qvel[dadr] for d in datas]), env_ids=env_ids)
            targets = as_tensor([d.ctrl[act] for d in datas])
            if art is self.conveyor:
                art.set_joint_velocity_target_index(target=targets, env_ids=env_ids)
            else:
                art.set_joint_position_target_index(target=targets, env_ids=env_ids)
        origins = self.scene.env_origins[env_ids].cpu().numpy()
        for obj, (q, v) in zip(self.objects, self._object_adr):
            # MuJoCo's free joint: position, quaternion w,x,y,z; linear velocity in the world, angular in the body.
            pose = [np.concatenate([d.qpos[q:q + 3] + o, d.qpos[q + 3:q + 7][WXYZ_TO_XYZW]])
                    for d, o in zip(datas, origins)]
            vel = [np.concatenate([d.qvel[v:v + 3], quat_to_mat(d.qpos[q + 3:q + 7]) @ d.qvel[v + 3:v + 6]])
                   for d in datas]
            obj.write_root_link_pose_to_sim_index(root_pose=as_tensor(pose), env_ids=env_ids)
            obj.write_root_link_velocity_to_sim_index(root_velocity=as_tensor(vel), env_ids=env_ids)

    def _sync_references(self) -> None:
        """Newton's state into every reference's MjData (kinematics and contacts recomputed there)."""
        joints = [(art.data.joint_pos.torch.cpu().numpy(), art.data.joint_vel.torch.cpu().numpy(), qadr, dadr)
                  for art, qadr, dadr, _ in self._joint_maps]
        pose = np.stack([o.data.root_link_pose_w.torch.cpu().numpy() for o in self.objects], axis=1).astype(float)
        vel = np.stack([o.data.root_link_vel_w.torch.cpu().numpy() for o in self.objects], axis=1).astype(float)
        origins = self.scene.env_origins.cpu().numpy()
        for i, ref in enumerate(self.references):
            d = ref.physics.host_data(0)
            qpos, qvel = d.qpos.copy(), d.qvel.copy()
            for q, dq, qadr, dadr in joints:
                qpos[qadr], qvel[dadr] = q[i], dq[i]
            for k, (q, v) in enumerate(self._object_adr):
                quat = pose[i, k, 3:7][XYZW_TO_WXYZ]
                qpos[q:q + 3], qpos[q + 3:q + 7] = pose[i, k, :3] - origins[i], quat
                qvel[v:v + 3], qvel[v + 3:v + 6] = vel[i, k, :3], quat_to_mat(quat).T @ vel[i, k, 3:6]
            ref.set_state(np.concatenate([qpos, qvel]))

    # -- control -----------------------------------------------------------------------------------------------
    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        if actions.shape != (self.num_envs, 27):
            raise ValueError(f"actions have shape {tuple(actions.shape)}: expected ({self.num_envs}, 27) = 7 arm "
                             f"values ({self.cfg.action_mode}) + 20 hand joint targets per environment")
        if not torch.isfinite(actions).all():
            raise ValueError("actions contain NaN or inf")
        if self.cfg.action_mode == "ee_pose":
            poses = actions[:, :7].cpu().numpy().astype(float)
            for i, ref in enumerate(self.references):
                self._arm_targets[i] = ref.arm_targets(poses[i], self._arm_targets[i])
            actions = torch.cat([torch.tensor(self._arm_targets, dtype=torch.float32, device=self.device),
                                 actions[:, 7:]], dim=1)
        self._pending = actions.clone()
        self._substep = 0
        self._record_tracking(actions)
        # The belt's speed for this period: set-point, scale and jitter drawn from the reference's belt stream.
        speeds = [belt_drive_speed(ref.cell.belt, ref.belt_speed, ref.belt_rng) for ref in self.references]
        self.conveyor.set_joint_velocity_target_index(
            target=torch.tensor(speeds, dtype=torch.float32, device=self.device)[:, None])

    def _apply_action(self) -> None:
        # The previous targets hold for the first `latency` physics steps of the period (the drive model).
        if self._substep == self.latency:
            self.right.set_joint_position_target_index(target=self._pending, joint_ids=self._action_ids)
        self._substep += 1

    # -- outcome and observations ------------------------------------------------------------------------------
    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        self._sync_references()
        success, terminated = [], []
        for i, ref in enumerate(self.references):
            failure, ok = ref.evaluate()  # the reference's rules on this environment's state
            self.outcome[i] = "success" if ok else failure
            success.append(ok)
            terminated.append(ok or failure is not None)
        self.success = torch.tensor(success, device=self.device)
        time_out = self.episode_length_buf >= self.max_episode_length
        terminated = torch.tensor(terminated, device=self.device)
        for i in torch.nonzero(time_out & ~terminated).flatten().tolist():
            self.outcome[i] = "timeout"
        self.extras["outcome"] = list(self.outcome)
        return terminated, time_out

    def _get_rewards(self) -> torch.Tensor:
        return self.success.float()

    def _get_observations(self) -> dict:
        self._sync_references()  # environments reset after this step's outcome hold new states
        proprio = [np.concatenate([ref.observe()["proprio"][k] for k in PROPRIO]) for ref in self.references]
        obs = {"policy": torch.tensor(np.array(proprio), dtype=torch.float32, device=self.device)}
        if self.lenses:
            obs["images"] = {k: v for name in self.lenses for k, v in self._images(name).items()}
        return obs

    def _images(self, name: str) -> dict[str, torch.Tensor]:
        """Camera `name`'s image of every environment, and with `cfg.depth` its depth: the lens applied to the
        sensor's pinhole render, sensor noise drawn from each reference episode's generator."""
        if self.looks is not None:
            self.looks.show_to(name)  # before the sensor's data is read, which renders it
        output = self.scene[name].data.output
        rgb = output["rgb"].torch.cpu().numpy()
        depth = output["depth"].torch[..., 0].cpu().numpy() if self.cfg.depth else [None] * len(rgb)
        frames = [self.lenses[name].apply(c, d, rng=ref.np_random) for c, d, ref in zip(rgb, depth, self.references)]
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
        ids = self._ids(env_ids)
        refs = [self.references[i] for i in ids]
        obj = torch.stack([self.objects[ref.all_objects.index(ref.obj)].data.root_link_pose_w.torch[i]
                           for i, ref in zip(ids, refs)])
        bins = torch.tensor(np.array([ref.bins[ref.colour].center for ref in refs]), dtype=torch.float32,
                            device=self.device)
        eye = torch.eye(3, device=self.device).expand(len(ids), 3, 3)
        return {OBJECT: make_pose(obj[:, :3] - self.scene.env_origins[ids], matrix_from_quat(obj[:, 3:7])),
                TARGET_BIN: make_pose(bins, eye)}

    def target_eef_pose_to_action(self, target_eef_pose_dict: dict, gripper_action_dict: dict,
                                  action_noise_dict: dict | None = None, env_id: int = 0) -> torch.Tensor:
        """The 27-dim action reaching a 4x4 grasp-site target, then the 20 hand targets. "joint": arm joints by the
        reference's `ArmIK` (seeded at the measured arm posture); "ee_pose": the pose itself (position, quaternion
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
        ik = self.references[env_id].ik
        arm_ids = self._action_ids[:7]
        seed = self.right.data.joint_pos.torch[env_id, arm_ids].cpu().numpy().astype(float)
        q, _ = ik.solve(seed, pos.cpu().numpy().astype(float), rot.cpu().numpy().astype(float),
                        iterations=MIMIC_IK_ITERATIONS, min_step=1e-7)
        return torch.cat([torch.tensor(q, dtype=torch.float32, device=self.device), hand])

    def action_to_target_eef_pose(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        """The grasp-site poses (N, 4, 4) that actions (N, 27) command: "joint", forward kinematics of their arm
        targets on the reference model; "ee_pose", the poses they hold."""
        if self.cfg.action_mode == "ee_pose":
            a = torch.as_tensor(action, dtype=torch.float32, device=self.device).reshape(-1, 27)
            quat = a[:, 3:7] / a[:, 3:7].norm(dim=1, keepdim=True).clamp_min(1e-9)
            return {EEF: make_pose(a[:, :3], matrix_from_quat(quat[:, WXYZ_TO_XYZW]))}
        ik = self.references[0].ik
        poses = []
        for q in torch.as_tensor(action).reshape(-1, 27)[:, :7].cpu().numpy().astype(float):
            pos, rot = ik.site_pose(q)
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
