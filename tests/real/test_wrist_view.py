"""The wrist cameras see what the hand is about to grasp."""

from __future__ import annotations

import numpy as np

from r2s2r.cell.mjcf import build_model
from r2s2r.cell.world import load_world
from r2s2r.data.hdf5 import DemoReader
from r2s2r.real.twin import make_twin_env, reality_file

SIZE = 48
LAST_SECOND = 20  # control steps at 20 Hz


def _object_pixels(env) -> int:
    """Pixels of the right wrist view that change when the object, painted magenta (a grey object on the dark belt
    would hardly change a pixel), is hidden; the same sensor noise both times."""
    def render() -> np.ndarray:
        return env.renderer.render(env.physics, rng=np.random.default_rng(0))["right_wrist"]["rgb"][0].astype(int)

    rgba = env.model.geom_rgba[env.obj_geom].copy()
    env.model.geom_rgba[env.obj_geom] = (1.0, 0.0, 1.0, 1.0)
    shown = render()
    env.model.geom_rgba[env.obj_geom, 3] = 0.0
    hidden = render()
    env.model.geom_rgba[env.obj_geom] = rgba
    return int((np.abs(shown - hidden).sum(-1) > 60).sum())


def test_right_wrist_sees_the_object_in_the_last_second_before_closure(real_demos):
    """Replayed on the twin, every recorded demo shows the object in the right wrist view at every other step of
    the last second before the hand starts closing (the end of the intercept subtask)."""
    env = make_twin_env(cameras=("right_wrist",), image_size=(SIZE, SIZE))
    seen, frames = [], 0
    try:
        with DemoReader(real_demos) as reader:
            for name in reader.names:
                demo = reader.load(name)
                intercept = np.asarray(demo["obs"]["datagen_info"]["subtask_term_signals"]["intercept"])
                assert intercept.any(), f"{name}: no intercept in a successful demo"
                close = int(np.flatnonzero(intercept)[0])
                env.reset(seed=int(reader.attrs(name)["seed"]))
                for t in range(max(0, close - LAST_SECOND), close, 2):
                    env.set_state(np.asarray(demo["states"][t]))
                    seen.append(_object_pixels(env))
                    frames += 1
    finally:
        env.close()
    seen = np.array(seen)
    assert frames >= 40
    # The object covers several percent of the view on every frame (~100 of 2,304 pixels); the mount behind the
    # palm's back, replaced for this, showed it on none.
    assert (seen >= 10).mean() == 1.0, str(seen.reshape(-1, 10))


def test_every_world_mounts_the_wrist_cameras_alike():
    """The mount is part of the cell, not of a world file: grounded, ungrounded and the twin's truth place each
    wrist camera at the same pose on its palm."""
    poses = {}
    for world in ("grounded", "ungrounded", str(reality_file())):
        model = build_model(load_world(world).cell)
        poses[world] = {c: (model.cam_bodyid[model.camera(c).id], model.cam_pos[model.camera(c).id].copy(),
                            model.cam_quat[model.camera(c).id].copy()) for c in ("right_wrist", "left_wrist")}
    first = poses["grounded"]
    for world, cams in poses.items():
        for cam, (body, pos, quat) in cams.items():
            assert body == first[cam][0], (world, cam)
            np.testing.assert_allclose(pos, first[cam][1], atol=1e-12, err_msg=f"{world} {cam}")
            np.testing.assert_allclose(quat, first[cam][2], atol=1e-12, err_msg=f"{world} {cam}")
