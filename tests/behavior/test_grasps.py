"""Grasp synthesis on the real hand model: ranking, the wrench metric, and bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from r2s2r.behavior.grasps import GraspGenerator, epsilon_metric
from r2s2r.cell.spec import CellCfg
from r2s2r.cell.mjcf import build_model


@pytest.fixture(scope="module")
def cell():
    return CellCfg(cameras=())


@pytest.fixture(scope="module")
def generator(cell):
    return GraspGenerator(build_model(cell))


def _object(cell, name):
    return next(o for o in cell.objects + cell.novel_objects if o.name == name)


def _cube_contacts(h: float, faces: list[int]):
    """Contact points and inward normals at the centres of the given faces of a cube of half-size h."""
    dirs = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], float)
    pts = np.array([h * dirs[f] for f in faces])
    return pts, -pts / h


def test_epsilon_positive_when_contacts_enclose_and_zero_when_one_sided():
    h = 0.025
    enclosing = epsilon_metric(*_cube_contacts(h, [0, 1, 2, 3, 4, 5]), np.zeros(3), 0.8, 8, h)
    assert enclosing > 0.05
    # All pushes from one side: nothing resists a pull the other way.
    pts, normals = _cube_contacts(h, [4])
    pts = np.concatenate([pts + [dx, dy, 0] for dx in (-0.01, 0.01) for dy in (-0.01, 0.01)])
    one_sided = epsilon_metric(pts, np.repeat(normals, 4, 0), np.zeros(3), 0.8, 8, h)
    assert one_sided == 0.0
    # More friction can only widen the cones and so the hull.
    assert epsilon_metric(*_cube_contacts(h, [0, 1, 2, 3, 4, 5]), np.zeros(3), 1.2, 8, h) > enclosing


def test_box_grasp_lays_fingers_across_the_long_axis(cell, generator):
    cuboid = _object(cell, "cuboid")
    assert cuboid.half_extents[0] > cuboid.half_extents[1]  # long axis along the body's x
    best = generator.generate(cuboid)[0]
    fingers = best.rot[:, 2]  # the grasp site's z axis points along the fingers
    assert abs(fingers[0]) < 0.2 and abs(fingers[1]) > 0.9
    # A box with its long axis along y (a cell built with it) gets the grasp turned by 90 degrees.
    turned = dataclasses.replace(cuboid, size=(cuboid.size[1], cuboid.size[0], cuboid.size[2]))
    objects = tuple(turned if o.name == "cuboid" else o for o in cell.objects)
    fingers = GraspGenerator(build_model(cell.replace(objects=objects))).generate(turned)[0].rot[:, 2]
    assert abs(fingers[0]) > 0.9 and abs(fingers[1]) < 0.2


def test_best_grasp_closes_on_the_object_from_above(cell, generator):
    for name in ("cube", "sphere", "cylinder"):
        obj = _object(cell, name)
        grasps = generator.generate(obj)
        best = grasps[0]
        assert [g.score for g in grasps] == sorted((g.score for g in grasps), reverse=True)
        assert best.n_fingers >= 4, name
        assert best.rot[2, 0] < -0.9, name  # palm normal (site x) points down
        assert 0.0 < best.pos[2] < obj.half_height + 0.03, name
        # The hand target is closed past the contact, within the synergy's range.
        assert np.all(best.hand_q >= 0.0) and best.hand_q.sum() > 0.5, name


def test_unknown_shape_is_rejected_by_name(cell, generator):
    bad = dataclasses.replace(_object(cell, "cube"), shape="torus")
    with pytest.raises(ValueError, match="shape = 'torus'"):
        generator.generate(bad)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(getattr(x, f.name), getattr(y, f.name)) for f in dataclasses.fields(x)) for x, y in zip(a, b))


def test_disk_cache_gives_back_the_synthesized_grasps_to_a_new_process(cell, generator, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model = build_model(cell)
    cube, sphere = _object(cell, "cube"), _object(cell, "sphere")
    fresh = generator.generate(cube)
    assert _same(GraspGenerator(model, cache=True).generate(cube), fresh)
    files = sorted((tmp_path / "r2s2r" / "grasps").glob("*.npz"))
    assert len(files) == 1
    # A later generator (as in another worker process) reads them back, bit for bit, without synthesizing.
    later = GraspGenerator(model, cache=True)
    monkeypatch.setattr(later, "_synthesize", lambda obj: pytest.fail(f"synthesized {obj.name} again"))
    assert _same(later.generate(cube), fresh)
    # Another object, another size or another hand geometry is another entry.
    other = GraspGenerator(model, cache=True)
    other.generate(sphere)
    other.generate(dataclasses.replace(cube, size=tuple(1.2 * s for s in cube.size)))
    moved = build_model(cell)
    moved.geom_size[moved.geom_bodyid == moved.body("right_palm").id] *= 1.1
    GraspGenerator(moved, cache=True).generate(cube)
    assert len(list((tmp_path / "r2s2r" / "grasps").glob("*.npz"))) == 4
    # A damaged entry (not an archive, or one cut short) is rebuilt, not trusted.
    whole = files[0].read_bytes()
    for damaged in (b"not an npz", whole[: len(whole) // 2]):
        files[0].write_bytes(damaged)
        assert _same(GraspGenerator(model, cache=True).generate(cube), fresh)
        assert _same(GraspGenerator(model, cache=True).generate(cube), fresh)
