"""The parity measurement of docs/isaaclab.md, on a prefix of its episode (the module's `isaaclab_env`, ungrounded)."""

from __future__ import annotations

from r2s2r.isaaclab_tasks.pick_sort.parity import MEASURES, replay, scripted_joint_actions


def test_replay_compares_both_physics_step_by_step(isaaclab_env):
    actions, outcome = scripted_joint_actions("ungrounded", 1)
    assert outcome == "success" and len(actions) == 168  # the episode docs/isaaclab.md reports
    result = replay(isaaclab_env, "ungrounded", 1, actions[:20])
    assert result["mujoco_c"] is None and result["isaaclab"] is None
    diffs = result["diffs"]
    assert set(diffs) == set(MEASURES) and all(len(v) == 20 for v in diffs.values())
    # Before the grasp (step 118) both physics agree to about 1e-5 (measured: grasp site 2e-7 m, object 7e-6 m).
    assert diffs["ee"].max() < 1e-4 and diffs["object"].max() < 1e-4 and diffs["arm"].max() < 1e-4
    assert diffs["object"].max() > 0  # two physics engines, not one state compared with itself
