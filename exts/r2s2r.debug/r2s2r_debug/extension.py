"""The debug window: choose a task ID (a MuJoCo task or one of the cell's Isaac Lab tasks), reset, step or play it,
and watch its cameras, its episode's randomization and its privileged state. The session itself is kit-less
(`r2s2r.debug_session.DebugSession`, tested without Kit); this module is the window around it. r2s2r is imported when
the window acts, not when Kit loads the extension.

Buttons only record a request; `DebugWindow.service` carries requests out. An Isaac Lab environment renders through
Kit's own update while it builds and steps, so it must not be built or stepped from inside Kit's update event: its
requests are serviced by the loop of `scripts/debug_gui.py` (which sets `loop_owner`). A MuJoCo task is serviced
from the update event when the extension was enabled some other way (Isaac Sim's Extension Manager).
"""

from __future__ import annotations

import numpy as np
import omni.ext
import omni.kit.app
import omni.ui as ui
import omni.usd

IMAGE_PX = 192
_WINDOW: DebugWindow | None = None


def window() -> DebugWindow | None:
    """The open debug window, for the loop that services it (`scripts/debug_gui.py`)."""
    return _WINDOW


class DebugWindow:
    def __init__(self):
        from r2s2r.debug_session import SOURCES, task_ids
        from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS

        self._tasks, self._conditions, self._sources = task_ids(), sorted(CONDITIONS), SOURCES
        self.session = None
        self.loop_owner = False  # set by scripts/debug_gui.py, whose loop calls `service`
        self._requests: list[str] = []
        self._playing = False
        self._stage = None
        self._images: dict[str, ui.ByteImageProvider] = {}
        self._update = omni.kit.app.get_app().get_update_event_stream().create_subscription_to_pop(
            self._on_update, name="r2s2r.debug service")
        self.window = ui.Window("r2s2r debug", width=460, height=820)
        with self.window.frame:
            with ui.VStack(spacing=4):
                self._task = self._row_combo("task", self._tasks)
                self._world = self._row_field("world (MuJoCo tasks; empty: the task's)", ui.StringField)
                self._condition = self._row_combo("condition", self._conditions)
                self._seed = self._row_field("seed", ui.IntField)
                self._source = self._row_combo("drive with", self._sources)
                self._path = self._row_field("dataset / checkpoint file", ui.StringField)
                self._episode = self._row_field("dataset episode index", ui.IntField)
                with ui.HStack(height=28, spacing=4):
                    for label, request in (("Load + reset", "load"), ("Reset", "reset"), ("Step", "step"),
                                           ("Play / pause", "play")):
                        ui.Button(label, clicked_fn=lambda r=request: self.request(r))
                self._status = ui.Label("no task loaded", height=20, word_wrap=True)
                self._cameras = ui.VStack(height=0)
                ui.Label("episode randomization", height=20)
                self._randomization = ui.Label("", word_wrap=True, alignment=ui.Alignment.LEFT_TOP)
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

    def select(self, task: str, seed: int = 0, condition: str = "nominal") -> None:
        """Set the window's fields (the launch script's --task, --seed and --condition)."""
        self._task.get_item_value_model().set_value(self._tasks.index(task))
        self._condition.get_item_value_model().set_value(self._conditions.index(condition))
        self._seed.set_value(seed)

    @property
    def status_text(self) -> str:
        return self._status.text

    def request(self, what: str) -> None:
        """'load', 'reset', 'step' or 'play' (toggles), carried out by the next `service`."""
        if what == "play":
            self._playing = not self._playing
        else:
            self._requests.append(what)

    def service(self) -> bool:
        """Carry out the pending requests and, while playing, one step. Returns whether the session stepped."""
        requests, self._requests = self._requests, []
        stepped = False
        for what in requests:
            if what == "load":
                self._load()
            elif self.session is not None and what == "reset":
                self.session.reset()
            elif self.session is not None and what == "step":
                self.session.step()
                stepped = True
        if self._playing and self.session is not None:
            self.session.step()
            stepped = True
            self._playing = not self.session.done
        if requests or stepped:
            self._show()
        return stepped

    def _on_update(self, _event) -> None:
        if not self.loop_owner:
            self.service()

    def _load(self) -> None:
        from r2s2r.debug_session import DebugSession, is_isaaclab

        self._playing = False
        task = self._tasks[self._task.get_item_value_model().as_int]
        if is_isaaclab(task) and not self.loop_owner:
            self._status.text = (f"{task} is an Isaac Lab task: open the window with `isaaclab -p scripts/debug_gui.py`, "
                                 "whose loop builds and steps Newton")
            return
        if self.session is not None:  # Isaac Lab runs one simulation at a time
            self.session.close()
            self.session = None
        try:
            self.session = DebugSession(
                task, self._world.as_string.strip(), self._conditions[self._condition.get_item_value_model().as_int],
                self._seed.as_int, self._sources[self._source.get_item_value_model().as_int],
                self._path.as_string.strip(), self._episode.as_int)
        except Exception as e:  # a bad task, world file, dataset or checkpoint: say so in the window, keep Kit running
            self._status.text = f"error: {e}"
            return
        self._stage = None
        if not self.session.isaaclab:
            self._open_stage()  # an Isaac Lab task built its scene on Kit's stage already
        self._cameras.clear()
        self._images = {}
        with self._cameras:
            for name in self.session.images():
                ui.Label(name, height=18)
                self._images[name] = ui.ByteImageProvider()
                ui.ImageWithProvider(self._images[name], width=IMAGE_PX, height=IMAGE_PX)

    def _open_stage(self) -> None:
        """A MuJoCo task's cell as the viewport's stage, built by the same builder as `scripts/export_usd.py`."""
        from r2s2r.cell.usd import build_stage

        env = self.session.env
        context = omni.usd.get_context()
        context.new_stage()
        self._stage = context.get_stage()
        self._stage.GetRootLayer().TransferContent(build_stage(env.model, env.cell).GetRootLayer())

    def _show(self) -> None:
        s = self.session
        if s is None:
            return
        if self._stage is not None:  # a MuJoCo task: its bodies' poses onto the stage
            from r2s2r.cell.usd import sync_poses

            sync_poses(self._stage, s.env.model, s.env.physics.host_data(0))
        self._status.text = s.status
        for name, rgb in s.images().items():
            rgba = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=2)
            self._images[name].set_bytes_data(rgba.ravel().tolist(), [rgb.shape[1], rgb.shape[0]])
        self._randomization.text = "\n".join(f"{k}: {v}" for k, v in s.randomization().items())
        self._privileged.text = "\n".join(f"{k}: {np.array2string(np.asarray(v), precision=3)}"
                                          for k, v in s.obs["privileged"].items())

    def destroy(self) -> None:
        self._playing = False
        self._update = None
        if self.session is not None:
            self.session.close()
        self.window.destroy()


class DebugExtension(omni.ext.IExt):
    """Opens the debug window when Kit enables `r2s2r.debug` and closes it when the extension is disabled."""

    def on_startup(self, ext_id: str) -> None:
        global _WINDOW
        _WINDOW = DebugWindow()

    def on_shutdown(self) -> None:
        global _WINDOW
        if _WINDOW is not None:
            _WINDOW.destroy()
        _WINDOW = None
