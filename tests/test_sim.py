"""The simulation core: the drive model the task and calibration share, index tables and appearance setters."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from r2s2r.cell.mjcf import arm_joint_names, object_body_name
from r2s2r.cell.spec import CellCfg
from r2s2r.cell.world import load_world
from r2s2r.core import configs_dir
from r2s2r.sim import PARKED_RGBA, CellSim, belt_drive_speed, delayed
from r2s2r.tasks.pick_sort.env import PickSortEnv

REALITY = configs_dir() / "world" / "reality.yaml"


def test_delayed_shifts_a_step_by_the_latency():
    targets = np.zeros((10, 7))
    targets[4:] = 1.0
    for latency in (0, 1, 3):
        acted = delayed(targets, latency)
        assert acted.shape == targets.shape
        assert np.flatnonzero(acted[:, 0])[0] == 4 + latency


def test_belt_drive_speed_scale_and_jitter():
    belt = load_world(REALITY).cell.belt
    assert belt.speed_jitter > 0 and belt.speed_scale != 1.0
    assert belt_drive_speed(belt, 0.12, None) == pytest.approx(0.12 * belt.speed_scale)
    rng = np.random.default_rng(0)
    draws = np.array([belt_drive_speed(belt, 0.12, rng) for _ in range(4000)])
    assert draws.mean() == pytest.approx(0.12 * belt.speed_scale, rel=0.01)
    assert draws.std() == pytest.approx(0.12 * belt.speed_scale * belt.speed_jitter, rel=0.1)


def test_task_steps_the_drive_model_that_calibration_fits():
    """A control period of the task is the delayed-target drive stepped by MuJoCo C one physics step at a time
    (calibration's actuator fit and rig use `delayed` on the same model)."""
    env = PickSortEnv(world=str(REALITY), cameras=(), action_mode="joint")
    assert env.sim.latency > 0
    seed = 7
    env.reset(seed=seed)
    state, ctrl = env.state(), env._ctrl.copy()
    home = np.array(env.cell.arm("right").home_q)
    actions = [np.concatenate([home + 0.02 * (k + 1) * np.array([1, -1, 1, 1, -1, 1, 1]), np.full(20, 0.1 * k)])
               for k in range(6)]
    logged = []
    for a in actions:
        env.step(a)
        logged.append(env.state())

    # The oracle: a fresh model of the same cell, stepped with mj_step under delayed per-step targets.
    m = CellSim(env.cell).model
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:], d.ctrl[:] = state[:m.nq], state[m.nq:], ctrl
    mujoco.mj_forward(m, d)
    ix, belt_rng = env.index, np.random.default_rng((seed, 1))
    drives = np.concatenate([ix.arm_act, ix.hand_act])
    per_step = [ctrl[drives]]  # arm and hand targets, one row per physics step
    for a, expected in zip(actions, logged):
        d.ctrl[ix.belt_act] = belt_drive_speed(env.cell.belt, env.belt_speed, belt_rng)
        per_step += [a] * env.substeps
        for row in delayed(np.array(per_step), env.sim.latency)[-env.substeps:]:
            d.ctrl[drives] = row
            mujoco.mj_step(m, d)
        np.testing.assert_allclose(d.qpos[ix.arm_qadr], expected[ix.arm_qadr], atol=1e-9)
        np.testing.assert_allclose(d.qpos[ix.hand_qadr], expected[ix.hand_qadr], atol=1e-9)
    env.close()


def test_index_tables_name_the_right_arm():
    sim = CellSim(CellCfg())
    m = sim.model
    assert [m.joint(i).name for i in m.jnt_qposadr.searchsorted(sim.index.arm_qadr)] == arm_joint_names("right")
    assert [m.actuator(i).name for i in sim.index.arm_act] == arm_joint_names("right")
    assert m.body(m.body_rootid[m.site_bodyid[sim.index.grasp_site]]).name == "right_base"
    assert sim.index.robot_bodies.sum() > 20 and not sim.index.robot_bodies[m.body("left_base").id]


def test_paint_objects_and_lights():
    cell = CellCfg()
    sim = CellSim(cell)
    m = sim.model
    active = cell.objects[1]
    sim.paint_objects(active, (0.9, 0.1, 0.2, 1.0))
    for o in cell.objects + cell.novel_objects:
        rgba = m.geom_rgba[m.geom(object_body_name(o)).id]
        np.testing.assert_allclose(rgba, (0.9, 0.1, 0.2, 1.0) if o is active else PARKED_RGBA, rtol=1e-6)
    pos, diffuse = (a.copy() for a in sim.lights_nominal)
    sim.vary_lights(np.random.default_rng(3), scale=(0.5, 0.6), jitter=0.1)
    ratio = m.light_diffuse / np.maximum(diffuse, 1e-9)
    lit = diffuse > 0
    assert np.all((ratio[lit] >= 0.5 - 1e-6) & (ratio[lit] <= 0.6 + 1e-6))
    assert 0 < np.abs(m.light_pos - pos).max() <= 0.1
    sim.set_lights()
    np.testing.assert_array_equal(m.light_pos, pos)
    np.testing.assert_array_equal(m.light_diffuse, diffuse)
