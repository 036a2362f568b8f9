"""Residual correction on the scripted controller: the role an rsl-rl policy has in the cell.

`Isaac-R2S2R-PickSort-Residual-Grounded-v0` is the grounded world's `PickSortCellEnv` with a base controller under
the policy. At each control step every environment's base is the privileged scripted controller
(`r2s2r.behavior.scripted`) reading that environment's last observation, its grasp-site pose turned into arm joint
targets by `mdp.ee_pose_targets` from the base's previous arm targets, as `R2S2R-PickSort-v0` does in
`action_mode="ee_pose"`. No images are needed.

The policy's action (27, clamped to [-1, 1]) adds a bounded correction to those joint targets: `arm_scale` rad per
unit on each of the 7 arm targets, `hand_scale` rad on each of the 20 hand targets. A zero action sends the base's
targets unchanged, so it plays the scripted controller's episode.

Observations: `policy` is the proprio (42) followed by the base's last joint targets (27; after a reset, the targets
the drives hold), so the policy sees what it corrects. Episodes, reward (1 on success) and outcomes are the task's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from isaaclab.utils import configclass

from r2s2r.behavior.scripted import ScriptedPickPlace
from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PROPRIO_DIM, PickSortCellEnvCfg
from r2s2r.tasks.pick_sort import mdp

ACTION_DIM = 27  # 7 arm + 20 hand joint targets


@configclass
class PickSortResidualEnvCfg(PickSortCellEnvCfg):
    observation_space: int = PROPRIO_DIM + ACTION_DIM
    # Per unit of action. A few mrad on each arm joint moves the grasp site by millimetres: a correction of where the
    # base grasps and carries, not a motion of its own. The hand's targets span about a radian from open to closed.
    arm_scale: float = 0.005
    hand_scale: float = 0.02


def residual_grounded_cfg() -> PickSortResidualEnvCfg:
    """The grounded cell (`configs/world/grounded.yaml`) under the residual policy."""
    return PickSortResidualEnvCfg(world="grounded").bind()


class PickSortResidualEnv(PickSortCellEnv):
    cfg: PickSortResidualEnvCfg

    def __init__(self, cfg: PickSortResidualEnvCfg, render_mode: str | None = None, **kwargs):
        super().__init__(cfg, render_mode, **kwargs)
        self.controllers = [ScriptedPickPlace(self.task.control_hz) for _ in range(self.num_envs)]
        self.scale = torch.tensor([cfg.arm_scale] * 7 + [cfg.hand_scale] * 20, device=self.device)
        # The base's last joint targets, in float64: the arm's are the next IK seed, as MuJoCo C's ctrl is.
        self.base = np.zeros((self.num_envs, ACTION_DIM))
        self._last_obs: dict | None = None

    def _reset_idx(self, env_ids: Sequence[int] | torch.Tensor | None):
        super()._reset_idx(env_ids)
        home = self.model.key_ctrl[0]
        for i in self._ids(env_ids):
            self.base[i] = np.concatenate([home[self.index.arm_act], home[self.index.hand_act]])
            self.controllers[i].reset()
        self._last_obs = None  # the base reads the observation of the states just written

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        if actions.shape != self.base.shape:
            raise ValueError(f"actions have shape {tuple(actions.shape)}: expected {self.base.shape} = 7 arm + 20 "
                             "hand corrections in [-1, 1] per environment")
        # The base acts from the state the last observation was made in.
        obs = self._last_obs or super()._get_observations()
        poses = np.empty((self.num_envs, 7))
        for i, controller in enumerate(self.controllers):
            action = controller(self.observation_dict(obs, i))
            poses[i], self.base[i, 7:] = action[:7], action[7:]
        self.base[:, :7] = mdp.ee_pose_targets(self.ik, poses, self.base[:, :7], self.task.ik_iterations)
        base = torch.tensor(self.base, dtype=torch.float32, device=self.device)
        super()._pre_physics_step(base + self.scale * actions.clamp(-1.0, 1.0))  # NaN passes on, and is refused

    def _get_observations(self) -> dict:
        obs = self._last_obs = super()._get_observations()
        base = torch.tensor(self.base, dtype=torch.float32, device=self.device)
        return {**obs, "policy": torch.cat([obs["policy"], base], dim=-1)}
