"""Isaac Lab Mimic's own generation (`isaaclab_mimic.datagen.DataGenerator`) on the Isaac Lab environment, from the
teleoperated demos, through `r2s2r.isaaclab_tasks.pick_sort.mimic_datagen` (the module's `isaaclab_env`, ungrounded
world, and `real_demos`)."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

from r2s2r.data.annotate import SUBTASKS


def test_mimic_generates_a_trajectory_to_its_end_on_the_environment(isaaclab_env, real_demos):
    from r2s2r.isaaclab_tasks.pick_sort.mimic_datagen import admission, run

    with h5py.File(real_demos, "r") as f:
        demos = sorted(k for k in f["data"] if k.startswith("demo_"))
    (row,) = run(isaaclab_env, real_demos, trajectories=1, seed=0)
    eef, obj = row.eef_pos, row.object_pos
    grasp = row.subtask_starts["grasp"]
    gap = np.linalg.norm(eef - obj, axis=1)
    print(row.summary(), admission([row]))
    moved = eef[grasp] - eef[0]
    towards = (obj[0] - eef[0]) / np.linalg.norm(obj[0] - eef[0])
    print(f"intercept: the hand moved {np.linalg.norm(moved):.3f} m, {moved @ towards:.3f} m of it towards the "
          f"object's start; hand-object distance {gap[0]:.3f} m at its start, {gap[:grasp].min():.3f} m at the "
          f"closest, {gap[grasp]:.3f} m at its end; the belt carried the object "
          f"{np.linalg.norm(obj[grasp] - obj[0]):.3f} m; "
          f"object height {obj[0, 2]:.3f} m at the start, {obj[:, 2].max():.3f} m at most")

    # Mimic built all four subtasks, in order, from one source demo of our file (it selects once per trajectory).
    assert list(row.subtask_starts) == list(SUBTASKS)
    assert list(row.subtask_starts.values()) == sorted(row.subtask_starts.values())
    assert len(set(row.src_demo_inds.values())) == 1 and 0 <= row.src_demo_inds["intercept"] < len(demos)
    # It drove the environment for a whole trajectory (or until the episode ended), and its success flag is our
    # environment's judgement of that episode.
    assert row.steps > 100 and row.mimic_actions >= row.steps
    assert row.outcome is not None or row.steps == row.mimic_actions
    assert row.success == (row.outcome == "success")
    # During intercept the arm moved towards the object (where it was when Mimic built the segment).
    assert moved @ towards > 0.05
    assert gap[:grasp].min() < gap[0]
    assert not hasattr(isaaclab_env, "recorder_manager")  # the glue's recorder manager is gone again


def test_command_line_names_a_bad_field(tmp_path, capsys):
    from r2s2r.isaaclab_tasks.pick_sort.mimic_datagen import main

    missing = tmp_path / "none.hdf5"
    result = subprocess.run([sys.executable, "-m", "r2s2r.isaaclab_tasks.pick_sort.mimic_datagen", "--source",
                             str(missing)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and f"--source = '{missing}': no such file" in result.stderr, result.stderr
    # The other refusals in this process: each ends before any simulation, as the one run as a program did.
    for argv, message in [(["--source", __file__, "--trajectories", "0"], "--trajectories = 0: expected at least 1"),
                          (["--source", __file__], "not an HDF5 file")]:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and message in err, err
