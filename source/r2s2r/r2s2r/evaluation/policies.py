"""Evaluating trained policies: a checkpoint, a task (the twin or a sim variant) and the protocol's trials.

Results live in a folder per task and policy (`<out>/<task>/<policy>/trials.jsonl`), one line per finished trial,
so an interrupted evaluation resumes where it stopped and other tools can aggregate any subset of runs.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Sequence
from pathlib import Path

from r2s2r.data import DatasetError, DemoReader
from r2s2r.evaluation.protocol import Trial, make_protocol, run_trials, summarize
from r2s2r.evaluation.report import ranking_report, write_report
from r2s2r.files import write_text_atomic
from r2s2r.policy.agent import load_agent
from r2s2r.real.twin import make_cell
from r2s2r.tasks import REAL_TASK


def trials_path(out_dir: str | os.PathLike, task: str, policy: str) -> Path:
    return Path(out_dir) / task / policy / "trials.jsonl"


def evaluate_checkpoint(checkpoint: str | os.PathLike, task: str, num_trials: int, results: str | os.PathLike,
                        max_steps: int | None = None, progress: bool = True,
                        trials: Sequence[Trial] | None = None, execution: dict | None = None) -> list[dict]:
    """Run the protocol's `num_trials` trials of `checkpoint` in `task` (or the given `trials`); rows appended to
    `results`. `execution` overrides how the policy executes its chunks (`load_agent`)."""
    agent = load_agent(checkpoint, execution=execution)
    # Rendered by the faster of GL and the Warp ray tracer on this machine where both draw the same images
    # (r2s2r.tasks.pick_sort.renderer_choice); which one is stated beside the trials.
    cell = make_cell(task, **agent.env_overrides, renderer="auto")
    results = Path(results)
    results.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(results.parent / "renderer.json", json.dumps({"renderer": cell.env.cfg.renderer}) + "\n")
    try:
        return run_trials(cell, agent, make_protocol(num_trials) if trials is None else trials, results,
                          progress=progress, max_steps=max_steps)
    finally:
        cell.close()


def training_trials(dataset: str | os.PathLike, num_trials: int) -> list[Trial]:
    """Nominal trials at the reset seeds of the first `num_trials` demos of a recorded `dataset`: replaying a policy
    on the episodes it was trained on separates "cannot reproduce its own demos" from "does not generalize"."""
    with DemoReader(dataset) as reader:
        if len(reader.names) < num_trials:
            raise DatasetError(f"{dataset}: holds {len(reader.names)} demos; expected at least {num_trials} "
                               f"(--trials) to take their seeds")
        trials = []
        for index, name in enumerate(reader.names[:num_trials]):
            attrs = reader.attrs(name)
            seed, condition = attrs.get("seed"), attrs.get("condition")
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or condition != "nominal":
                raise DatasetError(f"{dataset}: demo {name}: seed = {seed!r}, condition = {condition!r}: expected "
                                   f"an integer seed of a nominal episode (a demo recorded by collect_real.py)")
            trials.append(Trial(index, "nominal", int(seed)))
    return trials


def report_task(out_dir: str | os.PathLike, task: str, rows: dict[str, list[dict]]) -> dict[str, dict]:
    """Write the task's results.{json,md,png} for `rows` (policy -> trial rows); returns the summaries."""
    summaries = {policy: summarize(r) for policy, r in rows.items()}
    side = "real side (twin)" if task == REAL_TASK else "sim"
    write_report(Path(out_dir) / task, summaries, f"Success on {task} ({side})")
    return summaries


def ranking(real: dict[str, dict], sim: dict[str, dict]) -> dict:
    """How well a sim variant ranks policies as the real side does, on overall success rates."""
    return ranking_report({p: s["overall"]["rate"] for p, s in sim.items()},
                          {p: s["overall"]["rate"] for p, s in real.items()})
