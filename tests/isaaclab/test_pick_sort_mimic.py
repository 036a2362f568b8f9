"""The Isaac Lab environment's Mimic methods and `MimicEnvCfg`, on real Newton physics (the module's `isaaclab_env`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from r2s2r.behavior.scripted import ScriptedPickPlace
from r2s2r.data.annotate import SUBTASKS, TERM_SIGNALS, annotate_traces, traces
from r2s2r.geometry import quat_to_mat
from r2s2r.tasks.pick_sort.env import PickSortEnv

TASK = "Isaac-R2S2R-PickSort-Ungrounded-v0"
POS_TOL, ROT_TOL = 1e-3, 1e-3  # m, rad: the round trip's bound


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    """Rotation angle between two 3x3 rotations (atan2 form: accurate near zero, unlike arccos of the trace)."""
    r = a.T @ b
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    return float(np.arctan2(np.linalg.norm(axis) / 2, (np.trace(r) - 1) / 2))


def _pose(pos: np.ndarray, rot: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.vstack([np.column_stack([rot, pos]), [0.0, 0.0, 0.0, 1.0]]), dtype=torch.float32)


def test_mimic_cfg_has_the_four_annotated_subtasks():
    import r2s2r.isaaclab_tasks  # noqa: F401
    from isaaclab.envs.mimic_env_cfg import MimicEnvCfg
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    cfg = parse_env_cfg(TASK)
    assert isinstance(cfg, MimicEnvCfg)  # what Isaac Lab Mimic's data generator asserts
    subtasks = cfg.subtask_configs["right"]
    assert len(subtasks) == len(SUBTASKS)
    assert [s.subtask_term_signal for s in subtasks] == [*TERM_SIGNALS, None]  # the last ends with the demo
    assert [s.object_ref for s in subtasks] == ["object", "object", "target_bin", "target_bin"]


def test_target_pose_to_action_round_trips_through_forward_kinematics(isaaclab_env):
    obs, _ = isaaclab_env.reset(seed=3)
    q0 = obs["policy"][0, :7].numpy().astype(float)
    ik = isaaclab_env.ik
    rng = np.random.default_rng(0)
    hand = torch.linspace(0.0, 1.0, 20)
    worst_pos = worst_rot = 0.0
    for _ in range(20):
        # Reachable by construction: the grasp site at a random posture within 0.3 rad per joint of the current one.
        pos, rot = ik.site_pose(np.clip(q0 + rng.uniform(-0.3, 0.3, 7), ik.lower, ik.upper))
        action = isaaclab_env.target_eef_pose_to_action({"right": _pose(pos, rot)}, {"right": hand})
        assert action.shape == (27,) and torch.equal(action[7:], hand)
        back = isaaclab_env.action_to_target_eef_pose(action[None])["right"][0].double().numpy()
        worst_pos = max(worst_pos, float(np.linalg.norm(back[:3, 3] - pos)))
        worst_rot = max(worst_rot, _angle(back[:3, :3], rot))
    print(f"IK round trip over 20 poses: {worst_pos:.1e} m, {worst_rot:.1e} rad")
    assert worst_pos < POS_TOL and worst_rot < ROT_TOL

    # Mimic's action noise moves the commanded pose by about its amplitude (metres), and only then.
    torch.manual_seed(0)
    target = _pose(pos, rot)
    noisy = isaaclab_env.target_eef_pose_to_action({"right": target}, {"right": hand}, action_noise_dict={"right": 0.003})
    moved = np.linalg.norm(isaaclab_env.action_to_target_eef_pose(noisy[None])["right"][0, :3, 3].numpy() - pos)
    assert 2e-4 < moved < 0.02

    actions = torch.stack([action, noisy])
    assert torch.equal(isaaclab_env.actions_to_gripper_actions(actions)["right"], actions[:, 7:])


def test_eef_and_object_poses_equal_the_reference_after_the_same_joint_actions(isaaclab_env):
    ref = PickSortEnv(world="ungrounded", cameras=(), action_mode="joint")
    ref.reset(seed=3)
    obs, _ = isaaclab_env.reset(seed=3)
    priv = isaaclab_env.observation_dict(obs, 0)["privileged"]
    frames = isaaclab_env.get_object_poses()
    assert np.allclose(frames["object"][0, :3, 3].numpy(), priv["object_pos"], atol=1e-6)
    assert np.allclose(frames["target_bin"][0, :3, 3].numpy(), priv["target_bin_pos"])

    o = obs["policy"][0].numpy().astype(float)
    hold = np.concatenate([o[:7], o[14:34]])
    worst_pos = worst_rot = 0.0
    for k in range(6):
        action = hold.copy()
        action[:7] += np.array([0.2, 0.15, 0.0, -0.2, 0.0, 0.1, 0.0]) * min(1.0, (k + 1) / 4)
        ref.step(action)
        isaaclab_env.step(torch.tensor(action, dtype=torch.float32)[None])
        # MuJoCo's mj_step reports the kinematics from before its last integration (2 ms behind qpos: 1.5 mm while
        # the arm moves here); restoring the state recomputes them for the state the reference is in.
        ref.set_state(ref.state())
        ee = ref.observe()["proprio"]["ee_pose"]
        pose = isaaclab_env.get_robot_eef_pose("right")[0].double().numpy()
        worst_pos = max(worst_pos, float(np.linalg.norm(pose[:3, 3] - ee[:3])))
        worst_rot = max(worst_rot, _angle(pose[:3, :3], quat_to_mat(ee[3:])))
    assert np.linalg.norm(ref.observe()["proprio"]["ee_pose"][:3] - o[34:37]) > 0.05  # the hand really moved
    print(f"grasp site vs MuJoCo C: {worst_pos:.1e} m, {worst_rot:.1e} rad")
    assert worst_pos < 1e-5 and worst_rot < 1e-4
    with pytest.raises(ValueError, match="right"):
        isaaclab_env.get_robot_eef_pose("left")


# A scripted episode (seed 1, ungrounded) recorded on MuJoCo C switches intercept, grasp and carry at steps 118, 130
# and 151. At about 1 control step/s here the Isaac Lab environment replays steps 113-153 only, from the recorded
# state at step 113 (hand open, object on the belt).
SIGNAL_SEED, LEAD, TAIL = 1, 5, 3


def test_subtask_signals_switch_where_annotate_puts_them(isaaclab_env):
    ref = PickSortEnv(world="ungrounded", cameras=(), action_mode="ee_pose")
    controller = ScriptedPickPlace(ref.cfg.control_hz)
    obs, _ = ref.reset(seed=SIGNAL_SEED)
    controller.reset(ref)
    states, actions, info = [], [], {}
    keys = ("eef_pos", "object_pos", "hand", "bin_pos")  # what annotate's traces are made of
    tracked = {k: [] for k in keys}
    for _ in range(ref.max_steps):
        action = controller(obs)
        states.append(ref.state())
        for k, v in zip(keys, (obs["proprio"]["ee_pose"][:3], obs["privileged"]["object_pos"], action[7:],
                               obs["privileged"]["target_bin_pos"])):
            tracked[k].append(v)
        obs, _, terminated, truncated, info = ref.step(action)
        # The joint targets the reference's IK commanded, as the joint action that replays them.
        actions.append(np.concatenate([ref.physics.host_data(0).ctrl[ref.index.arm_act], action[7:]]))
        if terminated or truncated:
            break
    assert info["success"]
    ref_ends = annotate_traces(traces(**{k: np.array(v) for k, v in tracked.items()})).ends

    isaaclab_env.reset(seed=SIGNAL_SEED)
    start = ref_ends[0] - LEAD
    isaaclab_env.set_state(states[start])
    tracked = {k: [] for k in keys}
    switched: dict[str, int] = {}
    for t in range(start, ref_ends[2] + TAIL):
        frames = isaaclab_env.get_object_poses()
        for k, v in zip(keys, (isaaclab_env.get_robot_eef_pose("right"), frames["object"], None, frames["target_bin"])):
            tracked[k].append(actions[t][7:] if v is None else v[0, :3, 3].numpy())
        _, _, terminated, truncated, _ = isaaclab_env.step(torch.tensor(actions[t], dtype=torch.float32)[None])
        assert not (terminated[0] or truncated[0])
        for name, on in isaaclab_env.get_subtask_term_signals([0]).items():
            if on[0]:
                switched.setdefault(name, t - start)
            else:
                assert name not in switched, f"{name} switched off again at step {t}"
    # The isaaclab_env's signals, step by step, where annotate puts them on the same Newton run seen whole ...
    ends = annotate_traces(traces(**{k: np.array(v) for k, v in tracked.items()})).ends
    assert tuple(switched.get(name) for name in TERM_SIGNALS) == ends
    # ... and where annotate put them on MuJoCo C (measured: the same steps).
    newton = tuple(start + e for e in ends)
    print(f"subtask ends: Newton {newton}, MuJoCo C {ref_ends}")
    assert np.abs(np.subtract(newton, ref_ends)).max() <= 1
