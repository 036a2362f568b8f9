"""One episode's steps -> one demo in the dataset layout, the same for real demos and generated trajectories.

Real and simulated datasets must hold the same fields for co-training, so both are built here: the policy
observations (`obs/<camera>`, `obs/{arm_q, arm_dq, hand_q, ee_pose}`), the actions, the simulator state where
there is one, and `obs/datagen_info` in Isaac Lab Mimic's layout (`r2s2r.data.datagen_info`: hand, target, object
and bin poses, hand targets, the rest of the tracking, and the subtask term signals of `r2s2r.data.annotate`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from r2s2r.data import datagen_info
from r2s2r.data.annotate import annotate

# What the tracker (a real cell's object tracking, or the simulator's privileged state) reports each step.
TRACKING_KEYS = ("object_pos", "object_quat", "object_vel", "belt_speed", "target_bin_pos", "object_half_extents")


def _views(images: Mapping) -> dict:
    """The colour views of a step (depth maps are not recorded)."""
    return {c: np.array(v) for c, v in images.items() if not c.endswith("_depth")}


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
                "images": _views(images)}
        if state is not None:
            step["state"] = np.array(state, dtype=np.float64)
        self.steps.append(step)

    def state(self, k: int) -> np.ndarray:
        """The simulator state recorded with step `k`."""
        return self.steps[k]["state"]

    def set_images(self, k: int, images: Mapping) -> None:
        """Step `k`'s camera views, when they are rendered after the step was recorded (from its state)."""
        self.steps[k]["images"] = _views(images)

    def demo(self, where: str = "demo") -> dict:
        """The stacked demo; raises `AnnotationError` if its subtasks cannot be found (not a successful pick)."""
        steps = self.steps
        if not steps:
            raise ValueError(f"{where}: no steps recorded")
        actions = np.array([s["action"] for s in steps], dtype=np.float64)
        proprio = {k: np.array([s["proprio"][k] for s in steps], dtype=np.float64) for k in steps[0]["proprio"]}
        tracking = {k: np.array([s["tracking"][k] for s in steps], dtype=np.float64) for k in TRACKING_KEYS}
        images = {k: np.array([s["images"][k] for s in steps], dtype=np.uint8) for k in steps[0]["images"]}
        object_pose = np.concatenate([tracking["object_pos"], tracking["object_quat"]], axis=1)
        # The target pose is the action's hand pose (position, quaternion w,x,y,z: action_mode "ee_pose").
        info = datagen_info.build(proprio["ee_pose"], actions[:, :7], object_pose, tracking["target_bin_pos"],
                                  actions[:, 7:], object_vel=tracking["object_vel"], belt_speed=tracking["belt_speed"],
                                  object_half_extents=tracking["object_half_extents"], hand_q=proprio["hand_q"])
        info["subtask_term_signals"] = annotate(info, where=where).term_signals()
        demo = {"actions": actions, "obs": {**images, **proprio, "datagen_info": info}}
        if "state" in steps[0]:
            demo["states"] = np.array([s["state"] for s in steps], dtype=np.float64)
            demo["initial_state"] = demo["states"][:1].copy()
        return demo
