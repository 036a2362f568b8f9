"""`obs/datagen_info` in Isaac Lab Mimic's layout for this cell, and the upgrade of the flat layout of older files.

Isaac Lab Mimic (`DataGenInfoPool`, `DataGenerator`) reads one (T, 4, 4) pose array per end-effector name and per
object name; the cell has one end-effector, `EEF` (the right grasp site), and two subtask frames, `OBJECT` (the
episode's object) and `TARGET_BIN` (the centre of its bin, axes of the world), the names of the Isaac Lab
environment's `get_object_poses`. A demo's `datagen_info` holds::

    eef_pose/right          (T, 4, 4) float32 measured grasp-site pose
    target_eef_pose/right   (T, 4, 4) float32 the pose the action commands
    object_pose/object      (T, 4, 4) float32 tracked object pose
    object_pose/target_bin  (T, 4, 4) float32 the target bin's centre, identity rotation
    gripper_action/right    (T, 20) the action's hand-joint targets
    subtask_term_signals/<name>  (T,) bool, see `r2s2r.data.annotate`
    object_vel (T, 6), belt_speed (T, 1), object_half_extents (T, 3), hand_q (T, 20): the rest of the tracking

Files of format_version 0 and 1 stored the poses flat: (T, 7) position + quaternion (w,x,y,z in version 0, x,y,z,w
in version 1), the bin as `target_bin_pos` (T, 3) and the hand targets as `gripper_action` (T, 20). `LEGACY_FIELDS`
says where each went; `upgrade_field` converts one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from r2s2r.geometry import mat_to_quat, quat_to_mat

EEF = "right"
OBJECT = "object"
TARGET_BIN = "target_bin"
POSE_GROUPS = ("eef_pose", "target_eef_pose", "object_pose")  # groups of (T, 4, 4) poses, keyed by name

# Fields of the flat layout (format_version 0 and 1) -> where layout 2 keeps them, and the per-step width they had.
LEGACY_FIELDS = {
    "eef_pose": (f"eef_pose/{EEF}", 7),
    "target_eef_pose": (f"target_eef_pose/{EEF}", 7),
    "object_pose": (f"object_pose/{OBJECT}", 7),
    "target_bin_pos": (f"object_pose/{TARGET_BIN}", 3),
    "gripper_action": (f"gripper_action/{EEF}", None),
}


def pose_matrices(position: np.ndarray, quat_wxyz: np.ndarray) -> np.ndarray:
    """(T, 4, 4) homogeneous poses from positions (T, 3) and quaternions w,x,y,z (T, 4), float32: Isaac Lab's
    recorder stores them so, and Mimic's generator multiplies source poses with the environment's float32 poses
    (torch does not mix float32 and float64 there)."""
    position = np.asarray(position, dtype=np.float64)
    out = np.zeros((len(position), 4, 4))
    out[:, :3, :3] = quat_to_mat(quat_wxyz)
    out[:, :3, 3] = position
    out[:, 3, 3] = 1.0
    return out.astype(np.float32)


def translations(position: np.ndarray) -> np.ndarray:
    """(T, 4, 4) poses at positions (T, 3) with the world's axes (the target bin's frame)."""
    position = np.asarray(position, dtype=np.float64)
    return pose_matrices(position, np.tile([1.0, 0.0, 0.0, 0.0], (len(position), 1)))


def matrix_poses(poses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (T, 3) and quaternions w,x,y,z with w >= 0 (T, 4) of (T, 4, 4) poses."""
    poses = np.asarray(poses, dtype=np.float64)
    return poses[:, :3, 3].copy(), np.array([mat_to_quat(m[:3, :3]) for m in poses]).reshape(-1, 4)


def positions(poses: np.ndarray) -> np.ndarray:
    """Positions (T, 3) of (T, 4, 4) poses."""
    return np.asarray(poses, dtype=np.float64)[:, :3, 3]


def build(ee_pose: np.ndarray, target_pose: np.ndarray, object_pose: np.ndarray, bin_pos: np.ndarray,
          hand_targets: np.ndarray, **tracking: np.ndarray) -> dict:
    """One demo's datagen_info from per-step poses (T, 7) as the task gives them (position + quaternion w,x,y,z),
    bin positions (T, 3), hand-joint targets (T, 20), and further tracking arrays stored as they are."""
    return {
        "eef_pose": {EEF: pose_matrices(ee_pose[:, :3], ee_pose[:, 3:])},
        "target_eef_pose": {EEF: pose_matrices(target_pose[:, :3], target_pose[:, 3:])},
        "object_pose": {OBJECT: pose_matrices(object_pose[:, :3], object_pose[:, 3:]),
                        TARGET_BIN: translations(bin_pos)},
        "gripper_action": {EEF: np.asarray(hand_targets, dtype=np.float64)},
        **tracking,
    }


def upgrade_field(key: str, value: np.ndarray, format_version: int) -> np.ndarray:
    """Field `key` of LEGACY_FIELDS as a file of `format_version` (0 or 1) stored it -> its layout-2 array."""
    value = np.asarray(value)
    width = LEGACY_FIELDS[key][1]
    if width == 7:
        quat = value[:, 3:] if format_version < 1 else value[:, [6, 3, 4, 5]]  # x,y,z,w -> w,x,y,z
        return pose_matrices(value[:, :3], quat)
    if width == 3:
        return translations(value)
    return value


def nested_get(tree: Mapping, path: str):
    """`tree["a"]["b"]` for path "a/b", or None where a key is missing."""
    for key in path.split("/"):
        if not isinstance(tree, Mapping) or key not in tree:
            return None
        tree = tree[key]
    return tree
