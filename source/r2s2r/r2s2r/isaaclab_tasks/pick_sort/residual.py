"""Residual correction on the scripted controller: the role an rsl-rl policy has in the cell.

`Isaac-R2S2R-PickSort-Residual-Grounded-v0` is the grounded world's `PickSortCellEnv` with a base controller under
the policy. At each control step every environment's base is the privileged scripted controller
(`r2s2r.behavior.make_generator("scripted")`) reading that environment's reference observation (the reference holds
Newton's state, see `PickSortCellEnv`), its grasp-site pose turned into arm joint targets by the reference's IK from
the base's previous arm targets, as `R2S2R-PickSort-v0` does in `action_mode="ee_pose"`. No images are needed.

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

from r2s2r.behavior import BehaviorGenerator, make_generator
from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PROPRIO_DIM, PickSortCellEnvCfg
from r2s2r.tasks.pick_sort.env import PickSortEnv

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


def base_targets(ref: PickSortEnv, controller: BehaviorGenerator, arm_seed: np.ndarray) -> np.ndarray:
    """The base's 27 joint targets in the reference's current state: the controller's grasp-site pose through the
    reference's IK from `arm_seed`, and its hand targets."""
    action = controller(ref.observe())
    return np.concatenate([ref.arm_targets(action[:7], arm_seed), action[7:]])


class PickSortResidualEnv(PickSortCellEnv):
    cfg: PickSortResidualEnvCfg

    def __init__(self, cfg: PickSortResidualEnvCfg, render_mode: str | None = None, **kwargs):
        self.controllers = [make_generator("scripted") for _ in range(cfg.scene.num_envs)]
        super().__init__(cfg, render_mode, **kwargs)
        self.scale = torch.tensor([cfg.arm_scale] * 7 + [cfg.hand_scale] * 20, device=self.device)
        # The base's last joint targets, in float64: the arm's are the next IK seed, as MuJoCo C's ctrl is.
        self.base = np.zeros((self.num_envs, ACTION_DIM))

    def _reset_idx(self, env_ids: Sequence[int] | torch.Tensor | None):
        super()._reset_idx(env_ids)
        for i in self._ids(env_ids):
            ref = self.references[i]
            ctrl = ref.physics.host_data(0).ctrl
            self.base[i] = np.concatenate([ctrl[ref.index.arm_act], ctrl[ref.index.hand_act]])
            self.controllers[i].reset(ref, ref.observe(), ref.np_random)

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        if actions.shape != self.base.shape:
            raise ValueError(f"actions have shape {tuple(actions.shape)}: expected {self.base.shape} = 7 arm + 20 "
                             "hand corrections in [-1, 1] per environment")
        # The references hold the state the last observation was made in, which is where the base acts from.
        for i, (ref, controller) in enumerate(zip(self.references, self.controllers)):
            self.base[i] = base_targets(ref, controller, self.base[i, :7])
        base = torch.tensor(self.base, dtype=torch.float32, device=self.device)
        super()._pre_physics_step(base + self.scale * actions.clamp(-1.0, 1.0))  # NaN passes on, and is refused

    def _get_observations(self) -> dict:
        obs = super()._get_observations()
        base = torch.tensor(self.base, dtype=torch.float32, device=self.device)
        obs["policy"] = torch.cat([obs["policy"], base], dim=-1)
        return obs
