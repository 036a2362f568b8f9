"""Record one calibration session from a real cell (here: the reality twin) into one HDF5 file.

Examples:
  python scripts/record_calibration.py --output outputs/calibration/session.h5
  python scripts/record_calibration.py --reality-file configs/world/reality_alt.yaml --output alt_session.h5

What is recorded is what a calibration crew collects on hardware, and nothing else:
  cameras/<cam>/views     chessboard images held at many poses (intrinsics, distortion, blur)
  cameras/<cam>/flat_field  a flat-field light panel against the lens, lamps off (exposure)
  cameras/<cam>/fixture   the chessboard on each of its surveyed stands (head-camera extrinsics)
  lamps/<lamp>, lamps/dark  the grey card on the board's back, on its stands, lit by one lamp alone and with every
                          lamp off, seen by the head camera (lamp intensities and colours)
  survey/<part>           tracker measurements of the fiducials on the robot base and the conveyor
  kinematics/{q,flange}   encoder readings and tracker-measured flange positions at many arm configurations
  actuators/{targets,log} a step-and-chirp excitation streamed to the right arm and the encoder log
  belt/run_<k>            tracked object positions with the belt at several set points
  appearance/<cam>        objects riding the belt, with the object tracker's readings (colours)
  masses/<object>         scale readings per object
The file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402

HEAD_CAMERAS = ("head_left", "head_right")
BELT_SET_POINTS = (0.08, 0.14, 0.20)
APPEARANCE_CAMERA = LAMP_CAMERA = "head_left"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", type=cli.output_file, default="outputs/calibration/session.h5",
                   help="session file to write")
    p.add_argument("--reality-file", default=None, help="the twin's truth file (default: R2S2R_REALITY_FILE, "
                   "else configs/world/reality.yaml)")
    p.add_argument("--views", type=cli.int_in(6, 1000), default=30, help="chessboard views per head (pinhole) camera")
    p.add_argument("--fisheye-views", type=cli.int_in(6, 1000), default=60,
                   help="chessboard views per wrist (fisheye) camera: more than a head camera's, as the detector "
                   "misses the board in some of them and the fisheye's focal length needs many peripheral views")
    p.add_argument("--image-size", type=cli.int_in(128, 2048), default=512,
                   help="calibration image width and height (pixels)")
    p.add_argument("--arm-poses", type=cli.int_in(10, 10000), default=150,
                   help="arm configurations measured for kinematics (offsets of links 1-2 and 3-4 are nearly "
                   "parallel, so their noise shrinks only with the square root of the count)")
    p.add_argument("--seed", type=cli.seed, default=0, help="seed of the board poses and arm configurations")
    return p.parse_args(argv)


def record(rig, output: Path, views: int, size: int, arm_poses: int, seed: int, progress=None,
           fisheye_views: int = 60) -> None:
    """Run the whole session on `rig` (a `CalibrationRig`) and write it atomically to `output`."""
    step = progress or (lambda what: None)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    try:
        _record_into(rig, partial, views, fisheye_views, size, arm_poses, seed, step)
        partial.replace(output)
    except BaseException:
        partial.unlink(missing_ok=True)  # a session is used whole or not at all: leave nothing half-written
        raise


def _record_into(rig, partial: Path, views: int, fisheye_views: int, size: int, arm_poses: int, seed: int,
                 step) -> None:
    import h5py

    from r2s2r.calibration.actuators import excitation_targets
    from r2s2r.calibration.kinematics import kinematic_poses
    from r2s2r.calibration.rig import CALIBRATION_BOARD

    with h5py.File(partial, "w") as f:
        f.attrs["board_squares"] = CALIBRATION_BOARD.squares
        f.attrs["board_square_size"] = CALIBRATION_BOARD.square_size
        f.attrs["physics_hz"] = rig.physics_hz
        for k, cam in enumerate(c.name for c in rig.cell.cameras):
            count = views if cam in HEAD_CAMERAS else fisheye_views
            step(f"camera {cam}: {count} chessboard views")
            group = f.create_group(f"cameras/{cam}")
            group.attrs["seed"] = seed + k
            group.create_dataset("views", data=np.stack(rig.board_views(cam, count, size, size, seed + k)),
                                 compression="gzip", compression_opts=1)
            group.create_dataset("flat_field", data=rig.flat_field(cam, size, size))
            if cam in HEAD_CAMERAS:
                group.create_dataset("fixture", data=rig.board_on_fixture(cam, size, size))
        step(f"lamps: the grey card lit by each lamp alone and by none, seen by {LAMP_CAMERA}")
        lamps = f.create_group("lamps")
        lamps.attrs["camera"] = LAMP_CAMERA
        lamps.create_dataset("dark", data=rig.board_on_fixture(LAMP_CAMERA, size, size, {}, back=True))
        for light in rig.cell.lights:
            lamps.create_dataset(light.name, data=rig.board_on_fixture(LAMP_CAMERA, size, size, {light.name: 1.0},
                                                                       back=True))
        step("survey of the robot base and conveyor fiducials")
        for part, points in rig.survey().items():
            f.create_dataset(f"survey/{part}", data=points)
        step(f"kinematics: {arm_poses} arm configurations")
        q, flange = rig.flange_positions(kinematic_poses(arm_poses, seed))
        f.create_dataset("kinematics/q", data=q)
        f.create_dataset("kinematics/flange", data=flange)
        step("actuators: step and chirp response")
        home = np.array(rig.cell.arm("right").home_q)
        targets = excitation_targets(home, rig.physics_hz)
        f.create_dataset("actuators/targets", data=targets)
        f.create_dataset("actuators/log", data=rig.joint_response(targets))
        step("belt: tracked objects at three set points")
        for k, speed in enumerate(BELT_SET_POINTS):
            times, positions = rig.track_object(speed, seconds=4.0)
            run = f.create_group(f"belt/run_{k}")
            run.attrs["commanded_speed"] = speed
            run.create_dataset("times", data=times)
            run.create_dataset("positions", data=positions)
        step("appearance: objects on the belt seen by the head camera")
        scenes = rig.scene_images(APPEARANCE_CAMERA, 12, size // 2, size // 2, seed)
        group = f.create_group(f"appearance/{APPEARANCE_CAMERA}")
        group.create_dataset("images", data=np.stack([image for image, _ in scenes]))
        group.attrs["tracking"] = json.dumps([{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in info.items()}
                                              for _, info in scenes])
        step("masses: scale readings")
        for obj in rig.cell.objects + rig.cell.novel_objects:
            f.create_dataset(f"masses/{obj.name}", data=rig.weigh(obj.name, 5))


def main(argv=None) -> int:
    args = parse_args(argv)
    from tqdm import tqdm

    from r2s2r.real.twin import TwinRig

    try:
        rig = TwinRig(args.reality_file)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stages = len(rig.cell.cameras) + 6
    with tqdm(total=stages, desc="calibration session", unit="stage") as bar:
        def progress(what: str) -> None:  # called as each stage starts
            if bar.postfix:
                bar.update(1)
            bar.set_postfix_str(what)

        record(rig, Path(args.output), args.views, args.image_size, args.arm_poses, args.seed, progress,
               args.fisheye_views)
        bar.update(1)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
