"""Object colours by render-and-compare: make the simulated objects look like the real ones in a real camera.

For each recorded scene image (an object on the belt, with the tracker's pose of it), the object is placed at
the same pose in the simulated world and rendered twice, once painted black and once white: the pixels that
change are the object, seen through the same (calibrated) lens, with no segmentation model to trust. The
colour is then corrected until the simulated object's median pixel matches the real one's. The estimate absorbs
what the lighting does to the colour, which is what a renderer needs.
"""

from __future__ import annotations

from collections import defaultdict

import mujoco
import numpy as np

from r2s2r.calibration import CalibrationError
from r2s2r.cell.mjcf import belt_periodic, build_model, object_body_name
from r2s2r.cell.spec import CellCfg
from r2s2r.physics import make_physics
from r2s2r.render import make_renderer

MIN_PIXELS = 30  # an object covering fewer pixels than this gives no reliable colour
ITERATIONS = 3


def estimate_colours(scenes: list[tuple[np.ndarray, dict]], cell: CellCfg, camera: str) -> dict[str, tuple]:
    """RGBA per colour name from `scenes` (image, tracker info with object, colour, object_pos, object_quat)."""
    if not scenes:
        raise CalibrationError("appearance: no scene images recorded")
    height, width = scenes[0][0].shape[:2]
    model = build_model(cell)
    physics = make_physics("mujoco", model, 1, (belt_periodic(model, cell),))
    colours = {name: np.array(rgba[:3], dtype=float) for name, rgba in cell.colours.items()}
    samples: dict[str, list[tuple]] = defaultdict(list)
    with make_renderer("mujoco_gl", model, cell, [camera], width, height) as renderer:

        def render(info: dict, rgb) -> np.ndarray:
            """The simulated camera image with the tracked object at its pose, painted `rgb`."""
            geom = model.geom(object_body_name(_object(cell, info["object"]))).id
            _place(model, physics, info)
            model.geom_rgba[geom] = (*rgb, 1.0)
            return renderer.render(physics)[camera]["rgb"][0].astype(float) / 255.0

        for image, info in scenes:
            if image.shape[:2] != (height, width):
                raise CalibrationError(f"appearance: image of shape {image.shape} among images of {(height, width)}")
            mask = np.abs(render(info, (1.0, 1.0, 1.0)) - render(info, (0.0, 0.0, 0.0))).sum(-1) > 0.3
            # Shrink the mask by its blurred rim: edge pixels mix object and background in the real image.
            mask &= np.roll(mask, 2, 0) & np.roll(mask, -2, 0) & np.roll(mask, 2, 1) & np.roll(mask, -2, 1)
            if mask.sum() >= MIN_PIXELS:
                samples[info["colour"]].append((np.median(image[mask].astype(float) / 255.0, axis=0), info, mask))
        estimates = {}
        for name, items in samples.items():
            rgb = colours[name].copy()
            for _ in range(ITERATIONS):  # the renderer's response to albedo is close to linear: a few ratio steps
                ratios = [real / np.maximum(np.median(render(info, rgb)[mask], axis=0), 1e-3)
                          for real, info, mask in items]
                rgb = np.clip(rgb * np.median(ratios, axis=0), 0.0, 1.0)
            estimates[name] = (*map(float, rgb), 1.0)
    missing = set(cell.colours) - set(estimates)
    if missing:
        raise CalibrationError(f"appearance: no usable image of a {', '.join(sorted(missing))} object "
                               f"(each needs >= {MIN_PIXELS} object pixels in {camera})")
    return estimates


def _object(cell: CellCfg, name: str):
    for obj in cell.objects + cell.novel_objects:
        if obj.name == name:
            return obj
    raise CalibrationError(f"appearance: unknown object {name!r} in the recorded tracker info")


def _place(model: mujoco.MjModel, physics, info: dict) -> None:
    qpos = model.key_qpos[0].copy()
    adr = model.joint(f"obj_{info['object']}").qposadr[0]
    qpos[adr:adr + 3] = info["object_pos"]
    qpos[adr + 3:adr + 7] = info["object_quat"]
    physics.reset(qpos, np.zeros(model.nv), model.key_ctrl[0])
