"""scripts/compare.py: arms pooled over their results files, against the first, with the protocol's statistics."""

from __future__ import annotations

import json

import pytest

from conftest import run_script_in_process, script_module
from r2s2r.evaluation.protocol import make_protocol
from r2s2r.evaluation.stats import difference_interval, wilson_interval


def write_block(path, base_seed: int, successes: set[int], failure: str = "fell_off_belt", partial: bool = False,
                objects: tuple[str, ...] = ("cube",)):
    """A results file of one 50-trial block in which the trials `successes` (indices) succeed; trial i's object is
    objects[i % len(objects)]."""
    rows = [{"index": t.index, "seed": t.seed, "condition": t.condition, "object": objects[t.index % len(objects)],
             "success": t.index in successes, "failure": None if t.index in successes else failure}
            for t in make_protocol(50, base_seed)]
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(text + ('{"index": 50, "seed"' if partial else ""))  # a run still writing its next row


def test_arms_pool_their_blocks_and_differ_from_the_first_with_newcombes_interval(tmp_path, capsys):
    # Baseline: 10 + 5 of 100 over two blocks (one still writing); the other arm 30 + 25, from folders.
    write_block(tmp_path / "a1.jsonl", 10000, set(range(10)))
    write_block(tmp_path / "a2.jsonl", 20000, set(range(5)), partial=True)
    write_block(tmp_path / "b" / "block1" / "task" / "cotrained" / "trials.jsonl", 10000, set(range(30)))
    write_block(tmp_path / "b" / "block2" / "task" / "cotrained" / "trials.jsonl", 20000, set(range(25)), "dropped")
    out = tmp_path / "report"
    assert script_module("compare.py").main(["--arm", "real_only", str(tmp_path / "a1.jsonl"),
                                             str(tmp_path / "a2.jsonl"), "--arm", "cotrained",
                                             str(tmp_path / "b"), "--output", str(out)]) == 0
    report = json.loads((out / "compare.json").read_text())
    base, other = report["arms"]["real_only"], report["arms"]["cotrained"]
    assert (base["summary"]["overall"]["successes"], base["summary"]["overall"]["trials"]) == (15, 100)
    assert (other["summary"]["overall"]["successes"], other["summary"]["overall"]["trials"]) == (55, 100)
    assert other["summary"]["overall"]["interval"] == pytest.approx(list(wilson_interval(55, 100)))
    diff, low, high = difference_interval(55, 100, 15, 100)
    assert other["versus_first"]["difference"] == pytest.approx(diff)
    assert other["versus_first"]["interval"] == pytest.approx([low, high])
    assert other["versus_first"]["paired"]  # both arms ran the protocol's two blocks
    assert other["summary"]["failures"] == {"dropped": 25, "fell_off_belt": 20}
    nominal = sum(t.condition == "nominal" and t.index < first for base, first in ((10000, 30), (20000, 25))
                  for t in make_protocol(50, base))
    assert (other["summary"]["nominal"]["successes"], other["summary"]["nominal"]["trials"]) == (nominal, 48)
    table = (out / "compare.md").read_text()
    assert table == capsys.readouterr().out
    w_low, w_high = wilson_interval(55, 100)
    assert (f"| cotrained | 55/100 (55 % [{100 * w_low:.0f}, {100 * w_high:.0f}]) | "
            f"{100 * diff:+.0f} [{100 * low:+.0f}, {100 * high:+.0f}] |") in table


def test_a_path_without_results_and_a_repeated_arm_are_refused(tmp_path, monkeypatch, capsys):
    write_block(tmp_path / "a.jsonl", 10000, {1})
    (tmp_path / "empty").mkdir()
    code, err = run_script_in_process("compare.py", "--arm", "x", str(tmp_path / "a.jsonl"), "--arm", "y",
                                      str(tmp_path / "empty"), cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "--arm y:" in err and "empty" in err and "trials.jsonl" in err
    code, err = run_script_in_process("compare.py", "--arm", "x", str(tmp_path / "a.jsonl"), "--arm", "x",
                                      str(tmp_path / "a.jsonl"), cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "repeat" in err
    code, err = run_script_in_process("compare.py", "--arm", "x", str(tmp_path / "a.jsonl"), str(tmp_path / "a.jsonl"),
                                      cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "given twice" in err


def test_each_object_has_a_row_with_every_arms_count(tmp_path, capsys):
    """The per-object table: each object any arm met, each arm's successes over its trials of it ("-" where an arm
    never met it), counted here from the rows written."""
    write_block(tmp_path / "a.jsonl", 10000, set(range(0, 50, 3)), objects=("cube", "capsule"))
    write_block(tmp_path / "b.jsonl", 10000, set(range(20)), objects=("cube", "capsule", "sphere"))
    assert script_module("compare.py").main(["--arm", "real_only", str(tmp_path / "a.jsonl"), "--arm", "cotrained",
                                             str(tmp_path / "b.jsonl")]) == 0
    table = capsys.readouterr().out
    expected = {"a": {}, "b": {}}
    for arm, objects, wins in (("a", ("cube", "capsule"), set(range(0, 50, 3))),
                               ("b", ("cube", "capsule", "sphere"), set(range(20)))):
        for i in range(50):
            tally = expected[arm].setdefault(objects[i % len(objects)], [0, 0])
            tally[0] += i in wins
            tally[1] += 1
    assert "| object | real_only | cotrained |" in table
    for obj in ("capsule", "cube", "sphere"):
        cells = ["-" if obj not in expected[arm] else "{}/{}".format(*expected[arm][obj]) for arm in ("a", "b")]
        assert f"| {obj} | {cells[0]} | {cells[1]} |" in table, table
    assert "| sphere | - |" in table
