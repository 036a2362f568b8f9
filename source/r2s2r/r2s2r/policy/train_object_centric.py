"""Training of the object-centric policy (`policy.kind=object_centric`), in two stages in one run folder:

1. the estimator on every frame of the mixture (labels from `obs/datagen_info`), photometric augmentation;
   `estimator.pt` holds it, so a rerun after an interruption goes straight to stage 2;
2. the tracker run over every demo with the trained estimator, exactly as at deployment, then the action head on
   the tracked states (`object_centric.head`: L1 or flow matching on normalized, anchor-relative action chunks).

With `object_centric.perception=tracking` there is no stage 1: the head trains on the demos' stored object states
through `ExactTracker`, as it reads the cell's tracking at deployment, and no images are loaded.

Run folder: `config.yaml`, `estimator.pt`, `log.jsonl` (loss per `log_every` steps of either stage),
`perception.json` (the estimator's error on held-out demos, with `object_centric.holdout_demos`), and `policy.pt`
when finished. A finished run is left as it is; a run folder holds one config. With
`object_centric.estimator_from`, stage 1 is another run's estimator, loaded instead of trained (no `estimator.pt`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from tqdm import tqdm

from r2s2r.files import write_text_atomic
from r2s2r.policy.checkpoint import (RUN_LENGTH_FIELDS, CheckpointError, cfg_dict, config_differences, load_checkpoint,
                                     refuse_other_run, save_checkpoint)
from r2s2r.policy.config import TrainCfg
from r2s2r.policy.data import LoadedDataset, check_compatible, load_dataset, weighted_moments
from r2s2r.policy.model import mmd
from r2s2r.policy.object_centric import (BIN, BIN_OFFSET, BLIND_VAR, EE_POS, EE_POSE, HEAD_EE_POS, HEAD_PROPRIO, NEAR,
                                         OFFSET, POS, SETPOINT, TRACKED_BIN, TRACKED_DIM, BeltTracker, ExactTracker,
                                         ObjectCentricPolicy, ObjectLocator, Photometric, action_anchor, camera_tracker,
                                         estimator_loss, head_input, keypoint_loss, near_field, object_locator, phased_belt_top,
                                         relative_actions, resting_belt_top, to_unit)
from r2s2r.policy.train import TrainResult, check_loss, lr_factor


# Fields only the head's training reads: a run folder whose estimator.pt was trained under other values of these (a
# head retrained with other settings, or an estimator copied from another run folder) reuses that estimator.
HEAD_ONLY_FIELDS = (*RUN_LENGTH_FIELDS, "run_dir", "policy.execute", "policy.ensemble",
                    "object_centric.head_batch", "object_centric.head", "object_centric.hidden",
                    "object_centric.dropout", "policy.dim", "policy.heads", "policy.action_layers", "policy.flow_steps",
                    "object_centric.state_noise", "object_centric.hand_shift", "object_centric.hand_shift_fraction",
                    "object_centric.action_frame", "object_centric.estimator_from", "object_centric.height_from_size")
# Fields that shape the estimator's weights: a checkpoint given as `object_centric.estimator_from` must agree on them.
ESTIMATOR_SHAPE_FIELDS = ("policy.cameras", "policy.image_size", "object_centric.keypoints",
                          "object_centric.attributes")


def _demos(d: LoadedDataset, first: int, stop: int, num_demos: int) -> LoadedDataset:
    """Steps first..stop-1 of `d` (whole demos) as a dataset of their own, demo indices rebased."""
    rows = slice(first, stop)
    return dataclasses.replace(d, images={c: v[rows] for c, v in d.images.items()}, proprio=d.proprio[rows],
                               actions=d.actions[rows], demo_end=d.demo_end[rows] - first,
                               demo_start=d.demo_start[rows] - first, num_demos=num_demos, labels=d.labels[rows])


def _split_holdout(d: LoadedDataset, demos: int) -> tuple[LoadedDataset, LoadedDataset]:
    """The dataset without its last `demos` demos, and those demos."""
    starts = np.unique(d.demo_start)
    if demos >= len(starts):
        raise CheckpointError(f"object_centric.holdout_demos = {demos}: expected fewer than the {len(starts)} demos "
                              f"of {d.path}")
    cut = int(starts[len(starts) - demos])
    return _demos(d, 0, cut, d.num_demos - demos), _demos(d, cut, len(d), demos)


def measure(model: ObjectCentricPolicy, locator: ObjectLocator, camera: str,
            d: LoadedDataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tracker's measurements of every frame of `d` (as deployed): means (T, 11), position variances (T, 3)
    and their rays' drifts (T, 2); and the estimator's own regressed positions (T, 3)."""
    parts = [model.estimate(d.images[camera][i:i + 256]) for i in range(0, len(d), 256)]
    mean, var, pixels, spread = (np.concatenate([p[k] for p in parts]) for k in range(4))
    return (*locator(mean, var, pixels, spread, d.proprio[:, EE_POSE]), mean[:, POS])


def track(d: LoadedDataset, mean: np.ndarray, var: np.ndarray, drift: np.ndarray, tracker: BeltTracker) -> np.ndarray:
    """The state (T, TRACKED_DIM) of `tracker` at every step of every demo of `d`, from its measurements
    (`measure`)."""
    return run_tracker(d, tracker, lambda t: tracker.update(mean[t], var[t], float(d.proprio[t, SETPOINT]), drift[t],
                                                            d.proprio[t, EE_POSE]))


def run_tracker(d: LoadedDataset, tracker, update) -> np.ndarray:
    """(T, TRACKED_DIM): `update(t)` at every step of every demo of `d`, `tracker` reset where each demo starts."""
    out = np.zeros((len(d), TRACKED_DIM))
    for t in range(len(d)):
        if t == d.demo_start[t]:
            tracker.reset()
        out[t] = update(t)
    return out


# m: an object this far above where it rode has left the belt (the demos' objects settle by about a millimetre).
LEAVES_BELT = 0.003


def perception_report(model: ObjectCentricPolicy, locator: ObjectLocator, camera: str, d: LoadedDataset,
                      control_hz: float, belt_top: float | None = None, hand_cover: float = 0.0) -> dict:
    """Position errors (cm, in the belt plane) of a trained policy's perception on the demos of `d` (demos it did
    not train on, for a fair figure), against the object poses the demos store: the per-frame measurement where
    the keypoint measured (and how often it did), the estimator's regressed position, and the tracker (also across
    the belt alone, where the grasp tolerates about 1 cm). Over the approach (every frame before the object first
    rises 2 cm off where it rode) and the grasp window (the last second before it leaves the belt, LEAVES_BELT:
    where the hand closes on it; once it rises its height is the hand's doing).

    `bias` gives the signed medians (estimate minus truth, cm) along the belt (x), across it (y) and in height (z;
    for the measurement, the height the locator used): an error that keeps its sign from frame to frame survives the
    tracker's averaging, and through an oblique camera a height error becomes one across the belt. `carry` reads
    the bin the head carries the object to, from the lift to the demo's end: the tracked bin position's error, and
    how often the nearest of the bins the demos go to is another than the demo's own (a bin taken for another
    colour's). `by_object` gives the grasp window's bias and the carry's wrong-bin fraction per object, where an
    object the estimator misjudges shows. `belt_top` and `hand_cover` as `camera_tracker` takes them."""
    mean, var, drift, regressed = measure(model, locator, camera, d)
    state = track(d, mean, var, drift, camera_tracker(control_hz, locator, belt_top, hand_cover))
    truth = d.labels[:, POS]
    approach, window, carry = np.zeros(len(d), bool), np.zeros(len(d), bool), np.zeros(len(d), bool)
    demo_of = np.searchsorted(np.unique(d.demo_start), d.demo_start)
    for s in np.unique(d.demo_start):
        z = truth[s:d.demo_end[s] + 1, 2]
        lifted = np.flatnonzero(z > z[0] + 0.02)
        if len(lifted):
            left = int(np.flatnonzero(z > z[0] + LEAVES_BELT)[0])
            approach[s:s + lifted[0]] = True
            window[max(s, s + left - int(control_hz)):s + left] = True
            carry[s + lifted[0]:d.demo_end[s] + 1] = True
    bins = np.unique(np.round(d.labels[:, BIN], 3), axis=0)  # the bins the demos go to

    def nearest_bin(points: np.ndarray) -> np.ndarray:
        return np.argmin(np.linalg.norm(points[:, None] - bins[None], axis=2), axis=1)

    wrong_bin = nearest_bin(state[:, TRACKED_BIN]) != nearest_bin(d.labels[:, BIN])
    measured = var.max(axis=1) < BLIND_VAR
    # Estimate minus truth (cm) per axis: x, y, z.
    signed = {"measurement": 100 * (mean[:, :3] - truth), "regression": 100 * (regressed - truth),
              "tracker": 100 * (state[:, :3] - truth)}
    errors = {f"{name}_xy": np.linalg.norm(err[:, :2], axis=1) for name, err in signed.items()}
    errors["tracker_across_belt"] = np.abs(signed["tracker"][:, 1])

    def fraction(flags: np.ndarray, frames: np.ndarray) -> float:
        """The fraction of `frames` where `flags` holds (0 without frames), to three decimals."""
        return round(float(flags[frames].mean()), 3) if frames.any() else 0.0

    def stats(err: np.ndarray) -> dict:
        if not len(err):
            return {"frames": 0}
        return {"median_cm": round(float(np.median(err)), 2), "p90_cm": round(float(np.percentile(err, 90)), 2),
                "frames": int(len(err))}

    def bias(frames: np.ndarray) -> dict:
        out = {}
        for name, err in signed.items():
            rows = err[frames & measured] if name == "measurement" else err[frames]
            if len(rows):
                axes = "xyz"[:err.shape[1]]
                out[name] = {axis: round(float(np.median(rows[:, k])), 2) for k, axis in enumerate(axes)}
        return out

    report: dict = {"path": d.path, "demos": d.num_demos}
    for name, frames in (("approach", approach), ("grasp_window", window)):
        report[name] = {"measured_fraction": fraction(measured, frames)}
        for key, err in errors.items():
            report[name][key] = stats(err[frames & measured] if key == "measurement_xy" else err[frames])
        report[name]["bias"] = bias(frames)
    report["carry"] = {"bin": stats(100 * np.linalg.norm(state[carry, TRACKED_BIN] - d.labels[carry, BIN], axis=1)),
                       "wrong_bin_fraction": fraction(wrong_bin, carry)}
    report["by_object"] = {}
    for obj in sorted(set(d.demo_objects) - {""}):
        of_obj = np.isin(demo_of, [k for k, o in enumerate(d.demo_objects) if o == obj])
        report["by_object"][obj] = {"demos": d.demo_objects.count(obj),
                                    "grasp_window": {**bias(window & of_obj),
                                                     "tracker_across_belt": stats(errors["tracker_across_belt"][
                                                         window & of_obj])},
                                    "carry_wrong_bin_fraction": fraction(wrong_bin, carry & of_obj)}
    return report


class ObjectCentricTrainer:
    def __init__(self, cfg: TrainCfg):
        self.cfg = cfg.validate()
        if cfg.policy.kind != "object_centric":
            raise CheckpointError(f"policy.kind = {cfg.policy.kind!r}: this trainer trains 'object_centric'")
        if cfg.policy.domain_embedding:
            raise CheckpointError("policy.domain_embedding = true: the object-centric policy has no domain "
                                  "embedding (its alignment option is cotrain.alignment_weight on the estimator)")
        self.run_dir = Path(cfg.run_dir)
        source = cfg.object_centric.estimator_from  # checked before any data is loaded
        self.estimator_source = self._estimator_checkpoint(source) if source else None
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        # The head's proprioception is fixed by the design (see object_centric.HEAD_PROPRIO).
        policy_cfg = dataclasses.replace(cfg.policy, proprio=HEAD_PROPRIO)
        self.datasets = [load_dataset(d, policy_cfg) for d in cfg.data.datasets]
        check_compatible(self.datasets)
        self.holdout: LoadedDataset | None = None
        oc = cfg.object_centric
        if oc.holdout_demos:
            self.datasets[0], self.holdout = _split_holdout(self.datasets[0], oc.holdout_demos)
        self.camera = cfg.policy.cameras[0] if cfg.policy.cameras else ""
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        h, w = cfg.policy.image_size
        self.photometric = (Photometric((3, h, w), oc.lighting_augmentation, cfg.seed)
                            if oc.lighting_augmentation else None)
        self.model = ObjectCentricPolicy.from_cfg(cfg, self.datasets[0].proprio.shape[1])
        weights = [d.weight for d in self.datasets]
        self.p = np.array(weights) / sum(weights)
        self.model.set_stats("label", *weighted_moments([d.labels for d in self.datasets], weights))
        self.log_path = self.run_dir / "log.jsonl"
        # Where each frame's object projects in the camera (the keypoint target), through the calibrated world.
        self.locator = object_locator(cfg)
        geometry = self.locator.geometry
        self.pixels = {id(d): np.full((len(d), 2), -1.0, np.float32) if geometry is None else
                       np.nan_to_num(geometry.project(d.labels[:, POS], d.proprio[:, EE_POSE]),
                                     nan=-1.0).astype(np.float32)
                       for d in self.datasets}
        self.estimator_opt = torch.optim.AdamW(self.model.estimator.parameters(), lr=cfg.optim.lr * 3,
                                               weight_decay=cfg.optim.weight_decay)
        self.head_opt = torch.optim.AdamW(self.model.head.parameters(), lr=cfg.optim.lr * 3,
                                          weight_decay=cfg.optim.weight_decay)

    # ----------------------------------------------------------------------------------------------------------
    def _draw(self, batch: int) -> list[tuple[LoadedDataset, np.ndarray]]:
        which = self.rng.choice(len(self.datasets), size=batch, p=self.p)
        return [(d, self.rng.integers(0, len(d), size=int((which == k).sum())))
                for k, d in enumerate(self.datasets) if (which == k).any()]

    def _log(self, entry: dict) -> None:
        with self.log_path.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def estimator_batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
        """A training batch for the estimator: augmented images, normalized labels, the object's pixel, and which
        samples are real."""
        oc = self.cfg.object_centric
        parts = self._draw(oc.estimator_batch)
        images = to_unit(np.concatenate([d.images[self.camera][t] for d, t in parts]))
        if self.photometric is not None:
            images = self.photometric(images, self.generator)
        labels = torch.from_numpy(np.concatenate([d.labels[t] for d, t in parts]))
        pixels = torch.from_numpy(np.concatenate([self.pixels[id(d)][t] for d, t in parts]))
        real = np.concatenate([np.full(len(t), d.domain == "real") for d, t in parts])
        return images, (labels - self.model.label_mean) / self.model.label_std, pixels, real

    def estimator_update(self, images: torch.Tensor, target: torch.Tensor, pixels: torch.Tensor, real: np.ndarray,
                         step: int) -> float:
        cfg, est = self.cfg, self.model.estimator
        latent, logits = est.latent(images)
        loss = estimator_loss(*est.outputs(latent), target)
        if cfg.object_centric.keypoint_weight:
            h, w = cfg.policy.image_size
            loss = loss + cfg.object_centric.keypoint_weight * keypoint_loss(logits, pixels, w, h)
        if cfg.cotrain.alignment_weight and 1 < real.sum() < len(real) - 1:
            # The co-training alignment option: real and simulated images' keypoint latents pulled together.
            loss = loss + cfg.cotrain.alignment_weight * mmd(latent[real], latent[~real])
        return self._optimize(self.estimator_opt, est, loss, step, cfg.object_centric.estimator_steps)

    def _optimize(self, opt: torch.optim.Optimizer, module: torch.nn.Module, loss: torch.Tensor, step: int,
                  total: int) -> float:
        """One step of either stage: both train at three times the flow transformer's learning rate (small
        networks, few steps), with its warmup, cosine schedule and gradient clipping."""
        optim = self.cfg.optim
        check_loss(loss, step + 1, f"{self.run_dir}: {'estimator' if module is self.model.estimator else 'head'}")
        for g in opt.param_groups:
            g["lr"] = optim.lr * 3 * lr_factor(step, optim.warmup_steps, total)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), optim.grad_clip)
        opt.step()
        return float(loss.detach())

    def _train(self, stage: str, module: torch.nn.Module, steps: int, batch: int, draw, update,
               progress: bool) -> float:
        loss = float("nan")
        start = time.perf_counter()
        module.train()
        for step in tqdm(range(steps), desc=stage, unit="step", disable=not progress):
            loss = update(*draw(), step)
            if (step + 1) % self.cfg.log_every == 0:
                self._log({"stage": stage, "step": step + 1, "loss": loss,
                           "samples_per_s": (step + 1) * batch / (time.perf_counter() - start)})
        module.eval()
        return loss

    def train_estimator(self, progress: bool) -> float:
        oc = self.cfg.object_centric
        return self._train("estimator", self.model.estimator, oc.estimator_steps, oc.estimator_batch,
                           self.estimator_batch, self.estimator_update, progress)

    def tracked(self, d: LoadedDataset) -> np.ndarray:
        """The tracker's state at every step of every demo of `d` (as deployed)."""
        oc = self.cfg.object_centric
        if oc.perception == "camera":
            return track(d, *measure(self.model, self.locator, self.camera, d)[:3],
                         camera_tracker(oc.control_hz, self.locator, resting_belt_top(oc), oc.hand_cover))
        tracker = ExactTracker(1.0 / oc.control_hz)
        return run_tracker(d, tracker, lambda t: tracker.update(d.labels[t]))

    def prepare_head(self) -> None:
        """The head's training data: the tracker run over every demo (as deployed), action chunks relative to the
        anchor (`object_centric.action_frame`, as `action_anchor` places it at deployment), which samples' anchor is
        the hand (`hand_shift` moves their targets), and the normalization statistics."""
        chunk, oc = self.cfg.policy.chunk, self.cfg.object_centric
        belt_top = phased_belt_top(oc)
        self.head_inputs, self.head_targets, self.hand_anchored = [], [], []
        for d in self.datasets:
            ee, tracked = d.proprio[:, EE_POS], self.tracked(d)
            self.head_inputs.append(head_input(tracked, ee, d.proprio))
            steps = np.minimum(np.arange(len(d))[:, None] + np.arange(chunk), d.demo_end[:, None])
            anchor, on_hand = action_anchor(oc.action_frame, tracked, ee, belt_top)
            self.head_targets.append(relative_actions(d.actions[steps], anchor).astype(np.float32))
            self.hand_anchored.append(on_hand)
        weights = [d.weight for d in self.datasets]
        self.model.set_stats("input", *weighted_moments(self.head_inputs, weights))
        self.model.set_stats("action", *weighted_moments([t.reshape(-1, t.shape[-1]) for t in self.head_targets],
                                                        weights))

    def head_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized head inputs (tracked position noised) and normalized action chunks."""
        oc = self.cfg.object_centric
        which = self.rng.choice(len(self.head_inputs), size=oc.head_batch, p=self.p)
        x_parts, y_parts, hand_parts = [], [], []
        for k, (inputs, targets, on_hand) in enumerate(zip(self.head_inputs, self.head_targets, self.hand_anchored)):
            t = self.rng.integers(0, len(inputs), size=int((which == k).sum()))
            x_parts.append(inputs[t])
            y_parts.append(targets[t])
            hand_parts.append(on_hand[t])
        x, y = torch.from_numpy(np.concatenate(x_parts)), torch.from_numpy(np.concatenate(y_parts))
        # The hand displaced by `shift` with the object, its bin and the chunk's absolute targets where they were:
        # every hand-relative position moves by +shift, the hand's own by -shift; targets relative to the object or
        # the bin stay.
        # (arm_q is left as recorded: a centimetre is a few hundredths of a radian, and the head reads the hand's
        # position from ee_pose.)
        shift = torch.randn((len(x), 3), generator=self.generator) * torch.tensor(oc.hand_shift)
        shift *= torch.rand((len(x), 1), generator=self.generator) < oc.hand_shift_fraction
        x[:, OFFSET] += shift
        x[:, BIN_OFFSET] += shift
        x[:, HEAD_EE_POS] -= shift
        y[..., :3] += shift[:, None, :] * torch.from_numpy(np.concatenate(hand_parts))[:, None, None]
        x[:, OFFSET] += oc.state_noise * torch.randn((len(x), 3), generator=self.generator)
        x[:, NEAR] = near_field(x[:, OFFSET])
        m = self.model
        return (x - m.input_mean) / m.input_std, (y - m.action_mean) / m.action_std

    def head_update(self, x: torch.Tensor, y: torch.Tensor, step: int) -> float:
        head = self.model.head
        return self._optimize(self.head_opt, head, head.loss(x, y, self.generator), step, self.cfg.steps)

    def train_head(self, progress: bool) -> float:
        self.prepare_head()
        return self._train("head", self.model.head, self.cfg.steps, self.cfg.object_centric.head_batch,
                           self.head_batch, self.head_update, progress)

    def _payload(self, stage: str) -> dict:
        return {"cfg": cfg_dict(self.cfg), "kind": "object_centric", "stage": stage,
                "proprio_dim": self.datasets[0].proprio.shape[1], "step": self.cfg.steps,
                "model": self.model.state_dict(),
                "datasets": [{"path": d.path, "domain": d.domain, "weight": d.weight, "demos": d.num_demos,
                              "steps": len(d)} for d in self.datasets]}

    def _estimator_checkpoint(self, path: str) -> dict:
        """The checkpoint `estimator_from` names, refused unless its estimator fits this run's."""
        where = f"object_centric.estimator_from = {path!r}"
        try:
            stored = load_checkpoint(path)
        except CheckpointError as e:
            raise CheckpointError(f"{where}: {e}") from None
        if stored.get("kind") != "object_centric":
            raise CheckpointError(f"{where}: a {stored.get('kind')!r} checkpoint; expected an object-centric one")
        differ = [k for k in config_differences(stored["cfg"], cfg_dict(self.cfg)) if k in ESTIMATOR_SHAPE_FIELDS]
        if differ:
            raise CheckpointError(f"{where}: its estimator was trained with other {', '.join(differ)}; expected "
                                  "the same as this run's")
        return stored

    def _load_estimator(self, path, stored: dict) -> None:
        """The estimator and its label statistics from a checkpoint; the head starts afresh."""
        weights = {k: v for k, v in stored["model"].items() if k.startswith(("estimator.", "label_"))}
        try:
            self.model.load_state_dict(weights, strict=False)
        except RuntimeError as e:
            raise CheckpointError(f"{path}: its estimator does not fit this run's ({' '.join(str(e).split())[:300]})")
        self.model.estimator.eval()

    def _prepare_estimator(self, stage1: Path, stored: dict, progress: bool) -> int:
        """Stage 1: the estimator loaded (from `estimator_from` or an interrupted run's `estimator.pt`) or trained,
        and its error on the held-out demos; returns the estimator steps a resume skipped."""
        resumed = 0
        if self.estimator_source is not None:
            self._load_estimator(self.cfg.object_centric.estimator_from, self.estimator_source)
        elif stage1 in stored:
            self._load_estimator(stage1, stored[stage1])
            resumed = self.cfg.object_centric.estimator_steps
        else:
            self.train_estimator(progress)
            save_checkpoint(stage1, self._payload("estimator"))
        if self.holdout is not None:
            oc = self.cfg.object_centric
            report = perception_report(self.model, self.locator, self.camera, self.holdout, oc.control_hz,
                                       resting_belt_top(oc), oc.hand_cover)
            write_text_atomic(self.run_dir / "perception.json", json.dumps(report, indent=2))
        return resumed

    def run(self, progress: bool = True) -> TrainResult:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        final, stage1 = self.run_dir / "policy.pt", self.run_dir / "estimator.pt"
        stored = {p: load_checkpoint(p) for p in (final, stage1) if p.exists()}
        for path, ignored in ((final, ()), (stage1, HEAD_ONLY_FIELDS)):
            if path in stored:
                refuse_other_run(path, stored[path]["cfg"], cfg_dict(self.cfg), ignored)
        if final.exists():
            return TrainResult(final, self.cfg.steps, float("nan"), 0.0, self.cfg.steps)
        write_text_atomic(self.run_dir / "config.yaml", yaml.safe_dump(cfg_dict(self.cfg), sort_keys=False))
        resumed = 0
        if self.cfg.object_centric.perception == "camera":  # with `tracking` there is no estimator
            resumed = self._prepare_estimator(stage1, stored, progress)
        start = time.perf_counter()
        loss = self.train_head(progress)
        speed = self.cfg.steps * self.cfg.object_centric.head_batch / (time.perf_counter() - start)
        save_checkpoint(final, self._payload("policy"))
        return TrainResult(final, self.cfg.steps, loss, speed, resumed)
