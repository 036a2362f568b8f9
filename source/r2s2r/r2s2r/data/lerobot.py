"""Demo datasets -> LeRobot v3 datasets (parquet frames, one MP4 stream per camera, meta/), written with LeRobot's
own writer (`LeRobotDataset.create`, `add_frame`, `save_episode`, `finalize`) so that LeRobot's reader loads them.

Per frame: `observation.state` (the demo's proprio arrays concatenated as float32, in the file's order; the
feature's `names` say which column is which, e.g. `arm_q.0`), `action` (27, float32), every camera as
`observation.images.<camera>` (video), and the task (the demo's `prompt` attr, else the task ID). The fps is the
dataset's control rate (`env_args["control_hz"]`, 20 Hz when absent). Our per-episode attrs are added to LeRobot's
episode metadata (`meta/episodes/`) as columns `r2s2r/<attr>` (`EPISODE_ATTRS`, null where a demo lacks one), plus
`r2s2r/demo` (the source group), `r2s2r/source` ("real" for the twin's task ID, else "sim") and
`r2s2r/source_file`.

The dataset is built in a temporary folder beside the output and renamed to it once complete.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from r2s2r.data.hdf5 import DatasetError, DemoReader
from r2s2r.files import OutputError, check_output_dir
from r2s2r.task_ids import REAL_TASK

EPISODE_ATTRS = ("seed", "success", "condition", "object", "colour", "belt_speed")
IMAGE_PREFIX = "observation.images."
VIDEO_CODECS = ("libsvtav1", "h264", "hevc")  # what LeRobot's encoder accepts; AV1 is its default
DEFAULT_CONTROL_HZ = 20.0  # the tasks' control rate, for files whose env_args do not state it


def make_torchvision_importable() -> None:
    """Let `import torchvision` succeed beside the CPU torch (LeRobot, and robomimic in the tests, import it at module
    level).

    PyPI's torchvision is a CUDA build whose C ops cannot load next to the CPU torch; torchvision then fails on
    import while registering fakes for two detection ops it never loaded. Neither library uses those ops here (LeRobot
    decodes with torchcodec), so declaring their schemas is enough."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is not None and spec.origin is not None and not hasattr(torch.ops.torchvision, "nms"):
        try:
            torch.ops.load_library(str(Path(spec.origin).parent / "_C.so"))
        except OSError:
            for op in ("nms", "qnms"):
                torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def lerobot_dataset_class() -> type:
    """LeRobot's `LeRobotDataset` (from the standalone `lerobot-dataset` package, module `ledataset`)."""
    make_torchvision_importable()
    try:
        from ledataset.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as e:
        raise ImportError(f"{e}; the LeRobot export needs lerobot-dataset 0.4.4 with torchvision and torchcodec (see "
                          f"the README)") from e
    return LeRobotDataset


def _fps(reader: DemoReader) -> int:
    hz = reader.env_args.get("control_hz", DEFAULT_CONTROL_HZ)
    if isinstance(hz, bool) or not isinstance(hz, (int, float)) or hz <= 0 or float(hz) != round(hz):
        raise DatasetError(f"{reader.path}: data.attrs['env_args'] control_hz = {hz!r}: expected a whole number of "
                           f"steps per second (LeRobot's fps is an integer)")
    return round(hz)


def _layout(demo: dict) -> tuple[list[str], list[str]]:
    """(proprio keys, camera names) of a demo's `obs`: uint8 (T, H, W, 3) arrays are cameras, other arrays proprio;
    groups (datagen_info) are left out."""
    obs = demo.get("obs", {})
    cameras = [k for k, v in obs.items() if not isinstance(v, dict) and v.ndim == 4 and v.dtype == np.uint8]
    proprio = [k for k, v in obs.items() if not isinstance(v, dict) and k not in cameras]
    return proprio, cameras


def _state(obs: dict, keys: list[str]) -> np.ndarray:
    steps = len(next(iter(obs.values())))
    parts = [np.asarray(obs[k], dtype=np.float32).reshape(steps, -1) for k in keys]
    return np.concatenate(parts, axis=1) if parts else np.zeros((steps, 0), np.float32)


def _features(demo: dict, proprio: list[str], cameras: list[str]) -> dict:
    names = [f"{k}.{i}" for k in proprio for i in range(_state({k: demo["obs"][k]}, [k]).shape[1])]
    features = {"observation.state": {"dtype": "float32", "shape": (len(names),), "names": names},
                "action": {"dtype": "float32", "shape": (demo["actions"].shape[1],), "names": None}}
    for cam in cameras:
        features[IMAGE_PREFIX + cam] = {"dtype": "video", "shape": demo["obs"][cam].shape[1:],
                                        "names": ["height", "width", "channels"]}
    return features


def _add_episode_attrs(root: Path, rows: dict[int, dict]) -> None:
    """Append our per-episode attrs as columns of LeRobot's episode metadata files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        table = pq.read_table(path)
        episodes = table.column("episode_index").to_pylist()
        for key in next(iter(rows.values())):
            table = table.append_column(f"r2s2r/{key}", pa.array([rows[e].get(key) for e in episodes]))
        pq.write_table(table, path)


def export_lerobot(source: str | os.PathLike, output: str | os.PathLike, *, overwrite: bool = False,
                   vcodec: str = "libsvtav1", progress: Callable | None = None) -> dict:
    """Write the demos of `source` (an HDF5 dataset `DemoReader` accepts) as a LeRobot v3 dataset at `output`.

    `progress` wraps the episode loop (e.g. `tqdm.tqdm`). Returns {"episodes", "frames", "fps", "cameras"}.
    Raises `FileNotFoundError` (no source file), `DatasetError` (not a dataset of ours, or unusable), `OutputError`
    (output is a file, or exists without `overwrite`); nothing is left behind then.
    """
    output = Path(output)
    check_output_dir(output, "output")
    if output.exists() and not overwrite:
        raise OutputError(f"output = {str(output)!r}: exists; expected a new folder (or overwrite, --overwrite, "
                          f"to replace it)")
    if vcodec not in VIDEO_CODECS:
        raise OutputError(f"vcodec = {vcodec!r}: expected one of {', '.join(VIDEO_CODECS)}")
    LeRobotDataset = lerobot_dataset_class()
    with DemoReader(source, min_demos=1, purpose="a LeRobot dataset needs at least one episode") as reader:
        fps = _fps(reader)
        first = reader.load(reader.names[0])
        proprio, cameras = _layout(first)
        features = _features(first, proprio, cameras)
        kind = "real" if reader.env_name == REAL_TASK else "sim"
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent))
        try:
            root = tmp / "dataset"  # LeRobot creates its root itself
            dataset = LeRobotDataset.create(repo_id=f"local/{output.name}", fps=fps, features=features, root=root,
                                            robot_type="rizon4s_wujihand", vcodec=vcodec)
            rows, frames = {}, 0
            names = progress(reader.names) if progress else reader.names
            for index, name in enumerate(names):
                demo = first if index == 0 else reader.load(name)
                attrs = reader.attrs(name)
                task = str(attrs.get("prompt") or reader.env_name)
                state, actions = _state(demo["obs"], proprio), demo["actions"].astype(np.float32)
                for t in range(len(actions)):
                    frame = {"observation.state": state[t], "action": actions[t], "task": task}
                    frame.update({IMAGE_PREFIX + cam: demo["obs"][cam][t] for cam in cameras})
                    dataset.add_frame(frame)
                dataset.save_episode()
                frames += len(actions)
                rows[index] = {"demo": name, "source": kind, "source_file": reader.path.name,
                               **{k: attrs.get(k) for k in EPISODE_ATTRS}}
            dataset.finalize()
            _add_episode_attrs(root, rows)
            shutil.rmtree(root / "images", ignore_errors=True)  # LeRobot's frame PNGs, already in the videos
            if output.exists():
                old = tmp / "replaced"
                os.replace(output, old)  # out of the way first: a folder cannot be renamed onto a non-empty one
            os.replace(root, output)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"episodes": len(rows), "frames": frames, "fps": fps, "cameras": cameras}
