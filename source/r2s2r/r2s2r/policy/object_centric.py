"""The object-centric visuomotor policy: perceive the object, keep track of it behind the arm, act from the hand.

At 64 px a moving object is a few pixels wide, the arm hides it from the head camera for most of the last two
seconds before the grasp, and a policy that maps one frame to actions has nothing to act on then. This policy
splits the problem where the data gives supervision for free (every demo, real or simulated, stores the tracker's
object state in `obs/datagen_info`):

- `ObjectEstimator` (a CNN with spatial-softmax keypoints over one camera image) regresses the object's world
  position with a per-axis variance, the grasp yaw as (cos 2y, sin 2y), the object's half extents and the position
  of the bin of its colour; its keypoint 0 is trained to sit on the pixel where the object projects.
- `ObjectLocator` turns a frame into a position measurement: where keypoint 0 is sharp, the point where its pixel's
  ray through the calibrated camera (`CameraGeometry`) meets the plane at the estimated height; elsewhere nothing.
- `BeltTracker` fuses the measurements over time with a Kalman filter (constant velocity, the conveyor's set-point
  as the velocity prior): while the arm hides the object, the filter carries it along the belt.
- The head (`object_centric.head`: `ActionHead`, an MLP with an L1 loss, or `FlowHead`, the flow transformer's
  action decoder) maps the tracked object state relative to the hand, the proprioception and the set-point to a
  chunk of actions whose positions are relative to an anchor (`object_centric.action_frame`): the hand's
  position, the tracked object's, or by phase (either of those on the belt, the bin's once the object is lifted).

At deployment the policy observes exactly what the flow transformer does (its cameras and proprioception) plus the
conveyor's speed set-point; it never sees tracker data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from r2s2r.control.grasp import grasp_yaw
from r2s2r.core import ConfigError
from r2s2r.data.datagen_info import OBJECT, TARGET_BIN, matrix_poses, positions
from r2s2r.geometry import quat_to_mat
from r2s2r.policy.chunks import ActionChunks
from r2s2r.policy.config import ATTRIBUTE_SOURCES, PHASED_FRAMES
from r2s2r.policy.model import ActionFlow

# Per-frame labels the estimator learns (from obs/datagen_info): slices into the 11-vector.
POS, YAW, SIZE, BIN = slice(0, 3), slice(3, 5), slice(5, 8), slice(8, 11)
LABEL_DIM = 11
# datagen_info field -> per-step shape
LABEL_FIELDS = {f"object_pose/{OBJECT}": (4, 4), "object_half_extents": (3,), f"object_pose/{TARGET_BIN}": (4, 4)}
# The head's proprioception (arm_dq is left out: with it a policy learns to continue its own motion).
HEAD_PROPRIO = ("arm_q", "hand_q", "ee_pose", "belt_setpoint")
EE_POSE = slice(27, 34)  # the hand's pose (position, w,x,y,z) in HEAD_PROPRIO's concatenation (after arm_q, hand_q)
EE_POS = slice(27, 30)  # its position
SETPOINT = 34  # the set-point's column there
# Tracked state (`BeltTracker.update`): object position, velocity, position std, yaw features, size, bin position.
TRACKED_DIM = 3 + 3 + 3 + 2 + 3 + 3
TRACKED_STD = slice(6, 9)  # the tracked position's std
TRACKED_YAW = slice(9, 11)  # the grasp yaw's features (cos 2y, sin 2y)
TRACKED_SIZE = slice(11, 14)  # the object's half extents
TRACKED_BIN = slice(14, 17)  # its bin position
TRACKED_HALF_HEIGHT = 13  # its half extent along z (the size's last)
# The head's state input: the tracked state with positions relative to the hand, plus the object's offset from the
# hand seen through NEAR_FIELD * tanh(offset / NEAR_FIELD). Normalized over whole demos the offset has a std of
# 10-30 cm, so the centimetre the grasp tolerates is a few hundredths of a unit; the saturated copy keeps the last
# few centimetres at the scale of the whole input.
NEAR_FIELD = 0.05  # m
STATE_DIM = TRACKED_DIM + 3
# Columns of the head's input (`head_input`) that hold positions relative to the hand.
OFFSET = slice(0, 3)  # the object's
BIN_OFFSET = TRACKED_BIN  # its bin's (the tracked state's columns keep their places)
NEAR = slice(TRACKED_DIM, STATE_DIM)  # the near-field offset
HEAD_EE_POS = slice(STATE_DIM + EE_POS.start, STATE_DIM + EE_POS.stop)  # the hand's own position (proprio)


def near_field(offset):
    """The object's offset from the hand (…, 3) in metres, saturated beyond NEAR_FIELD (numpy or torch)."""
    tanh = np.tanh if isinstance(offset, np.ndarray) else torch.tanh
    return NEAR_FIELD * tanh(offset / NEAR_FIELD)


def frame_labels(datagen_info: dict) -> np.ndarray:
    """(T, 11) estimator targets of one demo: object position, grasp-yaw features, half extents, bin position."""
    pos, quat = matrix_poses(datagen_info["object_pose"][OBJECT])
    extents = np.asarray(datagen_info["object_half_extents"], dtype=float)
    yaw = np.array([grasp_yaw(q, e) for q, e in zip(quat, extents)])
    return np.concatenate([pos, np.cos(2 * yaw)[:, None], np.sin(2 * yaw)[:, None], extents,
                           positions(datagen_info["object_pose"][TARGET_BIN])], axis=1).astype(np.float32)


NOISE_BANK = 256  # sensor-noise images drawn once per run; each augmented frame adds one of them


class Photometric:
    """Augmentation sized to the study's lighting shift (intensity x0.35-1.8, tint +-25 %): a brightness gain, a
    per-channel tint and sensor noise. No geometric augmentation: the camera is fixed, and shifting the image would
    move the object's apparent position by centimetres.

    Drawing full-resolution Gaussian noise for every frame of every batch would cost more than everything else the
    pipeline adds to a training step, so the noise comes from a bank of NOISE_BANK images drawn once from `seed`,
    one picked at random per frame; gain and tint are drawn per frame as before.
    """

    def __init__(self, image_shape: tuple[int, int, int], strength: float, seed: int):
        bank_rng = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 7]).generate_state(1)[0]))
        self.strength = strength
        self.noise = 0.02 * strength * torch.randn((NOISE_BANK, *image_shape), generator=bank_rng)

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """`images` (B, 3, H, W) in [0, 1], augmented in place (and returned)."""
        b, s = images.shape[0], self.strength
        gain = torch.exp(torch.empty(b, 1, 1, 1).uniform_(-0.6 * s, 0.5 * s, generator=generator))
        tint = 1.0 + torch.empty(b, 3, 1, 1).uniform_(-0.2 * s, 0.2 * s, generator=generator)
        pick = torch.randint(0, len(self.noise), (b,), generator=generator)
        return images.mul_(gain * tint).add_(self.noise[pick]).clamp_(0.0, 1.0)


def to_unit(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> float (B, 3, H, W) in [0, 1]. A batch gathered from the frames is wrapped as it is;
    frames mapped read-only from the frame cache are copied first (torch cannot wrap a read-only array)."""
    x = images if isinstance(images, torch.Tensor) else torch.from_numpy(np.require(images, requirements="W"))
    return x.permute(0, 3, 1, 2).float() / 255.0


FEATURE_STRIDE = 4  # the estimator's feature grid is the image downsampled 4x
# Feature cells per side read around keypoint 0 with `attributes=object`: 12 px of a 128 px image at stride 4, each
# cell seeing about 20 px, which holds the largest object the head camera shows near the grasp.
ROI_CELLS = 3
# With `attributes=glimpse`: the square of the image read around keypoint 0, as a fraction of the image's width (32 px
# of 128, room for the largest object near the grasp and a margin for keypoint 0's error), resampled to
# GLIMPSE_PX pixels per side.
GLIMPSE_SIDE = 0.25
GLIMPSE_PX = 32


class ChannelNorm(nn.Module):
    """Normalizes each pixel's features across channels alone, so that no other pixel of the image enters."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ObjectEstimator(nn.Module):
    """Image (B, 3, H, W) in [0, 1] -> (mean (B, 11), log variance of the position (B, 3)), normalized units.

    Spatial softmax keypoints (where) and the features under each keypoint (what: colour, shape) feed an MLP.
    `attributes` (ObjectCentricCfg.attributes) says what the object's yaw, size and bin are read from, by a second
    MLP where it is not `scene`:
    - `scene`: the same MLP over every keypoint, the arm's included;
    - `object`: the feature cells around keypoint 0 (the one taught to sit on the object). Those cells still see the
      rest of the view through GroupNorm's statistics, which each image's features are normalized by;
    - `glimpse`: the image's own pixels around keypoint 0, through a small CNN whose normalization stays per pixel,
      so nothing outside the glimpse enters the reading.
    """

    def __init__(self, keypoints: int = 16, width: int = 32, hidden: int = 256, attributes: str = "scene"):
        super().__init__()
        if attributes not in ATTRIBUTE_SOURCES:
            raise ConfigError(f"object_centric.attributes = {attributes!r}: expected one of "
                              f"{', '.join(ATTRIBUTE_SOURCES)}")
        self.attributes = attributes
        self.scene_dim = keypoints * (2 + width)
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.GroupNorm(4, 16), nn.GELU(),
            nn.Conv2d(16, width, 3, stride=2, padding=1), nn.GroupNorm(8, width), nn.GELU(),
            nn.Conv2d(width, width, 3, padding=1), nn.GroupNorm(8, width), nn.GELU(),
        )
        self.attention = nn.Conv2d(width, keypoints, 1)
        self.log_temperature = nn.Parameter(torch.zeros(()))
        scene_out = LABEL_DIM + 3 if attributes == "scene" else POS.stop + 3
        self.mlp = nn.Sequential(nn.Linear(self.scene_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                 nn.GELU(), nn.Linear(hidden, scene_out))
        if attributes == "scene":
            return
        if attributes == "object":
            object_dim = ROI_CELLS**2 * width
        else:
            self.glimpse_net = nn.Sequential(  # GLIMPSE_PX -> GLIMPSE_PX / 4 per side
                nn.Conv2d(3, 16, 3, padding=1), ChannelNorm(16), nn.GELU(),
                nn.Conv2d(16, width, 3, stride=2, padding=1), ChannelNorm(width), nn.GELU(),
                nn.Conv2d(width, width, 3, stride=2, padding=1), ChannelNorm(width), nn.GELU(),
            )
            object_dim = (GLIMPSE_PX // 4) ** 2 * width
        self.object_mlp = nn.Sequential(nn.Linear(2 + object_dim, hidden), nn.GELU(),
                                        nn.Linear(hidden, hidden), nn.GELU(),
                                        nn.Linear(hidden, LABEL_DIM - POS.stop))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.outputs(self.latent(images)[0])

    def outputs(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.mlp(latent[:, :self.scene_dim])
        if self.attributes != "scene":
            out = torch.cat([out[:, :POS.stop], self.object_mlp(latent[:, self.scene_dim:]), out[:, POS.stop:]], 1)
        return out[:, :LABEL_DIM], out[:, LABEL_DIM:].clamp(-12.0, 6.0)

    def latent(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, K * (2 + width)): each keypoint's image position and the features under it, then unless `attributes`
        is `scene`, keypoint 0's position and what the object readout sees there (the ROI_CELLS x ROI_CELLS feature
        cells around it, or the glimpse CNN's features); and the attention logits (B, K, h * w) over the feature
        grid (stride 4)."""
        feats = self.net(images - 0.5)
        b, c, h, w = feats.shape
        logits = self.attention(feats).flatten(2) * torch.exp(self.log_temperature)
        weights = torch.softmax(logits, dim=-1)  # (B, K, HW)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h, device=images.device),
                                torch.linspace(-1, 1, w, device=images.device), indexing="ij")
        grid = torch.stack([xs.flatten(), ys.flatten()], dim=-1)  # (HW, 2)
        where = weights @ grid  # (B, K, 2)
        what = weights @ feats.flatten(2).transpose(1, 2)  # (B, K, C)
        scene = torch.cat([where, what], dim=-1).flatten(1)
        if self.attributes == "scene":
            return scene, logits
        # Where keypoint 0 sits is the keypoint loss's to teach; the attributes only read around it.
        centre = where[:, 0].detach()
        if self.attributes == "object":
            seen = F.grid_sample(feats, offsets_around(centre, ROI_CELLS, 2 / (w - 1), 2 / (h - 1)),
                                 align_corners=True, padding_mode="border")  # (B, C, R, R)
        else:
            seen = self.glimpse_net(glimpse(images, centre, h, w) - 0.5)
        return torch.cat([scene, centre, seen.flatten(1)], dim=1), logits


def offsets_around(centre: torch.Tensor, count: int, step_x: float, step_y: float) -> torch.Tensor:
    """(B, count, count, 2) sampling points (x, y) `step` apart in grid_sample's normalized coordinates, centred
    on `centre` (B, 2)."""
    steps = torch.arange(count, device=centre.device, dtype=centre.dtype) - (count - 1) / 2
    oy, ox = torch.meshgrid(steps * step_y, steps * step_x, indexing="ij")
    return centre[:, None, None, :] + torch.stack([ox, oy], dim=-1)[None]


def glimpse(images: torch.Tensor, centre: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(B, 3, GLIMPSE_PX, GLIMPSE_PX): the square GLIMPSE_SIDE of the image's width wide around `centre`, a point of
    the (h, w) feature grid in its normalized coordinates (cell i at -1 + 2 i / (w - 1)), resampled bilinearly;
    outside the image it reads zeros. Cell i is pixels [4i, 4i + 4) (FEATURE_STRIDE), so its centre lies at image
    coordinate 4i + 2 of a width of 4w."""
    height, width = images.shape[-2:]
    cell = (centre + 1) / 2 * torch.tensor([w - 1, h - 1], device=centre.device, dtype=centre.dtype)
    pixel = cell * FEATURE_STRIDE + FEATURE_STRIDE / 2
    at = pixel * 2 / torch.tensor([width, height], device=centre.device, dtype=centre.dtype) - 1
    step = 2 * GLIMPSE_SIDE / GLIMPSE_PX  # one glimpse pixel, in the image's normalized width
    points = offsets_around(at, GLIMPSE_PX, step, step * width / height)
    return F.grid_sample(images, points, align_corners=False, padding_mode="zeros")


def keypoint_target(pixels: torch.Tensor, width: int, height: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which pixels (B, 2) project inside the feature grid, and for those the attention keypoint 0 should have
    (N, h * w): spread bilinearly over the four cells around the pixel, so its expected position (what
    `keypoint_pixels` reads) is the pixel itself, below the cell size of 4 pixels (~4 cm on the belt)."""
    h, w = height // FEATURE_STRIDE, width // FEATURE_STRIDE
    x = pixels[:, 0] / FEATURE_STRIDE - 0.5
    y = pixels[:, 1] / FEATURE_STRIDE - 0.5
    inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
    x, y = x[inside], y[inside]
    x0, y0 = x.floor().clamp(max=w - 2).long(), y.floor().clamp(max=h - 2).long()
    fx, fy = x - x0, y - y0
    target = torch.zeros((len(x), h * w), dtype=pixels.dtype)
    rows = torch.arange(len(x))
    for dy, dx, weight in ((0, 0, (1 - fx) * (1 - fy)), (0, 1, fx * (1 - fy)), (1, 0, (1 - fx) * fy), (1, 1, fx * fy)):
        target[rows, (y0 + dy) * w + x0 + dx] += weight
    return inside, target


def keypoint_loss(logits: torch.Tensor, pixels: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Cross-entropy that makes keypoint 0 attend to where the object projects (pixels (B, 2)); frames where it
    projects outside the image do not count. A 4-pixel object is too small a signal for the attention to find from
    the position labels alone: trained on those, the estimated position along the belt stays at the data mean."""
    inside, target = keypoint_target(pixels, width, height)
    if not inside.any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits[inside, 0], target.to(logits.dtype))


def keypoint_pixels(logits: torch.Tensor, width: int, height: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keypoint 0's expected pixel (B, 2) and its spread (B,), the attention's standard deviation in pixels, from
    the attention logits (B, K, h * w); the cell-to-pixel map is the inverse of `keypoint_loss`'s."""
    h, w = height // FEATURE_STRIDE, width // FEATURE_STRIDE
    weights = torch.softmax(logits[:, 0], dim=-1).view(-1, h, w)
    ys, xs = torch.meshgrid((torch.arange(h) + 0.5) * FEATURE_STRIDE, (torch.arange(w) + 0.5) * FEATURE_STRIDE,
                            indexing="ij")
    u, v = (weights * xs).sum((1, 2)), (weights * ys).sum((1, 2))
    spread = (weights * ((xs - u[:, None, None]) ** 2 + (ys - v[:, None, None]) ** 2)).sum((1, 2)).sqrt()
    return torch.stack([u, v], dim=-1), spread


@dataclass
class LocatorCfg:
    """When and how much the keypoint is trusted. A sharp attention (spread up to `max_spread_px`) puts keypoint 0
    within about a pixel of the object's projection; a wider one is several pixels off, and wider still it has lost
    the object. The keypoint's pixel std grows from `std_floor_px` with the spread."""

    max_spread_px: float = 8.0
    std_floor_px: float = 0.5
    std_per_spread: float = 0.25  # the keypoint's pixel std per pixel of spread


RESTING_MARGIN = 0.02  # m: regressed higher than this above resting on the belt, the object is taken as lifted


BLIND_VAR = 1.0  # m^2: the position variance of a frame that does not measure the position


class ObjectLocator:
    """The tracker's per-frame position measurement. Where the keypoint is sharp, the object is where the keypoint's
    ray meets the horizontal plane at the estimated height: geometry through the calibrated camera, which holds on
    images the estimator never saw, where the regressed position is centimetres off. Elsewhere the frame is blind:
    the regressed position of a frame whose keypoint has lost the object is biased the same way from frame to frame,
    and fusing it drags the track."""

    def __init__(self, geometry: CameraGeometry | None, cfg: LocatorCfg | None = None):
        self.geometry = geometry
        self.cfg = cfg or LocatorCfg()

    def __call__(self, mean: np.ndarray, var: np.ndarray, pixels: np.ndarray, spread: np.ndarray,
                 ee_pose: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Estimator outputs (B, 11), position variances (B, 3), keypoint pixels (B, 2) and spreads (B,), and the
        hand's pose (B, 7) at those frames (needed for a wrist camera, whose pose follows it) -> the measurement
        (B, 11) in metres, its position variance (B, 3) in m^2, and its ray's horizontal drift per metre of height
        (B, 2; zero where the frame measured nothing), with which the tracker moves the point to another height."""
        drift_out = np.zeros((len(mean), 2))
        if self.geometry is None:
            return mean, var, drift_out
        sharp = np.flatnonzero(spread <= self.cfg.max_spread_px)
        height_var = var[sharp, 2]
        mean, var = mean.copy(), np.full_like(var, BLIND_VAR)
        ee_pose = None if ee_pose is None else np.asarray(ee_pose)[sharp]
        point, drift = self.geometry.locate(pixels[sharp], mean[sharp, 2], ee_pose)
        c = self.cfg
        pixel_var = np.maximum(c.std_floor_px, c.std_per_spread * spread[sharp]) ** 2
        jac = self.geometry.pixels_per_metre(point, ee_pose)
        planar = pixel_var[:, None] * np.diagonal(np.linalg.inv(jac.transpose(0, 2, 1) @ jac), axis1=1, axis2=2)
        mean[sharp, :2] = point[:, :2]
        var[sharp, :2] = planar + drift**2 * height_var[:, None]
        var[sharp, 2] = height_var
        drift_out[sharp] = drift
        return mean, var, drift_out


class CameraGeometry:
    """A camera of a world file at one image size: world points to pixels (the keypoint's training target) and
    back, a pixel's ray to where it meets a horizontal plane (the object's position). A wrist camera moves with the
    hand: its pose at each frame is the hand's reported pose (`ee_pose`, the grasp site, w,x,y,z) composed with the
    fixed mount between them, so those calls take the frames' `ee_pose` (N, 7)."""

    def __init__(self, world: str, camera: str, width: int, height: int):
        import mujoco

        from r2s2r.cell.mjcf import build_model
        from r2s2r.cell.world import load_world
        from r2s2r.render.camera_model import CameraModel

        cell = load_world(world).cell
        cam_cfg = next((c for c in cell.cameras if c.name == camera), None)
        if cam_cfg is None:
            raise ConfigError(f"policy.cameras: camera {camera!r} is not in world {world!r}; it has "
                              f"{[c.name for c in cell.cameras]}")
        model = build_model(cell)
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        cam = model.camera(camera).id
        # MuJoCo's camera looks along -z with +y up; OpenCV's along +z with +y down: columns of `rot` flipped.
        position, rot = data.cam_xpos[cam].copy(), data.cam_xmat[cam].reshape(3, 3) * np.array([1.0, -1.0, -1.0])
        self.on_hand = cam_cfg.mount != "world"
        if cam_cfg.mount not in ("world", "right_wrist"):
            raise ConfigError(f"policy.cameras: camera {camera!r} rides on {cam_cfg.mount!r}, whose pose the policy "
                              f"does not observe (proprio ee_pose is the right hand's); expected a camera fixed to "
                              f"the world or on the right wrist")
        if self.on_hand:  # the mount in the grasp site's frame
            site = model.site(f"{cam_cfg.mount.removesuffix('_wrist')}_grasp").id
            site_pos, site_rot = data.site_xpos[site], data.site_xmat[site].reshape(3, 3)
            position, rot = site_rot.T @ (position - site_pos), site_rot.T @ rot
        self.position, self.rot = position, rot
        self.camera = camera
        self.lens = CameraModel(cam_cfg.lens, width, height)

    def pose(self, count: int, ee_pose: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The camera's world position (N, 3) and OpenCV-frame rotation (N, 3, 3) at `count` frames."""
        if not self.on_hand:
            return np.broadcast_to(self.position, (count, 3)), np.broadcast_to(self.rot, (count, 3, 3))
        if ee_pose is None:
            raise ValueError(f"camera {self.camera!r} moves with the hand: its geometry needs the frames' ee_pose")
        ee = np.asarray(ee_pose, dtype=float).reshape(count, 7)
        hand = quat_to_mat(ee[:, 3:])
        return ee[:, :3] + hand @ self.position, hand @ self.rot

    def project(self, points: np.ndarray, ee_pose: np.ndarray | None = None) -> np.ndarray:
        """World points (N, 3) -> pixel coordinates (N, 2)."""
        points = np.asarray(points, dtype=float)
        position, rot = self.pose(len(points), ee_pose)
        return self.lens.project(np.einsum("ni,nij->nj", points - position, rot))

    def locate(self, pixels: np.ndarray, z: np.ndarray,
               ee_pose: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Where each pixel's ray (N, 2) meets the horizontal plane at height z (N,): world points (N, 3), and the
        ray's horizontal drift per metre of height (N, 2), how an error in z moves the point."""
        position, rot = self.pose(len(pixels), ee_pose)
        x, y, _ = self.lens.unproject(pixels[:, 0].astype(float), pixels[:, 1].astype(float))
        ray = np.einsum("nij,nj->ni", rot, np.stack([x, y, np.ones_like(x)], axis=1))  # world directions
        drift = ray[:, :2] / ray[:, 2:3]
        t = (np.asarray(z, dtype=float) - position[:, 2]) / ray[:, 2]
        return position + t[:, None] * ray, drift

    def pixels_per_metre(self, points: np.ndarray, ee_pose: np.ndarray | None = None) -> np.ndarray:
        """(N, 2, 2): the pixel's derivative by the point's world x and y at each point."""
        eps = 1e-4
        base = self.project(points, ee_pose)
        return np.stack([(self.project(points + eps * np.eye(3)[k], ee_pose) - base) / eps for k in range(2)],
                        axis=2)


def estimator_loss(mean: torch.Tensor, log_var: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Squared error on every label (normalized units), plus the Gaussian NLL of the position's variance around the
    detached mean. With the NLL on the mean as well, the network learns to call a hard frame uncertain instead of
    learning to find the object (the variance scales the mean's gradient down): the position along the belt then
    stays at the data mean, with a large variance."""
    squared = ((mean - target) ** 2).sum(-1)
    nll = 0.5 * (log_var + (mean[:, POS].detach() - target[:, POS]) ** 2 * torch.exp(-log_var)).sum(-1)
    return (squared + nll).mean()


def object_locator(cfg) -> ObjectLocator:
    """The locator for a training config (`TrainCfg`): the keypoint is read only where it was trained to find the
    object, through the camera geometry it was trained with."""
    oc = cfg.object_centric
    if not oc.keypoint_weight or oc.perception == "tracking":
        return ObjectLocator(None)
    h, w = cfg.policy.image_size
    return ObjectLocator(CameraGeometry(oc.keypoint_world, cfg.policy.cameras[0], w, h))


class ActionHead(nn.Module):
    """`object_centric.head=l1`: normalized (tracked state | proprio) -> normalized action chunk (B, chunk,
    action_dim) by regression, an MLP with an L1 loss."""

    def __init__(self, in_dim: int, chunk: int, action_dim: int, hidden: int = 512, dropout: float = 0.1):
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, chunk * action_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).view(-1, self.chunk, self.action_dim)

    def loss(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return F.l1_loss(self(x), y)

    def predict(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self(x)


class FlowHead(nn.Module):
    """`object_centric.head=flow`: the same mapping by conditional flow matching, with the flow transformer's
    action decoder (`ActionFlow`, sized by `policy.dim`, `policy.heads`, `policy.action_layers` and
    `policy.flow_steps`) cross-attending to CONDITION_TOKENS tokens made from the normalized input. Where the L1
    head regresses to the median of what the demos did in a state, this head samples one of the ways they did it."""

    # Cross-attention to a single token adds the same vector to every step of the chunk; several tokens let each
    # step take its own mixture of the input, which the head on the closed-loop rung needed (docs/results.md).
    CONDITION_TOKENS = 8

    def __init__(self, in_dim: int, chunk: int, action_dim: int, dim: int, heads: int, layers: int, dropout: float,
                 flow_steps: int):
        super().__init__()
        self.chunk, self.action_dim, self.dim = chunk, action_dim, dim
        self.condition = nn.Sequential(nn.Linear(in_dim, dim), nn.GELU(), nn.Linear(dim, self.CONDITION_TOKENS * dim))
        self.condition_norm = nn.LayerNorm(dim)
        self.flow = ActionFlow(dim, heads, chunk, action_dim, layers, dropout, flow_steps)

    def memory(self, x: torch.Tensor) -> torch.Tensor:
        """The conditioning tokens (B, CONDITION_TOKENS, dim) of normalized inputs (B, in_dim)."""
        return self.condition_norm(self.condition(x).view(len(x), self.CONDITION_TOKENS, self.dim))

    def loss(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.flow.loss(self.memory(x), y, generator)

    def predict(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        noise = torch.randn((len(x), self.chunk, self.action_dim), generator=generator)
        return self.flow.sample(self.memory(x), noise)


@dataclass
class TrackerCfg:
    """Kalman filter tuning.

    An object riding the belt does not accelerate, so the process noise is small and a blind estimate (large
    variance) barely moves the state; an object picked up jumps away from the belt's path, so a confident estimate
    that the state cannot explain (its innovation beyond `gate` in squared Mahalanobis distance) restarts the
    filter there.
    """

    # White-noise acceleration (m/s^2) along the belt and across it (y, z): on the belt an object moves only along it.
    accel_std: tuple[float, float] = (0.01, 0.005)
    # Trust (m/s) in the initial velocity: the set-point along the belt, zero across it.
    velocity_prior_std: tuple[float, float] = (0.05, 0.005)
    min_var: float = 1e-6  # m^2: floor of the estimator's variance (no measurement is perfect)
    # An estimate less sure than this (m, on its worst axis) is not fused: the estimator's errors on frames it
    # cannot read are correlated from frame to frame (a bias, not noise), and averaging them converges on the bias.
    accept_std: float = 0.05
    gate: float = 16.3  # chi-square, 3 degrees of freedom, 99.9 %
    confident_std: float = 0.02  # m: an estimate this sure may restart the filter
    # Per step: how fast the yaw's average forgets older frames (the hand turns the object). The size and the bin
    # (the object's colour) cannot change within an episode, so their averages keep every frame: one that forgets
    # follows the estimator's misreadings of the object in the hand, and the head carries it to another bin.
    yaw_memory: float = 0.9
    # m: a frame where a point of the hand (`hand_points`) comes this close to the camera's line of sight to the
    # object adds nothing to the yaw, size and bin (given the camera's position; `object_centric.hand_cover`).
    cover_radius: float = 0.0


def hand_points(ee_pose: np.ndarray) -> np.ndarray:
    """(2, 3): the grasp site and the palm's mount at the wrist, of the hand's pose (7,: the grasp site's position,
    w,x,y,z). Between them lies the palm, the part of the hand that hides an object it closes on."""
    from r2s2r.cell.mjcf import GRASP_SITE_POS

    position = np.asarray(ee_pose[:3], dtype=float)
    return np.stack([position, position - quat_to_mat(np.asarray(ee_pose[3:7], dtype=float)) @ GRASP_SITE_POS])


def sight_distance(camera: np.ndarray, points: np.ndarray, target: np.ndarray) -> float:
    """The least distance (m) of `points` (K, 3) from the line of sight, the segment from `camera` (3,) to
    `target` (3,)."""
    sight = np.asarray(target, dtype=float) - camera
    along = np.clip((points - camera) @ sight / (sight @ sight), 0.0, 1.0)
    return float(np.min(np.linalg.norm(camera + along[:, None] * sight - points, axis=1)))


class BeltTracker:
    """Object state over time from per-frame estimates, carried along the belt through occlusion.

    With `belt_top` (the belt's top surface height in the camera's world; `object_centric.height_from_size`), a
    measured object whose regressed height is within RESTING_MARGIN of resting on the belt is moved along its ray
    (`drift`, from `ObjectLocator`) to where it rests: the belt's top plus the half height the tracker has fused
    over the episode. Through one oblique view the regressed height is biased per object, and a height error h
    moves the located point across the belt by about 0.8 h; the fused size is seen over every frame of the
    episode, which a single frame's size, misread while the arm hides the object, is not."""

    def __init__(self, dt: float, cfg: TrackerCfg | None = None, belt_top: float | None = None,
                 camera: np.ndarray | None = None):
        self.dt = dt
        self.cfg = cfg or TrackerCfg()
        self.belt_top = belt_top
        # The position (3,) of the fixed camera the measurements come through: with cfg.cover_radius, frames where
        # the hand covers the object keep the yaw, size and bin as they were.
        self.camera = None if camera is None else np.asarray(camera, dtype=float)
        self.covered = False  # whether the last update's frame was covered
        self.x: np.ndarray | None = None  # (6,) position | velocity
        self.P = np.zeros((6, 6))
        self.attributes = np.zeros(LABEL_DIM - 3)  # yaw features, size, bin position
        self.yaw_weight = self.constant_weight = 0.0
        along, across = self.cfg.accel_std
        q = np.diag([along**2, across**2, across**2])
        self.F = np.eye(6)
        self.F[:3, 3:] = dt * np.eye(3)
        self.Q = np.block([[q * dt**4 / 4, q * dt**3 / 2], [q * dt**3 / 2, q * dt**2]])

    def reset(self) -> None:
        self.x = None
        self.yaw_weight = self.constant_weight = 0.0

    def _start(self, position: np.ndarray, var: np.ndarray, velocity: np.ndarray, velocity_std: np.ndarray) -> None:
        self.x = np.concatenate([position, velocity])
        self.P = np.diag(np.concatenate([var, velocity_std**2]))

    def update(self, mean: np.ndarray, var: np.ndarray, setpoint: float, drift: np.ndarray | None = None,
               ee_pose: np.ndarray | None = None) -> np.ndarray:
        """Fuse one estimate (mean (11,) in metres, position variance (3,) m^2, its ray's horizontal drift (2,)
        per metre of height, needed with `belt_top`, and the hand's pose (7,) at the frame, needed with `camera`
        and cfg.cover_radius); returns the state (TRACKED_DIM,): position, velocity, position std, then the yaw
        features, size and bin position."""
        c = self.cfg
        var = np.maximum(var, c.min_var)
        self.covered = self.x is not None and self._hand_covers(ee_pose)
        if not self.covered:
            # Yaw, size and bin: averages weighted by how sure the estimator is where the object is; the yaw's
            # forgets old frames (TrackerCfg.yaw_memory).
            w = 1.0 / float(np.mean(var))
            self.yaw_weight = c.yaw_memory * self.yaw_weight + w
            self.constant_weight += w
            gain = np.full(len(self.attributes), w / self.constant_weight)
            gain[:YAW.stop - YAW.start] = w / self.yaw_weight
            self.attributes += gain * (mean[3:] - self.attributes)
        z = mean[POS].copy()
        if self.belt_top is not None:
            if drift is None:
                raise ValueError("BeltTracker.update: a tracker given belt_top needs each measurement's drift")
            resting = self.belt_top + self.attributes[SIZE.stop - 1 - POS.stop]  # the fused half height
            if z[2] < resting + RESTING_MARGIN:
                z[:2] += drift * (resting - z[2])
                z[2] = resting
        if self.x is None:  # the first frame, however unsure: its variance says how little it is worth
            along, across = c.velocity_prior_std
            self._start(z, var, np.array([setpoint, 0.0, 0.0]), np.array([along, across, across]))
        else:
            self.x = self.F @ self.x
            self.P = self.F @ self.P @ self.F.T + self.Q
            if np.sqrt(var.max()) <= c.accept_std:
                innovation = z - self.x[:3]
                S = self.P[:3, :3] + np.diag(var)
                if innovation @ np.linalg.solve(S, innovation) > c.gate and np.sqrt(var.max()) < c.confident_std:
                    self._start(z, var, np.zeros(3), np.full(3, 0.5))  # picked up: start over where it is seen
                else:
                    K = self.P[:, :3] @ np.linalg.inv(S)
                    self.x = self.x + K @ innovation
                    self.P = self.P - K @ self.P[:3, :]
        return np.concatenate([self.x, np.sqrt(np.diag(self.P)[:3]), self.attributes])

    def _hand_covers(self, ee_pose: np.ndarray | None) -> bool:
        """Whether the hand stands in the camera's line of sight to where the track has the object: the estimator
        then reads the hand, or the object turning in it, and a capsule's long axis a quarter turn off
        (docs/results.md)."""
        if self.camera is None or not self.cfg.cover_radius:
            return False
        if ee_pose is None:
            raise ValueError("BeltTracker.update: a tracker that skips covered frames needs each frame's ee_pose")
        return sight_distance(self.camera, hand_points(ee_pose), self.x[:3]) < self.cfg.cover_radius


def camera_tracker(control_hz: float, locator: ObjectLocator, belt_top: float | None = None,
                   hand_cover: float = 0.0) -> BeltTracker:
    """The tracker of camera perception through `locator`'s camera (`object_centric.height_from_size` gives
    `belt_top`, `object_centric.hand_cover` the cover radius). Covered frames are told only through a camera fixed
    to the world: one on the wrist sees the hand in the same place in every frame."""
    geometry = locator.geometry
    camera = None if geometry is None or geometry.on_hand else geometry.position
    return BeltTracker(1.0 / control_hz, TrackerCfg(cover_radius=hand_cover), belt_top, camera)


# The position std the head is given with `perception=tracking` (the cell's tracking taken as exact).
TRACKING_STD = 0.002  # m


def tracking_label(tracking: dict) -> np.ndarray:
    """(11,) estimator-layout label (`frame_labels`) of one observation's `tracking` group: object position, grasp-yaw
    features, half extents, bin position."""
    extents = np.asarray(tracking["object_half_extents"], dtype=float)
    yaw = grasp_yaw(np.asarray(tracking["object_quat"], dtype=float), extents)
    return np.concatenate([np.asarray(tracking["object_pos"], dtype=float), [np.cos(2 * yaw), np.sin(2 * yaw)],
                           extents, np.asarray(tracking["target_bin_pos"], dtype=float)])


class ExactTracker:
    """`BeltTracker`'s stand-in with `perception=tracking`: the cell's object state taken as exact, in the
    tracker's layout; the velocity a backward difference over one control period (0 at an episode's first step),
    the same in training (from the demos' stored poses) and at deployment."""

    def __init__(self, dt: float):
        self.dt = dt
        self.previous: np.ndarray | None = None

    def reset(self) -> None:
        self.previous = None

    def update(self, label: np.ndarray) -> np.ndarray:
        pos = np.asarray(label[POS], dtype=float)
        vel = np.zeros(3) if self.previous is None else (pos - self.previous) / self.dt
        self.previous = pos.copy()
        return np.concatenate([pos, vel, np.full(3, TRACKING_STD), label[YAW], label[SIZE], label[BIN]])


def head_input(tracked: np.ndarray, ee_pos: np.ndarray, proprio: np.ndarray) -> np.ndarray:
    """(…, STATE_DIM + P): the tracked state with positions made relative to the hand, the near-field offset
    (see NEAR_FIELD), then the head's proprio."""
    pos, rest = tracked[..., :3], tracked[..., 3:]
    vel, std, yaw, size, bin_pos = rest[..., :3], rest[..., 3:6], rest[..., 6:8], rest[..., 8:11], rest[..., 11:14]
    offset = pos - ee_pos
    return np.concatenate([offset, vel, std, yaw, size, bin_pos - ee_pos, near_field(offset), proprio],
                          axis=-1).astype(np.float32)


class ObjectCentricPolicy(nn.Module):
    """The estimator and the head with their normalization statistics (buffers, so a checkpoint carries them)."""

    def __init__(self, proprio_dim: int, action_dim: int, head: nn.Module, keypoints: int = 16,
                 attributes: str = "scene"):
        super().__init__()
        self.estimator = ObjectEstimator(keypoints, attributes=attributes)
        self.head = head  # ActionHead or FlowHead over STATE_DIM + proprio_dim inputs
        for name, dim in (("label", LABEL_DIM), ("input", STATE_DIM + proprio_dim), ("action", action_dim)):
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))

    @classmethod
    def from_cfg(cls, cfg, proprio_dim: int) -> ObjectCentricPolicy:
        """The policy a training config (`TrainCfg`) describes, untrained, with the head `object_centric.head`
        names."""
        p, oc = cfg.policy, cfg.object_centric
        in_dim = STATE_DIM + proprio_dim
        head = ActionHead(in_dim, p.chunk, p.action_dim, oc.hidden, oc.dropout) if oc.head == "l1" else \
            FlowHead(in_dim, p.chunk, p.action_dim, p.dim, p.heads, p.action_layers, oc.dropout, p.flow_steps)
        return cls(proprio_dim, p.action_dim, head, oc.keypoints, oc.attributes)

    def set_stats(self, name: str, mean: np.ndarray, std: np.ndarray) -> None:
        getattr(self, f"{name}_mean").copy_(torch.as_tensor(mean, dtype=torch.float32))
        getattr(self, f"{name}_std").copy_(torch.as_tensor(np.maximum(std, 1e-3), dtype=torch.float32))

    @torch.no_grad()
    def estimate(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """uint8 (B, H, W, 3) -> mean (B, 11) in metres, position variance (B, 3) in m^2, keypoint 0's pixel
        (B, 2) and its spread (B,) in pixels."""
        latent, logits = self.estimator.latent(to_unit(images))
        mean, log_var = self.estimator.outputs(latent)
        pixels, spread = keypoint_pixels(logits, images.shape[2], images.shape[1])
        std = self.label_std
        return ((mean * std + self.label_mean).numpy().astype(float),
                (torch.exp(log_var) * std[POS] ** 2).numpy().astype(float),
                pixels.numpy().astype(float), spread.numpy().astype(float))

    @torch.no_grad()
    def act_chunk(self, inputs: np.ndarray, generator: torch.Generator | None = None) -> np.ndarray:
        """Head inputs (B, D) -> actions (B, chunk, action_dim), positions still relative to the anchor; a flow
        head draws its noise from `generator`."""
        x = (torch.from_numpy(inputs) - self.input_mean) / self.input_std
        return (self.head.predict(x, generator) * self.action_std + self.action_mean).numpy().astype(float)


def belt_top(cell) -> float:
    """The belt's top surface height (m) of a cell description (`r2s2r.cell.spec`)."""
    return float(cell.belt.center[2])


def world_belt_top(oc) -> float:
    """The belt's top surface height (m) in the calibrated world of `oc` (ObjectCentricCfg.keypoint_world)."""
    from r2s2r.cell.world import load_world

    return belt_top(load_world(oc.keypoint_world).cell)


def phased_belt_top(oc) -> float | None:
    """The belt height a phased action frame (PHASED_FRAMES) tells a lifted object by; None for the frames that
    need none."""
    return world_belt_top(oc) if oc.action_frame in PHASED_FRAMES else None


def resting_belt_top(oc) -> float | None:
    """The belt height the tracker places a resting object on (`BeltTracker`, object_centric.height_from_size);
    None when the regressed height is kept."""
    return world_belt_top(oc) if oc.height_from_size and oc.perception == "camera" else None


def carried(tracked: np.ndarray, belt_top: float) -> np.ndarray:
    """(…,) whether the tracked object is lifted off the belt: its centre more than RESTING_MARGIN above where it
    rests (the belt's top plus its half height)."""
    return tracked[..., 2] > belt_top + tracked[..., TRACKED_HALF_HEIGHT] + RESTING_MARGIN


def action_anchor(frame: str, tracked: np.ndarray, ee_pos: np.ndarray,
                  belt_top: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(…, 3): the point a chunk's target positions are relative to, and (…,) whether that point is the hand (a
    displaced hand then displaces the targets with it, `hand_shift`). `frame` is one of ACTION_FRAMES, as
    `ObjectCentricCfg.validate` checks at the config:

    - `hand`: the hand's position at the chunk's start (the default).
    - `object`: the tracked object's position then, so a head that predicts the typical offset for the phase of the
      grasp follows the object wherever the hand is. Once the object is in the hand its tracked position moves with
      every command, and the targets with it.
    - `hand_bin` and `object_bin`: by the task's phase. The hand's (or the tracked object's) position while the
      object is on the belt, for the approach and the grasp; once it is lifted (`carried`, which needs `belt_top`),
      the tracked bin of its colour, so the carry and the release are learned where they end, whichever bin that
      is, and a held object no longer moves the targets.

    docs/results.md compares them on the twin."""
    on_belt = frame.removesuffix("_bin")
    anchor, hand = (ee_pos, np.ones(np.shape(ee_pos)[:-1], bool)) if on_belt == "hand" else \
        (tracked[..., :3], np.zeros(np.shape(ee_pos)[:-1], bool))
    if on_belt == frame:
        return anchor, hand
    if belt_top is None:
        raise ValueError(f"action_anchor: the {frame!r} frame needs the belt's top height (belt_top)")
    lifted = carried(tracked, belt_top)
    return np.where(lifted[..., None], tracked[..., TRACKED_BIN], anchor), hand & ~lifted


def relative_actions(actions: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Chunks (…, chunk, A) with target positions relative to the anchor at the chunk's start (…, 3)."""
    out = actions.copy()
    out[..., :3] -= anchor[..., None, :]
    return out


class ObjectCentricAgent:
    """Deploys an `ObjectCentricPolicy`: every control step the estimator looks and the tracker fuses; the head plans
    a chunk from the tracked state, its positions relative to `action_frame`'s anchor, whenever the chunk executor
    wants one (every `policy.execute` steps, or every step with `policy.ensemble`)."""

    def __init__(self, policy: ObjectCentricPolicy, cfg, locator: ObjectLocator, control_hz: float,
                 name: str = "policy", threads: int | None = 1, action_frame: str = "hand",
                 perception: str = "camera", belt_top: float | None = None,
                 resting_belt_top: float | None = None, hand_cover: float = 0.0):
        if threads:
            torch.set_num_threads(threads)
        self.policy = policy.eval()
        self.cfg = cfg  # PolicyCfg
        self.locator = locator
        self.name = name
        self.action_frame = action_frame
        self.belt_top = belt_top  # where a `*_bin` frame tells an object on the belt from one in the hand
        # With `perception=tracking` the agent reads the cell's `tracking` group (a diagnostic; see ObjectCentricCfg).
        self.uses_tracking = perception == "tracking"
        self.tracker = ExactTracker(1.0 / control_hz) if self.uses_tracking else \
            camera_tracker(control_hz, locator, resting_belt_top, hand_cover)
        self.tracked: np.ndarray | None = None  # the tracker's state at the last step (`BeltTracker.update`)
        # The last frame's own measurement (11,) and position variance (3,), before the tracker (camera perception).
        self.measured: tuple[np.ndarray, np.ndarray] | None = None
        self.chunks = ActionChunks(cfg.execute, cfg.ensemble)
        self.generator = torch.Generator().manual_seed(0)  # a flow head's noise; an L1 head draws nothing

    @property
    def env_overrides(self) -> dict:
        return {"cameras": tuple(self.cfg.cameras), "image_size": tuple(self.cfg.image_size)}

    def reset(self, seed: int | None = None) -> None:
        self.generator.manual_seed(0 if seed is None else seed)
        self.tracker.reset()
        self.tracked = self.measured = None
        self.chunks.reset()

    def act(self, obs: dict) -> np.ndarray:
        missing = [k for k in HEAD_PROPRIO if k not in obs["proprio"]]
        if missing:
            raise ValueError(f"{self.name}: the observation's proprio lacks {missing}; the policy needs "
                             f"{list(HEAD_PROPRIO)}")
        proprio = np.concatenate([np.asarray(obs["proprio"][k], dtype=float).ravel() for k in HEAD_PROPRIO])
        if self.uses_tracking:
            if "tracking" not in obs:
                raise ValueError(f"{self.name}: the policy reads the cell's object tracking "
                                 "(object_centric.perception = 'tracking'); the observation has no 'tracking' group")
            tracked = self.tracker.update(tracking_label(obs["tracking"]))
        else:
            frame = obs.get("images", {}).get(self.cfg.cameras[0])
            if frame is None or frame.shape[:2] != tuple(self.cfg.image_size):
                raise ValueError(f"{self.name}: the policy observes camera {self.cfg.cameras[0]!r} at "
                                 f"{list(self.cfg.image_size)} pixels; the observation has "
                                 f"{ {k: list(v.shape[:2]) for k, v in obs.get('images', {}).items()} }")
            mean, var, drift = self.locator(*self.policy.estimate(np.ascontiguousarray(frame)[None]),
                                            proprio[None, EE_POSE])
            self.measured = mean[0], var[0]
            tracked = self.tracker.update(mean[0], var[0], float(proprio[SETPOINT]), drift[0], proprio[EE_POSE])
        self.tracked = tracked
        if self.chunks.wants_chunk:
            ee = proprio[EE_POS]
            chunk = self.policy.act_chunk(head_input(tracked, ee, proprio)[None], self.generator)[0]
            chunk[:, :3] += action_anchor(self.action_frame, tracked, ee, self.belt_top)[0]
            self.chunks.add(chunk)
        return self.chunks.next()

    def __call__(self, obs: dict) -> np.ndarray:
        return self.act(obs)
