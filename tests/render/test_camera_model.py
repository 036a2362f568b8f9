"""The image-space camera model against OpenCV's lens models and against images with known geometry."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

try:
    import r2s2r  # noqa: F401
except ImportError:  # not installed into the venv: import from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "source" / "r2s2r"))

from r2s2r.cell.spec import (FISHEYE, LensCfg, fisheye_angle, fisheye_slope, focal_from_fov,  # noqa: E402
                              fov_from_focal, intrinsics_in_pixels, normalised_intrinsics)
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.render.camera_model import MAX_RAY_ANGLE_DEG, CameraModel  # noqa: E402

W, H = 160, 120  # not square, so width and height cannot be swapped unnoticed
FISHEYE_LENS = LensCfg(model="fisheye", fx=0.42, fy=0.5, cx=0.47, cy=0.53, distortion=(0.03, -0.01, 0.004, -0.001))
PINHOLE_LENS = LensCfg(model="pinhole", fx=0.8, fy=0.95, cx=0.45, cy=0.56)
LENSES = {"fisheye": FISHEYE_LENS, "pinhole": PINHOLE_LENS}


def random_points(rng: np.random.Generator, n: int, max_angle_deg: float) -> np.ndarray:
    theta = np.radians(rng.uniform(0.0, max_angle_deg, n))
    phi = rng.uniform(0.0, 2 * np.pi, n)
    dirs = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], axis=1)
    return dirs * rng.uniform(0.2, 5.0, (n, 1))


def source_frame(cm: CameraModel, value: int | np.ndarray = 128) -> tuple[np.ndarray, np.ndarray]:
    rgb = np.empty((cm.render_height, cm.render_width, 3), np.uint8)
    rgb[:] = value
    return rgb, np.ones((cm.render_height, cm.render_width), np.float32)


# ----------------------------------------------------------------------------------------------------------------
# Geometry
# ----------------------------------------------------------------------------------------------------------------
def test_intrinsics_are_normalised_by_width_and_height():
    cm = CameraModel(FISHEYE_LENS, W, H)
    k = cm.intrinsic_matrix()
    np.testing.assert_allclose(k, [[0.42 * W, 0, 0.47 * W], [0, 0.5 * H, 0.53 * H], [0, 0, 1]])
    np.testing.assert_array_equal(cm.distortion_coeffs(), FISHEYE_LENS.distortion)
    np.testing.assert_array_equal(CameraModel(PINHOLE_LENS, W, H).distortion_coeffs(), np.zeros(4))


@pytest.mark.parametrize("lens", [FISHEYE_LENS, PINHOLE_LENS])
def test_pixel_intrinsics_round_trip(lens):
    pixels = intrinsics_in_pixels(lens.fx, lens.fy, lens.cx, lens.cy, W, H)
    k = CameraModel(lens, W, H).intrinsic_matrix()
    assert pixels == (k[0, 0], k[1, 1], k[0, 2], k[1, 2])
    assert normalised_intrinsics(*pixels, W, H) == pytest.approx((lens.fx, lens.fy, lens.cx, lens.cy), rel=1e-15)


@pytest.mark.parametrize("fov", [5.0, 45.0, 90.0, 150.0, 179.0])
def test_field_of_view_round_trips(fov):
    assert fov_from_focal(focal_from_fov(fov)) == pytest.approx(fov, rel=1e-12)
    assert focal_from_fov(fov_from_focal(1 / fov)) == pytest.approx(1 / fov, rel=1e-12)
    assert focal_from_fov(90.0) == pytest.approx(0.5)  # tan(45 degrees) = 1: the image side is twice the focal length


def test_fisheye_slope_is_the_derivative_of_the_angle():
    theta, eps, k = np.linspace(0.0, 1.4, 57), 1e-6, FISHEYE_LENS.distortion
    numeric = (fisheye_angle(theta + eps, k) - fisheye_angle(theta - eps, k)) / (2 * eps)
    np.testing.assert_allclose(fisheye_slope(theta, k), numeric, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(fisheye_angle(theta, (0.0,) * 4), theta)  # no distortion: equidistant


def test_fisheye_projection_matches_opencv():
    cm = CameraModel(FISHEYE_LENS, W, H)
    pts = random_points(np.random.default_rng(0), 500, 85.0)
    expected, _ = cv2.fisheye.projectPoints(pts.reshape(-1, 1, 3), np.zeros((3, 1)), np.zeros((3, 1)),
                                            cm.intrinsic_matrix(), cm.distortion_coeffs())
    np.testing.assert_allclose(cm.project(pts), expected.reshape(-1, 2), atol=1e-6, rtol=0)


def test_pinhole_projection_matches_opencv():
    cm = CameraModel(PINHOLE_LENS, W, H)
    pts = random_points(np.random.default_rng(1), 500, 70.0)
    expected, _ = cv2.projectPoints(pts, np.zeros(3), np.zeros(3), cm.intrinsic_matrix(), np.zeros(5))
    np.testing.assert_allclose(cm.project(pts), expected.reshape(-1, 2), atol=1e-6, rtol=0)
    assert np.isnan(cm.project(np.array([[0.1, 0.2, -1.0]]))).all()


@pytest.mark.parametrize("lens", [FISHEYE_LENS, PINHOLE_LENS, FISHEYE, LensCfg(fx=0.1, fy=0.3, cx=0.2, cy=0.9)])
def test_source_render_covers_every_rendered_pixel(lens):
    cm = CameraModel(lens, W, H)
    mx, my = cm.map_x[cm.valid_mask], cm.map_y[cm.valid_mask]
    assert mx.min() >= 0 and my.min() >= 0
    assert mx.max() <= cm.render_width - 1 and my.max() <= cm.render_height - 1
    assert 0 < cm.render_fovy_deg < 180
    # The source matrix is the one a symmetric OpenGL frustum of that fovy gives.
    f = cm.source_intrinsic_matrix()[1, 1]
    assert np.isclose(np.degrees(2 * np.arctan(cm.render_height / 2 / f)), cm.render_fovy_deg)


FOLDING = LensCfg(model="fisheye", fx=0.3, fy=0.3, distortion=(-0.3, 0.0, 0.0, 0.0))  # theta_d peaks at 60.4 deg


@pytest.mark.parametrize("lens, supersample", [(FISHEYE_LENS, 1), (FISHEYE, 1), (FOLDING, 1), (PINHOLE_LENS, 1),
                                               (FISHEYE_LENS, 2)])
def test_remap_table_inverts_project(lens, supersample):
    cm = CameraModel(lens, W, H, supersample=supersample)
    k_src = cm.source_intrinsic_matrix()
    rows, cols = np.nonzero(cm.valid_mask)
    rays = np.stack([(cm.map_x[rows, cols] - k_src[0, 2]) / k_src[0, 0],
                     (cm.map_y[rows, cols] - k_src[1, 2]) / k_src[1, 1], np.ones(rows.size)], axis=1)
    np.testing.assert_allclose(cm.project(rays), np.stack([cols, rows], axis=1), atol=1e-4, rtol=0)
    assert (cm.render_width, cm.render_height) == (W * supersample, H * supersample)


def test_folding_distortion_is_cut_at_the_fold():
    cm = CameraModel(FOLDING, W, H)
    assert np.degrees(cm.max_ray_angle) == pytest.approx(np.degrees(np.sqrt(1 / 0.9)), abs=0.1)
    assert 0.1 < cm.valid_mask.mean() < 0.9


def test_wide_fisheye_is_clipped_at_the_maximum_ray_angle():
    wide = LensCfg(model="fisheye", fx=0.30, fy=0.30, distortion=(-0.02, 0.003, 0.0, 0.0))
    cm = CameraModel(wide, 128, 128)  # about 190 degrees across the diagonal
    assert 0.2 < cm.valid_mask.mean() < 0.9
    assert cm.render_fovy_deg < 2 * (MAX_RAY_ANGLE_DEG + 3)
    pts = random_points(np.random.default_rng(2), 4000, 100.0)
    uv = cm.project(pts)
    col, row = np.round(uv[:, 0]).astype(int), np.round(uv[:, 1]).astype(int)
    on = (col >= 0) & (col < 128) & (row >= 0) & (row < 128)
    angle = np.degrees(np.arccos(pts[:, 2] / np.linalg.norm(pts, axis=1)))
    inside = cm.valid_mask[row[on], col[on]]
    assert inside[angle[on] < MAX_RAY_ANGLE_DEG - 1].all()
    assert not inside[angle[on] > MAX_RAY_ANGLE_DEG + 1].any()


@pytest.mark.parametrize("name", LENSES)
def test_rendered_dots_land_where_project_says(name):
    """Gaussian dots drawn analytically in the source render come out where `project` puts them.

    A dot of finite size is bent by the distortion, so its centroid is not the projection of its centre (up to
    ~0.5 px here). The expected centroid is therefore `project` applied to the whole dot: its points projected
    and averaged, weighted by intensity and by the output area each covers.
    """
    cm = CameraModel(LENSES[name], W, H)
    k_src = cm.source_intrinsic_matrix()
    f, cx_s, cy_s = k_src[0, 0], k_src[0, 2], k_src[1, 2]

    def source_to_output(us, vs):
        rays = np.stack([(us - cx_s) / f, (vs - cy_s) / f, np.ones_like(us)], axis=-1)
        return cm.project(rays.reshape(-1, 3)).reshape(*np.shape(us), 2)

    # Spread the dots over the output image (the map only chooses where they go; `project` is the judge).
    rows, cols = np.meshgrid(np.linspace(4, H - 5, 10).astype(int), np.linspace(4, W - 5, 12).astype(int))
    us, vs = cm.map_x[rows, cols].ravel().astype(np.float64), cm.map_y[rows, cols].ravel().astype(np.float64)
    # Dot size: at least 0.8 source px and 1 output px across, so neither image undersamples it.
    e = 1e-3
    jac = np.stack([source_to_output(us + e, vs) - source_to_output(us - e, vs),
                    source_to_output(us, vs + e) - source_to_output(us, vs - e)], axis=2) / (2 * e)
    stretch = np.linalg.svd(jac, compute_uv=False)
    sigma = np.maximum(0.8, 1.0 / stretch[:, 1])
    centre, reach, margin = source_to_output(us, vs), 4 * sigma * stretch[:, 0], 4 * sigma
    keep = ((centre[:, 0] > reach) & (centre[:, 0] < W - 1 - reach) & (centre[:, 1] > reach)
            & (centre[:, 1] < H - 1 - reach) & (us > margin) & (us < cm.render_width - 1 - margin)
            & (vs > margin) & (vs < cm.render_height - 1 - margin)
            & (np.hypot(us - cx_s, vs - cy_s) / f < np.tan(np.radians(MAX_RAY_ANGLE_DEG - 5))))
    us, vs, sigma = us[keep], vs[keep], sigma[keep]
    assert len(us) >= 20

    vv, uu = np.mgrid[0:cm.render_height, 0:cm.render_width].astype(np.float64)
    dots = np.exp(-((uu - us[:, None, None]) ** 2 + (vv - vs[:, None, None]) ** 2) / (2 * sigma[:, None, None] ** 2))
    rgb = np.repeat(np.round(250 * dots)[..., None], 3, axis=3).astype(np.uint8)
    out, _ = cm.apply(rgb, None)  # one dot per frame, so dots never overlap
    lum = out[..., 0].astype(np.float64)
    vv, uu = np.mgrid[0:H, 0:W].astype(np.float64)
    total = lum.sum(axis=(1, 2))
    measured = np.stack([(lum * uu).sum(axis=(1, 2)), (lum * vv).sum(axis=(1, 2))], axis=1) / total[:, None]

    d = np.linspace(-4, 4, 81)
    du, dv = np.meshgrid(d, d)
    for (u0, v0, s0), got in zip(zip(us, vs, sigma), measured):
        q = source_to_output(u0 + s0 * du, v0 + s0 * dv)
        step = s0 * (d[1] - d[0])
        qx, qy = np.gradient(q, step, axis=1), np.gradient(q, step, axis=0)
        weight = np.exp(-(du**2 + dv**2) / 2) * np.abs(qx[..., 0] * qy[..., 1] - qx[..., 1] * qy[..., 0])
        expected = (weight[..., None] * q).sum(axis=(0, 1)) / weight.sum()
        assert np.hypot(*(got - expected)) < 0.3, (u0, v0, got, expected)


def test_rgb_is_exact_bilinear_interpolation():
    cm = CameraModel(FISHEYE_LENS, W, H)
    rgb = np.random.default_rng(3).integers(0, 256, (cm.render_height, cm.render_width, 3), dtype=np.uint8)
    out, _ = cm.apply(rgb, None)

    mx, my = cm.map_x[cm.valid_mask].astype(np.float64), cm.map_y[cm.valid_mask].astype(np.float64)
    x0, y0 = np.floor(mx).astype(int), np.floor(my).astype(int)
    x1, y1 = np.minimum(x0 + 1, cm.render_width - 1), np.minimum(y0 + 1, cm.render_height - 1)
    ax, ay = (mx - x0)[:, None], (my - y0)[:, None]
    s = rgb.astype(np.float64)
    ref = (1 - ay) * ((1 - ax) * s[y0, x0] + ax * s[y0, x1]) + ay * ((1 - ax) * s[y1, x0] + ax * s[y1, x1])
    assert np.abs(out[cm.valid_mask] - ref).max() <= 0.51  # only the final rounding to uint8


# ----------------------------------------------------------------------------------------------------------------
# Depth
# ----------------------------------------------------------------------------------------------------------------
def test_depth_is_never_blended():
    cm = CameraModel(FISHEYE, 128, 128)
    depth = np.full((cm.render_height, cm.render_width), 1.25, np.float32)
    depth[:, 57:] = 3.5
    depth[40:47, :] = np.inf  # an infinite background must not turn into NaN
    rgb = np.full((cm.render_height, cm.render_width, 3), 255, np.uint8)
    rgb_out, out = cm.apply(rgb, depth)
    assert (rgb_out[cm.valid_mask] == 255).all() and (rgb_out[~cm.valid_mask] == 0).all()
    assert out.dtype == np.float32 and out.shape == (128, 128)
    assert set(np.unique(out[cm.valid_mask])) == {1.25, 3.5, np.inf}
    assert (out[~cm.valid_mask] == 0).all()

    rough = np.random.default_rng(4).uniform(0.3, 4.0, depth.shape).astype(np.float32)
    _, out = cm.apply(rgb, rough)
    assert np.isin(out[cm.valid_mask], rough).all()


def test_depth_keeps_the_value_under_each_ray():
    # Depth along the axis is shared by source and lens, so a flat wall stays flat at its depth.
    cm = CameraModel(PINHOLE_LENS, W, H)
    rgb, depth = source_frame(cm)
    _, out = cm.apply(rgb, depth * 2.0)
    assert (out == 2.0).all()


# ----------------------------------------------------------------------------------------------------------------
# Image formation
# ----------------------------------------------------------------------------------------------------------------
def test_exposure_scales_intensity_until_it_clips():
    cm = CameraModel(dataclasses.replace(PINHOLE_LENS, exposure=2.0), W, H)
    gradient = np.linspace(10, 200, cm.render_width).astype(np.uint8)[None, :, None]
    rgb, depth = source_frame(cm, gradient)
    base, _ = CameraModel(PINHOLE_LENS, W, H).apply(rgb, depth)
    out, _ = cm.apply(rgb, depth)
    expected = np.minimum(base.astype(np.float64) * 2.0, 255)
    assert np.abs(out - expected).max() <= 1.0
    assert abs(out.mean() - expected.mean()) < 0.5
    assert (out == 255).any() and out.mean() < 2 * base.mean() - 5  # some pixels did clip


def test_blur_removes_high_frequencies_and_keeps_the_mean():
    rng = np.random.default_rng(5)
    sharp_cm = CameraModel(PINHOLE_LENS, W, H)
    blur_cm = CameraModel(dataclasses.replace(PINHOLE_LENS, blur_sigma=1.5), W, H)
    rgb = rng.integers(0, 256, (sharp_cm.render_height, sharp_cm.render_width, 3), dtype=np.uint8)
    sharp, _ = sharp_cm.apply(rgb, None)
    soft, _ = blur_cm.apply(rgb, None)

    def high_freq(img):
        return np.mean(np.diff(img.astype(np.float64), axis=0) ** 2) + np.mean(np.diff(img.astype(np.float64), axis=1) ** 2)

    assert high_freq(soft) < 0.25 * high_freq(sharp)
    assert abs(soft.mean() - sharp.mean()) < 0.5


def test_blur_scales_with_width():
    assert CameraModel(dataclasses.replace(PINHOLE_LENS, blur_sigma=1.5), 256, 96).blur_sigma_px == pytest.approx(3.0)


def test_noise_has_the_configured_std_and_follows_the_seed():
    lens = dataclasses.replace(PINHOLE_LENS, noise_std=0.04)
    cm = CameraModel(lens, W, H)
    rgb, depth = source_frame(cm, 128)
    clean, _ = cm.apply(rgb, depth)  # no rng: no noise
    assert (clean == 128).all()
    noisy, _ = cm.apply(rgb, depth, np.random.default_rng(6))
    measured = (noisy.astype(np.float64) - clean).std() / 255
    assert abs(measured - 0.04) < 0.1 * 0.04
    again, _ = cm.apply(rgb, depth, np.random.default_rng(6))
    other, _ = cm.apply(rgb, depth, np.random.default_rng(7))
    np.testing.assert_array_equal(noisy, again)
    assert not np.array_equal(noisy, other)


def test_outside_pixels_stay_black_under_blur_noise_and_exposure():
    cm = CameraModel(dataclasses.replace(FISHEYE, blur_sigma=2.0, noise_std=0.1, exposure=3.0), 128, 128)
    rgb, depth = source_frame(cm, 200)
    out, d = cm.apply(rgb, depth, np.random.default_rng(8))
    assert (out[~cm.valid_mask] == 0).all() and (d[~cm.valid_mask] == 0).all()
    assert out[cm.valid_mask].mean() > 200


def test_batch_equals_frames_one_by_one():
    lens = dataclasses.replace(FISHEYE_LENS, blur_sigma=0.8, exposure=1.3, noise_std=0.02)
    cm = CameraModel(lens, W, H)
    rng = np.random.default_rng(9)
    rgb = rng.integers(0, 256, (3, cm.render_height, cm.render_width, 3), dtype=np.uint8)
    depth = rng.uniform(0.2, 3.0, (3, cm.render_height, cm.render_width)).astype(np.float32)
    rgb_b, depth_b = cm.apply(rgb, depth, np.random.default_rng(10))
    assert rgb_b.shape == (3, H, W, 3) and depth_b.shape == (3, H, W)
    one_by_one = np.random.default_rng(10)
    for i in range(3):
        rgb_i, depth_i = cm.apply(rgb[i], depth[i], one_by_one)
        np.testing.assert_array_equal(rgb_b[i], rgb_i)
        np.testing.assert_array_equal(depth_b[i], depth_i)


# ----------------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(0, 128), (128, -1), (5000, 128), (128.0, 128), (True, 128), ("128", 128)])
def test_bad_resolution_is_rejected(size):
    with pytest.raises(ConfigError, match="resolution"):
        CameraModel(PINHOLE_LENS, *size)


def test_bad_shapes_are_rejected():
    cm = CameraModel(PINHOLE_LENS, W, H)
    h, w = cm.render_height, cm.render_width
    rgb, depth = source_frame(cm)
    with pytest.raises(ConfigError, match=rf"rgb shape = \({h + 1}, {w}, 3\).*\({h}, {w}, 3\)"):
        cm.apply(np.zeros((h + 1, w, 3), np.uint8), depth)
    with pytest.raises(ConfigError, match="rgb"):
        cm.apply(np.zeros((h, w), np.uint8), depth)
    with pytest.raises(ConfigError, match="rgb.*uint8"):
        cm.apply(rgb.astype(np.float32), depth)
    with pytest.raises(ConfigError, match=rf"depth shape = \({h}, {w}, 1\).*\({h}, {w}\)"):
        cm.apply(rgb, depth[..., None])
    with pytest.raises(ConfigError, match=rf"depth shape = \({h}, {w}\).*\(2, {h}, {w}\)"):
        cm.apply(np.stack([rgb, rgb]), depth)
    with pytest.raises(ConfigError, match="points_cv"):
        cm.project(np.zeros((4, 2)))
