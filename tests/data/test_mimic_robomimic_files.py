"""The demo files as their consumers use them, through the consumers' own code: Isaac Lab Mimic's `DataGenInfoPool`
and `DataGenerator` (source demos cut into subtask segments, nearest-neighbour selection) and robomimic 0.3.0's
default BC setup (its `SequenceDataset` with the train/valid masks, a few training steps of its BC algorithm on CPU).
The demos are the twin's teleoperated ones (`real_demos`, written by collect_real.py); an old-format copy of them
(format_version 0 or 1, as the writer wrote before layout 2) still loads through `DemoReader` and converts with
scripts/convert_dataset.py into a file both consumers accept.

The oracle for the poses Mimic reads is the recording itself: the hand pose the task observed (`obs/ee_pose`) and
the pose each action commanded (`actions[:, :7]`), both position + quaternion w,x,y,z, turned into 4x4 matrices by
scipy here; the subtask boundaries are annotate's (`stored_annotation`).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from conftest import run_script_in_process
from scipy.spatial.transform import Rotation

from r2s2r.data import DatasetError, DemoReader, DemoWriter
from r2s2r.data.annotate import stored_annotation
from r2s2r.data.datagen_info import EEF, OBJECT, TARGET_BIN, matrix_poses, positions
from r2s2r.data.hdf5 import upgrade_dataset

LOW_DIM = ["arm_q", "arm_dq", "hand_q", "ee_pose"]  # the twin demos' proprioception (they hold no images)


def scipy_poses(pose_wxyz: np.ndarray) -> np.ndarray:
    """(T, 7) position + quaternion w,x,y,z -> (T, 4, 4), by scipy (not the code under test)."""
    out = np.tile(np.eye(4), (len(pose_wxyz), 1, 1))
    out[:, :3, :3] = Rotation.from_quat(pose_wxyz[:, [4, 5, 6, 3]]).as_matrix()
    out[:, :3, 3] = pose_wxyz[:, :3]
    return out


def write_legacy(source: Path, path: Path, version: int) -> None:
    """`source`'s demos in the layout the writer used before format_version 2 (no attr: version 0): flat (T, 7)
    datagen_info poses (quaternions w,x,y,z in version 0, x,y,z,w in 1), the bin as target_bin_pos, the hand targets
    as gripper_action, initial_state (N,), env settings beside env_name in env_args, nothing derived."""
    with DemoReader(source) as reader, h5py.File(path, "w") as f:
        if version:
            f.attrs["format_version"] = version
        f.attrs["r2s2r_writer"] = "r2s2r.data.hdf5"
        f.attrs["r2s2r_state"] = "published"
        data = f.create_group("data")
        for key, value in reader.data_attrs().items():
            data.attrs[key] = value
        data.attrs["env_args"] = json.dumps(reader.env_args)
        for name in reader.names:
            demo = reader.load(name)
            info = demo["obs"].pop("datagen_info")
            flat = {k: v for k, v in info.items() if k not in ("eef_pose", "target_eef_pose", "object_pose")}
            for key, frame in (("eef_pose", EEF), ("target_eef_pose", EEF), ("object_pose", OBJECT)):
                pos, quat = matrix_poses(info[key][frame])
                flat[key] = np.concatenate([pos, quat if version == 0 else quat[:, [1, 2, 3, 0]]], axis=1)
            flat["target_bin_pos"] = positions(info["object_pose"][TARGET_BIN])
            flat["gripper_action"] = info["gripper_action"][EEF]
            arrays = {"actions": demo["actions"], "states": demo["states"], "initial_state": demo["initial_state"][0],
                      **{f"obs/{k}": v for k, v in demo["obs"].items()},
                      **{f"obs/datagen_info/{k}": v for k, v in _leaves(flat)}}
            group = data.create_group(name)
            for key, value in arrays.items():
                group.create_dataset(key, data=value)
            for key, value in reader.attrs(name).items():
                group.attrs[key] = value
            group.attrs["r2s2r_complete"] = True


def _leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        path = f"{prefix}/{key}" if prefix else key
        yield from _leaves(value, path) if isinstance(value, dict) else [(path, value)]


@pytest.fixture(scope="module")
def legacy(real_demos, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("legacy") / "real_v1.hdf5"
    write_legacy(real_demos, path, version=1)
    return path


@pytest.fixture(scope="module")
def converted(legacy, tmp_path_factory) -> Path:
    """The old-format copy upgraded by what scripts/convert_dataset.py runs (the script itself: below)."""
    out = tmp_path_factory.mktemp("converted") / "real_v2.hdf5"
    assert upgrade_dataset(legacy, out) == 8
    return out


# -- Isaac Lab Mimic -------------------------------------------------------------------------------------------------
def mimic_pool(path: Path):
    """Mimic's source-demo pool loaded from `path` by its own loader (Isaac Lab's HDF5 handler), with the Isaac Lab
    environment's subtask configuration and its gripper-action split. The environment itself is not built (30 s to
    4 minutes): the pool asks it only for `actions_to_gripper_actions`, which reads none of its state."""
    pytest.importorskip("isaaclab_mimic")
    from isaaclab_mimic.datagen.datagen_info_pool import DataGenInfoPool

    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
    from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PickSortCellEnvCfg

    cfg = PickSortCellEnvCfg()
    env = SimpleNamespace(cfg=cfg, device="cpu",
                          actions_to_gripper_actions=lambda a: PickSortCellEnv.actions_to_gripper_actions(None, a))
    pool = DataGenInfoPool(env, cfg, "cpu")
    pool.load_from_dataset_file(str(path))
    return env, pool


@pytest.mark.parametrize("which", ["collected", "converted"])
def test_mimic_cuts_our_demos_into_annotated_subtask_segments(which, real_demos, converted):
    from isaaclab_mimic.datagen.data_generator import DataGenerator

    path = real_demos if which == "collected" else converted
    env, pool = mimic_pool(path)
    with DemoReader(path) as reader:
        demos = [reader.load(n) for n in reader.names]
    assert pool.num_datagen_infos == len(demos) == 8
    names = [c.subtask_term_signal for c in env.cfg.subtask_configs[EEF]]
    assert names == ["intercept", "grasp", "carry", None]
    for k, (demo, info) in enumerate(zip(demos, pool.datagen_infos, strict=True)):
        steps = len(demo["actions"])
        ours = demo["obs"]["datagen_info"]
        # Mimic counts the step on which a term signal switches on into the subtask it ends.
        bounds = [0, *(e + 1 for e in stored_annotation(ours).ends), steps]
        assert pool.subtask_boundaries[EEF][k] == list(zip(bounds[:-1], bounds[1:]))
        eef, target = info.eef_pose[EEF].numpy(), info.target_eef_pose[EEF].numpy()
        np.testing.assert_allclose(eef, scipy_poses(demo["obs"]["ee_pose"]), atol=1e-6)  # stored float32
        np.testing.assert_allclose(target, scipy_poses(demo["actions"][:, :7]), atol=1e-6)
        np.testing.assert_array_equal(info.gripper_action[EEF].numpy(), demo["actions"][:, 7:])
        for name in (OBJECT, TARGET_BIN):
            poses = info.object_poses[name].numpy()
            np.testing.assert_array_equal(poses, ours["object_pose"][name])
            rot = poses[:, :3, :3]
            np.testing.assert_allclose(rot @ rot.transpose(0, 2, 1), np.broadcast_to(np.eye(3), rot.shape), atol=1e-6)
            np.testing.assert_array_equal(poses[:, 3], np.broadcast_to([0, 0, 0, 1], (steps, 4)))
        np.testing.assert_array_equal(info.object_poses[TARGET_BIN].numpy()[:, :3, :3],
                                      np.broadcast_to(np.eye(3), (steps, 3, 3)))
    # Mimic's generator: its subtask boundaries (no offsets in this task) and its nearest-neighbour selection of a
    # source segment by object pose, which given a demo's own object pose at a segment start picks that demo.
    generator = DataGenerator(env, src_demo_datagen_info_pool=pool)
    boundaries = generator.randomize_subtask_boundaries()[EEF]
    assert boundaries.shape == (8, 4, 2) and (boundaries == np.array(pool.subtask_boundaries[EEF])).all()
    for subtask, config in enumerate(env.cfg.subtask_configs[EEF]):
        if config.object_ref != OBJECT:  # demos sorted into the same bin share its pose: no unique neighbour
            continue
        for k, info in enumerate(pool.datagen_infos):
            start = boundaries[k, subtask, 0]
            chosen = generator.select_source_demo(
                EEF, info.eef_pose[EEF][start], info.object_poses[config.object_ref][start], boundaries[:, subtask],
                config.object_ref, "nearest_neighbor_object", {"nn_k": 1})
            assert int(chosen) == k, (subtask, k)


def test_mimic_cannot_load_the_old_flat_layout(legacy):
    # The pool iterates object_pose as a dict of named poses; a flat (T, 7) array iterates as rows.
    with pytest.raises(IndexError, match="tensors used as indices"):
        mimic_pool(legacy)


# -- robomimic -------------------------------------------------------------------------------------------------------
def robomimic_bc(path: Path, steps: int = 3) -> dict:
    """robomimic's default BC config on `path` with our low-dimensional observation keys and its train/valid filter
    keys: the environment metadata, the datasets and `steps` training steps plus one validation step (losses)."""
    pytest.importorskip("robomimic")
    import torch

    from r2s2r.data.lerobot import make_torchvision_importable

    make_torchvision_importable()  # robomimic's models import torchvision
    import robomimic.utils.file_utils as file_utils
    import robomimic.utils.obs_utils as obs_utils
    import robomimic.utils.train_utils as train_utils
    from robomimic.algo import algo_factory
    from robomimic.config import config_factory
    from torch.utils.data import DataLoader

    config = config_factory("bc")
    with config.values_unlocked():
        config.train.data = str(path)
        config.observation.modalities.obs.low_dim = LOW_DIM
        config.experiment.validate = True
        config.train.hdf5_filter_key, config.train.hdf5_validation_filter_key = "train", "valid"
        config.train.batch_size = 16
    torch.manual_seed(0)
    obs_utils.initialize_obs_utils_with_config(config)
    env_meta = file_utils.get_env_metadata_from_dataset(str(path))
    shape_meta = file_utils.get_shape_metadata_from_dataset(str(path), all_obs_keys=config.all_obs_keys)
    model = algo_factory(config.algo_name, config, obs_key_shapes=shape_meta["all_shapes"],
                         ac_dim=shape_meta["ac_dim"], device=torch.device("cpu"))
    train, valid = train_utils.load_data_for_training(config, obs_keys=shape_meta["all_obs_keys"])
    loader = DataLoader(train, batch_size=16, shuffle=True, drop_last=True)
    losses = [train_utils.run_epoch(model, loader, epoch=k + 1, num_steps=1)["Loss"] for k in range(steps)]
    valid_loss = train_utils.run_epoch(model, DataLoader(valid, batch_size=16), epoch=1, validate=True,
                                       num_steps=1)["Loss"]
    # What robomimic's base config (and its offline RL algorithms) load besides: the next observations.
    with config.values_unlocked():
        config.train.hdf5_load_next_obs = True
    with_next = train_utils.dataset_factory(config, obs_keys=shape_meta["all_obs_keys"], filter_by_attribute="valid")
    return {"env_meta": env_meta, "shape_meta": shape_meta, "train": train, "valid": valid, "with_next": with_next,
            "losses": losses, "valid_loss": valid_loss}


@pytest.mark.parametrize("which", ["collected", "converted"])
def test_robomimic_trains_its_default_bc_on_our_file(which, real_demos, converted):
    path = real_demos if which == "collected" else converted
    run = robomimic_bc(path)
    env_meta = run["env_meta"]  # what robomimic would make the environment from
    assert set(env_meta) == {"env_name", "type", "env_kwargs"} and env_meta["type"] == 2
    assert env_meta["env_name"] == "R2S2R-PickSort-Real-v0" and env_meta["env_kwargs"]["control_hz"] == 20.0
    assert run["shape_meta"]["ac_dim"] == 27 and not run["shape_meta"]["use_images"]
    assert run["shape_meta"]["all_shapes"] == {"arm_dq": [7], "arm_q": [7], "ee_pose": [7], "hand_q": [20]}
    train, valid = run["train"], run["valid"]
    with h5py.File(path) as f:
        masks = {k: sorted(n.decode() for n in f[f"mask/{k}"][()]) for k in ("train", "valid")}
        lengths = {n: f[f"data/{n}"].attrs["num_samples"] for n in f["data"]}
    assert sorted(train.demos) == masks["train"] and sorted(valid.demos) == masks["valid"]
    assert (train.n_demos, valid.n_demos) == (7, 1)  # one demo in ten, rounded
    assert len(train) == sum(lengths[n] for n in masks["train"])
    # What robomimic hands an algorithm, one sample per step of the validation demo: the stored reward and end of
    # the episode (not zeros filled in) and the next observation.
    samples = [run["with_next"][i] for i in range(len(run["with_next"]))]
    got = {key: np.concatenate([s[key] for s in samples]) for key in ("actions", "rewards", "dones")}
    for group in ("obs", "next_obs"):
        got[group] = np.concatenate([s[group]["ee_pose"] for s in samples]).astype(np.float32)
    with DemoReader(path) as reader:
        demo = reader.load(valid.demos[0])
    steps = len(demo["actions"])
    np.testing.assert_array_equal(got["actions"], demo["actions"].astype(np.float32))
    np.testing.assert_array_equal(got["rewards"], np.eye(steps)[-1])
    np.testing.assert_array_equal(got["dones"], np.eye(steps)[-1])
    np.testing.assert_array_equal(got["obs"], demo["obs"]["ee_pose"].astype(np.float32))
    np.testing.assert_array_equal(got["next_obs"], demo["obs"]["ee_pose"][np.r_[1:steps, steps - 1]].astype(np.float32))
    losses = run["losses"]
    assert np.isfinite(losses).all() and np.isfinite(run["valid_loss"])
    print(f"{which}: BC losses {np.round(losses, 4).tolist()}, validation {run['valid_loss']:.4f}")


# -- old files -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_old_files_read_as_the_current_layout(version, real_demos, tmp_path):
    old = tmp_path / f"v{version}.hdf5"
    write_legacy(real_demos, old, version)
    fields = ("obs/datagen_info/eef_pose/right", "obs/datagen_info/object_pose/target_bin")
    with DemoReader(real_demos) as new, DemoReader(old, fields=fields, shapes={f: (4, 4) for f in fields},
                                                      finite=fields) as reader:
        assert reader.format_version == version and reader.names == new.names
        assert reader.env_args == new.env_args
        for name in reader.names:
            a, b = new.load(name), reader.load(name)
            flat_a, flat_b = dict(_leaves(a)), dict(_leaves(b))
            assert flat_a.keys() == flat_b.keys()
            for key, value in flat_a.items():
                if value.dtype.kind == "f":  # float32 poses through position + quaternion and back
                    np.testing.assert_allclose(flat_b[key], value, atol=1e-6, err_msg=key)
                else:
                    np.testing.assert_array_equal(flat_b[key], value, err_msg=key)


def test_convert_dataset_upgrades_in_place_crash_safely(legacy, tmp_path, monkeypatch, capsys):
    path = tmp_path / "real.hdf5"
    path.write_bytes(legacy.read_bytes())
    before = path.read_bytes()
    # The writer refuses to append version-2 demos to the old file.
    with pytest.raises(DatasetError, match=r"format_version = 1: expected 2 .*scripts/convert_dataset.py"):
        DemoWriter(path, "R2S2R-PickSort-Real-v0", {})
    assert path.read_bytes() == before and not list(tmp_path.glob("*.partial"))
    # A conversion that dies on its third demo leaves the source as it was.
    original, calls = DemoWriter.append, []

    def dying(self, demo, attrs=None):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(self, demo, attrs)

    monkeypatch.setattr(DemoWriter, "append", dying)
    with pytest.raises(KeyboardInterrupt):
        run_script_in_process("convert_dataset.py", str(path), cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert path.read_bytes() == before
    monkeypatch.setattr(DemoWriter, "append", original)
    code, err = run_script_in_process("convert_dataset.py", str(path), cwd=tmp_path, monkeypatch=monkeypatch,
                                      capsys=capsys)
    assert code == 0, err
    assert not list(tmp_path.glob("*.partial"))
    with DemoReader(path) as reader, DemoReader(legacy) as old:
        assert reader.format_version == 2 and reader.names == old.names
        assert [reader.attrs(n)["seed"] for n in reader.names] == [old.attrs(n)["seed"] for n in old.names]
        assert reader.data_attrs()["collect_seed0"] == old.data_attrs()["collect_seed0"]
    # Rerunning leaves the upgraded file alone; a missing or malformed file is exit status 2, named.
    upgraded = path.read_bytes()
    code, _ = run_script_in_process("convert_dataset.py", str(path), cwd=tmp_path, monkeypatch=monkeypatch,
                                    capsys=capsys)
    assert code == 0 and path.read_bytes() == upgraded
    code, err = run_script_in_process("convert_dataset.py", str(tmp_path / "nope.hdf5"), cwd=tmp_path,
                                      monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "nope.hdf5: no such dataset file" in err
    bad = tmp_path / "bad.hdf5"
    bad.write_bytes(legacy.read_bytes())
    with h5py.File(bad, "a") as f:
        del f["data/demo_3/obs/datagen_info/eef_pose"]
        f["data/demo_3/obs/datagen_info/eef_pose"] = np.zeros((int(f["data/demo_3"].attrs["num_samples"]), 6))
    code, err = run_script_in_process("convert_dataset.py", str(bad), cwd=tmp_path, monkeypatch=monkeypatch,
                                      capsys=capsys)
    assert code == 2 and "bad.hdf5: demo_3: field 'obs/datagen_info/eef_pose' has shape" in err
    assert "expected (T, 7), as format_version 1 stores it" in err
