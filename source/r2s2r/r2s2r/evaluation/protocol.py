"""The evaluation protocol: which trials every policy runs, how they are run on a cell, and how they are summarised.

The study runs 50 trials per policy: 24 nominal and 26 under shifted conditions (lighting 7, belt_speed 7,
novel_objects 6, combined 6). Trial i always has seed `base_seed + i` and the same condition, so every policy
meets the same objects, colours, belt speeds, spawns and lighting, and policies are compared trial by trial
(paired). The default base seed, 10_000, keeps evaluation away from the episodes data was collected on:
scripts/collect_real.py runs attempts from seed 0 (by default) upward, one seed per attempt, far below 10_000;
generation derives 32-bit seeds from its run seed (r2s2r.datagen.worker.attempt_seed), which land among the 50
evaluation seeds with negligible probability. Evaluating on a training seed would replay a training episode.

The same protocol runs on the twin (the real side) and, with sim as the evaluator, on any sim variant
(`r2s2r.real.twin.make_cell`).
"""

from __future__ import annotations

import json
import numbers
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm import tqdm

from r2s2r.core import ConfigError
from r2s2r.evaluation.stats import wilson_interval
from r2s2r.files import write_text_atomic
from r2s2r.real.interface import RealCell
from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS

# The study's 50-trial split; other sizes keep these proportions. Order matters: it breaks rounding ties.
PROTOCOL: dict[str, int] = {"nominal": 24, "lighting": 7, "belt_speed": 7, "novel_objects": 6, "combined": 6}
PROTOCOL_TRIALS = sum(PROTOCOL.values())
BASE_SEED = 10_000
SHIFTED = tuple(c for c in PROTOCOL if c != "nominal")
GROUPS = ("overall", "nominal", "shifted", *SHIFTED)  # the rows of a summary, in report order
ACTION_SIZE = 27
ROW_FIELDS = ("index", "seed", "condition", "success", "failure", "time_s", "object", "colour", "belt_speed")

@dataclass(frozen=True)
class Trial:
    """One evaluation trial: its position in the protocol, the reset condition and the reset seed."""

    index: int
    condition: str
    seed: int


def condition_counts(num_trials: int) -> dict[str, int]:
    """Trials per condition for `num_trials`: the study's proportions, largest-remainder rounded.

    With 5 or more trials every condition gets at least one.
    """
    if isinstance(num_trials, bool) or not isinstance(num_trials, numbers.Integral) or num_trials < 1:
        raise ConfigError(f"num_trials = {num_trials!r}: expected an integer >= 1")
    n = int(num_trials)
    # Exact integer quotas: n * weight / PROTOCOL_TRIALS as quotient and remainder, no float ties.
    counts = {c: n * w // PROTOCOL_TRIALS for c, w in PROTOCOL.items()}
    remainders = {c: n * w % PROTOCOL_TRIALS for c, w in PROTOCOL.items()}
    order = list(PROTOCOL)
    for c in sorted(order, key=lambda c: (-remainders[c], order.index(c)))[:n - sum(counts.values())]:
        counts[c] += 1
    if n >= len(PROTOCOL):
        # Small runs could round a condition away; take its trial from the largest share so each is measured.
        for c in order:
            if counts[c] == 0:
                donor = max(order, key=lambda d: (counts[d], -order.index(d)))
                counts[donor] -= 1
                counts[c] = 1
    return counts


def make_protocol(num_trials: int = PROTOCOL_TRIALS, base_seed: int = BASE_SEED) -> list[Trial]:
    """The evaluation trials: `condition_counts(num_trials)` conditions, trial i with seed `base_seed + i`.

    Conditions are spread evenly over the run rather than blocked, so slow drift of a real cell (light through
    the day, wear) does not fall on one condition and an interrupted run has measured every condition.
    """
    counts = condition_counts(num_trials)
    if isinstance(base_seed, bool) or not isinstance(base_seed, numbers.Integral) or base_seed < 0:
        raise ConfigError(f"base_seed = {base_seed!r}: expected a non-negative integer")
    order = list(PROTOCOL)
    # The k-th of a condition's m trials sits at fraction (k + 1/2) / m of the run; ties go in protocol order.
    slots = sorted(((Fraction(2 * k + 1, 2 * m), order.index(c), c) for c, m in counts.items() for k in range(m)))
    return [Trial(i, c, int(base_seed) + i) for i, (_, _, c) in enumerate(slots)]


# -- running -------------------------------------------------------------------------------------------------------
class Agent(Protocol):
    """What `run_trials` drives: a policy, or a scripted or human stand-in.

    `act` receives the cell's observation without its `tracking` group (proprio and images only) and returns the
    task's 27-vector action. An agent whose `uses_tracking` attribute is true (a diagnostic that measures a policy
    without its perception) also receives the `tracking` group.
    """

    def reset(self) -> None: ...

    def act(self, obs: dict) -> np.ndarray: ...


def agent_observation(obs: dict, tracking: bool = False) -> dict:
    """The observation a policy may see: everything but the cell's privileged `tracking` group (unless `tracking`)."""
    return obs if tracking else {k: v for k, v in obs.items() if k != "tracking"}


def _check_trials(trials: Iterable[Trial]) -> list[Trial]:
    checked = []
    seen: set[int] = set()
    for t in trials:
        if not isinstance(t, Trial):
            raise ConfigError(f"trials: {t!r} is not a Trial: expected the output of make_protocol (or Trial(...))")
        for name in ("index", "seed"):
            value = getattr(t, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ConfigError(f"trial {t.index!r}: {name} = {value!r}: expected a non-negative integer")
        # Plain ints: numpy integers would not serialise into the results file.
        t = Trial(int(t.index), t.condition, int(t.seed))
        if t.condition not in CONDITIONS:
            raise ConfigError(f"trial {t.index}: condition = {t.condition!r}: expected one of {', '.join(CONDITIONS)}")
        if t.index in seen:
            raise ConfigError(f"trials: index {t.index} appears twice: expected each trial index once")
        seen.add(t.index)
        checked.append(t)
    return checked


def read_rows(path: Path) -> tuple[list[dict], list[str], str]:
    """The complete rows of a results file, its complete lines, and a last line an interruption cut off ("" if
    none; a run still writing may show one). Reads only; ConfigError for a line that is not a results row."""
    if not path.exists():
        return [], [], ""
    lines = path.read_text().split("\n")
    complete, partial = lines[:-1], lines[-1]
    rows = []
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: line {number} is not valid JSON ({e}): expected one results row per "
                              f"line as run_trials writes them") from None
        if not isinstance(row, dict) or not all(k in row for k in ("index", "seed", "condition", "success")):
            raise ConfigError(f"{path}: line {number} = {line[:200]!r}: expected a results row with index, "
                              f"seed, condition and success")
        rows.append(row)
    return rows, complete, partial


def pooled_rows(files: Iterable[Path]) -> list[dict]:
    """The complete rows of several results files (blocks, training seeds) as one pool for `summarize`: a trial
    index repeats across files, so the pool counts rows and leaves the indices out."""
    return [{k: v for k, v in row.items() if k != "index"} for file in files for row in read_rows(Path(file))[0]]


def _load_rows(path: Path) -> list[dict]:
    """The complete rows of a results file; a last line cut off by an interruption is dropped from the file."""
    rows, complete, partial = read_rows(path)
    if partial.strip():
        # The run was stopped mid-write: that trial did not finish recording, so it is run again. The file is
        # rewritten without it so that the next row starts on a line of its own.
        warnings.warn(f"{path}: dropping an incomplete last line (an interrupted write); that trial will be rerun",
                      RuntimeWarning, stacklevel=3)
        write_text_atomic(path, "".join(line + "\n" for line in complete))
    return rows


def _resume(path: Path, trials: list[Trial]) -> dict[int, dict]:
    """Rows already in the results file for these trials, by index; refuses a file of another protocol."""
    by_index = {t.index: t for t in trials}
    done: dict[int, dict] = {}
    seen: set[int] = set()
    for row in _load_rows(path):
        index = row["index"]
        if index in seen:
            raise ConfigError(f"{path}: trial {index} appears more than once: expected one row per trial")
        seen.add(index)
        trial = by_index.get(index)
        if trial is None:
            continue  # a trial of the same run outside this call's list (e.g. a run of the first few trials)
        if (row["seed"], row["condition"]) != (trial.seed, trial.condition):
            raise ConfigError(
                f"{path}: trial {index} was run with seed {row['seed']!r}, condition {row['condition']!r}, but "
                f"this protocol has seed {trial.seed}, condition {trial.condition!r}: expected a results file "
                f"written for the same protocol (same num_trials and base_seed); use a new results path")
        done[index] = row
    return done


def _action(agent: Agent, obs: dict, trial: Trial, step: int) -> np.ndarray:
    action = np.asarray(agent.act(agent_observation(obs, getattr(agent, "uses_tracking", False))), dtype=float)
    # Checked here as well as by the cell: a hardware driver should never be handed a malformed command.
    if action.shape != (ACTION_SIZE,):
        raise ValueError(f"trial {trial.index}, step {step}: agent action has shape {action.shape}: expected "
                         f"({ACTION_SIZE},)")
    if not np.isfinite(action).all():
        raise ValueError(f"trial {trial.index}, step {step}: agent action contains NaN or inf: expected finite values")
    return action


def _run_trial(cell: RealCell, agent: Agent, trial: Trial, max_steps: int | None) -> dict:
    try:
        obs = cell.reset(condition=trial.condition, seed=trial.seed)
        agent.reset()
        steps, info, cut = 0, {}, False
        while True:
            result = cell.act(_action(agent, obs, trial, steps))
            steps, info, obs = steps + 1, result.info, result.obs
            if result.done:
                break
            if max_steps is not None and steps >= max_steps:
                cut = True
                break
    finally:
        cell.stop()  # whatever happened, the robot and belt halt before anything else
    if not cut and "success" not in info:
        raise RuntimeError(f"trial {trial.index}: the cell ended the trial without 'success' in its info "
                           f"(got keys {sorted(info)}): expected success and failure")
    speed = info.get("belt_speed")
    time_s = info.get("time", steps / cell.control_hz)
    return {
        "index": trial.index,
        "seed": trial.seed,
        "condition": trial.condition,
        "success": False if cut else bool(info["success"]),
        "failure": "max_steps" if cut else (None if info.get("failure") is None else str(info["failure"])),
        "time_s": float(time_s),
        "object": None if info.get("object") is None else str(info["object"]),
        "colour": None if info.get("colour") is None else str(info["colour"]),
        "belt_speed": None if speed is None else float(speed),
    }


def run_trials(cell: RealCell, agent: Agent, trials: Sequence[Trial], results_path: str | os.PathLike,
               progress: bool = True, max_steps: int | None = None) -> list[dict]:
    """Run `trials` with `agent` on `cell`; one results row per trial, in trial order.

    Each finished trial is appended to `results_path` (JSON lines) and flushed to disk at once. Trials already in
    that file are not run again, so an interrupted evaluation resumes where it stopped by calling this again; a
    file whose rows have other seeds or conditions for the same trial indices (another protocol) is refused.
    `max_steps` caps the control steps of a trial (counted a failure, "max_steps"); None leaves the end to the cell.

    Returns:
        Rows {index, seed, condition, success, failure, time_s, object, colour, belt_speed}, for every trial.
    """
    trials = _check_trials(trials)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral)
                                  or max_steps < 1):
        raise ConfigError(f"max_steps = {max_steps!r}: expected None or an integer >= 1")
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _resume(path, trials)
    successes = sum(bool(r["success"]) for r in done.values())
    bar = tqdm(total=len(trials), initial=len(done), unit="trial", desc="trials", disable=not progress,
               dynamic_ncols=True)
    bar.set_postfix(success=f"{successes}/{len(done)}")
    try:
        with open(path, "a") as f:
            for trial in trials:
                if trial.index in done:
                    continue
                row = _run_trial(cell, agent, trial, max_steps)
                f.write(json.dumps(row) + "\n")
                f.flush()
                os.fsync(f.fileno())
                done[trial.index] = row
                successes += row["success"]
                bar.update(1)
                bar.set_postfix(success=f"{successes}/{len(done)}", last=f"{trial.condition} "
                                f"{'ok' if row['success'] else row['failure'] or 'failed'}")
    finally:
        bar.close()
    return [done[t.index] for t in trials]


# -- summary -------------------------------------------------------------------------------------------------------
def _entry(successes: int, trials: int) -> dict:
    if trials == 0:  # a condition a short run did not include: no rate to report
        return {"successes": 0, "trials": 0, "rate": None, "interval": None}
    low, high = wilson_interval(successes, trials)
    return {"successes": successes, "trials": trials, "rate": successes / trials, "interval": [low, high]}


def summarize(rows: Iterable[Mapping]) -> dict[str, dict]:
    """Successes, trials, rate and Wilson 95 % interval for each of GROUPS (overall, nominal, shifted, conditions);
    the same per object (`by_object`, rows that name their object) and how many trials failed by each reason
    (`failures`, most frequent first; a failed row without a reason counts as "unknown").

    A group without trials has rate and interval None.
    """
    tallies = {c: [0, 0] for c in PROTOCOL}
    objects: dict[str, list[int]] = {}
    failures: dict[str, int] = {}
    seen: set[object] = set()
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"rows[{i}] = {row!r}: expected a results row (a mapping)")
        condition, success = row.get("condition"), row.get("success")
        if condition not in tallies:
            raise ValueError(f"rows[{i}]: condition = {condition!r}: expected one of {', '.join(tallies)}")
        if not isinstance(success, bool | np.bool_):
            raise ValueError(f"rows[{i}]: success = {success!r}: expected True or False")
        if "index" in row:
            if row["index"] in seen:
                raise ValueError(f"rows[{i}]: trial index {row['index']!r} appears twice: expected each trial once")
            seen.add(row["index"])
        tallies[condition][0] += bool(success)
        tallies[condition][1] += 1
        if row.get("object") is not None:
            tally = objects.setdefault(str(row["object"]), [0, 0])
            tally[0] += bool(success)
            tally[1] += 1
        if not success:
            reason = str(row.get("failure") or "unknown")
            failures[reason] = failures.get(reason, 0) + 1
    shifted = [sum(tallies[c][j] for c in SHIFTED) for j in (0, 1)]
    overall = [sum(t[j] for t in tallies.values()) for j in (0, 1)]
    out = {"overall": _entry(*overall), "nominal": _entry(*tallies["nominal"]), "shifted": _entry(*shifted)}
    out.update({c: _entry(*tallies[c]) for c in SHIFTED})
    out["by_object"] = {name: _entry(*objects[name]) for name in sorted(objects)}
    out["failures"] = dict(sorted(failures.items(), key=lambda item: (-item[1], item[0])))
    return out
