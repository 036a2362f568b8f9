"""Evaluation reports: JSON, Markdown table and plot for several policies; sim-real ranking agreement."""

from __future__ import annotations

import json

import pytest

from r2s2r.core import ConfigError
from r2s2r.evaluation.protocol import GROUPS, summarize
from r2s2r.evaluation.report import ranking_report, write_report
from r2s2r.evaluation.stats import mmrv, wilson_interval


def rows_for(outcomes: dict[str, tuple[int, int]]) -> list[dict]:
    rows = []
    for condition, (k, n) in outcomes.items():
        rows += [{"condition": condition, "success": i < k} for i in range(n)]
    return rows


A = {"nominal": (20, 24), "lighting": (3, 7), "belt_speed": (0, 7), "novel_objects": (6, 6), "combined": (2, 6)}
B = {"nominal": (12, 24), "lighting": (7, 7), "belt_speed": (1, 7), "novel_objects": (0, 6)}  # combined not run


@pytest.fixture
def summaries() -> dict[str, dict]:
    return {"grounded|mimic": summarize(rows_for(A)), "planner": summarize(rows_for(B))}


def test_report_files_hold_the_numbers(summaries, tmp_path):
    paths = write_report(tmp_path / "report", summaries, "Twin evaluation")
    out = tmp_path / "report"
    assert paths == {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "results.png"}
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "results.md", "results.png"]  # no temp files

    data = json.loads(paths["json"].read_text())
    assert data["title"] == "Twin evaluation" and data["groups"] == list(GROUPS)
    a = data["policies"]["grounded|mimic"]
    assert (a["overall"]["successes"], a["overall"]["trials"]) == (31, 50)
    assert a["shifted"]["rate"] == pytest.approx(11 / 26)
    assert a["belt_speed"]["interval"] == pytest.approx(list(wilson_interval(0, 7)))
    b = data["policies"]["planner"]
    assert (b["overall"]["successes"], b["overall"]["trials"]) == (20, 44)
    assert b["combined"] == {"successes": 0, "trials": 0, "rate": None, "interval": None}
    assert data["policies"] == json.loads(json.dumps(summaries))

    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_markdown_has_a_row_per_policy_with_k_of_n(summaries, tmp_path):
    text = write_report(tmp_path, summaries, "Twin evaluation")["markdown"].read_text()
    lines = text.splitlines()
    assert lines[0] == "# Twin evaluation"
    header = next(line for line in lines if line.startswith("| Policy"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == list(GROUPS)
    first_table = lines[lines.index(header):lines.index("", lines.index(header))]
    rows = {line.split(" | ")[0]: line for line in first_table[2:]}
    assert set(rows) == {"| grounded\\|mimic", "| planner"}  # the pipe in a name is escaped
    low, high = wilson_interval(20, 24)
    assert f"20/24 ({100 * 20 / 24:.1f} %, [{100 * low:.1f}, {100 * high:.1f}])" in rows["| grounded\\|mimic"]
    assert "31/50 (62.0 %" in rows["| grounded\\|mimic"] and "0/7 (0.0 %, [0.0," in rows["| grounded\\|mimic"]
    cells = [c.strip() for c in rows["| planner"].split(" | ")[1:]]
    assert [c.split(" ")[0] for c in cells] == ["20/44", "12/24", "8/20", "7/7", "1/7", "0/6", "0/0"]


def test_markdown_breaks_successes_down_by_object_and_failures_by_reason(tmp_path):
    """Rows that name their object and failure give a table per object (k/n, - where a policy never drew it) and
    each policy's failures by reason, most frequent first."""
    def row(i, obj, failure):
        return {"index": i, "condition": "nominal", "success": failure is None, "object": obj, "failure": failure}

    a = [row(0, "cube", None), row(1, "cube", "timeout"), row(2, "capsule", "fell_off_belt"),
         row(3, "capsule", "fell_off_belt"), row(4, "sphere", None)]
    b = [row(0, "cube", None), row(1, "capsule", "dropped")]
    summaries = {"a": summarize(a), "b": summarize(b)}
    assert summaries["a"]["by_object"]["capsule"]["successes"] == 0
    assert summaries["a"]["by_object"]["capsule"]["trials"] == 2
    assert summaries["a"]["failures"] == {"fell_off_belt": 2, "timeout": 1}
    assert list(summaries["a"]["failures"]) == ["fell_off_belt", "timeout"]
    lines = write_report(tmp_path, summaries, "t")["markdown"].read_text().splitlines()
    header = lines[lines.index("## By object") + 2]
    assert [c.strip() for c in header.strip("|").split("|")] == ["Policy", "capsule", "cube", "sphere"]
    rows = lines[lines.index("## By object") + 4:lines.index("## By object") + 6]
    assert rows == ["| a | 0/2 | 1/2 | 1/1 |", "| b | 0/1 | 1/1 | - |"]
    failures = lines[lines.index("## Failures") + 4:lines.index("## Failures") + 6]
    assert failures == ["| a | 2 fell_off_belt, 1 timeout |", "| b | 1 dropped |"]
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["policies"]["b"]["by_object"]["cube"]["rate"] == 1.0


def test_rewriting_a_report_replaces_it(summaries, tmp_path):
    write_report(tmp_path, summaries, "first")
    write_report(tmp_path, {"planner": summaries["planner"]}, "second")
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["title"] == "second" and list(data["policies"]) == ["planner"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "results.md", "results.png"]


@pytest.mark.parametrize("bad, message", [
    ({}, "expected a non-empty mapping"),
    ({"p": {"overall": {}}}, r"summaries\['p'\]\['overall'\]"),
    ({"p": {g: {"successes": 3, "trials": 2, "rate": 1.5, "interval": [0, 1]} for g in GROUPS}},
     "successes = 3, trials = 2"),
])
def test_bad_summaries_are_refused(bad, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        write_report(tmp_path, bad, "t")
    assert list(tmp_path.iterdir()) == []


def test_ranking_report():
    sim = {"a": 0.9, "b": 0.6, "c": 0.3}
    real = {"a": 0.5, "b": 0.6, "c": 0.1}
    report = ranking_report(sim, real)
    assert report["policies"] == [{"policy": "a", "sim": 0.9, "real": 0.5}, {"policy": "b", "sim": 0.6, "real": 0.6},
                                  {"policy": "c", "sim": 0.3, "real": 0.1}]
    assert report["spearman"] == pytest.approx(0.5)
    assert report["mmrv"] == pytest.approx(mmrv([0.9, 0.6, 0.3], [0.5, 0.6, 0.1])) and report["mmrv"] > 0
    assert -1 <= report["pearson"] <= 1
    flat = ranking_report(sim, {"a": 0.4, "b": 0.4, "c": 0.4})
    assert flat["pearson"] is None and "y is constant" in flat["pearson_undefined"]
    json.dumps(flat)  # valid JSON even when undefined
    with pytest.raises(ConfigError, match=r"only in sim \['c'\]"):
        ranking_report(sim, {"a": 0.5, "b": 0.6})
    with pytest.raises(ConfigError, match="at least 2"):
        ranking_report({"a": 0.1}, {"a": 0.2})
    with pytest.raises(ConfigError, match=r"real\['b'\] = nan"):
        ranking_report(sim, {**real, "b": float("nan")})
