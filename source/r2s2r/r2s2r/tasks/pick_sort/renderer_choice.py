"""`renderer="auto"`: the faster of the MuJoCo GL rasteriser and the MuJoCo Warp ray tracer on this machine, where
the two draw the same images.

Both renderers draw the task's cameras through the same lens model (distortion, blur, exposure, sensor noise), so
they differ only in how the pinhole source image is shaded: silhouette pixels where the rasteriser's coverage rule
and the ray through the pixel centre pick different surfaces, and OpenGL's fixed-function lighting against Warp's
per-ray shading. The check renders reset episodes of the task (one per condition that changes what is drawn:
nominal, lighting, novel objects) with both and compares them pixel by pixel against `FAITHFUL`. Which is faster
depends on the machine: on a CPU the rasteriser wins for one environment, a GPU turns that around; so the check
also times both.

The choice is measured once per machine and camera set and kept in `$XDG_CACHE_HOME/r2s2r/renderer_choice.json`
(else `~/.cache/...`), so later runs decide at once; delete the file to measure again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import mujoco
import numpy as np

from r2s2r.files import cache_dir, write_text_atomic
from r2s2r.tasks.pick_sort.env_cfg import PickSortEnvCfg

AUTO = "auto"
CANDIDATES = ("mujoco_gl", "mujoco_warp")
# The ray tracer may stand in for the rasteriser when, over the compared images, the mean absolute difference is
# at most 2 levels of 255 and at most 2 % of pixels differ by more than 12 levels (silhouettes and highlights).
FAITHFUL = {"mean_levels": 2.0, "far_fraction": 0.02, "far_levels": 12}
EPISODES = ((1, "nominal"), (2, "lighting"), (3, "novel_objects"))
TIMING_S = 0.5  # per renderer and round; rounds alternate between renderers so a change of load hits both


@dataclass(frozen=True)
class RendererChoice:
    renderer: str
    reason: str
    images_per_s: dict[str, float]
    mean_levels: float | None = None  # the images' agreement (None: not compared)
    far_fraction: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def resolve_renderer(cfg: PickSortEnvCfg) -> tuple[PickSortEnvCfg, RendererChoice | None]:
    """`cfg` with `renderer="auto"` replaced by this machine's choice (and the choice), else `cfg` unchanged."""
    if cfg.renderer != AUTO:
        return cfg, None
    if not cfg.cameras:
        return cfg.replace(renderer=CANDIDATES[0]), None  # nothing is rendered
    cache = _cache_file()
    key = _key(cfg)
    try:
        stored = json.loads(cache.read_text())
    except (OSError, ValueError):
        stored = {}
    if not isinstance(stored, dict):
        stored = {}
    entry = stored.get(key)
    if isinstance(entry, dict) and entry.get("renderer") in CANDIDATES:
        choice = RendererChoice(**{k: entry.get(k) for k in RendererChoice.__dataclass_fields__})
    else:
        choice = measure_choice(cfg.replace(renderer=CANDIDATES[0]))
        stored[key] = choice.as_dict()
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(cache, json.dumps(stored, indent=1, sort_keys=True))
        except OSError:
            pass  # an unwritable cache only means measuring again next time
    return cfg.replace(renderer=choice.renderer), choice


def measure_choice(cfg: PickSortEnvCfg) -> RendererChoice:
    """Compare the candidates on `cfg`'s cameras over reset episodes; the faster one if they agree, else GL."""
    from r2s2r.tasks.pick_sort.env import PickSortEnv

    gl = PickSortEnv(cfg.replace(renderer="mujoco_gl"))
    try:
        try:
            warp = PickSortEnv(cfg.replace(renderer="mujoco_warp"))
        except Exception as e:  # noqa: BLE001 -- any failure to build it (not installed, no device) rules it out
            return RendererChoice("mujoco_gl", f"mujoco_warp unavailable: {type(e).__name__}: {e}",
                                  {"mujoco_gl": _rate(gl)})
        try:
            diffs = []
            for seed, condition in EPISODES:
                a = gl.reset(seed=seed, options={"condition": condition})[0]["images"]
                b = warp.reset(seed=seed, options={"condition": condition})[0]["images"]
                diffs += [np.abs(a[c].astype(np.int16) - b[c].astype(np.int16)) for c in cfg.cameras]
            mean = float(np.mean([d.mean() for d in diffs]))
            far = float(np.mean([(d.max(axis=-1) > FAITHFUL["far_levels"]).mean() for d in diffs]))
            rates = {"mujoco_gl": 0.0, "mujoco_warp": 0.0}
            for _ in range(2):
                for name, env in (("mujoco_gl", gl), ("mujoco_warp", warp)):
                    rates[name] += _rate(env) / 2
        finally:
            warp.close()
    finally:
        gl.close()
    rates = {k: round(v, 1) for k, v in rates.items()}
    agreement = {"mean_levels": round(mean, 3), "far_fraction": round(far, 5)}
    if mean > FAITHFUL["mean_levels"] or far > FAITHFUL["far_fraction"]:
        return RendererChoice("mujoco_gl", f"images differ beyond {FAITHFUL}", rates, **agreement)
    faster = max(rates, key=rates.get)
    return RendererChoice(faster, "faster, images within the tolerance", rates, **agreement)


def _rate(env) -> float:
    """Camera images per second of `env.observe()` in a reset episode."""
    env.reset(seed=EPISODES[0][0])  # renders the episode's first frame: buffers uploaded before the timing
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < TIMING_S:
        env.observe()
        n += 1
    return n * len(env.cfg.cameras) / (time.perf_counter() - start)


def _key(cfg: PickSortEnvCfg) -> str:
    """What the choice depends on: the cameras and their size, the cell's lenses, the engines and the machine."""
    # The installed distribution's version, not the module's: importing mujoco_warp (and Warp with it) takes
    # seconds, which every generation run would pay before its first attempt even when the choice is cached.
    try:
        warp_version = importlib.metadata.version("mujoco-warp")
    except importlib.metadata.PackageNotFoundError:
        warp_version = None
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    what = {"cameras": list(cfg.cameras), "image_size": list(cfg.image_size), "world": cfg.world,
            "lenses": repr([c for c in cfg.cell.cameras if c.name in cfg.cameras]), "mujoco": mujoco.__version__,
            "mujoco_warp": warp_version, "cpu": cpu, "cores": os.cpu_count()}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _cache_file() -> Path:
    return cache_dir() / "renderer_choice.json"
