"""The human-teleoperator model on the reality twin, and scripts/collect_real.py end to end."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import run_script, script_module

from r2s2r.data import DemoReader, DemoWriter
from r2s2r.geometry import quat_to_mat
from r2s2r.real.teleop import HumanTeleop, TeleopCfg
from r2s2r.real.twin import TwinCell

# Seeds 1 and 2 succeed, seed 0 is abandoned by the operator and seed 3 times out: both ways a human trial ends
# without a demo. The success rate over many seeds is measured by benchmarks/bench_success.py --only teleop.
SEEDS = range(4)


@pytest.fixture(scope="module")
def trials():
    """Four seeded nominal trials without cameras: outcome, actions, measured hand positions, the model's trace."""
    cell = TwinCell(cameras=())
    teleop = HumanTeleop(control_hz=cell.control_hz)
    out = []
    for seed in SEEDS:
        actions, hand = [], []

        def on_step(obs, action, actions=actions, hand=hand):
            actions.append(action)
            hand.append(obs["proprio"]["ee_pose"][:3].copy())

        trial = teleop.drive(cell, seed, on_step=on_step)
        out.append({"trial": trial, "actions": np.array(actions), "hand": np.array(hand),
                    "command": np.array([s["command"] for s in teleop.trace]),
                    "tremor": np.array([s["tremor"] for s in teleop.trace]),
                    "submovements": list(teleop.submovements), "style": teleop.style})
    cell.close()
    return out


def test_pinned_seeds_end_as_measured(trials):
    outcomes = [(t["trial"].seed, t["trial"].success, t["trial"].failure) for t in trials]
    assert outcomes == [(0, False, None), (1, True, None), (2, True, None), (3, False, "timeout")], outcomes


def test_nothing_moves_before_the_reaction_time(trials):
    for t in trials:
        style, actions, hand = t["style"], t["actions"], t["hand"]
        moved = np.any(np.abs(actions[:, :7] - actions[0, :7]) > 1e-12, axis=1)
        first = int(np.argmax(moved)) / 20.0  # control periods of 50 ms
        assert 0.15 <= style.reaction_time <= 0.30
        assert first >= style.reaction_time and first >= 0.15, (first, style.reaction_time)
        np.testing.assert_allclose(actions[0, :3], hand[0], atol=1e-9)  # holds where the hand is
        assert np.abs(hand[:4] - hand[0]).max() < 1e-3  # the first 150 ms: the robot hand does not move


def test_reaches_are_bell_shaped_minimum_jerk_movements(trials):
    for t in trials:
        start, duration, displacement = t["submovements"][0]  # the first reach toward the waiting point
        assert np.linalg.norm(displacement) > 0.1
        i0, i1 = int(round(start * 20)), int(round((start + duration) * 20))
        speed = np.linalg.norm(np.diff(t["command"][i0:i1 + 1], axis=0), axis=1) * 20
        tau = (np.arange(len(speed)) + 0.5) / len(speed)
        bell = 30 * tau**2 * (1 - tau) ** 2
        assert np.corrcoef(speed, bell)[0, 1] > 0.95
        # The robot's hand follows, a period late, with a speed profile of its own that rises smoothly to one
        # peak and has fallen off again by the end of the reach. (What the arm does afterwards while its wrist
        # finishes turning is the robot's, not the operator's.)
        hand_speed = np.linalg.norm(np.diff(t["hand"][i0:i1 + 2], axis=0), axis=1) * 20
        peak = int(np.argmax(hand_speed))
        assert 0 < peak < len(hand_speed) - 1
        assert np.all(np.diff(hand_speed[:peak + 1]) > -0.02), hand_speed
        assert hand_speed[0] < 0.2 * hand_speed[peak] and hand_speed[-1] < 0.4 * hand_speed[peak], hand_speed


def test_tremor_is_present_but_small(trials):
    for t in trials:
        tremor = t["actions"][:, :3] - t["command"]  # what the operator's hand adds to the intended motion
        np.testing.assert_allclose(tremor, t["tremor"], atol=1e-12)
        active = tremor[int(t["submovements"][0][0] * 20) + 10:]
        rms = np.sqrt((active**2).mean(axis=0))
        assert np.all(rms > 0.0002) and np.abs(tremor).max() < 0.003, rms
        spectrum = np.abs(np.fft.rfft(active[:, 0] - active[:, 0].mean()))
        freqs = np.fft.rfftfreq(len(active), 1 / 20)
        assert 7.5 <= freqs[np.argmax(spectrum)] <= 10.0  # physiological tremor, capped below Nyquist


def test_corrective_submovements_follow_the_primary_reach(trials):
    # Tracking the moving object takes further, smaller submovements after the first reach.
    for t in trials:
        later = [np.linalg.norm(d) for _, _, d in t["submovements"][1:]]
        assert later and min(later) < np.linalg.norm(t["submovements"][0][2])


def test_seeds_draw_different_grasp_styles(trials):
    styles = [t["style"] for t in trials]
    for field in ("yaw_offset", "height_offset", "closure_time", "reaction_time", "pace", "hover_height"):
        values = [getattr(s, field) for s in styles]
        assert len(set(values)) == len(values), field
    cfg = TeleopCfg()
    assert all(abs(s.yaw_offset) <= cfg.yaw_jitter and abs(s.height_offset) <= cfg.height_jitter for s in styles)
    assert np.ptp([s.closure_time for s in styles]) > 0.02
    # The same seed draws the same style again.
    teleop = HumanTeleop()
    assert teleop.reset(3) == styles[3]


# -- scripts/collect_real.py -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def collect_real():
    """scripts/collect_real.py as a module: its parts, and its main() for the runs after the one run as a program."""
    return script_module("collect_real.py")


def seeds_of(path: Path) -> list[int]:
    with DemoReader(path) as reader:
        return [reader.attrs(n)["seed"] for n in reader.names]


def test_collect_real_end_to_end_resumes_without_duplicates(tmp_path, collect_real, capsys):
    # Rendering dominates collection time on CPU, so this run records no images; the next test records them.
    out = tmp_path / "real.hdf5"
    first = run_script("collect_real.py", "--num-demos", "2", "--output", str(out), "--cameras", "--seed", "1",
                       timeout=300)
    assert first.returncode == 0, first.stderr
    assert out.exists() and not out.with_name("real.hdf5.partial").exists()
    kept = seeds_of(out)
    assert len(kept) == 2 and len(set(kept)) == 2
    with DemoReader(out) as reader:
        attrs = reader.attrs(reader.names[0])
        assert attrs["success"] and attrs["condition"] == "nominal" and attrs["source"] == "twin"
        assert {"object", "colour", "belt_speed", "teleop_style"} <= set(attrs)
        demo = reader.load(reader.names[0])
        steps = len(demo["actions"])
        assert demo["states"].shape[0] == steps
        np.testing.assert_array_equal(demo["initial_state"], demo["states"][:1])
        info = demo["obs"]["datagen_info"]
        assert info["eef_pose"]["right"].shape == (steps, 4, 4) and info["subtask_term_signals"]["grasp"].any()
        # datagen_info holds Mimic's float32 4x4 poses; the policy observation keeps the task's position + w,x,y,z.
        np.testing.assert_allclose(info["eef_pose"]["right"][:, :3, :3], quat_to_mat(demo["obs"]["ee_pose"][:, 3:]),
                                   atol=1e-6)
    # Rerunning the finished command does nothing.
    capsys.readouterr()
    assert collect_real.main(["--num-demos", "2", "--output", str(out), "--cameras", "--seed", "1"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert seeds_of(out) == kept
    # An interrupted run: its partial file holds the two demos and a half-written third. Rerunning resumes it.
    partial = out.with_name("real.hdf5.partial")
    os.replace(out, partial)
    with h5py.File(partial, "a") as f:
        f.attrs["r2s2r_state"] = "partial"
        f["data"].create_group("demo_2").create_dataset("actions", data=np.zeros((3, 27)))
    assert collect_real.main(["--num-demos", "3", "--output", str(out), "--cameras", "--seed", "1"]) == 0
    seeds = seeds_of(out)
    assert seeds[:2] == kept and len(seeds) == 3 and seeds[2] > max(kept)


def test_collect_real_records_images_and_imports_demos(tmp_path, collect_real, capsys, policy_datasets):
    cell = TwinCell(cameras=("right_wrist",), image_size=(16, 16))
    try:
        cut, no_demo, _ = collect_real.record_trial(cell, HumanTeleop(), seed=1, max_steps=6)
    finally:
        cell.close()
    assert not cut.success and no_demo is None  # an unfinished trial gives no demo
    # A whole trial with images: the session's demos, which collect_real.py recorded at 32x32 from seed 1 (a success).
    with DemoReader(policy_datasets["real"]) as reader:
        demo, attrs = reader.load(reader.names[0]), reader.attrs(reader.names[0])
    steps = len(demo["actions"])
    assert demo["obs"]["right_wrist"].shape == (steps, 32, 32, 3) and demo["obs"]["right_wrist"].dtype == np.uint8
    assert demo["actions"].shape == (steps, 27) and attrs["seed"] == 1 and attrs["success"]
    source = tmp_path / "elsewhere.hdf5"
    with DemoWriter(source, collect_real.ENV_NAME, {"cameras": ["right_wrist"]}) as writer:
        writer.append(demo, attrs)
    out = tmp_path / "merged.hdf5"
    assert collect_real.import_demos([source], out) == 1
    assert collect_real.import_demos([source], out) == 0  # already there: not imported twice
    with DemoReader(out) as reader:
        assert len(reader) == 1 and reader.attrs("demo_0")["imported_from"] == "elsewhere.hdf5:demo_0"
        np.testing.assert_array_equal(reader.load("demo_0")["obs"]["right_wrist"], demo["obs"]["right_wrist"])
    # A file with a NaN action is refused as a whole, naming the file, demo and field.
    bad = tmp_path / "bad.hdf5"
    demo["actions"][2, 0] = np.nan
    with h5py.File(source) as f, h5py.File(bad, "w") as g:
        for key, value in f.attrs.items():
            g.attrs[key] = value
        f.copy("data", g)
        g["data/demo_0/actions"][...] = demo["actions"]
    capsys.readouterr()
    assert collect_real.main(["--output", str(out), "--import", str(bad)]) == 2
    assert "bad.hdf5: demo_0: field 'actions' is not finite" in capsys.readouterr().err
    with DemoReader(out) as reader:
        assert len(reader) == 1
