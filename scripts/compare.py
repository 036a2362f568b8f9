"""Compare policies' evaluations: each arm's trials pooled over blocks and training seeds, against the first arm.

Example (two training seeds per arm, each evaluated on the protocol's two blocks):
  python scripts/compare.py \\
      --arm real_only outputs/eval/b1/real_only outputs/eval/b2/real_only outputs/eval/b1/real_only_s1 ... \\
      --arm cotrained outputs/eval/b1/cotrained outputs/eval/b2/cotrained ... \\
      --output outputs/compare/cotraining

An arm is a name and the results it pools: `trials.jsonl` files that evaluate.py wrote, or folders searched for
them. For every arm: successes over trials with the Wilson 95 % interval, nominal and shifted conditions, each
shifted condition, each object, and the failures by reason; for every arm after the first, its difference from the
first with Newcombe's 95 % interval (the arms taken as independent samples). The trials of two arms are paired when
they ran the same trial seeds under the same conditions, as evaluate.py's blocks do for every policy; the report
says whether they did. Finished trials only: an evaluation still running can be compared as it stands.

Prints the table; with --output, writes compare.md and compare.json there (each written whole, then renamed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from r2s2r import cli
from r2s2r.core import ConfigError


def trial_files(arm: str, paths: list[str]) -> list[Path]:
    """The trials.jsonl files an arm pools, in the order given; ConfigError naming a path that holds none."""
    files = []
    for path in map(Path, paths):
        found = [path] if path.is_file() else sorted(path.rglob("trials.jsonl")) if path.is_dir() else []
        if not found:
            raise ConfigError(f"--arm {arm}: {str(path)!r} is neither a trials.jsonl file nor a folder holding one "
                              f"(evaluate.py writes <output>/<task>/<policy>/trials.jsonl)")
        files += found
    if len(set(files)) < len(files):
        raise ConfigError(f"--arm {arm}: a results file is given twice: expected each once "
                          f"({[str(f) for f, n in Counter(files).items() if n > 1]})")
    return files


def compare(arms: list[tuple[str, list[Path]]]) -> dict:
    """The report of `arms` [(name, trials.jsonl files)]: per arm its summary (`evaluation.protocol.summarize`) and
    the seeds it ran; per later arm its difference from the first (rate, Newcombe interval) and whether the two
    ran the same trials."""
    from r2s2r.evaluation.protocol import pooled_rows, summarize
    from r2s2r.evaluation.stats import difference_interval

    report: dict = {"arms": {}}
    for name, files in arms:
        rows = pooled_rows(files)
        if not rows:
            raise ConfigError(f"--arm {name}: no finished trial in {[str(f) for f in files]}")
        try:
            summary = summarize(rows)
        except ValueError as e:
            raise ConfigError(f"--arm {name}: {e}") from None
        trials = Counter((row["seed"], row["condition"]) for row in rows)
        report["arms"][name] = {"files": [str(f) for f in files], "summary": summary,
                                "trials": [[seed, condition, n] for (seed, condition), n in sorted(trials.items())]}
    names = [name for name, _ in arms]
    first = report["arms"][names[0]]
    for name in names[1:]:
        arm = report["arms"][name]
        diff, low, high = difference_interval(arm["summary"]["overall"]["successes"],
                                              arm["summary"]["overall"]["trials"],
                                              first["summary"]["overall"]["successes"],
                                              first["summary"]["overall"]["trials"])
        arm["versus_first"] = {"difference": diff, "interval": [low, high],
                               "paired": _trial_set(arm) == _trial_set(first)}
    return report


def _trial_set(arm: dict) -> set[tuple[int, str]]:
    """The (seed, condition) pairs an arm ran."""
    return {(seed, condition) for seed, condition, _ in arm["trials"]}


def markdown(report: dict) -> str:
    from r2s2r.evaluation.protocol import SHIFTED
    from r2s2r.evaluation.report import rate_text

    names = list(report["arms"])
    conditions = " / ".join(c.replace("_", " ") for c in SHIFTED)
    lines = [f"| arm | overall | vs {names[0]} (Newcombe 95 %) | nominal | shifted | {conditions} | failures |",
             "|---|---:|---:|---:|---:|---|---|"]
    for name, arm in report["arms"].items():
        s = arm["summary"]
        versus = arm.get("versus_first")
        vs = "" if versus is None else (
            f"{100 * versus['difference']:+.0f} [{100 * versus['interval'][0]:+.0f}, {100 * versus['interval'][1]:+.0f}]"
            + ("" if versus["paired"] else " (other trials)"))
        shifted = ", ".join(f"{s[c]['successes']}/{s[c]['trials']}" for c in SHIFTED)
        failures = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in s["failures"].items()) or "none"
        lines.append(f"| {name} | {rate_text(s['overall'])} | {vs} | {s['nominal']['successes']}/"
                     f"{s['nominal']['trials']} | {s['shifted']['successes']}/{s['shifted']['trials']} | {shifted} | "
                     f"{failures} |")
    # Where the arms differ is often one object (a grasp the real demos cannot teach), so each object gets a row.
    objects = sorted({obj for arm in report["arms"].values() for obj in arm["summary"]["by_object"]})
    if objects:
        lines += ["", "| object | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for obj in objects:
            cells = [arm["summary"]["by_object"].get(obj) for arm in report["arms"].values()]
            lines.append(f"| {obj} | " + " | ".join("-" if c is None else f"{c['successes']}/{c['trials']}"
                                                    for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arm", nargs="+", action="append", required=True, metavar=("NAME", "RESULTS"),
                   help="an arm's name, then the trials.jsonl files or evaluation folders it pools (repeat per arm; "
                        "the first is the baseline)")
    p.add_argument("--output", type=cli.output_dir, default=None, help="write compare.md and compare.json here")
    args = p.parse_args(argv)
    names = [arm[0] for arm in args.arm]
    for arm in args.arm:
        if len(arm) < 2:
            p.error(f"--arm {arm[0]}: expected a name and at least one results path")
    if len(set(names)) < len(names):
        p.error(f"--arm: the names {names} repeat; expected one name per arm")

    from r2s2r.files import write_text_atomic

    try:
        report = compare([(arm[0], trial_files(arm[0], arm[1:])) for arm in args.arm])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = markdown(report)
    print(table, end="")
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / "compare.md", table)
        write_text_atomic(out / "compare.json", json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
