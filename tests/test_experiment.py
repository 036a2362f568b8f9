"""experiment.py --scale smoke: the study's pipeline end to end on the twin, and resuming it."""

from __future__ import annotations

import json
import time

import pytest

from conftest import run_script

from r2s2r.experiment import CONFIGS, SCALES, SIM_EVAL_TASKS, plan, policies
from r2s2r.tasks import REAL_TASK


def test_smoke_experiment_produces_the_full_table_and_resumes(tmp_path):
    run_dir = tmp_path / "smoke"
    result = run_script("experiment.py", "--scale", "smoke", "--run-dir", str(run_dir), timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((run_dir / "report" / "experiment.json").read_text())
    scale = SCALES["smoke"]
    names = list(policies(scale))
    assert set(report["real"]) == set(names)
    for summary in report["real"].values():
        assert summary["overall"]["trials"] == scale.eval_trials
        assert summary["nominal"]["trials"] + summary["shifted"]["trials"] == scale.eval_trials
    assert len(report["table"]) == len(CONFIGS) == 4
    for axis in ("world", "behaviour"):
        effect = report["main_effects"][axis]
        lo, hi = effect["interval"]
        assert -1 <= lo <= effect["effect"] <= hi <= 1
    assert set(report["sim_as_evaluator"]) == set(SIM_EVAL_TASKS)
    for world, task in SIM_EVAL_TASKS.items():
        sim = json.loads((run_dir / "eval" / names[0] / task / "results.json").read_text())
        assert sim["policies"][names[0]]["overall"]["trials"] == scale.sim_eval_trials
    stages = json.loads((run_dir / "stages.json").read_text())
    assert {s.name for s in plan(run_dir, scale)} == set(stages)
    assert all(e["status"] == "complete" and e["wall_s"] > 0 for e in stages.values())
    markdown = (run_dir / "report" / "experiment.md").read_text()
    assert "Main effect of world grounding" in markdown and "real_only" in markdown
    assert (run_dir / "report" / REAL_TASK / "results.png").stat().st_size > 0

    # Rerun: every stage is found complete and skipped; the report is made again from the same results.
    start = time.time()
    again = run_script("experiment.py", "--scale", "smoke", "--run-dir", str(run_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("[skip]") == len(stages) and "[start]" not in again.stdout
    assert json.loads((run_dir / "report" / "experiment.json").read_text())["real"] == report["real"]
    assert time.time() - start < 60


def test_a_failed_stage_stops_its_dependents_and_names_its_log(tmp_path):
    run_dir = tmp_path / "broken"
    # Corrupt real data in place: collection is skipped (its output exists), everything that reads it fails.
    (run_dir / "data").mkdir(parents=True)
    (run_dir / "data" / "real.hdf5").write_text("not a dataset")
    result = run_script("experiment.py", "--scale", "smoke", "--run-dir", str(run_dir), "--jobs", "1", timeout=900)
    assert result.returncode == 1
    assert "[FAILED] sim_wg_bg" in result.stdout and "logs/sim_wg_bg.log" in result.stdout
    assert "[start] train_wg_bg" not in result.stdout  # depends on a failed stage
    assert "some stages failed" in result.stderr


@pytest.mark.parametrize("scale_name", sorted(SCALES))
def test_every_scales_training_stages_compose_a_valid_config(tmp_path, scale_name):
    """A scale's train.py overrides (policy kind, sizes, the alignment option) are checked without running it."""
    from r2s2r.policy.config import compose_train_cfg

    stages = [s for s in plan(tmp_path, SCALES[scale_name]) if s.name.startswith("train_")]
    assert {s.name for s in stages} == {f"train_{n}" for n in policies(SCALES[scale_name])}
    for stage in stages:
        cfg = compose_train_cfg(stage.command[2:])
        assert list(cfg.policy.cameras) == list(SCALES[scale_name].cameras)
        if stage.name == "train_wg_bg_align":
            assert cfg.cotrain.alignment_weight > 0
