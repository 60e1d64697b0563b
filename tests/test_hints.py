"""The ``mig:`` hint grammar. GOOD and BAD also drive contrib/job_submit.lua in
tests/e2e/test_job_submit.py, so Python and Lua accept and refuse the same comments
with the same messages."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hintcases import (
    BAD,
    GOOD,
    GiB,
    MiB,
    fuzz_comments,
)
from hypothesis import given
from hypothesis import strategies as st

from slurm_mig.hints import (
    HintError,
    Hints,
    comment_problem,
    hint_word,
    largest_profile_memory,
    parse_duration,
    parse_hints,
    parse_size,
    size_text,
)
from slurm_mig.jobcomment import MAX_COMMENT as SLURM_COMMENT_MAX
from slurm_mig.jobcomment import MAX_NOTE_CHARS, MAX_TOKEN_CHARS, MAX_USER_COMMENT


@pytest.mark.parametrize(("comment", "expected"), GOOD)
def test_good_hints_parse(comment: str | None, expected: Hints) -> None:
    assert parse_hints(comment) == expected
    assert parse_hints(comment, now=time.time()) == expected


@pytest.mark.parametrize(("comment", "shown", "fix"), BAD)
def test_bad_hints_name_the_setting_and_the_fix(comment: str, shown: str, fix: str) -> None:
    with pytest.raises(HintError) as err:
        parse_hints(comment, now=time.time())  # at submission: a past deadline is refused
    message = str(err.value)
    assert message.startswith(f"slurm-mig: hint {shown}: "), message
    assert fix in message, message


def test_size_and_duration_alone_raise_without_the_hint_prefix() -> None:
    assert parse_size("12G") == 12 * GiB
    assert parse_duration("1:30:00") == 5400.0
    with pytest.raises(HintError, match=r"^unknown unit 'X'; write bytes"):
        parse_size("12X")
    with pytest.raises(HintError, match=r"^'soon' is not a duration; write seconds"):
        parse_duration("soon")
    assert isinstance(HintError("x"), ValueError)


def test_a_deadline_that_passed_after_submission_still_parses() -> None:
    # the daemon reads hints of queued jobs long after sbatch: no error then
    hints = parse_hints("mig:deadline=2001-01-01T00:00")
    assert hints.deadline_at == 978307200.0
    assert hints.deadline(5.0) == 978307200.0
    assert parse_hints("mig:deadline=15m").deadline(1000.0) == 1900.0
    assert parse_hints("mig:mem=1G").deadline(1000.0) is None


def test_hint_word_finds_the_word_and_ignores_the_token() -> None:
    assert hint_word("a mig:mem=1G migplan=v1.x.y") == "mig:mem=1G"
    assert hint_word("migplan=v1.x.y") is None


def test_fuzz_cases_hit_both_outcomes() -> None:
    outcomes = set()
    for comment in fuzz_comments(200):
        try:
            parse_hints(comment)
            outcomes.add("ok")
        except HintError:
            outcomes.add("refused")
    assert outcomes == {"ok", "refused"}


@given(st.text())
def test_any_text_parses_or_gives_a_hint_error(comment: str) -> None:
    try:
        parse_hints(comment)
    except HintError as exc:
        assert str(exc).startswith("slurm-mig: hint '")


@pytest.mark.parametrize("key", ["mem", "iters", "time", "pcie", "alpha"])
def test_thousands_of_digits_give_a_hint_error(key: str) -> None:
    # int() of over 4300 digits raised ValueError, and hours of 400 digits OverflowError
    for value in ("9" * 5000, "9" * 5000 + ":00:00", "9" * 150 + ":00:00"):
        with pytest.raises(HintError, match=r"^slurm-mig: hint '"):
            parse_hints(f"mig:{key}={value}")


def test_comment_length_limit_leaves_room_for_the_token_and_a_note() -> None:
    assert comment_problem("x" * MAX_USER_COMMENT) is None
    assert comment_problem("é" * 257) == (
        "slurm-mig: the comment has 514 characters, more than 512 in the mig partition "
        "(Slurm keeps 1024; the rest is for the planner's token and notes); shorten it"
    )
    worst = "x" * MAX_USER_COMMENT + " migplan=" + "t" * MAX_TOKEN_CHARS
    assert len(worst + " [slurm-mig: " + "n" * MAX_NOTE_CHARS + "]") == SLURM_COMMENT_MAX


@given(
    st.sampled_from(["mem", "iters", "time", "pcie", "alpha"]),
    st.integers(min_value=0, max_value=10**300),
    st.sampled_from(["", ".5", "G", "h", ":00:00", ":59"]),
)
def test_numbers_of_any_size_give_a_hint_error_or_a_bounded_value(key, n, tail) -> None:
    # OverflowError/ValueError here drained the node (hooks) and stopped the daemon
    try:
        hints = parse_hints(f"mig:{key}={n}{tail}")
    except HintError as exc:
        assert str(exc).startswith("slurm-mig: hint '")
    else:
        assert hints.mem is None or 0 < hints.mem <= 2**50
        assert hints.time is None or 0 < hints.time <= 366 * 86400
        assert hints.iters is None or 0 < hints.iters <= 10**9
        assert hints.pcie is None or 0 <= hints.pcie <= 1000
        assert hints.alpha is None or 0 < hints.alpha <= 100


@given(st.text(alphabet="mig:=,.0123456789GMKTiBbsmhd:keymemtimealphapcieyesno- ", max_size=40))
def test_grammar_like_text_parses_or_gives_a_hint_error(comment: str) -> None:
    try:
        hints = parse_hints(comment)
    except HintError as exc:
        assert str(exc).startswith("slurm-mig: hint '")
    else:
        assert hints.mem is None or 0 < hints.mem <= 2**50
        assert hints.time is None or 0 < hints.time <= 366 * 86400


def test_hints_and_client_stay_off_the_heavy_imports() -> None:
    """The hooks import both: no numpy, torch, statsmodels or matplotlib."""
    code = (
        "import sys, slurm_mig.hints, slurm_mig.slurm.client;"
        "print(sorted(m for m in ('numpy', 'torch', 'statsmodels', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_largest_profile_memory_is_the_largest_slice_of_the_models() -> None:
    a100 = largest_profile_memory(["A100-40GB"])
    assert a100 == 40576 * MiB  # 7g.40gb
    assert largest_profile_memory(["A100-40GB", "A100-80GB"]) == 81152 * MiB  # 7g.80gb
    assert largest_profile_memory([]) == 0


def test_size_text_rounds_down_to_a_size_the_grammar_reads_as_at_most_it() -> None:
    assert size_text(40 * GiB) == "40G"
    assert size_text(40576 * MiB) == "39.6G"  # 39.625 GiB
    assert size_text(GiB - 1) == "0.9G"
    for n in (40576 * MiB, 81152 * MiB, 3 * GiB + 1):
        assert parse_size(size_text(n)) <= n < parse_size(size_text(n)) + GiB // 10 + 1


def test_a_memory_need_above_the_largest_slice_is_refused_with_the_most_to_ask() -> None:
    """job_submit.lua's MAX_MIG_MEM (tests/e2e/test_job_submit.py checks the same
    messages there)."""
    limit = largest_profile_memory(["A100-40GB"])
    with pytest.raises(HintError) as err:
        parse_hints("mig:key=x,mem=100G", max_mem=limit)
    assert str(err.value) == (
        "slurm-mig: hint 'mem=100G': '100G' exceeds the largest MIG slice of this partition "
        "(39.6G); ask for at most 39.6G"
    )
    assert parse_hints("mig:mem=39.6G", max_mem=limit).mem == parse_size("39.6G")
    assert parse_hints(f"mig:mem={limit}", max_mem=limit).mem == limit
    with pytest.raises(HintError, match="exceeds the largest MIG slice"):
        parse_hints(f"mig:mem={limit + 1}", max_mem=limit)
    assert parse_hints("mig:mem=100G").mem == 100 * GiB  # no limit: the daemon's read
    # the first bad setting is the one named, in order, as the Lua does
    with pytest.raises(HintError, match="^slurm-mig: hint 'time=x'"):
        parse_hints("mig:time=x,mem=100G", max_mem=limit)


def test_job_submit_lua_has_the_limit_line_site_files_rewrites() -> None:
    lua = (Path(__file__).resolve().parents[1] / "contrib" / "job_submit.lua").read_text()
    assert re.findall(r"(?m)^local MAX_MIG_MEM = .*$", lua) == ["local MAX_MIG_MEM = 0"]
    # the Lua mirrors the Python constants it needs
    assert "local MIN_PLAIN_BYTES = 2 ^ 20" in lua


def test_tasks_bound_is_the_geometry_s_and_the_lua_s() -> None:
    """``tasks=`` is bounded by `geometry.MAX_TASKS` in the parser and in the Lua."""
    from slurm_mig.geometry import MAX_TASKS
    from slurm_mig.hints import MAX_TASKS as HINT_MAX

    assert HINT_MAX == MAX_TASKS
    assert parse_hints(f"mig:tasks={MAX_TASKS}").tasks == MAX_TASKS
    with pytest.raises(HintError, match=rf"more than {MAX_TASKS} tasks"):
        parse_hints(f"mig:tasks={MAX_TASKS + 1}")
    lua = (Path(__file__).resolve().parents[1] / "contrib" / "job_submit.lua").read_text()
    assert f"local MAX_TASKS = {MAX_TASKS} " in lua
    assert parse_hints("mig:key=a").tasks == 1  # the default: one slice
