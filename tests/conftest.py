"""Fixtures shared across test folders."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pytest.ini): one worker per core, plus one. A fifth of the suite's time a worker waits, not computes
    (on the scripts and Ray nodes it starts, on sockets): with one worker per core the cores idled that long
    (docs/benchmarks.md)."""
    return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked `slow` first (in collection order otherwise): a minute-long set-up that starts last keeps one
    worker busy after the others have run out of files."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def run_script(name: str, *args: str, timeout: float = 600, cwd: Path = ROOT,
               code: str | None = None) -> subprocess.CompletedProcess:
    """Run `scripts/<name> args` as a user would, from `cwd` (the repository root unless given), without a test's
    R2S2R_REALITY_FILE; with `code`, that Python runs first in the script's process."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    env.pop("R2S2R_REALITY_FILE", None)
    path = str(ROOT / "scripts" / name)
    command = [sys.executable, path, *args] if code is None else [
        sys.executable, "-c", f"{code}\nimport runpy, sys\nsys.argv = {[path, *args]!r}\n"
        f"runpy.run_path({path!r}, run_name='__main__')"]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def script_module(name: str):
    """`scripts/<name>` loaded as a module, not run: its functions, and its main(argv) for a run in this process."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / "scripts" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script_in_process(name: str, *args: str, cwd: Path, monkeypatch, capsys) -> tuple[int, str]:
    """`scripts/<name> args` executed as `python` runs a script (as `__main__`, with `sys.argv`), but in this process,
    from `cwd` and without R2S2R_REALITY_FILE: (exit status, stderr). Any exception other than SystemExit
    propagates (run as a program it would have ended in a traceback), so the test fails on it. For checks that end
    before any work (arguments, output paths, malformed files), where a subprocess per case would mostly measure
    interpreter start-up, and for further runs of a script one subprocess run already tests; not for Hydra
    applications (train.py)."""
    import runpy

    monkeypatch.chdir(cwd)
    monkeypatch.delenv("R2S2R_REALITY_FILE", raising=False)
    path = str(ROOT / "scripts" / name)
    monkeypatch.setattr(sys, "argv", [path, *args])
    capsys.readouterr()
    try:
        runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder `build` fills once per test run and every pytest-xdist worker reuses: the first worker to ask builds
    it under a lock while the others wait (session fixtures are otherwise per worker)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's temporary root, common to its workers
    folder, done = root / name, root / f"{name}.complete"
    with FileLock(root / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder


def moved_cell(model, belt_speed: float, cube_pose, drive_offset: float, steps: int):
    """A non-trivial MjData of the cell: from home, the belt driven at `belt_speed` with the cube placed at
    `cube_pose` (x, y, z, quaternion w, x, y, z), every other drive commanded `drive_offset` away from home (within
    its range), then `steps` physics steps."""
    import mujoco
    import numpy as np

    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    belt = model.actuator("belt_drive").id
    data.ctrl[belt] = belt_speed
    adr = model.jnt_qposadr[model.body("obj_cube").jntadr[0]]
    data.qpos[adr:adr + 7] = cube_pose
    for a in range(model.nu):
        if a != belt:
            lo, hi = model.actuator_ctrlrange[a]
            data.ctrl[a] = np.clip(data.ctrl[a] + drive_offset, lo, hi)
    for _ in range(steps):
        mujoco.mj_step(model, data)
    mujoco.mj_forward(model, data)
    return data

@pytest.fixture(scope="session", autouse=True)
def frame_cache(tmp_path_factory):
    """Decoded frames of the tests' datasets are cached in this run's temporary folder, not the user's cache (each
    worker its own; the scripts it runs inherit it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("R2S2R_FRAME_CACHE", str(tmp_path_factory.getbasetemp() / "frame_cache"))
        yield tmp_path_factory.getbasetemp() / "frame_cache"


@pytest.fixture(scope="session")
def real_demos(tmp_path_factory) -> Path:
    """Eight teleoperated demos recorded on the reality twin (no images), as collect_real.py writes them (its main()
    in this process: the data is what is wanted here, not another interpreter's start)."""

    def record(folder: Path) -> None:
        args = ["--num-demos", "8", "--output", str(folder / "real.hdf5"), "--cameras", "--seed", "0"]
        assert script_module("collect_real.py").main(args) == 0

    return built_once(tmp_path_factory, "real_demos", record) / "real.hdf5"


@pytest.fixture(scope="session")
def policy_datasets(tmp_path_factory) -> dict[str, Path]:
    """A real and a simulated dataset with one small camera (right_wrist, 32x32), as a policy trains on: two
    teleoperated demos from the twin and two planner trajectories from the grounded world. Seed 1 starts where the
    operator keeps both demos (seed 0 gives up: an attempt rendered for nothing), and chunks of two attempts make
    no more than the two trajectories asked for (the default chunk is four). Both scripts' main() run in this
    process."""

    def record(folder: Path) -> None:
        assert script_module("collect_real.py").main([
            "--num-demos", "2", "--output", str(folder / "real.hdf5"), "--image-size", "32", "--cameras", "right_wrist",
            "--seed", "1"]) == 0
        assert script_module("generate.py").main([
            "--task", "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0", "--num-trajectories", "2", "--output",
            str(folder / "sim.hdf5"), "--no-progress", "env.cameras=[right_wrist]", "env.image_size=[32,32]",
            "datagen.chunk_size=2"]) == 0

    out = built_once(tmp_path_factory, "policy_data", record)
    return {"real": out / "real.hdf5", "sim": out / "sim.hdf5"}


def tiny_train_overrides(run_dir: Path, datasets: list[tuple[Path, float]], steps: int = 6) -> list[str]:
    """train.py overrides for a tiny policy on `datasets` [(path, weight)] (right_wrist at 32x32)."""
    listed = ", ".join(f"{{path: {p}, weight: {w}}}" for p, w in datasets)
    return [f"run_dir={run_dir}", f"steps={steps}", "batch_size=8", "log_every=2", "checkpoint_every=3",
            f"data.datasets=[{listed}]", "policy.cameras=[right_wrist]", "policy.image_size=[32,32]", "policy.dim=32",
            "policy.heads=2", "policy.obs_layers=1", "policy.action_layers=1", "policy.chunk=8", "policy.execute=4",
            "optim.warmup_steps=2", "threads=1"]


def dataset_contents(path) -> list[tuple[int, dict]]:
    """Every demo of a generated dataset as (attempt index, its arrays), in file order."""
    from r2s2r.data import DemoReader

    with DemoReader(path) as reader:
        return [(reader.attrs(n)["attempt"], reader.load(n)) for n in reader.names]


def assert_same_demos(a: list[tuple[int, dict]], b: list[tuple[int, dict]]) -> None:
    """Two `dataset_contents` hold the same attempts with identical actions, states and wrist images."""
    import numpy as np

    assert [x[0] for x in a] == [x[0] for x in b]
    for (_, da), (_, db) in zip(a, b):
        np.testing.assert_array_equal(da["actions"], db["actions"])
        np.testing.assert_array_equal(da["states"], db["states"])
        np.testing.assert_array_equal(da["obs"]["right_wrist"], db["obs"]["right_wrist"])


@pytest.fixture(scope="module")
def isaaclab_env():
    """The cell as an Isaac Lab environment (ungrounded world), one per test module, closed at the module's end: Isaac
    Lab runs one simulation at a time in a process, and modules that build environments of their own (several, or
    with cameras) build them in this process too. The first build in a process takes about 30 s with Warp's kernel
    cache warm (about 4 minutes more on a first run), later ones about a second; every test that steps it resets it
    first."""
    import r2s2r.isaaclab_tasks  # noqa: F401  (registers the IDs)
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

    env = PickSortCellEnv(parse_env_cfg("Isaac-R2S2R-PickSort-Ungrounded-v0"))
    yield env
    env.close()
