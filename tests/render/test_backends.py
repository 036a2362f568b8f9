"""Render backends: image format, depth against MuJoCo's own ray casts, colours, config errors, and the
MuJoCo Warp ray tracer against the GL rasteriser."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # headless; must precede the first mujoco import

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

try:
    import r2s2r  # noqa: F401
except ImportError:  # not installed into the venv: import from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "source" / "r2s2r"))

from r2s2r.cell.mjcf import build_model, build_spec  # noqa: E402
from r2s2r.cell.spec import CellCfg  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.physics import make_physics  # noqa: E402
from r2s2r.render import RENDERERS, make_renderer  # noqa: E402

CELL = CellCfg()
CAMERAS = CELL.camera_names
GEOMGROUPS = np.array([1, 1, 1, 0, 0, 0], np.uint8)  # the groups both renderers draw
CUBE_IN_VIEW = (0.05, 0.0, 0.106)  # resting on the belt, seen by both head cameras (not behind the right arm)


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return build_model(CELL)


def home_physics(model: mujoco.MjModel, nworld: int, backend: str = "mujoco"):
    physics = make_physics(backend, model, nworld)
    key = model.key("home")
    physics.reset(key.qpos, key.qvel, key.ctrl)
    return physics


def place(model: mujoco.MjModel, physics, body: str, pos, world: int | None = None) -> None:
    """Reset with one free body moved to `pos` (in `world`, or all worlds)."""
    qpos = np.stack([physics.host_data(w).qpos.copy() for w in range(physics.nworld)])
    adr = model.joint(body).qposadr[0]
    for w in range(physics.nworld):
        if world is None or w == world:
            qpos[w, adr:adr + 3] = pos
    key = model.key("home")
    physics.reset(qpos, np.zeros((physics.nworld, model.nv)), key.ctrl)


def world_to_cv(data: mujoco.MjData, cam_id: int, points: np.ndarray) -> np.ndarray:
    """World points in the OpenCV frame of a MuJoCo camera (which looks along its -z with +y up)."""
    local = (np.atleast_2d(points) - data.cam_xpos[cam_id]) @ data.cam_xmat[cam_id].reshape(3, 3)
    return local * np.array([1.0, -1.0, -1.0])


def ray_depth(model: mujoco.MjModel, data: mujoco.MjData, cam_id: int, dir_cv: np.ndarray) -> float:
    """Distance along the optical axis to the first surface on a ray (OpenCV camera frame), by mj_ray; 0 if none.

    Surfaces met from behind are skipped, as both renderers cull back faces: from a camera inside a geom, mj_ray
    would report the geom's inside wall.
    """
    dir_cv = np.asarray(dir_cv, dtype=np.float64) / np.linalg.norm(dir_cv)
    dir_world = data.cam_xmat[cam_id].reshape(3, 3) @ (dir_cv * np.array([1.0, -1.0, -1.0]))
    geom, normal = np.zeros(1, np.int32), np.zeros(3)
    start, travelled = data.cam_xpos[cam_id].copy(), 0.0
    for _ in range(8):
        dist = mujoco.mj_ray(model, data, start, dir_world, GEOMGROUPS, 1, -1, geom, normal)
        if dist < 0:
            return 0.0
        travelled += dist
        if normal @ dir_world < 0:  # a front face
            return travelled * dir_cv[2]
        start = start + (dist + 1e-6) * dir_world
        travelled += 1e-6
    raise AssertionError("ray kept exiting geoms")


def sampled_ray(cm, row: int, col: int) -> np.ndarray:
    """The ray (OpenCV frame) of the source pixel whose depth output pixel (row, col) carries (nearest)."""
    k = cm.source_intrinsic_matrix()
    u = np.floor(cm.map_x[row, col] + 0.5)
    v = np.floor(cm.map_y[row, col] + 0.5)
    return np.array([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], 1.0])


@pytest.fixture(scope="module")
def gl64(model):
    with make_renderer("mujoco_gl", model, CELL, CAMERAS, 64, 64) as renderer:
        yield renderer


# ----------------------------------------------------------------------------------------------------------------
# MuJoCo GL
# ----------------------------------------------------------------------------------------------------------------
def test_gl_shapes_and_dtypes_for_all_cameras_and_worlds(model, gl64):
    physics = home_physics(model, 2)
    place(model, physics, "obj_cube", CUBE_IN_VIEW, world=1)  # worlds must not share images
    images = gl64.render(physics)
    assert set(images) == set(CAMERAS)
    for name in CAMERAS:
        rgb, depth = images[name]["rgb"], images[name]["depth"]
        assert rgb.shape == (2, 64, 64, 3) and rgb.dtype == np.uint8
        assert depth.shape == (2, 64, 64) and depth.dtype == np.float32
        assert np.isfinite(depth).all() and (depth >= 0).all()
        assert rgb.std() > 5 and (depth > 0).mean() > 0.3, name  # a real scene, not a blank frame
    for name in ("head_left", "head_right"):  # the cube is only 2-3 pixels wide at this size
        assert np.abs(images[name]["rgb"][0].astype(int) - images[name]["rgb"][1]).max() > 40, name


def test_gl_centre_depth_matches_mj_ray_along_the_optical_axis(model, gl64):
    physics = home_physics(model, 2)
    data = physics.host_data(0)
    images = gl64.render(physics)
    for name in ("head_left", "head_right"):
        cm, cam_id = gl64.camera_models[name], gl64.camera_ids[name]
        k = cm.intrinsic_matrix()
        row, col = int(round(k[1, 2])), int(round(k[0, 2]))  # the output pixel on the optical axis
        got = float(images[name]["depth"][0, row, col])
        axis = ray_depth(model, data, cam_id, [0.0, 0.0, 1.0])
        assert axis > 0.5
        # The depth comes from the nearest source pixel, up to half a source pixel (~0.6 degrees) off the axis,
        # which moves the depth on the obliquely seen belt by about 1 cm; the depth buffer itself is sub-mm.
        assert got == pytest.approx(axis, abs=0.02), name
        assert got == pytest.approx(ray_depth(model, data, cam_id, sampled_ray(cm, row, col)), abs=0.005), name


def depth_errors_against_mj_ray(model, renderer, name: str, step: int = 6) -> np.ndarray:
    """|rendered depth - mj_ray depth| on a grid of output pixels, along the source ray each was resampled from."""
    physics = home_physics(model, 1)
    data = physics.host_data(0)
    depth = renderer.render(physics)[name]["depth"][0]
    cm, cam_id = renderer.camera_models[name], renderer.camera_ids[name]
    errors = []
    for row in range(2, depth.shape[0], step):
        for col in range(2, depth.shape[1], step):
            if cm.valid_mask[row, col]:
                errors.append(abs(depth[row, col] - ray_depth(model, data, cam_id, sampled_ray(cm, row, col))))
    return np.array(errors)


@pytest.mark.parametrize("name", CAMERAS)
def test_gl_depth_matches_mj_ray_across_the_image(model, gl64, name):
    # Checks the field of view, the image orientation and (on the wrist fisheyes) the lens warp together:
    # every output pixel's depth must be the mj_ray distance along the source ray it was resampled from.
    errors = depth_errors_against_mj_ray(model, gl64, name)
    assert len(errors) > 50
    # Pixel-centre sampling is the same in both; only silhouette pixels (rasterisation rules) may differ.
    assert np.median(errors) < 0.002 and (errors < 0.01).mean() > 0.9, (np.median(errors), (errors < 0.01).mean())


def test_gl_depth_matches_mj_ray_in_a_wide_image(model):
    # Width != height: the horizontal field of view must follow from the vertical one and the aspect ratio.
    with make_renderer("mujoco_gl", model, CELL, ["head_left", "right_wrist"], 96, 48) as renderer:
        for name in renderer.cameras:
            errors = depth_errors_against_mj_ray(model, renderer, name, step=5)
            assert np.median(errors) < 0.002 and (errors < 0.01).mean() > 0.9, name


def test_gl_moving_a_coloured_object_into_view_changes_the_pixels_there(model):
    m = copy.copy(model)  # recoloured privately: the renderer reads colours from the model it was given
    m.geom("obj_cube").rgba = (0.9, 0.1, 0.1, 1.0)
    physics = home_physics(m, 1)
    with make_renderer("mujoco_gl", m, CELL, ["head_left"], 128, 128) as renderer:
        cm, cam_id = renderer.camera_models["head_left"], renderer.camera_ids["head_left"]
        before = renderer.render(physics)["head_left"]["rgb"][0]
        top = np.array([0.05, 0.0, CELL.belt.center[2] + 0.05 + 0.001])  # top face centre of the cube on the belt
        place(m, physics, "obj_cube", top - [0, 0, 0.025])
        images = renderer.render(physics)["head_left"]
        u, v = cm.project(world_to_cv(physics.host_data(0), cam_id, top))[0]
        patch = images["rgb"][0, int(round(v)) - 1:int(round(v)) + 2, int(round(u)) - 1:int(round(u)) + 2]
        colour = np.median(patch.reshape(-1, 3), axis=0)
        old = np.median(before[int(round(v)) - 1:int(round(v)) + 2, int(round(u)) - 1:int(round(u)) + 2]
                        .reshape(-1, 3), axis=0)
        # Lit red: red well above green and blue, and clearly brighter than the dark belt it covers.
        assert colour[0] > 100 and colour[0] > 2.5 * colour[1] and colour[0] > 2.5 * colour[2], colour
        assert np.abs(colour - old).max() > 60, (colour, old)
        # The cube's top face is also where the depth says it is.
        expected = world_to_cv(physics.host_data(0), cam_id, top)[0, 2]
        assert images["depth"][0, int(round(v)), int(round(u))] == pytest.approx(expected, abs=0.02)


def test_physics_state_and_model_are_untouched_by_rendering(model, gl64):
    physics = home_physics(model, 1)
    qpos, fovy, rgba = physics.qpos().copy(), model.cam_fovy.copy(), model.geom_rgba.copy()
    hidden = gl64._outside_view(physics.host_data(0), "right_wrist", gl64._geom_bounds())
    assert gl64.culling and hidden.any()  # geoms were hidden
    gl64.render(physics)
    np.testing.assert_array_equal(physics.qpos(), qpos)
    np.testing.assert_array_equal(model.cam_fovy, fovy)
    np.testing.assert_array_equal(model.geom_rgba, rgba)


def test_gl_culling_leaves_every_image_as_it_was(model, gl64):
    """Random arm and hand postures (joint values drawn within their limits, objects where they spawn): each
    camera's image with the geoms outside its view left out equals the image with every geom drawn, to the bit."""
    rng = np.random.default_rng(7)
    physics = home_physics(model, 3)
    hinges = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE and model.jnt_limited[j]]
    qpos = np.stack([physics.host_data(w).qpos.copy() for w in range(3)])
    for j in hinges:
        qpos[:, model.jnt_qposadr[j]] = rng.uniform(*model.jnt_range[j], size=3)
    physics.reset(qpos, np.zeros((3, model.nv)), model.key("home").ctrl)
    bounds = gl64._geom_bounds()
    hidden = [gl64._outside_view(physics.host_data(w), name, bounds).mean() for w in range(3) for name in CAMERAS]
    assert max(hidden) > 0.2  # the comparison below covers real culling, not only scenes with nothing left out
    culled = gl64.render(physics)
    gl64.culling = False
    try:
        full = gl64.render(physics)
    finally:
        gl64.culling = True
    for name in CAMERAS:
        np.testing.assert_array_equal(culled[name]["rgb"], full[name]["rgb"], err_msg=name)
        np.testing.assert_array_equal(culled[name]["depth"], full[name]["depth"], err_msg=name)


def test_gl_culling_keeps_a_geom_resized_after_compile(model):
    """A geom enlarged through `geom_size` (the compiled `geom_rbound` is not updated) reaching into the view from
    outside it is drawn as without culling."""
    resized = copy.copy(model)
    physics = home_physics(resized, 1)
    data = physics.host_data(0)
    with make_renderer("mujoco_gl", resized, CELL, ["head_left"], 64, 64) as gl:
        cam = gl.camera_ids["head_left"]
        right = gl._side_normals["head_left"][1]  # the right side plane's inward normal: (-1, 0, -tan) normalised
        beside = np.array([0.6 * right[2] / right[0] + 0.15, 0.0, -0.6])  # 15 cm right of the view, 60 cm ahead
        place(resized, physics, "obj_cube", data.cam_xpos[cam] + data.cam_xmat[cam].reshape(3, 3) @ beside)
        data = physics.host_data(0)
        g = resized.geom("obj_cube").id
        small = gl.render(physics)["head_left"]["rgb"]
        resized.geom_size[g] = 0.2  # a 40 cm box: reaches 5 cm into the view
        offset = (data.geom_xpos[g] - data.cam_xpos[cam]) @ data.cam_xmat[cam].reshape(3, 3)
        assert offset @ right < -resized.geom_rbound[g]  # by the stale bound, wholly outside the view
        culled = gl.render(physics)["head_left"]["rgb"]
        gl.culling = False
        full = gl.render(physics)["head_left"]["rgb"]
    np.testing.assert_array_equal(culled, full)
    assert (np.abs(full.astype(int) - small).max(axis=-1) > 30).mean() > 0.01  # the box shows at the edge


def test_gl_culling_is_off_where_hidden_geoms_could_show(model):
    with make_renderer("mujoco_gl", model, CELL, ["head_left"], 32, 32, shadows=True) as renderer:
        assert not renderer.culling  # they cast shadows into the view
    spec = build_spec(CELL)
    spec.add_material(name="mirror", reflectance=0.5)
    floor = next(g for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_PLANE)
    floor.material = "mirror"
    with make_renderer("mujoco_gl", spec.compile(), CELL, ["head_left"], 32, 32) as renderer:
        assert not renderer.culling  # they show in its reflection
    with make_renderer("mujoco_gl", model, CELL, ["head_left"], 32, 32) as renderer:
        assert renderer.culling


def test_shadows_and_multisampling_change_the_image(model):
    physics = home_physics(model, 1)
    plain = make_renderer("mujoco_gl", model, CELL, ["head_left"], 64, 64)
    shadows = make_renderer("mujoco_gl", model, CELL, ["head_left"], 64, 64, shadows=True)
    msaa = make_renderer("mujoco_gl", model, CELL, ["head_left"], 64, 64, multisample=True)
    try:
        a, b, c = (r.render(physics)["head_left"] for r in (plain, shadows, msaa))
    finally:
        for r in (plain, shadows, msaa):
            r.close()
    # Shadows only darken; anti-aliasing only touches edges, so most pixels keep their value.
    diff = b["rgb"].astype(int) - a["rgb"].astype(int)
    assert (diff < -10).mean() > 0.01 and (diff > 10).mean() < 0.005
    assert (c["rgb"] != a["rgb"]).any() and np.median(np.abs(c["rgb"].astype(int) - a["rgb"])) <= 2
    np.testing.assert_allclose(b["depth"], a["depth"], atol=1e-4)


@pytest.mark.parametrize("backend", RENDERERS)
def test_a_colour_only_renderer_draws_the_same_colours_and_no_depth(model, backend):
    if backend == "mujoco_warp":
        pytest.importorskip("mujoco_warp")
    physics = home_physics(model, 2)
    place(model, physics, "obj_cube", CUBE_IN_VIEW, world=1)
    cameras = ["head_left", "right_wrist"]  # a pinhole and a fisheye lens
    with make_renderer(backend, model, CELL, cameras, 64, 48) as full, \
            make_renderer(backend, model, CELL, cameras, 64, 48, depth=False) as colour:
        a, b = full.render(physics), colour.render(physics)
    for name in cameras:
        assert set(a[name]) == {"rgb", "depth"} and set(b[name]) == {"rgb"}
        np.testing.assert_array_equal(b[name]["rgb"], a[name]["rgb"])
    assert not np.array_equal(b["head_left"]["rgb"][0], b["head_left"]["rgb"][1])  # the cube shows in world 1


# ----------------------------------------------------------------------------------------------------------------
# Configuration errors
# ----------------------------------------------------------------------------------------------------------------
def test_unknown_camera_is_a_config_error(model):
    with pytest.raises(ConfigError, match=r"cameras.*'nose'.*head_left"):
        make_renderer("mujoco_gl", model, CELL, ["nose"], 64, 64)


@pytest.mark.parametrize("size", [(0, 64), (64, 0), (4096, 64), (64.0, 64)])
def test_bad_resolution_is_a_config_error(model, size):
    with pytest.raises(ConfigError, match=r"resolution.*2048"):
        make_renderer("mujoco_gl", model, CELL, ["head_left"], *size)


def test_unknown_renderer_is_a_config_error(model):
    with pytest.raises(ConfigError, match=r"renderer.*'povray'.*mujoco_gl.*mujoco_warp"):
        make_renderer("povray", model, CELL, ["head_left"], 64, 64)
    assert RENDERERS == ("mujoco_gl", "mujoco_warp")


# ----------------------------------------------------------------------------------------------------------------
# MuJoCo Warp against MuJoCo GL
# ----------------------------------------------------------------------------------------------------------------
# Both renderers draw the same pinhole source with the same pixel-centre rays, so depth agrees to float
# precision except on silhouette pixels, where the rasteriser's coverage rule and the ray through the pixel centre
# can pick different surfaces (a few percent of pixels). Colours differ more: OpenGL's fixed-function lighting
# (per-vertex-ish spot falloff, its own specular) against Warp's per-ray Phong-style shading, so mean colours of
# a uniform region are compared within 12 of 255 levels (~5 %), while the measured difference is ~1-3 levels.
DEPTH_MEDIAN_TOL = 0.01
HIT_AGREEMENT = 0.95
COLOUR_TOL = 12


def floor_mask(cm, depth: np.ndarray, data: mujoco.MjData, cam_id: int) -> np.ndarray:
    """Pixels of a pinhole output image whose depth puts them on the floor plane (z = 0)."""
    k = cm.intrinsic_matrix()
    v, u = np.mgrid[0:depth.shape[0], 0:depth.shape[1]]
    cv = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(depth)], -1) * depth[..., None]
    world = (cv * np.array([1.0, -1.0, -1.0])) @ data.cam_xmat[cam_id].reshape(3, 3).T + data.cam_xpos[cam_id]
    return (depth > 0) & (np.abs(world[..., 2]) < 0.003)


@pytest.fixture(scope="module")
def warp64(model):
    pytest.importorskip("mujoco_warp")
    with make_renderer("mujoco_warp", model, CELL, CAMERAS, 64, 64) as renderer:
        yield renderer


@pytest.mark.warp
def test_warp_agrees_with_gl(model, gl64, warp64):
    physics = home_physics(model, 2)
    place(model, physics, "obj_cube", CUBE_IN_VIEW, world=1)
    gl, wp_ = gl64.render(physics), warp64.render(physics)
    for name in CAMERAS:
        a, b = gl[name], wp_[name]
        assert b["rgb"].shape == a["rgb"].shape and b["rgb"].dtype == np.uint8
        assert b["depth"].shape == a["depth"].shape and b["depth"].dtype == np.float32
        hit_a, hit_b = a["depth"] > 0, b["depth"] > 0
        assert (hit_a == hit_b).mean() > HIT_AGREEMENT, name
        both = hit_a & hit_b
        assert np.median(np.abs(a["depth"] - b["depth"])[both]) < DEPTH_MEDIAN_TOL, name
        assert (np.abs(a["depth"] - b["depth"])[both] < 0.02).mean() > HIT_AGREEMENT, name
    data = physics.host_data(0)
    for name in ("head_left", "head_right"):
        cm, cam_id = gl64.camera_models[name], gl64.camera_ids[name]
        mask = floor_mask(cm, gl[name]["depth"][0], data, cam_id) & floor_mask(cm, wp_[name]["depth"][0], data, cam_id)
        assert mask.sum() > 300, name  # a large uniform region
        mean_a = gl[name]["rgb"][0][mask].mean(0)
        mean_b = wp_[name]["rgb"][0][mask].mean(0)
        assert np.abs(mean_a - mean_b).max() < COLOUR_TOL, (name, mean_a, mean_b)


@pytest.mark.warp
def test_warp_renders_from_warp_physics_like_from_c_physics(model, warp64):
    pytest.importorskip("r2s2r.physics.mujoco_warp")
    c_physics = home_physics(model, 2)
    w_physics = home_physics(model, 2, "mujoco_warp")
    for physics in (c_physics, w_physics):
        place(model, physics, "obj_cube", CUBE_IN_VIEW, world=1)
    a, b = warp64.render(c_physics), warp64.render(w_physics)
    for name in CAMERAS:
        # The Warp physics computes poses in float32, so silhouettes may shift by a pixel here and there.
        diff = np.abs(a[name]["depth"] - b[name]["depth"])
        assert np.median(diff) < 1e-3 and (diff < 0.01).mean() > 0.98, name
        assert (np.abs(a[name]["rgb"].astype(int) - b[name]["rgb"]) <= 3).mean() > 0.97, name


@pytest.mark.warp
def test_warp_shadows_match_gl_shadows(model):
    pytest.importorskip("mujoco_warp")
    physics = home_physics(model, 1)
    gl = make_renderer("mujoco_gl", model, CELL, ["head_left"], 64, 64, shadows=True)
    plain = make_renderer("mujoco_warp", model, CELL, ["head_left"], 64, 64)
    shadows = make_renderer("mujoco_warp", model, CELL, ["head_left"], 64, 64, shadows=True)
    try:
        a, b0, b = (r.render(physics)["head_left"]["rgb"].astype(int) for r in (gl, plain, shadows))
    finally:
        for r in (gl, plain, shadows):
            r.close()
    assert ((b - b0) < -10).mean() > 0.01  # shadows fall somewhere
    # Shadow map (GL) against shadow rays (Warp): edges differ by a pixel, the shaded areas agree.
    assert np.abs(a - b).mean() < 8  # levels of 255; measured ~2.6
