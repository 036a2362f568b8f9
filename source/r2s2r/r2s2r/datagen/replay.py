"""The replay check: re-execute a dataset's stored actions from its stored initial states, count the successes.

A dataset generated with corrective noise (`datagen.corrective_noise`) stores the generator's clean commands as its
actions; the replay adds each attempt's offset again (drawn from the run's seed and the attempt's index), as the
attempt executed them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from r2s2r.data.hdf5 import STATE_FIELDS, DatasetError, DemoReader
from r2s2r.datagen.worker import attempt_noise


@dataclass
class ReplayReport:
    path: str
    replayed: int = 0
    succeeded: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # demo name -> why

    @property
    def rate(self) -> float:
        return self.succeeded / self.replayed if self.replayed else 0.0


def replay_dataset(path: str | os.PathLike, limit: int | None = None, progress: bool = False) -> ReplayReport:
    """Reset the dataset's task with each demo's seed and condition, restore `initial_state`, step `actions`."""
    import r2s2r.tasks as tasks

    report = ReplayReport(str(path))
    with DemoReader(path, min_demos=1, fields=("initial_state",), attrs=("seed",), finite=STATE_FIELDS,
                    purpose="replay restores the initial state and resets the task with the seed") as reader:
        env_args = reader.env_args
        control_hz = float(env_args.get("control_hz", 20.0))
        datagen = json.loads(reader.data_attrs().get("generation_config", "{}")).get("datagen", {})
        env = tasks.make(reader.env_name, cameras=(), control_hz=control_hz,
                         action_mode=env_args.get("action_mode", "ee_pose"))
        try:
            check_state_width(reader, "initial_state", env)
            for name in tqdm(reader.names[:limit], desc="replaying", unit="demo", disable=not progress):
                attrs = reader.attrs(name)
                demo = reader.load(name)
                env.reset(seed=int(attrs["seed"]), options={"condition": attrs.get("condition", "nominal")})
                env.set_state(demo["initial_state"][0])  # (1, N): one state, with the episode axis
                info = {"success": False, "failure": "no steps"}
                noise = attempt_noise(datagen.get("corrective_noise", (0.0,)), datagen.get("corrective_tau", 1.0),
                                      int(datagen.get("seed", 0)), int(attrs.get("attempt", 0)), control_hz)
                for action in np.asarray(demo["actions"]):
                    _, _, terminated, truncated, info = env.step(action if noise is None else noise(action))
                    if terminated or truncated:
                        break
                report.replayed += 1
                if info["success"]:
                    report.succeeded += 1
                else:
                    report.failures[name] = info["failure"] or "not finished when the actions ran out"
        finally:
            env.close()
    return report


def check_state_width(reader: DemoReader, key: str, env) -> None:
    """The stored states (`key` of every demo: the reader holds one width per field) must be qpos | qvel of the
    task's model: states of another cell, robot or simulator would fail in `set_state` halfway through the file."""
    width = env.model.nq + env.model.nv
    stored = np.shape(reader.load(reader.names[0], only=(key,))[key])[1]
    if stored != width:
        raise DatasetError(f"{reader.path}: field {key!r} holds states of {stored} values: expected {width}, qpos "
                           f"({env.model.nq}) | qvel ({env.model.nv}) of task {reader.env_name}'s model (states "
                           f"recorded on another cell or simulator?)")


def render_dataset(source: str | os.PathLike, output: str | os.PathLike, cameras: tuple[str, ...],
                   image_size: tuple[int, int] | None = None, progress: bool = False) -> int:
    """Write `output`: the demos of `source` with the views of `cameras` rendered again from their stored states
    (robomimic's states-to-observations): after a camera is remounted, added or resized, a simulated dataset, or
    one recorded on the reality twin, gets the views it would have had. Each demo's task is reset with its seed and
    condition (lighting, colours), every stored state is restored and the cameras observe it, sensor noise
    included. Other fields are copied unchanged. Resumable: demos already in `output` are skipped. Returns how many
    demos were rendered now."""
    import r2s2r.tasks as tasks
    from r2s2r.data.hdf5 import DemoWriter

    source = Path(source)
    # Every check that can refuse the source runs before the writer makes `output`'s partial file.
    with DemoReader(source, min_demos=1, fields=("states",), attrs=("seed",), finite=STATE_FIELDS,
                    purpose="its views are rendered from the stored states, the task reset with the seed") as reader:
        env_args = dict(reader.env_args)
        size = tuple(image_size) if image_size else tuple(env_args.get("image_size", (128, 128)))
        recorded = tuple(env_args.get("cameras", ()))
        if recorded and tuple(env_args.get("image_size", size)) != size:
            raise DatasetError(f"--image-size {list(size)}: {source} holds {list(recorded)} at "
                               f"{env_args.get('image_size')}; expected the same size for every camera")
        extra = {k: v for k, v in env_args.items() if k not in ("env_name", "type")}
        extra.update(cameras=sorted(set(recorded) | set(cameras)), image_size=list(size))
        env = tasks.make(reader.env_name, cameras=tuple(cameras), image_size=size,
                         control_hz=float(env_args.get("control_hz", 20.0)))
        done = 0
        try:
            recorded_truth = env_args.get("reality_file")
            if recorded_truth and env.world is not None and env.world.path.name != recorded_truth:
                raise DatasetError(f"{source}: recorded on the twin with truth file {recorded_truth!r}, but the twin "
                                   f"runs {env.world.path.name!r}; point R2S2R_REALITY_FILE at the recorded one")
            check_state_width(reader, "states", env)
            with DemoWriter(output, reader.env_name, extra) as writer:
                have = {a.get("rendered_from") for a in writer.demo_attrs()}
                todo = [n for n in reader.names if n not in have]
                for name in tqdm(todo, desc="rendering states", unit="demo", disable=not progress):
                    demo, attrs = reader.load(name), reader.attrs(name)
                    states = demo["states"]
                    env.reset(seed=int(attrs["seed"]), options={"condition": attrs.get("condition", "nominal")})
                    frames = {c: [] for c in cameras}
                    for state in np.asarray(states):
                        env.set_state(state)
                        images = env.observe()["images"]
                        for c in cameras:
                            frames[c].append(images[c])
                    demo["obs"].update({c: np.stack(v) for c, v in frames.items()})
                    writer.append(demo, {**attrs, "rendered_from": name})
                    done += 1
        finally:
            env.close()
    return done
