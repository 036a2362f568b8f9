"""Evaluation statistics: Wilson and Newcombe intervals, main effects, correlations and MMRV."""

from __future__ import annotations

import math

import numpy as np
import pytest

from r2s2r.evaluation.stats import (
    correlation_undefined,
    difference_interval,
    main_effect,
    mmrv,
    pearson,
    spearman,
    wilson_interval,
)

Z95 = 1.959964


def wilson_closed_form(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's interval in its quadratic-root form, written independently of the module's centre +- half form."""
    root = z * math.sqrt(z * z + 4 * k * (n - k) / n)
    return (2 * k + z * z - root) / (2 * (n + z * z)), (2 * k + z * z + root) / (2 * (n + z * z))


# -- Wilson --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k, n", [(0, 10), (10, 10), (5, 10), (1, 3), (17, 50), (49, 50), (81, 263)])
def test_wilson_matches_the_closed_form(k, n):
    assert wilson_interval(k, n) == pytest.approx(wilson_closed_form(k, n), abs=1e-6)


def test_wilson_textbook_values():
    z2 = Z95**2
    # 0/10: [0, z^2 / (n + z^2)]; 10/10: [n / (n + z^2), 1]; 5/10: symmetric about 1/2.
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(z2 / (10 + z2), abs=1e-6) and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and low == pytest.approx(10 / (10 + z2), abs=1e-6) and low == pytest.approx(0.7225, abs=1e-4)
    low, high = wilson_interval(5, 10)
    assert low + high == pytest.approx(1.0, abs=1e-12)
    half = Z95 / (1 + z2 / 10) * math.sqrt(0.25 / 10 + z2 / 400)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-6)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    # Newcombe (1998a), example 81/263: 0.2553 to 0.3662.
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)


def test_wilson_stays_within_0_1_and_narrows_with_confidence():
    for n in (1, 2, 7, 50):
        for k in range(n + 1):
            low, high = wilson_interval(k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0
            narrow = wilson_interval(k, n, confidence=0.8)
            assert low <= narrow[0] and narrow[1] <= high
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(50, 50)[1] == 1.0


@pytest.mark.parametrize("args, message", [
    ((-1, 10), "successes = -1"),
    ((11, 10), "successes = 11: expected at most trials = 10"),
    ((1.5, 10), "successes = 1.5"),
    ((True, 10), "successes = True"),
    ((0, 0), "trials = 0"),
    ((3, -2), "trials = -2"),
    ((3, 10, 1.5), "confidence = 1.5"),
    ((3, 10, 0), "confidence = 0"),
])
def test_wilson_refuses_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        wilson_interval(*args)


def test_wilson_accepts_numpy_integers():
    assert wilson_interval(np.int64(3), np.int32(10)) == wilson_interval(3, 10)


# -- Newcombe difference -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("counts, expected", [
    # Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10.
    ((56, 70, 48, 80), (0.0524, 0.3339)),
    ((9, 10, 3, 10), (0.1705, 0.8090)),
    ((6, 7, 2, 7), (0.0582, 0.8062)),
    ((5, 56, 0, 29), (-0.0381, 0.1926)),
])
def test_newcombe_reproduces_the_published_examples(counts, expected):
    diff, low, high = difference_interval(*counts)
    assert diff == pytest.approx(counts[0] / counts[1] - counts[2] / counts[3])
    assert (low, high) == pytest.approx(expected, abs=1e-4)


def test_newcombe_is_built_from_the_two_wilson_intervals():
    s1, n1, s2, n2 = 31, 50, 22, 50
    p1, p2 = s1 / n1, s2 / n2
    (l1, u1), (l2, u2) = wilson_closed_form(s1, n1), wilson_closed_form(s2, n2)
    expected = (p1 - p2 - math.hypot(p1 - l1, u2 - p2), p1 - p2 + math.hypot(u1 - p1, p2 - l2))
    assert difference_interval(s1, n1, s2, n2)[1:] == pytest.approx(expected, abs=1e-6)


def test_newcombe_contains_the_difference_and_is_antisymmetric():
    for s1, n1, s2, n2 in [(0, 10, 0, 20), (10, 10, 0, 20), (3, 7, 5, 9), (24, 50, 24, 50), (50, 50, 0, 50)]:
        diff, low, high = difference_interval(s1, n1, s2, n2)
        assert -1.0 <= low <= diff <= high <= 1.0
        swapped = difference_interval(s2, n2, s1, n1)
        assert swapped == pytest.approx((-diff, -high, -low), abs=1e-12)
    diff, low, high = difference_interval(12, 30, 12, 30)  # equal samples: symmetric about 0
    assert diff == 0.0 and low == pytest.approx(-high, abs=1e-12) and high > 0


def test_newcombe_names_the_bad_sample():
    with pytest.raises(ValueError, match="sample 2: successes = 12: expected at most trials = 10"):
        difference_interval(3, 10, 12, 10)


# -- main effects --------------------------------------------------------------------------------------------------
TABLE = {("grounded", "grounded"): (40, 50), ("grounded", "ungrounded"): (30, 50),
         ("ungrounded", "grounded"): (25, 50), ("ungrounded", "ungrounded"): (15, 50)}


def test_main_effect_of_each_axis_pools_over_the_other():
    world = main_effect(TABLE, "world")
    assert world["grounded"] == (70, 100) and world["ungrounded"] == (40, 100)
    # The effect is the average of the two cell-rate differences, here equal to the pooled difference.
    assert world["effect"] == pytest.approx(((40 - 25) + (30 - 15)) / 2 / 50)
    assert world["interval"] == pytest.approx(difference_interval(70, 100, 40, 100)[1:])
    behaviour = main_effect(TABLE, "behaviour")
    assert behaviour["grounded"] == (65, 100) and behaviour["ungrounded"] == (45, 100)
    assert behaviour["effect"] == pytest.approx(0.2)
    assert main_effect(TABLE, "behavior") == behaviour  # the task IDs' spelling is accepted


@pytest.mark.parametrize("table, axis, message", [
    (TABLE, "lighting", "axis = 'lighting'"),
    ({k: v for k, v in TABLE.items() if k != ("grounded", "grounded")}, "world", "missing"),
    ({**TABLE, ("grounded", "grounded"): (40, 60)}, "world", "same number in every cell"),
    ({**TABLE, ("grounded", "grounded"): (60, 50)}, "world", "successes = 60: expected at most trials = 50"),
    ({**TABLE, ("grounded", "grounded"): 40}, "world", "expected \\(successes, trials\\)"),
])
def test_main_effect_refuses_bad_tables(table, axis, message):
    with pytest.raises(ValueError, match=message):
        main_effect(table, axis)


# -- correlations and MMRV -----------------------------------------------------------------------------------------
def test_correlations_match_numpy():
    x, y = [0.2, 0.5, 0.4, 0.9], [0.1, 0.6, 0.3, 0.7]
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert spearman(x, y) == pytest.approx(1.0)
    assert spearman(x, [0.1, 0.3, 0.6, 0.7]) == pytest.approx(np.corrcoef([1, 3, 2, 4], [1, 2, 3, 4])[0, 1])
    assert pearson([0.1, 0.2], [0.5, 0.3]) == pytest.approx(-1.0)  # two policies: a valid, if weak, ranking


def test_correlation_of_constant_input_is_nan_with_a_reason():
    with pytest.warns(RuntimeWarning, match="y is constant"):
        assert math.isnan(pearson([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]))
    with pytest.warns(RuntimeWarning, match="x is constant"):
        assert math.isnan(spearman([0.4, 0.4], [0.1, 0.2]))
    assert "ranks do not vary" in correlation_undefined([1, 1], [1, 2], "spearman")
    assert correlation_undefined([1, 2], [1, 2]) is None


@pytest.mark.parametrize("fn", [pearson, spearman, mmrv])
def test_rankings_refuse_bad_input(fn):
    with pytest.raises(ValueError, match="equal lengths"):
        fn([0.1, 0.2, 0.3], [0.1, 0.2])
    with pytest.raises(ValueError, match="at least 2 policies"):
        fn([0.1], [0.2])
    with pytest.raises(ValueError, match="finite"):
        fn([0.1, np.nan], [0.2, 0.3])
    with pytest.raises(ValueError, match="1-D"):
        fn([[0.1, 0.2]], [[0.2, 0.3]])


def test_mmrv_is_zero_when_sim_ranks_as_real_does():
    real = [0.2, 0.8, 0.5, 0.1]
    assert mmrv(real, real) == 0.0
    assert mmrv([0.3, 0.9, 0.6, 0.25], real) == 0.0  # other values, same order


def test_mmrv_hand_computed():
    # Sim swaps policies 0 and 1 (real 0.5 > 0.3, sim 0.1 < 0.2): each gets the gap 0.2, policy 2 none.
    assert mmrv([0.1, 0.2, 0.3], [0.5, 0.3, 0.9]) == pytest.approx((0.2 + 0.2 + 0.0) / 3)
    # Sim reverses the order: each policy's worst violation is its largest real gap (0.8, 0.4, 0.8).
    assert mmrv([3, 2, 1], [0.1, 0.5, 0.9]) == pytest.approx((0.8 + 0.4 + 0.8) / 3)


def test_mmrv_is_invariant_to_monotone_transforms_of_sim():
    rng = np.random.default_rng(0)
    sim, real = rng.uniform(0, 1, 8), rng.uniform(0, 1, 8)
    base = mmrv(sim, real)
    assert base > 0
    for transform in (np.exp, lambda s: s**3, lambda s: 10 * s + 5, np.log):
        assert mmrv(transform(sim), real) == pytest.approx(base, abs=1e-15)
