"""End to end: a session recorded from the twin grounds a world closer to the truth than the hand-written one.

The recorder and the whole estimator chain run on sampled truth 0 at the recorder's defaults (built once per test
run in grounding_runs.py and shared with the tolerance test of both sampled truths); these tests check the study's
recovery targets on the written world file, its provenance and self-checks, the mismatch report's parameter axes,
and that a corrupted recording stops grounding with a message that names it.
"""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from r2s2r.calibration import CalibrationError
from r2s2r.calibration.pipeline import ground
from r2s2r.calibration.report import parameter_errors
from r2s2r.calibration.rig import ENCODER_RESOLUTION
from r2s2r.cell.world import load_world

from grounding_runs import grounded_truth

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def grounded(tmp_path_factory):
    """Sampled truth 0 grounded (shared with the tolerance test)."""
    run = grounded_truth(tmp_path_factory, 0)
    assert run.stopped is None, run.stopped
    return run.truth, load_world(run.grounded), run.session


def test_recovers_the_study_targets(grounded):
    truth, world, _ = grounded
    t, g = truth.cell, world.cell
    residuals = world.data["provenance"]["residuals"]
    for cam_t, cam_g in zip(t.cameras, g.cameras):
        assert residuals[f"camera.{cam_t.name}"]["reprojection_rms_px"] < 0.5
        assert cam_g.lens.fx == pytest.approx(cam_t.lens.fx, rel=0.01), cam_t.name
        assert cam_g.lens.fy == pytest.approx(cam_t.lens.fy, rel=0.01), cam_t.name
    arm_t, arm_g = t.arm("right"), g.arm("right")
    assert np.linalg.norm(np.subtract(arm_g.base.pos, arm_t.base.pos)) < 0.003
    assert np.linalg.norm(np.subtract(g.belt.center, t.belt.center)) < 0.003
    assert np.allclose(arm_g.kp, arm_t.kp, rtol=0.10)
    assert arm_g.latency_steps == arm_t.latency_steps
    assert g.belt.speed_scale == pytest.approx(t.belt.speed_scale, rel=0.02)


def test_grounded_is_closer_than_ungrounded_on_every_parameter_axis(grounded):
    truth, world, _ = grounded
    grounded_err = parameter_errors(world.cell, truth.cell)
    ungrounded_err = parameter_errors(load_world("ungrounded").cell, truth.cell)
    worse = {axis: (grounded_err[axis], ungrounded_err[axis]) for axis in ungrounded_err
             if not grounded_err[axis] < ungrounded_err[axis]}
    assert not worse, worse


def test_grounded_file_records_its_session(grounded):
    import hashlib

    _, world, session = grounded
    assert world.kind == "grounded"
    assert world.data["provenance"]["session_sha256"] == hashlib.sha256(session.read_bytes()).hexdigest()
    assert yaml.safe_load(world.path.read_text())["name"] == "grounded"


def test_every_self_check_is_recorded_within_its_bound(grounded):
    _, world, _ = grounded
    checks = world.data["provenance"]["residuals"]["self_checks"]
    cameras = {f"camera {cam.name} intrinsics" for cam in world.cell.cameras}
    assert set(checks) == {"registration of the robot base", "registration of the conveyor", "link-offset fit",
                           "drive fit", "belt speed fit", "mass readings"} | cameras
    for name, check in checks.items():
        assert 0 < check["residual"] <= check["bound"], (name, check)


def _corrupted(session: Path, tmp_path: Path, dataset: str, change) -> Path:
    """A copy of the session with one dataset changed."""
    import h5py

    path = tmp_path / "corrupted.h5"
    shutil.copy(session, path)
    with h5py.File(path, "r+") as f:
        f[dataset][...] = change(f[dataset][()])
    return path


def _moved_fiducial(points):
    points[4] += (0.01, 0.0, 0.0)  # the tracker's target seated 1 cm off the fiducial
    return points


def _noisy_encoders(log):
    return log + np.random.default_rng(0).normal(0, 20 * ENCODER_RESOLUTION, log.shape)


# The geometry and dynamics estimators run before the cameras: these cases stop before the cameras' minutes.
@pytest.mark.parametrize("dataset, change, estimator, unit", [
    ("survey/robot_base", _moved_fiducial, "registration of the robot base", "m"),
    ("actuators/log", _noisy_encoders, "drive fit", "rad")])
def test_a_recording_its_fit_cannot_explain_stops_grounding(grounded, tmp_path, dataset, change, estimator, unit):
    _, _, session = grounded
    corrupted = _corrupted(session, tmp_path, dataset, change)
    with pytest.raises(CalibrationError) as info:
        ground(corrupted, load_world("ungrounded"))
    message = str(info.value)
    print(message)
    assert message.startswith(f"{corrupted}: ")
    number = r"([0-9.e+-]+)"
    found = re.search(rf"{estimator}: residual {number} {unit} is above its bound {number} {unit}", message)
    assert found, message
    assert float(found[1]) > float(found[2])


def test_a_camera_with_too_few_usable_views_is_named_with_its_counts(grounded, tmp_path):
    _, _, session = grounded
    corrupted = _corrupted(session, tmp_path, "cameras/head_left/views", np.zeros_like)  # the lens cap left on
    with pytest.raises(CalibrationError) as info:
        ground(corrupted, load_world("ungrounded"))
    assert str(info.value).startswith(f"{corrupted}: cameras/head_left/views: camera 'head_left': the board was found "
                                      "in 0 of 12 images: expected at least 6 usable views"), str(info.value)


def test_calibrate_writes_under_outputs_unless_told_otherwise():
    # Adopting a result as the tracked configs/world/grounded.yaml is an explicit copy (README), never a default.
    assert calibrate.parse_args([]).output == "outputs/calibration/grounded.yaml"
    assert calibrate.parse_args(["--output", "configs/world/grounded.yaml"]).output == "configs/world/grounded.yaml"


def test_bad_sessions_fail_clearly_and_leave_no_output(tmp_path):
    import h5py

    session = tmp_path / "empty.h5"
    with h5py.File(session, "w") as f:
        f.attrs["board_squares"] = (9, 7)
    output = tmp_path / "grounded.yaml"
    assert calibrate.main(["--session", str(session), "--output", str(output)]) == 2
    assert not output.exists() and not list(tmp_path.glob("*.partial*"))
    assert calibrate.main(["--session", str(tmp_path / "missing.h5"), "--output", str(output)]) == 2


def test_mismatch_report_finds_the_grounded_world_closer_on_every_axis(grounded, tmp_path):
    import json

    import world_report

    truth, world, _ = grounded
    out = tmp_path / "report"
    assert world_report.main(["--grounded", str(world.path), "--reality-file", str(truth.path), "--episodes", "2",
                              "--image-size", "96", "--output-dir", str(out)]) == 0
    table = json.loads((out / "report.json").read_text())["table"]
    axes = {row["axis"] for row in table}
    assert {"replay: end effector", "replay: object", "image: head_left", "latency"} <= axes
    assert all(row["grounded_closer"] for row in table), [r for r in table if not r["grounded_closer"]]
    assert (out / "replay.png").stat().st_size > 10_000 and (out / "params.png").stat().st_size > 10_000
