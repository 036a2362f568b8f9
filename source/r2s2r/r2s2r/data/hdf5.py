"""Demonstration datasets in the robomimic / Isaac Lab Mimic HDF5 layout, written crash-safely.

Layout (format_version 2), what Isaac Lab's `HDF5DatasetFileHandler` and Mimic's `DataGenInfoPool` load as source
demos and robomimic's `SequenceDataset` trains on::

    /                      attrs: format_version = 2, r2s2r_writer
    /data                  attrs: total (sum of num_samples), env_args (JSON: env_name, type = 2, env_kwargs)
    /data/demo_N           attrs: num_samples, seed, success, ... (any scalar or string attrs)
        actions            (T, 27) the task's actions, as sent
        states             (T, nq + nv) optional: simulator state (MuJoCo qpos | qvel) before each action
        initial_state      (1, nq + nv) optional: the state the trial started from (Isaac Lab's recorder keeps a
                           leading episode axis)
        obs/<key>          (T, ...) observations the actions were chosen from; camera images uint8 (T, H, W, 3)
        obs/datagen_info/  Isaac Lab Mimic's source-demo signals, see `r2s2r.data.datagen_info`: (T, 4, 4)
                           float32 poses per end-effector (`eef_pose/right`, `target_eef_pose/right`) and per
                           object (`object_pose/object`, `object_pose/target_bin`), `gripper_action/right`,
                           `subtask_term_signals/<name>`, and the rest of the tracking
        next_obs/<key>     (T, ...) obs/<key> one step later, the last row repeated (every obs array outside
                           datagen_info; HDF5 virtual datasets mapped onto obs, so they take no space)
        rewards            (T,) float32: the task's reward, 1 on the step it judged the demo a success (the last)
        dones              (T,) uint8: 1 on the last step
    /mask/train, /mask/valid   robomimic's filter keys: demo names, a fixed-seed split with one demo in ten
                           (rounded) for validation, rewritten on every close

`env_kwargs` holds what the recording run states about the environment (cameras, image size, control rate, ...);
`DemoReader.env_args` returns it flattened beside env_name and type. The writer derives next_obs, rewards and dones
(a dataset holds successful demos that end on the step the task judged them) and the masks; `DemoReader.load`
returns the rest, the fields `DemoWriter.append` takes.

format_version counts as Isaac Lab's does (its handler converts quaternions of files below 1; 2 is above both):

    0 (or no attr)  r2s2r's first layout: obs/datagen_info poses flat (T, 7) position + quaternion w,x,y,z, the bin
                    as `target_bin_pos` (T, 3), hand targets as `gripper_action` (T, 20); initial_state (N,);
                    env settings at the top level of env_args; no next_obs, rewards, dones or mask
    1               as 0, the flat poses' quaternions x,y,z,w (Isaac Lab's version 1)
    2               the layout above

`DemoReader` reads all three and returns version-2 demos (`r2s2r.data.datagen_info` upgrades the old fields);
`DemoWriter` writes version 2 only and will not append to an older file; `scripts/convert_dataset.py` upgrades one.
Quaternions outside datagen_info are stored as the task produces or consumes them (w, x, y, z, MuJoCo's order): the
actions, so a demo replays verbatim, and the policy observations (e.g. `obs/ee_pose`), so a policy trained on them
sees at deployment what it saw in training.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np

from r2s2r.data.datagen_info import LEGACY_FIELDS, POSE_GROUPS, upgrade_field
from r2s2r.files import atomic_path
from r2s2r.task_ids import DATASET_TASKS

FORMAT_VERSION = 2
ACTION_DIM = 27
ENV_TYPE_GYM = 2  # robomimic's EnvType.GYM_TYPE, what Isaac Lab writes
WRITER_TAG = "r2s2r.data.hdf5"
COMPLETE_ATTR = "r2s2r_complete"
STATE_ATTR = "r2s2r_state"  # "partial" while a writer fills the file, "published" once it has been closed
DERIVED = ("next_obs", "rewards", "dones")  # written by the writer from the rest of a demo; not in `load`
DATAGEN = "obs/datagen_info"
STATE_FIELDS = ("states", "initial_state")  # simulator states, restored by replay and rendering: must be finite
# No entry of a 27-d action comes near this: grasp-site positions are metres within the cell (a few at most),
# quaternion entries lie in [-1, 1], joint targets are radians within a few turns. A larger value is a unit or
# scaling error (or garbage) that would otherwise train a policy or be sent to a robot; it is refused like NaN.
ACTION_LIMIT = 100.0
SPLIT_SEED = 0  # the train/valid masks' permutation
_DEMO_NAME = re.compile(r"demo_(\d+)$")


class DatasetError(ValueError):
    """A dataset file or a demo does not have the expected layout; the message names the file and field."""


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


def _check_field(where: str, path: str, shape: tuple, dtype: np.dtype, steps: int) -> None:
    """The rules every array of a demo but `actions` follows (named and shaped as in layout 2), in memory or on file."""
    if dtype.kind not in "biuf":
        raise DatasetError(f"{where}: field {path!r} has dtype {dtype}: expected numbers")
    if path == "initial_state":
        if len(shape) != 2 or shape[0] != 1:
            raise DatasetError(f"{where}: field 'initial_state' has shape {shape}: expected one state (1, N)")
        return
    if len(shape) == 0 or shape[0] != steps:
        raise DatasetError(f"{where}: field {path!r} has shape {shape}: expected {steps} rows, one per action")
    if len(shape) == 4 and shape[-1] == 3 and dtype != np.uint8:
        raise DatasetError(f"{where}: field {path!r} looks like images (T, H, W, 3) but is {dtype}: expected uint8")
    parts = path.split("/")
    if path.startswith(DATAGEN + "/") and parts[2] in POSE_GROUPS and (len(parts) != 4 or shape[1:] != (4, 4)):
        raise DatasetError(f"{where}: field {path!r} has shape {shape}: expected ({steps}, 4, 4) poses, one array per "
                           f"name under {DATAGEN}/{parts[2]}/ (Isaac Lab Mimic's layout)")


def _check_initial_state(where: str, states: tuple | None, initial: tuple | None) -> None:
    if states is not None and initial is not None and tuple(initial[1:]) != tuple(states[1:]):
        raise DatasetError(f"{where}: field 'initial_state' has shape {initial}: expected {(1, *states[1:])}, a row "
                           f"of 'states'")


def _check_action_values(where: str, actions: np.ndarray) -> None:
    """Every action entry finite and within +-ACTION_LIMIT, the rule for demos in memory and on file alike."""
    bad = ~(np.abs(actions) <= ACTION_LIMIT)  # NaN compares false: refused with the infinities
    if bad.any():
        step, column = np.argwhere(bad)[0]
        value = actions[step, column]
        what = "is not finite (NaN or inf" if not np.isfinite(value) else f"is out of range ({value:g}"
        raise DatasetError(f"{where}: field 'actions' {what}: first at step {step}, column {column}); expected "
                           f"finite values within +-{ACTION_LIMIT:g} (metres, quaternion entries, radians)")


def validate_demo(demo: Mapping, where: str = "demo", action_dim: int = ACTION_DIM) -> int:
    """Check one demo's arrays (as `DemoWriter.append` takes them) and return its length T.

    `actions` must be a (T, `action_dim`) array (27, the tasks' action size, by default) of finite values within
    +-ACTION_LIMIT; every other array must be numeric with T rows, except `initial_state` (1, N) (a row of
    `states`); `states` and `initial_state`, when present, must be finite; camera-like arrays (T, H, W, 3) must be
    uint8; datagen_info poses (T, 4, 4); the fields the writer derives (next_obs, rewards, dones) must be left out.
    Raises `DatasetError` naming `where` and the field.
    """
    if not isinstance(demo, Mapping):
        raise DatasetError(f"{where}: expected a dict of arrays, got {type(demo).__name__}")
    if "actions" not in demo:
        raise DatasetError(f"{where}: field 'actions' is missing")
    actions = np.asarray(demo["actions"])
    if actions.ndim != 2 or actions.shape[1] != action_dim or actions.shape[0] == 0:
        raise DatasetError(f"{where}: field 'actions' has shape {actions.shape}: expected (T, {action_dim}) "
                           f"with T >= 1")
    if not np.issubdtype(actions.dtype, np.number) or np.issubdtype(actions.dtype, np.complexfloating):
        raise DatasetError(f"{where}: field 'actions' has dtype {actions.dtype}: expected real numbers")
    _check_action_values(where, actions)
    steps = actions.shape[0]
    for path, value in _leaves(demo):
        if path.split("/")[0] in DERIVED:
            raise DatasetError(f"{where}: field {path!r} is written by DemoWriter (derived from the demo); leave it "
                               f"out")
        if path != "actions":
            array = np.asarray(value)
            _check_field(where, path, array.shape, array.dtype, steps)
    for key in STATE_FIELDS:
        if key in demo and not np.isfinite(np.asarray(demo[key])).all():
            raise DatasetError(f"{where}: field {key!r} is not finite (NaN or inf); expected finite simulator states")
    shape = {k: np.shape(demo[k]) if k in demo else None for k in ("states", "initial_state")}
    _check_initial_state(where, shape["states"], shape["initial_state"])
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
        if isinstance(obj, h5py.Dataset) and name.split("/")[0] not in DERIVED:
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
        value = value.item()
    if isinstance(value, bytes):
        return value.decode()
    return value


class DemoWriter:
    """Appends demos to `<path>.partial` and publishes `<path>` on `close()`.

    Args:
        path: final file name (`.hdf5` by convention).
        env_name: the task ID stored in `data.attrs["env_args"]["env_name"]`.
        env_args: more JSON-serialisable environment arguments, stored as `env_args["env_kwargs"]`; a resumed file
            must have been written with the same ones.
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
        reserved = sorted({"env_name", "type", "env_kwargs"} & set(env_args or {}))
        if reserved:
            raise ValueError(f"env_args: keys {reserved} are the writer's (env_name is an argument of its own)")
        self.env_args = {"env_name": env_name, "type": ENV_TYPE_GYM, "env_kwargs": dict(env_args or {})}
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
            try:
                self._reopen()
            except BaseException:
                if self._untouched_copy:  # a copy of the published file made just now: nothing to keep
                    self.partial.unlink()
                raise
        else:
            self._create()

    # -- opening -----------------------------------------------------------------------------------------------
    def _create(self) -> None:
        # Built and closed under a temporary name, then renamed: a process killed before HDF5 has written the
        # file's first complete metadata would otherwise leave a truncated `.partial` that no run can reopen.
        with atomic_path(self.partial) as tmp, h5py.File(tmp, "w") as f:
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["r2s2r_writer"] = WRITER_TAG
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
            version = int(f.attrs.get("format_version", 0))
            if version != FORMAT_VERSION:
                raise DatasetError(f"{self.partial}: format_version = {version}: expected {FORMAT_VERSION} to append "
                                   f"to it; upgrade the file with scripts/convert_dataset.py first")
            data = f["data"]
            stored, ours = _flat_env_args(json.loads(data.attrs.get("env_args", "{}"))), _flat_env_args(self.env_args)
            if stored != ours:
                diff = sorted(k for k in set(stored) | set(ours) if stored.get(k) != ours.get(k))
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
                    _link_next_obs(data[f"demo_{k}"])  # its virtual datasets still name the old group
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
        self._check_schema(_schema(demo), where)
        return steps

    def _check_schema(self, schema: dict, where: str) -> None:
        if self._schema is not None and schema != self._schema:
            missing = sorted(set(self._schema) - set(schema))
            extra = sorted(set(schema) - set(self._schema))
            changed = [(k, schema[k], self._schema[k]) for k in sorted(set(schema) & set(self._schema))
                       if schema[k] != self._schema[k]]
            raise DatasetError(f"{where}: does not match the demos of {self.path}: missing fields {missing}, extra "
                               f"fields {extra}, different (kind, shape) {changed}")

    def append(self, demo: Mapping, attrs: Mapping | None = None) -> str:
        """Validate and write one demo, flush, and return its group name (`demo_N`).

        `demo` holds `actions` and any of `obs` (a dict, nested dicts allowed), `states`, `initial_state`;
        `attrs` are stored on the demo group (`num_samples` is set from the actions). Every demo of a file must
        have the same fields with the same per-step shapes and kinds. The writer adds next_obs, rewards and dones
        (the reward 1 on the last step if `attrs["success"]`, true when absent).
        """
        name = f"demo_{len(self._data)}"
        steps = self.check(demo, f"{self.path}: {name}")

        def fill(group: h5py.Group) -> None:
            for path, value in _leaves(demo):
                array = np.asarray(value)
                group.create_dataset(path, data=array, compression=self._compression_for(array))

        return self._write(name, steps, _schema(demo), attrs, fill)

    def append_from(self, reader: DemoReader, name: str) -> str:
        """Append demo `name` of `reader` as `append(reader.load(name), reader.attrs(name))` would, copying its
        stored arrays as they are (compressed chunks are not decoded and encoded again) where the source is one
        of this writer's files of the same compression; otherwise through `load`."""
        group = reader._group(name)
        arrays = [key for key in group if key not in DERIVED]
        datasets = []
        group.visititems(lambda key, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset)
                         and key.split("/")[0] not in DERIVED else None)
        same = (reader.format_version == FORMAT_VERSION and "r2s2r_writer" in reader._file_attrs
                and all(ds.compression == self._compression_for(ds) for ds in datasets))
        if not same:
            return self.append(reader.load(name), reader.attrs(name))
        target = f"demo_{len(self._data)}"
        where = f"{self.path}: {target} (from {reader.path}: {name})"
        schema = _group_schema(group)
        self._check_schema(schema, where)
        steps = int(group.attrs["num_samples"])

        def fill(out: h5py.Group) -> None:
            for key in arrays:
                group.file.copy(group[key], out, key)

        return self._write(target, steps, schema, reader.attrs(name), fill)

    def _compression_for(self, array) -> str | None:
        """The filter an array (or stored dataset) is written with: compression filters need chunked, non-scalar
        data."""
        return self.compression if array.ndim >= 1 and array.size > 1 else None

    def _write(self, name: str, steps: int, schema: dict, attrs: Mapping | None,
               fill: Callable[[h5py.Group], None]) -> str:
        """Write demo group `name`: `fill` writes its arrays; then the derived fields, attrs and the completion
        marker. A failure leaves the file as it was."""
        data = self._data
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
            fill(group)
            _link_next_obs(group)
            rewards = np.zeros(steps, dtype=np.float32)
            rewards[-1] = float(bool(attrs.get("success", True)))
            group.create_dataset("rewards", data=rewards)
            group.create_dataset("dones", data=(np.arange(steps) == steps - 1).astype(np.uint8))
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
            _write_masks(f)
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


def _link_next_obs(group: h5py.Group) -> None:
    """(Re)create `next_obs/<key>` of a demo group: virtual datasets showing obs/<key> one row later, the last row
    repeated (robomimic's next observations, without a copy of the images)."""
    if "next_obs" in group:
        del group["next_obs"]
    if "obs" not in group:
        return
    arrays = []
    group["obs"].visititems(lambda key, obj: arrays.append((key, obj)) if isinstance(obj, h5py.Dataset) else None)
    for key, ds in arrays:
        if key == "datagen_info" or key.startswith("datagen_info/"):
            continue
        source, layout = h5py.VirtualSource(ds), h5py.VirtualLayout(shape=ds.shape, dtype=ds.dtype)
        steps = ds.shape[0]
        layout[: steps - 1] = source[1:]
        layout[steps - 1] = source[steps - 1]
        group.create_virtual_dataset(f"next_obs/{key}", layout)


def _write_masks(f: h5py.File) -> None:
    """robomimic's `mask/train` and `mask/valid`: a fixed-seed permutation of the demos, one in ten (rounded) for
    validation, every demo in exactly one of them."""
    names = sorted(f["data"], key=_demo_index)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(names))
    valid = set(order[: (len(names) + 5) // 10].tolist())
    if "mask" in f:
        del f["mask"]
    for key, keep in (("train", False), ("valid", True)):
        chosen = [n for k, n in enumerate(names) if (k in valid) == keep]
        f.create_dataset(f"mask/{key}", data=np.array(chosen, dtype="S"))


def _flat_env_args(env_args: Mapping) -> dict:
    """env_args with the entries of `env_kwargs` beside env_name and type (older files store them there)."""
    return {**{k: v for k, v in env_args.items() if k != "env_kwargs"}, **env_args.get("env_kwargs", {})}


class _Field(NamedTuple):
    """One array of a demo as layout 2 names and shapes it; `read()` returns its values, converted from an older
    layout where the file has one; `source` is its path in the demo group."""

    shape: tuple
    dtype: np.dtype
    read: Callable[[], np.ndarray]
    source: str


class Demo(NamedTuple):
    """One stored demo: its group name, its arrays (nested dicts as in `DemoWriter.append`), and its attrs."""

    name: str
    data: dict
    attrs: dict


class DemoReader:
    """Reads a dataset in the layout above (format_version 0, 1 or 2; ours, or Isaac Lab's / robomimic's),
    validating it first, and hands out its demos in layout 2 whatever the file's version.

    This is the one validator of demo datasets: every tool that reads one opens it here, and states its own needs
    through the arguments. Opening the file checks, before any demo is used:

    - the file opens as HDF5 (a truncated or corrupt file is a `DatasetError` naming it and what HDF5 reported);
      its format_version is one this reader knows;
    - `data` is a group whose `env_args` attr is a JSON object with a known task ID (`env_name`, one of `tasks`,
      default every registered task) and, when present, an object `env_kwargs`; the run-level `total`, when
      present, is the sum of the demos' lengths; each `mask/<key>` names demos of `data`;
    - every member of `data` is a demo group with `actions` of shape (T, `action_dim`), T >= 1, finite real
      numbers within +-ACTION_LIMIT; every other array has T rows (`initial_state`: one state) and a numeric
      dtype; arrays shaped as images (T, H, W, 3) are uint8; datagen_info poses are (T, 4, 4) (older files: the
      flat (T, 7) poses and (T, 3) bin position they were written with); virtual next_obs arrays map onto their own
      demo's obs; a field has the same dtype kind and per-step shape in every demo (one image size per camera);
    - the demo attrs `num_samples` (when present) equals T and `success` (when present) is true: a dataset holds
      finished, successful demos; `seed` (when present) is an integer >= 0, `condition` and `object` strings;
    - what the caller needs: at least `min_demos` demos, the arrays `fields` in every demo, camera images
      `cameras` (obs/<name>, (T, H, W, 3) uint8), per-step shapes `shapes` ({field: shape after the time axis}),
      the demo attrs `attrs`, and finite values in `finite` (fields read and checked now); `purpose` says in the
      messages what needs them. Fields are named as in layout 2 (e.g. `obs/datagen_info/eef_pose/right`), also
      for older files.

    `load` reads a demo's arrays (older layouts converted) and checks them again (`validate_demo`: e.g. finite
    states and initial_state; a tool that restores them asks for `finite=STATE_FIELDS` to have that checked on
    opening, before it writes anything); a read that fails on corrupt bytes is a `DatasetError` naming the file and
    field. Raises `FileNotFoundError` for a missing file. Messages name the file, the demo and field or attr, the
    value found and what was expected. Groups a crash left incomplete in a DemoWriter `.partial` file are skipped.
    """

    def __init__(self, path: str | os.PathLike, *, action_dim: int = ACTION_DIM, min_demos: int = 0,
                 fields: Iterable[str] = (), cameras: Iterable[str] = (), shapes: Mapping[str, tuple] | None = None,
                 attrs: Iterable[str] = (), finite: Iterable[str] = (), tasks: Iterable[str] | None = None,
                 purpose: str = ""):
        self.path = Path(path)
        self.action_dim = int(action_dim)
        self._file = None
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such dataset file")
        try:
            hdf5 = h5py.is_hdf5(self.path)
        except OSError as e:
            raise DatasetError(f"{self.path}: cannot read the file ({e.strerror or e})") from None
        if not hdf5:
            raise DatasetError(f"{self.path}: not an HDF5 file")
        try:
            self._file = h5py.File(self.path, "r")
        except Exception as e:  # h5py reports a truncated or corrupt file as OSError, RuntimeError, ...
            raise DatasetError(f"{self.path}: cannot open the HDF5 file: {_h5_reason(e)}; expected an intact "
                               f"HDF5 file (truncated or corrupt?)") from None
        self._where = "the file's metadata"
        try:
            self._validate(min_demos, tuple(fields), tuple(cameras), dict(shapes or {}), tuple(attrs),
                           tuple(finite), tasks, purpose)
        except DatasetError:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise DatasetError(f"{self.path}: cannot read {self._where}: {_h5_reason(e)}; expected an intact HDF5 "
                               f"file (truncated or corrupt?)") from None
        except BaseException:
            self.close()
            raise

    # -- validation ---------------------------------------------------------------------------------------------
    def _validate(self, min_demos, fields, cameras, shapes, need_attrs, finite, tasks, purpose) -> None:
        path, f = self.path, self._file
        why = f"; {purpose}" if purpose else ""
        self._where = "the file attrs"
        self._file_attrs = {k: _python(v) for k, v in f.attrs.items()}
        version = self._file_attrs.get("format_version", 0)
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= FORMAT_VERSION:
            raise DatasetError(f"{path}: attr 'format_version' = {version!r}: expected 0, 1 or {FORMAT_VERSION} (a "
                               f"newer version needs a newer r2s2r)")
        self._where = "group 'data'"
        if "data" not in f or not isinstance(f["data"], h5py.Group):
            raise DatasetError(f"{path}: no 'data' group: not a robomimic / Isaac Lab demo dataset")
        data = f["data"]
        self._where = "the attrs of group 'data'"
        self._data_attrs = {k: _python(v) for k, v in data.attrs.items()}
        if "env_args" not in self._data_attrs:
            raise DatasetError(f"{path}: 'data' has no 'env_args' attr: not a robomimic / Isaac Lab demo dataset")
        raw = self._data_attrs["env_args"]
        try:
            env_args = json.loads(raw)
        except (TypeError, ValueError) as e:
            raise DatasetError(f"{path}: data.attrs['env_args'] = {_short(raw)}: is not JSON ({e}); expected a JSON "
                               f"object with env_name") from None
        if not isinstance(env_args, dict):
            raise DatasetError(f"{path}: data.attrs['env_args'] = {_short(raw)}: expected a JSON object with "
                               f"env_name")
        if not isinstance(env_args.get("env_kwargs", {}), dict):
            raise DatasetError(f"{path}: data.attrs['env_args'] env_kwargs = {_short(env_args['env_kwargs'])}: "
                               f"expected a JSON object")
        self.env_args = _flat_env_args(env_args)
        known = tuple(tasks) if tasks is not None else DATASET_TASKS
        name = env_args.get("env_name")
        if name not in known:
            raise DatasetError(f"{path}: data.attrs['env_args'] env_name = {name!r}: unknown task ID; expected one "
                               f"of {', '.join(known)}")
        # Only an unfinished file of ours can hold half-written groups; elsewhere every group is a demo.
        partial = (self._file_attrs.get("r2s2r_writer") == WRITER_TAG
                   and self._file_attrs.get(STATE_ATTR) != "published")
        names, self._attrs = [], {}
        for member in data:
            self._where = f"'data/{member}'"
            item = data[member]
            if not isinstance(item, h5py.Group):
                raise DatasetError(f"{path}: 'data/{member}' is a dataset: expected a demo group (data/demo_N)")
            demo_attrs = {k: _python(v) for k, v in item.attrs.items()}
            if partial and not demo_attrs.get(COMPLETE_ATTR, False):
                continue
            self._attrs[member] = {k: v for k, v in demo_attrs.items() if k != COMPLETE_ATTR}
            names.append(member)
        self.names = sorted(names, key=lambda n: (_demo_index(n), n))
        if len(self.names) < min_demos:
            held = "holds no demos" if not self.names else f"holds {len(self.names)} demos"
            raise DatasetError(f"{path}: the dataset {held}; expected at least {min_demos}{why}")
        required = dict.fromkeys(fields, None)
        for cam in cameras:
            required[f"obs/{cam}"] = "image"
        for key, shape in shapes.items():
            required[key] = tuple(shape)
        schema: dict[str, tuple[str, tuple, str]] = {}
        total = 0
        for demo in self.names:
            group = data[demo]
            self._where = f"'data/{demo}'"
            total += self._check_group(demo, group, schema, required, need_attrs, finite, why)
        stored = self._data_attrs.get("total")
        if stored is not None and not partial:
            if isinstance(stored, bool) or not isinstance(stored, (int, np.integer)) or int(stored) != total:
                raise DatasetError(f"{path}: data.attrs['total'] = {stored!r}: expected {total}, the sum of the "
                                   f"demos' lengths")
        masks = f["mask"] if "mask" in f else {}
        if not isinstance(masks, (h5py.Group, dict)):
            raise DatasetError(f"{path}: 'mask' is a dataset: expected a group of filter keys (mask/train, ...)")
        for key in masks:
            self._where = f"'mask/{key}'"
            item = masks[key]
            names = [_python(n) for n in item[()]] if isinstance(item, h5py.Dataset) and item.ndim == 1 else None
            if names is None or not all(isinstance(n, str) for n in names):
                raise DatasetError(f"{path}: 'mask/{key}' is not a list of demo names: expected robomimic's filter "
                                   f"key, e.g. [b'demo_0', ...]")
            unknown = sorted(set(names) - set(self.names))
            if unknown and not partial:
                raise DatasetError(f"{path}: 'mask/{key}' names {unknown[:3]}, not demos of 'data'")

    def _check_group(self, demo, group, schema, required, need_attrs, finite, why) -> int:
        path = self.path
        where = f"{path}: {demo}"
        attrs = self._attrs[demo]
        if "actions" not in group or not isinstance(group["actions"], h5py.Dataset):
            raise DatasetError(f"{where}: field 'actions' is missing")
        actions = group["actions"]
        if actions.ndim != 2 or actions.shape[1] != self.action_dim or actions.shape[0] == 0:
            raise DatasetError(f"{where}: field 'actions' has shape {actions.shape}: expected (T, "
                               f"{self.action_dim}) with T >= 1")
        if actions.dtype.kind not in "iuf":
            raise DatasetError(f"{where}: field 'actions' has dtype {actions.dtype}: expected real numbers")
        steps = actions.shape[0]
        self._where = f"'data/{demo}/actions'"
        _check_action_values(where, actions[()])
        self._where = f"the attrs of 'data/{demo}'"
        if "num_samples" in attrs:
            n = attrs["num_samples"]
            if isinstance(n, bool) or not isinstance(n, int) or n != steps:
                raise DatasetError(f"{where}: attr 'num_samples' = {n!r}: expected {steps}, the rows of 'actions'")
        if "success" in attrs:
            ok = attrs["success"]
            if not isinstance(ok, (bool, int)) or not ok:
                raise DatasetError(f"{where}: attr 'success' = {ok!r}: expected True (a dataset holds successful "
                                   f"demos)")
        for key in need_attrs:
            if key not in attrs:
                raise DatasetError(f"{where}: attr {key!r} is missing{why}")
        seed = attrs.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise DatasetError(f"{where}: attr 'seed' = {seed!r}: expected an integer >= 0")
        for key in ("condition", "object"):
            if key in attrs and not isinstance(attrs[key], str):
                raise DatasetError(f"{where}: attr {key!r} = {attrs[key]!r}: expected a string")
        self._where = f"the members of 'data/{demo}'"
        found = self._fields(demo, group)
        for name, field in found.items():
            self._where = f"'data/{demo}/{field.source}'"
            _check_field(where, name, field.shape, field.dtype, steps)
            per_step = field.shape if name == "initial_state" else field.shape[1:]
            first = schema.setdefault(name, (field.dtype.kind, per_step, demo))
            if first[:2] != (field.dtype.kind, per_step):
                raise DatasetError(f"{where}: field {name!r} has shape {field.shape} ({field.dtype}): expected "
                                   f"{(steps, *first[1]) if name != 'initial_state' else first[1]} of kind "
                                   f"{first[0]!r} as in {first[2]} (one size per field in a dataset)")
            if name.startswith("next_obs/") and group[name].is_virtual:
                expected = f"/data/{demo}/obs/{name.split('/', 1)[1]}"
                for src in group[name].virtual_sources():
                    if src.file_name != "." or src.dset_name != expected:
                        raise DatasetError(f"{where}: field {name!r} is a virtual dataset of {src.file_name}:"
                                           f"{src.dset_name}: expected one of {expected} in this file (a demo "
                                           f"group renamed without DemoWriter?)")
        _check_initial_state(where, *(found[k].shape if k in found else None for k in ("states", "initial_state")))
        for name, kind in required.items():
            if name not in found:
                raise DatasetError(f"{where}: field {name!r} is missing{why}")
            shape, dtype = found[name].shape, found[name].dtype
            if kind == "image" and (len(shape) != 4 or shape[-1] != 3 or dtype != np.uint8):
                raise DatasetError(f"{where}: field {name!r} has shape {shape} ({dtype}): expected ({steps}, H, W, 3) "
                                   f"uint8 images{why}")
            if isinstance(kind, tuple) and shape[1:] != kind:
                raise DatasetError(f"{where}: field {name!r} has shape {shape}: expected {(steps, *kind)}{why}")
        for name in finite:
            if name in found:
                self._where = f"'data/{demo}/{found[name].source}'"
                if not np.isfinite(found[name].read()).all():
                    raise DatasetError(f"{where}: field {name!r} is not finite (NaN or inf); expected finite "
                                       f"values{why}")
        return steps

    def _fields(self, demo: str, group: h5py.Group) -> dict[str, _Field]:
        """The arrays of a demo group, named and shaped as in layout 2 (an older file's converted on `read`)."""
        datasets = []
        group.visititems(lambda name, obj: datasets.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
        version = self.format_version
        out = {}
        for name, ds in datasets:
            key = name[len(DATAGEN) + 1:] if name.startswith(DATAGEN + "/") else None
            if version < 2 and name == "initial_state" and ds.ndim == 1:
                out[name] = _Field((1, *ds.shape), ds.dtype, lambda ds=ds: ds[()][None], name)
            elif version < 2 and key in LEGACY_FIELDS:
                new, width = LEGACY_FIELDS[key]
                if width is None:
                    shape, dtype = ds.shape, ds.dtype
                elif ds.ndim == 2 and ds.shape[1] == width:
                    shape, dtype = (ds.shape[0], 4, 4), np.dtype(np.float32) if ds.dtype.kind in "iuf" else ds.dtype
                else:
                    raise DatasetError(f"{self.path}: {demo}: field {name!r} has shape {ds.shape}: expected (T, "
                                       f"{width}), as format_version {version} stores it")
                out[f"{DATAGEN}/{new}"] = _Field(shape, dtype, lambda ds=ds, key=key: upgrade_field(key, ds[()],
                                                                                                     version), name)
            else:
                out[name] = _Field(ds.shape, ds.dtype, lambda ds=ds: ds[()], name)
        return out

    # -- reading -----------------------------------------------------------------------------------------------
    @property
    def env_name(self) -> str | None:
        return self.env_args.get("env_name")

    @property
    def format_version(self) -> int:
        """The file's layout version (see the module docstring); `load` returns version 2 whatever it is."""
        return int(self._file_attrs.get("format_version", 0))

    @property
    def total(self) -> int:
        return int(self._data_attrs.get("total", 0))

    def __len__(self) -> int:
        return len(self.names)

    def data_attrs(self) -> dict:
        """The run-level attrs of the `data` group (as `DemoWriter.set_attr` stores them), as Python values."""
        return dict(self._data_attrs)

    def attrs(self, name: str) -> dict:
        """The attrs of demo `name` as Python values (the writer's completion marker left out)."""
        self._group(name)
        return dict(self._attrs[name])

    def load(self, name: str, only: tuple[str, ...] | None = None) -> dict:
        """The arrays of demo `name` in layout 2 (an older file's converted) as nested dicts of numpy arrays, the
        derived next_obs, rewards and dones left out: what `DemoWriter.append` takes. Checked with `validate_demo`.

        `only`: read just the fields at or under these paths (e.g. "obs/datagen_info"; `actions` always), leaving
        the rest (camera images, most of a file) on disk."""
        group = self._group(name)
        demo: dict = {}
        source = "its member list"
        wanted = None if only is None else ("actions", *only)
        try:
            for path, field in self._fields(name, group).items():
                if path.split("/")[0] in DERIVED:
                    continue
                if wanted is not None and not any(path == w or path.startswith(w + "/") for w in wanted):
                    continue
                source = field.source
                *parents, leaf = path.split("/")
                node = demo
                for key in parents:
                    node = node.setdefault(key, {})
                node[leaf] = field.read()
        except DatasetError:
            raise
        except Exception as e:
            raise DatasetError(f"{self.path}: {name}: cannot read field {source!r}: {_h5_reason(e)}; expected an "
                               f"intact HDF5 file (truncated or corrupt?)") from None
        if "actions" not in demo:
            raise DatasetError(f"{self.path}: {name}: field 'actions' is missing")
        validate_demo(demo, f"{self.path}: {name}", self.action_dim)
        return demo

    def _group(self, name: str) -> h5py.Group:
        if self._file is None:
            raise RuntimeError(f"{self.path}: the reader is closed")
        if name not in self._attrs:
            raise DatasetError(f"{self.path}: no demo 'data/{name}' (has {len(self.names)} demos)")
        return self._file["data"][name]

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


def check_dataset(path: str | os.PathLike, **needs) -> int:
    """Validate the dataset at `path` as `DemoReader` does (with the same keyword arguments, e.g. `min_demos=1`)
    and read every demo once (finding corrupt data and non-finite states); returns the number of demos. Raises
    `FileNotFoundError` or `DatasetError` naming the file and the field."""
    with DemoReader(path, **needs) as reader:
        for name in reader.names:
            reader.load(name)
        return len(reader)


def upgrade_dataset(source: str | os.PathLike, output: str | os.PathLike | None = None) -> int:
    """Write the demos of `source` (any format_version `DemoReader` reads) to `output` (default: `source` itself) in
    the current layout, with their attrs and the run-level attrs; returns the number of demos written, 0 when
    `source` is already current and is the output.

    Written by `DemoWriter` under `<output>.partial` and renamed to `output` only when complete: a run that fails
    or is interrupted leaves `source` as it was and removes the partial file (the writer starts afresh, so it holds
    nothing a later run could resume; one a killed run leaves is started over). Demos are renumbered demo_0 .. in
    file order.
    """
    source = Path(source)
    output = Path(output) if output is not None else source
    writer = None
    try:
        with DemoReader(source, min_demos=1, purpose="an upgrade copies demos") as reader:
            if reader.format_version == FORMAT_VERSION and output.resolve() == source.resolve():
                return 0
            extra = {k: v for k, v in reader.env_args.items() if k not in ("env_name", "type")}
            writer = DemoWriter(output, reader.env_name, extra, resume=False)
            for key, value in reader.data_attrs().items():
                if key not in ("total", "env_args"):
                    writer.set_attr(key, value)
            for name in reader.names:
                writer.append(reader.load(name), reader.attrs(name))
            count = len(reader)
        writer.close()  # after the reader has let go of `source`, which an upgrade in place replaces
    except BaseException:
        if writer is not None:
            writer.close(publish=False)
            writer.partial.unlink(missing_ok=True)
        raise
    return count


def _h5_reason(e: BaseException) -> str:
    """What HDF5 (or h5py) said, on one line."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_demos(path: str | os.PathLike, **needs) -> Iterator[Demo]:
    """Yield every complete demo of the file at `path` as `Demo(name, data, attrs)`; see `DemoReader` (whose
    keyword arguments `needs` are)."""
    with DemoReader(path, **needs) as reader:
        yield from reader
