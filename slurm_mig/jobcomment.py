"""The job's Comment, the one place that reads and writes it.

A Comment holds the user's free text, in it at most one ``mig:`` hint word (untrusted,
parsed by ``hints``), and what the planner adds: its signed token ``migplan=<token>``
(carried to the Prolog, which sees SLURM_JOB_COMMENT) and a note ``[slurm-mig: why]``
when a job cannot be planned. Words are split on ASCII whitespace as Lua's ``%s`` does,
so that ``contrib/job_submit.lua`` reads a Comment exactly as this module does (tests
check the two agree). Writers keep the user's text as it is and put the token, then
the note, at the end; Slurm caps a Comment at ``MAX_COMMENT`` characters, so a note is
shortened to fit and a token that cannot fit is an error, never a silent cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "HINT_PREFIX",
    "MAX_COMMENT",
    "MAX_NOTE_CHARS",
    "MAX_TOKEN_CHARS",
    "MAX_USER_COMMENT",
    "TOKEN_TAG",
    "Comment",
    "CommentTooLong",
    "parse",
    "without_tokens",
]

MAX_COMMENT = 1024  # Slurm's limit (22.05 through 26.05: longer is refused)
HINT_PREFIX = "mig:"
TOKEN_TAG = "migplan="
# The budget of a Comment in the MIG partition: the user's text (job_submit.lua refuses
# more), the planner's token word and its note fill Slurm's 1024 exactly.
MAX_USER_COMMENT = 512  # bytes
MAX_TOKEN_CHARS = 300  # the longest token the planner signs (about 130 in practice)
NOTE_FRAME = " [slurm-mig: ]"
MAX_NOTE_CHARS = MAX_COMMENT - MAX_USER_COMMENT - len(" " + TOKEN_TAG) - MAX_TOKEN_CHARS
MAX_NOTE_CHARS -= len(NOTE_FRAME)
_NOTE_RE = re.compile(r"[ \t\n\v\f\r]*\[slurm-mig: [^\]]*\]")
_TOKEN_RE = re.compile(r"(?:^|[ \t\n\v\f\r])migplan=[^ \t\n\v\f\r]*")
_WORD_RE = re.compile(r"[^ \t\n\v\f\r]+")  # ASCII whitespace splits words, as Lua's %s


class CommentTooLong(ValueError):
    """The planner's token does not fit the user's Comment within Slurm's limit."""


@dataclass(frozen=True)
class Comment:
    """A Comment taken apart: ``text`` (the user's, hint word included, as written),
    ``token`` (the planner's, without its tag) and ``note`` (the planner's, its text)."""

    text: str = ""
    token: str | None = None
    note: str | None = None

    @property
    def hint(self) -> str | None:
        """The first ``mig:`` word of the user's text (``hints`` refuses a second)."""
        return next((w for w in self.hint_words() if w), None)

    def hint_words(self) -> list[str]:
        return [w for w in _WORD_RE.findall(self.text) if w.startswith(HINT_PREFIX)]

    def render(self) -> str:
        """The Comment as Slurm stores it; CommentTooLong when text and token exceed
        ``MAX_COMMENT`` (the note is shortened, or dropped, to fit)."""
        base = self.text.strip()
        if self.token is not None:
            base = f"{base} {TOKEN_TAG}{self.token}".strip()
        if len(base) > MAX_COMMENT and self.token is not None:
            raise CommentTooLong(
                f"the job's --comment is {len(self.text.strip())} characters; the planner "
                f"needs {len(base) - len(self.text.strip())} more for its token and Slurm "
                f"keeps {MAX_COMMENT}: shorten --comment to at most "
                f"{MAX_COMMENT - (len(base) - len(self.text.strip()))} characters"
            )
        if self.note is None or len(base) > MAX_COMMENT - len(NOTE_FRAME) - 3:
            return base  # no room for a note (a Comment Slurm took before the limit)
        room = min(MAX_NOTE_CHARS, MAX_COMMENT - len(base) - len(NOTE_FRAME))
        clean = " ".join(self.note.replace("[", "(").replace("]", ")").split())
        if len(clean) > room:
            clean = clean[: max(0, room - 3)] + "..."
        return f"{base} [slurm-mig: {clean}]".strip()

    def with_token(self, token: str | None) -> Comment:
        return Comment(self.text, token, self.note)

    def with_note(self, note: str | None) -> Comment:
        return Comment(self.text, self.token, note)

    def with_hint(self, key: str, value: str) -> Comment:
        """The hint word with ``key=value`` set (replacing that key; the word is added at
        the end of the user's text when there is none). The rest of the text is kept."""
        words = self.hint_words()
        if not words:
            text = f"{self.text.rstrip()} {HINT_PREFIX}{key}={value}".strip()
            return Comment(text, self.token, self.note)
        word = words[0]
        items = [it for it in word[len(HINT_PREFIX) :].split(",") if it]
        items = [it for it in items if it.partition("=")[0] != key] + [f"{key}={value}"]
        new = HINT_PREFIX + ",".join(items)
        m = re.search(rf"(?:^|(?<=[ \t\n\v\f\r])){re.escape(word)}(?=[ \t\n\v\f\r]|$)", self.text)
        assert m is not None
        text = self.text[: m.start()] + new + self.text[m.end() :]
        return Comment(text, self.token, self.note)


def parse(raw: str | None) -> Comment:
    """Take a Comment apart (module doc). Every ``migplan=`` word is the planner's: the
    last one is its token, earlier ones are dropped; the last note is kept."""
    text = raw or ""
    notes = [m.group(0) for m in _NOTE_RE.finditer(text)]
    note = None
    if notes:
        note = notes[-1].strip()[len("[slurm-mig: ") : -1]
        text = _NOTE_RE.sub("", text)
    tokens = [m.group(0).strip() for m in _TOKEN_RE.finditer(text)]
    token = tokens[-1][len(TOKEN_TAG) :] if tokens else None
    text = _TOKEN_RE.sub("", text)
    return Comment(text.strip(), token, note)


def without_tokens(raw: str | None) -> str:
    """``raw`` without any ``migplan=`` word, the rest as written (what job_submit.lua
    leaves of a user's Comment)."""
    return _TOKEN_RE.sub("", raw or "").strip()
