"""The cell's Isaac Lab event terms (`PickSortEventsCfg`) against `R2S2R-PickSort-v0` on MuJoCo C. The grounded
world's belt has a speed scale and jitter, so each control period's drive is a fresh draw from the episode's stream;
the episodes' paint is checked with the cameras (test_pick_sort_cameras.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from r2s2r.tasks.pick_sort.env import PickSortEnv

TASK = "Isaac-R2S2R-PickSort-Grounded-v0"
SEED = 5  # environment i's episode is the reference's reset(seed=SEED + i)
NUM_ENVS = 2
PERIODS = 6


def _cfg():
    import r2s2r.isaaclab_tasks  # noqa: F401  (registers the IDs)
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    return parse_env_cfg(TASK, num_envs=NUM_ENVS)


def test_belt_event_drives_every_period_as_mujoco_c_draws_it():
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

    env = PickSortCellEnv(_cfg())
    try:
        obs, _ = env.reset(seed=SEED)
        refs = [PickSortEnv(world="grounded", cameras=(), action_mode="joint") for _ in range(NUM_ENVS)]
        for i, ref in enumerate(refs):
            ref.reset(seed=SEED + i)
        policy = obs["policy"].numpy().astype(float)
        hold = np.concatenate([policy[:, :7], policy[:, 14:34]], axis=1)  # arm_q, hand_q: stay where it is
        drives, expected = [], []
        for _ in range(PERIODS):
            env.step(torch.tensor(hold, dtype=torch.float32))
            for i, ref in enumerate(refs):
                ref.step(hold[i])
            drives.append(env.belt_speed.numpy().copy())
            expected.append([ref.physics.host_data(0).ctrl[ref.index.belt_act] for ref in refs])
            # what the event sent is what the conveyor's drive holds
            target = env.conveyor.data.joint_vel_target.torch[:, env._belt_joint].numpy().ravel()
            np.testing.assert_array_equal(target, drives[-1])
        drives, expected = np.array(drives), np.array(expected)
        np.testing.assert_allclose(drives, expected, rtol=1e-6)  # float32 on the Isaac Lab side
        # A fresh jittered draw every period, and each environment its own episode's stream.
        assert len(np.unique(drives[:, 0])) == PERIODS and not np.allclose(drives[:, 0], drives[:, 1])
        assert not np.allclose(drives, env.setpoint[None], rtol=1e-3)  # the world's speed scale and jitter
    finally:
        env.close()


def test_an_environment_without_a_belt_drive_is_refused_before_anything_is_built():
    from r2s2r.core import ConfigError
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

    cfg = _cfg()
    cfg.events.belt = None
    with pytest.raises(ConfigError, match="events: no term of mode 'control_period' drives the belt"):
        PickSortCellEnv(cfg)
