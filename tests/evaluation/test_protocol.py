"""The evaluation protocol: the trial list, running it on the twin with resume, and summaries."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from r2s2r.behavior.scripted import ScriptedPickPlace
from r2s2r.core import ConfigError
from r2s2r.evaluation.protocol import (
    GROUPS,
    PROTOCOL,
    Trial,
    condition_counts,
    make_protocol,
    run_trials,
    summarize,
)
from r2s2r.evaluation.stats import wilson_interval
from r2s2r.real.interface import RealCell, StepResult
from r2s2r.real.twin import EnvCell, TwinCell, make_cell


# -- the trial list ------------------------------------------------------------------------------------------------
def test_study_protocol_is_24_nominal_and_26_shifted():
    trials = make_protocol()
    assert len(trials) == 50
    assert Counter(t.condition for t in trials) == {"nominal": 24, "lighting": 7, "belt_speed": 7,
                                                    "novel_objects": 6, "combined": 6}
    assert [t.index for t in trials] == list(range(50))
    assert [t.seed for t in trials] == list(range(10_000, 10_050))  # fixed per index, distinct
    assert make_protocol() == trials  # the same trials for every policy
    assert make_protocol(base_seed=7)[3] == Trial(3, trials[3].condition, 10)
    # Conditions are spread over the run: each shifted condition appears in both halves.
    for half in (trials[:25], trials[25:]):
        assert {t.condition for t in half} == set(PROTOCOL)


def test_other_sizes_keep_the_proportions():
    assert condition_counts(100) == {c: 2 * n for c, n in PROTOCOL.items()}
    assert condition_counts(5) == dict.fromkeys(PROTOCOL, 1)
    assert condition_counts(1) == {"nominal": 1, "lighting": 0, "belt_speed": 0, "novel_objects": 0, "combined": 0}
    for n in range(1, 201):
        counts = condition_counts(n)
        assert sum(counts.values()) == n
        if n >= 5:
            assert min(counts.values()) >= 1, (n, counts)
        if n >= 10:  # largest remainder: every share within one trial of its exact quota
            assert all(abs(counts[c] - n * w / 50) < 1 for c, w in PROTOCOL.items()), (n, counts)
        trials = make_protocol(n)
        assert Counter(t.condition for t in trials) == {c: k for c, k in counts.items() if k}
        assert len({t.seed for t in trials}) == n


@pytest.mark.parametrize("kwargs, message", [
    ({"num_trials": 0}, "num_trials = 0: expected an integer >= 1"),
    ({"num_trials": -5}, "num_trials = -5"),
    ({"num_trials": 2.5}, "num_trials = 2.5"),
    ({"num_trials": "50"}, "num_trials = '50'"),
    ({"num_trials": True}, "num_trials = True"),
    ({"base_seed": -1}, "base_seed = -1: expected a non-negative integer"),
])
def test_bad_protocol_sizes_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_protocol(**kwargs)


# -- running on the twin -------------------------------------------------------------------------------------------
class RecordingCell(RealCell):
    """Passes everything to the twin and records what run_trials asked for and what the cell reported."""

    def __init__(self, cell: EnvCell):
        self.cell = cell
        self.control_hz = cell.control_hz
        self.resets: list[tuple[str, int]] = []
        self.final_info: list[dict] = []
        self.stops = 0

    def reset(self, prompt: str = "", condition: str = "nominal", seed: int | None = None) -> dict:
        self.resets.append((condition, seed))
        return self.cell.reset(condition=condition, seed=seed)

    def observe(self) -> dict:
        return self.cell.observe()

    def act(self, action: np.ndarray) -> StepResult:
        result = self.cell.act(action)
        if result.done:
            self.final_info.append(dict(result.info))
        return result

    def stop(self) -> None:
        self.stops += 1
        self.cell.stop()


class PrivilegedScriptedAgent:
    """A privileged TEST agent, not a policy: it reads the cell's tracker through its own handle on the cell.

    run_trials never hands tracking to an agent; this one succeeds often, which the test needs, only because it
    is given the cell explicitly.
    """

    def __init__(self, cell: RealCell):
        self.cell = cell
        self.controller = ScriptedPickPlace(cell.control_hz)
        self.resets = 0
        self.seen_keys: set[str] = set()

    def reset(self) -> None:
        self.resets += 1
        self.controller.reset()

    def act(self, obs: dict) -> np.ndarray:
        self.seen_keys |= set(obs)
        return self.controller({"proprio": obs["proprio"], "privileged": self.cell.observe()["tracking"]})


@pytest.fixture(scope="module")
def twin():
    cell = make_cell("R2S2R-PickSort-Real-v0", cameras=())
    yield cell
    cell.close()


def test_make_cell_builds_the_twin_or_a_sim_variant(twin):
    assert isinstance(twin, TwinCell) and twin.env.world.kind == "reality"
    sim = make_cell("R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0", cameras=())
    assert type(sim) is EnvCell and sim.env.world.path.name == "grounded.yaml"
    assert set(sim.reset(seed=10_000)) == {"proprio", "images", "tracking"}
    sim.close()
    with pytest.raises(ConfigError, match="task = 'nope'"):
        make_cell("nope")


def test_run_trials_records_resumes_and_refuses_another_protocol(twin, tmp_path):
    trials = make_protocol(5)[:3]
    assert [(t.condition, t.seed) for t in trials] == [("nominal", 10_000), ("lighting", 10_001),
                                                       ("belt_speed", 10_002)]
    results = tmp_path / "eval" / "results.jsonl"
    cell = RecordingCell(twin)
    agent = PrivilegedScriptedAgent(twin)
    rows = run_trials(cell, agent, trials, results, progress=False)

    assert agent.seen_keys == {"proprio", "images"}  # the tracker never reaches the agent
    assert cell.resets == [(t.condition, t.seed) for t in trials] and cell.stops == 3 and agent.resets == 3
    assert [(r["index"], r["seed"], r["condition"]) for r in rows] == [(t.index, t.seed, t.condition) for t in trials]
    for row, info in zip(rows, cell.final_info, strict=True):
        assert row["success"] == info["success"] and row["failure"] == info["failure"]
        assert (row["object"], row["colour"], row["time_s"]) == (info["object"], info["colour"], info["time"])
        assert row["belt_speed"] == pytest.approx(info["belt_speed"])
    assert any(r["success"] for r in rows)
    assert [json.loads(line) for line in results.read_text().splitlines()] == rows

    # A second call with the same file runs nothing and returns the same rows.
    again = run_trials(cell, agent, trials, results, progress=False)
    assert again == rows and agent.resets == 3 and len(cell.resets) == 3

    # Interrupted mid-write: the cut-off line is dropped and only the unrecorded trials run again.
    lines = results.read_text().splitlines(keepends=True)
    results.write_text(lines[0] + lines[1][:25])
    with pytest.warns(RuntimeWarning, match="incomplete last line"):
        resumed = run_trials(cell, agent, trials, results, progress=False)
    assert agent.resets == 5 and cell.resets[3:] == [(t.condition, t.seed) for t in trials[1:]]
    assert resumed == rows  # seeded trials replay exactly
    assert len(results.read_text().splitlines()) == 3

    # The same file with another protocol's trials is refused before anything runs.
    other = [Trial(0, "nominal", 20_000)]
    with pytest.raises(ConfigError, match="trial 0 was run with seed 10000, condition 'nominal', but this "
                                          "protocol has seed 20000"):
        run_trials(cell, agent, other, results, progress=False)
    with pytest.raises(ConfigError, match="condition 'lighting'"):
        run_trials(cell, agent, [Trial(1, "combined", 10_001)], results, progress=False)
    assert agent.resets == 5


def test_run_trials_caps_steps_and_stops_the_cell_on_a_bad_action(twin, tmp_path):
    agent = PrivilegedScriptedAgent(twin)
    # numpy integers as a hand-made trial list might hold them: the row is still plain JSON.
    rows = run_trials(twin, agent, [Trial(np.int64(0), "nominal", np.int64(10_000))], tmp_path / "r.jsonl",
                      progress=False, max_steps=5)
    assert json.loads((tmp_path / "r.jsonl").read_text()) == rows[0] and rows[0]["seed"] == 10_000
    assert rows[0]["success"] is False and rows[0]["failure"] == "max_steps"
    assert rows[0]["time_s"] == pytest.approx(5 / twin.control_hz)

    class Broken(PrivilegedScriptedAgent):
        def act(self, obs):
            return np.zeros(7)

    with pytest.raises(ValueError, match=r"trial 0, step 0: agent action has shape \(7,\): expected \(27,\)"):
        run_trials(twin, Broken(twin), [Trial(0, "nominal", 10_000)], tmp_path / "b.jsonl", progress=False)
    with pytest.raises(RuntimeError, match="before reset"):
        twin.observe()  # the cell was stopped
    assert (tmp_path / "b.jsonl").read_text() == ""
    with pytest.raises(ConfigError, match="max_steps = 0"):
        run_trials(twin, agent, [], tmp_path / "r.jsonl", max_steps=0)
    with pytest.raises(ConfigError, match="trial 0: seed = -3: expected a non-negative integer"):
        run_trials(twin, agent, [Trial(0, "nominal", -3)], tmp_path / "s.jsonl")
    with pytest.raises(ConfigError, match="trial 0: condition = 'rain'"):
        run_trials(twin, agent, [Trial(0, "rain", 3)], tmp_path / "s.jsonl")
    with pytest.raises(ConfigError, match="index 0 appears twice"):
        run_trials(twin, agent, [Trial(0, "nominal", 1), Trial(0, "lighting", 2)], tmp_path / "d.jsonl")


def test_a_corrupt_results_file_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"index": 0, "seed": 10000, "condition": "nominal", "success": true}\nnot json\n')
    with pytest.raises(ConfigError, match="line 2 is not valid JSON"):
        run_trials(None, None, make_protocol(5), path, progress=False)


# -- summaries -----------------------------------------------------------------------------------------------------
def rows_for(outcomes: dict[str, tuple[int, int]]) -> list[dict]:
    """Hand-made rows: for each condition, (successes, trials)."""
    rows = []
    for condition, (k, n) in outcomes.items():
        rows += [{"index": len(rows) + i, "condition": condition, "success": i < k} for i in range(n)]
    return rows


def test_summarize_counts_each_group_with_wilson_intervals():
    summary = summarize(rows_for({"nominal": (20, 24), "lighting": (3, 7), "belt_speed": (0, 7),
                                  "novel_objects": (6, 6), "combined": (2, 6)}))
    assert list(summary) == [*GROUPS, "by_object", "failures"]
    assert summary["by_object"] == {}  # these rows name no object
    assert summary["failures"] == {"unknown": 50 - 31}  # nor a reason for their failures
    expected = {"overall": (31, 50), "nominal": (20, 24), "shifted": (11, 26), "lighting": (3, 7),
                "belt_speed": (0, 7), "novel_objects": (6, 6), "combined": (2, 6)}
    for group, (k, n) in expected.items():
        entry = summary[group]
        assert (entry["successes"], entry["trials"]) == (k, n)
        assert entry["rate"] == pytest.approx(k / n)
        assert entry["interval"] == pytest.approx(list(wilson_interval(k, n)))


def test_summarize_leaves_unrun_groups_empty_and_refuses_bad_rows():
    summary = summarize(rows_for({"nominal": (1, 2)}))
    assert summary["combined"] == {"successes": 0, "trials": 0, "rate": None, "interval": None}
    assert summary["shifted"]["trials"] == 0 and summary["overall"]["trials"] == 2
    with pytest.raises(ValueError, match="rows\\[0\\]: condition = 'rain'"):
        summarize([{"condition": "rain", "success": True}])
    with pytest.raises(ValueError, match="rows\\[0\\]: success = 1: expected True or False"):
        summarize([{"condition": "nominal", "success": 1}])
    with pytest.raises(ValueError, match="index 3 appears twice"):
        summarize([{"index": 3, "condition": "nominal", "success": True}] * 2)
