"""The planner's signed token (slurm_mig/slurm/assignment.py): `sign` and `verify` round
trip an `Assignment`; a token bound to another job, run, node or time, of another plan,
forged, altered, truncated or of the old format 1 is refused with AssignmentError and
nothing else; the signing key's file is written root-only and refused when it is not.
How the hooks act on a refused token is tests/node/test_hooks.py and test_hook_attacks.py."""

from __future__ import annotations

import base64
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hooksite import NODE, T0, assignment, v1_token
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_mig.geometry import MAX_TASKS, Placement
from slurm_mig.slurm.assignment import (
    KEY_BYTES,
    MAC_BYTES,
    MAX_TOKEN_CHARS,
    Assignment,
    AssignmentError,
    KeyFileError,
    OldTokenError,
    _mac,
    generate_key,
    load_key,
    open_token,
    plan_id,
    sign,
    valid_plan_id,
    verify,
)
from slurm_mig.slurm.jobrecord import admin_comment_for, parse_admin_comment

KEY = bytes(range(KEY_BYTES))
OTHER_KEY = bytes(KEY_BYTES)
B64URL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown)")


def verify_for(token: str, **binding) -> Assignment:
    """`verify` under KEY for run 0 of job 42 on NODE, 5 s after T0, unless ``binding``
    says otherwise."""
    want = {"job_id": "42", "restart": 0, "node": NODE, "now": T0 + 5, "max_age": 3600.0}
    return verify(token, KEY, **{**want, **binding})


def _decoded(token: str) -> bytes:
    body = token[1:]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


def _encoded(raw: bytes) -> str:
    return "2" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


# -- sign and verify -------------------------------------------------------------------------


def test_a_signed_assignment_verifies_as_itself_with_its_plan_id():
    a = assignment("42", keep_for="43", reuse_from="41")
    token = sign(a, KEY)
    assert token[0] == "2" and B64URL.issuperset(token[1:])  # format 2: one Comment word
    got = verify_for(token)
    assert got == replace(a, plan=plan_id(a)) and valid_plan_id(got.plan)
    assert open_token(token, KEY) == got


_names = st.text(min_size=1, max_size=8)  # at most 32 bytes in UTF-8: the token fits
_seconds = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    a=st.builds(
        Assignment,
        job_id=st.from_regex(r"[0-9]{1,10}(_[0-9]{1,4})?", fullmatch=True),
        restart=st.integers(0, 2**40),
        node=_names,
        gpu=st.integers(0, 63),
        model=_names,
        profile=_names,
        placement=st.builds(Placement, st.integers(0, 7), st.integers(1, 8)),
        batch=st.integers(0, 2**40),
        order=st.integers(0, 2**20),
        planned_seconds=_seconds,
        issued=_seconds,
        reuse_from=st.none() | st.from_regex(r"[0-9]{1,10}", fullmatch=True),
        keep_for=st.none() | st.from_regex(r"[0-9]{1,10}", fullmatch=True),
        plan=st.just("") | st.from_regex(r"[A-Za-z0-9_-]{8,22}", fullmatch=True),
        tasks=st.integers(1, MAX_TASKS),
    )
)
def test_any_assignment_a_token_can_carry_round_trips(a):
    opened = open_token(sign(a, KEY), KEY)
    assert opened == replace(a, plan=a.plan or plan_id(a))


def test_a_token_carries_one_plan_and_is_short_and_opaque():
    a = assignment("1234567", keep_for="1234568", reuse_from="1234566")
    token = sign(a, KEY)
    # 387 characters before (format 1: base64 JSON + full HMAC), now a third of it
    assert len(f"migplan={token}") <= 150
    payload = _decoded(token)[:-MAC_BYTES]
    assert b"{" not in payload and b'"' not in payload  # no JSON to read or to nest
    opened = open_token(token, KEY)
    assert opened == replace(a, plan=plan_id(a)) and len(opened.plan) == 12
    # a re-plan of the same run (same job, restart, node) is another plan
    again = replace(a, profile="7g.40gb", placement=Placement(0, 8), issued=a.issued + 60)
    assert open_token(sign(again, KEY), KEY).plan != opened.plan
    # the planner's own id (the AdminComment's) is carried as it is
    assert open_token(sign(replace(a, plan="P-0000042abc"), KEY), KEY).plan == "P-0000042abc"


def test_the_longest_signable_token_fits_the_comment_budget():
    a = assignment("9" * 10, node="n" * 64, keep_for="8" * 10, reuse_from="7" * 10)
    assert len(sign(replace(a, batch=2**40, order=2**20), KEY)) <= MAX_TOKEN_CHARS
    with pytest.raises(AssignmentError, match=f"more than {MAX_TOKEN_CHARS}"):
        sign(replace(a, job_id="9" * 64, keep_for="9" * 64, reuse_from="9" * 64), KEY)


def test_a_job_of_several_slices_signs_its_count_and_a_single_job_as_before():
    single = assignment("42")
    gang = replace(single, tasks=4, profile="1g.5gb", placement=Placement(0, 4))
    assert _decoded(sign(single, KEY)) == _decoded(sign(replace(single, tasks=1), KEY))
    got = verify_for(sign(gang, KEY))
    assert got.tasks == 4 and got.placement == Placement(0, 4)
    assert plan_id(gang) != plan_id(replace(gang, tasks=1))
    assert "tasks" not in single.to_json() and gang.to_json()["tasks"] == 4
    assert Assignment.from_json(gang.to_json()) == replace(gang, plan=plan_id(gang))
    for bad in (0, MAX_TASKS + 1, "4", True):
        with pytest.raises(AssignmentError, match="tasks"):
            Assignment.from_json({**gang.to_json(), "tasks": bad})
    # a count of 1 or over the cap inside a genuine token is refused (never signed so)
    raw = bytearray(_decoded(sign(gang, KEY))[:-MAC_BYTES])
    for count in (1, MAX_TASKS + 1):
        raw[-1] = count
        payload = bytes(raw)
        token = _encoded(payload + _mac(KEY, payload))
        with pytest.raises(AssignmentError, match=r"malformed \(tasks\)"):
            open_token(token, KEY)


@pytest.mark.parametrize(
    "change",
    [
        {"tasks": 0},
        {"tasks": MAX_TASKS + 1},
        {"gpu": -1},
        {"restart": 2**63},
        {"batch": True},
        {"planned_seconds": math.inf},
        {"issued": math.nan},
        {"node": "é" * 33},  # 66 bytes
    ],
    ids=repr,
)
def test_what_a_token_cannot_carry_is_not_signed(change):
    with pytest.raises(AssignmentError, match="cannot sign"):
        sign(replace(assignment("42"), **change), KEY)


# -- what a token is bound to -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding", "says"),
    [
        ({"job_id": "43"}, "is for job 42, not job 43"),
        ({"restart": 1}, "for run 0 of the job, this is run 1 (stale after a requeue)"),
        ({"node": "node2"}, f"is for node {NODE}, not node2"),
        ({"now": T0 + 3601}, "issued 3601 s ago, over the 3600 s limit"),
        ({"max_age": 4.0}, "issued 5 s ago, over the 4 s limit"),
    ],
    ids=["job", "restart", "node", "age", "max_age"],
)
def test_a_genuine_token_for_another_run_node_or_time_is_refused(binding, says):
    token = sign(assignment("42"), KEY)
    with pytest.raises(AssignmentError, match="^the assignment ") as refused:
        verify_for(token, **binding)
    assert says in str(refused.value) and not isinstance(refused.value, OldTokenError)


def test_a_token_is_good_for_max_age_seconds_exactly():
    token = sign(assignment("42"), KEY)
    assert verify_for(token, now=T0 + 3600).job_id == "42"


def test_each_plan_of_a_run_has_an_id_of_its_own():
    a = assignment("42")
    assert plan_id(a) == plan_id(replace(a)) and valid_plan_id(plan_id(a))
    others = [
        replace(a, gpu=0),
        replace(a, profile="7g.40gb", placement=Placement(0, 8)),
        replace(a, batch=4),
        replace(a, order=1),
        replace(a, issued=a.issued + 1),  # the same decision, planned again
        replace(a, restart=1),
        replace(a, node="node2"),
    ]
    ids = {plan_id(x) for x in [a, *others]}
    assert len(ids) == 1 + len(others)


@pytest.mark.parametrize(
    ("plan", "valid"),
    [
        ("P-0000042abc", True),
        ("a" * 8, True),
        ("a" * 22, True),
        ("a" * 7, False),
        ("a" * 23, False),
        ("", False),
        ("a b cdefgh", False),
        ("abc+/def=", False),
    ],
)
def test_a_plan_id_is_8_to_22_base64url_characters(plan, valid):
    assert valid_plan_id(plan) is valid


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"4242424", b"4242425"),  # the job id: another job's token
        (b"node1", b"node2"),  # the node
        (b"P-0000042abc", b"P-0000043abc"),  # the plan id: an earlier plan's token
        (b"3g.20gb", b"7g.40gb"),  # what the job gets
    ],
)
def test_a_field_altered_inside_a_genuine_token_is_refused(old, new):
    raw = _decoded(sign(replace(assignment("4242424"), plan="P-0000042abc"), KEY))
    assert raw.count(old) == 1
    with pytest.raises(AssignmentError, match="signature is wrong"):
        open_token(_encoded(raw.replace(old, new)), KEY)


def test_a_token_signed_with_another_key_is_refused():
    with pytest.raises(AssignmentError, match="signature is wrong"):
        verify_for(sign(assignment("42"), OTHER_KEY))


# -- format 1 ----------------------------------------------------------------------------------


def test_a_genuine_token_of_format_1_asks_for_a_new_plan():
    with pytest.raises(OldTokenError, match="older slurm-mig"):
        verify_for(v1_token(assignment("42").to_json(), KEY))


@pytest.mark.parametrize(
    "token",
    [
        v1_token(assignment("42").to_json(), OTHER_KEY),
        "v1.!!!.abc",
        "v1.e30",
        "v1." + "A" * 1000,
    ],
    ids=["forged", "bad alphabet", "no mac", "long"],
)
def test_a_forged_or_malformed_token_of_format_1_is_not_an_old_token(token):
    with pytest.raises(AssignmentError) as refused:
        open_token(token, KEY)
    assert not isinstance(refused.value, OldTokenError)


# -- garbage -----------------------------------------------------------------------------------

_NESTED = base64.urlsafe_b64encode(b"[" * 3000).decode().rstrip("=")  # JSON: RecursionError


@pytest.mark.parametrize(
    "token",
    [
        "",
        "2",
        "2A",
        "xyz",
        "2====",
        "2é" + "A" * 40,
        "2" + "A" * 3000,
        "2" + _NESTED[:290],
        f"v1.{_NESTED}.AAAA",
        _encoded(b"\0" * 16),  # a MAC and no payload
    ],
    ids=lambda t: f"{t[:12]}..{len(t)}",
)
def test_garbage_is_refused_as_malformed_or_forged(token):
    with pytest.raises(AssignmentError, match="malformed|signature is wrong"):
        open_token(token, KEY)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_forged_and_altered_tokens_are_refused_and_nothing_else_is_raised(data):
    genuine = sign(assignment("42"), KEY)
    how = data.draw(st.sampled_from(["flip", "cut", "extend", "text", "bytes"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(genuine) - 1))
        c = data.draw(st.sampled_from("AQgw_-09azZ2"))
        token = genuine[:i] + c + genuine[i + 1 :]
    elif how == "cut":
        token = genuine[: data.draw(st.integers(0, len(genuine) - 1))]
    elif how == "extend":
        token = genuine + data.draw(st.text("ABCabc019_-", min_size=1, max_size=40))
    elif how == "text":
        token = data.draw(st.text(max_size=600))
    else:
        token = _encoded(data.draw(st.binary(max_size=300)))
    if token == genuine:
        return
    with pytest.raises(AssignmentError):
        open_token(token, KEY)


# -- the record of an assignment ---------------------------------------------------------------


def test_an_assignment_round_trips_through_json_and_the_admin_comment():
    plain = assignment("42", keep_for="43")
    a = replace(plain, plan=plan_id(plain))
    assert Assignment.from_json(json.loads(json.dumps(a.to_json()))) == a
    assert parse_admin_comment(admin_comment_for(a)) == a


def test_a_record_written_before_plan_ids_gets_the_one_plan_id_makes():
    a = assignment("42")
    record = {k: v for k, v in a.to_json().items() if k != "plan"}
    assert Assignment.from_json(record) == replace(a, plan=plan_id(a))
    assert parse_admin_comment("slurm-mig:" + json.dumps(record)) == replace(a, plan=plan_id(a))


def test_fields_are_read_as_their_types_and_an_unreadable_record_is_no_assignment():
    record = {**assignment("42").to_json(), "restart": "2", "gpu": 1.0, "job_id": 42}
    a = Assignment.from_json(record)
    assert (a.job_id, a.restart, a.gpu) == ("42", 2, 1)
    deep = 'slurm-mig:{"placement":' + "[" * 100_000
    huge = "slurm-mig:" + json.dumps({**assignment("42").to_json(), "gpu": 1e308 * 10})
    for text in ("slurm-mig:{", "slurm-mig:{}", 'slurm-mig:{"colour": 1}', deep, huge, "note"):
        assert parse_admin_comment(text) is None


@pytest.mark.parametrize(
    "broken",
    [{}, {"placement": None}, {"placement": {"start": "x", "size": 4}}, {"colour": "red"}],
    ids=["empty", "no placement", "bad placement", "unknown field"],
)
def test_a_malformed_assignment_record_is_an_assignment_error(broken):
    record = {**assignment("42").to_json(), **broken} if broken else broken
    with pytest.raises(AssignmentError, match="malformed assignment"):
        Assignment.from_json(record)


# -- the key -----------------------------------------------------------------------------------


def test_a_generated_key_is_its_owners_alone_and_loads(tmp_path):
    path = generate_key(tmp_path / "etc" / "key")
    st_ = path.stat()
    assert (st_.st_mode & 0o777) == 0o600 and st_.st_uid == os.geteuid()
    key = load_key(path)
    assert len(key) == KEY_BYTES
    assert load_key(generate_key(tmp_path / "other")) != key  # random


def test_generate_key_does_not_overwrite_a_key(tmp_path):
    path = generate_key(tmp_path / "key")
    key = load_key(path)
    with pytest.raises(FileExistsError):
        generate_key(path)
    assert load_key(path) == key


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o604, 0o620, 0o602], ids=oct)
def test_a_key_others_can_read_or_write_is_refused(tmp_path, mode):
    path = generate_key(tmp_path / "key")
    path.chmod(mode)
    with pytest.raises(KeyFileError, match=f"readable or writable by others \\(mode {mode:04o}\\)"):
        load_key(path)


@as_root
def test_a_key_another_user_owns_is_refused(tmp_path):
    path = generate_key(tmp_path / "key")
    os.chown(path, 4242, 4242)
    with pytest.raises(KeyFileError, match="owned by uid 4242, not root"):
        load_key(path)


def _key_file(tmp: Path, content: bytes) -> Path:
    path = tmp / "key"
    path.write_bytes(content)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"not hex at all\n", "must be hex text"),
        (b"\xff\xfe\n", "must be hex text"),
        (b"", "too short"),
        (b"abcd\n", "too short"),
    ],
    ids=["not hex", "not text", "empty", "short"],
)
def test_a_malformed_key_is_refused(tmp_path, content, says):
    with pytest.raises(KeyFileError, match=says):
        load_key(_key_file(tmp_path, content))


def test_a_missing_linked_or_odd_key_file_is_refused(tmp_path):
    with pytest.raises(KeyFileError, match="no signing key"):
        load_key(tmp_path / "none")
    link = tmp_path / "link"
    link.symlink_to(generate_key(tmp_path / "key"))
    with pytest.raises(KeyFileError, match="a symlink is refused"):
        load_key(link)
    (tmp_path / "dir").mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_key(tmp_path / "dir")
