"""One episode's steps -> one demo in the dataset layout, the same for real demos and generated trajectories.

Real and simulated datasets must hold the same fields for co-training, so both are built here: the policy
observations (`obs/<camera>`, `obs/{arm_q, arm_dq, hand_q, ee_pose}`), the actions, the simulator state where
there is one, and `obs/datagen_info` (poses x,y,z,w, tracked object and bin, hand targets, and the subtask term
signals of `r2s2r.data.annotate`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from r2s2r.data.annotate import annotate
from r2s2r.data.hdf5 import pose_wxyz_to_xyzw

# What the tracker (a real cell's object tracking, or the simulator's privileged state) reports each step.
TRACKING_KEYS = ("object_pos", "object_quat", "object_vel", "belt_speed", "target_bin_pos", "object_half_extents")


class EpisodeRecorder:
    """Collects (observation, action, state) per step and stacks them into a demo dict for `DemoWriter.append`."""

    def __init__(self) -> None:
        self.steps: list[dict] = []

    def __len__(self) -> int:
        return len(self.steps)

    def record(self, proprio: Mapping, tracking: Mapping, images: Mapping, action: np.ndarray,
               state: np.ndarray | None = None) -> None:
        """One step: the observation the action was chosen from, the action, and the simulator state (if any)."""
        step = {"action": np.array(action, dtype=np.float64),
                "proprio": {k: np.array(v) for k, v in proprio.items()},
                "tracking": {k: np.array(tracking[k]) for k in TRACKING_KEYS},
                "images": {k: np.array(v) for k, v in images.items() if not k.endswith("_depth")}}
        if state is not None:
            step["state"] = np.array(state, dtype=np.float64)
        self.steps.append(step)

    def demo(self, where: str = "demo") -> dict:
        """The stacked demo; raises `AnnotationError` if its subtasks cannot be found (not a successful pick)."""
        steps = self.steps
        if not steps:
            raise ValueError(f"{where}: no steps recorded")
        actions = np.array([s["action"] for s in steps], dtype=np.float64)
        proprio = {k: np.array([s["proprio"][k] for s in steps], dtype=np.float64) for k in steps[0]["proprio"]}
        tracking = {k: np.array([s["tracking"][k] for s in steps], dtype=np.float64) for k in TRACKING_KEYS}
        images = {k: np.array([s["images"][k] for s in steps], dtype=np.uint8) for k in steps[0]["images"]}
        target = actions[:, :7].copy()
        target[:, 3:] /= np.linalg.norm(target[:, 3:], axis=1, keepdims=True)
        object_pose = np.concatenate([tracking["object_pos"], tracking["object_quat"]], axis=1)
        datagen_info = {
            # Poses x,y,z,w (format_version 1); the rest as observed.
            "eef_pose": pose_wxyz_to_xyzw(proprio["ee_pose"]),
            "target_eef_pose": pose_wxyz_to_xyzw(target),
            "object_pose": pose_wxyz_to_xyzw(object_pose),
            "object_vel": tracking["object_vel"],
            "belt_speed": tracking["belt_speed"],
            "target_bin_pos": tracking["target_bin_pos"],
            "object_half_extents": tracking["object_half_extents"],
            "hand_q": proprio["hand_q"],
            "gripper_action": actions[:, 7:].copy(),
        }
        datagen_info["subtask_term_signals"] = annotate(datagen_info, where=where).term_signals()
        demo = {"actions": actions, "obs": {**images, **proprio, "datagen_info": datagen_info}}
        if "state" in steps[0]:
            demo["states"] = np.array([s["state"] for s in steps], dtype=np.float64)
            demo["initial_state"] = demo["states"][0].copy()
        return demo
