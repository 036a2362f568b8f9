"""LeRobot v3 export (scripts/export_lerobot.py), read back with LeRobot's own dataset class."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_script, run_script_in_process
from test_demo_hdf5 import ENV, attrs_for, make_demo

from r2s2r.data import DemoWriter


SIZE = 32
STEPS = (12, 15)
# AV1 at LeRobot's default quality (crf 30, 4:2:0 chroma) on a smooth 32x32 picture: measured mean abs error per
# frame 2.3-3.4 grey levels (of 255), in the pixels where the square moved at most 6.5 against 140-180 to the next
# source frame. The bound leaves room for other encoder builds.
MAX_MEAN_ABS_ERROR = 6.0


def camera(steps: int, shift: int) -> np.ndarray:
    """A smooth gradient with a white square moving 2 px per frame, so each frame differs from the next."""
    y, x = np.mgrid[:SIZE, :SIZE]
    images = np.empty((steps, SIZE, SIZE, 3), np.uint8)
    for t in range(steps):
        image = np.stack([x * 6, y * 6, np.full_like(x, 90)], axis=-1).astype(np.uint8)
        left = (shift + 2 * t) % (SIZE - 8)
        image[12:20, left:left + 8] = 255
        images[t] = image
    return images


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Two demos in our HDF5 layout (DemoWriter), with one camera and a prompt."""
    path = tmp_path_factory.mktemp("lerobot_src") / "demos.hdf5"
    with DemoWriter(path, ENV, {"cameras": ["cam"], "image_size": [SIZE, SIZE], "control_hz": 20.0}) as writer:
        for seed, steps in enumerate(STEPS):
            demo = make_demo(seed, steps)
            demo["obs"]["cam"] = camera(steps, shift=5 * seed)
            writer.append(demo, {**attrs_for(seed), "prompt": f"sort the cube {seed}"})
    return path


@pytest.fixture(scope="module")
def exported(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("lerobot_out") / "ds"
    from r2s2r.data.lerobot import export_lerobot

    export_lerobot(source, out)
    return out


def test_lerobot_reads_back_the_episodes_frames_and_features(source, exported):
    from r2s2r.data import DemoReader
    from r2s2r.data.lerobot import lerobot_dataset_class

    ds = lerobot_dataset_class()("local/ds", root=exported)
    assert ds.num_episodes == 2 and ds.num_frames == sum(STEPS) and len(ds) == sum(STEPS)
    assert ds.fps == 20
    features = ds.meta.features
    assert tuple(features["action"]["shape"]) == (27,)
    # The file's order: ee_pose (7) then hand_q (20), named per column.
    assert tuple(features["observation.state"]["shape"]) == (27,)
    assert features["observation.state"]["names"][:2] == ["ee_pose.0", "ee_pose.1"]
    assert features["observation.state"]["names"][7] == "hand_q.0"
    assert tuple(features["observation.images.cam"]["shape"]) == (SIZE, SIZE, 3)
    assert features["observation.images.cam"]["dtype"] == "video"

    index = 0
    with DemoReader(source) as reader:
        for episode, name in enumerate(reader.names):
            demo = reader.load(name)
            obs = demo["obs"]
            state = np.concatenate([obs["ee_pose"], obs["hand_q"]], axis=1).astype(np.float32)
            images = obs["cam"].astype(np.float32)
            for t in range(len(demo["actions"])):
                item = ds[index]
                index += 1
                assert int(item["episode_index"]) == episode and int(item["frame_index"]) == t
                assert item["task"] == f"sort the cube {episode}"
                np.testing.assert_array_equal(item["action"].numpy(), demo["actions"][t].astype(np.float32))
                np.testing.assert_array_equal(item["observation.state"].numpy(), state[t])
                decoded = item["observation.images.cam"].permute(1, 2, 0).numpy() * 255  # CHW float in [0, 1]
                error = np.abs(decoded - images[t]).mean()
                assert error < MAX_MEAN_ABS_ERROR, (name, t, error)
                # Where the square moved, the decoded frame matches its own source frame, not the next one.
                if t + 1 < len(images):
                    moved = (images[t] != images[t + 1]).any(axis=-1)
                    own = np.abs(decoded - images[t])[moved].mean()
                    next_ = np.abs(decoded - images[t + 1])[moved].mean()
                    assert next_ > 3 * own, (name, t, own, next_)


def test_episode_attrs_are_in_lerobots_episode_metadata(exported):
    from r2s2r.data.lerobot import lerobot_dataset_class

    episodes = lerobot_dataset_class()("local/ds", root=exported).meta.episodes
    assert episodes["r2s2r/demo"] == ["demo_0", "demo_1"]
    assert episodes["r2s2r/source"] == ["real", "real"]  # recorded on the twin's task ID
    assert episodes["r2s2r/success"] == [True, True]
    assert episodes["r2s2r/condition"] == ["nominal", "nominal"]
    assert episodes["r2s2r/colour"] == ["red", "red"]
    assert episodes["r2s2r/belt_speed"] == pytest.approx([0.1, 0.11])
    assert episodes["r2s2r/seed"] == [0, 1]
    assert not (exported / "images").exists()  # LeRobot's frame PNGs are not kept beside the videos


def test_overwrite_replaces_an_existing_dataset(source, tmp_path, monkeypatch, capsys):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "old.txt").write_text("old")
    code, err = run_script_in_process("export_lerobot.py", "--dataset", str(source), "--output", str(out),
                                      "--overwrite", "--no-progress", cwd=tmp_path, monkeypatch=monkeypatch,
                                      capsys=capsys)
    assert code == 0, err
    assert not (out / "old.txt").exists() and (out / "meta" / "info.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temporary folder left


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such dataset file"),
    ("not_hdf5", "not an HDF5 file"),
    ("no_data_group", "no 'data' group"),
    ("output_exists", "exists; expected a new folder"),
    ("output_is_file", "is a file; expected a folder"),
])
def test_bad_input_exits_2_with_one_line_and_leaves_nothing(case, expected, source, tmp_path, monkeypatch, capsys):
    import h5py

    dataset, out = tmp_path / "in.hdf5", tmp_path / "out"
    if case == "missing":
        dataset = tmp_path / "absent.hdf5"
    elif case == "not_hdf5":
        dataset.write_text("not a dataset")
    elif case == "no_data_group":
        h5py.File(dataset, "w").close()
    else:
        dataset = source
        if case == "output_exists":
            out.mkdir()
        else:
            out.write_text("a file")
    before = sorted(p.name for p in tmp_path.iterdir())
    code, err = run_script_in_process("export_lerobot.py", "--dataset", str(dataset), "--output", str(out),
                                      "--no-progress", cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_help_explains_the_export():
    result = run_script("export_lerobot.py", "--help", timeout=120)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for words in ("--dataset", "--output", "--overwrite", "observation.state", "r2s2r/<attr>", "Exit status 2"):
        assert words in text
