"""slurm_mig.limitevidence: what a time limit says of a run, against a kind's runs."""

from __future__ import annotations

import math
import statistics

import pytest
from support import trace_limit_ratios

from slurm_mig.limitevidence import (
    LIMIT_RATIO,
    LIMIT_SPREAD,
    OVERDUE_SECONDS,
    expected_end,
    from_limit,
    limit_weight,
    with_limit,
)

CURVE = {1: 700.0, 2: 350.0, 3: 700 / 3, 4: 175.0, 7: 100.0}


def test_the_ratio_and_spread_are_what_the_two_traces_give():
    logs = [math.log(r) for _, r in trace_limit_ratios()]
    assert len(logs) > 4000
    assert math.exp(statistics.median(logs)) == pytest.approx(LIMIT_RATIO, rel=0.02)
    assert statistics.pstdev(logs) == pytest.approx(LIMIT_SPREAD, rel=0.02)


def test_the_limit_counts_fully_without_runs_half_with_few_and_by_spread_after():
    assert limit_weight({}) == 1.0
    assert limit_weight({7: [100.0, 300.0]}) == 0.5
    assert limit_weight({7: [100.0, 100.0, 100.0]}) == 0.0  # runs that agree
    tight = limit_weight({7: [90.0, 100.0, 110.0]})
    scattered = limit_weight({7: [10.0, 100.0, 1000.0], 1: [50.0, 5000.0]})
    assert 0.0 < tight < 0.01 < scattered < 1.0
    # each size against its own median: a curve measured on two sizes is no spread
    assert limit_weight({1: [700.0] * 2, 7: [100.0] * 2}) == 0.0
    assert limit_weight({7: [0.0, -1.0, math.inf]}) == 1.0  # nothing usable


def test_a_run_alone_on_its_size_says_nothing_of_the_spread():
    # three runs on three sizes: each is its own median, no spread is measured
    assert limit_weight({1: [700.0], 2: [400.0], 7: [100.0]}) == 0.5
    # the lone runs do not count toward the few: two agreeing runs are still few
    assert limit_weight({1: [700.0], 2: [400.0], 7: [100.0, 100.0]}) == 0.5
    # but they do not dilute the spread the other sizes measure
    spread = limit_weight({7: [10.0, 100.0, 1000.0]})
    assert limit_weight({1: [5.0], 2: [50_000.0], 7: [10.0, 100.0, 1000.0]}) == spread


def test_with_limit_keeps_the_runs_shape_and_moves_their_level():
    alone = with_limit(CURVE, {}, 1600.0)
    assert alone[1] == pytest.approx(from_limit(1600.0)) == pytest.approx(200.0)
    assert alone[7] / alone[1] == pytest.approx(CURVE[7] / CURVE[1])
    one_run = with_limit(CURVE, {7: [100.0]}, 1600.0)
    assert one_run[1] == pytest.approx(math.sqrt(700.0 * 200.0))  # the geometric mean
    agreed = with_limit(CURVE, {7: [100.0] * 3}, 1600.0)
    assert agreed == pytest.approx(CURVE)


def test_with_limit_leaves_times_without_a_limit_or_a_finite_size():
    assert with_limit(CURVE, {}, math.inf) == CURVE
    assert with_limit(CURVE, {}, 0.0) == CURVE
    never = {1: math.inf, 7: math.inf}
    assert with_limit(never, {}, 600.0) == never
    partial = with_limit({1: math.inf, 3: 300.0, 7: 150.0}, {}, 800.0)
    assert partial[1] == math.inf and partial[3] == pytest.approx(100.0)


def test_a_job_is_expected_to_end_as_planned_then_at_its_limit():
    assert expected_end(100.0, 50.0, 3600.0, now=120.0) == 150.0  # not yet overdue
    assert expected_end(100.0, 50.0, 3600.0, now=200.0) == 3700.0  # overdue: its limit
    assert expected_end(100.0, 50.0, None, now=200.0) == 200.0 + OVERDUE_SECONDS
    assert expected_end(100.0, 50.0, math.inf, now=200.0) == 200.0 + OVERDUE_SECONDS
    # past its limit too (Slurm's OverTimeLimit, a slow clock): ending any moment
    assert expected_end(100.0, 50.0, 3600.0, now=5000.0) == 5000.0 + OVERDUE_SECONDS
