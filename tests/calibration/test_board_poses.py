"""The calibration board's poses do not depend on the lens: for a seed, a cell frames the board alike whatever its
cameras' focal lengths, principal points and distortion, so the recorded session and the reference renders, whose
lenses differ by what calibration is there to find, compare one pose seen twice. (What hides the board, the arm
or the belt, is the world's own geometry and still decides; a corner grazing an occluder can keep a pose in one
world and not in another a centimetre away.)"""

import copy

import numpy as np
import pytest
import yaml

from r2s2r.calibration.rig import SimRig
from r2s2r.cell.world import load_world
from r2s2r.real.truths import sample_truth

CAMERAS = ("head_left", "right_wrist")


@pytest.fixture(scope="module")
def rigs(tmp_path_factory):
    """reality.yaml, and reality.yaml with every camera's lens taken from a sampled truth (seeds drawn once at random;
    their lenses lie farther from the datasheet than the shipped truths')."""
    folder = tmp_path_factory.mktemp("lenses")
    base = load_world("reality")
    out = [SimRig(base.path)]
    for seed in (4242, 977):
        lenses = sample_truth(seed)["cell"]["cameras"]
        data = copy.deepcopy(base.data)
        for name, cam in data["cell"]["cameras"].items():
            cam["lens"] = lenses[name]["lens"]
        path = folder / f"reality_lenses_{seed}.yaml"
        path.write_text(yaml.safe_dump(data))
        out.append(SimRig(path))
    return out


@pytest.mark.parametrize("camera", CAMERAS)
def test_another_lens_holds_the_board_where_the_first_did(rigs, camera):
    reference, *others = rigs
    lenses = {next(c.lens.fx for c in rig.cell.cameras if c.name == camera) for rig in rigs}
    assert len(lenses) == len(rigs)  # every world's lens differs from the others'
    for seed in (0, 7):
        expected = reference.board_poses(camera, 12, seed)
        for rig in others:
            got = rig.board_poses(camera, 12, seed)
            assert len(got) == 12
            for (p, r), (q, s) in zip(got, expected):
                np.testing.assert_array_equal(p, q)
                np.testing.assert_array_equal(r, s)


def test_views_render_the_posed_board(rigs):
    """Two renders of one seed are the same image (same poses, same noise stream); another seed shows another pose."""
    rig = rigs[0]
    first, again = (rig.board_views("head_left", 1, 64, 64, seed=3)[0] for _ in range(2))
    other = rig.board_views("head_left", 1, 64, 64, seed=4)[0]
    np.testing.assert_array_equal(first, again)
    assert np.abs(first.astype(int) - other.astype(int)).mean() > 2
