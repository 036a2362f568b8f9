"""Rendering a dataset's views again from its stored states."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from r2s2r.data.hdf5 import DemoReader
from conftest import run_script, run_script_in_process, script_module

pytestmark = pytest.mark.slow


def _blocks(images: np.ndarray) -> np.ndarray:
    """4x4 block means: sensor noise (independent per pixel) averages out, the scene does not."""
    t, h, w, c = images.shape
    return images.astype(float).reshape(t, h // 4, 4, w // 4, 4, c).mean(axis=(2, 4))


def test_rendered_views_are_the_recorded_ones_and_other_fields_are_copied(tmp_path, policy_datasets, capsys):
    """The oracle is the recording itself: the twin's right wrist view rendered from each stored state equals the
    recorded frame up to sensor noise (and the state of a second later would not); a new camera joins it,
    everything else is copied as it was, and a rerun renders nothing again. On the first 50 steps of the first
    recorded demo (every rendered step costs two twin images): the hand reaches out over the moving belt."""
    from r2s2r.data.hdf5 import DemoWriter

    def first_steps(node, steps: int, keep: int):  # every per-step array cut to its first `keep` rows
        if isinstance(node, dict):
            return {k: v if k == "initial_state" else first_steps(v, steps, keep) for k, v in node.items()}
        return node[:keep] if getattr(node, "ndim", 0) and len(node) == steps else node

    source, out = tmp_path / "one_demo.hdf5", tmp_path / "wrist.hdf5"
    with DemoReader(policy_datasets["real"]) as reader:
        env_args = {k: v for k, v in reader.env_args.items() if k not in ("env_name", "type")}
        demo = reader.load(reader.names[0])
        with DemoWriter(source, reader.env_name, env_args) as writer:
            writer.append(first_steps(demo, len(demo["actions"]), 50), reader.attrs(reader.names[0]))
    result = run_script("render_states.py", "--dataset", str(source), "--cameras", "right_wrist", "head_left",
                        "--output", str(out), "--no-progress")
    assert result.returncode == 0, result.stderr
    with DemoReader(source) as a, DemoReader(out) as b:
        assert a.names == b.names and b.env_args["cameras"] == ["head_left", "right_wrist"]
        for name in a.names:
            da, db = a.load(name), b.load(name)
            recorded, rendered = _blocks(da["obs"]["right_wrist"]), _blocks(db["obs"]["right_wrist"])
            aligned = np.abs(recorded - rendered).mean(axis=(1, 2, 3))
            shifted = np.abs(recorded[20:] - rendered[:-20]).mean(axis=(1, 2, 3))  # a second apart
            assert aligned.mean() < 2.0 and aligned.max() < 5.0, aligned
            assert shifted.mean() > 1.5 * aligned.mean()
            assert db["obs"]["head_left"].shape == (len(da["actions"]), 32, 32, 3)
            assert db["obs"]["head_left"].std() > 10  # a scene, not a blank frame
            np.testing.assert_array_equal(da["actions"], db["actions"])
            np.testing.assert_array_equal(da["states"], db["states"])
            np.testing.assert_array_equal(da["obs"]["datagen_info"]["object_pose"]["object"],
                                          db["obs"]["datagen_info"]["object_pose"]["object"])
            assert b.attrs(name)["seed"] == a.attrs(name)["seed"]
    # The rerun in this process (the run above is the script run as a program).
    capsys.readouterr()
    assert script_module("render_states.py").main(["--dataset", str(source), "--cameras", "right_wrist", "head_left",
                                                   "--output", str(out), "--no-progress"]) == 0
    assert "(0 rendered now)" in capsys.readouterr().out


def test_a_dataset_without_states_or_the_source_as_output_is_refused(tmp_path, policy_datasets, monkeypatch, capsys):
    source = policy_datasets["real"]
    code, err = run_script_in_process("render_states.py", "--dataset", str(source), "--cameras", "right_wrist",
                                      "--output", str(source), cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "expected a file other than --dataset" in err
    stateless = tmp_path / "stateless.hdf5"
    stateless.write_bytes(source.read_bytes())
    with h5py.File(stateless, "a") as f:
        for name in f["data"]:
            del f["data"][name]["states"]
    out = tmp_path / "out.hdf5"
    code, err = run_script_in_process("render_states.py", "--dataset", str(stateless), "--cameras", "right_wrist",
                                      "--output", str(out), cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "field 'states' is missing" in err, err
    assert not out.exists()
