"""World files: the loader applies them to the cell, checks every field, and names the file and field on error."""

import shutil
from pathlib import Path

import pytest
import yaml

from r2s2r.cell.spec import CellCfg
from r2s2r.cell.world import calibrated_paths, get_path, load_world
from r2s2r.core import ConfigError

ROOT = Path(__file__).resolve().parents[2]
WORLDS = ROOT / "configs" / "world"


@pytest.mark.parametrize("name", ["ungrounded", "reality", "reality_alt"])
def test_world_files_load_and_state_every_calibrated_parameter(name):
    world = load_world(name)
    raw = yaml.safe_load((WORLDS / f"{name}.yaml").read_text())
    assert world.kind == raw["kind"] and len(world.sha256) == 64
    # Every calibrated value in the loaded cell is the file's value.
    for dotted in calibrated_paths(world.cell):
        node = raw["cell"]
        for part in dotted.split("."):
            node = node[part]
        value = get_path(world.cell, dotted)
        assert (list(value) if isinstance(value, tuple) else value) == pytest.approx(node), dotted


def test_reality_differs_from_the_design_in_what_calibration_recovers():
    truth, design = load_world("reality").cell, CellCfg()
    different = [p for p in calibrated_paths(design) if get_path(truth, p) != get_path(design, p)]
    assert len(different) >= 0.8 * len(calibrated_paths(design))
    assert truth.shadows and truth.clutter > 0 and truth.floor_texture  # the residual gap


def write_variant(tmp_path, edit) -> Path:
    data = yaml.safe_load((WORLDS / "reality.yaml").read_text())
    edit(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("kind"), "missing field 'kind'"),
        (lambda d: d["cell"]["arms"]["right"].pop("kp"), "cell.arms.right.kp: missing"),
        (lambda d: d["cell"]["arms"]["right"].update(kp=[1.0] * 6), "cell.arms.right.kp"),
        (lambda d: d["cell"]["belt"].update(speed_scale=3.0), "belt.speed_scale = 3.0"),
        (lambda d: d["cell"]["belt"].update(sped_scale=1.0), "cell.belt.sped_scale: unknown field"),
        (lambda d: d["cell"]["objects"].update(banana={"mass": 0.1}), "cell.objects.banana: no such item"),
        (lambda d: d["cell"]["arms"]["right"].update(latency_steps=2.5), "latency_steps = 2.5: expected an integer"),
        (lambda d: d["cell"]["cameras"]["head_left"]["lens"].update(fx=-1.0), "head_left.lens.fx = -1.0"),
        (lambda d: d.update(kind="imaginary"), "kind = 'imaginary'"),
    ],
)
def test_bad_world_files_name_the_file_and_the_field(tmp_path, edit, message):
    path = write_variant(tmp_path, edit)
    with pytest.raises(ConfigError, match="variant.yaml") as err:
        load_world(path)
    assert message in str(err.value)


def test_unknown_world_name_lists_the_registered_ones():
    with pytest.raises(ConfigError, match="ungrounded"):
        load_world("no_such_world")


def test_another_reality_file_works_without_code_changes(tmp_path, monkeypatch):
    from r2s2r.real.twin import make_twin_env, reality_file

    copy = tmp_path / "my_reality.yaml"
    shutil.copy(WORLDS / "reality_alt.yaml", copy)
    monkeypatch.setenv("R2S2R_REALITY_FILE", str(copy))
    assert reality_file() == copy
    env = make_twin_env(cameras=())
    assert env.world.path == copy and env.sim.latency == load_world(copy).cell.arm("right").latency_steps
    monkeypatch.setenv("R2S2R_REALITY_FILE", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="missing.yaml"):
        reality_file()
