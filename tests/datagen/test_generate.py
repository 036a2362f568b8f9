import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import ROOT, assert_same_demos, dataset_contents, run_script, run_script_in_process

from r2s2r.data import DemoReader, DemoWriter
from r2s2r.datagen import generate, make_generate_cfg
from r2s2r.datagen.replay import replay_dataset

pytestmark = pytest.mark.slow

TASK = "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0"
SMALL = ["env.cameras=[right_wrist]", "env.image_size=[16,16]", "datagen.chunk_size=2"]


def cfg_for(real_demos, n=3, extra=()):
    from r2s2r.core import parse_dotted

    return make_generate_cfg(TASK, n, 11, parse_dotted([*SMALL, f"generator.source={real_demos}", *extra]))


@pytest.fixture(scope="module")
def serial(real_demos, tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "sim.hdf5"
    summary = generate(cfg_for(real_demos), out, progress=False)
    return out, summary


def test_generated_dataset_holds_admitted_trajectories_that_replay(serial):
    out, summary = serial
    assert summary.trajectories == 3 and summary.attempts >= 3
    assert sum(summary.reasons.values()) == summary.attempts and summary.reasons["admitted"] == summary.admitted
    assert not Path(str(out) + ".shards").exists()
    written = 0
    with DemoReader(out) as reader:
        assert reader.env_name == TASK and len(reader) == 3
        for name in reader.names:
            attrs, demo = reader.attrs(name), reader.load(name)
            written += len(demo["actions"])
            assert attrs["success"] and attrs["generator"] == "mimic" and attrs["source_demo"].startswith("demo_")
            assert attrs["world_file"] == "grounded.yaml" and len(attrs["world_sha256"]) == 64
            steps = len(demo["actions"])
            assert demo["obs"]["right_wrist"].shape == (steps, 16, 16, 3) and demo["states"].shape[0] == steps
            np.testing.assert_array_equal(demo["initial_state"], demo["states"][:1])
            assert demo["obs"]["datagen_info"]["subtask_term_signals"]["carry"][-1]
        stored = json.loads(reader.data_attrs()["generation_summary"])
        assert stored["trajectories"] == 3
        # env.renderer="auto" (the default) is decided before the run and stated with the data.
        assert reader.env_args["renderer"] == stored["renderer_choice"]["renderer"] in ("mujoco_gl", "mujoco_warp")
    assert 0 < summary.plan_s < summary.seconds  # the generator's own time, recorded per attempt
    assert 0 < summary.physics_s < summary.seconds  # the physics' time, recorded per attempt
    # The physics of every attempt is counted (benchmarks/bench_datagen.py's bare cost), the written ones' included.
    assert summary.steps >= written > 0
    # The frames rendered: every admitted attempt's, the written ones' and those of any surplus admitted ones.
    assert summary.admitted_steps >= written and (summary.admitted_steps == written) == (summary.admitted == 3)
    assert summary.steps >= summary.admitted_steps
    report = replay_dataset(out)
    assert report.replayed == 3 and report.succeeded == 3


def test_views_rendered_from_the_stored_states_are_those_rendered_during_the_steps(serial, real_demos):
    """The oracle: the demo's actions stepped again on a camera environment, each view rendered inside its step.
    The first view and everything but the views are identical; the later views differ only where MuJoCo's
    kinematics lag the step's integration by one substep (2 ms): edge pixels of moving parts."""
    from r2s2r.tasks.pick_sort.env import PickSortEnv

    out, _ = serial
    env = PickSortEnv(cfg_for(real_demos).env)
    try:
        with DemoReader(out) as reader:
            attrs, demo = reader.attrs(reader.names[0]), reader.load(reader.names[0])
        obs, _ = env.reset(seed=attrs["seed"], options={"condition": attrs["condition"]})
        views, states = [], []
        for action in demo["actions"]:
            views.append(obs["images"]["right_wrist"])
            states.append(env.state())
            obs, *_ = env.step(action)
    finally:
        env.close()
    np.testing.assert_array_equal(np.stack(states), demo["states"])
    oracle, stored = np.stack(views).astype(float), demo["obs"]["right_wrist"].astype(float)
    np.testing.assert_array_equal(stored[0], oracle[0])
    differs = np.abs(stored - oracle).max(axis=-1) > 10
    a_step_apart = np.abs(stored[1:] - oracle[:-1]).max(axis=-1) > 10  # the same comparison, 50 ms off
    assert differs.mean() < 0.02 and a_step_apart.mean() > 5 * differs.mean(), (differs.mean(), a_step_apart.mean())


def test_a_killed_run_resumes_on_two_workers_to_the_same_dataset(serial, real_demos, tmp_path, monkeypatch, capsys):
    """One worker killed after its first shard, the rest on two workers: the serial run's dataset, the finished
    shard kept. Chunks are the unit of determinism, so this covers any split of the chunks between workers."""
    out = tmp_path / "sim.hdf5"
    args = [sys.executable, str(ROOT / "scripts" / "generate.py"), "--task", TASK, "--num-trajectories", "3",
            "--seed", "11", "--output", str(out), "--no-progress", *SMALL, f"generator.source={real_demos}"]
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "MUJOCO_GL": "egl"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    first = tmp_path / "sim.hdf5.shards" / "chunk_000000.hdf5"
    deadline = time.monotonic() + 240
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists() and not out.exists()
    kept = first.stat().st_mtime_ns
    # The rerun's driver in this process (its two workers are processes of their own): the killed run was the
    # script run as a program.
    code, stderr = run_script_in_process("generate.py", *args[2:], "--num-workers", "2", "--keep-shards", cwd=tmp_path,
                                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, stderr
    assert_same_demos(dataset_contents(serial[0]), dataset_contents(out))
    assert first.stat().st_mtime_ns == kept  # the finished shard was kept, not redone


def test_bad_input_fails_before_any_work(real_demos, tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    out = tmp_path / "sim.hdf5"

    def run(*args):  # in this process (the first case below runs as a program): every check ends before any work
        code, stderr = run_script_in_process("generate.py", "--output", str(out), "--num-trajectories", "2", *args,
                                             cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
        assert "Traceback" not in stderr, stderr
        return SimpleNamespace(returncode=code, stderr=stderr)

    r = run_script("generate.py", "--output", str(out), "--num-trajectories", "2", "--task", "R2S2R-PickSort-Nope-v0",
                   timeout=120)
    assert r.returncode == 2 and "unknown task ID" in r.stderr and "Traceback" not in r.stderr
    r = run("--task", "R2S2R-PickSort-v0")
    assert r.returncode == 2 and "has no behaviour generator" in r.stderr
    r = run("--task", TASK, "generator.source=/nonexistent/real.hdf5")
    assert r.returncode == 2 and "/nonexistent/real.hdf5" in r.stderr
    (tmp_path / "junk.hdf5").write_bytes(b"junk")
    r = run("--task", TASK, f"generator.source={tmp_path / 'junk.hdf5'}")
    assert r.returncode == 2 and "not an HDF5 file" in r.stderr
    unsignalled = tmp_path / "unsignalled.hdf5"
    unsignalled.write_bytes(real_demos.read_bytes())
    with h5py.File(unsignalled, "a") as f:  # neither stored subtask signals nor the hand targets to find them from
        del f["data/demo_2/obs/datagen_info/subtask_term_signals"]
        del f["data/demo_2/obs/datagen_info/gripper_action"]
    r = run("--task", TASK, f"generator.source={unsignalled}")
    assert r.returncode == 2 and "demo_2: obs/datagen_info/gripper_action/right is missing" in r.stderr
    r = run("--task", TASK, "generator.nn_k=0", f"generator.source={real_demos}")
    assert r.returncode == 2 and "generator.nn_k = 0" in r.stderr
    r = run("--task", TASK, "env.nope=1", f"generator.source={real_demos}")
    assert r.returncode == 2 and "env.nope: unknown field" in r.stderr
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code, stderr = run_script_in_process("generate.py", "--task", TASK, "--output", str(blocker / "sim.hdf5"),
                                         f"generator.source={real_demos}", cwd=tmp_path, monkeypatch=monkeypatch,
                                         capsys=capsys)
    assert code == 2 and f"argument --output: {str(blocker / 'sim.hdf5')!r}: {str(blocker)!r} is a file" in stderr
    with DemoWriter(out, "R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0") as w:
        w.append({"actions": np.zeros((2, 27))})
    r = run("--task", TASK, f"generator.source={real_demos}")
    assert r.returncode == 2 and "made by task 'R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0'" in r.stderr
    assert not Path(str(out) + ".shards").exists()


# The same run on a Ray cluster (mimic from these demos, the same dataset as one process): tests/datagen/
# test_ray_cluster.py, on two nodes that cannot see the output folder.
