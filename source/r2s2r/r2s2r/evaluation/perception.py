"""Perception in closed loop: what an object-centric policy's camera makes of the object under its own motion.

A perception report on recorded demos (`policy.train_object_centric.perception_report`) sees the frames the
teleoperator's arm left: an estimator that learnt the arm's posture as a cue to the object reads them right and
still misreads the object once the policy moves the arm otherwise. Here each recorded demo's episode is played on
the twin twice, from the demo's reset seed and condition: once with the demo's recorded actions (the twin renders
the recorded frames again) and once with the policy's own. In both the policy's perception runs on every frame
(the agent acts; only the second run executes what it says), and the tracked object is held against the twin's
truth until the object is lifted. Where the two runs differ, the policy's motion changes what the camera shows it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
from tqdm import tqdm

from r2s2r.control.grasp import grasp_yaw, grasp_yaw_period, wrap_yaw
from r2s2r.data import DemoReader
from r2s2r.policy.object_centric import (BLIND_VAR, TRACKED_SIZE, TRACKED_STD, TRACKED_YAW, YAW,
                                         ObjectCentricAgent, hand_points, sight_distance)
from r2s2r.real.twin import make_twin_env

LIFTED = 0.02  # m above where the object rode: the hand has it, and the tracker's belt model no longer applies
MEASURED_STD = 0.05  # m: steps whose tracked position is surer than this count (the object seen, or carried)
# m: a hand this far from the camera's line of sight to the object neither hides it nor enters a glimpse of it; a
# frame then misread reads something else of the view (the arm's posture, docs/results.md).
HAND_FAR = 0.3


def yaw_error(features: np.ndarray, object_quat: np.ndarray, half_extents: np.ndarray) -> float:
    """Degrees from the object's grasp yaw (`grasp_yaw`) to the one grasp-yaw features (cos 2y, sin 2y) hold,
    wrapped to the grasp's period: a cube read 80 degrees off is 10 degrees off, a capsule 80 degrees off is not."""
    estimated = 0.5 * np.arctan2(features[1], features[0])
    period = grasp_yaw_period(object_quat, half_extents)
    return float(np.degrees(wrap_yaw(estimated - grasp_yaw(object_quat, half_extents), period)))


def closed_loop_errors(env, agent: ObjectCentricAgent, seed: int, condition: str, steps: int,
                       actions: Callable[[dict, int], np.ndarray] | None,
                       measured_std: float = MEASURED_STD) -> dict[str, np.ndarray]:
    """One episode of at most `steps` control steps from `seed` and `condition`, executing `actions(obs, t)` (None:
    the agent's own) while `agent` perceives every frame: per step counted (before the lift, the tracked position's
    std under `measured_std` m), the tracked half extents minus the true ones (cm, (n, 3)), the tracked
    position's distance to the true one in the belt plane (cm, (n,)), the tracked grasp yaw minus the true one
    (degrees, (n,), wrapped to the grasp's period: a quarter turn for a cube, half a turn for a capsule) and
    whether the tracker took the frame as covered by the hand ((n,), `object_centric.hand_cover`); and per sharp
    frame before the lift (the keypoint measured), the frame's own grasp-yaw reading minus the true yaw (degrees,
    (m,), before the tracker) and the hand's least distance from the camera's line of sight to the object (m, (m,);
    NaN through a camera on the wrist or without camera geometry)."""
    obs, _ = env.reset(seed=seed, options={"condition": condition})
    agent.reset(seed)
    rode = float(obs["privileged"]["object_pos"][2])
    size, position, yaw, covered, frame_yaw, hand = [], [], [], [], [], []
    geometry = agent.locator.geometry
    for t in range(steps):
        action = agent.act(obs)
        truth = obs["privileged"]
        if float(truth["object_pos"][2]) > rode + LIFTED:
            break
        measured, measured_var = agent.measured
        if measured_var.max() < BLIND_VAR:
            frame_yaw.append(yaw_error(measured[YAW], truth["object_quat"], truth["object_half_extents"]))
            hand.append(np.nan if geometry is None or geometry.on_hand else sight_distance(
                geometry.position, hand_points(obs["proprio"]["ee_pose"]), truth["object_pos"]))
        tracked = agent.tracked
        if tracked[TRACKED_STD].max() < measured_std:
            size.append(100 * (tracked[TRACKED_SIZE] - truth["object_half_extents"]))
            position.append(100 * np.linalg.norm(tracked[:2] - truth["object_pos"][:2]))
            yaw.append(yaw_error(tracked[TRACKED_YAW], truth["object_quat"], truth["object_half_extents"]))
            covered.append(agent.tracker.covered)
        obs, _, terminated, truncated, _ = env.step(actions(obs, t) if actions else action)
        if terminated or truncated:
            break
    return {"size": np.reshape(size, (-1, 3)), "position": np.asarray(position), "yaw": np.asarray(yaw),
            "covered": np.asarray(covered, dtype=bool), "frame_yaw": np.asarray(frame_yaw), "hand": np.asarray(hand)}


def closed_loop_perception(agent: ObjectCentricAgent, dataset: str | os.PathLike, max_demos: int | None = None,
                           progress: bool = True, max_steps: int | None = None,
                           measured_std: float = MEASURED_STD) -> dict:
    """The closed-loop perception report of object-centric `agent` (camera perception) over the demos of
    `dataset` (twin demos: each with its reset `seed` and `condition`), at most `max_demos` of them.

    Returns {"demos": n, "by_object": {object: {"demos": k, "demo_actions": stats, "policy_actions": stats}}}, where
    stats = {"size_error_cm": per-axis median of the tracked half extents minus the true ones, "position_cm": the
    median distance in the belt plane, "yaw_error_deg": the median absolute grasp-yaw error, "steps": counted
    steps, "covered_share": the share of them the tracker took as covered by the hand}, over the steps before the
    object is lifted where the tracked position's std is under `measured_std` m; and "frame_yaw_error_deg": each
    sharp frame's own grasp-yaw reading's median absolute error, before the tracker, over all of them and over
    those with the hand at least HAND_FAR from the camera's line of sight to the object ("all", "hand_far"; None
    without such frames; "frames": how many). Each episode at most as long as its demo and `max_steps`.
    """
    if agent.uses_tracking:
        raise ValueError(f"{agent.name}: its head reads the cell's tracking (object_centric.perception=tracking); "
                         "it has no perception to report")
    with DemoReader(dataset, min_demos=1, attrs=("seed", "condition", "object"),
                    purpose="a closed-loop perception report replays each demo's episode") as reader:
        demos = []  # the reader has checked each seed (an integer >= 0), condition and object (strings)
        for name in reader.names[:max_demos] if max_demos else reader.names:
            attrs = reader.attrs(name)
            demos.append((attrs["object"], int(attrs["seed"]), attrs["condition"],
                          reader.load(name, only=("actions",))["actions"]))
    env = make_twin_env(**agent.env_overrides)
    runs: dict[str, dict[str, list]] = {}
    try:
        for obj, seed, condition, actions in tqdm(demos, desc="closed loop", unit="demo", disable=not progress):
            steps = len(actions) if max_steps is None else min(len(actions), max_steps)
            for kind, act in (("demo_actions", lambda obs, t, a=actions: a[t]), ("policy_actions", None)):
                errors = closed_loop_errors(env, agent, seed, condition, steps, act, measured_std)
                runs.setdefault(obj, {}).setdefault(kind, []).append(errors)
    finally:
        env.close()

    def stats(parts: list[dict]) -> dict:
        size = np.concatenate([p["size"] for p in parts])
        position = np.concatenate([p["position"] for p in parts])
        if not len(position):
            return {"steps": 0}
        yaw = np.concatenate([p["yaw"] for p in parts])
        covered = np.concatenate([p["covered"] for p in parts])
        frame_yaw = np.abs(np.concatenate([p["frame_yaw"] for p in parts]))
        far = frame_yaw[np.concatenate([p["hand"] for p in parts]) >= HAND_FAR]
        median = lambda v: round(float(np.median(v)), 1) if len(v) else None  # noqa: E731
        return {"size_error_cm": [round(float(v), 2) for v in np.median(size, axis=0)],
                "position_cm": round(float(np.median(position)), 2),
                "yaw_error_deg": round(float(np.median(np.abs(yaw))), 1), "steps": int(len(position)),
                "covered_share": round(float(covered.mean()), 3),
                "frame_yaw_error_deg": {"all": median(frame_yaw), "hand_far": median(far), "frames": len(frame_yaw)}}

    by_object = {obj: {"demos": len(kinds["demo_actions"]), **{k: stats(v) for k, v in kinds.items()}}
                 for obj, kinds in sorted(runs.items())}
    return {"demos": len(demos), "by_object": by_object}
