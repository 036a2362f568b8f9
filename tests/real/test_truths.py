"""Sampled truths: valid twins, every ranged parameter moved within its documented range, reproducible per seed, and
read only where truths may be read."""

import ast
import shutil
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
import yaml
from conftest import ROOT, run_script

from r2s2r.cell.world import calibrated_paths, get_path, load_world
from r2s2r.real.truths import (FIXED_GAP, RANGES, deviation, expand, nominal_cell, sample_truth, split_key,
                               truth_text)
from r2s2r.real.twin import TwinCell

BASE = load_world("ungrounded").data
NOMINAL = nominal_cell(BASE)
SEEDS = [int(s) for s in np.random.default_rng(20240611).integers(0, 2**31 - 1, 20)]
TRUTH_FILES = ("reality", "reality_alt")


def ranged_elements(cell):
    """(key, range, path, element index or None, value) of every ranged element of a cell."""
    for key, r in RANGES.items():
        pattern, index = split_key(key)
        for path in expand(pattern, cell):
            value = get_path(cell, path)
            if isinstance(value, tuple):
                for i in index if index is not None else range(len(value)):
                    yield key, r, path, i, value[i]
            else:
                yield key, r, path, None, value


def nominal_of(path, i):
    value = get_path(NOMINAL, path)
    return value if i is None else value[i]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """Seed -> the loaded world, each sampled truth written as the script writes it."""
    out = tmp_path_factory.mktemp("truths")
    worlds = {}
    for seed in SEEDS:
        path = out / f"truth_{seed}.yaml"
        path.write_text(truth_text(sample_truth(seed)))
        worlds[seed] = load_world(path)  # the world loader's checks, as the twin applies them
    return worlds


def test_sampled_truths_validate_and_move_every_ranged_parameter_within_its_range(sampled):
    signs = defaultdict(set)
    for seed, world in sampled.items():
        assert world.kind == "reality" and world.data["provenance"]["seed"] == seed
        for key, r, path, i, value in ranged_elements(world.cell):
            nominal = nominal_of(path, i)
            d = deviation(nominal, value, r)
            assert value != nominal, (seed, path, i)
            # Values are written to 6 significant digits, hence the small tolerance.
            assert r.low * (1 - 1e-4) - 1e-6 <= abs(d) <= r.high * (1 + 1e-4) + 1e-6, (seed, path, i, d, r)
            signs[key].add(int(np.sign(d)))
        for flag, value in FIXED_GAP.items():
            assert getattr(world.cell, flag) == value
    for key, r in RANGES.items():
        assert signs[key] == ({1} if r.signs == "+" else {-1, 1}), key


def test_unranged_parameters_stay_nominal(sampled):
    # Pinhole distortion (ignored by the renderer, held at 0 by calibration), fisheye k4, colour alpha.
    for world in sampled.values():
        for cam in world.cell.cameras:
            nominal = get_path(NOMINAL, f"cameras.{cam.name}.lens.distortion")
            if cam.lens.model == "pinhole":
                assert cam.lens.distortion == nominal
            assert cam.lens.distortion[3] == nominal[3]
        assert all(rgba[3] == 1.0 for rgba in world.cell.colours.values())


def test_sampling_is_reproducible_per_seed_and_differs_across_seeds():
    assert truth_text(sample_truth(SEEDS[0])) == truth_text(sample_truth(SEEDS[0]))
    cells = {yaml.safe_dump(sample_truth(seed)["cell"]) for seed in SEEDS[:5]}  # the values, not just the name
    assert len(cells) == 5


def test_every_calibrated_parameter_and_every_gap_of_the_truths_is_ranged():
    ranged = {path for key in RANGES for path in expand(split_key(key)[0], NOMINAL)}
    for path in calibrated_paths(NOMINAL) + ["belt.speed_jitter"]:
        lens_model = path.endswith("lens.distortion") and get_path(NOMINAL, path.rsplit(".", 1)[0]).model
        assert path in ranged or lens_model == "pinhole", path
    # Whatever today's truth files move away from the nominal (calibrated or residual gap) is ranged or fixed.
    for name in TRUTH_FILES:
        truth = load_world(name)
        for path in _leaf_paths(truth.data["cell"]):
            if path in FIXED_GAP:
                continue
            if get_path(truth.cell, path) != get_path(NOMINAL, path):
                assert path in ranged, (name, path)


def test_ranges_reach_twice_the_largest_deviation_of_todays_truths():
    truths = [load_world(name).cell for name in TRUTH_FILES]
    by_range = defaultdict(list)  # entries sharing one range (both head cameras, objects and novel objects)
    for key, r in RANGES.items():
        by_range[r].append(key)
    for r, keys in by_range.items():
        deviations = []
        for truth in truths:
            for key, _, path, i, value in ranged_elements(truth):
                if key in keys and value != nominal_of(path, i):
                    deviations.append(abs(deviation(nominal_of(path, i), value, r)))
        if not deviations:  # neither truth moves it: the range is a stated choice
            assert r.why.startswith("chosen"), keys
            continue
        assert all(r.low <= d <= r.high for d in deviations), (keys, deviations)
        assert 1.9 * max(deviations) <= r.high <= 2.1 * max(deviations), (keys, max(deviations), r.high)


def test_a_twin_on_a_sampled_truth_resets_and_steps(tmp_path):
    path = tmp_path / "truth.yaml"
    path.write_text(truth_text(sample_truth(SEEDS[0])))
    cell = TwinCell(path, cameras=("head_left",), image_size=(32, 32))
    try:
        assert cell.env.world.path == path
        obs = cell.reset(seed=0)
        for _ in range(3):
            result = cell.act(np.concatenate([obs["proprio"]["ee_pose"], np.zeros(20)]))
            obs = result.obs
        assert obs["images"]["head_left"].shape == (32, 32, 3)
        assert np.isfinite(obs["proprio"]["ee_pose"]).all()
    finally:
        cell.close()


def test_script_writes_truths_without_reading_any(tmp_path, monkeypatch):
    # A configs folder holding only the nominal world: the sampler has no truth file it could read.
    configs = tmp_path / "configs"
    (configs / "world").mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "world" / "ungrounded.yaml", configs / "world")
    monkeypatch.setenv("R2S2R_CONFIGS", str(configs))
    out = tmp_path / "out" / "truths"
    result = run_script("sample_truths.py", "--count", "2", "--seed", "7", "--out-dir", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["truth_000007.yaml", "truth_000008.yaml"]  # no temporaries
    text = (out / "truth_000008.yaml").read_text()
    assert text.startswith("# Sampled truth, seed 8:") and text == truth_text(sample_truth(8, BASE))
    assert load_world(out / "truth_000007.yaml").kind == "reality"


@pytest.mark.parametrize("count", ["0", "-3", "many", "10001"])
def test_script_refuses_a_bad_count(tmp_path, count):
    out = tmp_path / "truths"
    result = run_script("sample_truths.py", "--count", count, "--out-dir", str(out))
    assert result.returncode == 2
    assert f"argument --count: invalid value '{count}': expected an integer in [1, 10000]" in result.stderr
    assert not out.exists()


def test_script_refuses_an_output_folder_that_is_a_file_and_documents_its_ranges(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_script("sample_truths.py", "--out-dir", str(blocker))
    assert result.returncode == 2 and "--out-dir" in result.stderr and "is a file" in result.stderr
    result = run_script("sample_truths.py", "--help")
    assert result.returncode == 0 and "arms.right.kp" in result.stdout and "--count" in result.stdout


def test_calibration_never_imports_the_sampler():
    # Estimators that could see the ranges could be tuned to them; the pipeline imports every estimator and the twin.
    code = ("import sys, pkgutil, importlib, r2s2r.calibration as c\n"
            "for m in pkgutil.iter_modules(c.__path__): importlib.import_module(f'r2s2r.calibration.{m.name}')\n"
            "import r2s2r.calibration.pipeline, r2s2r.real.twin\n"
            "print('r2s2r.real.truths' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr
    for path in (ROOT / "source" / "r2s2r" / "r2s2r" / "calibration").rglob("*.py"):  # lazy imports too
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any("truths" in name for name in names), path


def _leaf_paths(node, prefix=""):
    """Dotted paths of a world file's cell section down to its values (lists are values)."""
    if not isinstance(node, dict):
        yield prefix
        return
    for key, value in node.items():
        yield from _leaf_paths(value, f"{prefix}.{key}" if prefix else key)


def test_header_and_yaml_agree():
    data = sample_truth(SEEDS[1])
    assert yaml.safe_load(truth_text(data)) == data
