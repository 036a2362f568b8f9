"""The replay check: re-execute a dataset's stored actions from its stored initial states, count the successes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from r2s2r.data.hdf5 import DatasetError, DemoReader


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
    with DemoReader(path) as reader:
        env_args = reader.env_args
        env = tasks.make(reader.env_name, cameras=(), control_hz=float(env_args.get("control_hz", 20.0)),
                         action_mode=env_args.get("action_mode", "ee_pose"))
        try:
            for name in tqdm(reader.names[:limit], desc="replaying", unit="demo", disable=not progress):
                attrs = reader.attrs(name)
                demo = reader.load(name)
                if "initial_state" not in demo or "seed" not in attrs:
                    raise DatasetError(f"{path}: {name}: needs 'initial_state' and a 'seed' attr to be replayed")
                env.reset(seed=int(attrs["seed"]), options={"condition": attrs.get("condition", "nominal")})
                env.set_state(demo["initial_state"])
                info = {"success": False, "failure": "no steps"}
                for action in np.asarray(demo["actions"]):
                    _, _, terminated, truncated, info = env.step(action)
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
