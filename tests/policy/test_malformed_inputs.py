"""Malformed inputs to the policy tools, generated: training configs, checkpoints, command-line arguments and output
paths. Each is refused with a message naming the field, option or file, the value and what was expected; a tool
exits non-zero without a traceback and leaves nothing behind. A training loss that turns non-finite stops the run
with an error naming the step and the loss, and no policy.pt.

Cases:
  configs      every numeric field of `TrainCfg` set to NaN, +-inf, a string, a boolean or a list, and just outside
               its range, through `compose_train_cfg` (Hydra overrides, as scripts/train.py takes them); overrides
               that do not parse or compose, and config files that are not YAML; a few through scripts/train.py
               itself.
  checkpoints  a tiny trained checkpoint with each top-level key deleted, values of the wrong type, configs that do
               not validate, weights that do not fit the config (shapes, keys, widths) or are not finite; truncated,
               empty, foreign and pickled files; a few through evaluate.py, play.py and analyze_latent.py.
  arguments    every numeric option of the tools given a value out of range or not a number; generate.py's
               KEY=VALUE overrides given NaN or an infinity.
  outputs      every tool's output path given as a folder where a file goes, or a file where a folder goes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import shutil
import types
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from r2s2r.core import ConfigError
from r2s2r.policy.agent import load_agent
from r2s2r.policy.checkpoint import CheckpointError
from r2s2r.policy.config import compose_train_cfg
from r2s2r.policy.train import Trainer, TrainingError
from r2s2r.policy.train_object_centric import ObjectCentricTrainer

from conftest import run_script, run_script_in_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def write_dataset(path: Path, demos: int = 2, steps: int = 12, size: int = 16) -> Path:
    """A tiny robomimic-layout dataset with one camera (right_wrist) and random content."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "R2S2R-PickSort-v0", "type": 2})
        for d in range(demos):
            demo = data.create_group(f"demo_{d}")
            demo.create_dataset("actions", data=rng.normal(size=(steps, 27)))
            demo.create_dataset("obs/right_wrist", data=rng.integers(0, 255, (steps, size, size, 3), dtype=np.uint8))
            for key, width in (("arm_q", 7), ("arm_dq", 7), ("hand_q", 20), ("ee_pose", 7)):
                demo.create_dataset(f"obs/{key}", data=rng.normal(size=(steps, width)))
    return path


def tiny_overrides(run_dir: Path, dataset: Path | str, steps: int = 4) -> list[str]:
    return [f"run_dir={run_dir}", f"steps={steps}", "batch_size=4", "log_every=2", "checkpoint_every=2",
            f"data.datasets=[{{path: {dataset}, weight: 1.0}}]", "policy.cameras=[right_wrist]",
            "policy.image_size=[16,16]", "policy.dim=16", "policy.heads=2", "policy.obs_layers=1",
            "policy.action_layers=1", "policy.chunk=4", "policy.execute=2", "optim.warmup_steps=0", "threads=1"]


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# -- training configs --------------------------------------------------------------------------------------------
# (dotted field, integer?, low, high, low end open?, high end open?): the documented range of every numeric field.
NUMERIC_FIELDS = [
    ("seed", True, 0, 2**32 - 1, False, False), ("steps", True, 1, 10**8, False, False),
    ("batch_size", True, 1, 65536, False, False), ("log_every", True, 1, 10**8, False, False),
    ("checkpoint_every", True, 1, 10**8, False, False), ("threads", True, 0, 1024, False, False),
    ("policy.action_dim", True, 1, 256, False, False), ("policy.chunk", True, 1, 1024, False, False),
    ("policy.execute", True, 1, 16, False, False), ("policy.dim", True, 8, 4096, False, False),
    ("policy.heads", True, 1, 64, False, False), ("policy.obs_layers", True, 1, 64, False, False),
    ("policy.action_layers", True, 1, 64, False, False), ("policy.dropout", False, 0, 1, False, True),
    ("policy.flow_steps", True, 1, 1000, False, False), ("data.random_shift", True, 0, 64, False, False),
    ("optim.lr", False, 0, 1, True, False), ("optim.weight_decay", False, 0, 1, False, False),
    ("optim.warmup_steps", True, 0, 10**8, False, False), ("optim.grad_clip", False, 0, 1e6, True, False),
    ("optim.ema_decay", False, 0, 1, False, True), ("cotrain.alignment_weight", False, 0, 100, False, False),
    ("object_centric.estimator_steps", True, 1, 10**8, False, False),
    ("object_centric.estimator_batch", True, 1, 65536, False, False),
    ("object_centric.head_batch", True, 1, 65536, False, False),
    ("object_centric.keypoints", True, 1, 256, False, False), ("object_centric.hidden", True, 1, 16384, False, False),
    ("object_centric.dropout", False, 0, 1, False, True),
    ("object_centric.lighting_augmentation", False, 0, 10, False, False),
    ("object_centric.keypoint_weight", False, 0, 1000, False, False),
    ("object_centric.state_noise", False, 0, 1, False, False),
    ("object_centric.hand_shift_fraction", False, 0, 1, False, False),
    ("object_centric.control_hz", False, 0, 1000, True, False),
    ("object_centric.holdout_demos", True, 0, 10**6, False, False),
    ("object_centric.hand_cover", False, 0, 1, False, False),
]


@dataclass(frozen=True)
class ConfigCase:
    id: str
    overrides: tuple[str, ...]
    expect: tuple[str, ...]  # substrings of the message: the field, the value as shown, what was expected


def _config_cases() -> list[ConfigCase]:
    cases: list[ConfigCase] = []

    def add(field: str, text: str, shown: str, expected: str = "expected", case_id: str | None = None) -> None:
        cases.append(ConfigCase(case_id or f"{field}={text}", (f"{field}={text}",), (field, f"= {shown}", expected)))

    # Per field: NaN, each end of its range crossed, and one more of infinities and wrong types in turn (every kind
    # of value reaches fields of both types; composing through Hydra costs a fraction of a second per case).
    others = [("inf", "inf"), ("-inf", "-inf"), ("abc", "'abc'"), ("true", "True"), ("[1,2]", "[1, 2]")]
    for i, (field, integer, lo, hi, lo_open, hi_open) in enumerate(NUMERIC_FIELDS):
        kind = "expected an integer" if integer else "expected a"
        add(field, "nan", "nan", kind)
        text, shown = others[i % len(others)]
        add(field, text, shown, kind)
        if integer:
            below, above = lo - 1, hi + 1
            add(field, str(below), str(below))
            add(field, str(above), str(above))
        else:
            below = lo if lo_open else lo - 0.5
            above = hi if hi_open else hi * 2 + 1
            add(field, repr(float(below)), repr(float(below)), "expected a finite number in")
            add(field, repr(float(above)), repr(float(above)), "expected a finite number in")
    for field in ("steps", "policy.heads", "optim.warmup_steps", "object_centric.keypoints"):
        add(field, "1.5", "1.5", "expected an integer")  # a fraction where an integer is expected
    for field in ("optim.lr", "optim.grad_clip", "object_centric.control_hz"):  # negative, where 0 is the open end
        add(field, "-1.0", "-1.0", "expected a finite number in (0,")
    # Integers too large for a float, and fields that must agree with each other.
    add("optim.lr", "1" * 400, "an integer of 400 digits", "expected a number of magnitude",
        case_id="optim.lr=<an integer of 400 digits>")
    add("policy.dim", "36", "36", "expected a multiple of 8")
    # A list field: its length, and each element's range named by its index.
    add("object_centric.hand_shift", "[0.01,0.01]", "[0.01, 0.01]", "expected a list of 3 numbers")
    for value, element, shown in (("[0.01,nan,0.01]", 1, "nan"), ("[0.01,0.01,2.0]", 2, "2.0")):
        cases.append(ConfigCase(f"object_centric.hand_shift={value}", (f"object_centric.hand_shift={value}",),
                                (f"object_centric.hand_shift[{element}] = {shown}", "expected a finite number in [0, 1]")))
    add("object_centric.action_frame", "wrist", "'wrist'", "expected one of hand, object, hand_bin, object_bin")
    cases.append(ConfigCase("policy.heads=3 (does not divide dim)", ("policy.heads=3",),
                            ("policy.dim = 16", "expected a multiple of policy.heads (3)")))
    cases.append(ConfigCase("policy.execute > chunk", ("policy.chunk=4", "policy.execute=5"),
                            ("policy.execute = 5", "expected 1 to policy.chunk (4)")))
    for text, shown in (("[nan,16]", "nan"), ("[16,inf]", "inf"), ("[0,0]", "[0, 0]"), ("[1024,1024]", "[1024, 1024]"),
                        ("[24,24]", "[24, 24]"), ("[-16,16]", "[-16, 16]")):
        cases.append(ConfigCase(f"policy.image_size={text}", (f"policy.image_size={text}",),
                                ("policy.image_size", shown, "expected")))
    for text, shown in (("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("-0.5", "-0.5"), ("1.5", "1.5"),
                        ("abc", "'abc'")):
        listed = f"data.datasets=[{{path: a.hdf5, weight: {text}}}]"
        cases.append(ConfigCase(f"data.datasets[0].weight={text}", (listed,),
                                ("data.datasets[0].weight", f"= {shown}", "expected")))
    cases.append(ConfigCase("every weight 0", ("data.datasets=[{path: a.hdf5, weight: 0.0}]",),
                            ("data.datasets", "every weight is 0")))
    return cases


CONFIG_CASES = _config_cases()
# The tiny policy's base overrides: valid, so each case's own override is the only fault.
BASE = tiny_overrides(Path("unused_run"), "unused.hdf5")


def test_enough_generated_cases_with_unique_ids():
    assert len(CONFIG_CASES) >= 60 and len(CHECKPOINT_CASES) >= 30 and len(ARGUMENT_CASES) >= 30
    for cases in (CONFIG_CASES, CHECKPOINT_CASES, ARGUMENT_CASES, OUTPUT_CASES):
        ids = [c.id if hasattr(c, "id") else c[0] for c in cases]
        assert len(set(ids)) == len(ids)


def test_the_base_config_is_valid():
    assert compose_train_cfg(BASE).policy.dim == 16


@pytest.mark.parametrize("case", CONFIG_CASES, ids=lambda c: c.id)
def test_malformed_train_config_is_refused_naming_field_value_and_range(case):
    with pytest.raises(ConfigError) as err:
        compose_train_cfg(BASE + list(case.overrides))
    message = str(err.value)
    for part in case.expect:
        assert part in message, f"{part!r} not in {message!r}"


# The tool's own path (Hydra, exit status, nothing left behind) for a non-finite and an out-of-range field; every
# case of CONFIG_CASES reaches the same validator in the test above, in this process.
TRAIN_CLI_CASES = ["optim.lr=nan", "policy.heads=0"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "tiny.hdf5")


@pytest.mark.parametrize("override", TRAIN_CLI_CASES)
def test_train_script_refuses_a_malformed_config_cleanly(override, dataset, tmp_path):
    case = next(c for c in CONFIG_CASES if c.overrides == (override,))
    run_dir = tmp_path / "run"
    result = run_script("train.py", *tiny_overrides(run_dir, dataset), override, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert all(part in result.stderr for part in case.expect), result.stderr
    assert listing(tmp_path) == []  # no run folder, log file or checkpoint


# Overrides Hydra cannot parse or compose: named, with what was expected (Hydra itself names the bad token or the
# config key, and ends some in a traceback).
BAD_OVERRIDES = ["steps=[1", "steps", "=5", "policy.dim==3", "data=nonexistent", "data=3", "policy.dimm=3",
                 "~nokey", "+steps=3", "steps=${oops}"]


@pytest.mark.parametrize("override", BAD_OVERRIDES)
def test_a_malformed_override_is_refused_naming_it(override):
    with pytest.raises(ConfigError) as err:
        compose_train_cfg(BASE + [override])
    message = str(err.value)
    assert message.startswith(f"override {override!r}: ") and "; expected key=value" in message, message


@pytest.fixture
def broken_configs(tmp_path, monkeypatch) -> Path:
    """A copy of configs/train in which the data preset `broken` and, on request, config.yaml are not YAML."""
    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs" / "train", configs / "train")
    (configs / "train" / "data" / "broken.yaml").write_text("datasets:\n  - {path: a.hdf5, weight: [1\n")
    monkeypatch.setenv("R2S2R_CONFIGS", str(configs))
    return configs / "train"


def test_a_config_file_that_is_not_yaml_is_refused_naming_it(broken_configs):
    broken = broken_configs / "data" / "broken.yaml"
    with pytest.raises(ConfigError, match=f"^config file {broken}: not valid YAML .*line 2.*; expected a YAML"):
        compose_train_cfg(BASE + ["data=broken"])
    with open(broken_configs / "config.yaml", "a") as f:
        f.write("steps: [1\n")
    with pytest.raises(ConfigError, match=f"^config file {broken_configs / 'config.yaml'}: not valid YAML"):
        compose_train_cfg(BASE)


@pytest.mark.parametrize("override, expect", [("steps=[1", "error: override 'steps=[1': no viable alternative"),
                                              ("data=broken", "error: config file ")])
def test_train_script_refuses_a_malformed_override_or_config_file(override, expect, broken_configs, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    result = run_script("train.py", *tiny_overrides(work / "run", "a.hdf5"), override, cwd=work)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and expect in result.stderr and "expected" in result.stderr, \
        result.stderr
    assert listing(work) == []


# -- checkpoints -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, dataset) -> Path:
    """A tiny finished flow-transformer run's policy.pt."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    return Trainer(compose_train_cfg(tiny_overrides(run_dir, dataset))).run(progress=False).checkpoint


TOP_KEYS = ("format", "cfg", "proprio_dim", "step", "model", "ema", "optimizer", "rng", "datasets")


class Unpickled:
    """A pickled payload that would create `marker` when unpickled (a file that must never appear)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _first_weight(state: dict) -> str:
    return next(k for k, v in state.items() if v.is_floating_point() and v.ndim == 2)


def _edit_cfg(payload: dict, dotted: str, value) -> dict:
    *parents, leaf = dotted.split(".")
    node = payload["cfg"]
    for part in parents:
        node = node[part]
    node[leaf] = value
    return payload


def _checkpoint_cases() -> list[tuple[str, str, object, tuple[str, ...]]]:
    """(id, "payload" or "bytes", how to make the file, substrings of the message besides the file name): a function
    of the valid payload (the result saved with torch.save) or of the valid file's bytes (the file's new bytes)."""
    cases: list[tuple[str, str, object, tuple[str, ...]]] = []

    def edit(case_id: str, how, *expect: str) -> None:
        cases.append((case_id, "payload", how, expect))

    def damage(case_id: str, how, *expect: str) -> None:
        cases.append((case_id, "bytes", how, expect))

    for key in TOP_KEYS:
        edit(f"missing {key}", lambda p, key=key: {k: v for k, v in p.items() if k != key},
             "not a policy checkpoint" if key == "format" else f"missing {key!r}")
    for key, value, expect in (
        ("format", "r2s2r.policy/0", "not a policy checkpoint"), ("cfg", "a string", "cfg = 'a string'"),
        ("cfg", None, "cfg = None"), ("proprio_dim", -1, "proprio_dim = -1"),
        ("proprio_dim", "41", "proprio_dim = '41'"), ("proprio_dim", 1.5, "proprio_dim = 1.5"),
        ("step", -3, "step = -3"), ("model", [1, 2], "model = list"), ("ema", {"w": 1.0}, "ema = dict"),
        ("optimizer", 3, "optimizer = int"), ("rng", {"torch": torch.zeros(3)}, "rng = dict"),
        ("datasets", "real.hdf5", "datasets = 'real.hdf5'"),
        ("datasets", [{"path": 1, "domain": "real"}], "datasets = [{'path': 1, 'domain': 'real'}]"),
        ("kind", "diffusion", "kind = 'diffusion'"),
    ):
        edit(f"{key}={value!r}", lambda p, key=key, value=value: {**p, key: value}, expect)
    for dotted, value, expect in (
        ("optim.lr", float("inf"), "optim.lr = inf"), ("policy.heads", 0, "policy.heads = 0"),
        ("policy.dropout", 2.0, "policy.dropout = 2.0"), ("policy.dim", 36, "policy.dim = 36"),
        ("steps", -1, "steps = -1"), ("policy.image_size", [30, 30], "policy.image_size = [30, 30]"),
        ("data.datasets", [], "data.datasets is empty"), ("policy.bogus", 1, "bogus: unknown field"),
        ("optim.ema_decay", "high", "optim.ema_decay = 'high'"),
    ):
        edit(f"cfg.{dotted}={value!r}", lambda p, d=dotted, v=value: _edit_cfg(p, d, v), "config does not validate",
             expect)
    # A config of the other kind of policy: its keys are missing.
    edit("cfg.policy.kind='object_centric'", lambda p: _edit_cfg(p, "policy.kind", "object_centric"),
         "missing 'kind', 'stage'", "policy.kind object_centric")
    # Weights that disagree with the (valid) config.
    for dotted, value in (("policy.chunk", 8), ("policy.dim", 32), ("policy.action_dim", 20),
                          ("policy.domain_embedding", True), ("policy.obs_layers", 2)):
        edit(f"weights for cfg.{dotted}={value!r}", lambda p, d=dotted, v=value: _edit_cfg(p, d, v),
             "ema weights do not fit its config")

    def replace_weight(p: dict, key: str, make) -> dict:
        name = _first_weight(p[key])
        return {**p, key: {**p[key], name: make(p[key][name])}}

    edit("proprio_dim=40 (the weights take 41)", lambda p: {**p, "proprio_dim": 40}, "weights do not fit",
         "size mismatch")
    edit("an ema weight of the wrong shape", lambda p: replace_weight(p, "ema", lambda w: torch.zeros(3, 5)),
         "ema weights do not fit", "size mismatch")
    edit("an ema weight missing", lambda p: {**p, "ema": dict(list(p["ema"].items())[1:])},
         "ema weights do not fit", "Missing key")
    edit("an unexpected ema weight", lambda p: {**p, "ema": {**p["ema"], "extra.weight": torch.zeros(2)}},
         "ema weights do not fit", "Unexpected key")
    edit("a NaN ema weight", lambda p: replace_weight(p, "ema", lambda w: torch.full_like(w, float("nan"))),
         "is not finite")
    edit("an inf model weight", lambda p: replace_weight(p, "model", lambda w: torch.full_like(w, float("inf"))),
         "is not finite")
    edit("a list, not a mapping", lambda p: [p["cfg"]], "not a policy checkpoint")
    edit("a bare state dict", lambda p: p["ema"], "not a policy checkpoint")
    damage("truncated", lambda b: b[: len(b) // 2], "cannot be read")
    damage("truncated to 10 bytes", lambda b: b[:10], "cannot be read")
    damage("empty file", lambda b: b"", "cannot be read")
    damage("a text file", lambda b: b"run_dir: outputs/train/run\nsteps: 4\n", "cannot be read")
    damage("the train config instead", lambda b: (ROOT / "configs" / "train" / "config.yaml").read_bytes(),
           "cannot be read")
    damage("an HDF5 file instead", lambda b: b"\x89HDF\r\n\x1a\n" + bytes(512), "cannot be read")
    return cases


CHECKPOINT_CASES = _checkpoint_cases()


@pytest.mark.parametrize("index", range(len(CHECKPOINT_CASES)), ids=[c[0] for c in CHECKPOINT_CASES])
def test_broken_checkpoint_is_refused_naming_the_file(index, checkpoint, tmp_path):
    case_id, kind, make, expect = CHECKPOINT_CASES[index]
    path = tmp_path / f"case_{index:03d}.pt"
    if kind == "bytes":
        path.write_bytes(make(checkpoint.read_bytes()))
    else:
        torch.save(make(torch.load(checkpoint, map_location="cpu", weights_only=True)), path)
    with pytest.raises(CheckpointError) as err:
        load_agent(path)
    message = str(err.value)
    assert str(path) in message, message
    for part in expect:
        assert part in message, f"{part!r} not in {message!r}"


def test_pickled_objects_are_refused_without_running_them(tmp_path):
    marker = tmp_path / "unpickled_marker"
    for name, write in (("raw.pt", lambda p: p.write_bytes(pickle.dumps(Unpickled(str(marker)), protocol=2))),
                        ("saved.pt", lambda p: torch.save({"format": "r2s2r.policy/1", "cfg": Unpickled(str(marker))},
                                                          p))):
        path = tmp_path / name
        write(path)
        with pytest.raises(CheckpointError, match="cannot be read") as err:
            load_agent(path)
        assert str(path) in str(err.value)
    assert not marker.exists()


def test_missing_and_folder_checkpoints_are_refused(tmp_path):
    for path in (tmp_path / "missing.pt", tmp_path):
        with pytest.raises(CheckpointError, match="no such file") as err:
            load_agent(path)
        assert str(path) in str(err.value)


def test_the_valid_checkpoint_loads(checkpoint):
    agent = load_agent(checkpoint)
    assert agent.cfg.dim == 16
    # Which frames a tracker reads is asked of a policy that has none: refused, naming the setting and the file.
    with pytest.raises(ConfigError, match=rf"hand_cover = 0.08: only object-centric .*{checkpoint.name}"):
        load_agent(checkpoint, execution={"hand_cover": 0.08})


def _broken(checkpoint: Path, folder: Path) -> Path:
    payload = torch.load(checkpoint, map_location="cpu", weights_only=True)
    payload["ema"][_first_weight(payload["ema"])] = torch.zeros(3, 5)
    path = folder / "broken.pt"
    torch.save(payload, path)
    return path


@pytest.mark.parametrize("tool", ["evaluate.py", "play.py", "analyze_latent.py"])
def test_tools_refuse_a_broken_checkpoint_cleanly(tool, checkpoint, tmp_path, monkeypatch, capsys):
    bad = _broken(checkpoint, tmp_path)
    out = tmp_path / "out"
    args = {"evaluate.py": ["--checkpoint", str(bad), "--trials", "1", "--output", str(out), "--no-progress"],
            "play.py": ["--task", "R2S2R-PickSort-Real-v0", "--checkpoint", str(bad), "--video", str(out / "v.mp4")],
            "analyze_latent.py": ["--checkpoint", str(bad), "--output", str(out)]}[tool]
    code, stderr = run_script_in_process(tool, *args, cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2, stderr
    assert str(bad) in stderr and "weights do not fit its config" in stderr, stderr
    assert listing(tmp_path) == ["broken.pt"]


# -- command-line arguments --------------------------------------------------------------------------------------
# (tool, the arguments that make the rest of the command valid, option, bad value, expected in the message).
_TOOLS = {
    "play.py": [], "evaluate.py": ["--checkpoint", "a.pt"], "world_report.py": [], "replay.py": ["--dataset", "a.h5"],
    "record_calibration.py": [], "analyze_latent.py": ["--checkpoint", "a.pt"], "collect_real.py": [],
    "experiment.py": ["--scale", "smoke", "--dry-run"], "export_usd.py": [],
    "render_states.py": ["--dataset", "a.h5", "--output", "b.h5", "--cameras", "right_wrist"],
    "generate.py": ["--task", "R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0", "--output", "g.hdf5"],
    "perception_report.py": ["--checkpoint", "a.pt", "--dataset", "b.h5"],
}
_OPTIONS = {
    "play.py": {"--episodes": ("-1", "x"), "--fps": ("0", "1e9"), "--size": ("nan",), "--seed": ("-1",)},
    "evaluate.py": {"--trials": ("0",), "--sim-trials": ("-1",), "--max-steps": ("1.5",), "--base-seed": ("-1",),
                    "--hand-cover": ("-0.1", "nan", "2")},
    "world_report.py": {"--episodes": ("-1",), "--image-size": ("4096",), "--image-every": ("0",)},
    "replay.py": {"--limit": ("-1",), "--min-rate": ("-1", "1.5", "nan")},
    "record_calibration.py": {"--views": ("5",), "--fisheye-views": ("0",), "--image-size": ("64",),
                              "--arm-poses": ("9",), "--seed": ("-1",)},
    "analyze_latent.py": {"--max-samples": ("0",), "--sample-seed": ("-1",), "--seed": ("-2",), "--max-steps": ("0",),
                          "--k": ("-1",), "--batch-size": ("0",)},
    "collect_real.py": {"--num-demos": ("0",), "--image-size": ("5000",), "--seed": ("-1",), "--max-attempts": ("0",)},
    "experiment.py": {"--jobs": ("0",)},
    "export_usd.py": {"--animate": ("-1", "inf", "nan")},
    "render_states.py": {"--image-size": ("4", "abc")},
    "generate.py": {"--num-trajectories": ("0",), "--seed": ("-5", "nan", str(2**31)), "--num-workers": ("0", "1.5")},
    "perception_report.py": {"--closed-loop": ("-1", "2.5"), "--hand-cover": ("inf",)},
}
ARGUMENT_CASES = [(f"{tool} {option} {value}", tool, option, value)
                  for tool, options in _OPTIONS.items() for option, values in options.items() for value in values]


@pytest.mark.parametrize("case_id, tool, option, value", ARGUMENT_CASES, ids=[c[0] for c in ARGUMENT_CASES])
def test_out_of_range_argument_is_refused_by_argparse(case_id, tool, option, value, tmp_path, monkeypatch, capsys):
    code, stderr = run_script_in_process(tool, *_TOOLS[tool], f"{option}={value}", cwd=tmp_path,
                                       monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2, stderr
    assert "Traceback" not in stderr, stderr
    assert f"argument {option}: invalid value {value!r}: expected" in stderr, stderr
    assert listing(tmp_path) == []


@pytest.mark.parametrize("option", [("--ensemble", "0.5"), ("--hand-cover", "0.1")])
def test_play_refuses_deployment_settings_without_a_checkpoint(option, tmp_path, monkeypatch, capsys):
    code, stderr = run_script_in_process("play.py", *option, cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "Traceback" not in stderr, stderr
    assert option[0] in stderr and "give --checkpoint" in stderr, stderr
    assert listing(tmp_path) == []


@pytest.mark.parametrize("override", ["datagen.conditions.nominal=.nan", "generator.lead=.inf",
                                      "env.episode_seconds=-.inf", "generator.reach_x=[0.0,.nan]"])
def test_a_non_finite_override_of_generate_is_refused(override, tmp_path, monkeypatch, capsys):
    """Range checks written `x < 0` let NaN through (and `x >= 0` +inf): every KEY=VALUE override is refused here
    before it reaches them."""
    code, stderr = run_script_in_process("generate.py", *_TOOLS["generate.py"], override, cwd=tmp_path,
                                       monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "Traceback" not in stderr, stderr
    assert f"error: override {override!r}: " in stderr and "is not a finite number; expected finite" in stderr, stderr
    assert listing(tmp_path) == []


def test_a_generator_setting_out_of_range_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """The planner's and its grasp generator's settings are checked with the run's config, not in a worker."""
    for override, expect in (("generator.lead=-1", "generator.lead = -1.0: expected >= 0"),
                             ("generator.grasp.squeeze=2", "generator.grasp.squeeze = 2.0: expected a value in")):
        code, stderr = run_script_in_process("generate.py", *_TOOLS["generate.py"], override, cwd=tmp_path,
                                           monkeypatch=monkeypatch, capsys=capsys)
        assert code == 2 and "Traceback" not in stderr and f"error: {expect}" in stderr, stderr
    assert listing(tmp_path) == []


# -- output paths ------------------------------------------------------------------------------------------------
# (tool, arguments with {dir} for an existing folder and {file} for an existing file, option named in the message).
OUTPUT_CASES = [
    ("play.py --video <folder>", ["--video", "{dir}"], "--video"),
    ("play.py --video under a file", ["--video", "{file}/v.mp4"], "--video"),
    ("evaluate.py --output <file>", ["--checkpoint", "a.pt", "--output", "{file}"], "--output"),
    ("world_report.py --output-dir <file>", ["--output-dir", "{file}"], "--output-dir"),
    ("record_calibration.py --output <folder>", ["--output", "{dir}"], "--output"),
    ("calibrate.py --output <folder>", ["--session", "s.h5", "--output", "{dir}"], "--output"),
    ("collect_real.py --output <folder>", ["--output", "{dir}"], "--output"),
    ("render_states.py --output <folder>", ["--dataset", "a.h5", "--output", "{dir}", "--cameras", "right_wrist"],
     "--output"),
    ("analyze_latent.py --output <file>", ["--checkpoint", "a.pt", "--output", "{file}"], "--output"),
    ("perception_report.py --output <folder>", ["--checkpoint", "a.pt", "--dataset", "b.h5", "--output", "{dir}"],
     "--output"),
    ("export_usd.py --output <folder>", ["--output", "{dir}.usda"], "--output"),
    ("experiment.py --run-dir <file>", ["--scale", "smoke", "--run-dir", "{file}"], "--run-dir"),
    ("annotate.py --plot <file>", ["--dataset", "a.h5", "--plot", "{file}"], "--plot"),
    ("train.py run_dir=<file>", ["run_dir={file}", "data.datasets=[{path: a.h5, weight: 1.0}]"], "run_dir"),
    ("generate.py --output <folder>", [*_TOOLS["generate.py"][:2], "--output", "{dir}"], "--output"),
    ("generate.py --log-json <folder>", [*_TOOLS["generate.py"], "--log-json", "{dir}"], "--log-json"),
]


@pytest.mark.parametrize("case_id, args, option", OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_unwritable_output_is_refused_before_any_work(case_id, args, option, tmp_path, monkeypatch, capsys):
    folder, file = tmp_path / "existing", tmp_path / "existing_file"
    folder.mkdir()
    file.write_text("keep me\n")
    if "{dir}.usda" in args:
        (tmp_path / "existing.usda").mkdir()
    before = listing(tmp_path)
    filled = [a.replace("{dir}", str(folder)).replace("{file}", str(file)) for a in args]
    target = next(a for a in filled if str(tmp_path) in a).split("=")[-1]
    tool = case_id.split()[0]
    if tool == "train.py":  # a Hydra application: run as a program
        result = run_script(tool, *filled, cwd=tmp_path, timeout=60)
        code, stderr = result.returncode, result.stderr
    else:
        code, stderr = run_script_in_process(tool, *filled, cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2, stderr
    assert "Traceback" not in stderr, stderr
    assert option in stderr and repr(target) in stderr and "expected" in stderr, stderr
    assert listing(tmp_path) == before and file.read_text() == "keep me\n"


# -- non-finite training loss ------------------------------------------------------------------------------------
def test_a_non_finite_loss_stops_training_with_the_step_and_loss(dataset, tmp_path):
    run_dir = tmp_path / "run"
    trainer = Trainer(compose_train_cfg(tiny_overrides(run_dir, dataset, steps=20)))
    # A learning rate no config accepts (the range is (0, 1]), set behind validation: the weights blow up.
    trainer.cfg = dataclasses.replace(trainer.cfg, optim=dataclasses.replace(trainer.cfg.optim, lr=1e30))
    with pytest.raises(TrainingError, match=r"the loss is (nan|inf|-inf) at step \d+: expected a finite loss|"
                                            r"weights are not finite after step \d+") as err:
        trainer.run(progress=False)
    assert str(run_dir) in str(err.value)
    assert not (run_dir / "policy.pt").exists()
    if (run_dir / "last.pt").exists():  # a resumable checkpoint of finite steps only
        load_agent(run_dir / "last.pt")


def test_the_object_centric_trainer_checks_its_loss_in_either_stage(tmp_path):
    estimator, head = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    trainer = ObjectCentricTrainer.__new__(ObjectCentricTrainer)  # only what `_optimize` uses
    trainer.cfg = compose_train_cfg(BASE)
    trainer.run_dir = tmp_path / "oc_run"
    trainer.model = types.SimpleNamespace(estimator=estimator, head=head)
    for module, stage in ((estimator, "estimator"), (head, "head")):
        opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
        before = [p.detach().clone() for p in module.parameters()]
        loss = module(torch.ones(1, 2)).sum() * float("inf")
        with pytest.raises(TrainingError, match=rf"oc_run: {stage}: the loss is (nan|inf) at step 5"):
            trainer._optimize(opt, module, loss, 4, 10)
        assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))  # no update was made
        finite = module(torch.ones(1, 2)).sum()
        assert math.isfinite(trainer._optimize(opt, module, finite, 0, 10))


def test_train_script_exits_non_zero_on_a_non_finite_loss(dataset, tmp_path):
    """The tool's own path: the flow loss is made NaN in the training process; train.py reports it and exits 1."""
    run_dir = tmp_path / "run"
    code = ("import torch\nfrom r2s2r.policy import model\n"
            "model.FlowMatchingPolicy.flow_loss = lambda self, *a, **k: self.flow.action_out[1].weight.sum() * float('nan')")
    result = run_script("train.py", *tiny_overrides(run_dir, dataset), cwd=tmp_path, code=code)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"error: {run_dir}: the loss is nan at step 1: expected a finite loss" in result.stderr, result.stderr
    assert not (run_dir / "policy.pt").exists() and not (run_dir / "last.pt").exists()
