"""Sampled truths grounded once per test run, shared by the tolerance test (truths 0 and 1) and the pipeline tests
(truth 0): for each, a whole calibration session recorded on the truth's twin and grounded by calibrate.py, through
`benchmarks/bench_grounding.py`'s own `ground`, so that CI checks exactly what
`bench_grounding.py --sampled 2 --seed 0 --views 12 --fisheye-views 16 --arm-poses 80 --check` checks. The sessions
are smaller than the recorder's defaults (30 and 60 views, 150 arm poses) to halve the run's cost; every parameter
still passes its tolerance on both truths with at least a third of the tolerance to spare (docs/world_grounding.md),
so a regression in any estimator shows. Whichever pytest-xdist worker asks first builds a truth (`built_once`); the
tolerance test asks for truth 1 first, so the two workers ground one truth each."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT, built_once
from r2s2r.cell.world import World, load_world
from r2s2r.files import write_text_atomic
from r2s2r.real.truths import sample_truth, truth_text

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_grounding  # noqa: E402

SESSION = {"views": 12, "fisheye_views": 16, "arm_poses": 80}


@dataclass(frozen=True)
class GroundedTruth:
    truth: World
    session: Path
    grounded: Path  # absent when calibration stopped
    errors: dict  # parameter -> item -> error, as bench_grounding reports it
    stopped: str | None


def grounded_truth(tmp_path_factory, seed: int) -> GroundedTruth:
    name = f"truth_{seed:06d}"

    def build(folder: Path) -> None:
        truth = folder / f"{name}.yaml"
        write_text_atomic(truth, truth_text(sample_truth(seed, load_world("ungrounded").data)))
        errors, record_s, calibrate_s, stopped = bench_grounding.ground(truth, folder, **SESSION)
        write_text_atomic(folder / "result.json", json.dumps({"errors": errors, "stopped": stopped,
                                                               "record_s": record_s, "calibrate_s": calibrate_s}))

    folder = built_once(tmp_path_factory, f"grounded_{name}", build)
    result = json.loads((folder / "result.json").read_text())
    return GroundedTruth(load_world(folder / f"{name}.yaml"), folder / f"{name}_session.h5",
                         folder / f"{name}_grounded.yaml", result["errors"], result["stopped"])
