"""View the cell in a web browser (viser), without Isaac Sim: the 3-D scene, the task's cameras, the subtasks.

Examples:
  python scripts/view.py --task R2S2R-PickSort-v0                                 # the scripted controller, live
  python scripts/view.py --dataset outputs/sim/wg_bg.hdf5 --episode 3              # a recorded episode's states
  python scripts/view.py --task R2S2R-PickSort-Real-v0 --checkpoint outputs/train/wg_bg/policy.pt --seed 4

Then open http://127.0.0.1:8080 (the address is printed; --host 0.0.0.0 serves other machines, --port another port;
a busy port makes viser take the next free one).

Sources of motion:
  default       the privileged scripted controller acts live in the task (episode --seed, --condition);
  --checkpoint  a trained policy (scripts/train.py) acts live; it sees the cameras it was trained on, which are then
                the cameras shown;
  --dataset     episode --episode (0-based, in file order) of a demo dataset that stores simulator states (e.g.
                generate.py's): the task is reset with the demo's seed and condition (colours, lighting) and every
                recorded state is restored; --task defaults to the dataset's.

The page shows the scene (every drawn geom of the task's MuJoCo model, posed from the simulation each frame), the
camera images as the task renders them (after the lens model), Play / Pause / Step / Reset, the frame (a slider
that seeks in a recorded episode, a step counter live) and the subtasks (intercept, grasp, carry, release;
r2s2r.data.annotate). A recorded episode shows the annotation its file stores, else the one computed from its
signals. Live, the subtasks are found from the same signals by the same rules as the steps come in, so a boundary
can move back while an attempt is retried; the scripted controller's own phase is shown beside them.

Bad inputs (a missing or malformed dataset, an episode index out of range, an unknown task, a bad checkpoint) exit
with status 2 and an `error: ...` line before any server starts. Ctrl-C stops the server.
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import sys
import threading
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.annotate import (  # noqa: E402
    SUBTASKS,
    AnnotationError,
    demo_annotation,
    stored_annotation,
    traces,
)
from r2s2r.data.annotate import ends_so_far as annotation_ends_so_far  # noqa: E402
from r2s2r.data.hdf5 import DatasetError, DemoReader  # noqa: E402

DEFAULT_TASK = "R2S2R-PickSort-v0"


def host_address(text: str) -> str:
    """An address this machine can serve on, found by binding a socket to it (viser, given one it cannot bind,
    tries a thousand ports and then waits forever)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(text, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind(address)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: cannot serve on it ({e.strerror or e})") from None
    return text


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--task",
        default=None,
        help=f"task ID (scripts/list_tasks.py); default {DEFAULT_TASK}, or the dataset's task with --dataset",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--dataset", default=None, help="replay a recorded episode of this HDF5 dataset")
    source.add_argument("--checkpoint", default=None, help="run this trained policy (policy.pt) live")
    p.add_argument(
        "--episode",
        type=cli.non_negative_int,
        default=None,
        help="with --dataset: the episode's index in the file (0-based; default 0)",
    )
    p.add_argument("--seed", type=cli.seed, default=0, help="live: the episode's seed")
    p.add_argument(
        "--condition",
        default="nominal",
        help="live: reset condition (nominal, lighting, belt_speed, novel_objects, combined)",
    )
    p.add_argument(
        "--cameras",
        default="head_left,right_wrist",
        help="comma-separated cameras to show (a checkpoint shows its own)",
    )
    p.add_argument("--size", type=cli.image_size, default=160, help="camera image height and width in pixels")
    p.add_argument(
        "--fps",
        type=cli.int_in(1, 120),
        default=20,
        help="frames per second while playing (at most; 20 is the control rate, real time)",
    )
    p.add_argument("--host", type=host_address, default="127.0.0.1", help="address to serve on")
    p.add_argument("--port", type=cli.int_in(0, 65535), default=8080, help="port to serve on (0: any free port)")
    args = p.parse_args(argv)
    if args.episode is not None and args.dataset is None:
        p.error("argument --episode: needs --dataset")
    return args


# -- subtasks ---------------------------------------------------------------------------------------------------
def subtask_table(ends: list[int], length: int | None, frame: int) -> str:
    """Markdown: each subtask with its steps (found so far), the one `frame` is in marked."""
    bounds = [0, *ends]
    current = int(np.searchsorted(ends, frame, side="right"))
    rows = ["| subtask | steps |", "|---|---|"]
    for k, name in enumerate(SUBTASKS[: len(bounds)]):
        stop = bounds[k + 1] - 1 if k + 1 < len(bounds) else (length - 1 if length else "…")
        label = f"**▶ {name}**" if k == current else name
        rows.append(f"| {label} | {bounds[k]}–{stop} |")
    return "\n".join(rows)


def ends_so_far(trace: dict[str, list]) -> list[int]:
    """The subtask ends of a live episode's steps so far (`r2s2r.data.annotate.ends_so_far`)."""
    return annotation_ends_so_far(traces(**{k: np.array(v) for k, v in trace.items()}))


# -- sources of motion ------------------------------------------------------------------------------------------
class Recorded:
    """A dataset episode: its states restored one by one in the task, reset with the demo's seed and condition."""

    def __init__(self, env, name: str, demo: dict, attrs: dict):
        self.env, self.name, self.attrs = env, name, attrs
        self.states = np.asarray(demo["states"])
        self.length = len(self.states)
        info = demo.get("obs", {}).get("datagen_info", {})
        try:
            stored = stored_annotation(info, name)
            annotation = stored or demo_annotation(info, attrs, name)
            self.ends = list(annotation.ends)
            self.origin = "stored in the file" if stored else "computed from the demo's signals (not stored)"
        except AnnotationError as e:
            self.ends, self.origin = [], f"none: {e}"

    def reset(self) -> dict:
        self.env.reset(seed=int(self.attrs["seed"]), options={"condition": self.attrs.get("condition", "nominal")})
        return self.seek(0)

    def seek(self, frame: int) -> dict:
        self.env.set_state(self.states[frame])
        return self.env.observe()

    def step(self, frame: int) -> dict | None:
        """The observation of frame `frame` + 1, or None past the last."""
        return self.seek(frame + 1) if frame + 1 < self.length else None

    def describe(self, frame: int) -> str:
        return (
            f"**{self.name}** ({self.attrs.get('object', '?')}, {self.attrs.get('condition', 'nominal')}), "
            f"frame {frame} of {self.length - 1}\n\nsubtask annotation: {self.origin}\n\n"
            + subtask_table(self.ends, self.length, frame)
        )


class Live:
    """An episode played live: `controller` (the behaviour-generator interface) acts in the task at every step."""

    length = None

    def __init__(self, env, controller, seed: int):
        self.env, self.controller, self.seed = env, controller, seed

    def reset(self) -> dict:
        self.obs, self.info = self.env.reset(seed=self.seed)
        self.controller.reset(self.env, self.obs, np.random.default_rng(self.seed))
        self.done = False
        self.trace: dict[str, list] = {"eef_pos": [], "object_pos": [], "hand": [], "bin_pos": []}  # see traces()
        return self.obs

    def step(self, frame: int) -> dict | None:
        if self.done:
            return None
        obs = self.obs
        action = self.controller(obs)
        priv = obs["privileged"]
        for key, value in (
            ("eef_pos", obs["proprio"]["ee_pose"][:3]),
            ("hand", action[7:]),
            ("object_pos", priv["object_pos"]),
            ("bin_pos", priv["target_bin_pos"]),
        ):
            self.trace[key].append(np.array(value))
        self.obs, _, terminated, truncated, self.info = self.env.step(action)
        self.done = terminated or truncated
        return self.obs

    def describe(self, frame: int) -> str:
        info = self.info
        outcome = ("success" if info["success"] else info["failure"]) if self.done else "running"
        phase = getattr(self.controller, "phase", None)
        lines = [
            f"**live** ({info['object']}, {info['colour']}, {info['condition']}, seed {self.seed}), step "
            f"{frame}: {outcome}"
        ]
        if phase is not None:
            lines.append(f"controller phase: **{phase}**")
        if self.trace["eef_pos"]:
            # Step k's subtask is that of the action taken from frame k; frame `frame` shows the last one's result.
            steps = len(self.trace["eef_pos"]) if self.done else None
            lines += ["subtasks (found so far):", subtask_table(ends_so_far(self.trace), steps, frame - 1)]
        return "\n\n".join(lines)


# -- the viewer -------------------------------------------------------------------------------------------------
class Viewer:
    """The server side: a source of motion shown through a viser server, and its controls.

    `step()`, `reset()` and `seek()` (recorded episodes) move the source and redraw; `frame` is the current frame.
    They must run on the thread that made the task environment (its OpenGL context is current there), so the GUI's
    callbacks, which viser runs on its own threads, only queue them (`commands`); `run` executes the queue and
    plays.
    """

    def __init__(self, server, source, fps: float = 20.0, title: str = ""):
        from r2s2r.render.viser_scene import ViserScene

        self.server, self.source, self.period = server, source, 1.0 / fps
        self.commands: queue.SimpleQueue = queue.SimpleQueue()
        self.playing = False
        self.frame = 0
        obs = source.reset()
        env = source.env
        self.scene = ViserScene(server, env.model, env.physics.host_data(0))
        self._aim_camera()
        gui = server.gui
        gui.add_markdown(title)
        with gui.add_folder("Playback"):
            buttons = {label: gui.add_button(label) for label in ("Play", "Pause", "Step", "Reset")}
            if source.length:
                self.frame_input = gui.add_slider("frame", 0, source.length - 1, 1, 0)
                self.frame_input.on_update(self._slider_moved)
            else:
                self.frame_input = gui.add_number("step", 0, disabled=True)
        actions = {
            "Play": lambda: self.play(True),
            "Pause": lambda: self.play(False),
            "Step": self.step,
            "Reset": self.reset,
        }
        for label, button in buttons.items():
            button.on_click(lambda _, act=actions[label]: self.commands.put(act))
        with gui.add_folder("Subtasks"):
            self.status = gui.add_markdown("")
        with gui.add_folder("Cameras"):
            self.images = {
                cam: gui.add_image(image, label=cam)
                for cam, image in obs["images"].items()
                if not cam.endswith("_depth")
            }
        self._show(obs)

    def _slider_moved(self, event) -> None:
        # Also called when `_show` sets the value: then it is the current frame and there is nothing to do.
        frame = int(event.target.value)
        if frame != self.frame:
            self.commands.put(lambda: self.seek(frame))

    def _aim_camera(self) -> None:
        """Start browsers looking across the belt at the picking arm and the bins."""
        look = np.array([0.1, -0.3, 0.15])
        self.server.initial_camera.look_at = tuple(look)
        self.server.initial_camera.position = tuple(look + np.array([0.0, 1.2, 0.9]))

    def play(self, on: bool) -> None:
        self.playing = on

    def step(self) -> bool:
        """One frame on; False (and paused) at the end of the episode."""
        obs = self.source.step(self.frame)
        if obs is None:
            self.playing = False
            return False
        self.frame += 1
        self._show(obs)
        return True

    def reset(self) -> None:
        self.playing = False
        self.frame = 0
        self._show(self.source.reset())

    def seek(self, frame: int) -> None:
        """Show frame `frame` of a recorded episode."""
        if frame != self.frame:
            self.frame = frame
            self._show(self.source.seek(frame))

    def _show(self, obs: dict) -> None:
        self.scene.update(self.source.env.physics.host_data(0))
        for cam, handle in self.images.items():
            handle.image = obs["images"][cam]
        self.frame_input.value = self.frame
        self.status.content = self.source.describe(self.frame)

    def run(self, stop: threading.Event, poll: float = 0.05) -> None:
        """Execute queued commands and play (at most one frame per period) until `stop` is set."""
        next_frame = time.monotonic()
        while not stop.is_set():
            wait = max(0.0, next_frame - time.monotonic()) if self.playing else poll
            try:
                self.commands.get(timeout=wait)()
            except queue.Empty:
                if self.playing:
                    next_frame = time.monotonic() + self.period
                    self.step()


# -- wiring -----------------------------------------------------------------------------------------------------
def open_episode(path: str, episode: int) -> tuple[str, str, dict, dict, dict]:
    """(task ID, demo name, arrays, attrs, env_args) of episode `episode` of the dataset at `path`."""
    with DemoReader(
        path,
        min_demos=1,
        fields=("states",),
        attrs=("seed",),
        purpose="the viewer restores the recorded states in the task reset with the demo's seed",
    ) as r:
        if episode >= len(r.names):
            raise DatasetError(
                f"--episode {episode}: {path} holds {len(r.names)} episode{'' if len(r.names) == 1 else 's'}; "
                f"expected an index in [0, {len(r.names) - 1}]"
            )
        name = r.names[episode]
        return r.env_name, name, r.load(name), r.attrs(name), dict(r.env_args)


def make_source(args: argparse.Namespace):
    """The source of motion the arguments ask for; ConfigError, DatasetError or FileNotFoundError if they are bad."""
    import r2s2r.tasks as tasks
    from r2s2r.behavior import make_generator

    view = {"cameras": tuple(c for c in args.cameras.split(",") if c), "image_size": (args.size, args.size)}
    if args.dataset is not None:
        task, name, demo, attrs, env_args = open_episode(args.dataset, args.episode or 0)
        if args.task is not None and args.task != task:
            raise DatasetError(
                f"--task {args.task}: {args.dataset} was recorded in {task}; leave --task out or pass {task}"
            )
        env = tasks.make(task, control_hz=float(env_args.get("control_hz", 20.0)), **view)
        width = env.model.nq + env.model.nv
        if demo["states"].shape[1] != width:
            env.close()
            raise DatasetError(
                f"{args.dataset}: {name}: field 'states' has {demo['states'].shape[1]} columns; "
                f"expected {width}, qpos | qvel of {task}'s model"
            )
        return Recorded(env, name, demo, attrs), task
    task = args.task or DEFAULT_TASK
    if args.checkpoint is not None:
        from r2s2r.policy.agent import PolicyController, load_agent

        agent = load_agent(args.checkpoint, seed=args.seed)
        env = tasks.make(task, condition=args.condition, **agent.env_overrides)
        return Live(env, PolicyController(agent), args.seed), task
    env = tasks.make(task, condition=args.condition, **view)
    return Live(env, make_generator("scripted"), args.seed), task


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        source, task = make_source(args)
    except (ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import viser

    server = viser.ViserServer(host=args.host, port=args.port, label="r2s2r", verbose=False)
    what = f"{args.dataset}, episode {args.episode or 0}" if args.dataset else (args.checkpoint or "scripted")
    viewer = Viewer(server, source, args.fps, f"**{task}**  \n{what}")
    print(f"serving {task} ({what}) at http://{server.get_host()}:{server.get_port()} (Ctrl-C stops)", flush=True)
    try:
        viewer.run(threading.Event())
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        source.env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
