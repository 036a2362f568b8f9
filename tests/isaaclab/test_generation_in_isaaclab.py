"""scripts/generate.py with an Isaac Lab task ID: the project's generators act on the Isaac Lab environment through
`CellTask`, the task's interface, and datagen's own worker runs them.

One admitted trajectory takes about 4.5 minutes here (133 control steps, played twice), too long for the suite
(docs/isaaclab.md has the measured run). So its parts are tested: the run's config; a generator's actions driving the
Isaac Lab environment (the module's `isaaclab_env`, ungrounded world) as they drive MuJoCo C; the admission rule's
outcome through `CellTask` on constructed states; and the script's whole path, with Isaac Lab's launcher, in a child
process, on an attempt its generator gives up on before the first step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from cell_states import settled_in_bin
from conftest import ROOT

from r2s2r.core import ConfigError, parse_dotted
from r2s2r.datagen import make_generate_cfg
from r2s2r.datagen.worker import attempt_condition, attempt_seed
from r2s2r.tasks.pick_sort.env import PickSortEnv

TASK = "Isaac-R2S2R-PickSort-Ungrounded-v0"
MUJOCO_TASK = "R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0"  # the same world and generator on MuJoCo C
RUN_SEED = 10  # its attempt 0 is admitted on both physics (133 steps on Newton, 131 on MuJoCo C)
STEPS = 45  # control steps compared: the planner holds the arm for 35, then moves the hand 0.2 m toward the object


def test_run_config_of_an_isaaclab_task():
    cfg = make_generate_cfg(TASK, 2, 5, parse_dotted(["env.cameras=[right_wrist]", "env.image_size=[32,32]"]),
                            "planner")
    assert cfg.isaaclab and cfg.generator_name == "planner" and cfg.env.world == "ungrounded"
    assert cfg.env.cameras == ("right_wrist",) and cfg.env.image_size == (32, 32) and cfg.device is None
    assert "device" not in cfg.describe()  # so a MuJoCo run's digest (and its resumable shards) did not change
    from r2s2r.isaaclab_tasks.pick_sort.task import generation_env_cfg

    assert generation_env_cfg(cfg).renderer == "newton_warp"  # kit-less by default
    rtx = make_generate_cfg(TASK, 2, 5, parse_dotted(["env.renderer=isaac_rtx"]), "planner")
    assert generation_env_cfg(rtx).renderer == "isaac_rtx" and rtx.digest() != cfg.digest()
    on_gpu = make_generate_cfg(TASK, 2, 5, {}, "planner", "cuda:0")
    assert on_gpu.describe()["device"] == "cuda:0"
    assert on_gpu.digest() != make_generate_cfg(TASK, 2, 5, {}, "planner").digest()
    assert not make_generate_cfg(MUJOCO_TASK, 2, 5).isaaclab


def test_rtx_cameras_start_kit_before_any_environment_is_built(tmp_path, caplog):
    """generate.py's launch of a run with env.renderer=isaac_rtx: Isaac Lab's launcher goes to start Kit (here it
    stops: no Isaac Sim) before the environment is built or anything is written."""
    from conftest import script_module

    from r2s2r.isaaclab_tasks.pick_sort.task import generation_env_cfg

    output = tmp_path / "x.hdf5"
    generate = script_module("generate.py")
    args = generate.parse_args(["--task", TASK, "--generator", "planner", "--num-trajectories", "1", "--output",
                                str(output), "--viz", "none", "env.renderer=isaac_rtx", "env.cameras=[head_left]"])
    cfg = make_generate_cfg(args.task, 1, 0, parse_dotted(args.overrides), args.generator)
    assert generation_env_cfg(cfg).renderer == "isaac_rtx"
    with pytest.raises(SystemExit), generate.simulation(cfg, args):
        pytest.fail("the launcher let the run start without Kit")
    assert args.require_kit and "Isaac Sim is not installed" in caplog.text and not output.exists()


@pytest.mark.parametrize("task, generator, overrides, device, message", [
    (TASK, None, [], None, "generator = None: Isaac Lab task 'Isaac-R2S2R-PickSort-Ungrounded-v0' names a world only"),
    (TASK, "scripted", [], None, "expected 'mimic' (grounded behaviour"),
    (TASK, "planner", ["env.control_hz=10"], None, "env.control_hz: the Isaac Lab environment takes only env.cameras"),
    (TASK, "planner", ["env.renderer=mujoco_gl"], None, "env.renderer = 'mujoco_gl': an Isaac Lab task renders with"),
    ("Isaac-R2S2R-PickSort-Twin-v0", "planner", [], None, "has no behaviour generator"),
    ("Isaac-R2S2R-PickSort-Residual-Grounded-v0", "planner", [], None, "has no behaviour generator"),
    (MUJOCO_TASK, "mimic", [], None, "binds generator 'planner'"),
    (MUJOCO_TASK, None, [], "cpu", "device = 'cpu': task"),
    ("Isaac-Nope-v0", "planner", [], None, "unknown task ID; expected one of"),
])
def test_run_config_refuses_naming_the_field(task, generator, overrides, device, message):
    with pytest.raises(ConfigError) as error:
        make_generate_cfg(task, 1, 0, parse_dotted(overrides), generator, device)
    assert message in str(error.value)


@pytest.fixture
def task(isaaclab_env, monkeypatch):
    from r2s2r.isaaclab_tasks.pick_sort.task import CellTask

    monkeypatch.setattr(isaaclab_env.cfg, "action_mode", "ee_pose")  # the module's environment, in this test only
    return CellTask(isaaclab_env)


def test_generator_actions_drive_the_isaaclab_env_as_they_drive_mujoco(task):
    """The planner plans on the Isaac Lab environment's observation of the attempt's episode; its `ee_pose` actions,
    turned into joint targets by the reference's IK, move the arm there as the same actions move it on MuJoCo C."""
    from r2s2r.behavior import make_generator

    cfg = make_generate_cfg(TASK, 1, RUN_SEED, {}, "planner")
    seed, condition = attempt_seed(RUN_SEED, 0), attempt_condition(cfg, 0)
    mujoco = PickSortEnv(world="ungrounded", cameras=())
    expected, want = mujoco.reset(seed=seed, options={"condition": condition})
    obs, info = task.reset(seed=seed, options={"condition": condition})
    assert condition == "novel_objects" and task.obj in task.cell.novel_objects  # the condition reached the episode
    assert {k: info[k] for k in ("object", "colour", "belt_speed", "condition")} == \
        {k: want[k] for k in ("object", "colour", "belt_speed", "condition")}
    assert np.allclose(obs["privileged"]["object_pos"], expected["privileged"]["object_pos"], atol=1e-6)
    planner = make_generator("planner")
    attrs = planner.reset(task, obs, np.random.default_rng(0))
    assert attrs["meet_time"] > 0
    start = obs["proprio"]["ee_pose"][:3]
    worst = {"arm_q": 0.0, "ee_pos": 0.0, "object_pos": 0.0}
    for _ in range(STEPS):
        action = planner(obs)
        obs, _, terminated, truncated, info = task.step(action)
        expected, _, *_ = mujoco.step(action)
        assert not (terminated or truncated) and info["time"] == pytest.approx(task.steps / 20.0)
        for key, a, b in (("arm_q", obs["proprio"]["arm_q"], expected["proprio"]["arm_q"]),
                          ("ee_pos", obs["proprio"]["ee_pose"][:3], task.ik.site_pose(expected["proprio"]["arm_q"])[0]),
                          ("object_pos", obs["privileged"]["object_pos"], mujoco.state()[mujoco.obj_qadr:][:3])):
            worst[key] = max(worst[key], float(np.abs(a - b).max()))
    print(f"Isaac Lab vs MuJoCo C over {STEPS} planner steps: {worst}")
    assert np.linalg.norm(obs["proprio"]["ee_pose"][:3] - start) > 0.1  # the actions moved the arm
    assert worst["arm_q"] < 1e-4 and worst["ee_pos"] < 1e-4 and worst["object_pos"] < 1e-4
    state = task.state()  # what the recording stores: MuJoCo's qpos | qvel of the state observed
    assert state.shape == (mujoco.model.nq + mujoco.model.nv,)
    assert np.array_equal(state[task.index.arm_qadr], obs["proprio"]["arm_q"])


def _episode(seed: int) -> tuple[str, str]:
    ref = PickSortEnv(world="ungrounded", cameras=())
    _, info = ref.reset(seed=seed)
    return info["object"], info["colour"]


@pytest.mark.parametrize("own, outcome", [(True, "success"), (False, "wrong_bin")])
def test_admission_is_the_tasks_outcome_for_the_ended_episode(task, isaaclab_env, own, outcome):
    """An object at rest in its own bin is a success, in another bin `wrong_bin`, as MuJoCo C's environment judges it; the
    info names the episode that ended, although Isaac Lab has already reset to the next (seed + 1)."""
    seed = next(s for s in range(50) if _episode(s) != _episode(s + 1))
    obs, _ = task.reset(seed=seed)
    isaaclab_env.set_state(settled_in_bin(seed, own)[0])
    proprio = task.observe()["proprio"]
    hold = np.concatenate([proprio["ee_pose"], proprio["hand_q"]])  # the grasp site where it is
    _, reward, terminated, truncated, info = task.step(hold)
    assert terminated and not truncated
    assert (info["success"], info["failure"], reward) == ((True, None, 1.0) if own else (False, outcome, 0.0))
    assert (info["object"], info["colour"]) == _episode(seed)
    assert (task.obj.name, task.colour) == _episode(seed + 1)


def test_generate_script_runs_an_isaaclab_task_under_the_launcher(tmp_path):
    """The whole path in a child process (one simulation per process): the launcher, the worker's Isaac Lab
    environment, an attempt its planner gives up on (no interception within a reach moved out of the arm's way),
    counted, its shard kept, no dataset published."""
    out = tmp_path / "sim.hdf5"
    log = tmp_path / "chunks.jsonl"
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate.py"), "--task", TASK, "--generator", "planner", "--output",
         str(out), "--num-trajectories", "1", "--seed", str(RUN_SEED), "--no-progress", "--log-json", str(log),
         "--device", "cpu", "env.cameras=[]", "datagen.chunk_size=1", "datagen.max_attempts=1",
         "generator.reach_x=[3.0,3.1]", "generator.max_grasps=1"],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "only 0 of 1 trajectories" in result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["task"] == TASK and summary["generator"] == "planner"
    assert (summary["attempts"], summary["reasons"]) == (1, {"unreachable": 1})
    chunk = json.loads(log.read_text())
    assert (chunk["task"], chunk["attempted"], chunk["rejected"]) == (TASK, 1, {"unreachable": 1})
    assert not out.exists() and (tmp_path / "sim.hdf5.shards" / "chunk_000000.hdf5").exists()
    run = json.loads((tmp_path / "sim.hdf5.shards" / "run.json").read_text())
    assert run["task"] == TASK and run["device"] == "cpu" and run["env"]["world"] == "ungrounded"


def test_a_dataset_of_an_isaaclab_task_is_read_and_its_task_not_remade_on_mujoco(tmp_path):
    """The dataset's task is the Isaac Lab ID: the demo reader (training, conversion, export) accepts it, and the
    tools that re-simulate on MuJoCo (replay.py, render_states.py) refuse it by name."""
    import r2s2r.tasks as tasks
    from r2s2r.data import DemoReader, DemoWriter

    path = tmp_path / "sim.hdf5"
    with DemoWriter(path, TASK, {"world": "ungrounded"}):
        pass
    with DemoReader(path) as reader:
        assert reader.env_name == TASK and reader.env_args["world"] == "ungrounded"
    with pytest.raises(ConfigError, match=f"'{TASK}': an Isaac Lab task ID.*same world: R2S2R-PickSort-WorldUngr"):
        tasks.make(TASK)
