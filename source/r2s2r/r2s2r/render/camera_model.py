"""A real camera, applied in image space to an ideal pinhole render.

The renderer draws a pinhole image with a centred principal point and square pixels (`render_width` x
`render_height`, vertical field of view `render_fovy_deg`); `CameraModel.apply` warps it into the image the
lens in `LensCfg` would form (intrinsics, fisheye distortion) and then adds blur, exposure and sensor noise.
The warp is a fixed table built once (`map_x`, `map_y`: source pixel of each output pixel), so applying the
model costs one bilinear `cv2.remap` and one nearest-neighbour gather per frame.

Conventions:
- Pixel coordinates follow OpenCV: the centre of column j / row i is (u, v) = (j, i). A symmetric OpenGL
  frustum therefore puts the source principal point at ((w - 1) / 2, (h - 1) / 2) and its focal length at
  (h / 2) / tan(fovy / 2) pixels (`source_intrinsic_matrix`).
- Images are stored top row first (MuJoCo's bottom-up buffer must be flipped before `apply`).
- `project` and the intrinsics use the OpenCV camera frame (looks along +z, +y is image down, +x right).
  MuJoCo/OpenGL cameras look along -z with +y up, so an OpenGL camera-frame point (X, Y, Z) is the OpenCV
  point (X, -Y, -Z).
- Depth is distance along the optical axis. The real and the source camera share their centre and axis, so
  a point's depth is the same in both and depth is only resampled, never recomputed.

Field limit: a single pinhole render cannot hold rays at or beyond 90 degrees from the axis, and it wastes
resolution on the centre long before that. Rays more than `MAX_RAY_ANGLE_DEG` off axis (a fisheye wider
than 160 degrees) are therefore not rendered: those output pixels are "outside" and read rgb 0 and depth 0
(`valid_mask` is False there). A fisheye whose distortion polynomial folds back (theta_d stops increasing)
is cut at the fold for the same reason.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from r2s2r.cell.spec import LensCfg, fisheye_angle, fisheye_slope, fov_from_focal, intrinsics_in_pixels
from r2s2r.core import ConfigError

MAX_RESOLUTION = 4096
MAX_RAY_ANGLE_DEG = 80.0
BLUR_REFERENCE_WIDTH = 128  # LensCfg.blur_sigma is given in pixels at this image width
_OUTSIDE = -100.0  # source coordinate for outside pixels: far enough out that remap returns the border (0)


class CameraModel:
    """The image-formation model of one camera at one output resolution.

    `supersample` renders the source at that multiple of the output size. Wide fisheyes need it to keep
    detail at the image centre, where a pinhole render that covers the whole field is sparsest; it costs
    renderer time, so it is off by default.
    """

    def __init__(self, lens: LensCfg, width: int, height: int, margin_deg: float = 2.0, *, supersample: int = 1):
        _check_resolution(width, height)
        if not 0.0 <= margin_deg <= 10.0:
            raise ConfigError(f"margin_deg = {margin_deg!r}: expected a margin in [0, 10] degrees")
        if isinstance(supersample, bool) or not isinstance(supersample, (int, np.integer)) or not 1 <= supersample <= 8:
            raise ConfigError(f"supersample = {supersample!r}: expected an integer in [1, 8]")
        self.lens = lens
        self.width, self.height = int(width), int(height)
        self.render_width, self.render_height = self.width * int(supersample), self.height * int(supersample)
        if max(self.render_width, self.render_height) > MAX_RESOLUTION:
            raise ConfigError(f"resolution = {(self.render_width, self.render_height)!r} after supersampling: "
                              f"expected at most {MAX_RESOLUTION} pixels per side")
        self._fisheye = lens.model == "fisheye"
        self._fx, self._fy, self._cx, self._cy = intrinsics_in_pixels(lens.fx, lens.fy, lens.cx, lens.cy, self.width,
                                                                      self.height)
        self._k = np.array(lens.distortion if self._fisheye else (0.0,) * 4, dtype=np.float64)
        self.max_ray_angle = self._usable_angle()

        u, v = np.meshgrid(np.arange(self.width, dtype=np.float64), np.arange(self.height, dtype=np.float64))
        x, y, valid = self.unproject(u, v)
        self.valid_mask = valid

        # Smallest centred source frustum holding every valid ray plus the margin; the half-pixel of the
        # outermost sample is kept inside so bilinear taps never reach the border.
        margin = math.radians(margin_deg)
        cap = math.radians(89.0)
        half_x = min(math.atan(float(np.abs(x[valid]).max())) + margin, cap)
        half_y = min(math.atan(float(np.abs(y[valid]).max())) + margin, cap)
        w_s, h_s = self.render_width, self.render_height
        reach_x, reach_y = max(w_s - 1, 1) / 2, max(h_s - 1, 1) / 2  # a 1-pixel side still needs a focal length
        self._f_src = min(reach_x / max(math.tan(half_x), 1e-6), reach_y / max(math.tan(half_y), 1e-6))
        self.render_fovy_deg = fov_from_focal(self._f_src / h_s)
        cx_s, cy_s = (w_s - 1) / 2, (h_s - 1) / 2

        self.map_x = np.where(valid, self._f_src * x + cx_s, _OUTSIDE).astype(np.float32)
        self.map_y = np.where(valid, self._f_src * y + cy_s, _OUTSIDE).astype(np.float32)
        col = np.clip(np.floor(self.map_x + 0.5).astype(np.int64), 0, w_s - 1)
        row = np.clip(np.floor(self.map_y + 0.5).astype(np.int64), 0, h_s - 1)
        self._depth_index = (row * w_s + col).ravel()
        self._has_outside = not bool(valid.all())
        # Full-size masks: broadcasting a (H, W, 1) mask or assigning through indices costs several times more.
        self._inside_rgb = np.repeat(valid[:, :, None], 3, axis=2).astype(np.float32)
        self._outside = ~valid.ravel()
        self.blur_sigma_px = lens.blur_sigma * self.width / BLUR_REFERENCE_WIDTH

    # ----------------------------------------------------------------------------------------------------------
    # Lens geometry
    # ----------------------------------------------------------------------------------------------------------
    def intrinsic_matrix(self) -> np.ndarray:
        """3x3 camera matrix K of the output image, in pixels (OpenCV convention, no skew)."""
        return np.array([[self._fx, 0.0, self._cx], [0.0, self._fy, self._cy], [0.0, 0.0, 1.0]])

    def distortion_coeffs(self) -> np.ndarray:
        """Kannala-Brandt (k1, k2, k3, k4) as `cv2.fisheye` takes them; zeros for a pinhole lens."""
        return self._k.copy()

    def source_intrinsic_matrix(self) -> np.ndarray:
        """3x3 camera matrix of the pinhole render that `apply` expects, in its own pixels."""
        cx_s, cy_s = (self.render_width - 1) / 2, (self.render_height - 1) / 2
        return np.array([[self._f_src, 0.0, cx_s], [0.0, self._f_src, cy_s], [0.0, 0.0, 1.0]])

    def project(self, points_cv: np.ndarray) -> np.ndarray:
        """Pixel coordinates (u, v) at the output resolution of (N, 3) points in the OpenCV camera frame.

        Equal to `cv2.fisheye.projectPoints` / `cv2.projectPoints` for points in front of the camera. The fisheye
        measures theta from the axis with atan2, so it also places points at or behind 90 degrees; a pinhole
        gives NaN for points with z <= 0. Points beyond `max_ray_angle` land where the lens would put them,
        on pixels that `apply` leaves outside.
        """
        p = np.asarray(points_cv, dtype=np.float64)
        if p.ndim != 2 or p.shape[1] != 3:
            raise ConfigError(f"points_cv shape = {p.shape!r}: expected (N, 3)")
        X, Y, Z = p[:, 0], p[:, 1], p[:, 2]
        if self._fisheye:
            r = np.hypot(X, Y)
            theta_d = fisheye_angle(np.arctan2(r, Z), self._k)
            scale = np.divide(theta_d, r, out=np.zeros_like(r), where=r > 0)
            xd, yd = X * scale, Y * scale
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                front = Z > 0
                xd = np.where(front, X / Z, np.nan)
                yd = np.where(front, Y / Z, np.nan)
        return np.stack([self._fx * xd + self._cx, self._fy * yd + self._cy], axis=1)

    def _usable_angle(self) -> float:
        theta_max = math.radians(MAX_RAY_ANGLE_DEG)
        if not self._fisheye:
            return theta_max
        grid = np.linspace(0.0, theta_max, 4001)
        # The slope is 1 on the axis, so a fold lies off it; `LensCfg.validate` keeps it beyond 45 degrees.
        folded = np.flatnonzero(fisheye_slope(grid, self._k) <= 1e-6)
        if folded.size:  # beyond the fold one image point has two rays; keep the single-valued part
            theta_max = float(grid[folded[0] - 1])
        return theta_max

    def unproject(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Normalised pinhole coordinates (x, y) of the ray through each pixel (OpenCV camera frame, the inverse of
        `project`), and whether it is rendered."""
        a = (u - self._cx) / self._fx
        b = (v - self._cy) / self._fy
        if not self._fisheye:
            return a, b, np.arctan(np.hypot(a, b)) <= self.max_ray_angle
        theta_d = np.hypot(a, b)
        valid = theta_d <= fisheye_angle(np.float64(self.max_ray_angle), self._k)
        # A dense table of the monotone forward model gives a start close enough for Newton to finish in a
        # few steps, however strong the distortion.
        grid = np.linspace(0.0, self.max_ray_angle, 2049)
        theta = np.interp(np.minimum(theta_d, fisheye_angle(grid[-1], self._k)), fisheye_angle(grid, self._k), grid)
        for _ in range(4):
            theta = np.clip(theta - (fisheye_angle(theta, self._k) - theta_d) / fisheye_slope(theta, self._k),
                            0.0, self.max_ray_angle)
        scale = np.divide(np.tan(theta), theta_d, out=np.ones_like(theta_d), where=theta_d > 1e-12)
        return a * scale, b * scale, valid

    # ----------------------------------------------------------------------------------------------------------
    # Image formation
    # ----------------------------------------------------------------------------------------------------------
    def apply(self, rgb: np.ndarray, depth: np.ndarray | None,
              rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Warp a pinhole render through the lens and sensor.

        rgb: (render_height, render_width, 3) uint8, or (N, ...) for a batch. depth: matching (render_height,
        render_width) or (N, ...) metres along the optical axis, or None. Returns rgb (height, width, 3) uint8
        and depth (height, width) float32 (with the same leading batch dimension), 0 outside the lens' field.
        Noise is drawn from `rng`, in batch order, so a batch equals the same frames applied one by one.
        """
        rgb = np.asarray(rgb)
        src = (self.render_height, self.render_width)
        if rgb.ndim not in (3, 4) or rgb.shape[-3:] != (*src, 3) or rgb.dtype != np.uint8:
            raise ConfigError(f"rgb shape = {rgb.shape!r} dtype {rgb.dtype}: expected uint8 {(*src, 3)!r} "
                              "(render_height, render_width, 3), optionally with a leading batch dimension")
        batch = rgb.shape[:-3]
        frames = rgb.reshape(-1, *src, 3)
        depth_out = None if depth is None else self._resample_depth(depth, batch)

        out = np.empty((len(frames), self.height, self.width, 3), dtype=np.uint8)
        for frame, dst in zip(frames, out):
            # Float maps: OpenCV 5 samples them exactly (tested); fixed-point maps (cv2.convertMaps) are faster but
            # snap positions to 1/32 source pixel, which a fisheye's magnification makes a visible shift.
            cv2.remap(frame, self.map_x, self.map_y, cv2.INTER_LINEAR, dst=dst,
                      borderMode=cv2.BORDER_CONSTANT, borderValue=0)

        lens = self.lens
        blur = self.blur_sigma_px >= 0.05  # below this the kernel's side taps are < 1e-80: a no-op
        noisy = rng is not None and lens.noise_std > 0
        if blur or lens.exposure != 1.0 or noisy:
            img = out.astype(np.float32)
            if blur:
                for frame in img:
                    cv2.GaussianBlur(frame, (0, 0), self.blur_sigma_px, dst=frame, borderType=cv2.BORDER_REFLECT)
            if lens.exposure != 1.0:
                img *= np.float32(lens.exposure)
            if noisy:
                img += rng.standard_normal(img.shape, dtype=np.float32) * np.float32(255.0 * lens.noise_std)
            if self._has_outside:  # blur and noise must not light up pixels the lens does not see
                img *= self._inside_rgb
            np.clip(img, 0.0, 255.0, out=img)
            np.rint(img, out=img)
            out = img.astype(np.uint8)
        return out.reshape(*batch, self.height, self.width, 3), depth_out

    def _resample_depth(self, depth: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
        depth = np.asarray(depth)
        src = (self.render_height, self.render_width)
        if depth.shape != (*batch, *src):
            raise ConfigError(f"depth shape = {depth.shape!r}: expected {(*batch, *src)!r} "
                              "(render_height, render_width) with the same batch dimension as rgb")
        # Nearest neighbour: a blend of foreground and background depth is a surface that does not exist.
        out = depth.reshape(-1, src[0] * src[1]).astype(np.float32, copy=False)[:, self._depth_index]
        if self._has_outside:  # assigned, not multiplied: an infinite depth times 0 is NaN
            np.copyto(out, 0.0, where=self._outside)
        return out.reshape(*batch, self.height, self.width)


def _check_resolution(width: object, height: object) -> None:
    def ok(n: object) -> bool:
        return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and 0 < n <= MAX_RESOLUTION

    if not (ok(width) and ok(height)):
        raise ConfigError(f"resolution = {(width, height)!r}: expected (width, height) integers in [1, {MAX_RESOLUTION}]")
