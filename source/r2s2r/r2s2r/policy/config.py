"""Configuration of the policy and of a co-training run.

`TrainCfg` is what `configs/train.yaml` (Hydra) describes; `train_cfg_from_mapping` turns the composed config into
these dataclasses, type-checking every field through `r2s2r.core.apply_overrides` so a typo is an error naming the
field.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any

from r2s2r.core import ConfigError, apply_overrides, check_number, require
from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS

PROPRIO_KEYS = ("arm_q", "arm_dq", "hand_q", "ee_pose", "belt_setpoint")  # what a policy may observe
DEFAULT_PROPRIO = PROPRIO_KEYS[:4]  # the flow transformer's (the robot's own state)
POLICY_KINDS = ("flow_transformer", "object_centric")
DOMAINS = ("real", "sim")

MAX_STEPS = 100_000_000  # any step count or interval; far beyond a run this package can train
MAX_BATCH = 65_536
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds both take it


@dataclass(frozen=True)
class PolicyCfg:
    """The policy: what it observes, which kind it is and how big.

    `kind`: "flow_transformer" (the study's policy: images and proprio to flow-matched action chunks) or
    "object_centric" (`r2s2r.policy.object_centric`: an object estimator on `cameras[0]`, a belt-aware tracker and
    an L1 action-chunk head; `dim`..`flow_steps` do not apply to it, `ObjectCentricCfg` sizes it).

    The observation set (`cameras`, `image_size`, `proprio`) is part of a checkpoint's identity: a checkpoint only
    plays in an environment that renders the same cameras at the same size.
    """

    kind: str = "flow_transformer"
    cameras: tuple[str, ...] = ("head_left", "right_wrist")
    image_size: tuple[int, int] = (64, 64)  # (height, width); dataset images of another size are resized (area)
    proprio: tuple[str, ...] = DEFAULT_PROPRIO
    action_dim: int = 27
    chunk: int = 16  # actions predicted per inference (action chunk)
    execute: int = 8  # of which this many are executed before predicting again (receding horizon)
    # Temporal ensembling instead (r2s2r.policy.chunks.ActionChunks): a chunk every step, each step's action the mean
    # of every chunk's plan for it, a chunk predicted a steps ago weighted exp(-ensemble * a). None: receding horizon.
    ensemble: float | None = None
    dim: int = 128  # transformer width
    heads: int = 4
    obs_layers: int = 2  # transformer layers over the observation tokens
    action_layers: int = 2  # decoder layers over the action-chunk tokens (cross-attending to the observation)
    dropout: float = 0.0
    flow_steps: int = 10  # Euler integration steps from noise to an action chunk at inference
    # Co-training: a learned embedding of the sample's domain (real / sim) added to the observation tokens. At
    # deployment the policy is told it is on the real side.
    domain_embedding: bool = False

    def validate(self) -> PolicyCfg:
        """Ranges: action_dim 1..256, chunk 1..1024, execute 1..chunk, ensemble null or in [-5, 5], dim a multiple
        of 8 in 8..4096 (the image encoder's group norm), heads 1..64 dividing dim, obs_layers and action_layers 1..64, dropout in [0, 1),
        flow_steps 1..1000, image_size multiples of 16 in [16, 512]."""
        if self.kind not in POLICY_KINDS:
            raise ConfigError(f"policy.kind = {self.kind!r}: expected one of {', '.join(POLICY_KINDS)}")
        if not self.cameras and not self.proprio:
            raise ConfigError("policy: cameras and proprio are both empty; expected at least one observation")
        if len(set(self.cameras)) != len(self.cameras):
            raise ConfigError(f"policy.cameras = {list(self.cameras)}: expected each camera once")
        bad = [k for k in self.proprio if k not in PROPRIO_KEYS]
        if bad:
            raise ConfigError(f"policy.proprio: unknown {bad}; expected any of {', '.join(PROPRIO_KEYS)}")
        size = self.image_size
        ok = (isinstance(size, tuple | list) and len(size) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) and 16 <= x <= 512 and x % 16 == 0
                      for x in size))
        if not ok:
            shown = list(size) if isinstance(size, tuple | list) else size
            raise ConfigError(f"policy.image_size = {shown}: expected multiples of 16 in [16, 512] "
                              f"(the image encoder halves the size four times)")
        check_number("policy.action_dim", self.action_dim, 1, 256, integer=True)
        check_number("policy.chunk", self.chunk, 1, 1024, integer=True)
        check_number("policy.execute", self.execute, 1, 1024, integer=True)
        if self.execute > self.chunk:
            raise ConfigError(f"policy.execute = {self.execute}: expected 1 to policy.chunk ({self.chunk})")
        if self.ensemble is not None:
            check_number("policy.ensemble", self.ensemble, -5, 5)
        check_number("policy.dim", self.dim, 8, 4096, integer=True)
        if self.dim % 8:
            raise ConfigError(f"policy.dim = {self.dim}: expected a multiple of 8 (the image encoder's group norm)")
        check_number("policy.heads", self.heads, 1, 64, integer=True)
        if self.dim % self.heads:
            raise ConfigError(f"policy.dim = {self.dim}: expected a multiple of policy.heads ({self.heads})")
        check_number("policy.obs_layers", self.obs_layers, 1, 64, integer=True)
        check_number("policy.action_layers", self.action_layers, 1, 64, integer=True)
        check_number("policy.dropout", self.dropout, 0, 1, hi_open=True)
        check_number("policy.flow_steps", self.flow_steps, 1, 1000, integer=True)
        require(isinstance(self.domain_embedding, bool), "policy.domain_embedding", self.domain_embedding,
                "true or false")
        return self

    def observation_set(self) -> dict:
        """What a checkpoint must be given at deployment."""
        return {"kind": self.kind, "cameras": list(self.cameras), "image_size": list(self.image_size),
                "proprio": list(self.proprio)}


@dataclass(frozen=True)
class DatasetCfg:
    """One dataset of a co-training mixture (robomimic v0.5 style: a path and a sampling weight)."""

    path: str = ""
    weight: float = 1.0  # share of each batch, relative to the other datasets' weights; in [0, 1]
    # "real" or "sim"; "" infers it from the file's task ID (the twin's datasets are real, the rest sim).
    domain: str = ""
    # Train on the file's first `demos` demos (in demo order) instead of all of them, e.g. to measure success
    # against the number of demos from one recording; 0 takes every demo.
    demos: int = 0
    # Only the demos recorded under these reset conditions (the demo's `condition` attribute, e.g. [belt_speed,
    # combined]); empty takes every condition. Listing a file twice, once whole and once filtered, gives a
    # condition its own share of each batch.
    conditions: tuple[str, ...] = ()
    # Only the demos of these objects (the demo's `object` attribute, e.g. [capsule, flat_box]); empty takes every
    # object. Like `conditions`, a file listed twice gives the objects it names their own share of each batch.
    objects: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataCfg:
    datasets: tuple[DatasetCfg, ...] = ()
    # Random-shift augmentation (pixels of replicate padding, then a random crop back to size); 0 turns it off.
    random_shift: int = 4


@dataclass(frozen=True)
class OptimCfg:
    """AdamW with linear warmup and cosine decay. Ranges: lr in (0, 1], weight_decay in [0, 1], warmup_steps >= 0,
    grad_clip (the gradient norm clipped to) in (0, 1e6], ema_decay in [0, 1)."""

    lr: float = 3e-4
    weight_decay: float = 1e-4
    warmup_steps: int = 200
    grad_clip: float = 1.0
    ema_decay: float = 0.999

    def validate(self) -> OptimCfg:
        check_number("optim.lr", self.lr, 0, 1, lo_open=True)
        check_number("optim.weight_decay", self.weight_decay, 0, 1)
        check_number("optim.warmup_steps", self.warmup_steps, 0, MAX_STEPS, integer=True)
        check_number("optim.grad_clip", self.grad_clip, 0, 1e6, lo_open=True)
        check_number("optim.ema_decay", self.ema_decay, 0, 1, hi_open=True)
        return self


@dataclass(frozen=True)
class CotrainCfg:
    """Options beyond plain mixing. Off by default.

    `alignment_weight` > 0 adds a maximum mean discrepancy (MMD) loss between the real and the simulated samples'
    observation latents of each batch, pulling the two domains' representations together; with
    `policy.domain_embedding` the policy keeps a learned way to tell them apart, so alignment need not erase what
    differs (the balance the co-training literature argues for).
    """

    alignment_weight: float = 0.0  # in [0, 100]

    def validate(self) -> CotrainCfg:
        check_number("cotrain.alignment_weight", self.alignment_weight, 0, 100)
        return self


# What the object-centric head's target positions may be relative to (`object_centric.action_anchor`).
ACTION_FRAMES = ("hand", "object", "hand_bin", "object_bin")
PHASED_FRAMES = ACTION_FRAMES[2:]  # anchored on the bin once the object is lifted (they need the belt's height)
PERCEPTIONS = ("camera", "tracking")  # ObjectCentricCfg.perception
HEADS = ("l1", "flow")  # ObjectCentricCfg.head
ATTRIBUTE_SOURCES = ("scene", "object", "glimpse")  # ObjectCentricCfg.attributes


@dataclass(frozen=True)
class ObjectCentricCfg:
    """Training of the object-centric policy (`policy.kind=object_centric`); `steps` counts its head's steps."""

    estimator_steps: int = 3000
    estimator_batch: int = 64
    head_batch: int = 256
    keypoints: int = 16
    # What the estimator reads the object's grasp yaw, size and bin from: `scene` (every keypoint of the view),
    # `object` (the feature cells around the object's keypoint) or `glimpse` (the image's pixels around it, through
    # a CNN that normalizes per pixel); object_centric.ObjectEstimator. Through `scene` the estimator learns the
    # arm's posture in the demos as a cue to the object, and misreads the object once a policy holds the arm
    # otherwise; `object` still sees the whole view through its feature statistics (docs/results.md).
    attributes: str = "scene"
    # The action head: `l1` (an MLP regressing the chunk, `hidden` wide) or `flow` (the flow transformer's
    # action decoder conditioned on the head's input, sized by policy.dim, policy.heads, policy.action_layers and
    # policy.flow_steps). docs/results.md compares them on the same perception, data and trials.
    head: str = "l1"
    hidden: int = 512  # the L1 head's width
    dropout: float = 0.1  # either head's
    # Photometric augmentation of the estimator's images, 1.0 = sized to the study's lighting shift; 0 turns it off.
    lighting_augmentation: float = 1.0
    # Weight of the keypoint loss: keypoint 0 learns to attend where the object projects in the camera of this world
    # file (the calibrated one: a real cell's camera as calibration measured it; a few pixels off for another
    # world's data, which the position labels then correct).
    keypoint_weight: float = 1.0
    keypoint_world: str = "grounded"
    # Gaussian noise (m) on the tracked object position the head is trained on, its targets unchanged. Off by
    # default: noise without a matching change of target teaches the head to discount the object's offset, and on
    # the twin it cost grasp precision (see docs/results.md, hand-shift rung).
    state_noise: float = 0.0
    # Hand-displacement augmentation: a `hand_shift_fraction` of the head's samples see the hand displaced by a
    # Gaussian offset (m, std per axis x, y, z) with the same absolute action targets, so the head learns to
    # correct an approach that is off by about a centimetre; demos alone never leave the expert's path.
    hand_shift: tuple[float, float, float] = (0.015, 0.015, 0.005)
    hand_shift_fraction: float = 0.5
    # What the head's target positions are relative to: `hand` (the hand's position when the chunk is planned),
    # `object` (the tracked object's then), `hand_bin` or `object_bin` (the hand's or the object's while the object
    # is on the belt, its bin's once lifted; the belt's height from `keypoint_world`). See
    # object_centric.action_anchor.
    action_frame: str = "hand"
    control_hz: float = 20.0  # the rate the tracker is stepped at (the task's control rate)
    # Demos of the first dataset kept out of training to measure the estimator's error (perception.json).
    holdout_demos: int = 0
    # An object-centric checkpoint (another run's estimator.pt or policy.pt) whose estimator this run keeps: only
    # the head trains, on this run's data. Separates what more data does for the head from what it does for
    # perception. Empty: the estimator trains here.
    estimator_from: str = ""
    # Where the head's object state comes from. `camera`: the estimator and tracker on `policy.cameras[0]` (the
    # product). `tracking`: the cell's own object tracking (the real cell's `tracking` group; the simulator's truth
    # in simulation), no estimator: a diagnostic that measures the head's closed loop without perception's error.
    perception: str = "camera"
    # The height of an object resting on the belt: the belt's top plus the half height the tracker has fused over
    # the episode (object_centric.BeltTracker), instead of each frame's regressed height, which one oblique view
    # biases per object (docs/results.md, perception on held-out demos). Checkpoints written before this option
    # existed track the regressed height (`checkpoint.train_cfg_of`).
    height_from_size: bool = True
    # m: frames where the hand comes this close to the head camera's line of sight to the tracked object add nothing
    # to its yaw, size and bin (object_centric.BeltTracker); 0 fuses every frame. Under a policy's own motion the
    # hand hovers over the object, and the estimator reads a capsule's long axis a quarter turn off there
    # (docs/results.md).
    hand_cover: float = 0.0

    def validate(self) -> ObjectCentricCfg:
        """Ranges: estimator_steps 1..1e8, estimator_batch and head_batch 1..65536, keypoints 1..256, hidden
        1..16384, dropout in [0, 1), lighting_augmentation in [0, 10], keypoint_weight in [0, 1000], state_noise and
        each hand_shift in [0, 1] m, hand_shift_fraction in [0, 1], action_frame one of ACTION_FRAMES, control_hz in
        (0, 1000] Hz, holdout_demos 0..1e6, estimator_from a path or empty, perception one of PERCEPTIONS, head one of
        HEADS, attributes one of ATTRIBUTE_SOURCES, hand_cover in [0, 1] m."""
        where = "object_centric"
        check_number(f"{where}.estimator_steps", self.estimator_steps, 1, MAX_STEPS, integer=True)
        check_number(f"{where}.estimator_batch", self.estimator_batch, 1, MAX_BATCH, integer=True)
        check_number(f"{where}.head_batch", self.head_batch, 1, MAX_BATCH, integer=True)
        check_number(f"{where}.keypoints", self.keypoints, 1, 256, integer=True)
        check_number(f"{where}.hidden", self.hidden, 1, 16384, integer=True)
        check_number(f"{where}.dropout", self.dropout, 0, 1, hi_open=True)
        check_number(f"{where}.lighting_augmentation", self.lighting_augmentation, 0, 10)
        check_number(f"{where}.keypoint_weight", self.keypoint_weight, 0, 1000)
        require(isinstance(self.keypoint_world, str) and bool(self.keypoint_world), f"{where}.keypoint_world",
                self.keypoint_world, "a world name or .yaml path")
        check_number(f"{where}.state_noise", self.state_noise, 0, 1, unit="m")
        check_number(f"{where}.hand_shift", self.hand_shift, 0, 1, unit="m", n=3)
        check_number(f"{where}.hand_shift_fraction", self.hand_shift_fraction, 0, 1)
        require(self.action_frame in ACTION_FRAMES, f"{where}.action_frame", self.action_frame,
                f"one of {', '.join(ACTION_FRAMES)}")
        check_number(f"{where}.control_hz", self.control_hz, 0, 1000, lo_open=True, unit="Hz")
        check_number(f"{where}.holdout_demos", self.holdout_demos, 0, 1_000_000, integer=True)
        require(isinstance(self.estimator_from, str), f"{where}.estimator_from", self.estimator_from,
                "a checkpoint path, or empty")
        check_number(f"{where}.hand_cover", self.hand_cover, 0, 1, unit="m")
        require(isinstance(self.height_from_size, bool), f"{where}.height_from_size", self.height_from_size,
                "true or false")
        require(self.perception in PERCEPTIONS, f"{where}.perception", self.perception, " or ".join(PERCEPTIONS))
        require(self.head in HEADS, f"{where}.head", self.head, " or ".join(HEADS))
        require(self.attributes in ATTRIBUTE_SOURCES, f"{where}.attributes", self.attributes,
                " or ".join(ATTRIBUTE_SOURCES))
        return self


@dataclass(frozen=True)
class TrainCfg:
    run_dir: str = "outputs/train/run"
    seed: int = 0
    steps: int = 20000
    batch_size: int = 64
    log_every: int = 50
    checkpoint_every: int = 1000
    threads: int = 0  # torch CPU threads; 0 leaves torch's default
    policy: PolicyCfg = field(default_factory=PolicyCfg)
    data: DataCfg = field(default_factory=DataCfg)
    optim: OptimCfg = field(default_factory=OptimCfg)
    cotrain: CotrainCfg = field(default_factory=CotrainCfg)
    object_centric: ObjectCentricCfg = field(default_factory=ObjectCentricCfg)

    def validate(self) -> TrainCfg:
        """Every field in range (see each section's `validate`; here: seed 0..2^32-1, steps, log_every and
        checkpoint_every 1..1e8, batch_size 1..65536, threads 0..1024, data.random_shift 0..64 pixels, dataset
        weights in [0, 1] with at least one above 0), or a `ConfigError` naming the field, the value and the
        range."""
        require(isinstance(self.run_dir, str) and bool(self.run_dir), "run_dir", self.run_dir, "a folder path")
        check_number("seed", self.seed, 0, MAX_SEED, integer=True)
        for name in ("steps", "log_every", "checkpoint_every"):
            check_number(name, getattr(self, name), 1, MAX_STEPS, integer=True)
        check_number("batch_size", self.batch_size, 1, MAX_BATCH, integer=True)
        check_number("threads", self.threads, 0, 1024, integer=True)
        self.policy.validate()
        self.optim.validate()
        self.cotrain.validate()
        self.object_centric.validate()
        if (self.policy.kind == "object_centric" and self.object_centric.perception == "camera"
                and not self.policy.cameras):
            raise ConfigError("policy.cameras is empty: the object-centric policy estimates the object from "
                              "cameras[0] (object_centric.perception = 'camera')")
        if not self.data.datasets:
            raise ConfigError("data.datasets is empty: expected at least one dataset {path, weight}")
        for i, d in enumerate(self.data.datasets):
            if not isinstance(d.path, str) or not d.path:
                raise ConfigError(f"data.datasets[{i}].path = {d.path!r}: expected an HDF5 dataset file")
            if not isinstance(d.weight, numbers.Real) or isinstance(d.weight, bool) or not 0.0 <= d.weight <= 1.0:
                raise ConfigError(f"data.datasets[{i}].weight = {d.weight!r} ({d.path}): expected a mixture ratio "
                                  f"in [0, 1]")
            if d.domain not in ("", *DOMAINS):
                raise ConfigError(f"data.datasets[{i}].domain = {d.domain!r} ({d.path}): expected 'real', 'sim' "
                                  f"or '' (from the file)")
            check_number(f"data.datasets[{i}].demos", d.demos, 0, MAX_STEPS, integer=True)
            unknown = [c for c in d.conditions if c not in CONDITIONS]
            if unknown:
                raise ConfigError(f"data.datasets[{i}].conditions = {list(d.conditions)!r} ({d.path}): "
                                  f"{unknown[0]!r} is not a reset condition; expected any of {', '.join(CONDITIONS)}")
        if sum(d.weight for d in self.data.datasets) <= 0:
            raise ConfigError("data.datasets: every weight is 0; expected at least one dataset to sample from")
        check_number("data.random_shift", self.data.random_shift, 0, 64, integer=True, unit="pixels")
        return self


def train_cfg_from_mapping(values: dict[str, Any]) -> TrainCfg:
    """A validated `TrainCfg` from a nested mapping (a composed Hydra config as a plain dict)."""
    if not isinstance(values, dict):
        raise ConfigError(f"config = {values!r}: expected a mapping of field names to values")
    values = dict(values)
    datasets = values.get("data", {}).get("datasets", []) if isinstance(values.get("data"), dict) else []
    if not isinstance(datasets, list | tuple):
        raise ConfigError(f"data.datasets = {datasets!r}: expected a list of {{path, weight, domain, demos, conditions, "
                          f"objects}}")
    entries = tuple(apply_overrides(DatasetCfg(), entry, f"data.datasets[{i}]") for i, entry in enumerate(datasets))
    if isinstance(values.get("data"), dict):
        values["data"] = {k: v for k, v in values["data"].items() if k != "datasets"}
    cfg = apply_overrides(TrainCfg(), values, "config")
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, datasets=entries)).validate()


def compose_train_cfg(overrides: list[str] | tuple[str, ...] = ()) -> TrainCfg:
    """`configs/train/config.yaml` composed with Hydra command-line style `overrides` (as scripts/train.py takes
    them), as a validated `TrainCfg`. For callers that are not Hydra apps (experiment.py, tests), and for
    scripts/train.py to check its command line before Hydra does.

    Every failure is a `ConfigError` naming what is at fault: the override that does not parse or that the
    composition refuses, or the config file that is not valid YAML. (Hydra's own report of these ends some in a
    traceback, and names the bad token or config key rather than the override.)"""
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from r2s2r.core import configs_dir

    folder, overrides = configs_dir() / "train", list(overrides)
    expected = "expected key=value naming a config field or data preset (scripts/train.py --help lists them)"
    parser = OverridesParser.create()
    for text in overrides:
        try:
            key = parser.parse_override(text).key_or_group
        except HydraException as e:
            raise ConfigError(f"override {text!r}: {_reason(e)}; {expected}") from None
        if not key:
            raise ConfigError(f"override {text!r}: no key before '='; {expected}")

    def composed(selected: list[str]) -> dict:
        with initialize_config_dir(str(folder), version_base="1.3"):
            return OmegaConf.to_container(compose("config", overrides=selected), resolve=True)

    refused = (HydraException, OmegaConfBaseException, ValueError)  # Hydra raises a bare ValueError for some
    try:
        values = composed(overrides)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        raise ConfigError(f"config file {getattr(mark, 'name', folder)}: not valid YAML ({_reason(e)}); expected "
                          f"a YAML mapping of config fields") from None
    except refused as e:
        # Hydra names a config key, not the override: the override at fault ends the shortest failing prefix (none
        # when the config files fail on their own).
        for n in range(len(overrides) + 1):
            try:
                composed(overrides[:n])
            except (*refused, yaml.YAMLError):
                break
        if n == 0:
            raise ConfigError(f"config file {folder / 'config.yaml'}: {_reason(e)}; expected a config that "
                              f"composes without overrides") from None
        raise ConfigError(f"override {overrides[n - 1]!r}: {_reason(e)}; {expected}") from None
    values.pop("hydra", None)
    return train_cfg_from_mapping(values)


def _reason(e: BaseException) -> str:
    """Hydra's, OmegaConf's or YAML's message on one line, without the pointers to its documentation and config
    search path."""
    text = str(e).split("See https://hydra.cc")[0].split("Config search path:")[0]
    return " ".join(text.split())
