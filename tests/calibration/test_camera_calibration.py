"""Camera calibration against the reality twin: intrinsics, distortion, head extrinsics, blur, exposure and the lamps
estimated from the rig's images at 512 x 512, graded against the truth files (reality.yaml and reality_alt.yaml).

Images are rendered once per module. Three pinned cases (seed 0, fewer views than a session records): both truths'
head_left pinhole and reality.yaml's right_wrist fisheye, each held to the study's targets: focal length within
1 %, reprojection RMS below 0.5 px. The accuracy over every camera of both truths at a session's view counts (30 per
head camera, 60 per fisheye, rendered 2x and 4x supersampled) is measured by benchmarks/bench_calibration.py
(figures in docs/world_grounding.md).
"""

import dataclasses

import cv2
import numpy as np
import pytest

from r2s2r.calibration import CalibrationError
from r2s2r.calibration.report import distorted_angle
from r2s2r.calibration.camera import (
    IntrinsicsEstimate,
    calibrate_intrinsics,
    card_pixels,
    estimate_blur,
    estimate_exposure,
    estimate_extrinsics,
    estimate_lamp,
    find_corners,
)
from r2s2r.calibration.rig import CALIBRATION_BOARD
from r2s2r.cell.fiducials import BOARD_FIXTURE_POSES
from r2s2r.cell.world import load_world
from r2s2r.core import configs_dir
from r2s2r.geometry import rotation_error, rpy_to_mat
from r2s2r.real.truths import sample_truth, truth_text
from r2s2r.real.twin import TwinRig
from r2s2r.render.camera_model import CameraModel

pytestmark = pytest.mark.slow

SIZE = 512
SEED = 0
HEAD_VIEWS = 12
# Fisheye views are found less often (a hand or the board's own curvature defeats the detector in about one in four).
# With seed 0, 16 views meet the targets on reality.yaml's right wrist; a session records 60 (the benchmark's count).
FISHEYE_VIEWS = 16
BLUR_VIEWS = 20
BLUR_REFERENCES = 8  # as the grounding pipeline renders them
CASES = [("reality.yaml", "head_left"), ("reality.yaml", "right_wrist"), ("reality_alt.yaml", "head_left")]
HEADS = [c for c in CASES if c[1].startswith("head")]
WRISTS = [c for c in CASES if c[1].endswith("wrist")]
def _lens(cell, camera):
    return next(c.lens for c in cell.cameras if c.name == camera)


def _pose(cell, camera):
    return next(c.pose for c in cell.cameras if c.name == camera)


def _corner_errors(found: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Distance (px) of each found corner from its expected position. The detector may number the symmetric board
    from any of its four corners; the errors are taken in the matching order."""
    grid = expected.reshape(6, 8, 2)
    orders = (grid, grid[::-1, ::-1], grid[:, ::-1], grid[::-1, :])
    return min((np.linalg.norm(found - o.reshape(-1, 2), axis=1) for o in orders), key=np.sum)


def _twin(truth: str, rigs, tmp_path):
    """The twin and cell of a shipped truth file (from `rigs`) or of `sampled_<seed>`, written under `tmp_path`."""
    if not truth.startswith("sampled"):
        return rigs[truth]["twin"], rigs[truth]["truth"]
    path = tmp_path / "truth.yaml"
    path.write_text(truth_text(sample_truth(int(truth.split("_")[1]))))
    return TwinRig(path), load_world(path).cell


@pytest.fixture(scope="module")
def rigs():
    """Per truth file: the twin and its cell; and the ungrounded world's rig, the reference calibration renders."""
    out = {}
    for name in sorted({c[0] for c in CASES}):
        path = configs_dir() / "world" / name
        out[name] = {"twin": TwinRig(path), "truth": load_world(path).cell}
    out["ungrounded"] = TwinRig(configs_dir() / "world" / "ungrounded.yaml")
    return out


@pytest.fixture(scope="module")
def sessions(rigs):
    """Board views and fixture images per case, and the intrinsics calibrated from them."""
    out = {}
    for world, cam in CASES:
        rig = rigs[world]["twin"]
        count = HEAD_VIEWS if cam.startswith("head") else FISHEYE_VIEWS
        views = rig.board_views(cam, count, SIZE, SIZE, seed=SEED)
        model = _lens(rig.cell, cam).model
        out[(world, cam)] = {
            "views": views,
            "intrinsics": calibrate_intrinsics(views, CALIBRATION_BOARD, model, camera=cam),
            "fixture": rig.board_on_fixture(cam, SIZE, SIZE) if cam.startswith("head") else None,
        }
    return out


# -- intrinsics --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][:-5]}-{c[1]}")
def test_principal_point_within_0_01(case, rigs, sessions):
    est = sessions[case]["intrinsics"]
    truth = _lens(rigs[case[0]]["truth"], case[1])
    print(f"{case}: cx {est.cx - truth.cx:+.4f} cy {est.cy - truth.cy:+.4f}, {est.views_used} views used, "
          f"{est.views_rejected} rejected, rms {est.rms_px:.3f} px")
    assert (est.model, est.width, est.height) == (truth.model, SIZE, SIZE)
    assert abs(est.cx - truth.cx) < 0.01 and abs(est.cy - truth.cy) < 0.01
    assert est.views_used >= 10 and est.views_used + est.views_rejected == len(sessions[case]["views"])


@pytest.mark.parametrize("case", HEADS, ids=lambda c: f"{c[0][:-5]}-{c[1]}")
def test_pinhole_focal_within_1_percent_and_rms_below_half_pixel(case, rigs, sessions):
    est = sessions[case]["intrinsics"]
    truth = _lens(rigs[case[0]]["truth"], case[1])
    errors = (est.fx / truth.fx - 1, est.fy / truth.fy - 1)
    print(f"{case}: fx {errors[0]:+.2%} fy {errors[1]:+.2%}, rms {est.rms_px:.3f} px")
    assert est.rms_px < 0.5
    assert max(map(abs, errors)) < 0.01
    assert est.distortion == (0.0, 0.0, 0.0, 0.0)




def _check_fisheye(est: IntrinsicsEstimate, truth, datasheet, label: str) -> None:
    errors = (est.fx / truth.fx - 1, est.fy / truth.fy - 1)
    # The coefficients trade off against each other; the mapping they define is what must come closer.
    mapping = np.abs(distorted_angle(est.distortion) - distorted_angle(truth.distortion)).max()
    baseline = np.abs(distorted_angle(datasheet.distortion) - distorted_angle(truth.distortion)).max()
    print(f"{label}: fx {errors[0]:+.2%} fy {errors[1]:+.2%}, rms {est.rms_px:.3f} px, cx {est.cx - truth.cx:+.4f} "
          f"cy {est.cy - truth.cy:+.4f}, distortion {np.round(est.distortion, 4)}: mapping off by {mapping:.4f} rad "
          f"(datasheet {baseline:.4f})")
    assert abs(est.cx - truth.cx) < 0.01 and abs(est.cy - truth.cy) < 0.01
    assert est.rms_px < 0.5
    assert max(map(abs, errors)) < 0.01
    assert mapping < baseline


@pytest.mark.parametrize("case", WRISTS, ids=lambda c: f"{c[0][:-5]}-{c[1]}")
def test_fisheye_focal_rms_and_distortion(case, rigs, sessions):
    _check_fisheye(sessions[case]["intrinsics"], _lens(rigs[case[0]]["truth"], case[1]),
                   _lens(rigs["ungrounded"].cell, case[1]), str(case))


# -- extrinsics --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", HEADS, ids=lambda c: f"{c[0][:-5]}-{c[1]}")
def test_head_extrinsics_within_3mm_and_0_2deg_from_every_stand(case, rigs, sessions):
    """The study's tolerance, from the board on all its stands; the first stand alone misses it on reality.yaml's
    head_left (about 3.8 mm and 0.24 deg)."""
    session = sessions[case]
    truth = _pose(rigs[case[0]]["truth"], case[1])

    def error(images, stands):
        pos, rpy = estimate_extrinsics(images, CALIBRATION_BOARD, session["intrinsics"], stands)
        return (np.linalg.norm(pos - np.array(truth.pos)),
                np.degrees(np.linalg.norm(rotation_error(rpy_to_mat(rpy), rpy_to_mat(truth.rpy)))))

    dpos, drot = error(session["fixture"], BOARD_FIXTURE_POSES)
    one_pos, one_rot = error(session["fixture"][:1], BOARD_FIXTURE_POSES[:1])
    print(f"{case}: every stand {dpos * 1000:.2f} mm, {drot:.3f} deg; the first alone {one_pos * 1000:.2f} mm, "
          f"{one_rot:.3f} deg")
    assert dpos < 0.003 and drot < 0.2


def test_fixture_corners_land_on_the_true_projection(rigs, sessions):
    """The corner estimator itself, where the truth is known exactly: the board on its fixture, the true camera."""
    case = HEADS[0]
    truth = rigs[case[0]]["truth"]
    pose, lens = _pose(truth, case[1]), _lens(truth, case[1])
    stand_pos, stand_rpy = BOARD_FIXTURE_POSES[0]
    world = np.asarray(stand_pos) + CALIBRATION_BOARD.corner_points() @ rpy_to_mat(stand_rpy).T
    in_camera = (world - np.asarray(pose.pos)) @ rpy_to_mat(pose.rpy) * np.array([1.0, -1.0, -1.0])
    found = find_corners(sessions[case]["fixture"][0], CALIBRATION_BOARD)
    errors = _corner_errors(found, CameraModel(lens, SIZE, SIZE).project(in_camera))
    print(f"{case}: fixture corner error rms {np.sqrt(np.mean(errors ** 2)):.3f} px, max {errors.max():.3f} px")
    assert np.sqrt(np.mean(errors ** 2)) < 0.15 and errors.max() < 0.4


@pytest.mark.parametrize("truth, camera, found_at_least, rms_below", [
    ("reality.yaml", "right_wrist", 15, 0.2),
    # Sampled truth 0's left wrist is blurred by 1.9 px (7.6 px at 512 px) and squares span about 15-30 px: the
    # whole board is measurable in a third of the views (measured: 6 of 16 at 0.24 px).
    ("sampled_0", "left_wrist", 4, 0.35),
], ids=["reality-right_wrist", "sampled_0-blurred_left_wrist"])
def test_wrist_corners_land_on_the_true_projection(truth, camera, found_at_least, rms_below, rigs, tmp_path):
    """Board views held before a wrist fisheye, the corners found in them against the true lens's projection of the
    board's corners: the hand's shadow stays off the board (the arm in its calibration posture) and the lines are
    measured through the lens's blur."""
    twin, cell = _twin(truth, rigs, tmp_path)
    lens = _lens(cell, camera)
    poses = twin.board_poses(camera, FISHEYE_VIEWS, SEED)
    views = twin.board_views(camera, FISHEYE_VIEWS, SIZE, SIZE, seed=SEED)
    model = CameraModel(lens, SIZE, SIZE)
    errors = []
    for (offset, rotation), view in zip(poses, views):
        found = find_corners(view, CALIBRATION_BOARD)
        if found is None:
            continue
        # Board frame -> MuJoCo camera frame (the pose) -> OpenCV camera frame (y and z flipped).
        in_camera = (CALIBRATION_BOARD.corner_points() @ rotation.T + offset) * np.array([1.0, -1.0, -1.0])
        errors.append(_corner_errors(found, model.project(in_camera)))
    rms = float(np.sqrt(np.mean(np.concatenate(errors) ** 2))) if errors else float("nan")
    # Intrinsics also use the views where only part of the board is sharp enough to measure (its narrow squares
    # left out): more views than the whole-board finds above, on the blurred lens.
    est = calibrate_intrinsics(views, CALIBRATION_BOARD, lens.model, min_views=3, camera=camera)
    print(f"{truth} {camera} (blur {lens.blur_sigma:.2f}): whole board found in {len(errors)} of {FISHEYE_VIEWS} "
          f"views, corner error rms {rms:.3f} px; intrinsics from {est.views_used} views: rms {est.rms_px:.3f} px, "
          f"fx {est.fx / lens.fx - 1:+.2%}")
    assert len(errors) >= found_at_least and rms < rms_below
    assert est.views_used >= len(errors) and est.rms_px < 0.5


# -- blur and exposure -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][:-5]}-{c[1]}")
def test_blur_within_25_percent(case, rigs, sessions):
    references = rigs["ungrounded"].board_views(case[1], BLUR_REFERENCES, SIZE, SIZE, seed=SEED)
    blur = estimate_blur(sessions[case]["views"][:BLUR_VIEWS], CALIBRATION_BOARD, references)
    truth = _lens(rigs[case[0]]["truth"], case[1]).blur_sigma
    print(f"{case}: blur {blur:.3f} vs {truth:.3f}")
    assert abs(blur - truth) < max(0.25 * truth, 0.15)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][:-5]}-{c[1]}")
def test_exposure_from_the_flat_field_within_half_a_percent(case, rigs):
    """The flat-field panel against the lens, lamps off, against the same with exposure 1: the lamps' own mismatch
    (reality.yaml's key is 7 % brighter and its fill 14 % dimmer than the ungrounded world's) cannot enter."""
    cam = case[1]
    gain = estimate_exposure(rigs[case[0]]["twin"].flat_field(cam, SIZE, SIZE),
                             rigs["ungrounded"].flat_field(cam, SIZE, SIZE), camera=cam)
    truth = _lens(rigs[case[0]]["truth"], cam).exposure
    print(f"{case}: exposure {gain:.4f} vs {truth:.4f}")
    assert abs(gain / truth - 1) < 0.005


@pytest.mark.parametrize("truth", ["reality.yaml", "reality_alt.yaml", "sampled_3"])
def test_each_lamp_within_5_percent_and_its_colour_within_0_03(truth, rigs, tmp_path):
    """Both lamps of both truth files and of a sampled truth (other intensities and colours, head_left's blur at
    1 px), from the grey card lit by each lamp alone, against the ungrounded world's lamps. The session's card
    points go through the truth's camera, as calibration would have found it (its accuracy is tested above)."""
    twin, cell = _twin(truth, rigs, tmp_path)
    reference = rigs["ungrounded"]
    cam = "head_left"
    pixels = [card_pixels(_lens(c, cam), *dataclasses.astuple(_pose(c, cam)), BOARD_FIXTURE_POSES, CALIBRATION_BOARD,
                          SIZE, SIZE) for c in (cell, reference.cell)]
    exposure = estimate_exposure(twin.flat_field(cam, SIZE, SIZE), reference.flat_field(cam, SIZE, SIZE))
    dark = twin.board_on_fixture(cam, SIZE, SIZE, {}, back=True)
    for nominal in reference.cell.lights:
        lit = twin.board_on_fixture(cam, SIZE, SIZE, {nominal.name: 1.0}, back=True)
        references = [reference.board_on_fixture(cam, SIZE, SIZE, {nominal.name: level}, back=True)
                      for level in (0.0, 0.5, 1.0)]
        diffuse = (estimate_lamp(lit, dark, references, *pixels, exposure, camera=cam)
                   * np.array(nominal.colour) * nominal.intensity)
        true = next(light for light in cell.lights if light.name == nominal.name)
        print(f"{truth} {nominal.name}: intensity {diffuse.max():.4f} vs {true.intensity:.4f}, colour "
              f"{np.round(diffuse / diffuse.max(), 3)} vs {true.colour}")
        assert abs(diffuse.max() / true.intensity - 1) < 0.05
        np.testing.assert_allclose(diffuse / diffuse.max(), true.colour, atol=0.03)


# -- corners -----------------------------------------------------------------------------------------------------
def test_corners_are_row_major_from_the_top_left(sessions):
    views = sessions[HEADS[0]]["views"]
    corners = next(c for c in (find_corners(v, CALIBRATION_BOARD) for v in views) if c is not None)
    cols, rows = CALIBRATION_BOARD.inner_corners
    assert corners.shape == (cols * rows, 2) and corners.dtype == np.float64
    grid = corners.reshape(rows, cols, 2)
    ends = np.array([grid[0, 0], grid[0, -1], grid[-1, 0], grid[-1, -1]])
    assert np.argmin(ends.sum(axis=1)) == 0
    # Neighbours along a row are one square apart, and rows follow each other: the order is a grid, not a shuffle.
    steps = np.linalg.norm(np.diff(grid, axis=1), axis=-1)
    assert steps.max() < 1.5 * np.median(steps)
    assert find_corners(np.full((SIZE, SIZE, 3), 128, np.uint8), CALIBRATION_BOARD) is None


# -- bad input ---------------------------------------------------------------------------------------------------
def test_too_few_views_name_the_counts(sessions):
    views = sessions[HEADS[0]]["views"][:3]
    with pytest.raises(CalibrationError, match=r"camera 'head_left'.*found in \d of 3 images.*at least 6"):
        calibrate_intrinsics(views, CALIBRATION_BOARD, "pinhole", camera="head_left")
    blank = [np.zeros((SIZE, SIZE, 3), np.uint8)] * 8
    with pytest.raises(CalibrationError, match=r"found in 0 of 8 images.*at least 6") as info:
        calibrate_intrinsics(blank, CALIBRATION_BOARD, "fisheye")
    assert "camera" not in str(info.value)


def test_bad_model_and_shapes_are_rejected(sessions):
    views = sessions[HEADS[0]]["views"]
    with pytest.raises(CalibrationError, match="model = 'kannala'"):
        calibrate_intrinsics(views, CALIBRATION_BOARD, "kannala")
    with pytest.raises(CalibrationError, match=r"image 1 has shape \(256, 256, 3\)"):
        calibrate_intrinsics([views[0], cv2.resize(views[1], (256, 256))], CALIBRATION_BOARD, "pinhole")
    intrinsics = sessions[HEADS[0]]["intrinsics"]
    with pytest.raises(CalibrationError, match=r"\(256, 256, 3\).*expected \(512, 512\)"):
        estimate_extrinsics([cv2.resize(views[0], (256, 256))], CALIBRATION_BOARD, intrinsics, BOARD_FIXTURE_POSES[:1])
    with pytest.raises(CalibrationError, match=f"1 fixture images for {len(BOARD_FIXTURE_POSES)} stands"):
        estimate_extrinsics(views[:1], CALIBRATION_BOARD, intrinsics, BOARD_FIXTURE_POSES)
    with pytest.raises(CalibrationError, match="shape"):
        estimate_exposure(views[0], cv2.resize(views[0], (256, 256)))


def test_board_missing_from_fixture_or_references_is_an_error(sessions):
    session = sessions[HEADS[0]]
    blank = np.full((SIZE, SIZE, 3), 128, np.uint8)
    with pytest.raises(CalibrationError, match="camera 'head_left': the board was not found in any of the 2 fixture"):
        estimate_extrinsics([blank, blank], CALIBRATION_BOARD, session["intrinsics"], BOARD_FIXTURE_POSES[:2],
                            camera="head_left")
    with pytest.raises(CalibrationError, match="camera 'head_left': the flat-field reference shows the panel in 0.0 %"):
        estimate_exposure(blank, np.zeros_like(blank), camera="head_left")
    with pytest.raises(CalibrationError, match="no stand shows the card lit by the lamp"):
        pixels = np.full((2, 5, 2), 100.0)
        estimate_lamp([blank] * 2, [blank] * 2, [[blank] * 2] * 3, pixels, pixels, 1.0)
    with pytest.raises(CalibrationError, match=r"0 of 2 references"):
        estimate_blur(session["views"][:2], CALIBRATION_BOARD, [blank, blank])


def test_intrinsics_estimate_matches_lens_normalisation():
    est = IntrinsicsEstimate("pinhole", 0.8, 0.9, 0.45, 0.55, (0.0,) * 4, 0.1, 10, 0, 640, 480)
    lens = dataclasses.replace(_lens(load_world(configs_dir() / "world" / "ungrounded.yaml").cell, "head_left"),
                               fx=est.fx, fy=est.fy, cx=est.cx, cy=est.cy)
    np.testing.assert_allclose(est.camera_matrix(), CameraModel(lens, 640, 480).intrinsic_matrix())
