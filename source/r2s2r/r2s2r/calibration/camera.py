"""Camera calibration from chessboard images: intrinsics, distortion, head extrinsics, blur and exposure.

Corners. `cv2.findChessboardCornersSB` finds the board (a view where something hides part of it is dropped: the
squares around every corner must alternate); under strong blur it looks at a Wiener-deconvolved copy, whose corners
serve only as a start. The corners are then re-measured from the board's edges, which carry
far more of the image than the neighbourhood of a corner: every inner grid line is an edge whose side colours
alternate square by square. Intensity profiles are taken across each line between the corners, and each profile is
fitted with the chessboard it crosses, blurred by a Gaussian of free width: the edge, the parallel edges one square
away on either side (their leak into a blurred profile is unequal when perspective or a fisheye makes the two
squares unequal, and would pull a lone-step estimate toward the narrower one) and, beyond an outer line's outer
square, the white margin; clipped samples carry no weight. The blur is fitted per profile, then held at each
line's median while the profiles are fitted again (a blur that spans much of a square otherwise trades off against
the contrast). Each line is a straight line through its edge positions, or a quadratic where the edges are clearly
curved (the image of a straight line through a fisheye, which a quadratic follows closely over one board), with an
offset between the two edge polarities left out (dark squares that look larger or smaller than light ones:
blooming, clipped highlights). Each corner is the intersection of its row and
column lines. Averaging along whole lines suppresses what disturbs single corners: sensor noise, and the staircase of
an image rendered without anti-aliasing. Corners are listed in OpenCV's row-major order, starting from the grid
corner nearest the image's top-left, so two images of the board from similar viewpoints list the same physical
corners in the same order. A corner beside a square that spans too few blur widths is not measurable (the blurred
edges on either side merge); whole-board uses need every corner, the intrinsics take the measurable ones of a view
where at least half are.

Intrinsics. `cv2.calibrateCamera` with every distortion term held at zero (the pinhole model has none), or
`cv2.fisheye.calibrate` (Kannala-Brandt) with zero skew and k3 = k4 = 0: over the field a hand-held board covers,
k3 and k4 trade off against k1, k2 and the focal length, and at corner noise of a few tenths of a pixel freeing them
makes every parameter worse (our lenses' higher terms are below 0.002). Views whose reprojection error stands out
from the rest are dropped one at a time and the fit repeated; then corners far off the fit are dropped and the fit
repeated once.

Extrinsics. The board's pose in the camera (`cv2.solvePnP`, IPPE then Levenberg-Marquardt, on undistorted
normalised points) composed with its surveyed world pose. A board with an odd number of squares each way looks the
same turned half a turn or seen from behind, so of the four poses that fit, the one with the printed face toward
the camera and the camera's up axis closest to world up is kept.

Blur. The edge fits measure each edge's width; the images' median width is matched by blurring blur-free
reference images of the same camera until their median width is the same, so the width that the renderer and lens
give an unblurred image (resampling, a fisheye's magnification) is accounted for whatever its shape.

Exposure. Image and reference are brought to the same blur (the sharper one blurred to the other's edge width),
then the centres of the board's squares are compared square by square, leaving out squares clipped in either.

Conventions are those of `r2s2r.render.camera_model`: pixel centres at integer coordinates (OpenCV), intrinsics
normalised as in `LensCfg` (fx, cx by the image width; fy, cy by its height), camera poses in the world frame in
MuJoCo's camera convention (the camera looks along its -z with +y up), roll-pitch-yaw with R = Rz @ Ry @ Rx. Blur is
in pixels at `BLUR_REFERENCE_WIDTH` (128 px) image width, exposure a linear gain.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import cv2
import numpy as np
from scipy.special import ndtr

from r2s2r.calibration import CalibrationError
from r2s2r.cell.spec import BOARD_CARD_DEPTH, BoardCfg, intrinsics_in_pixels, normalised_intrinsics
from r2s2r.geometry import mat_to_rpy, rpy_to_mat
from r2s2r.render.camera_model import BLUR_REFERENCE_WIDTH

MODELS = ("pinhole", "fisheye")

# Edge sampling, in units of the local square size: profiles reach this far either side of a line and keep this
# far from the corners at each end of a segment, where the crossing edge meets the line.
PROFILE_REACH = 0.6
PROFILE_SAMPLES = 41
PROFILE_SPACING_PX = 1.0  # between profiles along a line
CORNER_CLEARANCE = 0.2
RIM_CLEARANCE = 0.6  # from the board's rim, at the outer end of each line
LINE_DEGREE = 2
CURVATURE_F_TEST = 25.0  # F statistic above which a line is fitted curved (a fisheye image) rather than straight
MAX_LINE_PASSES = 4  # passes over all lines; each line's profiles are fitted around its current position
LINE_TOLERANCE_PX = 0.02  # stop once no line moves further than this at a corner
BLUR_SETTLED = 1e-3  # a blur correction smaller than this fraction ends estimate_blur's corrections
MAX_GAUSS_NEWTON_STEPS = 12  # per profile fit; it stops once edges and widths settle
SATURATED = 254.0  # profile samples at or above this (8-bit) are left out of the fits: the sensor clipped them
# View rejection (pinhole): a view is dropped when its RMS exceeds both this multiple of the median view RMS and the
# floor.
VIEW_OUTLIER_FACTOR = 2.0
VIEW_OUTLIER_FLOOR_PX = 0.1
# Detection under blur: Wiener deconvolution by Gaussians of these sigmas (px at `BLUR_REFERENCE_WIDTH`, spanning
# the blur the sampled truths' lenses reach) at this signal-to-noise power ratio. A strongly blurred wrist fisheye
# hides the pattern from the plain detector in most views; the deconvolved copy shows it again.
DECONVOLUTION_SIGMAS = (0.75, 1.25, 1.75, 2.25)
DECONVOLUTION_SNR = 1000.0
# A corner is measurable where every square beside it spans at least this many edge widths (blur sigmas): below,
# the blurred edges on either side of a square merge and pull the lines toward each other, moving the corner by
# pixels rather than tenths of one.
MIN_SQUARE_WIDTHS = 2.2
# A corner whose reprojection error exceeds this multiple of the median corner's, and the floor, is left out and the
# fit repeated. Blurred fisheyes have a tail of corners off by pixels where a line was pulled by merging edges; left
# in, they dominate the residual the intrinsics' self-check compares with its noise floor. The floor keeps a sharp
# lens's corners however small its median: there the few beyond the factor are noise, not pulled lines.
CORNER_OUTLIER_FACTOR = 5.0
CORNER_OUTLIER_FLOOR_PX = 0.5
MIN_MEASURABLE = 0.5  # fraction of corners a view must have measurable to be used at all
# A corner whose surrounding squares' contrast is below this fraction of the board's median is not seen.
PATTERN_CONTRAST = 0.35
_SQRT_2PI = float(np.sqrt(2.0 * np.pi))
_CACHE_SIZE = 256  # board measurements kept, keyed by image content (estimators often see the same images twice)


@dataclass(frozen=True)
class IntrinsicsEstimate:
    """Estimated intrinsics of one camera, normalised exactly as `LensCfg`.

    `rms_px` is the RMS reprojection error (2-D distance) over the corners of the views used, in pixels at the
    calibration resolution. `views_rejected` counts views where the board was not found plus views dropped as
    outliers; `corners_dropped` the corners of used views left out as outliers.
    """

    model: str
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: tuple[float, float, float, float]
    rms_px: float
    views_used: int
    views_rejected: int
    width: int
    height: int
    corners_dropped: int = 0

    def camera_matrix(self) -> np.ndarray:
        """3x3 camera matrix K in pixels at (`width`, `height`)."""
        fx, fy, cx, cy = intrinsics_in_pixels(self.fx, self.fy, self.cx, self.cy, self.width, self.height)
        return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


# ----------------------------------------------------------------------------------------------------------------
# Corners and edges
# ----------------------------------------------------------------------------------------------------------------
def find_corners(image: np.ndarray, board: BoardCfg) -> np.ndarray | None:
    """Inner corners of `board` in `image`, or None when the whole board is not found.

    Args:
        image: (H, W, 3) RGB or (H, W) grey image, uint8 or float in [0, 255].
        board: the chessboard.

    Returns:
        (N, 2) float64 pixel coordinates (u, v), N = columns x rows of inner corners, row-major (OpenCV order),
        starting at the grid corner nearest the image's top-left.
    """
    found = _board_edges(image, board)
    return found.corners.copy() if found is not None and found.measurable.all() else None


@dataclass
class _Line:
    """One inner grid line as a curve b(a) in its chord frame, and the corner parameter tau -> a."""

    origin: np.ndarray
    ex: np.ndarray
    ey: np.ndarray
    curve: np.ndarray  # polynomial coefficients of b(a), lowest first
    param: np.ndarray  # polynomial coefficients of a(tau); corners sit at tau = 0 .. count - 1
    count: int  # corners on the line

    def point(self, a: np.ndarray) -> np.ndarray:
        b = np.polynomial.polynomial.polyval(a, self.curve)
        return self.origin + np.multiply.outer(a, self.ex) + np.multiply.outer(b, self.ey)

    def normal(self, a: np.ndarray) -> np.ndarray:
        db = np.polynomial.polynomial.polyval(a, np.polynomial.polynomial.polyder(self.curve))
        t = self.ex + np.multiply.outer(db, self.ey)
        t /= np.linalg.norm(t, axis=-1, keepdims=True)
        return np.stack([-t[..., 1], t[..., 0]], axis=-1)


@dataclass
class _Board:
    """What one image shows of the board: corners, the fitted grid lines and the widths of its edges."""

    corners: np.ndarray
    rows: list[_Line]
    cols: list[_Line]
    widths: np.ndarray  # blur sigma (px) of every usable edge profile in the last pass
    measurable: np.ndarray  # per corner: every square beside it spans at least MIN_SQUARE_WIDTHS blur widths


_cache: OrderedDict[tuple, _Board | None] = OrderedDict()


def _board_edges(image: np.ndarray, board: BoardCfg) -> _Board | None:
    """Detect and measure the board in `image` (cached by the image's content)."""
    img = np.ascontiguousarray(image)
    key = (hashlib.blake2b(img.tobytes(), digest_size=16).digest(), img.shape, img.dtype.str, board.squares)
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    gray = _gray(img)
    grid = (board.inner_corners[1], board.inner_corners[0])
    result = None
    corners = _detect(gray, board.inner_corners)
    if corners is not None:
        corners = _canonical_order(corners, grid)
        if _pattern_intact(gray, corners, grid):
            result = _refine_on_edges(gray, corners, grid)
        if result is not None and result.measurable.mean() < MIN_MEASURABLE:
            result = None
    _cache[key] = result
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return result


def _gray(image: np.ndarray) -> np.ndarray:
    img = np.asarray(image)
    if img.ndim == 3 and img.shape[2] == 3:
        img = img.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    elif img.ndim != 2:
        raise CalibrationError(f"image shape = {img.shape!r}: expected (H, W, 3) RGB or (H, W) grey")
    return np.ascontiguousarray(img, dtype=np.float32)


def _detect(gray: np.ndarray, pattern: tuple[int, int]) -> np.ndarray | None:
    """The detector's corners, or None. Cheap settings first; blur and strong distortion need the others."""
    g8 = np.clip(np.rint(gray), 0, 255).astype(np.uint8)
    ok, c = cv2.findChessboardCornersSB(g8, pattern, flags=0)
    if ok:
        return c.reshape(-1, 2).astype(np.float64)
    # Half resolution: squares that a magnified, blurred image spreads over many pixels look crisp again.
    half = cv2.resize(g8, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    ok, c = cv2.findChessboardCornersSB(half, pattern, flags=cv2.CALIB_CB_EXHAUSTIVE)
    if ok:
        return c.reshape(-1, 2).astype(np.float64) * 2.0 + 0.5  # pixel centres: full = 2 * half + 0.5
    ok, c = cv2.findChessboardCornersSB(g8, pattern, flags=cv2.CALIB_CB_EXHAUSTIVE | cv2.CALIB_CB_ACCURACY)
    if ok:
        return c.reshape(-1, 2).astype(np.float64)
    # A lens blurred to a large fraction of a square: the detector looks at a sharpened copy (the corners it gives
    # are only a start; the edge fits then measure the blurred image itself). The blur is not known yet, so
    # deconvolution tries widths across the range lenses show, narrowest first.
    spectrum = np.fft.rfft2(gray)
    freq2 = np.add.outer(np.fft.fftfreq(gray.shape[0]) ** 2, np.fft.rfftfreq(gray.shape[1]) ** 2)
    for sigma in DECONVOLUTION_SIGMAS:
        otf = np.exp(-2.0 * np.pi ** 2 * (sigma * gray.shape[1] / BLUR_REFERENCE_WIDTH) ** 2 * freq2)
        sharp = np.fft.irfft2(spectrum * otf / (otf ** 2 + 1.0 / DECONVOLUTION_SNR), s=gray.shape)
        ok, c = cv2.findChessboardCornersSB(np.clip(np.rint(sharp), 0, 255).astype(np.uint8), pattern,
                                            flags=cv2.CALIB_CB_EXHAUSTIVE)
        if ok:
            return c.reshape(-1, 2).astype(np.float64)
    return None


def _pattern_intact(gray: np.ndarray, corners: np.ndarray, grid: tuple[int, int]) -> bool:
    """Whether every corner has the chessboard around it: light and dark squares alternating, with contrast.

    The detector completes a board whose squares are partly hidden (an arm or a hand in front of it) by
    interpolation; the squares around a hidden corner then do not alternate, and the view is not used.
    """
    c = corners.reshape(*grid, 2)
    # The outer squares' far corners, continued from the grid; only the squares' centres are sampled there.
    c = np.concatenate([2 * c[:1] - c[1:2], c, 2 * c[-1:] - c[-2:-1]], axis=0)
    c = np.concatenate([2 * c[:, :1] - c[:, 1:2], c, 2 * c[:, -1:] - c[:, -2:-1]], axis=1)
    squares, _ = _cell_centres(gray, c.reshape(-1, 2), (grid[0] + 2, grid[1] + 2))
    s = squares.reshape(grid[0] + 1, grid[1] + 1)
    # Around each inner corner: diagonal pairs of squares share a colour; their difference is the contrast.
    swing = (s[:-1, :-1] + s[1:, 1:] - s[:-1, 1:] - s[1:, :-1]) / 2
    parity = (-1.0) ** np.add.outer(np.arange(grid[0]), np.arange(grid[1]))
    signed = swing * parity * np.sign(np.median(swing * parity))
    return bool(np.all(signed > PATTERN_CONTRAST * np.median(np.abs(swing))))


def _canonical_order(corners: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Reorder the grid (a symmetric board has four valid orders) to start at its corner nearest the top-left."""
    g = corners.reshape(*grid, 2)
    candidates = (g, g[::-1, ::-1], g[:, ::-1], g[::-1, :])
    return min(candidates, key=lambda c: c[0, 0].sum()).reshape(-1, 2).copy()


def _square_size(c: np.ndarray) -> float:
    return float(np.median(np.concatenate([np.linalg.norm(np.diff(c, axis=1), axis=-1).ravel(),
                                           np.linalg.norm(np.diff(c, axis=0), axis=-1).ravel()])))


def _line_through(points: np.ndarray) -> _Line:
    origin = points[0]
    chord = points[-1] - points[0]
    ex = chord / np.linalg.norm(chord)
    ey = np.array([-ex[1], ex[0]])
    a, b = (points - origin) @ ex, (points - origin) @ ey
    n = len(points)
    poly = np.polynomial.polynomial
    return _Line(origin, ex, ey, poly.polyfit(a, b, min(LINE_DEGREE, n - 1)),
                 poly.polyfit(np.arange(n, dtype=np.float64), a, min(3, n - 1)), n)


def _edge_profiles(gray: np.ndarray, line: _Line) -> tuple[np.ndarray, ...]:
    """Intensity profiles across `line` along its edge segments (one square beyond the end corners included).

    Returns sample points (M, 2), unit normals (M, 2), profile offsets (M, K) in px and profiles (M, K); samples
    whose profile leaves the image are dropped.
    """
    poly = np.polynomial.polynomial
    seg_a, seg_len = [], []
    for k in range(-1, line.count):  # the outer squares continue the edge one square past the end corners
        p0, p1 = line.point(poly.polyval(np.array([k, k + 1.0]), line.param))
        length = float(np.linalg.norm(p1 - p0))
        # Near a corner, blur mixes in the crossing squares; the corner's point symmetry makes that cancel between
        # the segments on its two sides. The board's rim has no such partner, so the outer squares are sampled
        # only on the half toward the corner.
        t0 = k + (RIM_CLEARANCE if k == -1 else CORNER_CLEARANCE)
        t1 = k + 1 - (RIM_CLEARANCE if k == line.count - 1 else CORNER_CLEARANCE)
        n = max(3, int(round(length * (t1 - t0) / PROFILE_SPACING_PX)))
        seg_a.append(poly.polyval(np.linspace(t0, t1, n), line.param))
        seg_len.append(np.full(n, length))
    a = np.concatenate(seg_a)
    p, nrm = line.point(a), line.normal(a)
    offs = (PROFILE_REACH * np.concatenate(seg_len))[:, None] * np.linspace(-1.0, 1.0, PROFILE_SAMPLES)[None]
    xs = (p[:, 0:1] + offs * nrm[:, 0:1]).astype(np.float32)
    ys = (p[:, 1:2] + offs * nrm[:, 1:2]).astype(np.float32)
    h, w = gray.shape
    inside = (xs.min(1) >= 0) & (ys.min(1) >= 0) & (xs.max(1) <= w - 1) & (ys.max(1) <= h - 1)
    prof = cv2.remap(gray, xs, ys, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE).astype(np.float64)
    return p[inside], nrm[inside], offs[inside], prof[inside]


def _distance_along(p: np.ndarray, nrm: np.ndarray, other: _Line) -> np.ndarray:
    """Signed distance s with p + s * nrm on the curve `other` (Newton's method from s = 0)."""
    poly = np.polynomial.polynomial
    d_curve = poly.polyder(other.curve)
    s = np.zeros(len(p))
    en, nn = nrm @ other.ex, nrm @ other.ey
    for _ in range(4):
        q = p + s[:, None] * nrm - other.origin
        a = q @ other.ex
        s -= (q @ other.ey - poly.polyval(a, other.curve)) / (nn - poly.polyval(a, d_curve) * en)
    return s


def _edge_fit(offs: np.ndarray, prof: np.ndarray, minus: np.ndarray, plus: np.ndarray, outer: np.ndarray,
              sigma0: float | np.ndarray, free_sigma: bool = True) -> tuple[np.ndarray, ...]:
    """Fit each profile with the blurred chessboard it crosses.

    The profile crosses the line's edge and runs toward the parallel edges one square away on either side (at
    `minus` < 0 and `plus` > 0 px from the line, from the neighbouring lines). The neighbours move with the edge:
    the detector's corners are mostly off by a shift common to the grid, which one pass then removes, while the
    spacing is updated from pass to pass (holding the neighbours still makes the passes overshoot). Blur along
    the line mixes in the neighbouring columns' squares, whose colours are the inverse: that only scales and
    offsets the profile, except beyond an outer line's outer square, where the margin is white in every column;
    `outer` (per profile: -1 or +1, 0 across an inner line) names that side, and the margin gets a term of free
    amplitude. Samples the sensor clipped carry no weight. The blur width starts at `sigma0` (per profile or one for
    all) and is fitted too unless `free_sigma` is False.

    Returns, per profile: edge position (px along the profile), blur sigma (px), dark and light levels, whether
    the fit is usable, and the step's sign (+1 where the profile rises from dark to light).
    """
    m = max(2, prof.shape[1] // 6)
    lo, hi = prof[:, :m].mean(1), prof[:, -m:].mean(1)
    sign = np.where(hi >= lo, 1.0, -1.0)
    # The chessboard across the line, 1 beyond the minus edge on a rising profile: steps of sign -1, +1, -1 (times
    # the profile's sign) at the minus neighbour, the edge and the plus neighbour.
    base = (sign > 0).astype(np.float64)
    weight = (prof < SATURATED).astype(np.float64)
    dark, light = np.minimum(lo, hi), np.maximum(lo, hi)
    margin_amp = np.zeros(len(prof))
    edge = np.zeros(len(prof))
    sigma = np.broadcast_to(np.asarray(sigma0, dtype=np.float64), (len(prof),)).copy()
    half = offs[:, -1]
    resid = np.zeros_like(prof)
    # The margin beyond an outer square: below the minus neighbour or above the plus one; nothing inside.
    below_all, above_all = (outer < 0).astype(np.float64), (outer > 0).astype(np.float64)
    # A profile whose step no longer changes its edge or width is settled and left as it is: the steps go to the
    # profiles still moving, which are few after the first steps.
    settled = np.zeros(len(prof), dtype=bool)
    moved, widened = np.zeros(len(prof)), np.zeros(len(prof))
    for _ in range(MAX_GAUSS_NEWTON_STEPS):
        k = np.flatnonzero(~settled)
        o, w, s = offs[k], weight[k], sign[k, None]
        below, above, amp = below_all[k, None], above_all[k, None], margin_amp[k, None]
        e, sg = edge[k], sigma[k]
        inv_sigma = 1.0 / sg[:, None]
        u = np.stack([(o - (c + e)[:, None]) * inv_sigma for c in (minus[k], 0.0, plus[k])])
        u0, u1, u2 = u
        (c0, c1, c2), (p0, p1, p2) = ndtr(u), np.exp(-0.5 * u * u) / _SQRT_2PI
        pattern = base[k, None] + s * (c1 - c0 - c2)
        scale = (light[k] - dark[k])[:, None]
        margin = below * (1.0 - c0) + above * c2
        model = dark[k, None] + scale * pattern + amp * margin
        d_edge = (-scale * s * (p1 - p0 - p2) + amp * (below * p0 - above * p2)) * inv_sigma
        d_sigma = (-scale * s * (p1 * u1 - p0 * u0 - p2 * u2) + amp * (below * p0 * u0 - above * p2 * u2)) * inv_sigma
        d_sigma *= free_sigma  # a held width's column is zero; the ridge below then keeps its step at zero
        resid[k] = r = (prof[k] - model) * w
        jac = np.stack([d_edge, d_sigma, 1.0 - pattern, pattern, margin], axis=2) * w[:, :, None]
        jt = jac.transpose(0, 2, 1)
        # The small ridge keeps the margin's amplitude at zero across inner lines, where its column is empty.
        step = np.linalg.solve(jt @ jac + 1e-6 * np.eye(5), jt @ r[..., None])[..., 0]
        new_edge = np.clip(e + np.clip(step[:, 0], -1.0, 1.0), -0.6 * half[k], 0.6 * half[k])
        new_sigma = np.clip(sg + np.clip(step[:, 1], -0.5 * sg, sg), 0.3, half[k])
        moved[k], widened[k] = np.abs(new_edge - e), np.abs(new_sigma - sg) / new_sigma
        edge[k], sigma[k] = new_edge, new_sigma
        dark[k] += step[:, 2]
        light[k] += step[:, 3]
        margin_amp[k] += step[:, 4]
        # Settled is judged on what the step changed, not on the step: the width of an edge sharper than the
        # samples resolve sits at its lower bound and keeps asking to shrink, which would run the fit to the cap.
        settled[k] = (moved[k] < 0.002) & (widened[k] < 0.002)
        if np.percentile(moved, 95) < 0.002 and np.percentile(widened, 95) < 0.002:
            break
    contrast = light - dark
    rms = np.sqrt((resid ** 2).sum(1) / np.maximum(weight.sum(1), 1.0))
    usable = (contrast > 0.3 * np.median(np.abs(contrast))) & (np.abs(edge) < 0.5 * half) & (sigma < 0.9 * half)
    usable &= (rms < 0.15 * contrast) & (weight.mean(1) > 0.5)
    return edge, sigma, dark, light, usable, sign


def _fit_curve(line: _Line, pts: np.ndarray, polarity: np.ndarray) -> np.ndarray | None:
    """Curve coefficients through edge points, with an offset between the two edge polarities left out.

    The curve is a straight line unless the edges show a curvature well above their noise: a pinhole camera
    images the board's lines straight, and a free curvature there only adds noise at the line's ends.
    """
    a, b = (pts - line.origin) @ line.ex, (pts - line.origin) @ line.ey
    design = np.column_stack([a ** k for k in range(LINE_DEGREE + 1)] + [polarity])
    keep = np.ones(len(a), bool)
    coef = None
    for _ in range(3):  # refit without samples far off the curve (a finger, a glint, a shadow edge)
        if keep.sum() < 2 * design.shape[1]:
            return None
        coef, rss = _lstsq(design[keep], b[keep])
        straight, rss_straight = _lstsq(np.delete(design[keep], 2, axis=1), b[keep])
        dof = keep.sum() - design.shape[1]
        if (rss_straight - rss) * dof < CURVATURE_F_TEST * rss:  # curvature not significant
            coef = np.insert(straight, 2, 0.0)
        res = np.abs(b - design @ coef)
        keep = res < 3.5 * max(1.4826 * np.median(res[keep]), 0.05)
    return coef[:LINE_DEGREE + 1]


def _lstsq(design: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, float]:
    coef = np.linalg.lstsq(design, values, rcond=None)[0]
    return coef, float(np.sum((values - design @ coef) ** 2))


def _fit_family(gray: np.ndarray, family: list[_Line], sigma0: float, move: bool = True) -> tuple | None:
    """One pass over a family of parallel lines (all rows or all columns): the edges of every line fitted at once
    and, if `move`, each line moved onto its edges. Returns (largest move in px, per-line edge widths) or None."""
    parts = []
    for j, line in enumerate(family):
        p, nrm, offs, prof = _edge_profiles(gray, line)
        if len(p) < 2 * (LINE_DEGREE + 2):
            return None
        # Distances to the neighbouring lines along each normal. An outer line has one neighbour; the outer
        # square's far edge continues the spacing of the two nearest lines geometrically, as perspective does.
        outer = 0
        if 0 < j < len(family) - 1:
            d = np.stack([_distance_along(p, nrm, family[j - 1]), _distance_along(p, nrm, family[j + 1])], axis=1)
        else:
            step = 1 if j == 0 else -1
            d1 = _distance_along(p, nrm, family[j + step])
            d2 = _distance_along(p, nrm, family[j + 2 * step]) - d1
            d = np.stack([d1, -d1 * np.clip(d1 / d2, 0.5, 2.0)], axis=1)
            outer = -1 if np.median(d1) > 0 else 1  # the side away from the only neighbour
        parts.append((p, nrm, offs, prof, d.min(axis=1), d.max(axis=1), np.full(len(p), outer)))
    joined = [np.concatenate([part[k] for part in parts]) for k in range(7)]
    first = _edge_fit(*joined[2:], sigma0)
    bounds = np.cumsum([0] + [len(part[0]) for part in parts])
    lines = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    # The blur is the lens's and changes little along a line, so each line's profiles are fitted again with its
    # median width held. Where the blur is a large fraction of a square, a profile's own width trades off against
    # its contrast and scatters (on a strongly blurred wrist fisheye, enough to leave many profiles unusable), while
    # the edge, where the profile crosses the middle of its levels, stays well determined.
    widths = [first[1][k][first[4][k]] if first[4][k].any() else first[1][k] for k in lines]
    held = np.concatenate([np.full(k.stop - k.start, np.median(w)) for k, w in zip(lines, widths)])
    results = _edge_fit(*joined[2:], held, free_sigma=False)
    fits, moved = [], 0.0
    for line, part, k, width in zip(family, parts, lines, widths):
        edge, _, dark, light, usable, sign = (r[k] for r in results)
        if usable.mean() < 0.5:
            return None
        fits.append(width)
        if move:
            p, nrm = part[0], part[1]
            coef = _fit_curve(line, (p + edge[:, None] * nrm)[usable], sign[usable])
            if coef is None:
                return None
            # How far the line moved where it matters, at its corners.
            a = np.polynomial.polynomial.polyval(np.arange(line.count), line.param)
            moved = max(moved, float(np.abs(np.polynomial.polynomial.polyval(a, coef - line.curve)).max()))
            line.curve = coef
    return moved, fits


def _measure(gray: np.ndarray, rows: list[_Line], cols: list[_Line], sigma0: float, move: bool) -> tuple | None:
    """One pass over all lines: (largest move in px, widths of all usable edge profiles) or None."""
    moved, fits = 0.0, []
    for family in (rows, cols):
        got = _fit_family(gray, family, sigma0, move)
        if got is None:
            return None
        moved, fits = max(moved, got[0]), fits + got[1]
    return moved, np.concatenate(fits)


def _refine_on_edges(gray: np.ndarray, corners: np.ndarray, grid: tuple[int, int]) -> _Board | None:
    """Corners as intersections of row and column curves fitted to the edges, or None if a line fails."""
    c = corners.reshape(*grid, 2)
    rows = [_line_through(c[j]) for j in range(grid[0])]
    cols = [_line_through(c[:, i]) for i in range(grid[1])]
    square = _square_size(c)
    sigma0 = 0.1 * square + 0.5
    widths = np.zeros(0)
    for _ in range(MAX_LINE_PASSES):
        got = _measure(gray, rows, cols, sigma0, move=True)
        if got is None:
            return None
        moved, widths = got
        sigma0 = float(np.median(widths))
        if moved < LINE_TOLERANCE_PX:
            break
    out = c.copy()
    for j, row in enumerate(rows):
        for i, col in enumerate(cols):
            x = _intersect(row, col, c[j, i])
            if x is not None:
                out[j, i] = x
    sides = np.full((*grid, 4), np.inf)  # each corner's distance to its four grid neighbours (inf: none there)
    sides[1:, :, 0] = sides[:-1, :, 1] = np.linalg.norm(np.diff(out, axis=0), axis=-1)
    sides[:, 1:, 2] = sides[:, :-1, 3] = np.linalg.norm(np.diff(out, axis=1), axis=-1)
    measurable = sides.min(axis=-1) >= MIN_SQUARE_WIDTHS * np.median(widths)
    return _Board(out.reshape(-1, 2), rows, cols, widths, measurable.ravel())


def _intersect(row: _Line, col: _Line, start: np.ndarray) -> np.ndarray | None:
    """Newton's method on row(a1) = col(a2)."""
    poly = np.polynomial.polynomial
    a1, a2 = (start - row.origin) @ row.ex, (start - col.origin) @ col.ex
    d1, d2 = poly.polyder(row.curve), poly.polyder(col.curve)
    for _ in range(20):
        f = row.point(np.array(a1)) - col.point(np.array(a2))
        j = np.stack([row.ex + poly.polyval(a1, d1) * row.ey, -(col.ex + poly.polyval(a2, d2) * col.ey)], axis=1)
        try:
            step = np.linalg.solve(j, -f)
        except np.linalg.LinAlgError:
            return None
        a1, a2 = a1 + step[0], a2 + step[1]
        if np.abs(step).max() < 1e-6:
            break
    x = row.point(np.array(a1))
    return x if np.all(np.isfinite(x)) else None


# ----------------------------------------------------------------------------------------------------------------
# Intrinsics
# ----------------------------------------------------------------------------------------------------------------
def calibrate_intrinsics(images, board: BoardCfg, model: str, min_views: int = 6,
                         camera: str | None = None) -> IntrinsicsEstimate:
    """Intrinsics (and fisheye distortion) from chessboard images of one camera.

    Args:
        images: sequence of images (all the same shape) of the board at different poses.
        board: the chessboard.
        model: "pinhole" (no distortion) or "fisheye" (Kannala-Brandt, as OpenCV's fisheye module).
        min_views: fewest usable views to accept.
        camera: camera name, used only in error messages.

    Returns:
        The estimate, normalised as `LensCfg`.

    Raises:
        CalibrationError: unknown model, images of different shapes, or fewer than `min_views` usable views.
    """
    where = f"camera {camera!r}: " if camera else ""
    if model not in MODELS:
        raise CalibrationError(f"{where}model = {model!r}: expected one of {', '.join(MODELS)}")
    images = list(images)
    shape = _common_shape(images, where, "image")
    if shape is None:
        raise CalibrationError(f"{where}no images: expected at least {min_views} views of the board")
    height, width = shape[:2]
    obj = board.corner_points()
    found = [(obj[b.measurable], b.corners[b.measurable]) for b in (_board_edges(img, board) for img in images)
             if b is not None]
    if len(found) < min_views:
        raise CalibrationError(f"{where}the board was found in {len(found)} of {len(images)} images: expected at "
                               f"least {min_views} usable views")
    views = list(range(len(found)))
    while True:
        k_mat, dist, residuals = _calibrate(model, [found[v] for v in views], width, height, where)
        view_rms = np.array([np.sqrt(np.mean(r ** 2)) for r in residuals])
        worst = int(np.argmax(view_rms))
        limit = max(VIEW_OUTLIER_FACTOR * float(np.median(view_rms)), VIEW_OUTLIER_FLOOR_PX)
        # Fisheye views are all kept: the ones with the largest residuals are the tilted, peripheral views that
        # pin the focal length against the distortion, so dropping them biases it.
        if model == "fisheye" or view_rms[worst] <= limit or len(views) <= min_views:
            break
        del views[worst]  # one at a time: an outlier drags the fit, so the others' errors change once it is gone
    # Corners the fit places far from where they were measured (an edge pulled by a neighbour's blur, a glint) are
    # left out and the fit repeated once.
    limit = max(CORNER_OUTLIER_FACTOR * float(np.median(np.concatenate(residuals))), CORNER_OUTLIER_FLOOR_PX)
    dropped = int(sum((r > limit).sum() for r in residuals))
    if dropped:
        kept = [(points[r <= limit], measured[r <= limit]) for (points, measured), r in
                zip((found[v] for v in views), residuals)]
        k_mat, dist, residuals = _calibrate(model, kept, width, height, where)
    rms = float(np.sqrt(np.mean(np.concatenate(residuals) ** 2)))
    dist4 = tuple(float(d) for d in dist) if model == "fisheye" else (0.0, 0.0, 0.0, 0.0)
    fx, fy, cx, cy = normalised_intrinsics(float(k_mat[0, 0]), float(k_mat[1, 1]), float(k_mat[0, 2]),
                                           float(k_mat[1, 2]), width, height)
    return IntrinsicsEstimate(model, fx, fy, cx, cy, dist4, rms, len(views), len(images) - len(views), int(width),
                              int(height), dropped)


def _common_shape(images: list, where: str, what: str) -> tuple[int, ...] | None:
    """The shape all `images` share (None for no images); CalibrationError if they differ."""
    if not images:
        return None
    shape = np.shape(images[0])
    for k, img in enumerate(images):
        if np.shape(img) != shape:
            raise CalibrationError(f"{where}{what} {k} has shape {np.shape(img)!r}, {what} 0 {shape!r}: expected "
                                   "every image at one resolution")
    return shape


def _calibrate(model: str, views: list[tuple[np.ndarray, np.ndarray]], width: int, height: int,
               where: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(K, distortion (4,), per-view reprojection errors (distances, px)) from (board points, corners) per view."""
    n = len(views)
    objs, corners = [v[0] for v in views], [v[1] for v in views]
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-12)
    try:
        if model == "pinhole":
            flags = cv2.CALIB_FIX_K1 | cv2.CALIB_FIX_K2 | cv2.CALIB_FIX_K3 | cv2.CALIB_ZERO_TANGENT_DIST
            _, k_mat, _, rvecs, tvecs = cv2.calibrateCamera(
                [o.astype(np.float32) for o in objs], [c.astype(np.float32) for c in corners], (width, height), None,
                np.zeros(5), flags=flags, criteria=criteria)
            dist = np.zeros(4)
            proj = [cv2.projectPoints(o, r, t, k_mat, np.zeros(5))[0] for o, r, t in zip(objs, rvecs, tvecs)]
        else:
            # OpenCV 5's fisheye module takes (1, N, 3) / (1, N, 2) float64 arrays per view. k1-k3 are free (a
            # lens's third term, if fixed at 0, is absorbed by the focal length); k4 stays 0, its effect at these
            # field angles being below the corner noise.
            flags = cv2.CALIB_RECOMPUTE_EXTRINSIC | cv2.CALIB_FIX_SKEW | cv2.CALIB_FIX_K4
            _, k_mat, dist, rvecs, tvecs = cv2.fisheye.calibrate(
                [o.reshape(1, -1, 3) for o in objs], [c.reshape(1, -1, 2) for c in corners], (width, height),
                np.eye(3),
                np.zeros((4, 1)), flags=flags, criteria=criteria)
            dist = np.asarray(dist, dtype=np.float64).ravel()
            proj = [cv2.fisheye.projectPoints(o.reshape(1, -1, 3), r, t, k_mat, dist)[0]
                    for o, r, t in zip(objs, rvecs, tvecs)]
    except cv2.error as e:
        raise CalibrationError(f"{where}the {model} calibration failed on {n} views "
                               f"({str(e).strip().splitlines()[-1]})") from None
    return k_mat, dist, [np.linalg.norm(p.reshape(-1, 2) - c, axis=1) for p, c in zip(proj, corners)]


# ----------------------------------------------------------------------------------------------------------------
# Extrinsics
# ----------------------------------------------------------------------------------------------------------------
def estimate_extrinsics(images, board: BoardCfg, intrinsics: IntrinsicsEstimate, stands,
                        camera: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """World pose of a camera from its images of the board on surveyed stands.

    Each image where the board is found gives the corners' world positions (through its stand's pose); the camera
    pose is the one that projects all of them at once, so stands at several depths and sides pin down what a single
    board leaves loose (the distance along the optical axis trades against a focal-length error). Each image's
    pose alone resolves the board's symmetry and starts the joint fit.

    Args:
        images: the camera's image of the board on each stand, at the intrinsics' resolution.
        board: the chessboard.
        intrinsics: the camera's calibrated intrinsics.
        stands: (board-centre position (3,), roll-pitch-yaw (3,)) in the world frame, one per image.
        camera: camera name, used only in error messages.

    Returns:
        Camera position (3,) and roll-pitch-yaw (3,) in the world frame, MuJoCo camera convention.

    Raises:
        CalibrationError: an image not at the intrinsics' resolution, images and stands of different counts, or the
            board found in none of the images.
    """
    where = f"camera {camera!r}: " if camera else ""
    images, stands = list(images), list(stands)
    if len(images) != len(stands) or not images:
        raise CalibrationError(f"{where}{len(images)} fixture images for {len(stands)} stands: expected one image per "
                               "stand, at least one")
    expected = (intrinsics.height, intrinsics.width)
    world, normalised, start = [], [], None
    for image, (board_pos, board_rpy) in zip(images, stands):
        if np.shape(image)[:2] != expected:
            raise CalibrationError(f"{where}image shape {np.shape(image)!r}: expected {expected} (height, width), the "
                                   "resolution the intrinsics were calibrated at")
        found = _board_edges(image, board)
        if found is None or not found.measurable.all():
            continue
        pts = _normalise(found.corners, intrinsics)
        r_cam_board, t_cam_board = _board_pose(pts, board, where)
        r_world_board = rpy_to_mat(board_rpy)
        view = _camera_from_board(r_cam_board, t_cam_board, r_world_board, np.asarray(board_pos, dtype=np.float64))
        if view is None:
            continue
        r_wc, pos, sym = view
        world.append(np.asarray(board_pos, dtype=np.float64) + board.corner_points() @ (r_world_board @ sym).T)
        normalised.append(pts)
        start = start or (r_wc, pos)
    if start is None:
        raise CalibrationError(f"{where}the board was not found in any of the {len(images)} fixture images: expected "
                               f"all {board.inner_corners[0]} x {board.inner_corners[1]} inner corners in view")
    r_wc, pos = start
    world_pts, pts = np.concatenate(world), np.concatenate(normalised)
    rvec, tvec = cv2.Rodrigues(r_wc.T)[0], (-r_wc.T @ pos).reshape(3, 1)
    rvec, tvec = cv2.solvePnPRefineLM(world_pts, pts, np.eye(3), np.zeros(5), rvec, tvec)
    r_cw = cv2.Rodrigues(rvec)[0]  # OpenCV camera <- world
    flip = np.diag([1.0, -1.0, -1.0])  # OpenCV camera axes -> MuJoCo camera axes
    return -r_cw.T @ tvec.ravel(), mat_to_rpy(r_cw.T @ flip)


def _board_pose(pts: np.ndarray, board: BoardCfg, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The board's pose in the OpenCV camera frame from its corners' normalised image points."""
    obj = board.corner_points()
    ok, rvecs, tvecs, _ = cv2.solvePnPGeneric(obj, pts, np.eye(3), np.zeros(5), flags=cv2.SOLVEPNP_IPPE)
    if not ok:
        raise CalibrationError(f"{where}no board pose fits a fixture image's corners")
    best = min(zip(rvecs, tvecs), key=lambda rt: _pnp_error(obj, pts, *rt))
    rvec, tvec = cv2.solvePnPRefineLM(obj, pts, np.eye(3), np.zeros(5), best[0].copy(), best[1].copy())
    return cv2.Rodrigues(rvec)[0], tvec.ravel()


def _camera_from_board(r_cam_board, t_cam_board, r_world_board, board_pos):
    """(world <- OpenCV camera rotation, camera position, board symmetry) for one view of the board on a stand, or
    None. The corners map onto themselves turned half a turn about the board's z, x or y: of those readings, the one
    whose printed face (board +z) points toward the camera and whose image up is closest to world up."""
    candidates = []
    for sym in (np.eye(3), np.diag([-1.0, -1.0, 1.0]), np.diag([1.0, -1.0, -1.0]), np.diag([-1.0, 1.0, -1.0])):
        r_cb = r_cam_board @ sym
        if r_cb[:, 2] @ t_cam_board >= 0:
            continue
        r_wc = r_world_board @ r_cb.T
        candidates.append((r_wc, board_pos - r_wc @ t_cam_board, sym))
    if not candidates:
        return None
    return min(candidates, key=lambda c: c[0][2, 1])  # OpenCV's image down (+y) closest to world down


def _normalise(corners: np.ndarray, intr: IntrinsicsEstimate) -> np.ndarray:
    """Undistorted normalised image coordinates (x / z, y / z) of pixel points."""
    k_mat = intr.camera_matrix()
    if intr.model == "fisheye":
        pts = cv2.fisheye.undistortPoints(corners.reshape(1, -1, 2), k_mat, np.asarray(intr.distortion))
        return pts.reshape(-1, 2)
    return (corners - k_mat[:2, 2]) / np.array([k_mat[0, 0], k_mat[1, 1]])


def _pnp_error(obj: np.ndarray, pts: np.ndarray, rvec: np.ndarray, tvec: np.ndarray) -> float:
    proj = cv2.projectPoints(obj, rvec, tvec, np.eye(3), np.zeros(5))[0].reshape(-1, 2)
    return float(np.sum((proj - pts) ** 2))


# ----------------------------------------------------------------------------------------------------------------
# Blur and exposure
# ----------------------------------------------------------------------------------------------------------------
def estimate_blur(images, board: BoardCfg, reference_images, camera: str | None = None) -> float:
    """Gaussian blur of a camera's images, in pixels at `BLUR_REFERENCE_WIDTH` image width.

    Args:
        images: the camera's board images (any poses).
        board: the chessboard.
        reference_images: board images of the same camera at the same resolution, rendered without blur (poses
            like the images', e.g. from the same seed), so that the edge width the renderer and lens give a
            blur-free image is accounted for.
        camera: camera name, used only in error messages.

    Returns:
        blur_sigma as `LensCfg` takes it (0 when the images are no wider-edged than the references).

    Raises:
        CalibrationError: images of different shapes, or the board found in none of the images or references.
    """
    where = f"camera {camera!r}: " if camera else ""
    images, references = list(images), list(reference_images)
    shape = _common_shape(images + references, where, "image (images, then references)")
    if shape is None or not images or not references:
        raise CalibrationError(f"{where}blur needs images and reference images; got {len(images)} and "
                               f"{len(references)}")
    measured = [b for b in (_board_edges(img, board) for img in images) if b is not None]
    refs = [(img, b) for img, b in ((img, _board_edges(img, board)) for img in references) if b is not None]
    if not measured or not refs:
        raise CalibrationError(f"{where}the board was found in {len(measured)} of {len(images)} images and "
                               f"{len(refs)} of {len(references)} references: expected at least one of each")
    target = float(np.median(np.concatenate([b.widths for b in measured])))
    grays = [(_gray(img), b) for img, b in refs]

    def ref_width(beta: float) -> float:
        """Median edge width of the references blurred by `beta` px, measured on their fitted lines."""
        widths = []
        for gray, b in grays:
            blurred = cv2.GaussianBlur(gray, (0, 0), beta, borderType=cv2.BORDER_REFLECT) if beta > 0.05 else gray
            got = _measure(blurred, b.rows, b.cols, float(np.median(b.widths)) + beta, move=False)
            if got is not None:
                widths.append(got[1])
        if not widths:
            raise CalibrationError(f"{where}the reference edges could not be measured after blurring")
        return float(np.median(np.concatenate(widths)))

    base = float(np.median(np.concatenate([b.widths for _, b in refs])))
    if target <= base:
        return 0.0
    # Edge widths add roughly in quadrature; a few corrections of that guess make them match exactly.
    beta = np.sqrt(target ** 2 - base ** 2)
    for _ in range(3):
        width = ref_width(beta)
        gain = (width ** 2 - base ** 2) / beta ** 2
        if gain <= 0:
            break
        beta, previous = float(np.sqrt(max(target ** 2 - base ** 2, 0.0) / gain)), beta
        if abs(beta - previous) < BLUR_SETTLED * beta:
            break
    return float(beta * BLUR_REFERENCE_WIDTH / shape[1])


def estimate_exposure(flat_field: np.ndarray, reference: np.ndarray, camera: str | None = None) -> float:
    """Exposure gain of a camera from its image of a flat-field light panel held against the lens, lamps off.

    The panel is self-luminous, so its image depends on the lens only: the gain is the median ratio to a render of
    the same panel with exposure 1, over the pixels where that render shows the panel (a fisheye's corners lie
    outside its image circle, a finger of the hand may sit in front of a wrist camera). A board under the cell's
    lamps would measure exposure times the lamps' intensity, which no single image separates.

    Raises:
        CalibrationError: shapes differ, the reference shows too little of the panel, or the image is clipped there.
    """
    where = f"camera {camera!r}: " if camera else ""
    _common_shape([flat_field, reference], where, "flat-field image (image, then reference)")
    image, ref = _gray(flat_field), _gray(reference)
    lit = ref[ref > 0]
    level = float(np.median(lit)) if lit.size else 0.0
    panel = np.abs(ref - level) < 0.02 * level
    if panel.mean() < 0.1:
        raise CalibrationError(f"{where}the flat-field reference shows the panel in {100 * panel.mean():.1f} % of its "
                               "pixels: expected at least 10 %")
    if np.mean(image[panel] >= SATURATED) > 0.01:
        raise CalibrationError(f"{where}the flat-field image is clipped over the panel: expected it below the "
                               "sensor's ceiling (dim the panel)")
    return float(np.median(image[panel]) / np.median(ref[panel]))


def card_pixels(lens, pos, rpy, stands, board: BoardCfg, width: int, height: int) -> np.ndarray:
    """Where a camera sees a grid over the middle of the grey card on the board's back, the board turned around on
    each stand (`CalibrationRig.board_on_fixture(back=True)`): (K, N, 2) pixels.

    The grid spans the middle 40 % of the card, so even the blurriest lens leaves its points on plain grey. The
    camera is `lens` at the world pose (pos, rpy) in MuJoCo's camera convention."""
    from r2s2r.render.camera_model import CameraModel

    cols, rows = board.squares
    half = 0.2 * (np.array([cols, rows]) + 2) * board.square_size
    x, y = np.meshgrid(np.linspace(-half[0], half[0], 25), np.linspace(-half[1], half[1], 25))
    # The turned board's frame is the stand's turned half a turn about x: the card's face lies at +BOARD_CARD_DEPTH.
    back = np.stack([x.ravel(), -y.ravel(), np.full(x.size, BOARD_CARD_DEPTH)], axis=1)
    r_world_cam, model = rpy_to_mat(rpy), CameraModel(lens, width, height)
    out = []
    for stand_pos, stand_rpy in stands:
        world = np.asarray(stand_pos) + back @ rpy_to_mat(stand_rpy).T
        in_camera = (world - np.asarray(pos)) @ r_world_cam  # MuJoCo camera axes: x right, y up, looking along -z
        out.append(model.project(in_camera * np.array([1.0, -1.0, -1.0])))
    return np.array(out)


def estimate_lamp(images, dark, references, pixels, reference_pixels, exposure: float,
                  camera: str | None = None) -> np.ndarray:
    """One lamp's RGB diffuse colour relative to the reference world's, from the grey card on the board's back (the
    board turned around on its stands), lit by that lamp alone.

    A pixel is the ambient light (here the renderer's headlight) plus what each lamp adds: its diffuse light, in
    proportion to the lamp's diffuse colour, and its specular highlight, which does not scale with it. The session's
    images with every lamp off (`dark`) remove the ambient part as the recorded camera sees it; the references with
    the lamp off, at half and at its built level give, at each card point, the lamp's diffuse contribution (the
    slope) and its highlight, so the session's lamp-alone value (over the calibrated exposure) gives the gain. The
    same card points are found in both worlds through each world's camera (`card_pixels`), on plain grey, so the
    lens's blur does not enter. Each stand's gain is the median over its points that no image clips; the lamp's is
    the brightest stand's among those it lights well (a slope of at least half the best lit stand's), since
    a shadow the reference world does not cast (the arm, clutter) only darkens a stand.

    Args:
        images: the session's images of the turned board on its K stands, lit by the lamp alone (K, H, W, 3).
        dark: the same with every lamp off (K, H, W, 3).
        references: renders of the same from the reference world (exposure 1, no blur, no noise), only the lamp on,
            at 0, 0.5 and 1 of its built level: three sequences of K images.
        pixels, reference_pixels: the card points in the session's and in the references' images (K, N, 2).
        exposure: the camera's calibrated exposure (`estimate_exposure`).
        camera: camera name, used only in error messages.

    Returns:
        (3,) gains: the lamp's diffuse colour is the reference's times these, channel by channel.
    """
    where = f"camera {camera!r}: " if camera else ""
    images, dark = list(images), list(dark)
    off, half, full = (list(r) for r in references)
    shape = _common_shape(images + dark + off + half + full, where, "lamp image (images, dark, then references)")

    def sample(image, points):
        """Bilinear RGB values (N, 3) at `points` (N, 2)."""
        grid = np.asarray(points, dtype=np.float32).reshape(-1, 1, 2)
        return cv2.remap(np.asarray(image, dtype=np.float32), grid[..., 0], grid[..., 1],
                         cv2.INTER_LINEAR).reshape(-1, 3).astype(np.float64)

    def inside(points):
        p = np.nan_to_num(np.asarray(points, dtype=np.float64), nan=-1.0)
        return (p[:, 0] >= 0) & (p[:, 0] <= shape[1] - 1) & (p[:, 1] >= 0) & (p[:, 1] <= shape[0] - 1)

    stands = []  # (median gain (3,), median slope) per usable stand
    for k in range(len(images)):
        seen = inside(pixels[k]) & inside(reference_pixels[k])
        lit, unlit = sample(images[k], pixels[k]), sample(dark[k], pixels[k])
        at_off, at_half, at_full = (sample(r[k], reference_pixels[k]) for r in (off, half, full))
        slope = 2.0 * (at_full - at_half)
        highlight = at_full - at_off - slope
        use = seen & (lit.max(axis=1) < SATURATED) & (at_full.max(axis=1) < SATURATED) & (slope.min(axis=1) > 1.0)
        if use.sum() >= 5:
            gain = ((lit[use] - unlit[use]) / exposure - highlight[use]) / slope[use]
            stands.append((np.median(gain, axis=0), float(np.median(slope[use]))))
    if not stands:
        raise CalibrationError(f"{where}no stand shows the card lit by the lamp, unclipped, in both the session and "
                               f"the reference ({len(images)} stands, at least 5 of its points each): expected one")
    best_lit = max(slope for _, slope in stands)
    return max((gain for gain, slope in stands if slope >= 0.5 * best_lit), key=lambda g: float(g.mean()))


def _cell_centres(gray: np.ndarray, corners: np.ndarray, grid: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Mean intensity over the central part of every square between inner corners, and whether it is clipped.

    Samples are placed by bilinear interpolation of each square's four corners, over the middle 40% of it.
    """
    c = corners.reshape(*grid, 2)
    s = np.linspace(0.3, 0.7, 5)
    u, v = np.meshgrid(s, s)
    w00, w01, w10, w11 = ((1 - u) * (1 - v)).ravel(), (u * (1 - v)).ravel(), ((1 - u) * v).ravel(), (u * v).ravel()
    pts = (c[:-1, :-1, None] * w00[:, None] + c[:-1, 1:, None] * w01[:, None] + c[1:, :-1, None] * w10[:, None]
           + c[1:, 1:, None] * w11[:, None]).reshape(-1, len(w00), 2).astype(np.float32)
    samples = cv2.remap(gray, pts[..., 0], pts[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    # Noise lifts a few samples of a square just below the ceiling to it; a square counts as clipped when more
    # than a tenth of it is there, which a mean below it by two noise deviations never reaches.
    return samples.mean(axis=1).astype(np.float64), (samples >= SATURATED).mean(axis=1) > 0.1
