"""Malformed world files, generated from a valid one: each is refused with a ConfigError that names the file or
the field, the offending value and what was expected; a tool reading world files exits non-zero with that message,
no traceback and no output left behind.

Cases: every numeric leaf of `reality.yaml` set to NaN, +-inf, an absurd magnitude or a string; every list of
numbers one element too long or too short, and numbers and lists swapped; every calibrated parameter deleted;
keys stated twice; unknown keys; wrong types of whole sections; broken YAML.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from r2s2r.cell.spec import CellCfg
from r2s2r.cell.world import calibrated_paths, load_world, world_to_yaml
from r2s2r.core import ConfigError

ROOT = Path(__file__).resolve().parents[2]
WORLDS = ROOT / "configs" / "world"
BASE = WORLDS / "reality.yaml"  # the base states every field a world file commonly sets


@dataclass(frozen=True)
class Case:
    id: str
    text: bytes
    expect: tuple[str, ...]  # substrings of the error message besides the file name


def _dump(data: dict) -> bytes:
    return yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False).encode()  # libyaml: ~1,000 files at collection


def _leaves(node, path: str = ""):
    """(dotted path, value) of every number, boolean and list of numbers under `node`."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        yield path, node
        for i, value in enumerate(node):
            yield from _leaves(value, f"{path}[{i}]")
    else:
        yield path, node


def _set(data: dict, dotted: str, value) -> dict:
    """A copy of `data` with the cell's field at `dotted` (keys and [i] indices) set to `value`."""
    out = copy.deepcopy(data)
    parts = [p for p in re.split(r"\.|(\[\d+\])", dotted) if p]
    node = out["cell"]
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last = parts[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value
    return out


def _delete(data: dict, dotted: str) -> dict:
    out = copy.deepcopy(data)
    *parents, last = dotted.split(".")
    node = out["cell"]
    for part in parents:
        node = node[part]
    del node[last]
    return out


def _cases() -> list[Case]:
    base = yaml.safe_load(BASE.read_text())
    cases: list[Case] = []

    def add(case_id: str, data_or_text: dict | bytes, *expect: str) -> None:
        text = data_or_text if isinstance(data_or_text, bytes) else _dump(data_or_text)
        cases.append(Case(case_id, text, expect))

    # Every leaf of the cell section: bad numbers, wrong types, wrong list lengths.
    for dotted, value in _leaves(base["cell"]):
        if isinstance(value, bool):
            for bad in ("yes please", 1):
                add(f"{dotted}={bad!r}", _set(base, dotted, bad), dotted, repr(bad), "expected true or false")
        elif isinstance(value, int | float):
            in_list = dotted.endswith("]")  # an element of a list: a nested list is a wrong type like "abc"
            for bad in (float("nan"), float("inf"), float("-inf"), 1e12, "abc", *(() if in_list else ([1.0, 2.0],))):
                add(f"{dotted}={bad!r}", _set(base, dotted, bad), dotted, repr(bad), "expected")
        elif isinstance(value, list):
            for bad in (value + [value[-1]], value[:-1], 0.5):
                add(f"{dotted}={bad!r}", _set(base, dotted, bad), dotted, repr(bad),
                    f"expected a list of {len(value)} numbers")
    # Finite values just outside the physical ranges.
    for dotted, bad, expected in (
        ("colours.red[0]", 1.2, "in [0, 1]"), ("lights.key.colour[2]", -0.1, "in [0, 1]"),
        ("objects.cube.mass", -0.1, "in [0.005, 1] kg"), ("objects.cube.friction", 0.0, "in [0.1, 3]"),
        ("arms.right.kp[0]", 0.0, "N*m/rad"), ("arms.right.joint_damping[1]", -1.0, "in [0, 100]"),
        ("arms.right.latency_steps", -1, "in [0, 20]"), ("arms.right.base.pos[2]", 6.0, "in [-5, 5] m"),
        ("arms.right.base.rpy[2]", 90.0, "rad"), ("cameras.head_left.pose.rpy[0]", 39.5, "rad"),
        ("cameras.head_left.pose.pos[2]", -12.0, "in [-5, 5] m"), ("belt.yaw", 0.9, "rad"),
        ("belt.center[2]", 8.0, "m"), ("cameras.head_left.lens.cx", 1.0, "in [0.05, 0.95]"),
        ("cameras.right_wrist.lens.distortion", [-0.9, 0.0, 0.0, 0.0], "folds back at 35.0 degrees"),
        ("cameras.left_wrist.lens.blur_sigma", 50.0, "in [0, 10]"), ("lighting.intensity_range", [1.2, 0.8],
                                                                        "low <= high"),
        ("lights.key.intensity", 3.5, "in [0, 3]"), ("clutter", 31, "in [0, 30]"),
    ):
        shown = repr(tuple(bad) if isinstance(bad, list) else bad)  # the cell holds lists as tuples
        add(f"{dotted}={bad!r} (out of range)", _set(base, dotted, bad), dotted, shown, expected)
    # Integers no float holds, where a number is expected.
    for dotted in ("cameras.head_left.lens.fx", "belt.yaw", "clutter"):
        add(f"{dotted}=10**400", _set(base, dotted, 10**400), "integer 1000", "expected a magnitude")
    # Every calibrated parameter and every required top-level field, deleted.
    for dotted in calibrated_paths(load_world(BASE).cell):
        add(f"missing {dotted}", _delete(base, dotted), f"cell.{dotted}: missing")
    for key in ("name", "kind", "cell"):
        add(f"missing {key}", {k: v for k, v in base.items() if k != key}, f"missing field {key!r}")
    # Unknown keys and items at every level.
    for where in ("", "cameras.head_left", "cameras.head_left.lens", "cameras.head_left.pose", "arms.right",
                  "arms.right.base", "belt", "objects.cube", "lights.key", "lighting"):
        data = copy.deepcopy(base)
        node = data["cell"]
        for part in where.split(".") if where else ():
            node = node[part]
        node["bogus_field"] = 1.0
        add(f"unknown {where or 'cell'}.bogus_field", data, f"{where + '.' if where else ''}bogus_field: unknown field")
    for section in ("cameras", "objects", "novel_objects", "lights", "arms", "bins"):
        data = copy.deepcopy(base)
        data["cell"].setdefault(section, {})["banana"] = {}
        add(f"unknown item {section}.banana", data, f"cell.{section}.banana: no such item")
    add("unknown top-level field", {**base, "extra": 1}, "unknown top-level field", "'extra'")
    # Wrong types of whole sections and top-level fields.
    for dotted, bad in (("cameras", [1, 2]), ("cameras.head_left", "abc"), ("cameras.head_left.lens", 3.0),
                        ("arms", None), ("belt", [0.0]), ("colours", "red"), ("lighting", 0.5),
                        ("cameras.head_left.lens.model", 1.0), ("cameras.head_left.lens.model", "orthographic")):
        add(f"{dotted}={bad!r}", _set(base, dotted, bad), dotted, repr(bad), "expected")
    for key, bad in (("name", 7), ("name", ""), ("kind", "imaginary"), ("kind", ["reality"]), ("description", 3),
                     ("provenance", "calibrated"), ("cell", [1, 2]), ("cell", None)):
        add(f"{key}={bad!r}", {**base, key: bad}, key, repr(bad), "expected")
    # Keys stated twice (YAML keeps the last one silently): repeat a one-line `key: value` of the block-style file.
    lines = yaml.safe_dump(base, sort_keys=False, default_flow_style=False).splitlines()
    keyed = [(i, m.group(1)) for i, line in enumerate(lines) if (m := re.fullmatch(r"\s*(\w+): [\w.+-]+", line))]
    for i, key in keyed[:: max(1, len(keyed) // 25)]:
        text = "\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1:]) + "\n"
        add(f"duplicate {key} line {i + 2}", text.encode(), f"line {i + 2}: key {key!r} is given twice",
            f"first on line {i + 1}")
    flow = BASE.read_text().replace("fx: 0.872, ", "fx: 0.872, fx: 0.9, ", 1)
    add("duplicate key in a flow mapping", flow.encode(), "key 'fx' is given twice")
    # Broken YAML and documents that are not a mapping.
    good = BASE.read_bytes()
    for case_id, text, expect in (
        ("unclosed bracket", good.replace(b"distortion: [0.0,", b"distortion: [[0.0,", 1), "not valid YAML"),
        ("tab indentation", good.replace(b"\n  cameras:", b"\n\tcameras:", 1), "not valid YAML"),
        ("bad indentation", good.replace(b"\n    head_left:", b"\n   head_left:", 1), "not valid YAML"),
        ("unterminated quote", good.replace(b"name: reality", b"name: 'reality", 1), "not valid YAML"),
        ("not utf-8", good.replace(b"name: reality", b"name: r\xff\xfeality", 1), "not valid YAML"),
        ("python tag", good.replace(b"name: reality", b"name: !!python/object:os.system {}", 1), "not valid YAML"),
        ("unhashable key", good + b"? [a, b]\n: 1\n", "not valid YAML"),
        ("deep nesting", b"name: x\nkind: reality\ncell: " + b"[" * 1000 + b"]" * 1000, "nested or expanded"),
        ("self-referencing alias", good + b"loop: &loop [*loop]\n", "nested or expanded"),
        ("alias bomb", good + b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(
            b"a%d: &a%d [" % (i, i) + b", ".join([b"*a%d" % (i - 1)] * 10) + b"]\n" for i in range(1, 9)),
         "nested or expanded"),
        ("empty file", b"", "expected a mapping"),
        ("a list", b"- name: reality\n- kind: reality\n", "expected a mapping"),
        ("a scalar", b"reality\n", "expected a mapping"),
        ("truncated", good[: len(good) // 2].rsplit(b"\n", 1)[0] + b"\n  belt: {center: [0.0, \n", "not valid YAML"),
    ):
        add(f"broken: {case_id}", text, expect)
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("malformed_worlds")


def test_enough_cases_are_generated_and_ids_are_unique():
    assert len(CASES) >= 120
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
def test_malformed_world_is_refused_naming_the_file_field_and_value(index, case_dir):
    case = CASES[index]
    path = case_dir / f"case_{index:04d}.yaml"  # a name of its own: the message must name it
    path.write_bytes(case.text)
    with pytest.raises(ConfigError) as err:
        load_world(path)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    for part in case.expect:
        assert part in message, f"{part!r} not in {message!r}"


# A representative subset through a command-line tool that reads world files: the mismatch report reads the truth
# (--reality-file) and two worlds (--grounded, --ungrounded) before it builds anything or writes its output.
CLI_CASES = [
    ("--grounded", "cameras.head_left.lens.fx=nan"),
    ("--grounded", "belt.center[1]=inf"),
    ("--grounded", "arms.right.base.pos[0]=1000000000000.0"),
    ("--grounded", "cameras.right_wrist.lens.distortion[0]=-inf"),
    ("--ungrounded", "colours.red[1]='abc'"),
    ("--ungrounded", "arms.right.kp=[1620.0, 1395.0, 896.0, 720.0, 345.0, 264.0]"),
    ("--ungrounded", "missing belt.yaw"),
    ("--reality-file", "unknown belt.bogus_field"),
    ("--reality-file", "broken: unclosed bracket"),
    ("--reality-file", next(c.id for c in CASES if c.id.startswith("duplicate fx"))),
]


@pytest.mark.parametrize("option, case_id", CLI_CASES)
def test_world_report_refuses_a_malformed_world_cleanly(option, case_id, tmp_path, monkeypatch, capsys):
    from conftest import run_script_in_process

    case = next(c for c in CASES if c.id == case_id)
    bad = tmp_path / "bad_world.yaml"
    bad.write_bytes(case.text)
    out = tmp_path / "report"
    if case_id.startswith("broken"):  # one case as a program: its own process, exit status and stderr
        env = {k: v for k, v in os.environ.items() if k != "R2S2R_REALITY_FILE"}
        env["MUJOCO_GL"] = env.get("MUJOCO_GL", "egl")
        result = subprocess.run([sys.executable, str(ROOT / "scripts" / "world_report.py"), option, str(bad),
                                 "--output-dir", str(out)], capture_output=True, text=True, timeout=120, env=env,
                                cwd=tmp_path)
        code, stderr = result.returncode, result.stderr
    else:  # the same run in this process: every check ends before any work
        code, stderr = run_script_in_process("world_report.py", option, str(bad), "--output-dir", str(out),
                                             cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0
    assert "Traceback" not in stderr, stderr
    assert str(bad) in stderr and all(part in stderr for part in case.expect), stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [bad.name]  # no report folder, log or partial file


@pytest.mark.parametrize("cameras, expect", [("nocam", "--cameras = 'nocam': expected one of ('head_left'"),
                                             (",", "--cameras = ('', ''): expected a non-empty list of distinct"),
                                             ("head_left,head_left", "--cameras = ('head_left', 'head_left')")])
def test_world_report_refuses_unknown_cameras_before_replaying(cameras, expect, tmp_path, monkeypatch, capsys):
    """The worlds' cameras are checked with the worlds, not by the renderer after the first replay."""
    from conftest import run_script_in_process

    code, stderr = run_script_in_process("world_report.py", "--cameras", cameras, "--output-dir",
                                         str(tmp_path / "report"), cwd=tmp_path, monkeypatch=monkeypatch,
                                         capsys=capsys)
    assert code == 2 and "Traceback" not in stderr and f"error: {expect}" in stderr, stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", sorted(WORLDS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_registered_world_file_loads(path):
    world = load_world(path)
    assert world.path == path and world.cell.validate() is world.cell


def test_written_world_files_load_back_unchanged(tmp_path):
    """What `world_to_yaml` writes (calibration writes grounded.yaml this way) passes the same validation."""
    for path in sorted(WORLDS.glob("*.yaml")):
        world = load_world(path)
        copy_path = tmp_path / path.name
        copy_path.write_text(world_to_yaml(world.data))
        assert load_world(copy_path).cell == world.cell


def test_a_duplicated_key_is_refused_not_last_wins(tmp_path):
    text = BASE.read_text().replace("    speed_scale: 0.94\n", "    speed_scale: 0.94\n    speed_scale: 1.2\n", 1)
    assert text != BASE.read_text()
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    line = text.splitlines().index("    speed_scale: 1.2") + 1
    with pytest.raises(ConfigError, match=rf"twice\.yaml: line {line}: key 'speed_scale' is given twice .*"
                                          rf"first on line {line - 1}"):
        load_world(path)


def test_design_cell_and_every_field_default_validate():
    assert CellCfg().validate() == CellCfg()
