"""Statistics of the evaluation: success-rate intervals, differences and effects, and sim-real ranking agreement.

Success counts are small (tens of trials per policy), so intervals use score methods that behave at 0 and n
successes: Wilson for one rate, Newcombe's hybrid score interval for a difference of two rates.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as _stats

LEVELS = ("grounded", "ungrounded")
AXES = ("world", "behaviour")


# -- validation ----------------------------------------------------------------------------------------------------
def _count(value: object, name: str) -> int:
    # bool is an int subclass, but True as a trial count is a caller's mistake, not a count of one.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} = {value!r}: expected a non-negative integer")
    return int(value)


def _counts(successes: object, trials: object, name: str = "") -> tuple[int, int]:
    prefix = f"{name}: " if name else ""
    k = _count(successes, f"{prefix}successes")
    n = _count(trials, f"{prefix}trials")
    if n == 0:
        raise ValueError(f"{prefix}trials = 0: expected at least 1 trial (a rate needs trials)")
    if k > n:
        raise ValueError(f"{prefix}successes = {k}: expected at most trials = {n}")
    return k, n


def _z(confidence: object) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real) or not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence!r}: expected a number strictly between 0 and 1 (e.g. 0.95)")
    return float(_stats.norm.ppf(0.5 + float(confidence) / 2))


def _values(values: object, name: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {values!r}: expected a sequence of numbers") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} has shape {arr.shape}: expected a 1-D sequence (one value per policy)")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} = {arr.tolist()}: expected finite numbers (no NaN or inf)")
    return arr


def _pair(x: object, y: object, names: tuple[str, str] = ("x", "y")) -> tuple[np.ndarray, np.ndarray]:
    a, b = _values(x, names[0]), _values(y, names[1])
    if len(a) != len(b):
        raise ValueError(f"{names[0]} has {len(a)} values and {names[1]} has {len(b)}: expected one value per "
                         f"policy in each, so equal lengths")
    if len(a) < 2:
        raise ValueError(f"{names[0]} has {len(a)} value(s): expected at least 2 policies to compare rankings")
    return a, b


# -- rates ---------------------------------------------------------------------------------------------------------
def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a success rate: (low, high), within [0, 1]."""
    k, n = _counts(successes, trials)
    z = _z(confidence)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # At 0 or n successes the bound is exactly 0 or 1 in closed form; rounding must not move it off.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def difference_interval(s1: int, n1: int, s2: int, n2: int,
                        confidence: float = 0.95) -> tuple[float, float, float]:
    """Newcombe's hybrid score interval (method 10 of Newcombe 1998) for p1 - p2: (difference, low, high).

    Built from the two Wilson intervals; it treats the two samples as independent.
    """
    k1, m1 = _counts(s1, n1, "sample 1")
    k2, m2 = _counts(s2, n2, "sample 2")
    p1, p2 = k1 / m1, k2 / m2
    l1, u1 = wilson_interval(k1, m1, confidence)
    l2, u2 = wilson_interval(k2, m2, confidence)
    diff = p1 - p2
    low = diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = diff + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return diff, max(-1.0, low), min(1.0, high)


def main_effect(table: Mapping[tuple[str, str], tuple[int, int]], axis: str,
                confidence: float = 0.95) -> dict:
    """Main effect of grounding one axis in the study's 2x2 table, with its Newcombe interval.

    `table` maps (world, behaviour), each "grounded" or "ungrounded", to (successes, trials). The effect of `axis`
    ("world" or "behaviour"; "behavior" is accepted) is the success rate with that axis grounded minus with it
    ungrounded, each averaged over the other axis. Every cell must have the same number of trials: then the
    average of the two cell rates is the rate of the pooled counts, on which the interval is computed.

    The four cells are evaluated on the same trial seeds, so their outcomes are paired; the Newcombe interval
    treats the pooled samples as independent, which ignores the positive correlation of paired outcomes and so
    makes the interval conservative (wider than a paired interval would be).

    Returns:
        {"axis", "effect", "interval": (low, high), "grounded": (successes, trials),
        "ungrounded": (successes, trials)}, the last two pooled over the other axis.
    """
    axis_name = "behaviour" if axis == "behavior" else axis
    if axis_name not in AXES:
        raise ValueError(f"axis = {axis!r}: expected 'world' or 'behaviour'")
    if not isinstance(table, Mapping):
        raise ValueError(f"table = {table!r}: expected a mapping (world, behaviour) -> (successes, trials)")
    expected = {(w, b) for w in LEVELS for b in LEVELS}
    keys = set(table)
    if keys != expected:
        missing, extra = sorted(expected - keys), sorted(keys - expected, key=repr)
        raise ValueError(f"table keys: missing {missing}, unexpected {extra}: expected exactly the four "
                         f"(world, behaviour) pairs of {LEVELS}")
    counts = {}
    for key, value in table.items():
        if not (isinstance(value, Sequence) and len(value) == 2):
            raise ValueError(f"table[{key!r}] = {value!r}: expected (successes, trials)")
        counts[key] = _counts(value[0], value[1], f"table[{key!r}]")
    trials = {key: n for key, (_, n) in counts.items()}
    if len(set(trials.values())) != 1:
        raise ValueError(f"trials per cell = {trials}: expected the same number in every cell (the main effect "
                         f"averages cell rates, which equals pooling counts only with equal trials)")
    index = AXES.index(axis_name)
    pooled = {}
    for level in LEVELS:
        cells = [c for key, c in counts.items() if key[index] == level]
        pooled[level] = (sum(k for k, _ in cells), sum(n for _, n in cells))
    diff, low, high = difference_interval(*pooled["grounded"], *pooled["ungrounded"], confidence)
    return {"axis": axis_name, "effect": diff, "interval": (low, high), "grounded": pooled["grounded"],
            "ungrounded": pooled["ungrounded"]}


# -- rankings ------------------------------------------------------------------------------------------------------
def correlation_undefined(x: Sequence[float], y: Sequence[float], method: str = "pearson") -> str | None:
    """Why the correlation of x and y is undefined (constant input), or None when it is defined."""
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method = {method!r}: expected 'pearson' or 'spearman'")
    a, b = _pair(x, y)
    for name, values in (("x", a), ("y", b)):
        if np.ptp(values) == 0:
            what = "ranks" if method == "spearman" else "values"
            return f"{name} is constant ({float(values[0]):g} for all {len(values)} policies): its {what} do not vary"
    return None


def _correlation(x: Sequence[float], y: Sequence[float], method: str) -> float:
    reason = correlation_undefined(x, y, method)
    if reason is not None:
        warnings.warn(f"{method} correlation undefined, returning nan: {reason}", RuntimeWarning, stacklevel=3)
        return math.nan
    a, b = _pair(x, y)
    with warnings.catch_warnings():  # scipy warns about tiny samples; two policies are a valid (if weak) ranking
        warnings.simplefilter("ignore")
        result = _stats.pearsonr(a, b) if method == "pearson" else _stats.spearmanr(a, b)
    return float(result.statistic)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; nan (with a RuntimeWarning saying why) when undefined, e.g. constant input."""
    return _correlation(x, y, "pearson")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation; nan (with a RuntimeWarning saying why) when undefined, e.g. constant input."""
    return _correlation(x, y, "spearman")


def mmrv(sim: Sequence[float], real: Sequence[float]) -> float:
    """Mean Maximum Rank Violation of `sim` against `real` (SimplerEnv, Li et al. 2024).

    MMRV = (1/N) sum_i max_j |real_i - real_j| * 1[(sim_i < sim_j) != (real_i < real_j)]: for each policy, the
    largest real-performance gap to a policy that sim orders the other way round. Lower is better; 0 when sim
    orders every pair as real does.
    """
    s, r = _pair(sim, real, ("sim", "real"))
    violated = (s[:, None] < s[None, :]) != (r[:, None] < r[None, :])
    gaps = np.abs(r[:, None] - r[None, :]) * violated
    return float(gaps.max(axis=1).mean())
