"""The demo dataset writer and reader: Isaac Lab's own HDF5 handler as the oracle reader, crash safety, validation.
(Older layouts, Isaac Lab Mimic's pool and robomimic's training: test_mimic_robomimic_files.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

from r2s2r.data import DatasetError, DemoReader, DemoWriter, read_demos
from r2s2r.data.datagen_info import matrix_poses, pose_matrices, upgrade_field

ENV = "R2S2R-PickSort-Real-v0"
ENV_ARGS = {"cameras": ["cam"], "image_size": [8, 8]}


def make_demo(seed: int, steps: int = 12) -> dict:
    rng = np.random.default_rng(seed)
    quat = rng.normal(size=(steps, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    ee = np.concatenate([rng.normal(size=(steps, 3)), quat], axis=1)
    states = rng.normal(size=(steps, 10))
    poses = pose_matrices(ee[:, :3], quat)
    return {
        "actions": rng.normal(size=(steps, 27)),
        "obs": {
            "cam": rng.integers(0, 256, (steps, 8, 8, 3), dtype=np.uint8),
            "ee_pose": ee,
            "hand_q": rng.normal(size=(steps, 20)),
            "datagen_info": {
                "eef_pose": {"right": poses},
                "object_pose": {"object": poses + 2.0, "target_bin": poses + 3.0},
                "target_eef_pose": {"right": poses + 1.0},
                "belt_speed": rng.uniform(0.05, 0.2, (steps, 1)),
                "subtask_term_signals": {"grasp": np.arange(steps) >= steps // 2},
            },
        },
        "states": states,
        "initial_state": states[:1].copy(),
    }


def attrs_for(seed: int) -> dict:
    return {"seed": seed, "success": True, "condition": "nominal", "object": "cube", "colour": "red",
            "belt_speed": 0.1 + seed / 100, "source": "test"}


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        path = f"{prefix}/{key}" if prefix else key
        out.update(flatten(value, path) if isinstance(value, dict) else {path: value})
    return out


def write(path, seeds) -> None:
    with DemoWriter(path, ENV, ENV_ARGS) as writer:
        for seed in seeds:
            writer.append(make_demo(seed), attrs_for(seed))


def test_round_trip_through_isaaclab_handler(tmp_path):
    pytest.importorskip("isaaclab")
    from isaaclab.utils.datasets.hdf5_dataset_file_handler import HDF5DatasetFileHandler

    path = tmp_path / "demos.hdf5"
    write(path, [3, 4])
    handler = HDF5DatasetFileHandler()
    handler.open(str(path))
    try:
        assert handler.get_env_name() == ENV
        assert handler.get_num_episodes() == 2
        assert handler.get_format_version() == 2 and not handler.is_legacy_quaternion_format()
        assert sorted(handler.get_episode_names()) == ["demo_0", "demo_1"]
        for name, seed in (("demo_0", 3), ("demo_1", 4)):
            episode = handler.load_episode(name, device="cpu")
            assert int(episode.seed) == seed and bool(episode.success)
            demo = make_demo(seed)
            # The writer adds robomimic's next observations (obs one step later, the last repeated), the task's
            # sparse reward and the end of the episode.
            later = np.r_[np.arange(1, 12), 11]
            derived = {"next_obs/cam": demo["obs"]["cam"][later], "next_obs/ee_pose": demo["obs"]["ee_pose"][later],
                       "next_obs/hand_q": demo["obs"]["hand_q"][later], "rewards": np.eye(12)[11],
                       "dones": np.eye(12)[11]}
            expected, loaded = {**flatten(demo), **derived}, flatten(episode.data)
            assert set(loaded) == set(expected)
            for key, value in expected.items():
                np.testing.assert_array_equal(loaded[key].numpy(), value, err_msg=key)
    finally:
        handler.close()
    with h5py.File(path) as f:
        assert f["data"].attrs["total"] == 24
        assert json.loads(f["data"].attrs["env_args"]) == {"env_name": ENV, "type": 2, "env_kwargs": ENV_ARGS}
        assert f["data/demo_1"].attrs["num_samples"] == 12
        assert f["data/demo_0/next_obs/cam"].is_virtual  # a view of obs/cam, not a copy
        # robomimic's filter keys: one demo in ten (rounded) for validation; none of two.
        assert list(f["mask/train"][()]) == [b"demo_0", b"demo_1"] and len(f["mask/valid"]) == 0
    # Our reader agrees, attrs included.
    demos = list(read_demos(path))
    assert [d.name for d in demos] == ["demo_0", "demo_1"]
    with DemoReader(path) as reader:
        assert reader.env_args == {**ENV_ARGS, "env_name": ENV, "type": 2} and reader.format_version == 2
    for demo, seed in zip(demos, (3, 4), strict=True):
        assert {k: demo.attrs[k] for k in attrs_for(seed)} == attrs_for(seed)
        assert demo.attrs["num_samples"] == 12
        for key, value in flatten(make_demo(seed)).items():
            np.testing.assert_array_equal(flatten(demo.data)[key], value, err_msg=key)


def test_pose_matrix_conversions():
    quat = np.array([[0.5, 0.5, -0.5, 0.5], [-0.6, 0.0, 0.8, 0.0]])  # w,x,y,z; the second with w < 0
    poses = pose_matrices([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], quat)
    np.testing.assert_allclose(poses[0, :3, :3], [[0, -1, 0], [0, 0, -1], [1, 0, 0]], atol=1e-6)
    np.testing.assert_array_equal(poses[:, 3], [[0, 0, 0, 1]] * 2)
    pos, back = matrix_poses(poses)
    np.testing.assert_array_equal(pos, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_allclose(back, quat * [[1], [-1]], atol=1e-6)  # the same rotations, w >= 0
    # The flat poses of older files: version 0 stored w,x,y,z, version 1 x,y,z,w; both give the same matrices.
    flat = np.concatenate([pos, quat], axis=1)
    np.testing.assert_allclose(upgrade_field("eef_pose", flat, 0), poses, atol=1e-6)
    np.testing.assert_allclose(upgrade_field("eef_pose", flat[:, [0, 1, 2, 4, 5, 6, 3]], 1), poses, atol=1e-6)
    bins = upgrade_field("target_bin_pos", pos, 1)
    np.testing.assert_array_equal(bins[:, :3, :3], np.broadcast_to(np.eye(3), (2, 3, 3)))


def test_final_file_appears_only_on_close(tmp_path):
    path = tmp_path / "demos.hdf5"
    writer = DemoWriter(path, ENV, ENV_ARGS)
    writer.append(make_demo(0), attrs_for(0))
    assert not path.exists() and path.with_name("demos.hdf5.partial").exists()
    writer.close()
    assert path.exists() and not path.with_name("demos.hdf5.partial").exists()
    # A run that ends in an exception leaves its partial file to resume, and publishes nothing.
    other = tmp_path / "other.hdf5"
    with pytest.raises(RuntimeError), DemoWriter(other, ENV, ENV_ARGS) as w:
        w.append(make_demo(1), attrs_for(1))
        raise RuntimeError("operator stopped")
    assert not other.exists() and other.with_name("other.hdf5.partial").exists()


def test_resume_keeps_exactly_the_complete_demos(tmp_path):
    path = tmp_path / "demos.hdf5"
    partial = path.with_name("demos.hdf5.partial")
    writer = DemoWriter(path, ENV, ENV_ARGS)
    for seed in (0, 1):
        writer.append(make_demo(seed), attrs_for(seed))
    writer.close(publish=False)  # the process dies here ...
    with h5py.File(partial, "a") as f:  # ... after starting a third group
        group = f["data"].create_group("demo_2")
        group.create_dataset("actions", data=np.zeros((5, 27)))
        group.attrs["seed"] = 2
    assert not path.exists()
    with pytest.raises(DatasetError, match="env_args"):
        DemoWriter(path, ENV, {"cameras": ["other"]})
    writer = DemoWriter(path, ENV, ENV_ARGS)
    assert writer.num_demos == 2 and [a["seed"] for a in writer.demo_attrs()] == [0, 1]
    assert writer.append(make_demo(7), attrs_for(7)) == "demo_2"
    writer.close()
    with DemoReader(path) as reader:
        assert reader.names == ["demo_0", "demo_1", "demo_2"]
        assert [reader.attrs(n)["seed"] for n in reader.names] == [0, 1, 7]
        assert reader.total == 36
        np.testing.assert_array_equal(reader.load("demo_2")["actions"], make_demo(7)["actions"])


def test_extending_a_file_with_a_gap_renumbers_and_relinks_next_obs(tmp_path):
    path = tmp_path / "demos.hdf5"
    write(path, [0, 1, 2])
    with h5py.File(path, "a") as f:  # a demo deleted by hand leaves demo_0, demo_2
        del f["data/demo_1"]
        f["data"].attrs["total"] = 24
    with DemoWriter(path, ENV, ENV_ARGS) as writer:
        assert [a["seed"] for a in writer.demo_attrs()] == [0, 2]
    with DemoReader(path) as reader, h5py.File(path) as f:
        assert reader.names == ["demo_0", "demo_1"] and reader.attrs("demo_1")["seed"] == 2
        # The moved demo's next_obs maps onto its own obs under the new name.
        np.testing.assert_array_equal(f["data/demo_1/next_obs/hand_q"][:-1], make_demo(2)["obs"]["hand_q"][1:])
        assert list(f["mask/train"][()]) == [b"demo_0", b"demo_1"]


def test_masks_split_the_demos_once(tmp_path):
    path = tmp_path / "demos.hdf5"
    write(path, range(15))
    with h5py.File(path) as f:
        train, valid = ({n.decode() for n in f[f"mask/{k}"][()]} for k in ("train", "valid"))
    assert len(valid) == 2 and not train & valid and train | valid == {f"demo_{k}" for k in range(15)}
    write(tmp_path / "again.hdf5", range(15))  # a fixed seed: the same split every time
    with h5py.File(tmp_path / "again.hdf5") as f:
        assert {n.decode() for n in f["mask/valid"][()]} == valid


def test_resume_after_kill_9_mid_demo(tmp_path):
    path = tmp_path / "demos.hdf5"
    # A real SIGKILL while the third demo's arrays are being written: HDF5 gets no chance to close the file.
    script = textwrap.dedent(f"""
        import os, signal, sys
        import h5py
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_demo_hdf5 import ENV, ENV_ARGS, attrs_for, make_demo
        from r2s2r.data import DemoWriter
        writer = DemoWriter({str(path)!r}, ENV, ENV_ARGS)
        writer.append(make_demo(0), attrs_for(0))
        writer.append(make_demo(1), attrs_for(1))
        original, calls = h5py.Group.create_dataset, []
        def dying(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, *args, **kwargs)
        h5py.Group.create_dataset = dying
        writer.append(make_demo(2), attrs_for(2))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not path.exists()
    with DemoWriter(path, ENV, ENV_ARGS) as writer:
        assert writer.num_demos == 2
        writer.append(make_demo(3), attrs_for(3))
    with DemoReader(path) as reader:
        assert [reader.attrs(n)["seed"] for n in reader.names] == [0, 1, 3]


def test_kill_9_while_creating_the_file_leaves_nothing_to_resume(tmp_path):
    path = tmp_path / "demos.hdf5"
    # SIGKILL after HDF5 has written the file's first bytes but before its metadata is complete on disk.
    script = textwrap.dedent(f"""
        import os, signal, sys
        import h5py
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_demo_hdf5 import ENV, ENV_ARGS
        from r2s2r.data import DemoWriter
        def dying(self, *args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        h5py.Group.create_group = dying
        DemoWriter({str(path)!r}, ENV, ENV_ARGS)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not path.with_name("demos.hdf5.partial").exists()
    with DemoWriter(path, ENV, ENV_ARGS) as writer:
        assert writer.num_demos == 0
        writer.append(make_demo(0), attrs_for(0))
    with DemoReader(path) as reader:
        assert [reader.attrs(n)["seed"] for n in reader.names] == [0]


def test_nan_action_is_rejected_naming_demo_and_field(tmp_path):
    demo = make_demo(0)
    demo["actions"][4, 9] = np.nan
    with DemoWriter(tmp_path / "d.hdf5", ENV, ENV_ARGS) as writer:
        with pytest.raises(DatasetError, match=r"demo_0: field 'actions' is not finite \(NaN or inf: first at step 4, "
                                               r"column 9"):
            writer.append(demo, attrs_for(0))
        assert writer.num_demos == 0
        writer.append(make_demo(1), attrs_for(1))  # the writer stays usable
    with DemoReader(tmp_path / "d.hdf5") as reader:
        assert len(reader) == 1


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d.update(actions=d["actions"][:, :26]), "'actions' has shape"),
        (lambda d: d["obs"].update(hand_q=d["obs"]["hand_q"][:-1]), "'obs/hand_q' has shape"),
        (lambda d: d["obs"]["datagen_info"]["eef_pose"].update(right=d["obs"]["datagen_info"]["eef_pose"]["right"][:3]),
         "'obs/datagen_info/eef_pose/right' has shape"),
        (lambda d: d["obs"]["datagen_info"].update(eef_pose=np.zeros((12, 7))),
         r"'obs/datagen_info/eef_pose' has shape \(12, 7\): expected \(12, 4, 4\) poses"),
        (lambda d: d.update(initial_state=d["states"][0]), r"'initial_state' has shape \(10,\): expected one state"),
        (lambda d: d.update(rewards=np.zeros(12)), "'rewards' is written by DemoWriter"),
        (lambda d: d["obs"].update(cam=d["obs"]["cam"].astype(np.float32)), "'obs/cam' looks like images"),
        (lambda d: d.pop("actions"), "'actions' is missing"),
    ],
)
def test_malformed_demos_are_rejected_naming_the_field(tmp_path, edit, field):
    demo = make_demo(0)
    edit(demo)
    with DemoWriter(tmp_path / "d.hdf5", ENV, ENV_ARGS) as writer, pytest.raises(DatasetError, match=field):
        writer.append(demo, attrs_for(0))


def test_demos_of_one_file_share_their_fields(tmp_path):
    with DemoWriter(tmp_path / "d.hdf5", ENV, ENV_ARGS) as writer:
        writer.append(make_demo(0), attrs_for(0))
        demo = make_demo(1)
        del demo["obs"]["hand_q"]
        with pytest.raises(DatasetError, match=r"missing fields \['obs/hand_q'\]"):
            writer.append(demo, attrs_for(1))


def test_reader_errors_name_the_file_and_field(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.hdf5"):
        DemoReader(tmp_path / "nothing.hdf5")
    text = tmp_path / "notes.hdf5"
    text.write_text("not a dataset")
    with pytest.raises(DatasetError, match="notes.hdf5: not an HDF5 file"):
        DemoReader(text)
    bare = tmp_path / "bare.hdf5"
    with h5py.File(bare, "w") as f:
        f.create_group("episodes")
    with pytest.raises(DatasetError, match="bare.hdf5: no 'data' group"):
        DemoReader(bare)
    path = tmp_path / "demos.hdf5"
    write(path, [0])
    with h5py.File(path, "a") as f:
        del f["data/demo_0/actions"]
    with pytest.raises(DatasetError, match=r"demos.hdf5: demo_0: field 'actions' is missing"):
        list(read_demos(path))


@pytest.mark.parametrize("compression", ["gzip", None])
def test_append_from_writes_what_append_of_the_loaded_demo_writes(tmp_path, compression):
    """The merge of generation shards copies stored arrays as they are: the result must read back exactly as a
    file written through `load` + `append` (same arrays, attrs, next_obs, rewards), whichever way the shard was
    compressed (a shard of another compression than the output's goes through `load`)."""
    with DemoWriter(tmp_path / "shard.hdf5", ENV, ENV_ARGS, compression="gzip") as writer:
        for seed in (3, 4):
            writer.append(make_demo(seed, steps=9 + seed), attrs_for(seed))
    with DemoReader(tmp_path / "shard.hdf5") as reader:
        for path, copy in (("loaded.hdf5", False), ("copied.hdf5", True)):
            with DemoWriter(tmp_path / path, ENV, ENV_ARGS, compression=compression) as out:
                out.append(make_demo(0), attrs_for(0))  # an earlier demo: numbering and totals carry on
                for name in reader.names:
                    out.append_from(reader, name) if copy else out.append(reader.load(name), reader.attrs(name))
    with DemoReader(tmp_path / "loaded.hdf5") as a, DemoReader(tmp_path / "copied.hdf5") as b:
        assert a.names == b.names == ["demo_0", "demo_1", "demo_2"] and a.total == b.total == 12 + (9 + 3) + (9 + 4)
        for name in a.names:
            assert a.attrs(name) == b.attrs(name)
            left, right = flatten(a.load(name)), flatten(b.load(name))
            assert left.keys() == right.keys()
            for key in left:
                np.testing.assert_array_equal(left[key], right[key], err_msg=key)
    with h5py.File(tmp_path / "copied.hdf5") as f:
        demo = f["data/demo_2"]
        assert demo["obs/cam"].compression == compression
        np.testing.assert_array_equal(demo["next_obs/cam"][:-1], demo["obs/cam"][1:])
        assert demo["rewards"][-1] == 1.0 and demo["dones"][-1] == 1
    with DemoWriter(tmp_path / "other.hdf5", ENV, ENV_ARGS) as out, DemoReader(tmp_path / "shard.hdf5") as reader:
        demo = make_demo(5)
        del demo["obs"]["hand_q"]
        out.append(demo, attrs_for(5))
        with pytest.raises(DatasetError, match=r"extra fields \['obs/hand_q'\]"):
            out.append_from(reader, "demo_0")


def test_load_only_reads_the_named_fields(tmp_path):
    path = tmp_path / "demos.hdf5"
    write(path, [3])
    with DemoReader(path) as reader:
        full = flatten(reader.load("demo_0"))
        part = flatten(reader.load("demo_0", only=("obs/datagen_info", "states")))
    kept = {k for k in full if k == "actions" or k == "states" or k.startswith("obs/datagen_info/")}
    assert set(part) == kept and "obs/cam" not in part
    for key in kept:
        np.testing.assert_array_equal(part[key], full[key])
