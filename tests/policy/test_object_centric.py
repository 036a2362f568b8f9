"""The object-centric policy: labels, the belt tracker, training in two stages, deployment on the twin."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from r2s2r.control.grasp import grasp_yaw, grasp_yaw_period
from r2s2r.cell.world import load_world
from r2s2r.core import ConfigError
from r2s2r.data import DatasetError, DemoReader
from r2s2r.data.datagen_info import OBJECT, matrix_poses, pose_matrices, translations
from r2s2r.geometry import mat_to_quat, rpy_to_mat
from r2s2r.policy.agent import load_agent
from r2s2r.policy.checkpoint import CheckpointError, load_checkpoint
from r2s2r.policy.config import DatasetCfg, compose_train_cfg
from r2s2r.policy.data import load_dataset
from r2s2r.policy.object_centric import (ActionHead, FlowHead, BIN, BIN_OFFSET, BLIND_VAR, EE_POS, FEATURE_STRIDE, HEAD_EE_POS, HEAD_PROPRIO, NEAR,
                                         NEAR_FIELD, OFFSET, POS, RESTING_MARGIN, SETPOINT, SIZE, TRACKED_BIN,
                                         TRACKED_DIM, TRACKED_HALF_HEIGHT, YAW, BeltTracker, belt_top, CameraGeometry, LocatorCfg, ObjectCentricAgent, ObjectLocator, Photometric,
                                         frame_labels, head_input, keypoint_pixels, keypoint_target,
                                         ObjectEstimator, ROI_CELLS, TRACKED_SIZE, TRACKED_STD, TRACKED_YAW,
                                         GLIMPSE_PX, GLIMPSE_SIDE, TrackerCfg, camera_tracker, hand_points,
                                         sight_distance)
from r2s2r.evaluation.perception import LIFTED, closed_loop_perception, yaw_error
from r2s2r.policy.train_object_centric import ObjectCentricTrainer, measure, track
from r2s2r.real.twin import TwinCell

BELT_TOP = belt_top(load_world("grounded").cell)  # the phased frames' belt, from the default keypoint_world


def oc_overrides(run_dir, datasets, **extra) -> list[str]:
    listed = ", ".join(f"{{path: {p}, weight: {w}}}" for p, w in datasets)
    values = {"run_dir": run_dir, "steps": 40, "log_every": 10, "threads": 1, "policy.kind": "object_centric",
              "policy.cameras": "[right_wrist]", "policy.image_size": "[32,32]", "policy.chunk": 8,
              "policy.execute": 4, "optim.warmup_steps": 5, "object_centric.estimator_steps": 150,
              "object_centric.estimator_batch": 16, "object_centric.head_batch": 32, "object_centric.hidden": 64,
              **extra}
    return [f"{k}={v}" for k, v in values.items()] + [f"data.datasets=[{listed}]"]


def assert_hand_shift_keeps_the_world(trainer: ObjectCentricTrainer) -> None:
    """Hand-displacement augmentation moves the hand, not the world: drawn from the same samples with and without a
    shift, the object's, its bin's and every target's absolute position (anchor + offset: the hand's position, or
    the tracked object's for object-relative targets) agree, the hand itself moved, and the near-field input follows
    the shifted offset."""
    m = trainer.model

    def draw(fraction: float) -> tuple[np.ndarray, np.ndarray]:
        oc = dataclasses.replace(trainer.cfg.object_centric, hand_shift=(0.02, 0.02, 0.01),
                                 hand_shift_fraction=fraction, state_noise=0.0)
        trainer.cfg = dataclasses.replace(trainer.cfg, object_centric=oc)
        trainer.rng = np.random.default_rng(7)
        trainer.generator.manual_seed(7)
        x, y = trainer.head_batch()
        return (x * m.input_std + m.input_mean).numpy(), (y * m.action_std + m.action_mean).numpy()

    (x0, y0), (x1, y1) = draw(0.0), draw(1.0)
    ee0, ee1 = x0[:, HEAD_EE_POS], x1[:, HEAD_EE_POS]
    assert np.all(np.linalg.norm(ee1 - ee0, axis=1) > 1e-4)
    for cols in (OFFSET, BIN_OFFSET):
        np.testing.assert_allclose(x1[:, cols] + ee1, x0[:, cols] + ee0, atol=1e-4)
    frame = trainer.cfg.object_centric.action_frame

    def anchor(x: np.ndarray, ee: np.ndarray) -> np.ndarray:
        on_belt = x[:, OFFSET] + ee if frame.startswith("object") else ee
        if frame.endswith("_bin"):  # the bin once the object is lifted off the belt
            lifted = x[:, OFFSET.start + 2] + ee[:, 2] > BELT_TOP + x[:, TRACKED_HALF_HEIGHT] + RESTING_MARGIN
            return np.where(lifted[:, None], x[:, BIN_OFFSET] + ee, on_belt)
        return on_belt

    anchor0, anchor1 = anchor(x0, ee0), anchor(x1, ee1)
    np.testing.assert_allclose(y1[..., :3] + anchor1[:, None], y0[..., :3] + anchor0[:, None], atol=1e-4)
    np.testing.assert_allclose(y1[..., 3:], y0[..., 3:], atol=1e-5)
    np.testing.assert_allclose(x1[:, NEAR], NEAR_FIELD * np.tanh(x1[:, OFFSET] / NEAR_FIELD), atol=1e-5)
    untouched = np.ones(x0.shape[1], bool)
    for cols in (OFFSET, BIN_OFFSET, NEAR, HEAD_EE_POS):
        untouched[cols] = False
    np.testing.assert_allclose(x1[:, untouched], x0[:, untouched], atol=1e-5)


def test_head_input_columns_hold_what_their_names_say():
    rng = np.random.default_rng(0)
    tracked, proprio = rng.normal(size=(5, TRACKED_DIM)), rng.normal(size=(5, 35))
    ee = proprio[:, EE_POS]
    x = head_input(tracked, ee, proprio)
    np.testing.assert_allclose(x[:, OFFSET], tracked[:, :3] - ee, atol=1e-6)
    np.testing.assert_allclose(x[:, BIN_OFFSET], tracked[:, 14:17] - ee, atol=1e-6)  # bin: the last 3 tracked
    np.testing.assert_allclose(x[:, HEAD_EE_POS], ee, atol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_tracker_carries_an_occluded_object_along_the_belt(seed):
    """An object rides the belt at a speed that differs from the set-point (the twin's scale error), is seen with
    millimetre noise for 3 s, then hidden for 2 s while the estimator, blind, reports the hand's position with a
    large variance. The tracker must still know where the object is; holding the last sighting would not."""
    rng = np.random.default_rng(seed)
    dt, setpoint = 0.05, rng.uniform(0.08, 0.3)
    speed = setpoint * rng.uniform(0.9, 1.1)
    start = np.array([-0.55, rng.uniform(-0.05, 0.05), 0.1])
    tracker = BeltTracker(dt)
    attrs = rng.normal(size=8)
    for t in range(100):
        truth = start + [speed * t * dt, 0.0, 0.0]
        visible = t < 60
        measured = truth + rng.normal(0, 0.003, 3) if visible else np.array([0.2, -0.2, 0.3]) + rng.normal(0, 0.02, 3)
        var = np.full(3, 0.003**2 if visible else 0.3**2)
        state = tracker.update(np.concatenate([measured, attrs + (0 if visible else 5.0)]), var, setpoint)
        if t == 59:
            last_seen = measured
    error = np.linalg.norm(state[:3] - truth)
    assert error < 0.01, f"tracker off by {100 * error:.1f} cm after 2 s hidden"
    assert np.linalg.norm(last_seen - truth) > 0.1  # what holding the last sighting would give
    assert abs(state[3] - speed) < 0.01  # the belt's true speed, learnt from the sightings
    # Attributes are weighted by confidence: blind frames barely move them.
    np.testing.assert_allclose(state[9:], attrs, atol=0.05)
    # Picked up: confident sightings somewhere else pull the estimate there within half a second.
    lifted = np.array([0.4, -0.3, 0.35])
    for _ in range(10):
        state = tracker.update(np.concatenate([lifted, attrs]), np.full(3, 0.005**2), setpoint)
    assert np.linalg.norm(state[:3] - lifted) < 0.02


def test_tracker_yaw_follows_the_hand_while_size_and_bin_hold():
    """Seen on the belt for 3 s with its true yaw, size and bin, then held in the hand for 2 s: the hand has turned
    it, and the estimator, seeing it between the fingers, reads another yaw, a smaller size and a neighbouring bin
    with the same confidence. The yaw must follow the turn; the size and the bin, which the object cannot change,
    must stay nearer the truth than the misreading, or the head carries the object to the wrong bin."""
    tracker = BeltTracker(0.05)
    yaw, size, bin_pos = np.array([1.0, 0.0]), np.array([0.03, 0.03, 0.02]), np.array([0.62, -0.48, 0.0])
    turned, misread_size, misread_bin = np.array([0.0, 1.0]), np.array([0.02, 0.02, 0.01]), np.array([0.62, -0.3, 0.0])
    var = np.full(3, 0.003**2)
    for t in range(100):
        in_hand = t >= 60
        attrs = np.concatenate([turned, misread_size, misread_bin] if in_hand else [yaw, size, bin_pos])
        state = tracker.update(np.concatenate([[0.1 * t * 0.05, -0.48, 0.1], attrs]), var, 0.1)
    np.testing.assert_allclose(state[9:11], turned, atol=0.02)  # the belt frames keep 0.9 ** 40 of their weight
    assert np.linalg.norm(state[11:14] - size) < np.linalg.norm(state[11:14] - misread_size)
    assert np.linalg.norm(state[TRACKED_BIN] - bin_pos) < np.linalg.norm(state[TRACKED_BIN] - misread_bin)
    tracker.reset()  # a new episode starts from nothing: its first frame sets every attribute
    state = tracker.update(np.concatenate([[0.0, -0.48, 0.1], turned, misread_size, misread_bin]), var, 0.1)
    np.testing.assert_allclose(state[9:], np.concatenate([turned, misread_size, misread_bin]), atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_sight_distance_is_the_least_distance_from_the_segment(seed):
    """Against a dense sampling of the segment: points beside it, beyond either end and on it."""
    rng = np.random.default_rng(seed)
    camera, target = rng.normal(size=3), rng.normal(size=3)
    points = np.concatenate([rng.normal(size=(3, 3)) * 2, camera + 1.5 * (target - camera) + rng.normal(0, 0.1, (1, 3)),
                             [camera + 0.3 * (target - camera)]])
    samples = camera + np.linspace(0, 1, 200_001)[:, None] * (target - camera)
    for k in range(len(points)):
        expected = np.linalg.norm(samples - points[k], axis=1).min()
        assert sight_distance(camera, points[k:k + 1], target) == pytest.approx(expected, abs=1e-4)
    assert sight_distance(camera, points, target) == pytest.approx(0.0, abs=1e-12)  # the last one lies on it


def test_hand_points_are_the_models_grasp_site_and_palm():
    """The hand's reported pose (the grasp site's position and orientation) gives the palm's mount as the built
    model places it, in random arm postures."""
    import mujoco

    from r2s2r.cell.mjcf import build_model
    from r2s2r.cell.spec import CellCfg
    from r2s2r.geometry import mat_to_quat

    model = build_model(CellCfg())
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    site, palm = model.site("right_grasp").id, model.body("right_palm").id
    arm = [model.joint(f"right_joint{i}").qposadr[0] for i in range(1, 8)]
    for _ in range(5):
        data.qpos[arm] = rng.uniform(-1.5, 1.5, 7)
        mujoco.mj_forward(model, data)
        ee_pose = np.concatenate([data.site_xpos[site], mat_to_quat(data.site_xmat[site].reshape(3, 3))])
        np.testing.assert_allclose(hand_points(ee_pose), [data.site_xpos[site], data.xpos[palm]], atol=1e-9)


def test_tracker_keeps_yaw_size_and_bin_from_frames_the_hand_left():
    """The object rides the belt, seen right for 3 s; then the hand hovers between the camera and the object for
    2 s and the estimator, seeing the hand, reads a yaw a quarter turn off, another size and another bin with the
    same confidence. Told where the camera is, the tracker keeps what the clear frames read while its position
    still follows the belt; without the cover radius it follows the misreading. The hand beside the line of sight
    (a frame it does not cover) still counts."""
    dt, setpoint, camera = 0.05, 0.1, np.array([0.0, 0.6, 1.0])
    yaw, size, bin_pos = np.array([1.0, 0.0]), np.array([0.02, 0.045, 0.02]), np.array([0.62, -0.48, 0.0])
    misread = np.concatenate([[-1.0, 0.0], [0.04, 0.03, 0.02], [0.62, -0.3, 0.0]])
    var = np.full(3, 0.003**2)

    def episode(cover_radius: float, hand_offset: np.ndarray) -> tuple[np.ndarray, list[bool]]:
        tracker = BeltTracker(dt, TrackerCfg(cover_radius=cover_radius), camera=camera)
        covered = []
        for t in range(100):
            position = np.array([-0.5 + setpoint * t * dt, -0.45, 0.1])
            over = t >= 60
            ee_pose = np.concatenate([position + (0.5 * (camera - position) + hand_offset if over else [0, 0, 0.6]),
                                      [1.0, 0.0, 0.0, 0.0]])
            attrs = misread if over else np.concatenate([yaw, size, bin_pos])
            state = tracker.update(np.concatenate([position, attrs]), var, setpoint, ee_pose=ee_pose)
            covered.append(tracker.covered)
        np.testing.assert_allclose(state[:3], position, atol=0.005)
        return state, covered

    kept, covered = episode(0.08, np.zeros(3))
    assert not any(covered[:60]) and all(covered[60:])
    np.testing.assert_allclose(kept[9:], np.concatenate([yaw, size, bin_pos]), atol=1e-9)
    followed, covered = episode(0.0, np.zeros(3))
    assert not any(covered)
    np.testing.assert_allclose(followed[9:11], misread[:2], atol=0.05)
    beside, covered = episode(0.08, np.array([0.0, 0.0, 0.3]))  # 30 cm off the line of sight, palm and wrist alike
    assert not any(covered)
    np.testing.assert_allclose(beside[9:11], misread[:2], atol=0.05)
    with pytest.raises(ValueError, match="ee_pose"):
        tracker = BeltTracker(dt, TrackerCfg(cover_radius=0.08), camera=camera)
        for _ in range(2):
            tracker.update(np.concatenate([[0.0, -0.45, 0.1], misread]), var, setpoint)


def test_photometric_augmentation_keeps_images_in_range_with_sensor_noise_per_frame():
    aug = Photometric((3, 16, 16), strength=1.0, seed=3)
    assert torch.equal(aug.noise, Photometric((3, 16, 16), strength=1.0, seed=3).noise)  # the run's seed sets it
    assert abs(float(aug.noise.std()) - 0.02) < 0.002
    grey = torch.full((64, 3, 16, 16), 0.5)
    out = aug(grey.clone(), torch.Generator().manual_seed(0))
    assert 0.0 <= float(out.min()) and float(out.max()) <= 1.0
    # Per frame: a gain and tint (the frame's mean moves), and noise around it (0.02 per pixel before clipping).
    means = out.mean(dim=(2, 3))
    assert float(means.std()) > 0.05
    residual = out - means[:, :, None, None]
    assert abs(float(residual.std()) - 0.02) < 0.005
    assert len({tuple(r.flatten()[:8].tolist()) for r in residual}) > 32  # frames draw different noise images


def test_frame_labels_follow_the_tracker_fields():
    rng = np.random.default_rng(0)
    T = 12
    yaw = rng.uniform(-np.pi, np.pi, T)
    quat_wxyz = np.array([mat_to_quat(rpy_to_mat((0.0, 0.0, y))) for y in yaw])
    pos = rng.normal(size=(T, 3))
    extents = np.tile([0.035, 0.022, 0.022], (T, 1))
    bins = np.tile([0.5, -0.4, 0.05], (T, 1))
    info = {"object_pose": {"object": pose_matrices(pos, quat_wxyz), "target_bin": translations(bins)},
            "object_half_extents": extents}
    labels = frame_labels(info)
    np.testing.assert_allclose(labels[:, POS], pos, atol=1e-6)
    expected = np.array([grasp_yaw(q, e) for q, e in zip(quat_wxyz, extents)])
    np.testing.assert_allclose(labels[:, YAW], np.stack([np.cos(2 * expected), np.sin(2 * expected)], 1), atol=1e-5)
    # A cuboid turned by half a turn is the same grasp: the features are equal.
    turned = np.array([mat_to_quat(rpy_to_mat((0.0, 0.0, y + np.pi))) for y in yaw])
    turned_info = {**info, "object_pose": {**info["object_pose"], "object": pose_matrices(pos, turned)}}
    np.testing.assert_allclose(frame_labels(turned_info)[:, YAW], labels[:, YAW], atol=1e-5)
    np.testing.assert_allclose(labels[:, SIZE], extents, atol=1e-7)
    np.testing.assert_allclose(labels[:, BIN], bins, atol=1e-6)  # from float32 poses


def test_trains_in_two_stages_resumes_and_deploys_on_the_twin(tmp_path, policy_datasets):
    datasets = [(policy_datasets["real"], 0.5), (policy_datasets["sim"], 0.5)]
    holdout = {"object_centric.holdout_demos": 1}
    cfg = compose_train_cfg(oc_overrides(tmp_path / "run", datasets, **holdout))
    trainer = ObjectCentricTrainer(cfg)
    result = trainer.run(progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    for stage in ("estimator", "head"):
        losses = [e["loss"] for e in log if e["stage"] == stage]
        assert np.mean(losses[-3:]) < np.mean(losses[:3]), (stage, losses)
    # The head trains on the near-field copy of the offset it is given, noise included, as deployment computes it:
    # the offset itself within 3 mm of the hand, saturating at NEAR_FIELD.
    x, _ = trainer.head_batch()
    m = trainer.model
    raw = (x * m.input_std + m.input_mean).numpy()
    offset, near = raw[:, :3], raw[:, NEAR]
    np.testing.assert_allclose(near, NEAR_FIELD * np.tanh(offset / NEAR_FIELD), atol=1e-5)
    close = np.abs(offset) < 0.003
    np.testing.assert_allclose(near[close], offset[close], atol=1e-5)
    # Saturating: un-normalising in float32 rounds a saturated value up to 1e-5 past the bound (as above).
    assert np.all(np.abs(near) <= NEAR_FIELD + 1e-5)
    assert_hand_shift_keeps_the_world(trainer)
    report = json.loads((tmp_path / "run" / "perception.json").read_text())
    assert report["demos"] == 1 and report["approach"]["tracker_xy"]["frames"] > 0
    assert np.isfinite(report["approach"]["tracker_xy"]["median_cm"])
    assert report["grasp_window"]["regression_xy"]["frames"] == 20  # one second at 20 Hz

    # A finished run is left as it is; another config in the same folder is refused.
    again = ObjectCentricTrainer(cfg).run(progress=False)
    assert again.checkpoint == result.checkpoint
    changed = compose_train_cfg(oc_overrides(tmp_path / "run", datasets, **holdout, **{"object_centric.keypoints": 8}))
    with pytest.raises(CheckpointError, match="another config .differs in object_centric.keypoints"):
        ObjectCentricTrainer(changed).run(progress=False)
    # An estimator copied into another folder is reused by a head trained with other head-only settings; a change
    # the estimator depends on is still refused there.
    (tmp_path / "head").mkdir()
    shutil.copy(tmp_path / "run" / "estimator.pt", tmp_path / "head" / "estimator.pt")
    head_only = {**holdout, "object_centric.hidden": 32, "object_centric.hand_shift_fraction": 1.0, "steps": 20}
    with pytest.raises(CheckpointError, match="differs in object_centric.keypoints"):
        ObjectCentricTrainer(compose_train_cfg(oc_overrides(tmp_path / "head", datasets, **head_only,
                                                            **{"object_centric.keypoints": 8}))).run(progress=False)
    retrained = ObjectCentricTrainer(compose_train_cfg(oc_overrides(tmp_path / "head", datasets, **head_only)))
    assert retrained.run(progress=False).resumed_from == cfg.object_centric.estimator_steps
    first, second = (load_checkpoint(r)["model"] for r in (result.checkpoint, tmp_path / "head" / "policy.pt"))
    assert all(torch.equal(first[k], second[k]) for k in first if k.startswith("estimator."))
    assert second["head.net.0.weight"].shape[0] == 32
    # object_centric.estimator_from: a head trained on other data keeps another run's estimator (its policy.pt
    # here) untouched; an estimator of another shape, or a missing checkpoint, is refused
    # before any data is loaded.
    other_data = [(policy_datasets["real"], 1.0)]
    kept = ObjectCentricTrainer(compose_train_cfg(oc_overrides(
        tmp_path / "kept", other_data, steps=20, **{"object_centric.estimator_from": str(result.checkpoint)})))
    assert kept.run(progress=False).resumed_from == 0 and not (tmp_path / "kept" / "estimator.pt").exists()
    third = load_checkpoint(tmp_path / "kept" / "policy.pt")["model"]
    assert all(torch.equal(first[k], third[k]) for k in first if k.startswith(("estimator.", "label_")))
    assert not torch.equal(first["action_mean"], third["action_mean"])  # the head's statistics: its own data
    with pytest.raises(CheckpointError, match=r"estimator_from = .*trained with other object_centric.keypoints"):
        ObjectCentricTrainer(compose_train_cfg(oc_overrides(tmp_path / "k8", other_data, **{
            "object_centric.estimator_from": str(result.checkpoint), "object_centric.keypoints": 8})))
    with pytest.raises(CheckpointError, match=r"estimator_from = .*none.pt.*no such file"):
        ObjectCentricTrainer(compose_train_cfg(oc_overrides(tmp_path / "none", other_data, **{
            "object_centric.estimator_from": str(tmp_path / "none.pt")})))

    agent = load_agent(result.checkpoint)
    assert isinstance(agent, ObjectCentricAgent)
    # By default the tracker places a resting object on the calibrated world's belt (height_from_size).
    assert agent.tracker.belt_top == pytest.approx(BELT_TOP)
    cell = TwinCell(**agent.env_overrides)
    try:
        runs = []
        for _ in range(2):
            obs = cell.reset(seed=10001)
            agent.reset()
            actions = []
            for _ in range(6):
                actions.append(agent.act(obs))
                obs = cell.act(actions[-1]).obs
            runs.append(np.array(actions))
        # The hand-relative chunk is turned back into absolute targets near the hand, and a trial is reproducible.
        assert runs[0].shape == (6, 27) and np.isfinite(runs[0]).all()
        assert np.linalg.norm(runs[0][0, :3] - cell.reset(seed=10001)["proprio"]["ee_pose"][:3]) < 0.3
        np.testing.assert_array_equal(runs[0], runs[1])
        with pytest.raises(ValueError, match="right_wrist"):
            agent.act({"proprio": obs["proprio"], "images": {}})
    finally:
        cell.close()
    torch.set_num_threads(1)


def test_object_relative_targets_lead_back_to_the_demos_actions_and_deploy_around_the_tracked_object(
        tmp_path, policy_datasets):
    """action_frame=object: every training target plus the tracked object position it was made relative to is the
    demo's own absolute action, a displaced hand leaves the targets where they were, and the deployed agent adds its
    tracker's object position (not the hand's) to the head's chunk."""
    cfg = compose_train_cfg(oc_overrides(tmp_path / "run", [(policy_datasets["real"], 1.0)], steps=10,
                                         **{"object_centric.action_frame": "object"}))
    trainer = ObjectCentricTrainer(cfg)
    result = trainer.run(progress=False)
    chunk = cfg.policy.chunk
    for d, inputs, targets in zip(trainer.datasets, trainer.head_inputs, trainer.head_targets):
        tracked = inputs[:, OFFSET] + inputs[:, HEAD_EE_POS]
        steps = np.minimum(np.arange(len(d))[:, None] + np.arange(chunk), d.demo_end[:, None])
        np.testing.assert_allclose(targets[..., :3] + tracked[:, None], d.actions[steps][..., :3], atol=1e-5)
        np.testing.assert_array_equal(targets[..., 3:], d.actions[steps][..., 3:])
        far = np.linalg.norm(inputs[:, OFFSET], axis=1) > 0.05  # the object is not in the hand: anchors differ
        assert far.any()
    assert_hand_shift_keeps_the_world(trainer)

    agent = load_agent(result.checkpoint)
    assert agent.action_frame == "object"
    cell = TwinCell(**agent.env_overrides)
    try:
        obs = cell.reset(seed=10002)
        agent.reset()
        first = agent.act(obs)
        tracked = agent.tracked[:3]
        proprio = np.concatenate([np.asarray(obs["proprio"][k], dtype=float).ravel() for k in HEAD_PROPRIO])
        ee = proprio[EE_POS]
        planned = agent.policy.act_chunk(head_input(agent.tracked, ee, proprio)[None])[0]
        np.testing.assert_allclose(first[:3], planned[0, :3] + tracked, atol=1e-6)
        np.testing.assert_allclose(first[3:], planned[0, 3:], atol=1e-6)
        assert np.linalg.norm(tracked - ee) > 0.05  # at reset the object is far from the hand: the anchors differ
    finally:
        cell.close()
    torch.set_num_threads(1)


@pytest.mark.parametrize("frame", ["hand_bin", "object_bin"])
def test_phased_targets_follow_the_hand_or_object_on_the_belt_and_the_bin_once_lifted(tmp_path, policy_datasets,
                                                                                        frame):
    """action_frame=hand_bin / object_bin: a demo step's targets plus the hand's (or the object's) position while
    the object is on the belt, or its bin's once lifted, are the demo's absolute actions; both phases occur in a
    demo; a displaced hand moves only the hand-anchored targets; and the deployed agent anchors on the bin exactly
    when the tracked object is lifted."""
    cfg = compose_train_cfg(oc_overrides(tmp_path / "run", [(policy_datasets["real"], 1.0)], steps=10, **{
        "object_centric.action_frame": frame, "object_centric.perception": "tracking", "policy.cameras": "[]"}))
    trainer = ObjectCentricTrainer(cfg)
    result = trainer.run(progress=False)
    chunk = cfg.policy.chunk
    for d, inputs, targets in zip(trainer.datasets, trainer.head_inputs, trainer.head_targets):
        ee = inputs[:, HEAD_EE_POS]
        object_z, bin_pos = d.labels[:, POS][:, 2], d.labels[:, BIN]
        lifted = object_z > BELT_TOP + d.labels[:, SIZE][:, 2] + RESTING_MARGIN
        assert 0.1 < lifted.mean() < 0.9  # approach and carry both in the demos
        steps = np.minimum(np.arange(len(d))[:, None] + np.arange(chunk), d.demo_end[:, None])
        anchor = np.where(lifted[:, None], bin_pos, ee if frame == "hand_bin" else d.labels[:, POS])
        np.testing.assert_allclose(targets[..., :3] + anchor[:, None], d.actions[steps][..., :3], atol=1e-5)
    assert_hand_shift_keeps_the_world(trainer)

    agent = load_agent(result.checkpoint)
    assert agent.belt_top == pytest.approx(BELT_TOP)
    cell = TwinCell(**agent.env_overrides)
    try:
        obs = cell.reset(seed=10002)
        for lift in (0.0, 0.10):  # as observed (on the belt), then the same step with the object 10 cm up
            tracking = dict(obs["tracking"], object_pos=np.asarray(obs["tracking"]["object_pos"]) + [0, 0, lift])
            agent.reset()
            first = agent.act(dict(obs, tracking=tracking))
            proprio = np.concatenate([np.asarray(obs["proprio"][k], dtype=float).ravel() for k in HEAD_PROPRIO])
            planned = agent.policy.act_chunk(head_input(agent.tracked, proprio[EE_POS], proprio)[None])[0]
            on_belt = proprio[EE_POS] if frame == "hand_bin" else agent.tracked[:3]
            anchor = agent.tracked[TRACKED_BIN] if lift else on_belt
            np.testing.assert_allclose(first[:3], planned[0, :3] + anchor, atol=1e-6)
    finally:
        cell.close()
    torch.set_num_threads(1)


class _KnownErrorEstimator:
    """An estimator whose errors are known: each frame's image carries its index, and it answers the frame's true
    label plus its demo's offset (cm along x, y, z)."""

    def __init__(self, labels: np.ndarray, offsets: np.ndarray):
        self.labels, self.offsets = labels, offsets

    def estimate(self, images: np.ndarray):
        index = images[:, 0, 0, 0].astype(int) + 256 * images[:, 0, 0, 1].astype(int)
        mean = self.labels[index].astype(float)
        mean[:, POS] += self.offsets[index] / 100
        n = len(index)
        return mean, np.full((n, 3), 1e-6), np.zeros((n, 2)), np.zeros(n)


def test_perception_report_names_each_axis_bias_and_each_objects():
    """The report's signed medians recover errors of known sign per axis, and per object where two objects err
    differently: the capsule estimated 1 cm across the belt and 2 cm high, the cube exactly. The two go to bins
    40 cm apart, and the capsule's is read as the cube's: every carry frame of its demo heads for the wrong bin."""
    from r2s2r.policy.data import LoadedDataset
    from r2s2r.policy.train_object_centric import perception_report

    steps, lift = 60, 40
    labels, offsets, starts, ends = [], [], [], []
    for k, offset in enumerate(([0.0, 1.0, 2.0], [0.0, 0.0, 0.0])):
        t = np.arange(steps)
        pos = np.stack([-0.3 + 0.1 * t / 20, np.full(steps, 0.02 * k), 0.1 + 0.05 * (t >= lift)], axis=1)
        bin_pos = np.tile([0.4 * k, 0.5, 0.0], (steps, 1))
        labels.append(np.concatenate([pos, np.zeros((steps, 5)), bin_pos], axis=1))
        offsets.append(np.tile(offset, (steps, 1)))
        starts.append(np.full(steps, k * steps))
        ends.append(np.full(steps, k * steps + steps - 1))
    n = 2 * steps
    images = np.zeros((n, 4, 4, 3), np.uint8)
    images[:, 0, 0, 0], images[:, 0, 0, 1] = np.arange(n) % 256, np.arange(n) // 256
    proprio = np.zeros((n, SETPOINT + 1), np.float32)  # HEAD_PROPRIO: arm_q, hand_q, ee_pose, belt_setpoint
    proprio[:, 30] = 1.0  # a valid hand quaternion (w) in ee_pose
    d = LoadedDataset(path="known.hdf5", domain="real", weight=1.0, images={"cam": images}, proprio=proprio,
                      actions=np.zeros((n, 27), np.float32), demo_end=np.concatenate(ends),
                      demo_start=np.concatenate(starts), num_demos=2, labels=np.concatenate(labels).astype(np.float32),
                      demo_objects=("capsule", "cube"))
    model = _KnownErrorEstimator(d.labels.copy(), np.concatenate(offsets))
    model.labels[:steps, BIN] = d.labels[steps, BIN]  # the capsule's bin misread as the cube's
    report = perception_report(model, ObjectLocator(None), "cam", d, control_hz=20.0)
    capsule, cube = (report["by_object"][o]["grasp_window"] for o in ("capsule", "cube"))
    assert capsule["regression"] == pytest.approx({"x": 0.0, "y": 1.0, "z": 2.0}, abs=0.01)
    assert capsule["measurement"]["y"] == pytest.approx(1.0, abs=0.01)
    assert capsule["tracker"]["y"] == pytest.approx(1.0, abs=0.05)
    assert capsule["tracker"]["z"] == pytest.approx(2.0, abs=0.05)  # the height the tracker holds
    assert capsule["tracker_across_belt"]["median_cm"] == pytest.approx(1.0, abs=0.05)
    assert cube["regression"] == pytest.approx({"x": 0.0, "y": 0.0, "z": 0.0}, abs=0.01)
    assert abs(cube["tracker"]["y"]) < 0.05
    assert report["by_object"]["capsule"]["demos"] == 1 and capsule["tracker_across_belt"]["frames"] == 20
    assert report["by_object"]["capsule"]["carry_wrong_bin_fraction"] == 1.0
    assert report["by_object"]["cube"]["carry_wrong_bin_fraction"] == 0.0
    assert report["carry"]["bin"]["frames"] == 2 * (steps - lift)
    assert report["carry"]["bin"]["p90_cm"] == pytest.approx(40.0, abs=0.01)  # the capsule's frames, 40 cm off
    # Pooled over both demos, the median across the belt lies between the two objects' (half the frames each).
    assert 0.0 <= report["grasp_window"]["bias"]["regression"]["y"] <= 1.0


def test_datasets_without_the_tracker_fields_are_refused(tmp_path, policy_datasets):
    import shutil

    import h5py

    broken = tmp_path / "broken.hdf5"
    shutil.copy(policy_datasets["real"], broken)
    with h5py.File(broken, "a") as f:
        del f["data/demo_0/obs/datagen_info/object_pose/target_bin"]
    cfg = compose_train_cfg(oc_overrides(tmp_path / "run", [(broken, 1.0)]))
    with pytest.raises(DatasetError, match="demo_0: field 'obs/datagen_info/object_pose/target_bin' is missing"):
        load_dataset(DatasetCfg(path=str(broken)), cfg.policy)


@pytest.mark.parametrize("camera", ["head_left", "right_wrist"])
def test_keypoint_targets_are_where_the_object_appears(camera):
    """The keypoint target: the object's centre projected through the calibrated world lands on the pixel where the
    renderer draws the object, for the head camera and for the wrist camera (placed by the hand's reported pose),
    with the object at several places in view and the hand turned between them."""
    from r2s2r.tasks import make

    env = make("R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0", cameras=(camera,), image_size=(128, 128))
    try:
        env.reset(seed=4)
        geometry = CameraGeometry("grounded", camera, 128, 128)
        env.model.geom_rgba[env.obj_geom] = (1.0, 0.0, 1.0, 1.0)  # an unmistakable magenta
        # Shrunk, so that its silhouette's centroid is its centre's image (a 5 cm object 20 cm away, seen at an
        # angle, shows its near faces larger: up to 2 px of shift); the hand, which would cover part of it, hidden.
        env.model.geom_size[env.obj_geom] *= 0.5
        fingers = [g for g in range(env.model.ngeom)
                   if env.model.body(env.model.geom_bodyid[g]).name.startswith(("right_finger", "right_palm", "right_link"))]
        env.model.geom_rgba[fingers, 3] = 0.0
        hand = env.model.jnt_qposadr[env.model.joint("right_joint6").id]
        depth = 0.6 if camera == "head_left" else 0.2
        for (a, b), turn in (((0.0, 0.0), 0.0), ((0.3, -0.2), 0.15), ((-0.25, 0.15), -0.2)):
            state = env.state()
            state[hand] += turn
            env.set_state(state)
            d = env.physics.host_data(0)
            cam = env.model.camera(camera).id
            # The object held in view: `depth` along the camera's axis (its -z), offset by a, b of that depth.
            state[env.obj_qadr:env.obj_qadr + 3] = d.cam_xpos[cam] + d.cam_xmat[cam].reshape(3, 3) @ (
                depth * np.array([a, b, -1.0]))
            env.set_state(state)
            obs = env.observe()
            image = obs["images"][camera].astype(int)
            magenta = (image[..., 0] - image[..., 1] > 40) & (image[..., 2] - image[..., 1] > 40)
            rows, cols = np.nonzero(magenta)
            assert len(rows) >= 3, f"the object is not in view of {camera}"
            u, v = geometry.project(d.xpos[env.obj_body][None], obs["proprio"]["ee_pose"][None])[0]
            # Measured within 0.6 px at the wrist; a mount rotated by 3 degrees would be ~3 px off.
            assert abs(u - cols.mean()) < 1.5 and abs(v - rows.mean()) < 1.5, (u, v, cols.mean(), rows.mean())
    finally:
        env.close()
    if camera == "right_wrist":
        with pytest.raises(ValueError, match="needs the frames' ee_pose"):
            geometry.project(np.zeros((1, 3)))
    with pytest.raises(ConfigError, match="left_wrist"):
        CameraGeometry("grounded", "left_wrist", 32, 32)


@pytest.mark.parametrize("world", ["grounded", "ungrounded"])
def test_a_pixel_located_on_its_plane_is_the_point_that_projected_there(world):
    """`locate` inverts `project` for random points over the belt at random heights, and its drift is how the
    located point moves per metre of height (finite differences)."""
    geometry = CameraGeometry(world, "head_left", 128, 96)
    rng = np.random.default_rng(7)
    points = np.column_stack([rng.uniform(-0.4, 0.4, 200), rng.uniform(-0.12, 0.12, 200), rng.uniform(0.0, 0.3, 200)])
    pixels = geometry.project(points)
    located, drift = geometry.locate(pixels, points[:, 2])
    np.testing.assert_allclose(located, points, atol=1e-9)
    higher, _ = geometry.locate(pixels, points[:, 2] + 1e-4)
    np.testing.assert_allclose((higher[:, :2] - located[:, :2]) / 1e-4, drift, atol=1e-6)
    jac = geometry.pixels_per_metre(points)
    step = np.array([2e-4, -1e-4, 0.0])
    np.testing.assert_allclose(geometry.project(points + step) - pixels, jac @ step[:2], atol=1e-4)


def test_the_keypoint_read_out_is_the_pixel_it_was_trained_on():
    """An attention equal to the keypoint target (any sub-cell position, any image size) reads back as the pixel
    the target was made from, with a spread under one cell; pixels outside the grid are left out."""
    rng = np.random.default_rng(3)
    for width, height in ((128, 128), (64, 96)):
        pixels = torch.from_numpy(np.column_stack([rng.uniform(2, width - 2, 50), rng.uniform(2, height - 2, 50)]))
        pixels = torch.cat([pixels, torch.tensor([[-3.0, 10.0], [10.0, height + 1.0]], dtype=pixels.dtype)])
        inside, target = keypoint_target(pixels, width, height)
        assert inside.tolist() == [True] * 50 + [False, False]
        logits = torch.log(target.float() + 1e-12)[:, None].expand(-1, 2, -1)  # keypoint 0 (and a spare)
        read, spread = keypoint_pixels(logits, width, height)
        np.testing.assert_allclose(read.numpy(), pixels[inside].numpy(), atol=1e-3)
        assert (spread < FEATURE_STRIDE).all()


def bilinear(feats: np.ndarray, x: float, y: float) -> np.ndarray:
    """(C,) the feature map (C, h, w) at cell coordinates x, y, interpolated between its four nearest cells."""
    x0, y0 = int(np.floor(x)), int(np.floor(y))
    fx, fy = x - x0, y - y0
    return ((1 - fx) * (1 - fy) * feats[:, y0, x0] + fx * (1 - fy) * feats[:, y0, x0 + 1]
            + (1 - fx) * fy * feats[:, y0 + 1, x0] + fx * fy * feats[:, y0 + 1, x0 + 1])


def test_object_attributes_are_read_around_keypoint_0_alone():
    """object_centric.attributes=object: the estimator reads the feature cells around keypoint 0's expected position
    (one cell apart, interpolated as the oracle below does it), and the yaw, size and bin come from those alone:
    another view around the same object moves the position it regresses, never the attributes. With `scene` every
    output follows the whole view."""
    torch.manual_seed(0)
    images = torch.rand(3, 3, 64, 48)
    est = ObjectEstimator(keypoints=4, width=8, hidden=32, attributes="object").eval()
    with torch.no_grad():
        feats = est.net(images - 0.5).numpy()
        latent, _ = est.latent(images)
    _, c, h, w = feats.shape
    centre = latent[:, est.scene_dim:est.scene_dim + 2].numpy()
    roi = latent[:, est.scene_dim + 2:].numpy().reshape(-1, c, ROI_CELLS, ROI_CELLS)
    half = (ROI_CELLS - 1) // 2
    for b in range(len(images)):
        x, y = (centre[b, 0] + 1) / 2 * (w - 1), (centre[b, 1] + 1) / 2 * (h - 1)
        for i in range(ROI_CELLS):
            for j in range(ROI_CELLS):
                np.testing.assert_allclose(roi[b, :, i, j], bilinear(feats[b], x + j - half, y + i - half),
                                           rtol=1e-4, atol=1e-5)
    other_view = latent.clone()
    other_view[:, :est.scene_dim] = torch.randn(len(images), est.scene_dim)
    with torch.no_grad():
        (mean, _), (moved, _) = est.outputs(latent), est.outputs(other_view)
    assert torch.equal(mean[:, POS.stop:], moved[:, POS.stop:])
    assert not torch.allclose(mean[:, POS], moved[:, POS])
    scene = ObjectEstimator(keypoints=4, width=8, hidden=32).eval()
    with torch.no_grad():
        latent, _ = scene.latent(images)
        other_view = latent + torch.randn_like(latent)
        assert not torch.allclose(scene.outputs(latent)[0][:, POS.stop:], scene.outputs(other_view)[0][:, POS.stop:])
    with pytest.raises(ConfigError, match="object_centric.attributes = 'arm': expected one of scene, object, glimpse"):
        ObjectEstimator(attributes="arm")


def pixel_bilinear(image: np.ndarray, x: float, y: float) -> np.ndarray:
    """(3,) the image (3, H, W) at continuous pixel coordinates x, y (pixel k spans [k, k + 1)), interpolated between
    the four nearest pixel centres, zero outside the image."""
    x, y = x - 0.5, y - 0.5
    x0, y0 = int(np.floor(x)), int(np.floor(y))
    value = np.zeros(3)
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        px, py = x0 + dx, y0 + dy
        if 0 <= px < image.shape[2] and 0 <= py < image.shape[1]:
            value += (1 - abs(x - px)) * (1 - abs(y - py)) * image[:, py, px]
    return value


def test_glimpse_attributes_read_the_pixels_around_keypoint_0_alone():
    """object_centric.attributes=glimpse: the yaw, size and bin come from the image's own pixels around keypoint 0's
    expected position (a window GLIMPSE_SIDE of the width wide, sampled as the oracle below does it, zeros past the
    edge) through a CNN normalized per pixel: the same window inside two different views reads the same, with
    another image in the batch or not."""
    torch.manual_seed(1)
    images = torch.rand(3, 3, 64, 96)
    est = ObjectEstimator(keypoints=4, width=8, hidden=32, attributes="glimpse").eval()
    with torch.no_grad():
        latent, _ = est.latent(images)
    h, w = 64 // FEATURE_STRIDE, 96 // FEATURE_STRIDE
    centre = latent[:, est.scene_dim:est.scene_dim + 2].numpy()
    side = GLIMPSE_SIDE * 96 / GLIMPSE_PX  # image pixels per glimpse pixel
    offsets = (np.arange(GLIMPSE_PX) - (GLIMPSE_PX - 1) / 2) * side
    crops = np.zeros((len(images), 3, GLIMPSE_PX, GLIMPSE_PX))
    for b in range(len(images)):
        px = (centre[b, 0] + 1) / 2 * (w - 1) * FEATURE_STRIDE + FEATURE_STRIDE / 2
        py = (centre[b, 1] + 1) / 2 * (h - 1) * FEATURE_STRIDE + FEATURE_STRIDE / 2
        for i, dy in enumerate(offsets):
            for j, dx in enumerate(offsets):
                crops[b, :, i, j] = pixel_bilinear(images[b].numpy(), px + dx, py + dy)
    with torch.no_grad():
        read = est.glimpse_net(torch.tensor(crops, dtype=torch.float32) - 0.5).flatten(1)
        np.testing.assert_allclose(latent[:, est.scene_dim + 2:], read, rtol=1e-4, atol=1e-5)
        alone = est.glimpse_net(torch.tensor(crops[:1], dtype=torch.float32) - 0.5).flatten(1)
        np.testing.assert_allclose(alone, read[:1], rtol=1e-5, atol=1e-6)
        # Per-pixel normalization: the glimpse's first output cell sees its own corner (3 convolutions of 3 px, the
        # last two at stride 2: 11 px) and nothing of the rest of the glimpse.
        crop = torch.tensor(crops[:1], dtype=torch.float32) - 0.5
        elsewhere = crop.clone()
        elsewhere[..., 16:, :] = torch.rand_like(elsewhere[..., 16:, :])
        elsewhere[..., :, 16:] = torch.rand_like(elsewhere[..., :, 16:])
        corner, moved_corner = est.glimpse_net(crop)[..., 0, 0], est.glimpse_net(elsewhere)[..., 0, 0]
        assert torch.equal(corner, moved_corner)
        assert not torch.allclose(est.glimpse_net(crop)[..., -1, -1], est.glimpse_net(elsewhere)[..., -1, -1])
        other_view = latent.clone()
        other_view[:, :est.scene_dim] = torch.randn(len(images), est.scene_dim)
        (mean, _), (moved, _) = est.outputs(latent), est.outputs(other_view)
    assert torch.equal(mean[:, POS.stop:], moved[:, POS.stop:])
    assert not torch.allclose(mean[:, POS], moved[:, POS])


@pytest.fixture(scope="module")
def object_attribute_run(tmp_path_factory, policy_datasets):
    """A tiny camera policy with object_centric.attributes=glimpse on the twin's demos: (trainer, its checkpoint)."""
    data = [(policy_datasets["real"], 1.0)]
    cfg = compose_train_cfg(oc_overrides(tmp_path_factory.mktemp("attributes") / "run", data, steps=10, **{
        "object_centric.attributes": "glimpse", "object_centric.estimator_steps": 20}))
    trainer = ObjectCentricTrainer(cfg)
    return trainer, trainer.run(progress=False).checkpoint


def test_an_object_attribute_estimator_trains_deploys_and_is_not_mixed_with_a_scene_one(tmp_path, policy_datasets,
                                                                                       object_attribute_run):
    """A run with object_centric.attributes=glimpse writes a checkpoint whose estimator deploys as trained; a run
    asked to keep it with the other reading (or any other value) is refused before data is loaded."""
    trainer, checkpoint = object_attribute_run
    agent = load_agent(checkpoint)
    assert agent.policy.estimator.attributes == "glimpse"
    frames = trainer.datasets[0].images["right_wrist"][:8]
    for deployed, trained in zip(agent.policy.estimate(frames), trainer.model.estimate(frames)):
        np.testing.assert_allclose(deployed, trained, rtol=1e-5, atol=1e-7)
    data = [(policy_datasets["real"], 1.0)]
    with pytest.raises(CheckpointError, match=r"estimator_from = .*trained with other object_centric.attributes"):
        ObjectCentricTrainer(compose_train_cfg(oc_overrides(tmp_path / "scene", data, **{
            "object_centric.estimator_from": str(checkpoint)})))
    with pytest.raises(ConfigError, match="object_centric.attributes = 'arm': expected scene or object or glimpse"):
        compose_train_cfg(oc_overrides(tmp_path / "bad", data, **{"object_centric.attributes": "arm"}))


def test_yaw_error_is_signed_and_wrapped_to_the_grasps_period():
    """A capsule lying along the belt at 30 degrees read at 10: -20 degrees; read at -80: 70 (half a turn wraps);
    a cube turned 40 degrees read at -40: 10, a quarter turn being the same grasp."""
    def features(degrees):
        return np.array([np.cos(np.radians(2 * degrees)), np.sin(np.radians(2 * degrees))])

    def turned(degrees):  # quaternion w,x,y,z of a turn about the vertical
        return np.array([np.cos(np.radians(degrees) / 2), 0.0, 0.0, np.sin(np.radians(degrees) / 2)])

    capsule, cube = np.array([0.045, 0.02, 0.02]), np.array([0.025, 0.025, 0.025])
    assert yaw_error(features(10), turned(30), capsule) == pytest.approx(-20)
    assert yaw_error(features(-80), turned(30), capsule) == pytest.approx(70)
    assert yaw_error(features(-40), turned(40), cube) == pytest.approx(10)


def test_closed_loop_perception_replays_the_demo_as_recorded_and_then_the_policys_own_episode(policy_datasets,
                                                                                              object_attribute_run):
    """The closed-loop report's run on a demo's actions is the demo again: its errors are those of the policy's
    perception over the recorded frames, computed offline against the recorded object states (the oracle), over
    the same steps (before the lift, the position tracked: every step for this barely trained estimator). Its run
    on the policy's own actions is another episode of the same object, reported beside it."""
    trainer, checkpoint = object_attribute_run
    agent = load_agent(checkpoint)
    # This barely trained keypoint is never sharp at the deployed 8 px; every frame counts as sharp here, so the
    # report's per-frame readings have frames to compare (both sides use the same locator).
    agent.locator.cfg = LocatorCfg(max_spread_px=1e6)
    steps, measured_std = 40, 10.0
    report = closed_loop_perception(agent, policy_datasets["real"], max_demos=1, progress=False, max_steps=steps,
                                    measured_std=measured_std)
    d = trainer.datasets[0]
    end = steps
    mean, var, drift, _ = measure(agent.policy, agent.locator, "right_wrist", d)
    state = track(d, mean, var, drift, camera_tracker(1.0 / agent.tracker.dt, agent.locator,
                                                      agent.tracker.belt_top))[:end]
    truth = d.labels[:end]
    lifted = np.flatnonzero(truth[:, 2] > truth[0, 2] + LIFTED)
    counted = np.arange(end) < (lifted[0] if len(lifted) else end)
    counted &= state[:, TRACKED_STD].max(axis=1) < measured_std
    assert report["demos"] == 1 and list(report["by_object"]) == [d.demo_objects[0]]
    entry = report["by_object"][d.demo_objects[0]]
    replayed = entry["demo_actions"]
    assert replayed["steps"] == int(counted.sum()) > 0
    assert replayed["covered_share"] == 0.0  # a wrist camera sees the hand in the same place: no frame is covered
    np.testing.assert_allclose(replayed["size_error_cm"],
                               np.median(100 * (state[counted, TRACKED_SIZE] - truth[counted, SIZE]), axis=0),
                               atol=0.011)
    np.testing.assert_allclose(replayed["position_cm"], np.median(
        100 * np.linalg.norm(state[counted, :2] - truth[counted, :2], axis=1)), atol=0.011)
    # Grasp yaw as angles (the state's and the labels' cos 2y, sin 2y), wrapped to the grasp's period at the
    # recorded object pose.
    with DemoReader(policy_datasets["real"]) as reader:
        info = reader.load(reader.names[0])["obs"]["datagen_info"]
    _, quat = matrix_poses(info["object_pose"][OBJECT])
    period = np.array([grasp_yaw_period(q, e) for q, e in zip(quat, info["object_half_extents"])])[:end][counted]
    angle = lambda features: 0.5 * np.arctan2(features[:, 1], features[:, 0])  # noqa: E731
    error = (angle(state[counted, TRACKED_YAW]) - angle(truth[counted, YAW]) + period / 2) % period - period / 2
    np.testing.assert_allclose(replayed["yaw_error_deg"], np.median(np.abs(np.degrees(error))), atol=0.06)
    # Each sharp frame's own reading, before the tracker, from the estimator run over the recorded frames.
    sharp = (np.arange(end) < (lifted[0] if len(lifted) else end)) & (var[:end].max(axis=1) < BLIND_VAR)
    period = np.array([grasp_yaw_period(q, e) for q, e in zip(quat, info["object_half_extents"])])[:end][sharp]
    error = (angle(mean[:end][sharp, YAW]) - angle(truth[sharp, YAW]) + period / 2) % period - period / 2
    frames = replayed["frame_yaw_error_deg"]
    assert frames["frames"] == int(sharp.sum()) > 0
    np.testing.assert_allclose(frames["all"], np.median(np.abs(np.degrees(error))), atol=0.06)
    assert frames["hand_far"] is None  # through the wrist camera the hand's distance is not defined
    assert entry["policy_actions"]["steps"] > 0 and entry["demos"] == 1


def test_the_locator_measures_sharp_keypoints_through_the_camera_and_nothing_else():
    """A sharp keypoint gives the point on the estimated plane with a variance from its spread; a diffuse one gives
    no position (blind variance); without camera geometry the regression passes through unchanged."""
    geometry = CameraGeometry("grounded", "head_left", 128, 128)
    locator = ObjectLocator(geometry, LocatorCfg())
    truth = np.array([[0.1, 0.05, 0.12], [-0.2, -0.03, 0.1], [0.25, 0.0, 0.13]])
    mean = np.zeros((3, 11))
    mean[:, 2] = truth[:, 2]
    mean[:, 3:] = 0.5
    var = np.full((3, 3), 1e-4)
    pixels = geometry.project(truth)
    spread = np.array([2.0, 6.0, 20.0])
    measured, measured_var, drift = locator(mean, var, pixels, spread)  # a world-fixed camera: no hand pose needed
    np.testing.assert_allclose(measured[:2, :3], truth[:2], atol=1e-9)
    # The drift moves a measured point along its ray: at another height it still projects to the keypoint's pixel.
    moved = measured[:2, :3] + np.column_stack([0.03 * drift[:2], np.full(2, 0.03)])
    np.testing.assert_allclose(geometry.project(moved), pixels[:2], atol=1e-6)
    assert (drift[2] == 0).all()
    np.testing.assert_array_equal(measured[:, 3:], mean[:, 3:])
    assert (measured_var[2] == BLIND_VAR).all()
    # A keypoint twice as spread is trusted less; one pixel is about a centimetre at the pick zone.
    assert 0.002 < np.sqrt(measured_var[0, :2]).max() < 0.02
    assert (measured_var[1, :2] > measured_var[0, :2]).all()
    passed = ObjectLocator(None)(mean, var, pixels, spread)
    assert passed[0] is mean and passed[1] is var and (passed[2] == 0).all()


def test_a_resting_object_is_tracked_at_the_belt_top_plus_its_fused_half_height():
    """height_from_size: the regression reads every frame 1 cm high, which moves the located point across the belt
    by most of a centimetre; the tracker given the belt's top moves each measurement along its ray to the belt's top
    plus the half height fused over the episode, so a frame whose size is misread while the arm hides the object
    (large variance) barely moves it. A lifted object keeps its regressed height."""
    geometry = CameraGeometry("grounded", "head_left", 128, 128)
    locator = ObjectLocator(geometry, LocatorCfg())
    half, dt, speed = np.array([0.02, 0.03, 0.025]), 0.05, 0.1
    start = np.array([-0.3, 0.02, BELT_TOP + half[2]])

    def frames(hidden: set[int], lifted_from: int = 1000):
        for t in range(60):
            truth = start + [speed * dt * t, 0.0, 0.08 if t >= lifted_from else 0.0]
            mean = np.zeros((1, 11))
            mean[0, :3], mean[0, SIZE] = truth + [0.0, 0.0, 0.01], half  # the regression 1 cm high
            var = np.full((1, 3), 0.003**2)
            if t in hidden:  # the size misread, and the estimator unsure
                mean[0, SIZE], var[:] = 3 * half, 0.04**2
            yield truth, locator(mean, var, geometry.project(truth[None]), np.array([2.0]))

    for resting_on, hidden in ((None, set()), (BELT_TOP, set(range(40, 60, 3)))):
        tracker = BeltTracker(dt, belt_top=resting_on)
        errors = []
        for truth, (mean, var, drift) in frames(hidden):
            state = tracker.update(mean[0], var[0], speed, drift[0])
            errors.append(np.abs(state[:3] - truth))
        late = np.max(errors[20:], axis=0)
        if resting_on is None:
            assert late[1] > 0.005 and late[2] > 0.008  # across the belt and in height, as the regression is off
        else:
            assert late.max() < 0.001, late
    tracker = BeltTracker(dt, belt_top=BELT_TOP)
    for truth, (mean, var, drift) in frames(set(), lifted_from=40):
        state = tracker.update(mean[0], var[0], speed, drift[0])
    assert abs(state[2] - (truth[2] + 0.01)) < 0.003  # lifted: the regressed height, where the ray meets it
    with pytest.raises(ValueError, match="drift"):
        BeltTracker(dt, belt_top=BELT_TOP).update(mean[0], var[0], speed)


class _Payload:
    """Unpickling this object would create a file: what a hostile checkpoint could do instead."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_checkpoint_that_carries_code_is_refused_without_running_it(tmp_path):
    from r2s2r.policy.checkpoint import FORMAT

    marker = tmp_path / "ran"
    path = tmp_path / "policy.pt"
    torch.save({"format": FORMAT, "kind": "object_centric", "model": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_agent(path)
    assert not marker.exists()


def test_the_tracking_diagnostic_trains_on_stored_object_states_and_reads_the_cells_tracking(tmp_path,
                                                                                              policy_datasets):
    """perception=tracking: no estimator and no images; the head's inputs are the demos' stored object states
    (positions relative to the hand, velocity the backward difference), and the deployed agent reads the cell's
    `tracking` group, which the evaluation protocol hands only to such an agent."""
    from r2s2r.evaluation.protocol import Trial, run_trials

    datasets = [(policy_datasets["real"], 1.0)]
    cfg = compose_train_cfg(oc_overrides(tmp_path / "run", datasets, **{
        "object_centric.perception": "tracking", "policy.cameras": "[]", "object_centric.hand_shift_fraction": 0.0}))
    trainer = ObjectCentricTrainer(cfg)
    assert trainer.datasets[0].images == {}
    result = trainer.run(progress=False)
    assert not (tmp_path / "run" / "estimator.pt").exists()
    d = trainer.datasets[0]
    raw = trainer.head_inputs[0]
    np.testing.assert_allclose(raw[:, OFFSET], d.labels[:, POS] - d.proprio[:, EE_POS], atol=1e-5)
    inside = np.arange(len(d)) != d.demo_start
    velocity = np.diff(d.labels[:, POS], axis=0, prepend=d.labels[:1, POS]) * cfg.object_centric.control_hz
    np.testing.assert_allclose(raw[inside, 3:6], velocity[inside], atol=1e-4)
    assert np.all(raw[~inside, 3:6] == 0.0)
    # A camera policy's config without cameras is refused, naming the field.
    with pytest.raises(ConfigError, match="policy.cameras is empty"):
        compose_train_cfg(oc_overrides(tmp_path / "cam", datasets, **{"policy.cameras": "[]"}))

    agent = load_agent(result.checkpoint)
    assert agent.uses_tracking and agent.env_overrides["cameras"] == ()
    cell = TwinCell(**agent.env_overrides)
    try:
        obs = cell.reset(seed=10001)
        with pytest.raises(ValueError, match="no 'tracking' group"):
            agent.act({"proprio": obs["proprio"], "images": obs["images"]})
        agent.reset()
        first = agent.act(obs)
        # The first step sees the object at rest relative to its previous (none) position: velocity 0; the next
        # step's velocity is the object's displacement over one control period.
        np.testing.assert_array_equal(agent.tracked[:3], obs["tracking"]["object_pos"])
        assert np.all(agent.tracked[3:6] == 0.0)
        nxt = cell.act(first).obs
        agent.act(nxt)
        np.testing.assert_allclose(agent.tracked[3:6], (np.asarray(nxt["tracking"]["object_pos"])
                                                        - obs["tracking"]["object_pos"]) * cell.control_hz)
        rows = run_trials(cell, agent, [Trial(0, "nominal", 10001)], tmp_path / "trials.jsonl", progress=False,
                          max_steps=5)
        assert rows[0]["failure"] == "max_steps"
        # Deployed with temporal ensembling, the head plans from every step's observation and the second step
        # executes the decay-weighted mean of both plans for it.
        ensembled = load_agent(result.checkpoint, execution={"ensemble": 0.5})
        ensembled.reset()
        obs = cell.reset(seed=10001)
        plans, actions = [], []
        for _ in range(2):
            actions.append(ensembled.act(obs))
            proprio = np.concatenate([np.asarray(obs["proprio"][k], dtype=float).ravel() for k in HEAD_PROPRIO])
            plan = ensembled.policy.act_chunk(head_input(ensembled.tracked, proprio[EE_POS], proprio)[None])[0]
            plan[:, :3] += proprio[EE_POS]
            plans.append(plan)
            obs = cell.act(actions[-1]).obs
        # (its quaternion renormalized: a mean of unit quaternions is not one, and the head's are not exactly)
        np.testing.assert_allclose(actions[0][3:7], plans[0][0][3:7] / np.linalg.norm(plans[0][0][3:7]), atol=1e-6)
        for a in (actions[0], plans[0][0]):
            a[3:7] = 0.0
        np.testing.assert_allclose(actions[0], plans[0][0], atol=1e-6)
        expected = (np.exp(-0.5) * plans[0][1] + plans[1][0]) / (np.exp(-0.5) + 1.0)
        np.testing.assert_allclose(actions[1][:3], expected[:3], atol=1e-6)
        np.testing.assert_allclose(actions[1][7:], expected[7:], atol=1e-6)
        assert not np.allclose(actions[1][:3], plans[1][0][:3], atol=1e-4)  # not the newest plan alone
    finally:
        cell.close()
    torch.set_num_threads(1)


def test_the_flow_head_samples_both_ways_the_demos_act_where_the_l1_head_keeps_one():
    """Demos that act two ways in the same state (+1 in 70 % of them, -1 in the rest, both shifted by the input):
    the flow head's samples land on both modes in those proportions, the L1 head's prediction on the median's
    mode alone; a seeded generator gives the same samples."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    heads = {"l1": ActionHead(4, 2, 3, hidden=32, dropout=0.0),
             "flow": FlowHead(4, 2, 3, dim=32, heads=2, layers=1, dropout=0.0, flow_steps=10)}

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn((n, 4), generator=gen)
        mode = torch.where(torch.rand((n, 1, 1), generator=gen) < 0.7, 1.0, -1.0)
        return x, (mode + 0.5 * x[:, None, :1]).expand(n, 2, 3).contiguous()

    for head in heads.values():
        opt = torch.optim.Adam(head.parameters(), lr=3e-3)
        for _ in range(600):
            loss = head.loss(*batch(128), gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
    x, _ = batch(1000)
    with torch.no_grad():
        residual = {name: head.predict(x, torch.Generator().manual_seed(1)) - 0.5 * x[:, None, :1]
                    for name, head in heads.items()}
    near = {name: (r.sub(1).abs().amax(dim=(1, 2)) < 0.3, r.add(1).abs().amax(dim=(1, 2)) < 0.3)
            for name, r in residual.items()}
    plus, minus = (float(m.float().mean()) for m in near["flow"])
    assert plus + minus > 0.9 and 0.6 < plus / (plus + minus) < 0.8, (plus, minus)
    assert float(near["l1"][0].float().mean()) > 0.9 and not near["l1"][1].any()
    with torch.no_grad():
        again = heads["flow"].predict(x, torch.Generator().manual_seed(1)) - 0.5 * x[:, None, :1]
    torch.testing.assert_close(again, residual["flow"])


def test_a_flow_head_trains_deploys_and_draws_its_noise_from_the_episodes_seed(tmp_path, policy_datasets):
    """object_centric.head=flow: the checkpoint deploys a flow head, and an episode's actions follow from its seed
    (the same seed, the same actions; another seed, other samples)."""
    cfg = compose_train_cfg(oc_overrides(tmp_path / "run", [(policy_datasets["real"], 1.0)], **{
        "object_centric.perception": "tracking", "policy.cameras": "[]", "object_centric.head": "flow",
        "policy.dim": 32, "policy.heads": 2, "policy.action_layers": 1}))
    result = ObjectCentricTrainer(cfg).run(progress=False)
    agent = load_agent(result.checkpoint)
    assert isinstance(agent.policy.head, FlowHead)
    cell = TwinCell(**agent.env_overrides)
    try:
        obs = cell.reset(seed=10001)

        def first_action(seed: int) -> np.ndarray:
            agent.reset(seed)
            return agent.act(obs)

        np.testing.assert_array_equal(first_action(1), first_action(1))
        assert not np.allclose(first_action(1), first_action(2))
    finally:
        cell.close()
    with pytest.raises(ConfigError, match="object_centric.head = 'mse': expected l1 or flow"):
        compose_train_cfg(oc_overrides(tmp_path / "bad", [(policy_datasets["real"], 1.0)],
                                       **{"object_centric.head": "mse"}))
    torch.set_num_threads(1)
