"""Object colours and lighting by render-and-compare: make the simulated cell look like the real one in a real camera.

For each recorded scene image (an object on the belt, with the tracker's pose of it), the object is placed at
the same pose in the simulated world and rendered twice, once painted black and once white: the pixels that
change are the object, seen through the same (calibrated) lens, with no segmentation model to trust. The
colour is then corrected until the simulated object's median pixel matches the real one's. The estimate absorbs
what the lighting does to the colour, which is what a renderer needs.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from r2s2r.calibration import CalibrationError
from r2s2r.cell.spec import CellCfg, LightingCfg
from r2s2r.sim import CellSim

MIN_PIXELS = 30  # an object covering fewer pixels than this gives no reliable colour
ITERATIONS = 3


def estimate_colours(scenes: list[tuple[np.ndarray, dict]], cell: CellCfg, camera: str) -> dict[str, tuple]:
    """RGBA per colour name from `scenes` (image, tracker info with object, colour, object_pos, object_quat)."""
    if not scenes:
        raise CalibrationError("appearance: no scene images recorded")
    height, width = scenes[0][0].shape[:2]
    sim = CellSim(cell)
    colours = {name: np.array(rgba[:3], dtype=float) for name, rgba in cell.colours.items()}
    samples: dict[str, list[tuple]] = defaultdict(list)
    with sim.renderer("mujoco_gl", [camera], width, height, depth=False) as renderer:

        def render(info: dict, rgb) -> np.ndarray:
            """The simulated camera image with the tracked object at its pose, painted `rgb`."""
            _place(sim, info)
            sim.paint_objects(_object(cell, info["object"]), (*rgb, 1.0))
            return renderer.render(sim.physics)[camera]["rgb"][0].astype(float) / 255.0

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


def estimate_lighting(scenes: list[tuple[np.ndarray, dict]], cell: CellCfg, camera: str) -> LightingCfg:
    """The range of the cell's trial-to-trial lighting from scene images taken on different occasions.

    The simulated scene (calibrated camera and colours, object at its tracked pose) is rendered with the lights
    at full and at half diffuse intensity; pixel values are affine in the intensity, so each real image gives,
    per colour channel, the light gain that explains its pixels (the median over the pixels the lights reach
    well, clipped ones left out). The gains' mean over channels is the image's
    intensity factor, their ratios (relative to the images' median ratios) its tint. The uniform ranges are then estimated from the samples (extremes
    widened by one sample spacing, the unbiased estimate for a uniform law).
    """
    if len(scenes) < 4:
        raise CalibrationError(f"lighting: {len(scenes)} scene images; at least 4 needed to estimate a range")
    height, width = scenes[0][0].shape[:2]
    sim = CellSim(cell)
    gains = []
    with sim.renderer("mujoco_gl", [camera], width, height, depth=False) as renderer:
        for image, info in scenes:
            _place(sim, info)
            sim.paint_objects(_object(cell, info["object"]), cell.colours[info["colour"]])
            frames = []
            for level in (1.0, 0.5):
                sim.set_lights(level)
                frames.append(renderer.render(sim.physics)[camera]["rgb"][0].astype(float) / 255.0)
            sim.set_lights()
            slope = 2.0 * (frames[0] - frames[1])  # d(pixel) / d(gain)
            offset = frames[0] - slope
            real = image.astype(float) / 255.0
            use = (slope.min(-1) > 0.1) & (real.max(-1) < 0.98) & (frames[0].max(-1) < 0.98)
            if use.sum() < MIN_PIXELS:
                raise CalibrationError(f"lighting: a scene image of {camera} has {use.sum()} pixels the lights reach "
                                       f"(>= {MIN_PIXELS} needed)")
            # Per pixel, the gain that explains it; the median ignores what the simulated scene lacks (shadows,
            # clutter) and the sensor's noise.
            gains.append(np.median((real[use] - offset[use]) / slope[use], axis=0))
    gains = np.array(gains)
    factor = gains.mean(axis=1)
    # Tint is the variation between occasions: a cast all images share (the sim's floor or clutter differing in
    # colour from the real ones) is left out.
    balance = gains / factor[:, None]
    tint = balance / np.median(balance, axis=0) - 1.0
    n = len(factor)
    spacing = (factor.max() - factor.min()) / (n - 1)
    low, high = max(factor.min() - spacing, 0.2), min(factor.max() + spacing, 3.0)
    tint_bound = float(np.abs(tint).max()) * (tint.size + 1) / tint.size
    return LightingCfg((float(low), float(high)), min(tint_bound, 0.5))


def _object(cell: CellCfg, name: str):
    for obj in cell.objects + cell.novel_objects:
        if obj.name == name:
            return obj
    raise CalibrationError(f"appearance: unknown object {name!r} in the recorded tracker info")


def _place(sim: CellSim, info: dict) -> None:
    """The cell at home with the tracked object at its recorded pose."""
    model = sim.model
    qpos = model.key_qpos[0].copy()
    _, _, adr, _ = sim.object_address(_object(sim.cell, info["object"]))
    qpos[adr:adr + 3] = info["object_pos"]
    qpos[adr + 3:adr + 7] = info["object_quat"]
    sim.physics.reset(qpos, np.zeros(model.nv), model.key_ctrl[0])
