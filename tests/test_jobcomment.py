"""The job's Comment taken apart and written back: the user's text is kept as written,
the planner's token and note are found and replaced, and Slurm's 1024 characters are
never exceeded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_mig import jobcomment as comments
from slurm_mig.jobcomment import (
    MAX_COMMENT,
    MAX_NOTE_CHARS,
    MAX_TOKEN_CHARS,
    MAX_USER_COMMENT,
    Comment,
    CommentTooLong,
    parse,
    without_tokens,
)

# user text: printable words, no planner words ("migplan=", "[slurm-mig: ")
_WORD = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="[]"),
    min_size=1,
    max_size=12,
).filter(lambda w: not w.startswith("migplan="))
USER_TEXT = st.lists(_WORD, max_size=20).map(" ".join)
TOKEN = st.text(alphabet="ABCDEFabcdef0123456789-_", min_size=1, max_size=MAX_TOKEN_CHARS)


def test_parse_finds_text_token_and_note():
    c = parse("train mig:key=resnet,time=2m migplan=2AAA [slurm-mig: waits]")
    assert c == Comment("train mig:key=resnet,time=2m", "2AAA", "waits")
    assert c.hint == "mig:key=resnet,time=2m"
    assert parse(None) == parse("") == Comment()


def test_the_last_token_is_the_planners_and_every_token_word_is_dropped():
    c = parse("migplan=old a migplan=mine b migplan=last")
    assert (c.text, c.token) == ("a b", "last")
    assert without_tokens("x migplan=1 y\tmigplan=2") == "x y"


def test_only_ascii_whitespace_separates_a_token_as_lua_does():
    # U+2003 is whitespace to Python's \s but not to Lua's %s: not a separate word
    c = parse("x\u2003migplan=forged")
    assert c.token is None and c.text == "x\u2003migplan=forged"


@given(text=USER_TEXT, token=st.none() | TOKEN, note=st.none() | st.text(max_size=50))
def test_render_then_parse_gives_the_same_comment(text, token, note):
    rendered = Comment(text, token, note).render()
    assert len(rendered) <= MAX_COMMENT
    back = parse(rendered)
    assert (back.text, back.token) == (text.strip(), token)
    if note is not None and note.strip():
        shown = " ".join(note.replace("[", "(").replace("]", ")").split())
        assert back.note == shown


def test_the_worst_case_fits_slurms_limit_exactly():
    worst = Comment("u" * MAX_USER_COMMENT, "t" * MAX_TOKEN_CHARS, "n" * 5000).render()
    assert len(worst) == MAX_COMMENT
    assert parse(worst).note == "n" * (MAX_NOTE_CHARS - 3) + "..."


def test_a_note_never_takes_more_than_its_share():
    rendered = Comment("short", None, "why " * 400).render()
    assert len(parse(rendered).note or "") == MAX_NOTE_CHARS


def test_a_token_that_cannot_fit_is_an_error_naming_the_limit():
    with pytest.raises(CommentTooLong, match=r"shorten --comment to at most 8\d\d characters"):
        Comment("x" * 1000, "t" * 130).render()


def test_an_over_long_comment_without_token_keeps_its_text_and_drops_the_note():
    text = "y" * 1020
    assert Comment(text, None, "a note").render() == text


def test_with_hint_sets_one_key_and_keeps_the_rest():
    c = parse("run 7 mig:key=a,mem=4G extra migplan=T")
    d = c.with_hint("mem", "8G")
    assert d.text == "run 7 mig:key=a,mem=8G extra" and d.token == "T"
    assert parse("plain").with_hint("mem", "1G").text == "plain mig:mem=1G"


def test_module_exports_what_it_documents():
    assert set(comments.__all__) <= set(dir(comments))
