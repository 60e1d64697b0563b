"""Workload: the three input forms, strict errors, and the Section 6.3 generator."""

from __future__ import annotations

import json
import math

import pytest

from slurm_mig.geometry import get_model
from slurm_mig.workload import (
    Job,
    WorkloadError,
    generate,
    load_tasks,
    parse_csv,
    parse_json,
    tasks_to_csv,
    validate,
)

A100 = get_model("A100-40GB")
A30 = get_model("A30-24GB")
INF = math.inf

TASKS = [
    Job("job-17", 0.0, {1: 100.0, 2: 51.5, 3: 40.25, 4: 31.0, 7: 20.125}),
    Job("bfs", 0.0, {1: 0.2940401, 2: 0.2016588, 3: 0.0720898, 4: 0.0720898, 7: 0.0510713}),
    Job("big", 0.0, {1: INF, 2: INF, 3: 90.0, 4: 70.0, 7: 45.0}),
]


def _long_csv(tasks, sizes) -> str:
    lines = ["kernel,size,seconds"]
    for t in tasks:
        lines += [f"{t.id},{s},{t.times[s]!r}" for s in sizes]
    return "\n".join(lines) + "\n"


def _json(tasks, sizes, wrap=False) -> str:
    items = [{"id": t.id, "times": {str(s): t.times[s] for s in sizes}} for t in tasks]
    return json.dumps({"tasks": items} if wrap else items)


# ---------------------------------------------------------------------------
# Round trips


def test_wide_csv_round_trip():
    text = tasks_to_csv(TASKS, A100.planner_sizes)
    assert parse_csv(text) == TASKS


def test_long_csv_round_trip():
    assert parse_csv(_long_csv(TASKS, A100.planner_sizes)) == TASKS


@pytest.mark.parametrize("wrap", [False, True])
def test_json_round_trip(wrap):
    assert parse_json(_json(TASKS, A100.planner_sizes, wrap)) == TASKS


def test_load_tasks_three_forms_agree(tmp_path):
    sizes = A100.planner_sizes
    files = {
        "wide.csv": tasks_to_csv(TASKS, sizes),
        "long.csv": _long_csv(TASKS, sizes),
        "tasks.json": _json(TASKS, sizes),
        "tasks.txt": _json(TASKS, sizes, wrap=True),  # JSON detected by content
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        loaded = load_tasks(tmp_path / name, A100)
        assert loaded == TASKS, name
        for a, b in zip(loaded, TASKS):
            for s in sizes:
                assert a.times[s] == b.times[s]  # bit-exact, inf kept


def test_wide_csv_accepts_g_suffix_and_inf_and_json_strings():
    tasks = parse_csv("id,1g,2g,4g\na,inf,2.5,1\n")
    assert tasks == [Job("a", 0.0, {1: INF, 2: 2.5, 4: 1.0})]
    validate(tasks, A30)
    tasks = parse_json('[{"id": 7, "times": {"1": "inf", "2g": "3", "4": 1}, "memory_bytes": 5}]')
    assert tasks == [Job("7", 0.0, {1: INF, 2: 3.0, 4: 1.0}, memory=5)]
    validate(tasks, A30)


def test_generated_tasks_round_trip_through_csv():
    tasks = generate(12, A100, seed=3, p_sup=0.5)
    assert parse_csv(tasks_to_csv(tasks, A100.planner_sizes)) == tasks


# ---------------------------------------------------------------------------
# Bad inputs: WorkloadError naming the problem

WIDE_HEADER = "id,1,2,3,4,7\n"

BAD_FILES = [
    # (name, file text, model, words the message must contain)
    ("unknown_size", "id,1,2,3,4\na,4,3,2,1\n", A30, ["size 3", "A30-24GB"]),
    ("size_not_on_model", "id,1,2,3,4,5,7\na,7,6,5,4,3,2\n", A100, ["size 5"]),
    ("negative", WIDE_HEADER + "a,10,-5,4,3,2\n", A100, ["-5", "> 0"]),
    ("zero", WIDE_HEADER + "a,10,0,4,3,2\n", A100, ["0", "> 0"]),
    ("neg_inf", WIDE_HEADER + "a,10,-inf,4,3,2\n", A100, ["> 0"]),
    ("nan", WIDE_HEADER + "a,10,nan,4,3,2\n", A100, ["NaN"]),
    ("missing_cell", WIDE_HEADER + "a,10,,4,3,2\n", A100, ["missing time", "'a'"]),
    ("missing_size", "id,1,2,3,4\na,4,3,2,1\n", A100, ["no time for size 7"]),
    ("duplicate_ids", WIDE_HEADER + "a,5,4,3,2,1\na,6,5,4,3,2\n", A100, ["duplicate", "'a'"]),
    ("empty", "", A100, ["empty"]),
    ("blank", "\n  \n", A100, ["empty"]),
    ("header_only", WIDE_HEADER, A100, ["header only"]),
    ("header_only_long", "kernel,size,seconds\n", A100, ["header only"]),
    ("too_few_columns", WIDE_HEADER + "a,5,4,3\n", A100, ["4 columns", "header has 6"]),
    ("too_many_columns", WIDE_HEADER + "a,5,4,3,2,1,0\n", A100, ["7 columns", "header has 6"]),
    ("non_numeric", WIDE_HEADER + "a,5,4,fast,2,1\n", A100, ["'fast'", "not a number"]),
    ("all_inf", WIDE_HEADER + "a,inf,inf,inf,inf,inf\n", A100, ["'a'", "inf"]),
    ("long_wrong_columns", "kernel,size,seconds\na,1,5,9\n", A100, [":2", "kernel,size,seconds"]),
    ("long_twice", "kernel,size,seconds\na,1,5\na,1,6\n", A30, ["size 1", "twice"]),
    ("long_non_numeric", "kernel,size,seconds\na,1,abc\n", A30, ["'abc'", "not a number"]),
    ("long_bad_size", "kernel,size,seconds\na,big,5\n", A30, ["'big'"]),
    ("long_missing", "kernel,size,seconds\na,1,5\na,2,3\n", A30, ["no time for size 4"]),
    ("json_missing_size", '[{"id": "a", "times": {"1": 3, "2": 2}}]', A30, ["size 4"]),
    ("json_negative", '[{"id": "a", "times": {"1": 3, "2": -2, "4": 1}}]', A30, ["> 0"]),
    ("json_zero", '[{"id": "a", "times": {"1": 3, "2": 0, "4": 1}}]', A30, ["> 0"]),
    ("json_nan", '[{"id": "a", "times": {"1": 3, "2": NaN, "4": 1}}]', A30, ["not a number"]),
    ("json_null", '[{"id": "a", "times": {"1": 3, "2": null, "4": 1}}]', A30, ["not a number"]),
    ("json_bool", '[{"id": "a", "times": {"1": 3, "2": true, "4": 1}}]', A30, ["not a number"]),
    ("json_text", '[{"id": "a", "times": {"1": 3, "2": "x", "4": 1}}]', A30, ["not a number"]),
    ("json_unknown_size", '[{"id": "a", "times": {"1": 3, "2": 2, "3": 1, "4": 1}}]', A30, ["3"]),
    (
        "json_duplicate_ids",
        '[{"id": "a", "times": {"1": 3, "2": 2, "4": 1}},'
        ' {"id": "a", "times": {"1": 3, "2": 2, "4": 1}}]',
        A30,
        ["duplicate"],
    ),
    ("json_empty_list", "[]", A30, ["no tasks"]),
    ("json_not_list", '{"a": 1}', A30, ["list"]),
    ("json_no_times", '[{"id": "a"}]', A30, ["times"]),
    ("json_broken", '[{"id": "a", ', A30, ["JSON"]),
    ("json_empty_id", '[{"id": "", "times": {"1": 3, "2": 2, "4": 1}}]', A30, ["empty id"]),
    # issue 10: ids that printed as "None" or injected a table line; numbers that overflow
    ("json_null_id", '[{"id": null, "times": {"1": 3, "2": 2, "4": 1}}]', A30, ["id null"]),
    ("json_list_id", '[{"id": [1], "times": {"1": 3, "2": 2, "4": 1}}]', A30, ["id [1]"]),
    ("json_float_id", '[{"id": 1.5, "times": {"1": 3, "2": 2, "4": 1}}]', A30, ["id 1.5"]),
    ("json_tab_id", '[{"id": "a\\tb", "times": {"1": 3, "2": 2, "4": 1}}]', A30, ["'\\t'"]),
    ("csv_newline_id", WIDE_HEADER + '"a\nb",5,4,3,2,1\n', A100, ["control character '\\n'"]),
    ("csv_escape_id", WIDE_HEADER + "a\x1b[2Jb,5,4,3,2,1\n", A100, ["'\\x1b'"]),
    ("long_newline_id", 'kernel,size,seconds\n"a\rb",1,5\n', A30, ["'\\r'"]),
    (
        "json_big_int",
        '[{"id": "a", "times": {"1": 1' + "0" * 400 + ', "2": 2, "4": 1}}]',
        A30,
        ["more than 1e+12 seconds"],
    ),  # fmt: skip
    ("csv_big_int", WIDE_HEADER + "a,1" + "0" * 400 + ",4,3,2,1\n", A100, ["more than 1e+12"]),
    ("csv_1e400", WIDE_HEADER + "a,1e400,4,3,2,1\n", A100, ["more than 1e+12"]),
    ("json_deep", "[" * 5000 + "]" * 5000, A30, ["nested too deeply"]),
]


@pytest.mark.parametrize(
    "text,model,words", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES]
)
def test_bad_input_names_the_problem(tmp_path, text, model, words):
    suffix = ".json" if text.lstrip()[:1] in ("[", "{") else ".csv"
    path = tmp_path / f"tasks{suffix}"
    path.write_text(text)
    with pytest.raises(WorkloadError) as exc:
        load_tasks(path, model)
    msg = str(exc.value)
    assert str(path) in msg  # the file is named
    for w in words:
        assert w in msg, (w, msg)


def test_json_size_given_twice_is_rejected():
    """'1' and '1g' are the same size: one of the two times would be dropped silently."""
    with pytest.raises(WorkloadError, match="1"):
        parse_json('[{"id": "a", "times": {"1": 3, "1g": 9, "2": 2, "4": 1}}]')


@pytest.mark.parametrize("mem", ['"lots"', "-1", "1.5", "true"])
def test_json_memory_bytes_must_be_bytes(mem):
    """Memory is bytes (int) internally (DESIGN.md); anything else is bad input."""
    text = f'[{{"id": "a", "times": {{"1": 3, "2": 2, "4": 1}}, "memory_bytes": {mem}}}]'
    with pytest.raises(WorkloadError, match="memory"):
        validate(parse_json(text), A30)


def test_wide_header_repeating_a_size():
    with pytest.raises(WorkloadError, match="repeats"):
        parse_csv("id,1,1g,2\na,1,2,3\n")


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match="no such file"):
        load_tasks(tmp_path / "nope.csv", A100)


def test_row_number_in_csv_errors():
    with pytest.raises(WorkloadError, match=r"src:3"):
        parse_csv(WIDE_HEADER + "a,5,4,3,2,1\nb,5,x,3,2,1\n", source="src")


def test_validate_task_objects():
    good = Job("a", 0.0, {1: 4.0, 2: INF, 4: 1.0})
    validate([good], A30)
    cases = [
        ([], "no tasks"),
        ([Job("a", 0.0, {1: 4.0, 2: -1.0, 4: 1.0})], "> 0"),
        ([Job("a", 0.0, {1: 4.0, 2: 0.0, 4: 1.0})], "> 0"),
        ([Job("a", 0.0, {1: 4.0, 2: math.nan, 4: 1.0})], "not a number"),
        ([Job("a", 0.0, {1: 4.0, 2: "3", 4: 1.0})], "not a number"),
        ([Job("a", 0.0, {1: 4.0, 4: 1.0})], "no time for size 2"),
        ([Job("a", 0.0, {1: 4.0, 2: 2.0, 3: 1.5, 4: 1.0})], "size 3"),
        ([Job("a", 0.0, {1: INF, 2: INF, 4: INF})], "inf"),
        ([good, Job("a", 0.0, {1: 1.0, 2: 1.0, 4: 1.0})], "duplicate"),
    ]
    for tasks, words in cases:
        with pytest.raises(WorkloadError, match=words):
            validate(tasks, A30)


def test_inf_accepted_for_some_sizes():
    tasks = parse_csv(WIDE_HEADER + "a,inf,inf,5,4,3\n")
    validate(tasks, A100)
    assert tasks[0].min_work() == 15.0


# ---------------------------------------------------------------------------
# Generator (Section 6.3)

# Bounds on one step t(s+1)/t(s) = (s + r)/(s + 1) per speedup type.
NEAR_OR_SUPER_MAX_R = 0.2  # super-linear r in [-0.5, 0], near-linear r in [0, 0.2]
SUB_MIN_R = 0.5  # sub-linear r in [0.5, 1]
TOL = 1e-9


def _ratio_bound(lo: int, hi: int, r: float) -> float:
    out = 1.0
    for s in range(lo, hi):
        out *= (s + r) / (s + 1)
    return out


def _steps(model):
    sizes = model.planner_sizes
    return list(zip(sizes, sizes[1:]))


def _scaling_class(task: Job, model) -> int:
    """The largest size up to which the task scales near- or super-linearly.

    Every visible step is either 'good' (all r <= 0.2) or 'sub' (all r >= 0.5), and
    once sub-linear, a task stays sub-linear (the paper's formula)."""
    cls = None
    for lo, hi in _steps(model):
        ratio = task.times[hi] / task.times[lo]
        good = ratio <= _ratio_bound(lo, hi, NEAR_OR_SUPER_MAX_R) * (1 + TOL)
        sub = ratio >= _ratio_bound(lo, hi, SUB_MIN_R) * (1 - TOL)
        assert good != sub, (task, lo, hi, ratio)
        if cls is None and sub:
            cls = lo
        if cls is not None:
            assert sub, f"{task} scales well again after becoming sub-linear at {cls}"
    return cls if cls is not None else model.planner_sizes[-1]


def _classes(tasks, model):
    out = {s: 0 for s in model.planner_sizes}
    for t in tasks:
        out[_scaling_class(t, model)] += 1
    return out


def test_generator_deterministic_per_seed():
    a = generate(15, A100, "MIXEDSCALING", "WIDETIMES", p_sup=0.5, seed=42)
    b = generate(15, A100, "MIXEDSCALING", "WIDETIMES", p_sup=0.5, seed=42)
    c = generate(15, A100, "MIXEDSCALING", "WIDETIMES", p_sup=0.5, seed=43)
    assert a == b
    assert [t.times for t in a] == [t.times for t in b]
    assert [t.times for t in a] != [t.times for t in c]


@pytest.mark.parametrize("model", [A100, A30], ids=lambda m: m.name)
def test_generator_output_is_valid(model):
    for seed in range(5):
        tasks = generate(17, model, "POORSCALING", p_sup=0.5, seed=seed)
        assert len(tasks) == 17
        assert len({t.id for t in tasks}) == 17
        validate(tasks, model)
        for t in tasks:
            assert set(t.times) == set(model.planner_sizes)
            assert all(math.isfinite(x) and x > 0 for x in t.times.values())


def test_footnote8_counts_mixedscaling_n10():
    for seed in range(5):
        tasks = generate(10, A100, "MIXEDSCALING", p_sup=0.5, seed=seed)
        assert _classes(tasks, A100) == {1: 2, 2: 2, 3: 2, 4: 2, 7: 2}


def test_footnote8_counts_poor_and_good():
    for seed in range(3):
        poor = generate(10, A100, "POORSCALING", seed=seed)
        assert _classes(poor, A100) == {1: 5, 2: 5, 3: 0, 4: 0, 7: 0}
        good = generate(11, A100, "GOODSCALING", seed=seed)
        # 5.5 each: floors 5 + 5, the one left goes to one of the two
        counts = _classes(good, A100)
        assert counts[1] == counts[2] == counts[3] == 0
        assert sorted((counts[4], counts[7])) == [5, 6]


@pytest.mark.parametrize("n", [1, 3, 7, 13, 26])
def test_footnote8_counts_rule(n):
    """Each class gets floor(n p) or one more, classes with p = 0 get none, total n."""
    shares = {1: 0.1, 2: 0.1, 3: 0.2, 4: 0.3, 7: 0.3}  # Fig. 11
    counts = _classes(generate(n, A100, shares, seed=n), A100)
    assert sum(counts.values()) == n
    for s, p in shares.items():
        assert math.floor(n * p) <= counts[s] <= math.floor(n * p) + 1, (s, counts)
    exact = generate(n, A100, {3: 1.0}, seed=n)
    assert _classes(exact, A100)[3] == n


@pytest.mark.parametrize("model", [A100, A30], ids=lambda m: m.name)
@pytest.mark.parametrize("times", ["WIDETIMES", "NARROWTIMES"])
def test_generator_times_monotone_and_in_range(model, times):
    lo, hi = {"WIDETIMES": (1.0, 100.0), "NARROWTIMES": (90.0, 100.0)}[times]
    for seed in range(5):
        for t in generate(20, model, "MIXEDSCALING", times, p_sup=0.5, seed=seed):
            assert lo <= t.times[1] <= hi
            sizes = model.planner_sizes
            for a, b in zip(sizes, sizes[1:]):
                assert t.times[b] <= t.times[a]  # monotony, point 1


def test_poorscaling_never_scales_well_beyond_two_slices():
    for model in (A100, A30):
        for seed in range(10):
            for t in generate(20, model, "POORSCALING", p_sup=0.5, seed=seed):
                for lo, hi in _steps(model):
                    if lo >= 2:
                        ratio = t.times[hi] / t.times[lo]
                        assert ratio >= _ratio_bound(lo, hi, SUB_MIN_R) * (1 - TOL), (t, lo)


def test_p_sup_produces_superlinear_first_step():
    tasks = generate(40, A100, "MIXEDSCALING", p_sup=0.5, seed=1)
    superlinear = [t for t in tasks if 2 * t.times[2] < t.times[1] * (1 - 1e-12)]
    assert superlinear
    # at most floor(p_sup * n_s) tasks per class s >= 2 are memory-bound
    assert len(superlinear) <= 4 * math.floor(0.5 * 8)
    for t in superlinear:
        assert _scaling_class(t, A100) >= 2
    many = generate(40, A100, "MIXEDSCALING", p_sup=1.0, seed=1)
    assert sum(2 * t.times[2] < t.times[1] * (1 - 1e-12) for t in many) > len(superlinear)


def test_memory_bound_tasks_turn_compute_bound():
    """A memory-bound task stays super-linear from 2 to 3 slices with probability
    1 - 0.3 (and r < 0 strictly with probability P(N(-.25, .25) < 0) = 0.84)."""
    tasks = generate(1000, A100, "GOODSCALING", p_sup=1.0, seed=4)
    assert all(2 * t.times[2] <= t.times[1] * (1 + 1e-12) for t in tasks)
    still = sum(3 * t.times[3] < 2 * t.times[2] * (1 - 1e-12) for t in tasks) / len(tasks)
    assert 0.5 < still < 0.68, still  # 0.7 * 0.84 = 0.59


def test_p_sup_zero_has_no_superlinear_step():
    for model in (A100, A30):
        for seed in range(5):
            for t in generate(30, model, "MIXEDSCALING", p_sup=0.0, seed=seed):
                sizes = model.planner_sizes
                for a, b in zip(sizes, sizes[1:]):
                    # work never decreases without memory-bound tasks (r >= 0)
                    assert b * t.times[b] >= a * t.times[a] * (1 - 1e-12)


def test_generator_rejects_bad_parameters():
    with pytest.raises(WorkloadError, match="n"):
        generate(0, A100)
    with pytest.raises(WorkloadError, match="p_sup"):
        generate(5, A100, p_sup=1.5)
    with pytest.raises(WorkloadError, match="add up"):
        generate(5, A100, {1: 0.5, 2: 0.4})


def test_generator_unknown_configuration_is_a_workload_error():
    """A mistyped scaling or times name is bad input too, and should say what exists."""
    with pytest.raises(WorkloadError, match="MIXEDSCALING"):
        generate(5, A100, "MIXEDSCALNG")
    with pytest.raises(WorkloadError, match="WIDETIMES"):
        generate(5, A100, "MIXEDSCALING", "WIDE")
