"""The grasp + motion planner on the real cell: limits, collisions, interception, determinism, success rate."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.behavior.base import GenerationError
from r2s2r.behavior.planner import PlannerCfg, PlannerGenerator
from r2s2r.geometry import mat_to_quat, rotation_error
from r2s2r.tasks.pick_sort.env import PickSortEnv

# Pinned: a nominal seed the planner's trajectory succeeds on. Its rate over 20 nominal seeds is measured by
# benchmarks/bench_success.py (17 of 20, docs/benchmarks.md).
ADMITTED_SEED = 0


@pytest.fixture(scope="module")
def env():
    e = PickSortEnv(cameras=())
    yield e
    e.close()


@pytest.fixture(scope="module")
def planner():
    return PlannerGenerator()


def _run(env, gen, seed, steps=None, condition="nominal"):
    obs, info = env.reset(seed=seed, options={"condition": condition})
    attrs = gen.reset(env, obs, np.random.default_rng(seed))
    actions, done, k = [], False, 0
    while not done and (steps is None or k < steps):
        actions.append(gen(obs))
        obs, _, term, trunc, info = env.step(actions[-1])
        done, k = term or trunc, k + 1
    return attrs, np.array(actions), obs, info


def test_path_within_velocity_limits_and_clear_of_the_scene(env, planner):
    obs, _ = env.reset(seed=3)
    planner.reset(env, obs, np.random.default_rng(3))
    # The way home is planned once the actions run past the release; the plan then ends at home.
    released = len(planner.q_path)
    while planner.retreat_from is not None:
        planner(obs)
    assert len(planner.q_path) > released and np.allclose(planner.q_path[-1], planner.home)
    speed = np.abs(np.diff(planner.q_path, axis=0)) / planner.cfg.sample_dt
    assert np.all(speed <= planner.vmax * 1.001)
    # The free-space segments are timed to the limit: some joint runs near velocity_fraction of it.
    assert np.max(speed / planner.vmax) > 0.8 * planner.cfg.velocity_fraction
    # The arm and palm never touch the static scene or come near the other arm (fingers touch the belt on purpose).
    for q, hand in zip(planner.q_path[::5], planner.hand_path[::5]):
        assert not planner.collision_at(q, hand, holding=False, arm_only=True)


@pytest.mark.parametrize("seed", [2, 6, 9])
def test_grasp_path_joints_reach_the_grasp_path_at_every_sample(env, planner, seed):
    """The descent, closure and lift are solved by IK at knots and interpolated between them: every sample's forward
    kinematics must still be on the moving grasp within the solver's tolerance (0.1 mm, 0.2 mrad), with a margin."""
    obs, _ = env.reset(seed=seed, options={"condition": ("belt_speed", "nominal", "combined")[seed % 3]})
    planner.reset(env, obs, np.random.default_rng(seed))
    q = planner.q_path[planner.cart_start:planner.cart_start + len(planner.cart_t)]
    for qi, target in zip(q, planner._grasp_path(planner.cart_t)):
        pos, rot = planner.track.site_pose(qi)
        assert np.linalg.norm(pos - target) < 2e-4
        assert np.linalg.norm(rotation_error(rot, planner.grasp_rot)) < 5e-4


def test_interception_meets_the_object_where_it_is(env, planner):
    attrs, _, obs, _ = _run(env, planner, seed=5, steps=None)
    # Replay to the meeting time and compare the hand with the object on the belt.
    obs, _ = env.reset(seed=5)
    planner.reset(env, obs, np.random.default_rng(5))
    steps = int(round(attrs["meet_time"] * env.cfg.control_hz))
    for _ in range(steps):
        obs, *_ = env.step(planner(obs))
    obj = obs["privileged"]["object_pos"]
    assert abs(obj[0] - attrs["meet_x"]) < 0.01  # the object is where the plan predicted
    site = obs["proprio"]["ee_pose"][:3] - planner.grasp_offset
    assert np.linalg.norm(site[:2] - obj[:2]) < 0.02  # and the hand is over it, riding along


def test_same_seed_gives_identical_actions(env):
    _, a, _, _ = _run(env, PlannerGenerator(), seed=7, steps=120)
    _, b, _, _ = _run(env, PlannerGenerator(), seed=7, steps=120)
    assert np.array_equal(a, b)


def test_no_plan_raises_with_a_reason(env):
    gen = PlannerGenerator(PlannerCfg(reach_x=(3.0, 3.5)))  # beyond the belt's end: never reachable
    obs, _ = env.reset(seed=0)
    with pytest.raises(GenerationError) as err:
        gen.reset(env, obs, np.random.default_rng(0))
    assert err.value.reason == "unreachable"


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="velocity_fraction"):
        PlannerCfg(velocity_fraction=1.5).validate()


def test_a_pinned_nominal_seed_is_admitted(env, planner):
    _, _, _, info = _run(env, planner, ADMITTED_SEED)
    assert info["success"] and info["failure"] is None, info


def test_collision_check_matches_exact_contacts_and_distances(env, planner):
    """`collision_at` folds the arms' distance into one collision pass (contact margins on the left arm). Oracle: the
    cell's own model with its own collision filter for the scene (deep contacts of the moving geoms with static
    ones) and `mj_geomDistance` between every right outer geom and every left geom, on random configurations."""
    import mujoco

    from r2s2r.cell.mjcf import object_body_name

    obs, _ = env.reset(seed=4)
    planner.reset(env, obs, np.random.default_rng(4))
    m = env.model
    oracle = mujoco.MjData(m)
    obj_geom = m.geom(object_body_name(env.obj)).id
    obj_qadr = m.joint(object_body_name(env.obj)).qposadr[0]
    right_outer, left = np.flatnonzero(planner.right_outer), np.flatnonzero(planner.left_geoms)
    clearance, fromto = planner.cfg.arm_clearance, np.zeros(6)

    def exact(q, hand, holding, arm_only):
        oracle.qpos[:] = m.key_qpos[0]
        oracle.qpos[planner.arm_qadr], oracle.qpos[planner.hand_qadr] = q, hand
        mujoco.mj_kinematics(m, oracle)
        if holding:  # the object at the grasp, where the hand holds it
            r_obj = oracle.site_xmat[planner.site].reshape(3, 3) @ planner.grasp.rot.T
            oracle.qpos[obj_qadr:obj_qadr + 3] = oracle.site_xpos[planner.site] - r_obj @ planner.grasp.pos
            oracle.qpos[obj_qadr + 3:obj_qadr + 7] = mat_to_quat(r_obj)
            mujoco.mj_kinematics(m, oracle)
        moving = (planner.arm_geoms if arm_only else planner.robot_geoms).copy()
        moving[obj_geom] = holding
        scene = any(mujoco.mj_geomDistance(m, oracle, int(i), int(j), 0.0, fromto) < -planner.cfg.collision_tolerance
                    for i in np.flatnonzero(moving) for j in np.flatnonzero(planner.static_geoms))
        arms = any(mujoco.mj_geomDistance(m, oracle, int(i), int(j), clearance, fromto) < clearance
                   for i in right_outer for j in left)
        return "scene" if scene else "arms" if arms else None

    rng = np.random.default_rng(0)
    verdicts = {"scene": 0, "arms": 0, None: 0}
    for k in range(300):
        # Around the plan (near the belt and bins), and anywhere in the joint range (near the other arm).
        if k % 3 == 2:
            q = rng.uniform(planner.ik.lower, planner.ik.upper)
        else:
            base = planner.q_path[rng.integers(len(planner.q_path))] if k % 2 else planner.home
            q = np.clip(base + rng.normal(0, [0.05, 0.4][k % 3], 7), planner.ik.lower, planner.ik.upper)
        hand = planner.hand_path[rng.integers(len(planner.hand_path))]
        holding, arm_only = bool(k % 4 < 2), bool(k % 2)
        expected = exact(q, hand, holding, arm_only)
        verdicts[expected] += 1
        assert planner.collision_at(q, hand, holding, arm_only) == (expected is not None), (k, expected)
    assert min(verdicts.values()) >= 5, verdicts  # every kind of verdict was exercised
