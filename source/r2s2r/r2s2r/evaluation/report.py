"""Evaluation reports: per-policy results as JSON, a Markdown table and a bar plot; sim-real ranking agreement."""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from r2s2r.core import ConfigError
from r2s2r.evaluation.protocol import GROUPS
from r2s2r.evaluation.stats import correlation_undefined, mmrv, pearson, spearman
from r2s2r.files import atomic_path, write_text_atomic


def _check_summaries(summaries: object) -> None:
    if not isinstance(summaries, Mapping) or not summaries:
        raise ConfigError(f"summaries = {summaries!r}: expected a non-empty mapping policy -> summarize(rows)")
    for policy, summary in summaries.items():
        if not isinstance(policy, str) or not policy:
            raise ConfigError(f"summaries: policy name {policy!r}: expected a non-empty string")
        if not isinstance(summary, Mapping):
            raise ConfigError(f"summaries[{policy!r}] = {summary!r}: expected the dict summarize(rows) returns")
        for group in GROUPS:
            entry = summary.get(group)
            if not isinstance(entry, Mapping) or not {"successes", "trials", "rate", "interval"} <= set(entry):
                raise ConfigError(f"summaries[{policy!r}][{group!r}] = {entry!r}: expected successes, trials, rate "
                                  f"and interval (as summarize returns)")
            k, n = entry["successes"], entry["trials"]
            if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (k, n)) or not 0 <= k <= n:
                raise ConfigError(f"summaries[{policy!r}][{group!r}]: successes = {k!r}, trials = {n!r}: expected "
                                  f"integers with 0 <= successes <= trials")
            if n and (entry["rate"] is None or entry["interval"] is None or len(entry["interval"]) != 2):
                raise ConfigError(f"summaries[{policy!r}][{group!r}]: {n} trials but rate = {entry['rate']!r}, "
                                  f"interval = {entry['interval']!r}: expected a rate and a (low, high) interval")


def rate_text(entry: Mapping) -> str:
    """A summary entry as "successes/trials (rate % [Wilson interval])", whole percent; "–" without trials."""
    if not entry["trials"]:
        return "–"
    low, high = entry["interval"]
    return f"{entry['successes']}/{entry['trials']} ({100 * entry['rate']:.0f} % [{100 * low:.0f}, {100 * high:.0f}])"


def _cell(entry: Mapping) -> str:
    if not entry["trials"]:
        return "0/0 (no trials)"
    low, high = entry["interval"]
    return f"{entry['successes']}/{entry['trials']} ({100 * entry['rate']:.1f} %, [{100 * low:.1f}, {100 * high:.1f}])"


def _row_name(policy: str) -> str:
    return policy.replace("|", "\\|")  # a pipe in a name would split the row


def object_table(summaries: Mapping[str, Mapping]) -> list[str]:
    """The Markdown lines of a table with a row per policy and a column per object any policy met: successes/trials
    with that object, "-" where it was not drawn. No lines when no summary counts objects."""
    objects = sorted({o for s in summaries.values() for o in s.get("by_object", {})})
    if not objects:
        return []
    lines = ["| Policy | " + " | ".join(objects) + " |", "|---" * (len(objects) + 1) + "|"]
    for policy, summary in summaries.items():
        by_object = summary.get("by_object", {})
        cells = [f"{by_object[o]['successes']}/{by_object[o]['trials']}" if o in by_object else "-" for o in objects]
        lines.append(f"| {_row_name(policy)} | " + " | ".join(cells) + " |")
    return lines


def _markdown(summaries: Mapping[str, Mapping], title: str) -> str:
    names = {policy: _row_name(policy) for policy in summaries}
    lines = [f"# {title}", "", "| Policy | " + " | ".join(GROUPS) + " |", "|---" * (len(GROUPS) + 1) + "|"]
    for policy, summary in summaries.items():
        lines.append(f"| {names[policy]} | " + " | ".join(_cell(summary[g]) for g in GROUPS) + " |")
    lines += ["", "Each cell: successes/trials (success rate, [Wilson 95 % interval], both in %). `shifted` pools "
              "every condition but nominal.", ""]
    # Summaries written before the per-object and failure tallies existed have neither: those tables are left out.
    by_object = object_table(summaries)
    if by_object:
        lines += ["## By object", "", *by_object, "",
                  "Each cell: successes/trials with that object (- where it was not drawn).", ""]
    if any("failures" in s for s in summaries.values()):
        lines += ["## Failures", "", "| Policy | failed trials by reason |", "|---|---|"]
        for policy, summary in summaries.items():
            reasons = ", ".join(f"{n} {reason}" for reason, n in summary.get("failures", {}).items())
            lines.append(f"| {names[policy]} | {reasons or 'none'} |")
        lines.append("")
    return "\n".join(lines)


def _plot(path: Path, summaries: Mapping[str, Mapping], title: str) -> None:
    # The object-oriented API on an Agg canvas: no pyplot global state and no display backend needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    policies = list(summaries)
    fig = Figure(figsize=(max(7.0, 3.0 + 0.35 * len(GROUPS) * len(policies)), 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = np.arange(len(GROUPS))
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        rates, errors = [], [[], []]
        for group in GROUPS:
            entry = summaries[policy][group]
            if entry["trials"]:
                low, high = entry["interval"]
                rates.append(entry["rate"])
                errors[0].append(entry["rate"] - low)
                errors[1].append(high - entry["rate"])
            else:  # no bar and no error bar where nothing was measured
                rates.append(math.nan)
                errors[0].append(math.nan)
                errors[1].append(math.nan)
        ax.bar(x - 0.4 + width * (i + 0.5), rates, width, yerr=errors, capsize=3, label=policy)
    ax.set_xticks(x, GROUPS, rotation=20)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate (Wilson 95 % interval)")
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: never over a bar
    fig.tight_layout()

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)


def write_report(out_dir: str | os.PathLike, summaries: dict[str, dict], title: str) -> dict[str, Path]:
    """Write results.json, results.md and results.png for `summaries` (policy -> `summarize(rows)`) to `out_dir`.

    Returns:
        {"json": path, "markdown": path, "plot": path}.
    """
    _check_summaries(summaries)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "results.png"}
    payload = {"title": title, "groups": list(GROUPS), "policies": {p: dict(s) for p, s in summaries.items()}}
    write_text_atomic(paths["json"], json.dumps(payload, indent=2) + "\n")
    write_text_atomic(paths["markdown"], _markdown(summaries, title))
    _plot(paths["plot"], summaries, title)
    return paths


def ranking_report(sim: dict[str, float], real: dict[str, float]) -> dict:
    """How well sim ranks the policies as real does: Pearson, Spearman and MMRV over the policies of both.

    Undefined correlations (e.g. every real rate equal) are None, with the reason under "<name>_undefined", so
    the report stays valid JSON.
    """
    for name, rates in (("sim", sim), ("real", real)):
        if not isinstance(rates, Mapping):
            raise ConfigError(f"{name} = {rates!r}: expected a mapping policy -> success rate")
    if set(sim) != set(real):
        raise ConfigError(f"policies differ: only in sim {sorted(set(sim) - set(real))}, only in real "
                          f"{sorted(set(real) - set(sim))}: expected the same policies on both sides")
    policies = list(sim)
    if len(policies) < 2:
        raise ConfigError(f"{len(policies)} policy(ies) {policies}: expected at least 2 to compare rankings")
    for name, rates in (("sim", sim), ("real", real)):
        for p in policies:
            v = rates[p]
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ConfigError(f"{name}[{p!r}] = {v!r}: expected a finite success rate")
    x = [float(sim[p]) for p in policies]
    y = [float(real[p]) for p in policies]
    report: dict = {"policies": [{"policy": p, "sim": a, "real": b} for p, a, b in zip(policies, x, y, strict=True)]}
    for name, fn in (("pearson", pearson), ("spearman", spearman)):
        reason = correlation_undefined(x, y, name)
        report[name] = None if reason else fn(x, y)
        if reason:
            report[f"{name}_undefined"] = reason
    report["mmrv"] = mmrv(x, y)
    return report
