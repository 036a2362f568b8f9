import json

import numpy as np
import pytest
from conftest import run_script

from r2s2r.data import DemoReader
from r2s2r.data.annotate import AnnotationError, annotate, signal_traces, stored_annotation


def load_all(path):
    with DemoReader(path) as reader:
        return [(n, reader.load(n), reader.attrs(n)) for n in reader.names]


def test_recorded_demos_are_annotated_where_the_signals_switch(real_demos):
    for name, demo, _ in load_all(real_demos):
        info = demo["obs"]["datagen_info"]
        ann = stored_annotation(info, name)
        assert ann is not None and ann.length == len(demo["actions"])
        intercept, grasp, carry = ann.ends
        tr = signal_traces(info)
        # The hand is open just before the intercept ends and closing right after, near the object.
        assert tr["closure"][intercept - 1] <= 0.25 < tr["closure"][min(intercept + 3, grasp)]
        assert tr["hand_object_distance"][intercept] < 0.07
        # Lifted at the end of the grasp, not before it; above the bin at the end of the carry.
        assert tr["object_lift"][grasp] > 0.03 and tr["object_lift"][intercept] < 0.03
        assert tr["object_bin_distance"][carry] < 0.08 <= tr["object_bin_distance"][grasp]
        # Recomputing gives what was stored.
        assert annotate(info, where=name).ends == ann.ends


def test_annotation_errors_name_the_demo_and_the_missing_signal(real_demos):
    name, demo, _ = load_all(real_demos)[0]
    info = dict(demo["obs"]["datagen_info"])
    still = np.repeat(info["object_pose"]["object"][:1], len(demo["actions"]), axis=0)
    flat = dict(info, object_pose={**info["object_pose"], "object": still})
    with pytest.raises(AnnotationError, match="demo_x: the object is never lifted"):
        annotate(flat, where="demo_x")
    del info["gripper_action"]
    with pytest.raises(AnnotationError, match="demo_y: obs/datagen_info/gripper_action/right is missing"):
        annotate(info, where="demo_y")
    ends = annotate(demo["obs"]["datagen_info"]).ends
    with pytest.raises(AnnotationError, match="not increasing"):
        annotate(demo["obs"]["datagen_info"], {"carry": ends[0] - 1})


def test_annotate_script_corrects_a_boundary_and_keeps_the_file_readable(real_demos, tmp_path):
    path = tmp_path / "copy.hdf5"
    path.write_bytes(real_demos.read_bytes())
    name, demo, _ = load_all(path)[1]
    intercept, grasp, carry = stored_annotation(demo["obs"]["datagen_info"]).ends
    moved = grasp - 4
    result = run_script("annotate.py", "--dataset", str(path), "--set", f"{name}:grasp={moved}",
                        "--plot", str(tmp_path / "plots"))
    assert result.returncode == 0, result.stderr
    assert "corrected ['grasp']" in result.stdout
    after = {n: (d, a) for n, d, a in load_all(path)}
    assert stored_annotation(after[name][0]["obs"]["datagen_info"]).ends == (intercept, moved, carry)
    assert json.loads(after[name][1]["subtask_corrections"]) == {"grasp": moved}
    assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 10_000
    # An impossible correction changes nothing.
    bad = run_script("annotate.py", "--dataset", str(path), "--set", f"{name}:carry=1")
    assert bad.returncode == 2 and "not increasing" in bad.stderr
    assert stored_annotation(load_all(path)[1][1]["obs"]["datagen_info"]).ends == (intercept, moved, carry)
    assert not list(tmp_path.glob("*.annotating"))
