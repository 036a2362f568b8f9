"""Co-training data: real and simulated demo datasets, sampled as a weighted mixture.

Each dataset is read once (every demo's policy observations and actions) into flat arrays, so a batch is a few
numpy gathers: the data pipeline must not be what limits training (benchmarks/bench_train.py and
bench_object_centric.py measure it against a bare loop on the same model). Every sample keeps its domain label
(real / sim).

Camera frames stream from disk: the first load of a dataset writes each camera's frames, decoded and at the
policy's image size, to a raw file in the frame cache (`frame_cache_dir()`), and every load maps that file
into memory instead of holding the frames. The operating system keeps the pages a training run touches in its page
cache and drops them under memory pressure, so a mixture larger than memory still trains, and one that fits trains
as fast as from arrays. A cache file is named by the dataset's path, size and modification time, the demos chosen,
the camera and the size: a changed dataset is read again. Delete the folder to reclaim the space.

Action chunks: the sample at step t carries actions t .. t+chunk-1 of its demo, the last action repeated past
the demo's end (the robot holds its final target), as diffusion-policy-style chunking does.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from r2s2r.data.hdf5 import DatasetError, DemoReader
from r2s2r.files import atomic_path, cache_dir, unfinished_writes
from r2s2r.policy.config import DOMAINS, DatasetCfg, PolicyCfg
from r2s2r.tasks import REAL_TASK

STD_FLOOR = 1e-2  # normalization never divides by less (joints that barely move in the data)


@dataclass
class LoadedDataset:
    """One dataset's policy observations and actions, demos concatenated along the first axis."""

    path: str
    domain: str
    weight: float
    images: dict[str, np.ndarray]  # camera -> (N, H, W, 3) uint8 at the policy's image size, mapped from disk
    proprio: np.ndarray  # (N, P) float32, the policy's proprio keys concatenated
    actions: np.ndarray  # (N, A) float32
    demo_end: np.ndarray  # (N,) index of the last step of the demo each step belongs to
    demo_start: np.ndarray  # (N,) index of its first step
    num_demos: int
    # (N, 11) per-frame object labels from obs/datagen_info (`object_centric.frame_labels`); only for policies that
    # learn them.
    labels: np.ndarray | None = None
    demo_objects: tuple[str, ...] = ()  # each demo's object (its `object` attr; "" where the file does not say)

    def __len__(self) -> int:
        return len(self.actions)


def _resize(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = size
    if frames.shape[1:3] == (h, w):
        return frames
    return np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames])


def frame_cache_dir() -> Path:
    """Where decoded frames are cached: `$R2S2R_FRAME_CACHE` (a disk with room: a 1,500-trajectory mixture at 128²
    takes about 12 GB), else `files.cache_dir()/frames`."""
    return Path(os.environ.get("R2S2R_FRAME_CACHE") or cache_dir() / "frames")


LOCKS = ".locks"  # the frame cache's folder of per-dataset lock files


def _dataset_key(path: Path) -> str:
    """The prefix every frame cache file of dataset `path` starts with (whatever its size, demos or camera)."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]


def frame_cache_file(path: Path, names: list[str], camera: str, size: tuple[int, int]) -> Path:
    """The frame cache file of `camera`'s frames of demos `names` of dataset `path` at `size` (height, width)."""
    stat = path.stat()
    key = json.dumps([str(path.resolve()), stat.st_size, stat.st_mtime_ns, list(names), camera, list(size)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return frame_cache_dir() / f"{_dataset_key(path)}_{digest}_{size[0]}x{size[1]}.u8"


@contextmanager
def _frame_cache_lock(path: Path) -> Iterator[None]:
    """Held while dataset `path`'s frame caches are looked up and written: a process that finds them missing while
    another writes them waits, then maps the other's files (two training seeds started side by side would otherwise
    both decode the dataset and each hold a copy of its frames on disk)."""
    locks = frame_cache_dir() / LOCKS
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / _dataset_key(path), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def drop_frame_caches(path: Path) -> int:
    """Delete every frame cache file of dataset `path`, and what killed writers left of them (its trainings are
    over; at the study's scale each simulated dataset's frames take ~14 GB). Returns the bytes freed."""
    freed = 0
    folder, pattern = frame_cache_dir(), f"{_dataset_key(Path(path))}_*.u8"
    for file in [*folder.glob(pattern), *unfinished_writes(folder, pattern)]:
        freed += file.stat().st_size
        file.unlink(missing_ok=True)
    return freed


def _mapped_frames(file: Path, count: int, size: tuple[int, int]) -> np.ndarray | None:
    """`file`'s frames as a read-only (count, H, W, 3) uint8 array mapped from disk; None if it does not hold
    exactly `count` frames of that size (an older or damaged cache file: it is written again)."""
    if not file.is_file() or file.stat().st_size != count * size[0] * size[1] * 3:
        return None
    if count == 0:
        return np.zeros((0, *size, 3), np.uint8)
    return np.memmap(file, dtype=np.uint8, mode="r", shape=(count, *size, 3))


def _write_frame_caches(reader: DemoReader, names: list[str], caches: dict[str, Path], count: int,
                        size: tuple[int, int]) -> None:
    """Write each camera's `count` frames of demos `names`, resized to `size`, to its cache file (camera -> file),
    demo by demo; a file appears under its name only once every demo's frames are in it. Called under the dataset's
    lock, so a temporary file of the same cache file is a killed writer's and is deleted first. A cache folder
    without room for the frames raises `DatasetError` before anything is written, or, when the disk fills while
    writing (other jobs write there too), once the partial files are deleted."""
    folder = next(iter(caches.values())).parent
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (t for file in caches.values() for t in unfinished_writes(folder, file.name)):
        stale.unlink(missing_ok=True)
    need = count * size[0] * size[1] * 3 * len(caches)

    def no_room(free: int) -> DatasetError:
        return DatasetError(
            f"{reader.path}: the frames of cameras {list(caches)} at {size[0]}x{size[1]} need {need / 1e9:.2f} GB in "
            f"the frame cache {folder}, which has {free / 1e9:.2f} GB free: free room there, or set R2S2R_FRAME_CACHE "
            f"to a folder on a disk with room")

    free = shutil.disk_usage(folder).free
    if need > free:
        raise no_room(free)
    try:
        with ExitStack() as stack:
            files = {c: stack.enter_context(open(stack.enter_context(atomic_path(file)), "wb"))
                     for c, file in caches.items()}
            for name in names:
                obs = reader.load(name, only=tuple(f"obs/{c}" for c in caches))["obs"]
                for c, f in files.items():
                    f.write(np.ascontiguousarray(_resize(obs[c], size)).tobytes())
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        raise no_room(shutil.disk_usage(folder).free) from None


def load_dataset(entry: DatasetCfg, policy: PolicyCfg) -> LoadedDataset:
    """Read `entry.path` for `policy`'s observation set; raises `DatasetError` naming the file, demo and field.

    The file is validated by `DemoReader` with the policy's needs: actions of width `policy.action_dim`, the
    cameras and finite proprio keys it observes (and, for the object-centric policy, the finite datagen_info
    labels it learns). The frames come mapped from the frame cache, written on the first load (module doc)."""
    path = Path(entry.path)
    shapes, finite = {}, [f"obs/{k}" for k in policy.proprio]
    if policy.kind == "object_centric":
        from r2s2r.policy.object_centric import LABEL_FIELDS

        shapes = {f"obs/datagen_info/{k}": shape for k, shape in LABEL_FIELDS.items()}
        finite += list(shapes)
    purpose = (f"the policy observes cameras {list(policy.cameras)} (policy.cameras) and proprio "
               f"{list(policy.proprio)} (policy.proprio)")
    if policy.kind == "object_centric":
        purpose += "; the object-centric policy learns the object's state from obs/datagen_info"
    try:
        reader = DemoReader(path, action_dim=policy.action_dim, min_demos=1, cameras=policy.cameras,
                            fields=finite, shapes=shapes, finite=finite, purpose=purpose)
    except FileNotFoundError as e:
        raise DatasetError(f"data.datasets: {e}") from None
    with reader:
        domain = entry.domain or ("real" if reader.env_name == REAL_TASK else "sim")
        if domain not in DOMAINS:
            raise DatasetError(f"{path}: domain {domain!r}: expected one of {DOMAINS}")
        names = reader.names
        for field, attribute in (("conditions", "condition"), ("objects", "object")):
            wanted = getattr(entry, field)
            if wanted:
                recorded = {n: str(reader.attrs(n).get(attribute, "unrecorded")) for n in names}
                if not any(recorded[n] in wanted for n in names):
                    raise DatasetError(f"data.datasets: {field} = {list(wanted)} ({path}): no demo was recorded with "
                                       f"them; the file's {field} are {sorted(set(recorded.values()))}")
                names = [n for n in names if recorded[n] in wanted]
        if entry.demos > len(names):
            kept = " and ".join(f"{f} {list(getattr(entry, f))}" for f in ("conditions", "objects") if getattr(entry, f))
            raise DatasetError(f"data.datasets: demos = {entry.demos} ({path}): the file holds only {len(names)} "
                               f"demos" + (f" with {kept}" if kept else ""))
        names = names[: entry.demos] if entry.demos else names
        size = tuple(policy.image_size)
        fields = tuple(f"obs/{key}" for key in policy.proprio)
        if policy.kind == "object_centric":
            from r2s2r.policy.object_centric import frame_labels

            fields += ("obs/datagen_info",)
        proprio, actions, starts, ends, labels = [], [], [], [], []
        objects = tuple(str(reader.attrs(n).get("object", "")) for n in names)
        offset = 0
        for name in names:  # everything but the frames
            demo = reader.load(name, only=fields)
            act = np.asarray(demo["actions"])
            obs = demo.get("obs", {})
            parts = [np.asarray(obs[key], dtype=np.float32).reshape(len(act), -1) for key in policy.proprio]
            proprio.append(np.concatenate(parts, axis=1) if parts else np.zeros((len(act), 0), np.float32))
            if policy.kind == "object_centric":
                labels.append(frame_labels(obs["datagen_info"]))
            actions.append(act.astype(np.float32))
            starts.append(np.full(len(act), offset))
            ends.append(np.full(len(act), offset + len(act) - 1))
            offset += len(act)
        caches = {c: frame_cache_file(path, names, c, size) for c in policy.cameras}
        with _frame_cache_lock(path):  # trainings started together write a dataset's frames once
            images = {c: _mapped_frames(file, offset, size) for c, file in caches.items()}
            missing = [c for c, frames in images.items() if frames is None]
            if missing:
                _write_frame_caches(reader, names, {c: caches[c] for c in missing}, offset, size)
                images.update({c: _mapped_frames(caches[c], offset, size) for c in missing})
    return LoadedDataset(
        path=str(path), domain=domain, weight=float(entry.weight), images=images,
        proprio=np.concatenate(proprio), actions=np.concatenate(actions),
        demo_start=np.concatenate(starts), demo_end=np.concatenate(ends), num_demos=len(names),
        labels=np.concatenate(labels) if labels else None, demo_objects=objects)


def check_compatible(datasets: list[LoadedDataset]) -> None:
    """Every dataset of a mixture must give the policy the same proprio width."""
    first = datasets[0]
    for d in datasets[1:]:
        if d.proprio.shape[1] != first.proprio.shape[1]:
            raise DatasetError(f"{d.path}: proprio observations have width {d.proprio.shape[1]}, but {first.path} "
                               f"has {first.proprio.shape[1]}: the datasets disagree on the observation keys")


@dataclass
class Stats:
    """Per-dimension mean and std of proprio and actions (std floored at STD_FLOOR)."""

    proprio_mean: np.ndarray
    proprio_std: np.ndarray
    action_mean: np.ndarray
    action_std: np.ndarray


def weighted_moments(arrays: list[np.ndarray], weights: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and std of a mixture in which each array counts by its weight, not by its size."""
    total = sum(weights)
    mean = sum(w / total * a.mean(axis=0, dtype=np.float64) for w, a in zip(weights, arrays))
    var = sum(w / total * ((a - mean) ** 2).mean(axis=0) for w, a in zip(weights, arrays))
    return mean, np.sqrt(var)


def mixture_stats(datasets: list[LoadedDataset]) -> Stats:
    """Statistics of the mixture as it is sampled: each dataset counts by its weight, not by its size."""

    def moments(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        mean, std = weighted_moments(arrays, [d.weight for d in datasets])
        return mean.astype(np.float32), np.maximum(std, STD_FLOOR).astype(np.float32)

    pm, ps = moments([d.proprio for d in datasets])
    am, as_ = moments([d.actions for d in datasets])
    return Stats(pm, ps, am, as_)


class MixtureSampler:
    """Draws batches: a dataset per sample by weight, then a step uniformly within it; domain labels kept."""

    def __init__(self, datasets: list[LoadedDataset], chunk: int, batch_size: int, seed: int):
        self.datasets = [d for d in datasets if d.weight > 0]
        weights = np.array([d.weight for d in self.datasets])
        self.p = weights / weights.sum()
        self.chunk = chunk
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.cameras = list(datasets[0].images)

    def sample(self) -> dict[str, np.ndarray]:
        which = self.rng.choice(len(self.datasets), size=self.batch_size, p=self.p)
        out: dict = {"images": {c: [] for c in self.cameras}, "proprio": [], "actions": [], "domain": []}
        order = []
        for k, d in enumerate(self.datasets):
            rows = np.flatnonzero(which == k)
            if not len(rows):
                continue
            order.append(rows)
            t = self.rng.integers(0, len(d), size=len(rows))
            steps = np.minimum(t[:, None] + np.arange(self.chunk), d.demo_end[t][:, None])
            for c in self.cameras:
                out["images"][c].append(d.images[c][t])
            out["proprio"].append(d.proprio[t])
            out["actions"].append(d.actions[steps])
            out["domain"].append(np.full(len(rows), DOMAINS.index(d.domain)))
        # Restore the drawn order so a batch's composition does not depend on the datasets' order.
        inverse = np.argsort(np.concatenate(order))
        return {"images": {c: np.concatenate(v)[inverse] for c, v in out["images"].items()},
                "proprio": np.concatenate(out["proprio"])[inverse],
                "actions": np.concatenate(out["actions"])[inverse],
                "domain": np.concatenate(out["domain"])[inverse]}

    def state(self) -> dict:
        return self.rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state
