"""Malformed demo datasets, generated from one tiny valid file: every case is refused by the one validator
(`DemoReader`, `check_dataset`) with a `DatasetError` naming the file and the group, dataset or attr at fault; a few
go through the tools that read datasets, which exit non-zero without a traceback and leave nothing behind.

Cases:
  truncated    the file cut at many offsets (HDF5 reports a file shorter than its stored end of file).
  flipped      bytes flipped in the superblock, and in the compressed chunks of actions, images and states.
  structure    missing or misplaced groups, datasets and attrs; `env_args` not JSON, not an object, an unknown
               or missing task, `env_kwargs` not an object; an empty `data` group; a format_version from the
               future; masks naming no demo; next_obs mapped onto another demo's obs.
  values       NaN / inf actions and ones of absurd magnitude (beyond +-100), wrong action widths and dtypes,
               rows that disagree with the actions, NaN states and initial states, `num_samples` and `total` that
               contradict the data, failed demos, bad seeds, float or mixed-size images, mixed widths, flat
               datagen_info poses (and, in an older file, flat ones of the wrong width), and what a tool asks for
               through the validator's arguments.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest

from r2s2r.data import DatasetError, DemoWriter
from r2s2r.data.hdf5 import check_dataset

from conftest import run_script, run_script_in_process

ROOT = Path(__file__).resolve().parents[2]
TASK = "R2S2R-PickSort-Real-v0"
STEPS, DEMOS, SIZE = 6, 3, 16


def make_demo(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    states = rng.normal(size=(STEPS, 10))
    return {
        "actions": rng.normal(size=(STEPS, 27)),
        "obs": {
            "right_wrist": rng.integers(0, 256, (STEPS, SIZE, SIZE, 3), dtype=np.uint8),
            "arm_q": rng.normal(size=(STEPS, 7)), "arm_dq": rng.normal(size=(STEPS, 7)),
            "hand_q": rng.normal(size=(STEPS, 20)), "ee_pose": rng.normal(size=(STEPS, 7)),
            "datagen_info": {"object_pose": {"object": rng.normal(size=(STEPS, 4, 4))}},
        },
        "states": states,
        "initial_state": states[:1].copy(),
    }


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("valid") / "valid.hdf5"
    with DemoWriter(path, TASK, {"cameras": ["right_wrist"], "image_size": [SIZE, SIZE]}) as writer:
        for seed in range(DEMOS):
            writer.append(make_demo(seed), {"seed": seed, "success": True, "condition": "nominal"})
    assert check_dataset(path, min_demos=1) == DEMOS
    return path


# -- the cases -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    id: str
    mutate: object  # (path) -> None: corrupts the copy in place
    expect: tuple[str, ...]  # substrings of the message besides the file name: the group/dataset/attr, the value...
    needs: dict = field(default_factory=dict)  # the validator's arguments (what a tool asks for)


def edit(fn):
    """A mutation that edits the file with h5py."""
    def mutate(path: Path) -> None:
        with h5py.File(path, "a") as f:
            fn(f)
    return mutate


def truncate(fraction: float | None = None, keep: int | None = None):
    def mutate(path: Path) -> None:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(keep if keep is not None else int(size * fraction))
    return mutate


def truncate_end(cut: int):
    def mutate(path: Path) -> None:
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size - cut)
    return mutate


def flip_at(offset: int):
    def mutate(path: Path) -> None:
        with open(path, "r+b") as f:
            f.seek(offset)
            byte = f.read(1)
            f.seek(offset)
            f.write(bytes([byte[0] ^ 0xFF]))
    return mutate


def flip_chunk(dataset: str, where: float):
    """Flip one byte inside the first compressed chunk of `dataset` (HDF5 finds it when inflating the chunk)."""
    def mutate(path: Path) -> None:
        with h5py.File(path, "r") as f:
            info = f[dataset].id.get_chunk_info(0)
        flip_at(info.byte_offset + int(info.size * where))(path)
    return mutate


def set_attr(obj: str, key: str, value):
    return edit(lambda f: f[obj].attrs.__setitem__(key, value))


def del_attr(obj: str, key: str):
    return edit(lambda f: f[obj].attrs.__delitem__(key))


def replace(dataset: str, value):
    def fn(f):
        del f[dataset]
        f.create_dataset(dataset, data=value)
    return edit(fn)


def set_value(dataset: str, index, value):
    def fn(f):
        array = f[dataset][()]
        array[index] = value
        del f[dataset]
        f.create_dataset(dataset, data=array)
    return edit(fn)


def next_obs_of(demo: str, other: str, key: str):
    """next_obs/<key> of `demo` remapped onto `other`'s obs/<key> (what renaming demo groups by hand leaves)."""
    def fn(f):
        source = f[f"data/{other}/obs/{key}"]
        layout = h5py.VirtualLayout(shape=source.shape, dtype=source.dtype)
        layout[:] = h5py.VirtualSource(source)
        del f[f"data/{demo}/next_obs/{key}"]
        f[f"data/{demo}"].create_virtual_dataset(f"next_obs/{key}", layout)
    return fn


def env_args(**changes):
    def fn(f):
        args = json.loads(f["data"].attrs["env_args"])
        args.update(changes)
        f["data"].attrs["env_args"] = json.dumps({k: v for k, v in args.items() if v is not None})
    return edit(fn)


def _cases() -> list[Case]:
    cases: list[Case] = []
    corrupt = ("truncated or corrupt",)
    # Truncated: HDF5 refuses a file shorter than its stored end of file; below the superblock it is no HDF5 file.
    for fraction in (0.003, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
        cases.append(Case(f"truncated-{fraction}", truncate(fraction), ()))
    for cut in (1, 8, 100, 1000):
        cases.append(Case(f"truncated-end-minus-{cut}", truncate_end(cut), corrupt))
    cases.append(Case("empty-file", truncate(keep=0), ("not an HDF5 file",)))
    # Flipped bytes: the signature, the superblock's sizes and addresses; compressed chunks of the data.
    for offset in (0, 1, 4, 7):
        cases.append(Case(f"flip-signature-{offset}", flip_at(offset), ("not an HDF5 file",)))
    for offset in (8, 13, 14, 40, 41, 44):
        cases.append(Case(f"flip-superblock-{offset}", flip_at(offset), corrupt))
    for dataset, at in (("data/demo_0/actions", 0.5), ("data/demo_2/actions", 0.2),
                        ("data/demo_1/obs/right_wrist", 0.5), ("data/demo_2/obs/right_wrist", 0.9),
                        ("data/demo_1/states", 0.5), ("data/demo_0/obs/hand_q", 0.3)):
        name = dataset.split("/", 2)[2]
        cases.append(Case(f"flip-chunk-{dataset.replace('/', '.')}-{at}", flip_chunk(dataset, at),
                          (dataset.split("/")[1], name, "corrupt")))
    # Structure.
    cases += [
        Case("no-data-group", edit(lambda f: f.move("data", "episodes")), ("no 'data' group",)),
        Case("data-is-a-dataset", edit(lambda f: (f.move("data", "old"), f.create_dataset("data", data=[1]))),
             ("no 'data' group",)),
        Case("no-env-args", del_attr("data", "env_args"), ("'env_args'",)),
        Case("env-args-not-json", set_attr("data", "env_args", "{env_name: x"), ("env_args", "not JSON")),
        Case("env-args-plain-text", set_attr("data", "env_args", "hello"), ("env_args", "'hello'", "not JSON")),
        Case("env-args-a-list", set_attr("data", "env_args", "[1, 2]"), ("env_args", "[1, 2]", "JSON object")),
        Case("env-args-a-number", set_attr("data", "env_args", 3), ("env_args", "JSON")),
        Case("unknown-task", env_args(env_name="Isaac-Lift-Cube-v0"),
             ("env_name = 'Isaac-Lift-Cube-v0'", "unknown task ID", TASK)),
        Case("no-task", env_args(env_name=None), ("env_name = None", "unknown task ID")),
        Case("task-not-a-string", env_args(env_name=7), ("env_name = 7", "unknown task ID")),
        Case("empty-data-group", edit(lambda f: [f["data"].__delitem__(n) for n in list(f["data"])]),
             ("holds no demos", "expected at least 1"), {"min_demos": 1}),
        Case("too-few-demos", edit(lambda f: f["data"].__delitem__("demo_2")), ("holds 2 demos", "at least 3"),
             {"min_demos": 3}),
        Case("member-is-a-dataset", edit(lambda f: f["data"].create_dataset("demo_9", data=[1.0])),
             ("'data/demo_9'", "expected a demo group")),
        Case("no-actions", edit(lambda f: f["data/demo_1"].__delitem__("actions")),
             ("demo_1", "field 'actions' is missing")),
        Case("actions-a-group", edit(lambda f: (f["data/demo_1"].__delitem__("actions"),
                                                f["data/demo_1"].create_group("actions"))),
             ("demo_1", "field 'actions' is missing")),
        Case("missing-required-field", edit(lambda f: f["data/demo_2"].__delitem__("initial_state")),
             ("demo_2", "field 'initial_state' is missing", "replay"),
             {"fields": ("initial_state",), "purpose": "replay restores it"}),
        Case("missing-required-camera", edit(lambda f: f["data/demo_0/obs"].__delitem__("right_wrist")),
             ("demo_0", "field 'obs/right_wrist' is missing"), {"cameras": ("right_wrist",)}),
        Case("camera-not-images", replace("data/demo_0/obs/ee_pose", np.zeros((STEPS, 7))),
             ("demo_0", "'obs/ee_pose'", "uint8 images"), {"cameras": ("ee_pose",)}),
        Case("missing-required-attr", del_attr("data/demo_1", "seed"), ("demo_1", "attr 'seed' is missing"),
             {"attrs": ("seed",)}),
        Case("required-shape", edit(lambda f: None), ("demo_0", "'obs/datagen_info/object_pose/object'", "(6, 3)"),
             {"shapes": {"obs/datagen_info/object_pose/object": (3,)}}),
        Case("env-kwargs-a-list", env_args(env_kwargs=[1]), ("env_kwargs = [1]", "JSON object")),
        Case("format-version-newer", set_attr("/", "format_version", 3), ("'format_version' = 3", "newer")),
        Case("mask-unknown-demo", replace("mask/valid", np.array([b"demo_7"])), ("'mask/valid'", "demo_7")),
        Case("mask-numbers", replace("mask/train", np.arange(3)), ("'mask/train'", "demo names")),
        Case("next-obs-of-another-demo", edit(next_obs_of("demo_1", "demo_0", "hand_q")),
             ("demo_1", "'next_obs/hand_q'", "/data/demo_0/obs/hand_q", "/data/demo_1/obs/hand_q")),
    ]
    # Values.
    for dataset, index, value in (("data/demo_0/actions", (0, 0), np.nan), ("data/demo_1/actions", (3, 26), np.inf),
                                  ("data/demo_2/actions", (5, 10), -np.inf)):
        demo = dataset.split("/")[1]
        cases.append(Case(f"actions-{value}-{demo}", set_value(dataset, index, value),
                          (demo, "field 'actions' is not finite", f"step {index[0]}, column {index[1]}")))
    # Finite but absurd: no position (m), quaternion entry or joint target (rad) comes near 100.
    for dataset, index, value in (("data/demo_1/actions", (2, 0), 1e30), ("data/demo_2/actions", (4, 7), -100.5)):
        demo = dataset.split("/")[1]
        cases.append(Case(f"actions-{value:g}-{demo}", set_value(dataset, index, value),
                          (demo, "field 'actions' is out of range", f"{value:g}", f"step {index[0]}, column {index[1]}",
                           "expected finite values within +-100")))
    for shape in ((STEPS, 26), (STEPS, 28), (STEPS,), (STEPS, 27, 1), (0, 27)):
        cases.append(Case(f"actions-shape-{'x'.join(map(str, shape))}", replace("data/demo_1/actions", np.zeros(shape)),
                          ("demo_1", f"field 'actions' has shape {shape}", "expected (T, 27)")))
    cases += [
        Case("actions-policy-width", edit(lambda f: None), ("demo_0", "has shape (6, 27)", "expected (T, 7)"),
             {"action_dim": 7}),
        Case("actions-strings", replace("data/demo_0/actions", np.array([["a"] * 27] * STEPS, dtype="S1")),
             ("demo_0", "'actions' has dtype", "real numbers")),
        Case("obs-rows", replace("data/demo_1/obs/hand_q", np.zeros((STEPS - 1, 20))),
             ("demo_1", "'obs/hand_q' has shape (5, 20)", "expected 6 rows")),
        Case("states-rows", replace("data/demo_2/states", np.zeros((STEPS + 2, 10))),
             ("demo_2", "'states' has shape (8, 10)", "expected 6 rows")),
        Case("states-nan", set_value("data/demo_1/states", (2, 3), np.nan), ("demo_1", "'states' is not finite")),
        Case("initial-state-nan", set_value("data/demo_1/initial_state", (0, 3), np.nan),
             ("demo_1", "'initial_state' is not finite", "expected finite")),
        Case("proprio-inf", set_value("data/demo_0/obs/arm_q", (1, 1), np.inf),
             ("demo_0", "'obs/arm_q' is not finite"), {"finite": ("obs/arm_q",)}),
        Case("initial-state-2d", replace("data/demo_0/initial_state", np.zeros((2, 10))),
             ("demo_0", "'initial_state' has shape (2, 10)", "one state")),
        Case("initial-state-width", replace("data/demo_0/initial_state", np.zeros((1, 9))),
             ("demo_0", "'initial_state' has shape (1, 9)", "a row of 'states'")),
        Case("initial-state-flat", replace("data/demo_0/initial_state", np.zeros(10)),
             ("demo_0", "'initial_state' has shape (10,)", "one state (1, N)")),
        Case("pose-flat", replace("data/demo_2/obs/datagen_info/object_pose/object", np.zeros((STEPS, 7))),
             ("demo_2", "'obs/datagen_info/object_pose/object' has shape (6, 7)", "(6, 4, 4) poses")),
        Case("pose-not-a-group", edit(lambda f: (f["data/demo_1/obs/datagen_info"].__delitem__("object_pose"),
                                                 f["data/demo_1/obs/datagen_info"].create_dataset(
                                                     "object_pose", data=np.zeros((STEPS, 4, 4))))),
             ("demo_1", "'obs/datagen_info/object_pose' has shape (6, 4, 4)", "one array per name")),
        Case("legacy-pose-width", edit(lambda f: (f.attrs.__setitem__("format_version", 1),
                                                  f["data/demo_0/obs/datagen_info"].__delitem__("object_pose"),
                                                  f["data/demo_0/obs/datagen_info"].create_dataset(
                                                      "object_pose", data=np.zeros((STEPS, 6))))),
             ("demo_0", "'obs/datagen_info/object_pose' has shape (6, 6)", "(T, 7)", "format_version 1")),
        Case("images-float", replace("data/demo_0/obs/right_wrist", np.zeros((STEPS, SIZE, SIZE, 3), np.float32)),
             ("demo_0", "'obs/right_wrist'", "float32", "expected uint8")),
        Case("images-mixed-sizes", replace("data/demo_2/obs/right_wrist", np.zeros((STEPS, 8, 8, 3), np.uint8)),
             ("demo_2", "'obs/right_wrist' has shape (6, 8, 8, 3)", "(6, 16, 16, 3)", "as in demo_0")),
        Case("proprio-mixed-widths", replace("data/demo_1/obs/hand_q", np.zeros((STEPS, 16))),
             ("demo_1", "'obs/hand_q' has shape (6, 16)", "(6, 20)")),
        Case("obs-strings", replace("data/demo_1/obs/arm_q", np.array(["x"] * STEPS, dtype="S1")),
             ("demo_1", "'obs/arm_q' has dtype", "expected numbers")),
        Case("num-samples-more", set_attr("data/demo_1", "num_samples", STEPS + 1),
             ("demo_1", "attr 'num_samples' = 7", "expected 6")),
        Case("num-samples-zero", set_attr("data/demo_0", "num_samples", 0),
             ("demo_0", "attr 'num_samples' = 0", "expected 6")),
        Case("num-samples-text", set_attr("data/demo_2", "num_samples", "six"),
             ("demo_2", "attr 'num_samples' = 'six'", "expected 6")),
        Case("num-samples-float", set_attr("data/demo_2", "num_samples", 6.5),
             ("demo_2", "attr 'num_samples' = 6.5", "expected 6")),
        Case("total-wrong", set_attr("data", "total", 5), ("data.attrs['total'] = 5", f"expected {STEPS * DEMOS}")),
        Case("failed-demo", set_attr("data/demo_1", "success", False),
             ("demo_1", "attr 'success' = False", "expected True")),
        Case("success-zero", set_attr("data/demo_2", "success", 0), ("demo_2", "attr 'success' = 0", "expected True")),
        Case("seed-negative", set_attr("data/demo_0", "seed", -3), ("demo_0", "attr 'seed' = -3", "integer >= 0")),
        Case("seed-text", set_attr("data/demo_0", "seed", "abc"), ("demo_0", "attr 'seed' = 'abc'", "integer")),
        Case("condition-number", set_attr("data/demo_0", "condition", 4.0),
             ("demo_0", "attr 'condition' = 4.0", "a string")),
    ]
    return cases


CASES = _cases()


def corrupt_copy(valid: Path, folder: Path, case: Case) -> Path:
    path = folder / f"{case.id}.hdf5"
    shutil.copyfile(valid, path)
    case.mutate(path)
    return path


def test_there_are_enough_cases():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_validator_refuses_it_naming_the_file_and_field(case, valid, tmp_path):
    path = corrupt_copy(valid, tmp_path, case)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(DatasetError) as err:
        check_dataset(path, **case.needs)
    message = str(err.value)
    assert message.startswith(f"{path}:"), message
    for part in case.expect:
        assert part in message, f"{part!r} not in {message!r}"
    assert sorted(os.listdir(tmp_path)) == before  # nothing left behind


# -- through the tools ------------------------------------------------------------------------------------------------
def refused(tool: str, args: list[str], cwd: Path, monkeypatch, capsys) -> tuple[int, str]:
    """(exit status, stderr) of `tool` refusing its input. Run in this process (`run_script_in_process`: an
    exception fails the test, as a traceback would show when run as a program), except train.py, a Hydra application,
    which runs as a program and must print no traceback."""
    if tool != "train.py":
        return run_script_in_process(tool, *args, cwd=cwd, monkeypatch=monkeypatch, capsys=capsys)
    result = run_script(tool, *args, cwd=cwd, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr


def _train_args(run_dir: Path, dataset: Path) -> list[str]:
    return [f"run_dir={run_dir}", "steps=2", "batch_size=4", f"data.datasets=[{{path: {dataset}, weight: 1.0}}]",
            "policy.cameras=[right_wrist]", f"policy.image_size=[{SIZE},{SIZE}]", "policy.dim=16", "policy.heads=2",
            "policy.obs_layers=1", "policy.action_layers=1", "policy.chunk=2", "policy.execute=1", "threads=1"]


TOOL_CASES = [
    # (case id, tool, expected substrings besides the file name)
    ("truncated-0.5", "replay.py", ("truncated or corrupt",)),
    ("actions-nan-demo_0", "replay.py", ("demo_0", "not finite")),
    ("unknown-task", "world_report.py", ("unknown task ID",)),
    ("missing-required-attr", "world_report.py", ("demo_1", "attr 'seed' is missing")),
    ("flip-superblock-40", "train.py", ("truncated or corrupt",)),
    ("images-mixed-sizes", "train.py", ("demo_2", "obs/right_wrist")),
    ("truncated-end-minus-100", "collect_real.py", ("truncated or corrupt",)),
    ("num-samples-more", "collect_real.py", ("demo_1", "num_samples")),
    ("flip-chunk-data.demo_1.obs.right_wrist-0.5", "collect_real.py", ("demo_1", "obs/right_wrist")),
    ("actions-1e+30-demo_1", "train.py", ("demo_1", "'actions' is out of range (1e+30", "within +-100")),
    ("initial-state-nan", "replay.py", ("demo_1", "'initial_state' is not finite")),
    ("states-nan", "render_states.py", ("demo_1", "'states' is not finite")),
    # Refused at demo_1, after demo_0 was converted: the partial output goes too.
    ("initial-state-nan", "convert_dataset.py", ("demo_1", "'initial_state' is not finite")),
]


@pytest.mark.parametrize("case_id,tool,expect", TOOL_CASES, ids=[f"{t}-{c}" for c, t, _ in TOOL_CASES])
def test_the_tools_refuse_it_and_leave_nothing(case_id, tool, expect, valid, tmp_path, monkeypatch, capsys):
    case = next(c for c in CASES if c.id == case_id)
    work = tmp_path / "work"
    work.mkdir()
    path = corrupt_copy(valid, tmp_path, case)
    out = work / "out"
    if tool == "replay.py":
        args = ["--dataset", str(path)]
    elif tool == "world_report.py":
        args = ["--demos", str(path), "--episodes", "1", "--output-dir", str(out)]
    elif tool == "train.py":
        args = _train_args(out, path)
    elif tool == "render_states.py":
        args = ["--dataset", str(path), "--cameras", "right_wrist", "--output", str(out / "rendered.hdf5")]
    elif tool == "convert_dataset.py":
        out = work / "converted.hdf5"  # in an existing folder: the writer would make a missing one
        args = [str(path), "--output", str(out)]
    else:
        args = ["--output", str(out / "real.hdf5"), "--import", str(path)]
    code, stderr = refused(tool, args, work, monkeypatch, capsys)
    assert code != 0
    assert str(path) in stderr, stderr
    for part in expect:
        assert part in stderr, stderr
    assert not out.exists() and [p.name for p in work.iterdir()] == []  # nothing left behind


def test_the_writer_refuses_what_the_reader_would(tmp_path):
    """The same rules hold for a demo being written (generation, collection): nothing is published."""
    path = tmp_path / "out.hdf5"
    with pytest.raises(DatasetError, match="'actions' is out of range"), DemoWriter(path, TASK) as writer:
        demo = make_demo(0)
        demo["actions"][1, 3] = 99.0  # large, but within the bound
        writer.append(demo)
        demo["actions"][1, 3] = 1e30
        writer.append(demo)
    demo = make_demo(1)
    demo["initial_state"][0, 0] = np.inf
    with pytest.raises(DatasetError, match="'initial_state' is not finite"), DemoWriter(path, TASK) as writer:
        writer.append(demo)
    assert not path.exists()


def test_converting_onto_an_existing_folder_is_refused_before_any_work(valid, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "converted.hdf5"
    folder.mkdir()
    code, stderr = run_script_in_process("convert_dataset.py", str(valid), "--output", str(folder), cwd=tmp_path,
                                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "Traceback" not in stderr, stderr
    assert f"argument --output/-o: {str(folder)!r}: is a folder; expected a file path" in stderr, stderr
    assert [p.name for p in tmp_path.iterdir()] == [folder.name] and not any(folder.iterdir())


@pytest.mark.parametrize("tool, field", [("replay.py", "initial_state"), ("render_states.py", "states")])
def test_states_of_another_model_are_refused_before_any_output(tool, field, valid, tmp_path, monkeypatch, capsys):
    """The tiny file's states are 10 wide, not qpos | qvel of the task's model: refused before a step is replayed
    or a partial output is made (set_state would raise halfway through)."""
    out = tmp_path / "out"
    args = ["--dataset", str(valid)]
    if tool == "render_states.py":
        args += ["--cameras", "right_wrist", "--output", str(out / "rendered.hdf5"), "--no-progress"]
    code, stderr = refused(tool, args, tmp_path, monkeypatch, capsys)
    assert code == 2, stderr
    assert f"error: {valid}: field {field!r} holds states of 10 values: expected" in stderr, stderr
    assert "qpos" in stderr and list(tmp_path.iterdir()) == []
