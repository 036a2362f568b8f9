"""The compiled cell against the robot facts file (the oracle) and the belt's physics."""

import math

import mujoco
import numpy as np
import pytest
import yaml

from r2s2r.cell.mjcf import arm_joint_names, belt_periodic, build_model, hand_joint_names
from r2s2r.cell.spec import ArmCfg, BeltCfg, CellCfg, Pose
from r2s2r.core import ConfigError, assets_dir
from r2s2r.physics import make_physics


@pytest.fixture(scope="module")
def facts():
    with open(assets_dir() / "robots" / "robots.yaml") as f:
        return yaml.safe_load(f)["robots"]


@pytest.fixture(scope="module")
def model():
    return build_model(CellCfg())


def test_arm_limits_masses_and_zero_pose_match_the_facts(facts, model):
    arm = facts["flexiv_rizon4s"]
    revolute = [j for j in arm["joints"] if j["type"] == "revolute"]
    for side in ("right", "left"):
        for name, j in zip(arm_joint_names(side), revolute):
            np.testing.assert_allclose(model.joint(name).range, [j["soft_lower"], j["soft_upper"]])
            np.testing.assert_allclose(model.jnt_actfrcrange[model.joint(name).id], [-j["effort"], j["effort"]])
        links = sum(model.body(f"{side}_link{i}").mass[0] for i in range(1, 8)) + model.body(f"{side}_base").mass[0]
        assert links == pytest.approx(arm["derived"]["total_mass_links"])
    # Zero pose: the flange sits where the facts file's derived chain puts it, in the base frame.
    d = mujoco.MjData(model)
    mujoco.mj_kinematics(model, d)
    base = model.body("right_base").id
    rel = d.xmat[base].reshape(3, 3).T @ (d.site("right_flange").xpos - d.xpos[base])
    np.testing.assert_allclose(rel, arm["derived"]["zero_pose_frame_origins_in_base_link"]["link7_to_flange"],
                               atol=1e-6)


def test_hands_have_twenty_actuated_joints_and_the_facts_mass(facts, model):
    hand = facts["wuji_hand_right"]
    for side in ("right", "left"):
        names = hand_joint_names(side)
        assert len(names) == 20
        assert all(model.actuator(n).trnid[0] == model.joint(n).id for n in names)
        bodies = [model.body(f"{side}_palm").id] + [model.body(f"{side}_finger{f}_link{k}").id
                                                     for f in range(1, 6) for k in range(1, 5)]
        assert model.body_mass[bodies].sum() == pytest.approx(hand["derived"]["total_mass_all_links"], abs=1e-9)


def test_left_hand_mirrors_the_right(model):
    """Fingertip positions in each palm's frame are reflections of each other across the palm's y = 0 plane."""
    d = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    for side_q in [rng.uniform(0, 1, 20)]:
        for side in ("right", "left"):
            for n, q in zip(hand_joint_names(side), side_q):
                d.joint(n).qpos = q
    mujoco.mj_kinematics(model, d)

    def tips(side):
        palm = model.body(f"{side}_palm").id
        r, p = d.xmat[palm].reshape(3, 3), d.xpos[palm]
        return np.array([r.T @ (d.xpos[model.body(f"{side}_finger{f}_link4").id] - p) for f in range(1, 6)])

    right, left = tips("right"), tips("left")
    np.testing.assert_allclose(left, right * [1, -1, 1], atol=1e-9)


def test_belt_carries_an_object_by_friction_and_drops_it_at_the_end(model):
    cell = CellCfg()
    phys = make_physics("mujoco", model, 1, (belt_periodic(model, cell),))
    qpos, ctrl = model.key_qpos[0].copy(), model.key_ctrl[0].copy()
    adr = model.joint("obj_cube").qposadr[0]
    half_len = cell.belt.length / 2
    qpos[adr:adr + 3] = (half_len - 0.35, 0.0, cell.belt.center[2] + 0.026)
    speed = 0.25
    ctrl[model.actuator("belt_drive").id] = speed
    phys.reset(qpos, np.zeros(model.nv), ctrl)  # object and belt start at rest: friction must accelerate it
    phys.step(500)  # 1 s
    x1 = phys.qpos()[0, adr]
    assert x1 - (half_len - 0.35) == pytest.approx(speed * 1.0, rel=0.1)
    phys.step(1000)
    z_end = phys.qpos()[0, adr + 2]
    assert z_end < cell.belt.center[2] - 0.03, "the object should have fallen off the belt's end"
    belt_q = phys.qpos()[0, model.joint("belt_slide").qposadr[0]]
    assert abs(belt_q) <= cell.belt.slat_pitch / 2


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: CellCfg(belt=BeltCfg(speed_range=(-0.1, 0.2))), "belt.speed_range"),
        (lambda: CellCfg(arms=(ArmCfg("right", Pose(), (0.0,) * 7, hand_mount=Pose((0, 0, -0.03))),
                               CellCfg().arm("left"))), "arms.right.hand_mount"),
        (lambda: CellCfg(arms=(ArmCfg("right", Pose(), (0.0,) * 6), CellCfg().arm("left"))), "arms.right.home_q"),
    ],
)
def test_bad_cell_values_fail_validation_naming_the_field(make, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make().validate()


def test_hand_mount_rotation_that_sinks_the_palm_is_rejected():
    flipped = Pose((0.0, 0.0, 0.012), (math.pi, 0.0, 0.0))  # fingers pointing back into the arm
    cell = CellCfg(arms=(ArmCfg("right", Pose(), (0.0,) * 7, hand_mount=flipped), CellCfg().arm("left")))
    with pytest.raises(ConfigError, match="behind the flange"):
        cell.validate()
