"""The browser viewer: scripts/view.py and r2s2r.render.viser_scene.

The scene's poses are checked against MuJoCo's own geom poses, its meshes against MuJoCo's geom bounding boxes; bad
inputs exit 2 before any server starts; a recorded episode seeks to its stored states and shows its stored
subtasks; and the page, opened in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright, WebGL in
SwiftShader), draws the belt and the robot in their model colours, and moves when the Step button is clicked.

Where the belt and the robot are on a screenshot is found by hiding their meshes and seeing which pixels change,
so the check depends on no camera or screen geometry.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from pathlib import Path

import mujoco
import numpy as np
import pytest
import viser
from conftest import moved_cell, run_script_in_process

from r2s2r.cell.mjcf import build_model
from r2s2r.cell.spec import CellCfg
from r2s2r.render.viser_scene import INFINITE_PLANE, ViserScene, geom_mesh, geom_rgba, rgb255

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
]  # WebGL on the CPU
VIEWPORT = {"width": 640, "height": 400}  # software WebGL: its cost grows with the pixels
TIMEOUT = 240  # s, for any one thing the browser does
STEPS = 6  # Step clicks in the browser test: the arm travels several centimetres


@pytest.fixture(scope="module")
def view():
    """scripts/view.py as a module."""
    spec = importlib.util.spec_from_file_location("view", ROOT / "scripts" / "view.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server():
    server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    yield server
    server.stop()


def geoms_of(scene: ViserScene, model, body: str) -> list[int]:
    """The drawn geoms of a body."""
    return [g for g in scene.handles if model.geom_bodyid[g] == model.body(body).id]


def quat_mat(wxyz) -> np.ndarray:
    out = np.empty(9)
    mujoco.mju_quat2Mat(out, np.asarray(wxyz, dtype=float))
    return out


# -- the scene ---------------------------------------------------------------------------------------------------
def test_geom_poses_and_colours_follow_mujoco(server):
    model = build_model(CellCfg())
    scene = ViserScene(server, model, root="/poses")  # added at the reference configuration
    data = moved_cell(model, 0.25, (-0.5, 0.02, 0.105, np.cos(0.3), 0, 0, np.sin(0.3)), -0.25, 200)
    scene.update(data)
    checked = [model.geom("obj_cube").id]
    checked += [geoms_of(scene, model, b)[0] for b in ("right_link3", "right_link6", "right_finger2_link4")]
    for g in checked:
        handle = scene.handles[g]
        assert not np.allclose(data.geom_xmat[g], np.eye(3).ravel(), atol=1e-3), model.geom(g)  # a real rotation
        np.testing.assert_allclose(handle.position, data.geom_xpos[g], atol=1e-12)
        np.testing.assert_allclose(quat_mat(handle.wxyz), data.geom_xmat[g], atol=1e-12)
    for g in scene.moving:  # every geom that moves, not only the chosen few
        np.testing.assert_allclose(scene.handles[g].position, data.geom_xpos[g], atol=1e-12)
        np.testing.assert_allclose(quat_mat(scene.handles[g].wxyz), data.geom_xmat[g], atol=1e-12)
    # Geoms welded to the world were sent once, where MuJoCo has them in any state.
    static = sorted(set(scene.handles) - set(scene.moving))
    assert model.geom("floor").id in static and model.geom("obj_cube").id not in static
    for g in static:
        np.testing.assert_allclose(scene.handles[g].position, data.geom_xpos[g], atol=1e-12)
    # Colours: the model's, and a repaint (as the task paints the episode's object) is sent on the next update.
    cube = model.geom("obj_cube").id
    assert scene.handles[cube].color == rgb255(model.geom_rgba[cube])
    model.geom_rgba[cube] = (0.85, 0.12, 0.1, 1.0)
    scene.update(data)
    assert scene.handles[cube].color == (217, 31, 26)


TOY = """
<mujoco>
  <asset>
    <mesh name="tetra" vertex="0 0 0  0.3 0 0  0 0.2 0  0 0 0.1"/>
    <hfield name="ground" nrow="3" ncol="3" size="1 1 0.1 0.1"/>
    <material name="steel" rgba="0.2 0.4 0.6 1"/>
  </asset>
  <worldbody>
    <geom name="plane" type="plane" size="0.7 0.4 0.1"/>
    <geom name="infinite" type="plane" size="0 0 1"/>
    <geom name="hfield" type="hfield" hfield="ground"/>
    <body name="moving" pos="0 0 1">
      <freejoint/>
      <geom name="sphere" type="sphere" size="0.05" material="steel"/>
      <geom name="capsule" type="capsule" size="0.03 0.08" pos="0.2 0 0" material="steel" rgba="1 0 0 1"/>
      <geom name="ellipsoid" type="ellipsoid" size="0.05 0.07 0.09" pos="0.4 0 0"/>
      <geom name="cylinder" type="cylinder" size="0.04 0.06" pos="0.6 0 0"/>
      <geom name="box" type="box" size="0.01 0.02 0.03" pos="0.8 0 0"/>
      <geom name="mesh" type="mesh" mesh="tetra" pos="1 0 0"/>
      <geom name="collision" type="box" size="0.5 0.5 0.5" group="3"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_geom_meshes_fill_mujocos_bounding_boxes(server):
    """Every drawn type's triangles span the box MuJoCo bounds the geom with (geom_aabb, in the geom's frame)."""
    model = mujoco.MjModel.from_xml_string(TOY)
    scene = ViserScene(server, model, root="/toy")
    for name in ("sphere", "capsule", "ellipsoid", "cylinder", "box", "mesh"):
        g = model.geom(name).id
        vertices, faces = geom_mesh(model, g)
        center, half = model.geom_aabb[g, :3], model.geom_aabb[g, 3:]
        lo, hi = vertices.min(axis=0), vertices.max(axis=0)
        # Tessellated curves stay inside the surface (icosphere vertices miss the poles by < 1.5 %).
        np.testing.assert_allclose((hi + lo) / 2, center, atol=1e-6, err_msg=name)  # float32 mesh vertices
        np.testing.assert_allclose((hi - lo) / 2, half, rtol=0.015, err_msg=name)
        assert faces.max() < len(vertices) and g in scene.handles and g in scene.moving
    plane, infinite = (geom_mesh(model, model.geom(n).id)[0] for n in ("plane", "infinite"))
    np.testing.assert_allclose(plane.max(axis=0), (0.7, 0.4, 0.0))
    np.testing.assert_allclose(infinite.max(axis=0), (INFINITE_PLANE / 2, INFINITE_PLANE / 2, 0.0))
    assert scene.skipped == ["hfield"]  # not drawn, and said so
    assert model.geom("collision").id not in scene.handles  # group 3: MuJoCo's renderer hides it too
    # MuJoCo's colour rule: the material's unless the geom sets its own rgba.
    np.testing.assert_allclose(geom_rgba(model, model.geom("sphere").id), (0.2, 0.4, 0.6, 1.0))
    np.testing.assert_allclose(geom_rgba(model, model.geom("capsule").id), (1.0, 0.0, 0.0, 1.0))


# -- the script: inputs and a recorded episode -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def dataset(tmp_path_factory, view) -> Path:
    """One 6-step demo of the scripted controller with states and stored subtask signals (ends at 2, 3, 4)."""
    import r2s2r.tasks as tasks
    from r2s2r.behavior import make_generator
    from r2s2r.data.hdf5 import DemoWriter

    env = tasks.make("R2S2R-PickSort-v0", cameras=())
    obs, _ = env.reset(seed=3)
    controller = make_generator("scripted")
    controller.reset(env, obs, np.random.default_rng(3))
    states, actions = [], []
    for _ in range(6):
        states.append(env.state())
        actions.append(controller(obs))
        obs, *_ = env.step(actions[-1])
    env.close()
    steps = np.arange(6)
    signals = {name: steps >= end for name, end in (("intercept", 2), ("grasp", 3), ("carry", 4))}
    path = tmp_path_factory.mktemp("view") / "demo.hdf5"
    with DemoWriter(path, "R2S2R-PickSort-v0", {"control_hz": 20.0}) as writer:
        writer.append(
            {
                "actions": np.array(actions),
                "states": np.array(states),
                "initial_state": states[:1],
                "obs": {"datagen_info": {"subtask_term_signals": signals}},
            },
            {"seed": 3, "condition": "nominal"},
        )
    return path


@pytest.mark.parametrize(
    "args, names",
    [
        (["--dataset", "{tmp}/missing.hdf5"], ["missing.hdf5", "no such dataset file"]),
        (["--dataset", "{data}", "--episode", "7"], ["--episode 7", "holds 1 episode;", "[0, 0]"]),
        (["--dataset", "{data}", "--task", "R2S2R-PickSort-Real-v0"], ["--task R2S2R-PickSort-Real-v0", "recorded in"]),
        (["--task", "R2S2R-Nope-v0"], ["'R2S2R-Nope-v0'", "unknown task ID"]),
        (["--episode", "1"], ["--episode", "needs --dataset"]),
        (["--checkpoint", "{tmp}/missing.pt"], ["missing.pt", "no such file"]),
        (["--host", "203.0.113.7"], ["--host", "'203.0.113.7'", "cannot serve on it"]),  # TEST-NET-3: not ours
        (["--dataset", "{data}", "--episode", "-1"], ["--episode", "'-1'"]),
    ],
    ids=[
        "missing-dataset",
        "episode-out-of-range",
        "other-task",
        "unknown-task",
        "episode-without-dataset",
        "missing-checkpoint",
        "foreign-host",
        "negative-episode",
    ],
)
def test_bad_input_exits_2_naming_it(args, names, dataset, tmp_path, monkeypatch, capsys):
    args = [a.format(tmp=tmp_path, data=dataset) for a in args]
    code, err = run_script_in_process(
        "view.py", *args, "--port", "0", cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys
    )
    assert code == 2, err
    assert "error: " in err and "Traceback" not in err, err
    for name in names:
        assert name in err, err


def test_help_explains(view, capsys):
    with pytest.raises(SystemExit) as raised:
        view.parse_args(["--help"])
    text = capsys.readouterr().out
    assert raised.value.code == 0
    for word in ("Sources of motion", "--dataset", "--episode", "--checkpoint", "--port", "--host", "subtasks"):
        assert word in text, text


def test_recorded_episode_seeks_its_states_and_shows_its_subtasks(view, dataset, server):
    from r2s2r.data.hdf5 import DemoReader

    source, task = view.make_source(
        view.parse_args(["--dataset", str(dataset), "--cameras", "head_left", "--size", "32"])
    )
    with DemoReader(dataset) as reader:
        states = reader.load(reader.names[0])["states"]
    try:
        viewer = view.Viewer(server, source)
        data, nq = source.env.physics.host_data(0), source.env.model.nq
        viewer.seek(4)
        np.testing.assert_array_equal(data.qpos, states[4][:nq])
        np.testing.assert_array_equal(data.qvel, states[4][nq:])
        arm = geoms_of(viewer.scene, source.env.model, "right_link5")[0]
        np.testing.assert_allclose(viewer.scene.handles[arm].position, data.geom_xpos[arm], atol=1e-12)
        assert viewer.frame_input.value == 4 and viewer.images["head_left"].image.shape == (32, 32, 3)
        status = viewer.status.content
        assert "stored in the file" in status and "**▶ release**" in status and "| carry | 3–3 |" in status, status
        assert viewer.step() and viewer.frame == 5
        assert not viewer.step() and viewer.frame == 5  # the last frame
        viewer.reset()
        assert viewer.frame == 0 and "**▶ intercept**" in viewer.status.content
        np.testing.assert_array_equal(data.qpos, states[0][:nq])
    finally:
        source.env.close()


def test_live_subtasks_end_where_annotation_puts_them(view):
    """Found step by step in a live episode of the scripted controller, the subtasks come in order and end where
    annotate() puts them in the whole episode (what a recorded demo of it would store)."""
    from r2s2r.data.annotate import annotate_traces, traces

    source, _ = view.make_source(view.parse_args(["--cameras", ""]))
    try:
        source.reset()
        found = []
        while source.step(len(found)) is not None:
            found.append(view.ends_so_far(source.trace))
        assert source.info["success"]
        annotation = annotate_traces(traces(**{k: np.array(v) for k, v in source.trace.items()}))
        assert found[-1] == list(annotation.ends)
        assert [len(ends) for ends in found] == sorted(len(ends) for ends in found) and len(found[0]) == 0
        text = source.describe(len(found))
        assert "success" in text and "controller phase: **" in text, text
        for name, start, stop in annotation.segments():
            assert f"| {start}–{stop - 1} |" in text, (name, text)
    finally:
        source.env.close()


# -- the page in headless Chromium --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live(view):
    """The viewer of the scripted controller live, served on a free port; its loop runs on a thread of its own,
    which makes the environment (whose OpenGL context belongs to it)."""
    ready, stop, out = threading.Event(), threading.Event(), {}

    def serve():
        try:
            source, task = view.make_source(view.parse_args(["--cameras", "head_left,right_wrist", "--size", "96"]))
            server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
            out.update(viewer=view.Viewer(server, source, fps=20.0, title=task), server=server)
        except BaseException as e:
            out["error"] = e
            raise
        finally:
            ready.set()
        try:
            out["viewer"].run(stop)
        finally:
            server.stop()
            source.env.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(300), "the viewer did not start"
    assert "error" not in out, out.get("error")
    yield out["viewer"], f"http://127.0.0.1:{out['server'].get_port()}"
    stop.set()
    thread.join(60)


@pytest.fixture(scope="module")
def chromium():
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (requirements.txt)")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium (scripts/setup.sh does)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(chromium, live):
    page = chromium.new_page(viewport=VIEWPORT)
    page.set_default_timeout(TIMEOUT * 1000)  # software WebGL on a busy 2-core machine takes seconds a frame
    # fixedDpr: viser otherwise adapts the resolution to the frame rate, redrawing a still scene at new sizes.
    page.goto(f"{live[1]}/?fixedDpr=1")
    page.wait_for_selector("canvas")
    # The client's notice that WebGL runs in software (always, with SwiftShader) lies over the scene.
    page.locator(".mantine-Notification-root").get_by_role("button").click()
    return page


def scene_region(page) -> dict:
    """The 3-D canvas left of the GUI panel (whose camera images change with every step), as a screenshot clip."""
    box = page.locator("canvas").first.bounding_box()
    panel = page.get_by_role("button", name="Step").bounding_box()
    return {"x": box["x"], "y": box["y"], "width": panel["x"] - 30 - box["x"], "height": box["height"]}


def screenshot(page, clip: dict) -> np.ndarray:
    import imageio.v2 as imageio

    return imageio.imread(page.screenshot(type="png", clip=clip), format="png")[..., :3].astype(float)


def changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pixels that differ by more than antialiasing noise."""
    return np.abs(a - b).sum(axis=-1) > 24


def next_view(page, clip: dict, previous: np.ndarray | None = None) -> np.ndarray:
    """The scene once the page shows a new, still view: it differs from `previous` (messages in flight have arrived;
    None: any view) and two screenshots half a second apart agree (the frame is drawn)."""
    last, deadline = screenshot(page, clip), time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        time.sleep(0.5)
        shot = screenshot(page, clip)
        if np.array_equal(shot, last) and (previous is None or changed(shot, previous).any()):
            return shot
        last = shot
    raise AssertionError(f"no new still view within {TIMEOUT} s")


def test_page_draws_the_robot_and_the_belt_and_steps(page, live):
    """The 3-D view is not blank; hiding the belt's and the robot's meshes uncovers pixels mostly of their model
    colours (lit: within 0.1 per channel); clicking Step moves the arm on the page."""
    viewer, _ = live
    model, scene = viewer.source.env.model, viewer.scene
    clip = scene_region(page)
    shown = next_view(page, clip)
    assert shown.std() > 20, f"the 3-D view is (nearly) uniform: standard deviation {shown.std():.1f}"
    robot = np.flatnonzero(model.body_rootid == model.body("right_base").id)  # the picking arm and its hand
    parts = {
        "belt": geoms_of(scene, model, "belt"),
        "robot": [g for b in robot for g in geoms_of(scene, model, model.body(b).name)],
    }
    masks = {}
    for part, geoms in parts.items():
        for g in geoms:
            scene.handles[g].visible = False
        hidden = next_view(page, clip, shown)
        for g in geoms:
            scene.handles[g].visible = True
        masks[part] = changed(shown, hidden)
        pixels = shown[masks[part]] / 255.0
        colours = np.unique([geom_rgba(model, g)[:3] for g in geoms], axis=0)
        near = np.abs(pixels[:, None, :] - colours[None]).max(axis=-1) < 0.1  # (pixel, colour)
        print(
            f"{part}: {masks[part].sum()} pixels, {near.any(axis=1).mean():.0%} in its colours, "
            f"{near.mean(axis=0).max():.0%} in its main one"
        )
        assert masks[part].sum() > 1000, f"the {part} is (almost) not drawn: {masks[part].sum()} pixels"
        assert near.any(axis=1).mean() > 0.3, f"the {part}'s pixels are not of its colours {colours.tolist()}"
        assert near.mean(axis=0).max() > 0.15, f"none of the {part}'s colours {colours.tolist()} is drawn much"
    # Stepping from the browser moves the arm in the 3-D view.
    before = next_view(page, clip, hidden)
    for _ in range(STEPS):
        page.get_by_role("button", name="Step").click()
    deadline = time.monotonic() + TIMEOUT
    while viewer.frame < STEPS and time.monotonic() < deadline:
        time.sleep(0.2)
    assert viewer.frame == STEPS
    after = next_view(page, clip, before)
    moved = changed(after, before)
    print(
        f"scene std {shown.std():.1f}; after {STEPS} steps {moved.mean():.1%} of the view changed, "
        f"{(moved & masks['robot']).sum()} pixels where the arm was"
    )
    assert moved.mean() > 0.002 and (moved & masks["robot"]).sum() > 200, "the arm did not move on the page"
    assert page.get_by_text(f"step {STEPS}:").count() == 1  # the GUI's step counter followed
