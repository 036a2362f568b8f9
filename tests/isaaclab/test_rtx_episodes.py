"""Under Isaac Sim (Kit, an RTX GPU): the Isaac Lab environment's cameras drawn by Isaac Sim's RTX renderer show each
episode's paint and lights, written by the `paint` event with Replicator (`RtxLooks`). Skipped where Isaac Sim does
not import; the values it writes are tested without Kit in test_pick_sort_cameras.py."""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np
import pytest

pytestmark = [pytest.mark.isaacsim,
              pytest.mark.skipif(importlib.util.find_spec("isaacsim") is None,
                                 reason="needs Isaac Sim (RTX GPU); isaacsim does not import here")]

TASK = "Isaac-R2S2R-PickSort-Ungrounded-v0"
SEED = 1  # a red capsule


def test_rtx_images_show_each_episodes_paint_and_lights():
    """The same state under SEED's nominal episode and under its `lighting` episode: Replicator has written each
    episode's object colour and lights to the environment's cell on the stage, and the head camera's RTX image
    changes with them."""
    from isaaclab.app import add_launcher_args
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    import r2s2r.isaaclab_tasks  # noqa: F401  (registers the IDs)
    from r2s2r.isaaclab_tasks.launcher import launch

    cfg = parse_env_cfg(TASK)
    cfg.cameras, cfg.image_size, cfg.renderer = ("head_left",), (96, 128), "isaac_rtx"
    parser = argparse.ArgumentParser()
    add_launcher_args(parser)
    args = parser.parse_args(["--viz", "none"])  # headless: no Kit visualizer
    with launch(cfg, args):
        import omni.usd
        from pxr import UsdLux

        from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

        env = PickSortCellEnv(cfg)
        try:
            env.reset(seed=SEED)
            state = env.mujoco_states()[0]
            nominal = env.observe()["images"]["head_left"][0].numpy()
            env.reset(seed=SEED, options={"condition": "lighting"})
            env.set_state(state)
            lit = env.observe()["images"]["head_left"][0].numpy()
            stage = omni.usd.get_context().get_stage()
            root = env.looks.roots[0]
            for i, light_cfg in enumerate(env.cell.lights):
                light = UsdLux.SphereLight(stage.GetPrimAtPath(f"{root}/Lights/{light_cfg.name}"))
                shown = np.array(light.GetColorAttr().Get()) * light.GetIntensityAttr().Get()
                ratio = shown / env.light_diffuse[0, i]
                np.testing.assert_allclose(ratio, ratio[0], rtol=1e-5)  # the episode's colour, at the stage's scale
            assert np.abs(lit.astype(int) - nominal.astype(int)).mean() > 1.0
        finally:
            env.close()
