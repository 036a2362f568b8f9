"""Malformed calibration sessions, generated from one small session in the layout scripts/record_calibration.py
writes (built with synthetic content: the checks run before any estimator, so no recording is needed). Each is
refused by `read_session` (and so by `ground` and scripts/calibrate.py) with a `CalibrationError` naming the file,
the dataset or attr path, the value and what was expected; an estimator's failure names the file and the dataset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest

from r2s2r.calibration import CalibrationError
from r2s2r.calibration.pipeline import ground, read_session
from r2s2r.cell.fiducials import BOARD_FIXTURE_POSES
from r2s2r.cell.world import load_world

ROOT = Path(__file__).resolve().parents[2]
SIZE, VIEWS = 32, 6
STANDS = len(BOARD_FIXTURE_POSES)


@pytest.fixture(scope="module")
def start():
    return load_world("ungrounded")


@pytest.fixture(scope="module")
def valid(start, tmp_path_factory) -> Path:
    """Every group, dataset and attr `ground` reads, with the shapes and dtypes the recorder writes."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("session") / "session.h5"
    with h5py.File(path, "w") as f:
        f.attrs["board_squares"] = (9, 7)
        f.attrs["board_square_size"] = 0.02
        f.attrs["physics_hz"] = 500.0
        for k, cam in enumerate(start.cell.cameras):
            group = f.create_group(f"cameras/{cam.name}")
            group.attrs["seed"] = k
            group.create_dataset("views", data=rng.integers(0, 256, (VIEWS, SIZE, SIZE, 3), dtype=np.uint8))
            group.create_dataset("flat_field", data=rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8))
            if cam.name.startswith("head"):
                group.create_dataset("fixture", data=rng.integers(0, 256, (STANDS, SIZE, SIZE, 3), dtype=np.uint8))
        f.create_group("lamps").attrs["camera"] = "head_left"
        for name in ["dark"] + [light.name for light in start.cell.lights]:
            f.create_dataset(f"lamps/{name}", data=rng.integers(0, 256, (STANDS, SIZE, SIZE, 3), dtype=np.uint8))
        f.create_dataset("survey/robot_base", data=rng.normal(size=(4, 3)))
        f.create_dataset("survey/conveyor", data=rng.normal(size=(6, 3)))
        f.create_dataset("kinematics/q", data=rng.normal(size=(12, 7)))
        f.create_dataset("kinematics/flange", data=rng.normal(size=(12, 3)))
        f.create_dataset("actuators/targets", data=rng.normal(size=(40, 7)))
        f.create_dataset("actuators/log", data=rng.normal(size=(40, 7)))
        for k, speed in enumerate((0.08, 0.14)):
            run = f.create_group(f"belt/run_{k}")
            run.attrs["commanded_speed"] = speed
            run.create_dataset("times", data=np.arange(20) / 20)
            run.create_dataset("positions", data=rng.normal(size=(20, 3)))
        group = f.create_group("appearance/head_left")
        group.create_dataset("images", data=rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8))
        group.attrs["tracking"] = json.dumps([{"object": "cube"}, {"object": "sphere"}])
        for name in ("cube", "sphere"):
            f.create_dataset(f"masses/{name}", data=np.full(5, 0.1))
    read_session(path, start.cell)
    return path


@dataclass(frozen=True)
class Case:
    id: str
    mutate: object  # (h5py.File) -> None, or (path) -> None for byte-level damage
    expect: tuple[str, ...]
    raw: bool = False


def replace(name: str, value):
    def fn(f):
        del f[name]
        f.create_dataset(name, data=value)
    return fn


def set_attr(obj: str, key: str, value):
    return lambda f: (f[obj] if obj else f).attrs.__setitem__(key, value)


def del_attr(obj: str, key: str):
    return lambda f: (f[obj] if obj else f).attrs.__delitem__(key)


def set_value(name: str, index, value):
    def fn(f):
        array = f[name][()]
        array[index] = value
        replace(name, array)(f)
    return fn


def truncate(fraction: float):
    def mutate(path: Path):
        with open(path, "r+b") as f:
            f.truncate(int(path.stat().st_size * fraction))
    return mutate


CASES = [
    Case("truncated-half", truncate(0.5), ("cannot open the session file", "truncated"), raw=True),
    Case("truncated-end", truncate(0.98), ("cannot open the session file",), raw=True),
    Case("no-cameras-group", lambda f: f.__delitem__("cameras"), ("missing group 'cameras'",)),
    Case("no-belt-group", lambda f: f.__delitem__("belt"), ("missing group 'belt'",)),
    Case("masses-a-dataset", lambda f: (f.__delitem__("masses"), f.create_dataset("masses", data=[1.0])),
         ("'masses'", "is a dataset", "a group")),
    Case("no-board-squares", del_attr("", "board_squares"), ("attr 'board_squares' is missing",)),
    Case("board-squares-two-small", set_attr("", "board_squares", (2, 7)), ("'board_squares'", "[2, 7]", "3 to 100")),
    Case("board-squares-fraction", set_attr("", "board_squares", (9.5, 7.0)), ("'board_squares'", "9.5", "integers")),
    Case("board-squares-three", set_attr("", "board_squares", (9, 7, 5)), ("'board_squares'", "two integers")),
    Case("board-squares-text", set_attr("", "board_squares", "9x7"), ("'board_squares'", "'9x7'", "two integers")),
    Case("board-size-nan", set_attr("", "board_square_size", np.nan), ("'board_square_size'", "nan", "finite")),
    Case("board-size-negative", set_attr("", "board_square_size", -0.02), ("'board_square_size'", "-0.02")),
    Case("board-size-zero", set_attr("", "board_square_size", 0.0), ("'board_square_size'", "0.0")),
    Case("no-camera", lambda f: f["cameras"].__delitem__("head_right"), ("camera 'head_right'", "cameras/head_right")),
    Case("no-views", lambda f: f["cameras/head_left"].__delitem__("views"), ("'cameras/head_left/views'", "missing")),
    Case("views-float", replace("cameras/head_left/views", np.zeros((VIEWS, SIZE, SIZE, 3), np.float32)),
         ("'cameras/head_left/views'", "float32", "uint8")),
    Case("views-grey", replace("cameras/right_wrist/views", np.zeros((VIEWS, SIZE, SIZE), np.uint8)),
         ("'cameras/right_wrist/views'", f"({VIEWS}, {SIZE}, {SIZE})", "(N, S, S, 3)")),
    Case("views-not-square", replace("cameras/head_left/views", np.zeros((VIEWS, SIZE, 24, 3), np.uint8)),
         ("'cameras/head_left/views'", f"({VIEWS}, {SIZE}, 24, 3)", "square")),
    Case("no-seed", del_attr("cameras/head_left", "seed"), ("attr 'cameras/head_left/seed' is missing",)),
    Case("seed-negative", set_attr("cameras/head_left", "seed", -1), ("'cameras/head_left/seed'", "-1", "integer")),
    Case("fixture-size", replace("cameras/head_right/fixture", np.zeros((STANDS, 16, 16, 3), np.uint8)),
         ("'cameras/head_right/fixture'", f"({STANDS}, 16, 16, 3)", f"({STANDS}, {SIZE}, {SIZE}, 3)")),
    Case("fixture-one-stand", replace("cameras/head_right/fixture", np.zeros((SIZE, SIZE, 3), np.uint8)),
         ("'cameras/head_right/fixture'", f"({SIZE}, {SIZE}, 3)", f"({STANDS}, {SIZE}, {SIZE}, 3)")),
    Case("no-flat-field", lambda f: f["cameras/right_wrist"].__delitem__("flat_field"),
         ("'cameras/right_wrist/flat_field' is missing",)),
    Case("flat-field-stack", replace("cameras/left_wrist/flat_field", np.zeros((2, SIZE, SIZE, 3), np.uint8)),
         ("'cameras/left_wrist/flat_field'", f"(2, {SIZE}, {SIZE}, 3)", f"({SIZE}, {SIZE}, 3)")),
    Case("no-lamps", lambda f: f.__delitem__("lamps"), ("missing group 'lamps'",)),
    Case("lamps-camera-unknown", set_attr("lamps", "camera", "head_centre"),
         ("'lamps/camera'", "'head_centre'", "one of the session's cameras")),
    Case("lamp-missing", lambda f: f["lamps"].__delitem__("fill"), ("'lamps/fill' is missing",)),
    Case("lamp-dark-size", replace("lamps/dark", np.zeros((STANDS, 16, 16, 3), np.uint8)),
         ("'lamps/dark'", f"({STANDS}, 16, 16, 3)", f"({STANDS}, {SIZE}, {SIZE}, 3)")),
    Case("survey-width", replace("survey/robot_base", np.zeros((4, 2))), ("'survey/robot_base'", "(4, 2)", "(N, 3)")),
    Case("survey-too-few", replace("survey/conveyor", np.zeros((2, 3))), ("'survey/conveyor'", "(2, 3)", "N >= 3")),
    Case("survey-nan", set_value("survey/conveyor", (1, 2), np.nan), ("'survey/conveyor'", "NaN", "finite")),
    Case("no-kinematics-q", lambda f: f["kinematics"].__delitem__("q"), ("'kinematics/q' is missing",)),
    Case("kinematics-width", replace("kinematics/q", np.zeros((12, 6))), ("'kinematics/q'", "(12, 6)", "(N, 7)")),
    Case("flange-rows", replace("kinematics/flange", np.zeros((11, 3))), ("'kinematics/flange'", "(11, 3)", "(12, 3)")),
    Case("flange-inf", set_value("kinematics/flange", (0, 0), np.inf), ("'kinematics/flange'", "infinite")),
    Case("log-rows", replace("actuators/log", np.zeros((39, 7))), ("'actuators/log'", "(39, 7)", "(40, 7)")),
    Case("targets-text", replace("actuators/targets", np.array(["a"] * 40, dtype="S1")),
         ("'actuators/targets'", "(40,)", "(N, 7) numbers")),
    Case("no-belt-runs", lambda f: [f["belt"].__delitem__(n) for n in list(f["belt"])], ("'belt'", "no runs")),
    Case("belt-speed-missing", del_attr("belt/run_1", "commanded_speed"),
         ("attr 'belt/run_1/commanded_speed' is missing",)),
    Case("belt-speed-zero", set_attr("belt/run_0", "commanded_speed", 0.0), ("'belt/run_0/commanded_speed'", "0.0")),
    Case("belt-speed-text", set_attr("belt/run_0", "commanded_speed", "fast"), ("'belt/run_0/commanded_speed'", "'fast'")),
    Case("belt-times-few", replace("belt/run_0/times", np.arange(5) / 20), ("'belt/run_0/times'", "(5,)", "N >= 10")),
    Case("belt-positions-rows", replace("belt/run_1/positions", np.zeros((19, 3))),
         ("'belt/run_1/positions'", "(19, 3)", "(20, 3)")),
    Case("mass-negative", replace("masses/cube", np.full(5, -0.1)), ("'masses/cube'", "-0.1", "positive")),
    Case("mass-nan", set_value("masses/sphere", 2, np.nan), ("'masses/sphere'", "NaN")),
    Case("appearance-tracking-not-json", set_attr("appearance/head_left", "tracking", "[{"),
         ("'appearance/head_left/tracking'", "'[{'", "JSON list of 2")),
    Case("appearance-tracking-count", set_attr("appearance/head_left", "tracking", json.dumps([{}])),
         ("'appearance/head_left/tracking'", "JSON list of 2")),
    Case("appearance-images-float", replace("appearance/head_left/images", np.zeros((2, 16, 16, 3))),
         ("'appearance/head_left/images'", "float64", "uint8")),
]


def corrupt_copy(valid: Path, folder: Path, case: Case) -> Path:
    path = folder / f"{case.id}.h5"
    shutil.copyfile(valid, path)
    if case.raw:
        case.mutate(path)
    else:
        with h5py.File(path, "a") as f:
            case.mutate(f)
    return path


def test_there_are_enough_cases():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_session_reader_refuses_it_naming_the_file_and_path(case, valid, start, tmp_path):
    path = corrupt_copy(valid, tmp_path, case)
    with pytest.raises(CalibrationError) as err:
        read_session(path, start.cell)
    message = str(err.value)
    assert message.startswith(f"{path}:"), message
    for part in case.expect:
        assert part in message, f"{part!r} not in {message!r}"


def test_the_first_estimator_to_fail_names_the_file_and_the_dataset(valid, start):
    # Well-formed but meaningless content: registration, the first estimator, cannot fit four synthetic points to
    # the six fiducials. (A camera whose views show no board: test_grounding_pipeline.py.)
    with pytest.raises(CalibrationError) as err:
        ground(valid, start)
    message = str(err.value)
    assert message.startswith(f"{valid}: survey/robot_base: measured points have shape (4, 3): expected (6, 3)"), \
        message


@pytest.mark.parametrize("case_id", ["truncated-half", "board-squares-two-small"])
def test_calibrate_refuses_it_and_leaves_nothing(case_id, valid, tmp_path):
    case = next(c for c in CASES if c.id == case_id)
    path = corrupt_copy(valid, tmp_path, case)
    out = tmp_path / "out"
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "calibrate.py"), "--session", str(path),
                             "--output", str(out / "grounded.yaml")], capture_output=True, text=True, timeout=300,
                            env=env, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert str(path) in result.stderr and all(p in result.stderr for p in case.expect), result.stderr
    assert not out.exists()
