"""The scripts the Isaac Lab way: each runs under `isaaclab -p`; those that run the cell's Isaac Lab tasks take Isaac
Lab 3.0's launcher options (`add_launcher_args`) and run under `launch_simulation`, which starts Kit only where a
config needs it; the MuJoCo tasks never import Isaac Lab. Isaac Sim (Kit) is not installed here, so "Kit was
started" shows as its launcher's exit naming the missing Isaac Sim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py"))
SIMULATOR_SCRIPTS = ("debug_gui.py", "generate.py", "play.py")  # those that run an Isaac Lab task of the cell
LAUNCHER_OPTIONS = ("--device", "--visualizer", "--kit_args", "--livestream")  # a few of add_launcher_args'
ISAACLAB = Path(sys.executable).parent / "isaaclab"  # Isaac Lab's command, installed beside this Python
TASK = "Isaac-R2S2R-PickSort-Ungrounded-v0"
# Keys launch_simulation reads from the namespace besides the launcher's own options; a script option with one of
# these destinations would steer the launcher (e.g. `physics` replaces every physics config).
LAUNCHER_KEYS = ("physics", "require_kit", "visualizer_intent", "headless", "enable_cameras", "distributed")


def isaaclab_p(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`isaaclab -p <args>` from the repository root, as a user runs a script under Isaac Lab."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    return subprocess.run([str(ISAACLAB), "-p", *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help_under_isaaclab_p(script):
    result = isaaclab_p(f"scripts/{script}", "--help")
    assert result.returncode == 0, result.stderr
    # The script's own help, not Isaac Lab's: argparse's usage line, or Hydra's help for the Hydra app.
    own = "Data presets (data=...)" if script == "train.py" else f"usage: {script}"
    assert own in result.stdout
    launcher = [o for o in LAUNCHER_OPTIONS if o in result.stdout]
    assert launcher == (list(LAUNCHER_OPTIONS) if script in SIMULATOR_SCRIPTS else [])


def test_parity_module_takes_the_launcher_options_under_isaaclab_p():
    result = isaaclab_p("-m", "r2s2r.isaaclab_tasks.pick_sort.parity", "--help")
    assert result.returncode == 0 and "usage: parity.py" in result.stdout, result.stderr
    assert all(o in result.stdout for o in LAUNCHER_OPTIONS)


def _parse(script: str, argv: list[str]):
    """`scripts/<script>`'s parse_args(argv), the module loaded under its own name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_script_{script[:-3]}", ROOT / "scripts" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_args(argv)


@pytest.mark.parametrize("script, argv", [
    ("generate.py", ["--task", TASK, "--generator", "planner", "--output", "x.hdf5", "--seed", "3", "--device", "cpu",
                     "--viz", "none", "env.cameras=[]"]),
    ("play.py", ["--task", TASK, "--seed", "3", "--device", "cpu", "--viz", "none", "--renderer", "newton_warp"]),
    ("debug_gui.py", ["--task", TASK, "--seed", "3", "--device", "cpu", "--viz", "none", "--steps", "2"]),
])
def test_launcher_options_and_the_scripts_own_parse_side_by_side(script, argv):
    args = vars(_parse(script, argv))
    assert args["seed"] == 3 and args["device"] == "cpu" and args["device_explicit"] and args["visualizer"] == []
    assert not set(LAUNCHER_KEYS) & set(args)
    if script == "generate.py":
        assert args["generator"] == "planner" and args["overrides"] == ["env.cameras=[]"]


def test_the_debug_window_needs_isaac_sim_and_says_so(capsys):
    """scripts/debug_gui.py opens a Kit extension: without Isaac Sim it exits with status 2 and says where it runs;
    a command line it cannot act on is refused before that."""
    from conftest import script_module

    assert script_module("debug_gui.py").main(["--task", TASK, "--steps", "2"]) == 2
    assert "the debug window runs inside Isaac Sim" in capsys.readouterr().err
    for argv, message in ((["--steps", "2"], "--steps: give the --task to step"),
                          (["--task", "Isaac-Nope-v0"], "--task Isaac-Nope-v0: unknown task ID"),
                          (["--task", TASK, "--condition", "fog"], "--condition fog: expected one of")):
        with pytest.raises(SystemExit) as exit_:
            _parse("debug_gui.py", argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_play_refuses_physics_naming_its_own_backend_option(capsys):
    for task in (TASK, "R2S2R-PickSort-v0"):
        with pytest.raises(SystemExit) as exit_:
            _parse("play.py", ["--task", task, "--physics", "newton_mjwarp"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "--physics newton_mjwarp: not taken" in err and "--mujoco-physics" in err
    assert _parse("play.py", ["--mujoco-physics", "mujoco_warp"]).mujoco_physics == "mujoco_warp"


def test_mujoco_tasks_import_no_isaac_lab():
    """generate.py and play.py parse a MuJoCo task's command line without importing Isaac Lab (and refuse the
    launcher's options there)."""
    code = (
        "import importlib.util, sys\n"
        "def parse(name, argv):\n"
        "    spec = importlib.util.spec_from_file_location(name, f'scripts/{name}.py')\n"
        "    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "    return module.parse_args(argv)\n"
        "parse('generate', ['--task', 'R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0', '--output', 'x.hdf5'])\n"
        "parse('play', ['--task', 'R2S2R-PickSort-v0'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('isaaclab', 'isaaclab_tasks', 'isaacsim')))\n"
        "parse('play', ['--task', 'R2S2R-PickSort-v0', '--device', 'cpu'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.stdout.strip() == "[]"
    assert result.returncode == 2 and "unrecognized arguments: --device" in result.stderr


def test_kit_starts_only_for_isaac_rtx_cameras(tmp_path, monkeypatch, capsys, caplog):
    """play.py on an Isaac Lab task: with Isaac RTX cameras the launcher starts Kit (here it exits: no Isaac Sim)
    before any environment is built; with Newton's Warp renderer it does not, and the environment refuses the
    unknown camera instead. In this process: what runs under `isaaclab -p` is the same script, whose --help is
    checked that way above."""
    from conftest import run_script_in_process

    common = ["--task", TASK, "--cameras", "ceiling", "--size", "32", "--video", str(tmp_path / "v.mp4")]
    code, err = run_script_in_process("play.py", *common, "--renderer", "isaac_rtx", cwd=ROOT,
                                      monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and "Isaac Sim is not installed" in caplog.text
    assert "not a camera of the cell" not in err  # stopped at Kit's start, before the environment
    caplog.clear()
    code, err = run_script_in_process("play.py", *common, cwd=ROOT, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "cameras: 'ceiling' is not a camera of the cell" in err
    assert "Isaac Sim" not in err + caplog.text and "Traceback" not in err


def test_play_plays_episodes_side_by_side_on_several_environments(tmp_path):
    """play.py plays the scripted controller in an Isaac Lab task with --num_envs 2 and three episodes: episodes 0
    and 1 together, then episode 2 while the second environment has none. Each is the episode the MuJoCo task draws
    for its seed; each frame has a row per environment holding its cameras side by side (Isaac Lab sensors,
    Newton's Warp renderer), one frame per control step."""
    import imageio.v2 as imageio

    from r2s2r.tasks.pick_sort.env import PickSortEnv

    video = tmp_path / "play.mp4"
    result = isaaclab_p("scripts/play.py", "--task", "Isaac-R2S2R-PickSort-Grounded-v0", "--seed", "2", "--num_envs",
                        "2", "--episodes", "3", "--max-steps", "4", "--cameras", "right_wrist,head_left", "--size",
                        "32", "--video", str(video))
    assert result.returncode == 0, result.stderr
    env = PickSortEnv(world="grounded", cameras=())
    for ep in range(3):
        _, info = env.reset(seed=2 + ep)
        assert (f"episode {ep}: max_steps after 0.2 s ({info['object']}, {info['colour']}, belt "
                f"{info['belt_speed']:.3f} m/s)") in result.stdout, result.stdout
    frames = imageio.mimread(video)
    assert len(frames) == 8 and frames[0].shape == (64, 64, 3)

    def views(frame, row):  # environment `row`'s two camera images
        return frame[32 * row:32 * (row + 1), :32], frame[32 * row:32 * (row + 1), 32:]

    assert all(view.std() > 5 for f in frames for view in views(f, 0))  # both cameras see the cell
    assert all(view.std() > 5 for f in frames[:4] for view in views(f, 1))
    assert all(f[32:].mean() < 3 for f in frames[4:])  # the second round has no episode for the second environment


def test_several_environments_are_refused_on_a_mujoco_task(tmp_path, monkeypatch, capsys):
    from conftest import run_script_in_process

    code, err = run_script_in_process("play.py", "--task", "R2S2R-PickSort-v0", "--num_envs", "2", cwd=tmp_path,
                                      monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "--num_envs 2: only an Isaac Lab task ID" in err, err
