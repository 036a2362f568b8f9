"""Evaluating trained policies: a checkpoint, a task (the twin or a sim variant) and the protocol's trials.

Results live in a folder per task and policy (`<out>/<task>/<policy>/trials.jsonl`), one line per finished trial,
so an interrupted evaluation resumes where it stopped and other tools can aggregate any subset of runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from r2s2r.evaluation.protocol import make_protocol, run_trials, summarize
from r2s2r.evaluation.report import ranking_report, write_report
from r2s2r.policy.agent import load_agent
from r2s2r.real.twin import make_cell
from r2s2r.tasks import REAL_TASK


def trials_path(out_dir: str | os.PathLike, task: str, policy: str) -> Path:
    return Path(out_dir) / task / policy / "trials.jsonl"


def evaluate_checkpoint(checkpoint: str | os.PathLike, task: str, num_trials: int, results: str | os.PathLike,
                        max_steps: int | None = None, progress: bool = True) -> list[dict]:
    """Run the protocol's `num_trials` trials of `checkpoint` in `task`; rows appended to `results`."""
    agent = load_agent(checkpoint)
    cell = make_cell(task, **agent.env_overrides)
    try:
        return run_trials(cell, agent, make_protocol(num_trials), results, progress=progress, max_steps=max_steps)
    finally:
        cell.close()


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
