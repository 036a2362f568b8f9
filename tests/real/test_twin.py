"""The reality twin behind the real-cell interface: true parameters act, and only the allowed modules read them."""

import re
from pathlib import Path

import numpy as np
import pytest

from r2s2r.cell.world import load_world
from r2s2r.real.interface import RealCell
from r2s2r.real.twin import TwinCell, TwinRig

ROOT = Path(__file__).resolve().parents[2]
TRUTH = load_world("reality").cell


def test_twin_cell_runs_trials_through_the_interface():
    cell = TwinCell(cameras=("head_left",), image_size=(32, 32))
    assert isinstance(cell, RealCell)
    with pytest.raises(RuntimeError, match="before reset"):
        cell.act(np.zeros(27))
    obs = cell.reset(condition="belt_speed", seed=3)
    assert set(obs) == {"proprio", "images", "tracking"} and obs["images"]["head_left"].shape == (32, 32, 3)
    hold = np.concatenate([obs["proprio"]["ee_pose"], np.zeros(20)])
    result = cell.act(hold)
    assert not result.done and result.info["condition"] == "belt_speed"
    cell.stop()
    with pytest.raises(RuntimeError):
        cell.observe()
    cell.close()


def test_belt_runs_at_the_true_scale_of_its_set_point():
    cell = TwinCell(cameras=())
    obs = cell.reset(seed=1)
    commanded = cell.env.belt_speed
    # What the cell's controller knows (and a policy may observe) is the set point, not the truth.
    assert obs["proprio"]["belt_setpoint"][0] == commanded
    x0 = obs["tracking"]["object_pos"][0]
    for _ in range(20):  # 1 s
        obs = cell.act(np.concatenate([obs["proprio"]["ee_pose"], np.zeros(20)])).obs
    measured = obs["tracking"]["object_pos"][0] - x0
    assert measured == pytest.approx(commanded * TRUTH.belt.speed_scale, rel=0.03)
    assert abs(measured - commanded) > 0.02 * commanded  # the set point alone would be wrong


def test_joint_targets_act_after_the_true_latency():
    rig = TwinRig()
    home = np.array(TRUTH.arm("right").home_q)
    targets = np.tile(home, (60, 1))
    targets[20:, 3] += 0.1  # a step on joint 4 at physics step 20
    log = rig.joint_response(targets)
    moved = np.flatnonzero(np.abs(log[:, 3] - log[0, 3]) > 1e-5)
    # The drive sees the step `latency` steps late and the joint moves one step after that.
    assert moved[0] == 20 + TRUTH.arm("right").latency_steps


def test_only_the_twin_and_the_report_read_the_truth():
    allowed = {"source/r2s2r/r2s2r/real/twin.py", "scripts/world_report.py"}
    readers = set()
    for path in list((ROOT / "source").rglob("*.py")) + list((ROOT / "scripts").rglob("*.py")):
        text = path.read_text()
        # Resolving the truth file (reality_file), naming the variable that selects it or loading a truth world by
        # name is reading the truth; passing an option through to the twin is not. (Sampled truths: the sampler
        # writes them without reading any, tests/real/test_truths.py.)
        if re.search(r"reality_file\(|environ.*R2S2R_REALITY_FILE|load_world\(\s*[\"'](reality|reality_alt)\b", text):
            readers.add(str(path.relative_to(ROOT)))
    assert readers <= allowed, readers - allowed
