"""The Isaac Lab environment's cameras: Isaac Lab camera sensors drawn by Newton's Warp ray tracer on the CPU and
formed by the project's lens model, against the reference's own renderer (MuJoCo Warp's ray tracer) in the same
states.

The environment with cameras runs once for the module (`record`, in this process: Isaac Lab runs one simulation at a
time, and no other module's is open while this module's tests run): it keeps its images and, for each, the state it
showed, and the tests render the reference in those states.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from r2s2r.core import ConfigError
from r2s2r.tasks.pick_sort import mdp
from r2s2r.tasks.pick_sort.env import PickSortEnv

TASK = "Isaac-R2S2R-PickSort-Ungrounded-v0"
CAMERAS = ("head_left", "head_right", "right_wrist", "left_wrist")
SIZE = (96, 128)  # (height, width): not square, so a swapped axis shows
SEED = 1  # a red capsule
BELT_STEPS = 90  # control periods after which the capsule rides the belt in both head cameras' view
ARM = np.array([0.3, 0.2, 0.0, -0.3, 0.0, 0.2, 0.0])  # rad, on the right arm's joints 1-7
FRAMES = ("reset", "belt", "arm")  # after reset; one step from the reference's state at BELT_STEPS; arm moved
RENDER_REPS = 10


def _episode(seed: int) -> tuple[str, str]:
    env = PickSortEnv(world="ungrounded", cameras=())
    _, info = env.reset(seed=seed)
    return info["object"], info["colour"]


# The first later seed whose episode has SEED's object (the capsule) in another colour.
REPAINT_SEED = next(s for s in range(SEED + 1, SEED + 500)
                    if _episode(s)[0] == _episode(SEED)[0] and _episode(s)[1] != _episode(SEED)[1])


def record() -> dict[str, np.ndarray]:
    """Run the Isaac Lab environment with all cameras (and depth) through FRAMES: each frame's images and the state
    it showed (Newton's, in MuJoCo's qpos | qvel layout), and each camera's render time."""
    import torch
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    import r2s2r.isaaclab_tasks  # noqa: F401  (registers the IDs)
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

    cfg = parse_env_cfg(TASK)
    cfg.cameras, cfg.image_size, cfg.depth = CAMERAS, SIZE, True
    env = PickSortCellEnv(cfg)
    out = {}

    def keep(frame: str, obs: dict) -> None:
        out.update({f"{frame}/{k}": v[0].numpy() for k, v in obs["images"].items()})
        out[f"{frame}/state"] = env.mujoco_states()[0]

    obs, _ = env.reset(seed=SEED)
    keep("reset", obs)
    # The reference's physics runs ahead to where the object is in view; Newton takes over from its state.
    ahead = PickSortEnv(world="ungrounded", cameras=(), action_mode="joint")
    proprio = ahead.reset(seed=SEED)[0]["proprio"]
    hold = np.concatenate([proprio["arm_q"], proprio["hand_q"]])
    for _ in range(BELT_STEPS):
        ahead.step(hold)
    env.set_state(ahead.state())
    obs, *_ = env.step(torch.tensor(hold, dtype=torch.float32)[None])
    keep("belt", obs)
    gain = lambda: mdp.light_gains(env.light_diffuse[:1], env.lights_nominal[1])[0]  # noqa: E731
    belt_state, belt_gain = out["belt/state"], gain()
    moved = hold.copy()
    moved[:7] += ARM
    for _ in range(4):
        obs, *_ = env.step(torch.tensor(moved, dtype=torch.float32)[None])
    keep("arm", obs)

    # Another seed's episode of the same object in another colour, in the belt frame's state: the reset event
    # repaints the object.
    env.reset(seed=REPAINT_SEED)
    env.set_state(belt_state)
    keep("repainted", env.observe())
    # The same state under the `lighting` condition's episode of SEED: its lights drawn brighter or dimmer and
    # tinted; the reset event paints the gain (mdp.light_gains) into the colours.
    env.reset(seed=SEED, options={"condition": "lighting"})
    env.set_state(belt_state)
    keep("lit", env.observe())
    out["lit/gain"] = gain() / belt_gain  # relative to the nominal episode's draw

    for name in CAMERAS:  # one camera's frame: the sensor's render, then the lens
        env.looks.show_to(name)
        sensor = env.scene[name]
        start = time.perf_counter()
        for _ in range(RENDER_REPS):
            sensor.update(0.0, force_recompute=True)
        render = time.perf_counter() - start
        source = sensor.data.output["rgb"].torch[0].numpy()
        start = time.perf_counter()
        for _ in range(RENDER_REPS):
            env.lenses[name].apply(source, None)
        out[f"ms/{name}"] = np.array([render, time.perf_counter() - start]) * 1e3 / RENDER_REPS
    env.close()
    return out


@pytest.fixture(scope="module")
def frames() -> dict[str, tuple[dict, dict]]:
    """{frame: (our images, the reference's images of the same state)}, and the render times under "ms"."""
    data = record()
    ref = PickSortEnv(
        world="ungrounded", cameras=CAMERAS, image_size=SIZE, depth=True, action_mode="joint", renderer="mujoco_warp"
    )
    ref.reset(seed=SEED)
    ours = lambda frame: {k.split("/", 1)[1]: v for k, v in data.items()  # noqa: E731
                          if k.startswith(f"{frame}/") and not k.endswith("/state")}
    out = {}
    for frame in FRAMES:
        ref.set_state(data[f"{frame}/state"])
        out[frame] = (ours(frame), ref.observe()["images"])
    ref.close()
    out["repainted"] = (ours("repainted"), None)
    out["lit"] = (ours("lit"), data["lit/gain"])
    out["ms"] = {name: data[f"ms/{name}"] for name in CAMERAS}
    return out


def colours(img: np.ndarray) -> np.ndarray:
    """0, or 1 + the dominant channel where a pixel has a saturated colour (the object, the bins):
    a colour's hue survives the two renderers' different lighting, its brightness does not."""
    rgb = img.astype(int)
    hi, lo = rgb.max(-1), rgb.min(-1)
    return np.where((hi - lo > hi // 2) & (hi >= 40), 1 + rgb.argmax(-1), 0)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / (a | b).sum())


# Measured (SEED, SIZE, the mujoco_warp reference; all cameras in all FRAMES):
# - where a surface is hit (foreground against the empty background): IoU 1.000;
# - depth: every pixel hit in both agrees to 1 cm (median difference 0.00 mm);
# - colour classes shown by >= MIN_COLOUR_PIXELS reference pixels: IoU 0.867-1.000;
# - mean absolute level difference: 11-19 on the wrist cameras, 29 on the head cameras (Newton's ray tracer 10-18
#   levels brighter on average). Newton lights the cell with the cell's key light as a directional light over an
#   ambient term, MuJoCo with the cell's two spot lights and its headlight: the head cameras see a floor lit evenly
#   in one and in a pool of light in the other. With Newton's default light (from (1, -1, 1)) the head cameras
#   differed by 34-38 levels.
HIT_IOU = 0.97
DEPTH_TOL = 0.01  # m
DEPTH_AGREE = 0.97  # fraction of the pixels hit in both
COLOUR_IOU = 0.8
MIN_COLOUR_PIXELS = 30
LEVEL_TOL = 33  # mean absolute difference in 0-255 levels: a wrong or blank image, or the renderer's default light


def test_images_have_the_configured_shape_and_show_the_cell(frames):
    for frame in FRAMES:
        ours, _ = frames[frame]
        assert set(ours) == {*CAMERAS, *(f"{name}_depth" for name in CAMERAS)}
        for name in CAMERAS:
            rgb, depth = ours[name], ours[f"{name}_depth"]
            assert rgb.shape == (*SIZE, 3) and rgb.dtype == np.uint8 and depth.shape == SIZE
            assert rgb.std() > 10, f"{frame} {name}: a flat image"
            assert (depth > 0).mean() > 0.3, f"{frame} {name}: mostly nothing hit"  # measured >= 0.48


def test_images_agree_with_the_reference_renderer_in_the_same_state(frames):
    for frame in FRAMES:
        ours, ref = frames[frame]
        for name in CAMERAS:
            where = f"{frame} {name}"
            a, b = ours[f"{name}_depth"], ref[f"{name}_depth"]
            hit = iou(a > 0, b > 0)
            both = (a > 0) & (b > 0)
            agree = (np.abs(a - b)[both] < DEPTH_TOL).mean()
            ca, cb = colours(ours[name]), colours(ref[name])
            shown = [c for c in (1, 2, 3) if (cb == c).sum() >= MIN_COLOUR_PIXELS]
            ious = [iou(ca == c, cb == c) for c in shown]
            level = np.abs(ours[name].astype(int) - ref[name]).mean()
            print(
                f"{where}: hit IoU {hit:.3f}, depth within 1 cm {agree:.3f}, colour IoU {np.round(ious, 3)}, "
                f"level difference {level:.1f}"
            )
            assert hit > HIT_IOU and agree > DEPTH_AGREE, where
            assert all(v > COLOUR_IOU for v in ious), where
            assert level < LEVEL_TOL, where
    # The episode's object (a red capsule) is in view of the head cameras, in red, where the reference shows it.
    ours, ref = frames["belt"]
    for name in ("head_left", "head_right"):
        assert (colours(ref[name]) == 1).sum() > (colours(frames["reset"][1][name]) == 1).sum() + 10, name
        assert iou(colours(ours[name]) == 1, colours(ref[name]) == 1) > COLOUR_IOU, name


def test_moving_the_arm_changes_the_wrist_and_head_images(frames):
    before, after = frames["belt"][0], frames["arm"][0]
    for name, least in (("right_wrist", 10.0), ("head_left", 2.0), ("head_right", 2.0)):
        change = np.abs(after[name].astype(int) - before[name]).mean()
        print(f"{name}: mean level change {change:.1f}")
        assert change > least, name


def test_each_episode_shows_its_own_colours(frames):
    """The `paint` reset event: the same state under the episode of another seed (the same capsule, drawn in
    another colour) shows that colour where the red capsule was, in both head cameras."""
    _, colour = _episode(REPAINT_SEED)
    channel = 1 + ("red", "green", "blue").index(colour)
    for name in ("head_left", "head_right"):
        before, after = colours(frames["belt"][0][name]), colours(frames["repainted"][0][name])
        capsule = (before == 1) & (after != 1)  # red before, not after: the capsule (the red bin stays red)
        assert capsule.sum() > 10, name
        assert (after[capsule] == channel).mean() > 0.9, name


def _linear(img: np.ndarray) -> np.ndarray:
    """Display (sRGB) levels 0-255 -> linear light 0-1."""
    c = img.astype(float) / 255.0
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def test_an_episodes_lighting_scales_the_light_each_surface_reflects(frames):
    """The same state under SEED's nominal episode and its `lighting` episode: every surface reflects the ratio of
    the two episodes' light gains (per channel, in linear light) times what it reflected before, up to the lens'
    blur at edges and 8-bit rounding."""
    (nominal, _), (lit, gain) = frames["belt"], frames["lit"]
    assert np.abs(gain - 1.0).max() > 0.15, gain  # a draw that shows
    for name in ("head_left", "right_wrist"):
        before, after = _linear(nominal[name]), _linear(lit[name])
        # Pixels lit well above the 8-bit floor and below saturation in both images.
        usable = (before > 0.05).all(-1) & (before * gain < 0.9).all(-1) & (after < 0.95).all(-1)
        assert usable.mean() > 0.2, name
        ratio = np.median(after[usable] / before[usable], axis=0)
        print(f"{name}: gain {np.round(gain, 3)}, measured {np.round(ratio, 3)}")
        np.testing.assert_allclose(ratio, gain, rtol=0.03, err_msg=name)


def test_render_time(frames):
    for name, (render, lens) in frames["ms"].items():
        print(f"{name}: {render:.1f} ms render ({SIZE[1]}x{SIZE[0]} source), {lens:.2f} ms lens")
        assert render < 1000, name  # measured 5-50 ms on 2 busy cores: a second means something else is wrong


def _cfg(**fields):
    import r2s2r.isaaclab_tasks  # noqa: F401
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    cfg = parse_env_cfg(TASK)
    for key, value in fields.items():
        setattr(cfg, key, value)
    return cfg


def test_isaac_rtx_is_isaac_labs_renderer_and_needs_kit():
    from isaaclab_newton.renderers import NewtonWarpRendererCfg
    from isaaclab_physx.renderers import IsaacRtxRendererCfg

    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
    from r2s2r.render.isaac_rtx import kit_running

    assert type(_cfg().renderer_cfg()) is NewtonWarpRendererCfg  # the default
    cfg = _cfg(renderer="isaac_rtx", cameras=("head_left",))
    assert type(cfg.renderer_cfg()) is IsaacRtxRendererCfg
    if kit_running():
        pytest.skip("Kit is running in this process")
    # Refused before any simulation is made.
    with pytest.raises(ConfigError, match="renderer = 'isaac_rtx'.*needs Kit"):
        PickSortCellEnv(cfg)


def test_an_unknown_renderer_or_camera_is_a_config_error():
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

    with pytest.raises(ConfigError, match="renderer = 'ovrtx': expected one of newton_warp, isaac_rtx"):
        PickSortCellEnv(_cfg(renderer="ovrtx"))
    with pytest.raises(ConfigError, match="cameras: 'nose' is not a camera of the cell"):
        PickSortCellEnv(_cfg(cameras=("head_left", "nose")))


def test_rtx_looks_give_each_environments_cell_its_episodes_colours_and_lights():
    """What `RtxLooks` writes with Replicator under Kit, written with plain USD here on a stage of two environments'
    cells (the cell's stage referenced as Isaac Lab spawns it): each environment's object materials carry its own
    episode's paint, and its cell's lights its own episode's draw (one nominal, one `lighting` episode)."""
    from pxr import Usd, UsdLux, UsdShade

    from r2s2r.cell import usd
    from r2s2r.cell.mjcf import build_model, object_body_name
    from r2s2r.cell.world import load_world
    from r2s2r.isaaclab_tasks.pick_sort.env import RtxLooks
    from r2s2r.isaaclab_tasks.pick_sort.env_cfg import stage_path
    from r2s2r.tasks.pick_sort.env_cfg import PickSortEnvCfg

    cell = load_world("ungrounded").cell
    model = build_model(cell)
    stage = Usd.Stage.CreateInMemory()
    envs = ["/World/envs/env_0", "/World/envs/env_1"]
    for env in envs:
        stage.DefinePrim(f"{env}/Cell").GetReferences().AddReference(stage_path(cell), "/World")
    looks = RtxLooks(stage, model, cell, envs)
    episodes = mdp.sample_episodes(PickSortEnvCfg(cell=cell, world="ungrounded"), [SEED, REPAINT_SEED],
                                   ["nominal", "lighting"], (model.light_pos.copy(), model.light_diffuse.copy()))
    colours = mdp.geom_colours(model, cell, episodes)
    for path, attrs in looks.values([0, 1], colours, episodes.light_pos, episodes.light_diffuse).items():
        prim = stage.GetPrimAtPath(path)
        assert prim.IsValid(), path
        for name, value in attrs.items():
            assert prim.GetAttribute(name).Set(value), f"{path}.{name}"
    assert episodes.colour[0] != episodes.colour[1]  # the same object in two colours
    for k, env in enumerate(envs):
        for o in cell.objects + cell.novel_objects:
            body = object_body_name(o)
            body_path = usd.body_prim_path(model, model.body(body).id).removeprefix("/World")
            geom = stage.GetPrimAtPath(f"{env}/Cell{body_path}/{body}")
            material, _ = UsdShade.MaterialBindingAPI(geom).ComputeBoundMaterial()
            assert str(material.GetPath()).startswith(f"{env}/Cell/"), body
            shader = UsdShade.Shader(stage.GetPrimAtPath(f"{material.GetPath()}/PreviewSurface"))
            np.testing.assert_allclose(shader.GetInput("diffuseColor").Get(), colours[k, model.geom(body).id, :3],
                                       rtol=1e-6, err_msg=f"{env} {body}")
        for i, light_cfg in enumerate(cell.lights):
            light = UsdLux.SphereLight(stage.GetPrimAtPath(f"{env}/Cell/Lights/{light_cfg.name}"))
            shown = np.array(light.GetColorAttr().Get()) * light.GetIntensityAttr().Get() / usd.SPHERE_NITS_PER_UNIT
            np.testing.assert_allclose(shown, episodes.light_diffuse[k, i], rtol=1e-6)
    assert np.abs(episodes.light_diffuse[1] - episodes.light_diffuse[0]).max() > 0.05  # two draws that differ
