"""The debug window: a task on the MuJoCo physics, its USD stage in the Kit viewport, its cameras and privileged state
in the window. Runs only inside Kit (omni.ui); r2s2r is imported when the window acts, not when Kit loads it."""

from __future__ import annotations

import numpy as np
import omni.ext
import omni.kit.app
import omni.ui as ui
import omni.usd

SOURCES = ("scripted", "dataset episode", "checkpoint")
IMAGE_PX = 192


class Session:
    """One task instance and what drives it: the scripted controller, a dataset episode's actions, or a policy."""

    def __init__(self, task: str, world: str, condition: str, seed: int, source: str, path: str, episode: int):
        import r2s2r.tasks as tasks

        self.task, self.seed, self.condition = task, seed, condition
        self.actions = self.controller = self.agent = None
        overrides = {"world": world} if world else {}
        if source == "checkpoint":
            from r2s2r.policy.agent import load_agent

            self.agent = load_agent(path, seed=seed)
            overrides.update(self.agent.env_overrides)  # the cameras and image size the policy was trained on
        self.env = tasks.make(task, **overrides)
        if source == "dataset episode":
            from r2s2r.data import DemoReader

            with DemoReader(path, min_demos=1, fields=("initial_state",), attrs=("seed",),
                            purpose="the episode is reset with its seed and restored to its initial state") as r:
                name = r.names[episode]
                attrs, demo = r.attrs(name), r.load(name)
            self.seed, self.condition = int(attrs["seed"]), attrs.get("condition", "nominal")
            self.initial_state, self.actions = demo["initial_state"], list(np.asarray(demo["actions"]))
        elif source == "scripted":
            from r2s2r.behavior import make_generator

            self.controller = make_generator("scripted")
        self.reset()

    def reset(self) -> None:
        self.obs, self.info = self.env.reset(seed=self.seed, options={"condition": self.condition})
        self.step_index, self.done = 0, False
        if self.actions is not None:
            self.env.set_state(self.initial_state)
            self.obs = self.env.observe()
        elif self.controller is not None:
            self.controller.reset(self.env, self.obs, np.random.default_rng(self.seed))
        else:
            self.agent.reset(self.seed)

    def step(self) -> None:
        if self.done:
            return
        if self.actions is not None:
            if self.step_index >= len(self.actions):
                self.done = True
                return
            action = self.actions[self.step_index]
        elif self.controller is not None:
            action = self.controller(self.obs)
        else:
            action = self.agent.act({"proprio": self.obs["proprio"], "images": self.obs["images"]})
        self.obs, _, terminated, truncated, self.info = self.env.step(action)
        self.step_index += 1
        self.done = terminated or truncated


class DebugWindow:
    def __init__(self):
        import r2s2r.tasks as tasks
        from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS

        self._tasks, self._conditions = sorted(tasks.TASKS), sorted(CONDITIONS)
        self._session: Session | None = None
        self._stage = None
        self._playing = False
        self._images: dict[str, ui.ByteImageProvider] = {}
        self._update = omni.kit.app.get_app().get_update_event_stream().create_subscription_to_pop(
            self._on_update, name="r2s2r.debug play")
        self.window = ui.Window("r2s2r debug", width=460, height=760)
        with self.window.frame:
            with ui.VStack(spacing=4):
                self._task = self._row_combo("task", self._tasks)
                self._world = self._row_field("world (name or file; empty: the task's)", ui.StringField)
                self._condition = self._row_combo("condition", self._conditions)
                self._seed = self._row_field("seed", ui.IntField)
                self._source = self._row_combo("drive with", SOURCES)
                self._path = self._row_field("dataset / checkpoint file", ui.StringField)
                self._episode = self._row_field("dataset episode index", ui.IntField)
                with ui.HStack(height=28, spacing=4):
                    ui.Button("Load + reset", clicked_fn=self._load)
                    ui.Button("Reset", clicked_fn=self._reset)
                    ui.Button("Step", clicked_fn=self._step)
                    ui.Button("Play / pause", clicked_fn=self._toggle_play)
                self._status = ui.Label("no task loaded", height=20, word_wrap=True)
                self._cameras = ui.VStack(height=0)
                ui.Label("privileged state", height=20)
                self._privileged = ui.Label("", word_wrap=True, alignment=ui.Alignment.LEFT_TOP)

    @staticmethod
    def _row_combo(label: str, items) -> ui.AbstractItemModel:
        with ui.HStack(height=24):
            ui.Label(label, width=180)
            return ui.ComboBox(0, *items).model

    @staticmethod
    def _row_field(label: str, kind) -> ui.AbstractValueModel:
        with ui.HStack(height=24):
            ui.Label(label, width=180)
            return kind().model

    @staticmethod
    def _combo_value(model: ui.AbstractItemModel, items) -> str:
        return items[model.get_item_value_model().as_int]

    def _load(self) -> None:
        self._playing = False
        try:
            self._session = Session(self._combo_value(self._task, self._tasks), self._world.as_string.strip(),
                                    self._combo_value(self._condition, self._conditions), self._seed.as_int,
                                    self._combo_value(self._source, SOURCES), self._path.as_string.strip(),
                                    self._episode.as_int)
        except Exception as e:  # a bad world file, dataset or checkpoint: say so in the window, keep Kit running
            self._session = None
            self._status.text = f"error: {e}"
            return
        self._open_stage()
        self._cameras.clear()
        self._images = {}
        with self._cameras:
            for name in self._session.obs["images"]:
                if name.endswith("_depth"):
                    continue
                ui.Label(name, height=18)
                self._images[name] = ui.ByteImageProvider()
                ui.ImageWithProvider(self._images[name], width=IMAGE_PX, height=IMAGE_PX)
        self._show()

    def _open_stage(self) -> None:
        """The task's cell as the viewport's stage, built by the same builder as `scripts/export_usd.py`."""
        from r2s2r.cell.usd import build_stage

        env = self._session.env
        context = omni.usd.get_context()
        context.new_stage()
        self._stage = context.get_stage()
        self._stage.GetRootLayer().TransferContent(build_stage(env.model, env.cell).GetRootLayer())

    def _reset(self) -> None:
        if self._session is not None:
            self._session.reset()
            self._show()

    def _step(self) -> None:
        if self._session is not None:
            self._session.step()
            self._show()

    def _toggle_play(self) -> None:
        self._playing = not self._playing and self._session is not None

    def _on_update(self, _event) -> None:
        if self._playing:
            self._step()
            self._playing = not self._session.done

    def _show(self) -> None:
        from r2s2r.cell.usd import sync_poses

        s = self._session
        env = s.env
        sync_poses(self._stage, env.model, env.physics.host_data(0))
        outcome = "success" if s.info.get("success") else s.info.get("failure") or "running"
        self._status.text = f"{s.task} step {s.step_index} seed {s.seed} {s.condition}: {outcome}"
        for name, provider in self._images.items():
            rgb = s.obs["images"][name]
            rgba = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=2)
            provider.set_bytes_data(rgba.ravel().tolist(), [rgb.shape[1], rgb.shape[0]])
        self._privileged.text = "\n".join(f"{k}: {np.array2string(np.asarray(v), precision=3)}"
                                          for k, v in s.obs["privileged"].items())

    def destroy(self) -> None:
        self._playing = False
        self._update = None
        if self._session is not None:
            self._session.env.close()
        self.window.destroy()


class DebugExtension(omni.ext.IExt):
    """Opens the debug window when Kit enables `r2s2r.debug` and closes it when the extension is disabled."""

    def on_startup(self, ext_id: str) -> None:
        self._window = DebugWindow()

    def on_shutdown(self) -> None:
        self._window.destroy()
        self._window = None
