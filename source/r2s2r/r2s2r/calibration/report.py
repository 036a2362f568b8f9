"""The mismatch report: how far a world is from the twin's truth, per parameter, in motion and in images.

Three views of the same question:
- parameter errors: every calibrated parameter of a world against the truth, gathered into axes (one number
  per axis, relative where the parameter is a gain or a mass);
- open-loop replay divergence: the same recorded action sequences replayed in a world and in the twin from the
  same seeded reset; end-effector and object position error over time;
- image difference: the twin's camera images and a world's images of the same physical states (mean absolute
  difference of RGB in [0, 1]).
This module reads the truth because that is its job; the calibration estimators never do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2s2r.cell.spec import CellCfg, fisheye_angle
from r2s2r.cell.world import calibrated_paths, get_path


@dataclass(frozen=True)
class Axis:
    name: str
    unit: str
    patterns: tuple[str, ...]  # substrings of calibrated paths that belong to this axis
    relative: bool = False  # error relative to the truth's magnitude


AXES: tuple[Axis, ...] = (
    Axis("focal length", "%", (".lens.fx", ".lens.fy"), relative=True),
    Axis("principal point", "image fraction", (".lens.cx", ".lens.cy")),
    Axis("fisheye distortion", "rad of distorted angle", (".lens.distortion",)),
    Axis("blur", "px at 128 px", (".lens.blur_sigma",)),
    Axis("exposure", "%", (".lens.exposure",), relative=True),
    Axis("head camera position", "m", ("head_left.pose.pos", "head_right.pose.pos")),
    Axis("head camera orientation", "rad", ("head_left.pose.rpy", "head_right.pose.rpy")),
    Axis("robot base position", "m", ("arms.right.base.pos",)),
    Axis("robot base orientation", "rad", ("arms.right.base.rpy",)),
    Axis("link-length offsets", "m", ("link_length_offsets",)),
    Axis("drive gains", "%", ("arms.right.kp",), relative=True),
    Axis("joint damping", "%", ("joint_damping",), relative=True),
    Axis("joint friction", "%", ("joint_frictionloss",), relative=True),
    Axis("latency", "physics steps", ("latency_steps",)),
    Axis("conveyor position", "m", ("belt.center",)),
    Axis("conveyor yaw", "rad", ("belt.yaw",)),
    Axis("belt speed", "%", ("belt.speed_scale",), relative=True),
    Axis("object masses", "%", (".mass",), relative=True),
    Axis("object colours", "RGB (0..1)", ("colours.",)),
    Axis("lamp colours", "RGB (0..1)", (".colour",)),  # before the next: both are under "lights."
    Axis("lamp intensities", "%", ("lights.",), relative=True),
    Axis("lighting intensity range", "factor", ("lighting.intensity_range",)),
    Axis("lighting tint", "factor", ("lighting.tint",)),
)


def parameter_errors(world: CellCfg, truth: CellCfg) -> dict[str, float]:
    """Mean absolute error per axis (percent for relative axes). Distortion only counts fisheye lenses."""
    errors: dict[str, list[float]] = {a.name: [] for a in AXES}
    for dotted in calibrated_paths(truth):
        axis = next((a for a in AXES if any(p in dotted for p in a.patterns)), None)
        if axis is None:
            continue
        if axis.name == "fisheye distortion" and get_path(truth, dotted.rsplit(".", 1)[0] + ".model") != "fisheye":
            continue
        est = np.atleast_1d(np.asarray(get_path(world, dotted), dtype=float))
        true = np.atleast_1d(np.asarray(get_path(truth, dotted), dtype=float))
        if axis.name == "fisheye distortion":
            # The four coefficients trade off against each other; what matters is the mapping they define, so
            # compare the distorted angle theta_d(theta) over the field of view rather than the coefficients.
            err = np.abs(distorted_angle(est) - distorted_angle(true))
        else:
            err = np.abs(est - true)
        if axis.relative:
            err = 100.0 * err / np.maximum(np.abs(true), 1e-12)
        errors[axis.name].extend(err.tolist())
    return {name: float(np.mean(v)) for name, v in errors.items() if v}


def distorted_angle(k: np.ndarray, max_angle: float = 1.2) -> np.ndarray:
    """The fisheye's distorted angle (`fisheye_angle`) on a grid of ray angles up to `max_angle` radians."""
    return fisheye_angle(np.linspace(0.0, max_angle, 25), k)


def axis_units() -> dict[str, str]:
    return {a.name: a.unit for a in AXES}


def replay(env, seed: int, condition: str, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Replay `actions` open loop after a seeded reset; (T, 3) end-effector and object positions, and states."""
    obs, _ = env.reset(seed=seed, options={"condition": condition})
    ee, obj, states = [], [], []
    for action in actions:
        d = env.physics.host_data(0)
        states.append(np.concatenate([d.qpos, d.qvel]))
        obs, _, terminated, truncated, _ = env.step(action)
        ee.append(obs["proprio"]["ee_pose"][:3])
        obj.append(obs["privileged"]["object_pos"])
        if terminated or truncated:
            break
    return {"ee": np.array(ee), "object": np.array(obj), "states": np.array(states)}


def divergence(run: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-step position error of a replay against the twin's, over the steps both lasted."""
    n = min(len(run["ee"]), len(reference["ee"]))
    return {key: np.linalg.norm(run[key][:n] - reference[key][:n], axis=1) for key in ("ee", "object")}


def image_difference(env, twin_env, states: np.ndarray, cameras: tuple[str, ...],
                     size: int) -> tuple[dict[str, float], np.ndarray]:
    """Mean absolute RGB difference (0..1) per camera between the twin's images and `env`'s images of the same
    states, and one example frame (twin above, world below) of the middle state."""
    from r2s2r.render import make_renderer

    renderers = [make_renderer("mujoco_gl", e.model, e.cell, cameras, size, size, shadows=e.cell.shadows,
                                 depth=False)
                 for e in (env, twin_env)]
    diffs: dict[str, list[float]] = {c: [] for c in cameras}
    example = None
    try:
        for k, state in enumerate(states):
            frames = []
            for e, renderer in zip((env, twin_env), renderers):
                nq = e.model.nq
                e.physics.reset(state[:nq], state[nq:], e.physics.host_data(0).ctrl.copy())
                frames.append(renderer.render(e.physics, rng=np.random.default_rng(k)))
            for c in cameras:
                a = frames[0][c]["rgb"][0].astype(np.float32) / 255.0
                b = frames[1][c]["rgb"][0].astype(np.float32) / 255.0
                diffs[c].append(float(np.abs(a - b).mean()))
            if k == len(states) // 2:
                example = np.concatenate([np.concatenate([f[c]["rgb"][0] for c in cameras], axis=1)
                                          for f in (frames[1], frames[0])], axis=0)
    finally:
        for renderer in renderers:
            renderer.close()
    return {c: float(np.mean(v)) for c, v in diffs.items()}, example
