"""The pick-and-sort cell as an Isaac Lab `DirectRLEnv`: Newton physics (MuJoCo Warp solver) on the cell's stage.

The physics is Newton's. What the task means stays defined once, in `R2S2R-PickSort-v0`
(`r2s2r.tasks.pick_sort.env.PickSortEnv`): each environment keeps a headless reference environment of the same
world that samples its episodes from their seeds (object, colour, spawn, belt speed) and, with Newton's state
written into its MjData, computes the proprio observations and the success and failure rules. So both
environments give the same episode for the same seed and judge it by the same code.

Actions (27, absolute): 7 right-arm and 20 right-hand joint targets, the reference's `action_mode="joint"`. They
reach the drives `latency_steps` physics steps into the control period, as the reference's drive model has it;
the belt runs at the episode's set-point times the world's speed scale, with its jitter.

Observations: `policy` is the reference's proprio group flattened in its order: arm_q (7), arm_dq (7), hand_q (20),
ee_pose (7: grasp-site position, quaternion w,x,y,z), belt_setpoint (1). Reward: 1 on success. `extras["outcome"]`
names each environment's end after a step: "success", one of the reference's FAILURES, or None while running.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from isaaclab.envs import DirectRLEnv

from r2s2r.cell.mjcf import arm_joint_names, hand_joint_names, object_body_name
from r2s2r.geometry import quat_to_mat
from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PickSortCellEnvCfg
from r2s2r.sim import belt_drive_speed
from r2s2r.tasks.pick_sort.env import PickSortEnv

PROPRIO = ("arm_q", "arm_dq", "hand_q", "ee_pose", "belt_setpoint")
WXYZ_TO_XYZW = [1, 2, 3, 0]
XYZW_TO_WXYZ = [3, 0, 1, 2]


class PickSortCellEnv(DirectRLEnv):
    cfg: PickSortCellEnvCfg

    def __init__(self, cfg: PickSortCellEnvCfg, render_mode: str | None = None, **kwargs):
        self.references = [PickSortEnv(world=cfg.world, cameras=(), action_mode="joint")
                           for _ in range(cfg.scene.num_envs)]
        super().__init__(cfg, render_mode, **kwargs)
        model = self.references[0].model
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
        self._pending = torch.zeros(self.num_envs, 27, device=self.device)
        self._substep = 0
        self._next_seed: int | None = None
        self.success = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self.outcome: list[str | None] = [None] * self.num_envs

    # -- episodes ----------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        """With `seed`, environment i's episode is the reference's `reset(seed=seed + i)`; later episodes (after
        automatic resets) take the following seeds in the order they start."""
        if seed is not None:
            self._next_seed = seed
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
            self.references[i].reset(seed=seed)
            self.outcome[i] = None
        self._write_reference_state(ids)

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
            raise ValueError(f"actions have shape {tuple(actions.shape)}: expected ({self.num_envs}, 27) = 7 arm + "
                             "20 hand joint targets per environment")
        if not torch.isfinite(actions).all():
            raise ValueError("actions contain NaN or inf")
        self._pending = actions.clone()
        self._substep = 0
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
        return {"policy": torch.tensor(np.array(proprio), dtype=torch.float32, device=self.device)}
