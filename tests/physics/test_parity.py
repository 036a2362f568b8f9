"""MuJoCo Warp (on Warp's CPU device) against the MuJoCo C oracle on the cell: same state, same controls, 1 s.

Scene: the home keyframe with offsets on the right arm's position targets (so the arm swings), the belt commanded
to 0.2 m/s, `obj_cube` resting on the belt at x = -0.3 (it must be carried by friction) and `obj_sphere` dropped
onto the belt from 5 cm. Kernel compilation dominates the runtime (about a minute cold, seconds with Warp's
kernel cache), so every backend is built once per module. The cache stays at Warp's default location
(~/.cache/warp, or WARP_CACHE_PATH when CI sets it): nothing here overrides it, so later runs reuse it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import r2s2r  # noqa: F401
except ImportError:  # not installed into the venv: import from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "source" / "r2s2r"))

from r2s2r.cell.mjcf import arm_joint_names, belt_periodic, build_model  # noqa: E402
from r2s2r.cell.spec import CellCfg  # noqa: E402
from r2s2r.physics.mujoco_c import MujocoCBackend  # noqa: E402

pytestmark = pytest.mark.warp

STEPS = 500  # 1 s at the cell's 2 ms timestep
# Body positions may differ by this much at any step. Warp computes in float32 and MuJoCo C in float64, so
# contact penetration, solver residuals and integration round differently; the largest gap measured is 0.03 mm,
# on the cube while it settles onto the belt in the first steps (later it stays under 0.005 mm). 0.2 mm gives
# ~7x margin for other CPUs and compilers while still catching any real divergence (a slip or a missed contact
# moves a body by millimetres within 1 s).
POS_TOL = 2e-4
BELT_SPEED = 0.2  # m/s, commanded
CUBE_MIN_TRAVEL = 0.15  # m in 1 s: the belt moves 0.2 m, so the cube rides it rather than sliding or sticking
# Position-target offsets of the right arm (rad), so the arm moves during the run.
RIGHT_ARM_OFFSETS = (0.3, 0.2, 0.0, -0.3, 0.0, 0.2, 0.0)
NWORLD = 4


@pytest.fixture(scope="module")
def scene():
    cell = CellCfg()
    model = build_model(cell)
    periodic = (belt_periodic(model, cell),)
    objects = {o.name: o for o in cell.objects}
    ctrl = model.key_ctrl[0].copy()
    for name, dq in zip(arm_joint_names("right"), RIGHT_ARM_OFFSETS):
        ctrl[model.actuator(name).id] += dq
    ctrl[model.actuator("belt_drive").id] = BELT_SPEED
    cube = int(model.joint("obj_cube").qposadr[0])
    sphere = int(model.joint("obj_sphere").qposadr[0])
    belt = int(model.joint("belt_slide").qposadr[0])
    belt_top = cell.belt.center[2]

    def initial_qpos(k: int = 0) -> np.ndarray:
        """World k's initial state; k = 0 is the nominal scene, the others shift the objects, belt phase and arm."""
        q = model.key_qpos[0].copy()
        q[cube : cube + 7] = [-0.3 + 0.05 * k, -0.06 * (k > 0) + 0.04 * k, belt_top + objects["cube"].half_height,
                              1, 0, 0, 0]
        q[sphere : sphere + 7] = [0.1 + 0.05 * k, 0.03 * k, belt_top + objects["sphere"].half_height + 0.05,
                                  1, 0, 0, 0]
        q[belt] = 0.012 * k
        q[model.joint("right_joint1").qposadr[0]] += 0.05 * k
        return q

    return dict(model=model, periodic=periodic, ctrl=ctrl, cube=cube, belt=belt, pitch=cell.belt.slat_pitch,
                initial_qpos=initial_qpos)


def _run(backend, qpos: np.ndarray, ctrl: np.ndarray, steps: int = STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Reset, step `steps` times; return body positions (steps, nworld, nbody, 3) and qpos (steps, nworld, nq)."""
    backend.reset(qpos, np.zeros(backend.model.nv), ctrl)
    xpos, qs = [], []
    for _ in range(steps):
        backend.step()
        xpos.append(backend.xpos())
        qs.append(backend.qpos())
    return np.array(xpos), np.array(qs)


def _oracle(scene, k: int) -> tuple[np.ndarray, np.ndarray]:
    c = MujocoCBackend(scene["model"], 1, scene["periodic"])
    xpos, qpos = _run(c, scene["initial_qpos"](k), scene["ctrl"])
    return xpos[:, 0], qpos[:, 0]


@pytest.fixture(scope="module")
def single(scene):
    from r2s2r.physics.mujoco_warp import MujocoWarpBackend

    w = MujocoWarpBackend(scene["model"], 1, scene["periodic"], device="cpu")
    xpos, qpos = _run(w, scene["initial_qpos"](0), scene["ctrl"])
    return dict(backend=w, xpos=xpos[:, 0], qpos=qpos[:, 0], ref=_oracle(scene, 0))


@pytest.fixture(scope="module")
def batch(scene):
    from r2s2r.physics.mujoco_warp import MujocoWarpBackend

    w = MujocoWarpBackend(scene["model"], NWORLD, scene["periodic"], device="cpu")
    q0 = np.stack([scene["initial_qpos"](k) for k in range(NWORLD)])
    xpos, qpos = _run(w, q0, scene["ctrl"])
    return dict(backend=w, xpos=xpos, qpos=qpos, refs=[_oracle(scene, k) for k in range(NWORLD)])


def _max_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b, axis=-1).max())


def test_single_world_matches_mujoco_c(single):
    err = _max_error(single["xpos"], single["ref"][0])
    assert err < POS_TOL, f"max body position difference {err * 1e3:.3f} mm over 1 s, tolerance {POS_TOL * 1e3} mm"
    assert not single["backend"].unstable().any()


def test_cube_rides_the_belt(scene, single):
    i = scene["model"].body("obj_cube").id
    for label, xpos in (("mujoco_warp", single["xpos"]), ("mujoco", single["ref"][0])):
        travel = xpos[-1, i, 0] - scene["initial_qpos"](0)[scene["cube"]]
        assert travel > CUBE_MIN_TRAVEL, f"{label}: cube moved {travel:.3f} m in 1 s on a {BELT_SPEED} m/s belt"


def test_batched_worlds_match_separate_runs(scene, batch):
    for k, (ref_xpos, _) in enumerate(batch["refs"]):
        err = _max_error(batch["xpos"][:, k], ref_xpos)
        assert err < POS_TOL, f"world {k}: max body position difference {err * 1e3:.3f} mm"
    # The worlds really differ, so a batch that mixed them up would fail above.
    cube = scene["model"].body("obj_cube").id
    assert np.ptp(batch["xpos"][-1, :, cube, 0]) > 0.1
    assert not batch["backend"].unstable().any()


def test_belt_joint_wraps_on_device(scene, single, batch):
    half = scene["pitch"] / 2
    for q in (single["qpos"][:, scene["belt"]], batch["qpos"][:, :, scene["belt"]]):
        assert (q >= -half).all() and (q < half).all(), f"belt joint left [{-half}, {half}): {q.min()}, {q.max()}"
    # It did wrap (1 s at 0.2 m/s is four pitches), and the wrapped values follow the oracle's.
    q = single["qpos"][:, scene["belt"]]
    assert (np.diff(q) < -half).sum() >= 3
    ref = single["ref"][1][:, scene["belt"]]
    gap = (q - ref + half) % scene["pitch"] - half  # compare on the circle: a wrap may land one step apart
    assert np.abs(gap).max() < POS_TOL


def test_host_data_and_eager_launches(scene, single):
    from r2s2r.physics.mujoco_warp import MujocoWarpBackend

    # host_data gives kinematics of the device state: the cube's body position is its free-joint position.
    w = single["backend"]
    d = w.host_data(0)
    cube = scene["cube"]
    np.testing.assert_allclose(d.qpos, w.qpos()[0])
    np.testing.assert_allclose(d.xpos[scene["model"].body("obj_cube").id], d.qpos[cube : cube + 3], atol=1e-12)
    # Graph replay (the default) and eager kernel launches run the same kernels, so they agree to the bit.
    eager = MujocoWarpBackend(scene["model"], 1, scene["periodic"], device="cpu", graph=False)
    xpos, _ = _run(eager, scene["initial_qpos"](0), scene["ctrl"], steps=50)
    np.testing.assert_array_equal(xpos[:, 0], single["xpos"][:50])


@pytest.mark.parametrize("backend", ["mujoco", "mujoco_warp"])
def test_writes_into_host_data_set_the_state_on_every_backend(scene, backend):
    # host_data means the same on both backends: writing into its state fields sets those entries of that world's
    # state (on MuJoCo C it is the live data; on MuJoCo Warp a copy whose edits reach the device before the next
    # call), including through a copy that later steps left stale, which must not roll the other entries back.
    from r2s2r.physics import make_physics

    model, cube, belt = scene["model"], scene["cube"], scene["model"].actuator("belt_drive").id
    physics = make_physics(backend, model, 2, scene["periodic"], device="cpu" if backend == "mujoco_warp" else None)
    q0 = np.stack([scene["initial_qpos"](k) for k in range(2)])
    physics.reset(q0, np.zeros(model.nv), scene["ctrl"])
    lifted = (0.2, 0.1, 0.5)
    d = physics.host_data(1)
    d.qpos[cube : cube + 3] = lifted
    np.testing.assert_allclose(physics.qpos()[1, cube : cube + 3], lifted, atol=1e-6)
    np.testing.assert_allclose(physics.qpos()[0], q0[0], atol=1e-6)  # the other world keeps its state
    physics.step(25)  # 50 ms: the lifted cube falls ~12 mm
    d.ctrl[belt] = 0.0  # into the copy taken before the steps
    physics.step(1)
    assert physics.host_data(1).ctrl[belt] == 0.0
    assert physics.host_data(0).ctrl[belt] == pytest.approx(BELT_SPEED)  # float32 on MuJoCo Warp
    assert physics.qpos()[1, cube + 2] < lifted[2] - 0.005  # still falling, not back at the stale height
    physics.host_data(0).qvel[0] = np.nan
    assert physics.unstable().tolist() == [True, False]
