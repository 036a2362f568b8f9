"""renderer="auto": GL or the Warp ray tracer, whichever is faster here where both draw the same images."""

from __future__ import annotations

import json

import pytest

from r2s2r.tasks.pick_sort import renderer_choice
from r2s2r.tasks.pick_sort.env import PickSortEnv
from r2s2r.tasks.pick_sort.env_cfg import PickSortEnvCfg
from r2s2r.tasks.pick_sort.renderer_choice import CANDIDATES, FAITHFUL, resolve_renderer

CFG = PickSortEnvCfg(cameras=("head_left", "right_wrist"), image_size=(32, 32), world="grounded", renderer="auto")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "r2s2r" / "renderer_choice.json"
    monkeypatch.setattr(renderer_choice, "_cache_file", lambda: path)  # not XDG_CACHE_HOME: Warp's kernels live there
    return path


@pytest.mark.warp
def test_auto_measures_once_per_machine_and_camera_set_and_then_decides_at_once(cache, monkeypatch):
    pytest.importorskip("mujoco_warp")
    cfg, choice = resolve_renderer(CFG)
    assert cfg.renderer == choice.renderer in CANDIDATES and cfg.replace(renderer="auto") == CFG
    # Reset episodes drawn by both: the same images within the tolerance (measured, not assumed).
    assert choice.mean_levels <= FAITHFUL["mean_levels"] and choice.far_fraction <= FAITHFUL["far_fraction"]
    assert choice.renderer == max(choice.images_per_s, key=choice.images_per_s.get)
    assert list(json.loads(cache.read_text()).values()) == [choice.as_dict()]

    def measure_again(_cfg):
        raise AssertionError("measured again although the choice is kept")

    monkeypatch.setattr(renderer_choice, "measure_choice", measure_again)
    assert resolve_renderer(CFG) == (cfg, choice)
    env = PickSortEnv(CFG)  # the environment itself takes "auto" the same way
    try:
        assert env.cfg.renderer == choice.renderer
    finally:
        env.close()
    with pytest.raises(AssertionError, match="measured again"):  # another camera set is another decision
        resolve_renderer(CFG.replace(cameras=("head_left",)))


@pytest.mark.warp
def test_images_that_differ_or_a_missing_ray_tracer_keep_gl(cache, monkeypatch):
    pytest.importorskip("mujoco_warp")
    monkeypatch.setitem(renderer_choice.FAITHFUL, "mean_levels", 1e-6)
    choice = renderer_choice.measure_choice(CFG.replace(renderer="mujoco_gl"))
    assert choice.renderer == "mujoco_gl" and choice.reason.startswith("images differ beyond")
    assert choice.mean_levels > 1e-6 and set(choice.images_per_s) == set(CANDIDATES)

    built = PickSortEnv.__init__

    def no_warp(self, cfg):
        if cfg.renderer == "mujoco_warp":
            raise ImportError("No module named 'mujoco_warp'")
        built(self, cfg)

    monkeypatch.setattr(PickSortEnv, "__init__", no_warp)
    choice = renderer_choice.measure_choice(CFG.replace(renderer="mujoco_gl"))
    assert choice.renderer == "mujoco_gl" and "mujoco_warp unavailable: ImportError" in choice.reason
    assert not cache.exists()  # measuring alone keeps nothing; resolve_renderer does


def test_without_cameras_nothing_is_measured(cache):
    cfg, choice = resolve_renderer(CFG.replace(cameras=()))
    assert (cfg.renderer, choice, cache.exists()) == ("mujoco_gl", None, False)


def test_an_unknown_renderer_is_refused_naming_the_choices():
    from r2s2r.core import ConfigError

    with pytest.raises(ConfigError, match=r"renderer = 'mujoco': expected one of mujoco_gl, mujoco_warp, auto, "
                                          r"isaac_rtx \(auto: the faster of"):
        CFG.replace(renderer="mujoco").validate()
