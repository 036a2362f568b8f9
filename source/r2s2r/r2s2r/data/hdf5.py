"""Demonstration datasets in the robomimic / Isaac Lab Mimic HDF5 layout, written crash-safely.

Layout (what Isaac Lab's `HDF5DatasetFileHandler` reads)::

    /                      attrs: format_version, r2s2r_writer, quaternion_layout
    /data                  attrs: total (sum of num_samples), env_args (JSON with env_name and type = 2)
    /data/demo_N           attrs: num_samples, seed, success, ... (any scalar or string attrs)
        actions            (T, 27) the task's actions, as sent
        states             (T, nq + nv) optional: simulator state (MuJoCo qpos | qvel) before each action
        initial_state      (nq + nv,) optional: the state the trial started from
        obs/<key>          (T, ...) observations the actions were chosen from; camera images uint8 (T, H, W, 3)
        obs/datagen_info/  (T, ...) poses and tracking signals for automatic subtask annotation

Quaternions: `format_version` is 1, Isaac Lab's marker for pose quaternions stored x, y, z, w. The pose arrays of
`obs/datagen_info` (every `*_pose` of width 7: position then quaternion) follow it. Everything else is stored
exactly as the task produces or consumes it, with quaternions w, x, y, z (MuJoCo's order): the actions, so a demo
replays verbatim; `states`, so MuJoCo can be set from them; and the policy observations (e.g. `obs/ee_pose`), so
a policy trained on them sees at deployment what it saw in training. The file attr `quaternion_layout` says this
in words. Files of format_version 0 (all w, x, y, z) are read as well; `DemoReader.load` can convert their
datagen_info poses.

Crash safety: a writer fills `<path>.partial` and flushes after every demo; a demo group counts only once its
last attr (`r2s2r_complete`) is written. Reopening a `.partial` drops any group without it and continues after
the complete ones. `close()` marks the file published (`r2s2r_state`) and renames it to `<path>` (atomically),
so the final name never holds a half-written file. Space taken by a dropped group is not reclaimed (HDF5 does
not shrink files in place); `h5repack` compacts a file if that matters.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np

from r2s2r.files import atomic_path

FORMAT_VERSION = 1
ACTION_DIM = 27
ENV_TYPE_GYM = 2  # robomimic's EnvType.GYM_TYPE, what Isaac Lab writes
WRITER_TAG = "r2s2r.data.hdf5"
COMPLETE_ATTR = "r2s2r_complete"
STATE_ATTR = "r2s2r_state"  # "partial" while a writer fills the file, "published" once it has been closed
QUATERNION_LAYOUT = ("obs/datagen_info/*_pose: position + quaternion x,y,z,w; actions, states, initial_state and "
                     "all other obs: as the task defines them, quaternions w,x,y,z")
_DEMO_NAME = re.compile(r"demo_(\d+)$")


class DatasetError(ValueError):
    """A dataset file or a demo does not have the expected layout; the message names the file and field."""


def pose_wxyz_to_xyzw(pose: np.ndarray) -> np.ndarray:
    """(..., 7) position + quaternion w,x,y,z -> position + quaternion x,y,z,w."""
    pose = np.asarray(pose)
    return np.concatenate([pose[..., :3], pose[..., 4:7], pose[..., 3:4]], axis=-1)


def pose_xyzw_to_wxyz(pose: np.ndarray) -> np.ndarray:
    """(..., 7) position + quaternion x,y,z,w -> position + quaternion w,x,y,z."""
    pose = np.asarray(pose)
    return np.concatenate([pose[..., :3], pose[..., 6:7], pose[..., 3:6]], axis=-1)


def _demo_index(name: str) -> int:
    match = _DEMO_NAME.match(name)
    return int(match.group(1)) if match else -1


def _leaves(tree: Mapping, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            yield from _leaves(value, path)
        else:
            yield path, value


def validate_demo(demo: Mapping, where: str = "demo") -> int:
    """Check one demo's arrays and return its length T.

    `actions` must be a finite (T, 27) array; every other array must have T rows except `initial_state`
    (a single state); `states`, when present, must be finite; camera-like arrays (T, H, W, 3) must be uint8.
    Raises `DatasetError` naming `where` and the field.
    """
    if not isinstance(demo, Mapping):
        raise DatasetError(f"{where}: expected a dict of arrays, got {type(demo).__name__}")
    if "actions" not in demo:
        raise DatasetError(f"{where}: field 'actions' is missing")
    actions = np.asarray(demo["actions"])
    if actions.ndim != 2 or actions.shape[1] != ACTION_DIM or actions.shape[0] == 0:
        raise DatasetError(f"{where}: field 'actions' has shape {actions.shape}: expected (T, {ACTION_DIM}) "
                           f"with T >= 1")
    if not np.issubdtype(actions.dtype, np.number) or np.issubdtype(actions.dtype, np.complexfloating):
        raise DatasetError(f"{where}: field 'actions' has dtype {actions.dtype}: expected real numbers")
    if not np.isfinite(actions).all():
        bad = np.argwhere(~np.isfinite(actions))[0]
        raise DatasetError(f"{where}: field 'actions' is not finite (first at step {bad[0]}, column {bad[1]})")
    steps = actions.shape[0]
    for path, value in _leaves(demo):
        if path == "actions":
            continue
        array = np.asarray(value)
        if array.dtype == object:
            raise DatasetError(f"{where}: field {path!r} is not a numeric array")
        if path == "initial_state":
            if array.ndim != 1:
                raise DatasetError(f"{where}: field 'initial_state' has shape {array.shape}: expected one state (N,)")
            continue
        if array.ndim == 0 or array.shape[0] != steps:
            raise DatasetError(f"{where}: field {path!r} has shape {array.shape}: expected {steps} rows, one per "
                               f"action")
        if path == "states" and not np.isfinite(array).all():
            raise DatasetError(f"{where}: field 'states' is not finite")
        if array.ndim == 4 and array.shape[-1] == 3 and array.dtype != np.uint8:
            raise DatasetError(f"{where}: field {path!r} looks like images (T, H, W, 3) but is {array.dtype}: "
                               f"expected uint8")
    if "states" in demo and "initial_state" in demo:
        width = np.asarray(demo["states"]).shape[1:]
        if tuple(width) != np.asarray(demo["initial_state"]).shape:
            raise DatasetError(f"{where}: field 'initial_state' has shape {np.asarray(demo['initial_state']).shape}:"
                               f" expected {tuple(width)}, a row of 'states'")
    return steps


def _schema(demo: Mapping) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Per field: (dtype kind, shape after the time axis) — what every demo of one file must share."""
    out = {}
    for path, value in _leaves(demo):
        array = np.asarray(value)
        out[path] = (array.dtype.kind, array.shape if path == "initial_state" else array.shape[1:])
    return out


def _group_schema(group: h5py.Group) -> dict[str, tuple[str, tuple[int, ...]]]:
    out = {}

    def visit(name: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            out[name] = (obj.dtype.kind, obj.shape if name == "initial_state" else obj.shape[1:])

    group.visititems(visit)
    return out


def _attr_value(value: Any) -> Any:
    """An attr as h5py stores it, or a DatasetError for what it cannot."""
    if isinstance(value, (bool, np.bool_)):
        return np.bool_(value)
    if isinstance(value, (int, float, str, np.integer, np.floating, np.str_)):
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        array = np.asarray(value)
        if array.dtype.kind in "biuf":
            return array
    if isinstance(value, Mapping):
        return json.dumps(value)
    raise TypeError(type(value).__name__)


def _python(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode()
    return value


class DemoWriter:
    """Appends demos to `<path>.partial` and publishes `<path>` on `close()`.

    Args:
        path: final file name (`.hdf5` by convention).
        env_name: the task ID stored in `data.attrs["env_args"]["env_name"]`.
        env_args: more JSON-serialisable environment arguments to store beside it; a resumed file must have
            been written with the same ones.
        resume: continue an existing `<path>.partial` (keeping its complete demos) or, failing that, an existing
            `<path>` (copied to the partial name, so the published file stays intact until the new one replaces
            it). False starts empty and replaces both on `close()`.
        compression: h5py compression filter for the arrays ("gzip" as Isaac Lab writes, or None).

    Use it as a context manager: a normal exit publishes the file; an exception leaves `<path>.partial` for a
    later run to resume.
    """

    def __init__(self, path: str | os.PathLike, env_name: str, env_args: Mapping | None = None, *,
                 resume: bool = True, compression: str | None = "gzip"):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.env_args = {**dict(env_args or {}), "env_name": env_name, "type": ENV_TYPE_GYM}
        self.compression = compression
        self._file: h5py.File | None = None
        self._schema: dict | None = None
        # True while the partial file is only a copy of the published one: closing it unpublished then removes
        # it, since it holds nothing the published file does not.
        self._untouched_copy = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume and not self.partial.exists() and self.path.exists():
            # Copy under a temporary name first: a copy cut short must not pass for a resumable partial file.
            with atomic_path(self.partial) as tmp:
                shutil.copyfile(self.path, tmp)
            self._untouched_copy = True
        if resume and self.partial.exists():
            self._reopen()
        else:
            self._create()

    # -- opening -----------------------------------------------------------------------------------------------
    def _create(self) -> None:
        # Built and closed under a temporary name, then renamed: a process killed before HDF5 has written the
        # file's first complete metadata would otherwise leave a truncated `.partial` that no run can reopen.
        with atomic_path(self.partial) as tmp, h5py.File(tmp, "w") as f:
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["r2s2r_writer"] = WRITER_TAG
            f.attrs["quaternion_layout"] = QUATERNION_LAYOUT
            f.attrs[STATE_ATTR] = "partial"
            data = f.create_group("data")
            data.attrs["total"] = 0
            data.attrs["env_args"] = json.dumps(self.env_args)
        self._file = h5py.File(self.partial, "a")

    def _reopen(self) -> None:
        try:
            f = h5py.File(self.partial, "a")
        except OSError as e:
            raise DatasetError(f"{self.partial}: cannot reopen the unfinished dataset to resume it ({e}); move it "
                               f"away to start afresh") from e
        self._file = f
        try:
            if f.attrs.get("r2s2r_writer") != WRITER_TAG or "data" not in f:
                raise DatasetError(f"{self.partial}: not a file written by DemoWriter (no 'r2s2r_writer' attr or "
                                   f"no 'data' group); refusing to append to it")
            data = f["data"]
            stored = json.loads(data.attrs.get("env_args", "{}"))
            if stored != self.env_args:
                diff = sorted(k for k in set(stored) | set(self.env_args) if stored.get(k) != self.env_args.get(k))
                raise DatasetError(f"{self.partial}: env_args differ from this run's in {', '.join(diff)} "
                                   f"(stored {json.dumps({k: stored.get(k) for k in diff})}); resume with the "
                                   f"same settings or write another file")
            # In a partial file, a group without the marker is a crash's half-written leftover: drop it. In a
            # published file (copied here to be extended) every group is complete, including any another tool
            # (e.g. Isaac Lab's handler) appended without the marker: adopt those.
            published = f.attrs.get(STATE_ATTR) == "published"
            for name in list(data):
                if not data[name].attrs.get(COMPLETE_ATTR, False):
                    if published:
                        data[name].attrs[COMPLETE_ATTR] = np.bool_(True)
                    else:
                        del data[name]
            f.attrs[STATE_ATTR] = "partial"
            # Close any gap so names stay demo_0 .. demo_{n-1} (Isaac Lab's handler names the next demo after the
            # group count).
            names = sorted(data, key=_demo_index)
            for k, name in enumerate(names):
                if name != f"demo_{k}":
                    data.move(name, f"demo_{k}")
            data.attrs["total"] = int(sum(int(data[n].attrs["num_samples"]) for n in data))
            if len(data):
                self._schema = _group_schema(data["demo_0"])
            f.flush()
        except BaseException:
            f.close()
            self._file = None
            raise

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def _data(self) -> h5py.Group:
        if self._file is None:
            raise RuntimeError(f"{self.path}: the writer is closed")
        return self._file["data"]

    @property
    def num_demos(self) -> int:
        """Complete demos in the file so far (including those kept from a resumed run)."""
        return len(self._data)

    @property
    def total(self) -> int:
        """Sum of the demos' num_samples."""
        return int(self._data.attrs["total"])

    def demo_attrs(self) -> list[dict]:
        """Attrs of every complete demo, in order (e.g. to see which seeds a resumed run already has)."""
        data = self._data
        return [{k: _python(v) for k, v in data[n].attrs.items()} for n in sorted(data, key=_demo_index)]

    def get_attr(self, key: str, default: Any = None) -> Any:
        """A run-level attr of the `data` group (see `set_attr`)."""
        return _python(self._data.attrs.get(key, default))

    def set_attr(self, key: str, value: Any) -> None:
        """Store a run-level attr on the `data` group (e.g. a collector's progress) and flush it to disk."""
        if key in ("total", "env_args"):
            raise ValueError(f"attr {key!r} is maintained by the writer")
        self._data.attrs[key] = _attr_value(value)
        self._file.flush()

    # -- writing ----------------------------------------------------------------------------------------------
    def check(self, demo: Mapping, where: str = "demo") -> int:
        """Validate `demo` as `append` would (see `validate_demo`), also against the file's earlier demos, without
        writing it; returns its length. Raises `DatasetError` naming `where` and the field."""
        steps = validate_demo(demo, where)
        schema = _schema(demo)
        if self._schema is not None and schema != self._schema:
            missing = sorted(set(self._schema) - set(schema))
            extra = sorted(set(schema) - set(self._schema))
            changed = [(k, schema[k], self._schema[k]) for k in sorted(set(schema) & set(self._schema))
                       if schema[k] != self._schema[k]]
            raise DatasetError(f"{where}: does not match the demos of {self.path}: missing fields {missing}, extra "
                               f"fields {extra}, different (kind, shape) {changed}")
        return steps

    def append(self, demo: Mapping, attrs: Mapping | None = None) -> str:
        """Validate and write one demo, flush, and return its group name (`demo_N`).

        `demo` holds `actions` and any of `obs` (a dict, nested dicts allowed), `states`, `initial_state`;
        `attrs` are stored on the demo group (`num_samples` is set from the actions). Every demo of a file must
        have the same fields with the same per-step shapes and kinds.
        """
        data = self._data
        name = f"demo_{len(data)}"
        steps = self.check(demo, f"{self.path}: {name}")
        schema = _schema(demo)
        attrs = dict(attrs or {})
        converted = {}
        for key, value in attrs.items():
            if key in ("num_samples", COMPLETE_ATTR):
                continue
            try:
                converted[key] = _attr_value(value)
            except TypeError as e:
                raise DatasetError(f"{self.path}: {name}: attr {key!r} of type {e} cannot be stored") from None
        self._untouched_copy = False
        group = data.create_group(name)
        try:
            for path, value in _leaves(demo):
                array = np.asarray(value)
                # Compression filters need chunked, non-scalar data.
                compress = self.compression if array.ndim >= 1 and array.size > 1 else None
                group.create_dataset(path, data=array, compression=compress)
            group.attrs["num_samples"] = steps
            for key, value in converted.items():
                group.attrs[key] = value
            data.attrs["total"] = int(data.attrs["total"]) + steps
            self._file.flush()
            # Written last: a group without it is a crash's leftover and is dropped on reopen.
            group.attrs[COMPLETE_ATTR] = np.bool_(True)
            self._file.flush()
        except BaseException:
            if name in data:
                del data[name]
                data.attrs["total"] = int(sum(int(data[n].attrs["num_samples"]) for n in data))
            raise
        if self._schema is None:
            self._schema = schema
        return name

    def close(self, publish: bool = True) -> Path | None:
        """Close the file; with `publish`, move it to the final name and return that path.

        `publish=False` leaves `<path>.partial` for a later run to resume (or removes it if it is an unchanged
        copy of the published file being extended).
        """
        if self._file is None:
            return None
        f, self._file = self._file, None
        if publish:
            f.attrs[STATE_ATTR] = "published"
        f.flush()
        f.close()
        if not publish:
            if self._untouched_copy:
                self.partial.unlink()
            return None
        # Make the bytes durable before the rename makes them visible under the final name.
        fd = os.open(self.partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.partial, self.path)
        return self.path

    def __enter__(self) -> DemoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(publish=exc_type is None)

    def __del__(self) -> None:
        # Never publish from the garbage collector: only an explicit close() (or a clean `with`) does.
        try:
            self.close(publish=False)
        except Exception:
            pass


class Demo(NamedTuple):
    """One stored demo: its group name, its arrays (nested dicts as in `DemoWriter.append`), and its attrs."""

    name: str
    data: dict
    attrs: dict


class DemoReader:
    """Reads a dataset in the layout above (ours, or Isaac Lab's / robomimic's).

    Raises `FileNotFoundError` for a missing file and `DatasetError` for a file that is not HDF5, lacks the
    `data` group or its `env_args`, or holds a demo without `actions`; messages name the file and the field.
    Groups a crash left incomplete in a DemoWriter `.partial` file are skipped.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such dataset file")
        if not h5py.is_hdf5(self.path):
            raise DatasetError(f"{self.path}: not an HDF5 file")
        self._file = h5py.File(self.path, "r")
        try:
            if "data" not in self._file or not isinstance(self._file["data"], h5py.Group):
                raise DatasetError(f"{self.path}: no 'data' group: not a robomimic / Isaac Lab demo dataset")
            data = self._file["data"]
            if "env_args" not in data.attrs:
                raise DatasetError(f"{self.path}: 'data' has no 'env_args' attr: not a robomimic / Isaac Lab "
                                   f"demo dataset")
            try:
                self.env_args = json.loads(data.attrs["env_args"])
            except (TypeError, ValueError) as e:
                raise DatasetError(f"{self.path}: data.attrs['env_args'] is not JSON ({e})") from None
            # Only an unfinished file of ours can hold half-written groups; elsewhere every group is a demo.
            partial = (self._file.attrs.get("r2s2r_writer") == WRITER_TAG
                       and self._file.attrs.get(STATE_ATTR) != "published")
            self.names = sorted((n for n in data if isinstance(data[n], h5py.Group)
                                 and (not partial or data[n].attrs.get(COMPLETE_ATTR, False))),
                                key=lambda n: (_demo_index(n), n))
        except BaseException:
            self._file.close()
            raise

    @property
    def env_name(self) -> str | None:
        return self.env_args.get("env_name")

    @property
    def format_version(self) -> int:
        """1: datagen_info poses are x,y,z,w; 0 (or no attr): w,x,y,z."""
        return int(self._file.attrs.get("format_version", 0))

    @property
    def total(self) -> int:
        return int(self._file["data"].attrs.get("total", 0))

    def __len__(self) -> int:
        return len(self.names)

    def data_attrs(self) -> dict:
        """The run-level attrs of the `data` group (as `DemoWriter.set_attr` stores them), as Python values."""
        return {k: _python(v) for k, v in self._file["data"].attrs.items()}

    def attrs(self, name: str) -> dict:
        """The attrs of demo `name` as Python values (the writer's completion marker left out)."""
        group = self._group(name)
        return {k: _python(v) for k, v in group.attrs.items() if k != COMPLETE_ATTR}

    def load(self, name: str, datagen_quat: str | None = None) -> dict:
        """The arrays of demo `name` as nested dicts of numpy arrays.

        `datagen_quat="xyzw"` returns the datagen_info poses x,y,z,w whatever the file's version (converting a
        version-0 file's); None returns them as stored.
        """
        group = self._group(name)
        if "actions" not in group or not isinstance(group["actions"], h5py.Dataset):
            raise DatasetError(f"{self.path}: field 'data/{name}/actions' is missing")

        def read(g: h5py.Group, prefix: str) -> dict:
            out = {}
            for key, item in g.items():
                path = f"{prefix}/{key}"
                out[key] = read(item, path) if isinstance(item, h5py.Group) else item[()]
                if (datagen_quat == "xyzw" and self.format_version < 1 and "/datagen_info/" in path
                        and key.endswith("_pose") and out[key].shape[-1:] == (7,)):
                    out[key] = pose_wxyz_to_xyzw(out[key])
            return out

        return read(group, f"data/{name}")

    def _group(self, name: str) -> h5py.Group:
        if self._file is None:
            raise RuntimeError(f"{self.path}: the reader is closed")
        data = self._file["data"]
        if name not in data:
            raise DatasetError(f"{self.path}: no demo 'data/{name}' (has {len(self.names)} demos)")
        return data[name]

    def __iter__(self) -> Iterator[Demo]:
        for name in self.names:
            yield Demo(name, self.load(name), self.attrs(name))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> DemoReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_demos(path: str | os.PathLike) -> Iterator[Demo]:
    """Yield every complete demo of the file at `path` as `Demo(name, data, attrs)`; see `DemoReader`."""
    with DemoReader(path) as reader:
        yield from reader
