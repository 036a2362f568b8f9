"""The cell as an Isaac Lab environment: Newton physics with the MuJoCo Warp solver on Warp's CPU device, no Kit.

The environment (`isaaclab_env`) is the module's, from tests/conftest.py; every test that steps it resets it.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from r2s2r.tasks.pick_sort.env import PickSortEnv

SEED = 3


def _reference() -> PickSortEnv:
    """`R2S2R-PickSort-v0` on MuJoCo C in the same world, joint actions."""
    return PickSortEnv(world="ungrounded", cameras=(), action_mode="joint")


def _hold(obs: torch.Tensor) -> np.ndarray:
    """The action that holds the observed arm and hand posture (arm_q, hand_q out of the proprio vector)."""
    o = obs[0].numpy().astype(float)
    return np.concatenate([o[:7], o[14:34]])


def test_core_package_imports_without_isaaclab():
    code = "import sys, r2s2r, r2s2r.tasks; assert not any(m.startswith('isaaclab') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_entry_point_registers_the_ids_isaaclab_parses():
    from isaaclab.cli import load_external_tasks
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    from r2s2r.isaaclab_tasks import TASKS
    from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PickSortCellEnvCfg

    entry = {e.name: e.value for e in importlib.metadata.entry_points(group="isaaclab.tasks")}
    assert entry.get("r2s2r") == "r2s2r.isaaclab_tasks"
    load_external_tasks()  # what Isaac Lab's commands run before looking a task up
    import gymnasium as gym

    assert set(TASKS) <= set(gym.registry)
    cfg = parse_env_cfg("Isaac-R2S2R-PickSort-Grounded-v0", num_envs=2)
    assert isinstance(cfg, PickSortCellEnvCfg)
    assert (cfg.world, cfg.scene.num_envs, cfg.decimation, cfg.sim.dt) == ("grounded", 2, 25, 0.002)
    assert cfg.sim.physics.solver_cfg.solver_type == "mujoco_warp"
    # Buffers as the project's MuJoCo Warp backend sizes them; Isaac Lab's defaults overflowed the contact buffer
    # during a grasp (the grounded world, seed 0), and MuJoCo Warp then drops contacts.
    from isaaclab_newton.physics import MJWarpSolverCfg

    solver = cfg.sim.physics.solver_cfg
    assert solver.nconmax >= 128 and solver.njmax > MJWarpSolverCfg().njmax
    assert cfg.scene.cell.spawn.usd_path.endswith(".usda")
    twin = parse_env_cfg("Isaac-R2S2R-PickSort-Twin-v0")  # the truth file, as the twin resolves it
    assert Path(twin.world).is_file() and twin.scene.cell.spawn.usd_path != cfg.scene.cell.spawn.usd_path


def test_reset_matches_the_reference_episode_and_steps_on_the_cpu(isaaclab_env):
    ref = _reference()
    ref_obs, _ = ref.reset(seed=SEED)
    obs, _ = isaaclab_env.reset(seed=SEED)
    assert obs["policy"].shape == (1, 42) and isaaclab_env.device == "cpu"
    expected = np.concatenate([ref_obs["proprio"][k] for k in ("arm_q", "arm_dq", "hand_q", "ee_pose",
                                                               "belt_setpoint")])
    # The same seeded episode (object, colour, spawn, belt speed), up to Newton's float32 state.
    assert np.allclose(obs["policy"][0].numpy(), expected, atol=1e-5)
    env = isaaclab_env
    assert (env.episode_objects[0].name, env.episode_colours[0], env.setpoint[0]) == (ref.obj.name, ref.colour,
                                                                                       ref.belt_speed)
    # The privileged group is the reference's, term by term, read from Newton's state.
    privileged = env.observation_dict(obs, 0)["privileged"]
    for name, value in ref_obs["privileged"].items():
        assert np.allclose(privileged[name], value, atol=1e-5), name

    x0 = privileged["object_pos"][0]
    action = torch.tensor(_hold(obs["policy"]), dtype=torch.float32)[None]
    periods = 10
    for _ in range(periods):
        obs, reward, terminated, truncated, extras = env.step(action)
        assert extras["outcome"] == [None] and not terminated[0] and not truncated[0] and reward[0] == 0
    # The object rides the belt by friction at the episode's speed (the ungrounded belt has no scale or jitter).
    travelled = env.observation_dict(obs, 0)["privileged"]["object_pos"][0] - x0
    assert travelled == pytest.approx(ref.belt_speed * periods * 0.05, rel=0.05)
    assert torch.isfinite(obs["policy"]).all()


# Measured with these targets over 8 control periods (0.4 s): the largest right-arm joint difference to MuJoCo C is
# 5.2e-7 rad. Both run MuJoCo's equations with the same options; what differs is MuJoCo Warp's float32 arithmetic
# and Newton's round trip of the stage (gains per degree, masses and inertias re-derived from the stage's float
# attributes). With the arms' self-collisions left on in Newton it was 0.11 rad (joint 6 blocked), so the bound
# catches a wrong import. 1e-4 rad leaves a margin of about 190x.
ARM_PARITY_TOL = 1e-4  # rad
STEP = np.array([0.2, 0.15, 0.0, -0.2, 0.0, 0.1, 0.0])  # rad, on the right arm's joints 1-7


def test_arm_follows_mujoco_c_under_the_same_joint_targets(isaaclab_env):
    ref = _reference()
    ref.reset(seed=SEED)
    obs, _ = isaaclab_env.reset(seed=SEED)
    hold = _hold(obs["policy"])
    worst = 0.0
    for k in range(8):
        action = hold.copy()
        action[:7] += STEP * min(1.0, (k + 1) / 4)  # ramp over 4 periods, then hold
        ref_obs, *_ = ref.step(action)
        obs, *_ = isaaclab_env.step(torch.tensor(action, dtype=torch.float32)[None])
        worst = max(worst, float(np.abs(obs["policy"][0, :7].numpy() - ref_obs["proprio"]["arm_q"]).max()))
    moved = ref_obs["proprio"]["arm_q"] - hold[:7]
    assert np.abs(moved - STEP).max() < 0.05  # the targets were reached, so the comparison covers real motion
    print(f"arm parity: max |q_newton - q_mujoco_c| = {worst:.2e} rad")
    assert worst < ARM_PARITY_TOL


def test_graph_replay_on_the_cpu_equals_eager_stepping(isaaclab_env, monkeypatch):
    """The physics manager replays each step as a recorded Warp graph (cpu_graph.py); stepped eagerly instead, the
    same actions from the same reset give the same observations, bit for bit."""
    from isaaclab_newton.physics.newton_manager import NewtonManager

    from r2s2r.isaaclab_tasks.pick_sort.cpu_graph import NewtonCpuGraphMJWarpManager

    assert isaaclab_env.sim.physics_manager is NewtonCpuGraphMJWarpManager

    def run() -> np.ndarray:
        obs, _ = isaaclab_env.reset(seed=SEED)
        hold, seen = _hold(obs["policy"]), []
        for k in range(4):
            action = hold.copy()
            action[:7] += STEP * (k + 1) / 4
            obs, *_ = isaaclab_env.step(torch.tensor(action, dtype=torch.float32)[None])
            seen.append(obs["policy"].numpy().copy())
        return np.array(seen)

    replayed = run()
    assert NewtonManager._graph is not None  # the steps above were graph replays
    with monkeypatch.context() as m:
        m.setattr(NewtonCpuGraphMJWarpManager, "_replayed", classmethod(lambda cls, simulate: simulate()))
        eager = run()
    assert np.abs(replayed[-1] - replayed[0]).max() > 0.01  # the arm moved between the compared observations
    np.testing.assert_array_equal(replayed, eager)


def test_ee_pose_actions_move_the_arm_as_the_reference_ee_pose_mode_does(isaaclab_env, monkeypatch):
    """`action_mode="ee_pose"`: the same grasp-site targets, each turned into joint targets by IK from the previous
    ones, move the arm as `R2S2R-PickSort-v0` in its ee_pose mode moves it; the Mimic methods speak poses."""
    from r2s2r.geometry import quat_to_mat

    monkeypatch.setattr(isaaclab_env.cfg, "action_mode", "ee_pose")
    ref = PickSortEnv(world="ungrounded", cameras=(), action_mode="ee_pose")
    ref_obs, _ = ref.reset(seed=SEED)
    obs, _ = isaaclab_env.reset(seed=SEED)
    start = ref_obs["proprio"]["ee_pose"]
    hand = obs["policy"][0, 14:34].numpy().astype(float)
    worst = 0.0
    for k in range(8):
        pose = start.copy()
        pose[:3] += np.array([0.06, -0.04, 0.05]) * min(1.0, (k + 1) / 4)  # 8.8 cm over 4 periods, then hold
        action = np.concatenate([pose, hand])
        ref_obs, *_ = ref.step(action)
        obs, *_ = isaaclab_env.step(torch.tensor(action, dtype=torch.float32)[None])
        worst = max(worst, float(np.abs(obs["policy"][0, :7].numpy() - ref_obs["proprio"]["arm_q"]).max()))
    reached = obs["policy"][0, 34:37].numpy()
    assert np.linalg.norm(reached - pose[:3]) < 0.01 and np.linalg.norm(reached - start[:3]) > 0.07
    print(f"ee_pose parity: max |q_newton - q_mujoco_c| = {worst:.2e} rad")
    assert worst < ARM_PARITY_TOL

    target = torch.tensor(np.vstack([np.column_stack([quat_to_mat(pose[3:7]), pose[:3]]), [0, 0, 0, 1]]),
                          dtype=torch.float32)
    packed = isaaclab_env.target_eef_pose_to_action({"right": target}, {"right": hand})
    np.testing.assert_allclose(packed[:3].numpy(), pose[:3], atol=1e-6)
    np.testing.assert_allclose(abs(float(packed[3:7].numpy() @ pose[3:7])), 1.0, atol=1e-6)  # q or -q
    back = isaaclab_env.action_to_target_eef_pose(packed[None])["right"][0]
    np.testing.assert_allclose(back.numpy(), target.numpy(), atol=1e-5)


def test_an_unknown_action_mode_is_refused_before_anything_is_built():
    import r2s2r.isaaclab_tasks  # noqa: F401  (registers the IDs)
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    from r2s2r.core import ConfigError
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

    cfg = parse_env_cfg("Isaac-R2S2R-PickSort-Ungrounded-v0")
    cfg.action_mode = "velocity"
    with pytest.raises(ConfigError, match="action_mode = 'velocity': expected 'joint' or 'ee_pose'"):
        PickSortCellEnv(cfg)
