"""The Isaac RTX backend: its pure parts against usd-core and Isaac Lab 3.0's own code, the episode appearance
(taken from the MuJoCo model the episode's reset drew it into) on the stage, and (where Isaac Sim runs) the Kit
parts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import mujoco
import numpy as np
import pytest
from conftest import moved_cell
from pxr import Gf, Usd, UsdGeom, UsdLux, UsdShade

from r2s2r.cell import usd
from r2s2r.cell.mjcf import build_model
from r2s2r.cell.spec import CellCfg, LensCfg
from r2s2r.core import ConfigError
from r2s2r.render import make_renderer
from r2s2r.render import isaac_rtx as rtx
from r2s2r.render.camera_model import CameraModel
from r2s2r.tasks.pick_sort.env import PickSortEnv

CELL = CellCfg()
ISAACSIM = pytest.mark.isaacsim
NEEDS_KIT = pytest.mark.skipif(importlib.util.find_spec("isaacsim") is None,
                               reason="needs Isaac Sim (RTX GPU); isaacsim does not import here")


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return build_model(CELL)


@pytest.fixture(scope="module")
def moved(model) -> mujoco.MjData:
    """A non-trivial state: belt running with the cube on it, every arm and finger drive commanded away from home."""
    data = moved_cell(model, 0.25, (-0.5, 0.02, 0.105, np.cos(0.3), 0, 0, np.sin(0.3)), -0.25, 200)
    home = model.key("home").qpos
    assert np.abs(data.qpos[:14] - home[:14]).max() > 0.1, "the arms did not move"
    return data


# --------------------------------------------------------------------------------------------------------------
# Poses
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.warp
def test_body_matrices_equal_usd_world_transforms(model, moved):
    stage = usd.build_stage(model, CELL)
    usd.sync_poses(stage, model, moved)
    mats = rtx.body_matrices(moved)
    assert mats.shape == (model.nbody - 1, 4, 4) and mats.dtype == np.float64
    for b in range(1, model.nbody):
        prim = stage.GetPrimAtPath(usd.body_prim_path(model, b))
        expected = np.array(UsdGeom.Xformable(prim).ComputeLocalToWorldTransform(Usd.TimeCode.Default()))
        np.testing.assert_allclose(mats[b - 1], expected, rtol=0, atol=1e-6, err_msg=str(prim.GetPath()))
    # Row-vector layout: a body-frame point p maps to the world as [p, 1] @ M (translation in the last row).
    b = model.body("obj_cube").id
    p = np.array([0.01, -0.02, 0.03])
    world = np.append(p, 1.0) @ mats[b - 1]
    np.testing.assert_allclose(world[:3], moved.xpos[b] + moved.xmat[b].reshape(3, 3) @ p, atol=1e-12)


# --------------------------------------------------------------------------------------------------------------
# Lens
# --------------------------------------------------------------------------------------------------------------
LENSES = {
    "fisheye": LensCfg(model="fisheye", fx=0.31, fy=0.33, cx=0.49, cy=0.52, distortion=(0.05, -0.01, 0.002, -0.0004)),
    "pinhole": LensCfg(fx=0.9, fy=1.2, cx=0.47, cy=0.53),
}


@pytest.mark.parametrize("kind", sorted(LENSES))
def test_lens_attributes_equal_isaac_labs_authoring(kind):
    from isaaclab.sim.spawners.sensors.sensors import _author_opencv_distortion
    from isaaclab.sim.spawners.sensors.sensors_cfg import OpenCvFisheyeDistortionCfg, OpenCvPinholeDistortionCfg

    lens, (w, h) = LENSES[kind], (320, 240)
    k = CameraModel(lens, w, h).intrinsic_matrix()  # the pixel intrinsics our lens model renders with
    common = dict(fx=k[0, 0], fy=k[1, 1], cx=k[0, 2], cy=k[1, 2], image_size=(w, h))
    if kind == "fisheye":
        cfg = OpenCvFisheyeDistortionCfg(**common, **dict(zip(("k1", "k2", "k3", "k4"), lens.distortion)))
    else:
        cfg = OpenCvPinholeDistortionCfg(**common)
    stage = Usd.Stage.CreateInMemory()
    theirs = UsdGeom.Camera.Define(stage, "/theirs").GetPrim()
    ours = UsdGeom.Camera.Define(stage, "/ours").GetPrim()
    _author_opencv_distortion(theirs, cfg)
    usd.author_lens_distortion(ours, lens, w, h)

    def authored(prim):
        return {a.GetName(): (str(a.GetTypeName()), a.Get()) for a in prim.GetAuthoredAttributes()}

    assert authored(ours) == authored(theirs)
    assert ours.GetMetadata("apiSchemas") == theirs.GetMetadata("apiSchemas")
    assert len(authored(ours)) == {"fisheye": 2 + 4 + 4, "pinhole": 2 + 4 + 12}[kind]
    prefix = f"omni:lensdistortion:{usd.LENS_DISTORTION_SCHEMAS[kind][0]}"
    assert ours.GetAttribute(f"{prefix}:fx").Get() == pytest.approx(lens.fx * w, rel=1e-6)
    assert ours.GetAttribute(f"{prefix}:cy").Get() == pytest.approx(lens.cy * h, rel=1e-6)


# --------------------------------------------------------------------------------------------------------------
# Tiles
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.warp
@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_untile_matches_isaac_labs_tile_order(count):
    import warp as wp
    from isaaclab.utils.warp.kernels import reshape_tiled_image

    h, w = 3, 4
    cols, rows = rtx.tile_grid(count)
    tiled = np.random.default_rng(count).integers(0, 255, (rows * h, cols * w, 4), dtype=np.uint8)
    theirs = wp.empty((count, h, w, 4), dtype=wp.uint8, device="cpu")
    wp.launch(reshape_tiled_image, dim=(count, h, w), inputs=[wp.array(tiled, device="cpu"), theirs, h, w, 4, cols],
              device="cpu")
    np.testing.assert_array_equal(rtx.untile(tiled, count, h, w), theirs.numpy())
    with pytest.raises(ValueError, match="tiled buffer"):
        rtx.untile(tiled[:-1], count, h, w)


# --------------------------------------------------------------------------------------------------------------
# Appearance
# --------------------------------------------------------------------------------------------------------------
def test_appearance_values_show_the_model_state_on_the_stage():
    """Written with plain USD here (Replicator writes the same attributes under Kit), the stage's lights and object
    materials reproduce what the MuJoCo renderers draw after a `lighting` reset."""
    e = PickSortEnv(cameras=())
    e.reset(seed=3, options={"condition": "lighting"})
    m = e.model
    stage = usd.build_stage(m, e.cell)
    rtx.bind_object_materials(stage, m, e.cell)
    for path, attrs in rtx.appearance_values(m, *rtx.model_appearance(m, e.cell)).items():
        prim = stage.GetPrimAtPath(path)
        assert prim.IsValid(), path
        for name, value in attrs.items():
            assert prim.GetAttribute(name).Set(value), f"{path}.{name}"
    for i, cfg in enumerate(e.cell.lights):
        light = UsdLux.SphereLight(stage.GetPrimAtPath(f"/World/Lights/{cfg.name}"))
        shown = np.array(light.GetColorAttr().Get()) * light.GetIntensityAttr().Get() / usd.SPHERE_NITS_PER_UNIT
        np.testing.assert_allclose(shown, m.light_diffuse[i], rtol=1e-6)
        pos = UsdGeom.Xformable(light).ComputeLocalToWorldTransform(Usd.TimeCode.Default()).ExtractTranslation()
        np.testing.assert_allclose(np.array(pos), m.light_pos[i], atol=1e-12)
    assert np.abs(m.light_pos - e.sim.lights_nominal[0]).max() > 0.01  # the lights did move
    for o in e.all_objects:
        body = f"obj_{o.name}"
        geom = stage.GetPrimAtPath(f"{usd.body_prim_path(m, m.body(body).id)}/{body}")
        material, _ = UsdShade.MaterialBindingAPI(geom).ComputeBoundMaterial()
        shader = UsdShade.Shader(stage.GetPrimAtPath(f"{material.GetPath()}/PreviewSurface"))
        rgba = m.geom_rgba[m.geom(body).id]
        assert shader.GetInput("diffuseColor").Get() == Gf.Vec3f(*map(float, rgba[:3])), body
        assert shader.GetInput("opacity").Get() == pytest.approx(rgba[3])
    e.close()


# --------------------------------------------------------------------------------------------------------------
# Without Isaac Sim
# --------------------------------------------------------------------------------------------------------------
def test_isaac_rtx_without_kit_is_a_config_error(model):
    if rtx.kit_running():
        pytest.skip("Kit is running in this process")
    with pytest.raises(ConfigError, match="isaac_rtx.*Isaac Sim"):
        make_renderer("isaac_rtx", model, CELL, ["head_left"], 64, 64)


def test_importing_the_backend_loads_no_kit_module():
    code = ("import sys, r2s2r, r2s2r.render.isaac_rtx; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('omni', 'isaacsim', 'usdrt', 'carb')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------------------------
# Isaac Sim (Kit, RTX GPU)
# --------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kit():
    from isaacsim import SimulationApp

    app = SimulationApp({"headless": True})
    yield app
    app.close()


@ISAACSIM
@NEEDS_KIT
def test_rtx_depth_agrees_with_mujoco_gl_and_poses_move_the_image(kit):
    from r2s2r.sim import CellSim

    sim = CellSim(CELL)
    sim.home()
    cams, size = ["head_left", "right_wrist"], (96, 96)
    with sim.renderer("isaac_rtx", cams, *size) as rtx_r, sim.renderer("mujoco_gl", cams, *size) as gl:
        ours, ref = rtx_r.render(sim.physics), gl.render(sim.physics)
        for cam in cams:
            rgb, depth = ours[cam]["rgb"][0], ours[cam]["depth"][0]
            assert rgb.std() > 5, f"{cam}: a flat image"
            both = (depth > 0) & (ref[cam]["depth"][0] > 0)
            assert both.mean() > 0.5, cam
            # Silhouette pixels may differ; the bulk of the depth must agree to a millimetre.
            assert np.median(np.abs(depth[both] - ref[cam]["depth"][0][both])) < 1e-3, cam
        ctrl = sim.model.key_ctrl[0].copy()
        ctrl[sim.index.arm_act] += 0.4
        sim.physics.set_ctrl(ctrl)
        sim.physics.step(250)
        moved = rtx_r.render(sim.physics)
        assert np.abs(moved["head_left"]["rgb"].astype(int) - ours["head_left"]["rgb"].astype(int)).mean() > 0.5


@ISAACSIM
@NEEDS_KIT
def test_replicator_applies_an_episode_appearance(kit):
    import omni.usd

    e = PickSortEnv(cameras=())
    e.reset(seed=5, options={"condition": "lighting"})
    with make_renderer("isaac_rtx", e.model, e.cell, ["head_left"], 64, 64):
        values = rtx.appearance_values(e.model, *rtx.model_appearance(e.model, e.cell))
        rtx.apply_appearance_with_replicator(values)
        stage = omni.usd.get_context().get_stage()
        for path, attrs in values.items():
            for name, value in attrs.items():
                got = stage.GetPrimAtPath(path).GetAttribute(name).Get()
                np.testing.assert_allclose(np.array(got, dtype=float), np.array(value, dtype=float), rtol=1e-6)
    e.close()
