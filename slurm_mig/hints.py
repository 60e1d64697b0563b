"""The ``mig:`` hint a user may put in a job's ``--comment``, parsed strictly.

Grammar: one whitespace-separated word ``mig:k=v,k=v,...`` among free text (words
``migplan=...`` are the planner's token and are skipped here). The prefix is lower case:
a word starting ``MIG:`` or ``Mig:`` (any other case) is refused, not ignored. Keys,
each at most once:

- ``key``: the job kind runtimes are learned under, 1-64 of ``[A-Za-z0-9_.-]``;
- ``mem``: memory the job needs: plain bytes (at least 1 MiB, 1048576: ``mem=12`` is
  surely not 12 bytes), or a number with a unit B, K, M, G, T (also written KiB/KB,
  MiB/MB, ...; any case; G = GB = GiB = 2**30 bytes, as MIG profile names use "gb");
  above 0, at most 1 PiB; where the site sets a limit (the largest MIG slice of the
  partition, ``max_mem``), at most that;
- ``iters``: a whole number from 1 to 10**9;
- ``time``: expected runtime: seconds (``90``), a number with a unit s/m/h/d
  (``90s``, ``15m``, ``1.5h``), or ``M:SS`` / ``H:MM:SS``; above 0, at most 366 days;
- ``pcie``: PCIe bandwidth the job needs in GB/s, a decimal number from 0 to 1000;
- ``alpha``: a decimal number above 0, at most 100;
- ``restartable``: ``yes`` or ``no``;
- ``deadline``: when the job should have ended: a duration after submission (the
  ``time`` grammar, e.g. ``2h`` or ``1:30:00``) or a UTC date and time
  ``YYYY-MM-DDTHH:MM[:SS]`` (optionally ending in ``Z``; years 2000-2199). At
  submission (``now`` given) a date must not be in the past. Slurm's own ``--deadline``
  takes precedence over it;
- ``tasks``: instances the job runs on, one per task, side by side, all of one size (a
  job of several slices, `geometry.gangs`): a whole number from 1 (the default, one
  slice) to `geometry.MAX_TASKS`. Slurm's ``--ntasks`` keeps its meaning (tasks that
  share the job's slices).

The whole word is at most 256 bytes. Slips that would otherwise be read wrongly are
refused with the fix: the last setting of ``time``, ``deadline`` or ``mem`` a bare
number followed by a unit word (``mig:time=2 hours``: write ``time=2h``; ``mig:mem=12
GB``: write ``mem=12GB``), and a space inside the word (``mig: mem=12G``, ``mig:mem =
12G``, ``mig:mem= 12G``, ``mig:key=a, mem=1G``). The input is untrusted: anything else is a
`HintError` (and nothing else: numbers of any length are read as floats first, so no
conversion can overflow) whose message names the setting, shows the bad text and says
the fix. ``contrib/job_submit.lua`` implements the same
grammar with the same messages; ``tests/test_hints.py`` holds the cases both must agree on.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from .jobcomment import MAX_COMMENT, MAX_USER_COMMENT

PREFIX = "mig:"
KEYS = ("key", "mem", "iters", "time", "pcie", "alpha", "restartable", "deadline", "tasks")

MAX_SIZE = 2**50  # bytes (1 PiB): beyond it a size is a typo, and no longer exact
MAX_DURATION = 366 * 86400.0  # seconds
MAX_ITERS = 10**9
MAX_PCIE = 1000.0  # GB/s: beyond any PCIe or NVLink-C2C link
MAX_ALPHA = 100.0
MAX_WORD_BYTES = 256
MAX_TASKS = 8  # = geometry.MAX_TASKS (the hooks import this module: no geometry here)
SIZE_FIX = "write bytes or a size like 12G or 512MiB"
TIME_FIX = "write seconds or a time like 90s, 15m, 2h or 1:30:00"
DEADLINE_FIX = (
    "write a time after submission like 2h or 1:30:00, or a UTC date like 2027-01-31T18:00"
)
_DATE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?Z?")
_KIND_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DECIMAL_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)")
_SIZE_UNITS = {"": 0, "b": 0}
_SIZE_UNITS.update({u + s: e for e, u in enumerate("kmgt", 1) for s in ("", "b", "ib")})
_WORD_RE = re.compile(r"[^ \t\n\v\f\r]+")  # ASCII whitespace splits words, as Lua's %s
_TIME_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_TIME_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_CLOCK_RE = re.compile(r"(?:([0-9]+):)?([0-9]{1,2}):([0-9]{1,2})")
_ANY_CASE_PREFIX_RE = re.compile(r"[Mm][Ii][Gg]:")  # ASCII only: no Unicode case folding
TOKEN_PREFIX = "migplan="  # = comment.TOKEN_TAG (the planner's word, skipped)
MIN_PLAIN_BYTES = 2**20  # below it a size without a unit is surely not meant as bytes
_UNIT_WORD_RE = re.compile(r"([A-Za-z]+)[.,;:!?)]*")  # a word, maybe ending a sentence
_TIME_WORDS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("d", "day", "days"), "d"),
}
_SIZE_WORDS = frozenset(u for u in _SIZE_UNITS if u not in ("", "b"))


class HintError(ValueError):
    """A ``mig:`` hint (or a size or duration) that does not follow the grammar."""


@dataclass(frozen=True)
class Hints:
    """What a job says about itself; None where it said nothing."""

    key: str | None = None
    mem: int | None = None  # bytes
    iters: int | None = None
    time: float | None = None  # seconds
    pcie: float | None = None  # GB/s
    alpha: float | None = None
    restartable: bool | None = None
    deadline_in: float | None = None  # seconds after submission
    deadline_at: float | None = None  # epoch seconds (UTC)
    tasks: int = 1  # instances, one per task (a job of several slices); 1: one slice

    def deadline(self, submit_time: float) -> float | None:
        """The absolute deadline (epoch seconds) the hint gives a job submitted then."""
        if self.deadline_at is not None:
            return self.deadline_at
        return None if self.deadline_in is None else submit_time + self.deadline_in


def parse_size(text: str) -> int:
    """Bytes in ``12G``, ``12GiB``, ``512M``, ``1.5T`` or ``4096`` (binary units);
    HintError (problem; fix) otherwise."""
    m = _SIZE_RE.fullmatch(text)
    if not m:
        raise HintError(f"'{text}' is not a size; {SIZE_FIX}")
    number, unit = m.groups()
    exponent = _SIZE_UNITS.get(unit.lower())
    if exponent is None:
        raise HintError(f"unknown unit '{unit}'; {SIZE_FIX}")
    if exponent == 0 and "." in number:
        raise HintError(f"'{text}' is not a whole number of bytes; {SIZE_FIX}")
    raw = float(number) * 1024**exponent
    if raw > MAX_SIZE:
        raise HintError(f"'{text}' is more than 1 PiB; {SIZE_FIX}")
    value = math.floor(raw + 0.5)
    if value <= 0:
        raise HintError(f"'{text}' is not above 0; {SIZE_FIX}")
    return value


def _parse_mem(text: str, max_mem: int = 0) -> int:
    """``parse_size`` of a ``mem=`` hint: plain bytes below 1 MiB are refused (a unit
    forgotten), and so is more than ``max_mem`` (when above 0)."""
    value = parse_size(text)
    if value < MIN_PLAIN_BYTES and text.isdigit():
        raise HintError(f"'{text}' is {value} bytes; write {text}G or {text}MiB")
    if 0 < max_mem < value:
        most = size_text(max_mem)
        raise HintError(
            f"'{text}' exceeds the largest MIG slice of this partition ({most}); "
            f"ask for at most {most}"
        )
    return value


def size_text(n: int) -> str:
    """``n`` bytes in GiB with one decimal, rounded down (``39.6G``; ``40G`` when
    whole): a size the grammar reads as at most ``n``. job_submit.lua writes the same."""
    tenths = n * 10 // 2**30
    whole, tenth = divmod(tenths, 10)
    return f"{whole}G" if tenth == 0 else f"{whole}.{tenth}G"


def largest_profile_memory(models: Iterable[str]) -> int:
    """Bytes of the largest MIG profile the planner uses on any of the GPU ``models``
    (names ``geometry.get_model`` knows); 0 without models. A ``mem=`` need above it can
    never run there: job_submit.lua's MAX_MIG_MEM (``slurm-mig site-files`` fills it)."""
    from .geometry import get_model  # lazily: the hooks import this module

    sizes = [
        m.profile_for_size(s).memory_bytes
        for m in (get_model(name) for name in models)
        for s in m.planner_sizes
    ]
    return max(sizes, default=0)


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``30:00`` or ``1:30:00``;
    HintError (problem; fix) otherwise."""
    m = _TIME_RE.fullmatch(text)
    if m:
        seconds = float(m.group(1)) * _TIME_UNITS[m.group(2)]
    else:
        c = _CLOCK_RE.fullmatch(text)
        if not c:
            raise HintError(f"'{text}' is not a duration; {TIME_FIX}")
        # hours as a float, as Lua reads them: any number of digits, no overflow
        hours, minutes, secs = float(c.group(1) or 0), int(c.group(2)), int(c.group(3))
        if secs >= 60 or (c.group(1) is not None and minutes >= 60):
            raise HintError(f"'{text}': minutes and seconds must be below 60; {TIME_FIX}")
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds > MAX_DURATION:
        raise HintError(f"'{text}' is more than 366 days; {TIME_FIX}")
    if seconds <= 0:
        raise HintError(f"'{text}' is not above 0; {TIME_FIX}")
    return seconds


def _parse_kind(text: str) -> str:
    if not _KIND_RE.fullmatch(text):
        raise HintError(f"'{text}' is not a job kind; use 1 to 64 letters, digits, '_', '.' or '-'")
    return text


def _parse_iters(text: str) -> int:
    if not text.isascii() or not text.isdigit() or float(text) <= 0:
        raise HintError(f"'{text}' is not a whole number above 0; write e.g. iters=1000")
    if float(text) > MAX_ITERS:
        raise HintError(f"'{text}' is more than {MAX_ITERS} iterations; write e.g. iters=1000")
    return int(text.lstrip("0"))


def _parse_pcie(text: str) -> float:
    if not _DECIMAL_RE.fullmatch(text) or not math.isfinite(float(text)):
        raise HintError(f"'{text}' is not a bandwidth in GB/s; write a number >= 0, e.g. pcie=12.5")
    if float(text) > MAX_PCIE:
        raise HintError(f"'{text}' is more than {MAX_PCIE:g} GB/s; write e.g. pcie=12.5")
    return float(text)


def _parse_alpha(text: str) -> float:
    if not _DECIMAL_RE.fullmatch(text) or not 0 < float(text) < math.inf:
        raise HintError(f"'{text}' is not a number above 0; write e.g. alpha=0.9")
    if float(text) > MAX_ALPHA:
        raise HintError(f"'{text}' is more than {MAX_ALPHA:g}; write e.g. alpha=0.9")
    return float(text)


def _parse_restartable(text: str) -> bool:
    if text not in ("yes", "no"):
        raise HintError(f"'{text}' is not yes or no; write restartable=yes or restartable=no")
    return text == "yes"


def _parse_tasks(text: str) -> int:
    """A job's count of instances (``tasks=4``): a whole number from 1 to `MAX_TASKS`."""
    fix = f"write a whole number from 1 to {MAX_TASKS}, e.g. tasks=4"
    if not text.isascii() or not text.isdigit() or float(text) < 1:
        raise HintError(f"'{text}' is not a whole number of tasks; {fix}")
    if float(text) > MAX_TASKS:
        raise HintError(f"'{text}' is more than {MAX_TASKS} tasks (one MIG slice each); {fix}")
    return int(text.lstrip("0"))


def parse_deadline_date(text: str) -> float:
    """Epoch seconds of a UTC ``YYYY-MM-DDTHH:MM[:SS][Z]``; HintError (problem; fix)."""
    m = _DATE_RE.fullmatch(text)
    if not m:
        raise HintError(f"'{text}' is not a deadline; {DEADLINE_FIX}")
    y, mo, d, h, mi = (int(x) for x in m.groups()[:5])
    sec = int(m.group(6) or 0)
    if not 2000 <= y <= 2199:
        raise HintError(f"'{text}': the year must be 2000 to 2199; {DEADLINE_FIX}")
    if not (1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1]):
        raise HintError(f"'{text}' is not a date of the calendar; {DEADLINE_FIX}")
    if h >= 24 or mi >= 60 or sec >= 60:
        raise HintError(
            f"'{text}': hours must be below 24, minutes and seconds below 60; {DEADLINE_FIX}"
        )
    return float(calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0)))


_PARSERS = {
    "key": _parse_kind,
    "mem": _parse_mem,
    "iters": _parse_iters,
    "time": parse_duration,
    "pcie": _parse_pcie,
    "alpha": _parse_alpha,
    "restartable": _parse_restartable,
    "deadline": str,  # `_deadline` reads it
    "tasks": _parse_tasks,
}


def _fail(shown: str, problem: str) -> HintError:
    return HintError(f"slurm-mig: hint '{shown}': {problem}")


def comment_problem(comment: str | None, partition: str = "mig") -> str | None:
    """Why a user's Comment (without planner tokens) is too long for the MIG partition,
    or None; the message job_submit.lua gives at sbatch and scontrol update."""
    size = len((comment or "").encode())
    if size <= MAX_USER_COMMENT:
        return None
    return (
        f"slurm-mig: the comment has {size} characters, more than {MAX_USER_COMMENT} in the "
        f"{partition} partition (Slurm keeps {MAX_COMMENT}; the rest is for the "
        "planner's token and notes); shorten it"
    )


def _hint_and_after(comment: str | None) -> tuple[str | None, list[str]]:
    """The ``mig:`` word of a comment and the (at most two) words after it, planner
    tokens skipped; HintError for a second word or a prefix not in lower case."""
    words = [w for w in _WORD_RE.findall(comment or "") if not w.startswith(TOKEN_PREFIX)]
    found = None
    for i, w in enumerate(words):
        if not _ANY_CASE_PREFIX_RE.match(w):
            continue
        if not w.startswith(PREFIX):
            raise _fail(w, f"write the prefix in lower case: {PREFIX}{w[len(PREFIX) :]}")
        if found is not None:
            raise _fail(
                w, "a second mig: word; put all settings in one mig: word, separated by commas"
            )
        found = i
    if found is None:
        return None, []
    return words[found], words[found + 1 : found + 3]


def hint_word(comment: str | None) -> str | None:
    """The ``mig:`` word of a comment, or None; HintError if there are several, or a
    word starts with the prefix in another case (``MIG:``)."""
    return _hint_and_after(comment)[0]


def _spaced(shown: str, joined: str) -> HintError:
    return _fail(shown, f"a space inside the mig: word; write {joined}")


def _unit_word(key: str, value: str, after: list[str]) -> HintError | None:
    """The error for ``time=2 hours`` (a bare number, then a unit word), or None."""
    if not after or key not in ("time", "deadline", "mem") or not _DECIMAL_RE.fullmatch(value):
        return None
    m = _UNIT_WORD_RE.fullmatch(after[0])
    if not m:
        return None
    word = m.group(1)
    if key == "mem":
        unit = word if word.lower() in _SIZE_WORDS else None
    else:
        unit = _TIME_WORDS.get(word.lower())
    if unit is None:
        return None
    return _fail(
        f"{key}={value}",
        f"followed by '{after[0]}': the unit must be part of the value; write {key}={value}{unit}",
    )


def _deadline(text: str, now: float | None) -> dict[str, float]:
    if "-" in text:
        at = parse_deadline_date(text)
        if now is not None and at <= now:
            raise HintError(f"'{text}' is in the past (UTC); {DEADLINE_FIX}")
        return {"deadline_at": at}
    if not (_TIME_RE.fullmatch(text) or _CLOCK_RE.fullmatch(text)):
        raise HintError(f"'{text}' is not a deadline; {DEADLINE_FIX}")
    return {"deadline_in": parse_duration(text)}


@lru_cache(maxsize=1 << 16)
def cached_hints(comment: str) -> Hints | HintError:
    """`parse_hints` of ``comment``, or the HintError it raised, memoised: the planner
    reads each waiting job's comment several times a cycle, cycle after cycle (hints
    are immutable, and so is a comment's parse)."""
    try:
        return parse_hints(comment)
    except HintError as exc:
        return exc


def parse_hints(comment: str | None, now: float | None = None, max_mem: int = 0) -> Hints:
    """The hints in a job comment; ``Hints()`` (all None) when it has no ``mig:`` word.
    ``now`` (epoch seconds; at submission): a deadline date must be after it.
    ``max_mem`` (bytes; 0: none): ``mem=`` above it is refused (it can never run)."""
    word, after = _hint_and_after(comment)
    if word is None:
        return Hints()
    size = len(word.encode())
    if size > MAX_WORD_BYTES:
        raise _fail(
            "mig:...", f"{size} characters, more than {MAX_WORD_BYTES}; shorten the mig: word"
        )
    body = word[len(PREFIX) :]
    if not body:
        if after:
            raise _spaced(f"{word} {after[0]}", word + after[0])
        raise _fail(word, "no settings; write mig:key=value,... e.g. mig:mem=12G,time=2h")
    values: dict[str, object] = {}
    seen_deadline = False
    items = body.split(",")
    for i, item in enumerate(items):
        last = after if i == len(items) - 1 else []  # the words after the hint word
        if not item:
            if last:
                raise _spaced(f"{word} {last[0]}", word + last[0])
            raise _fail(
                word,
                "an empty setting (two commas in a row, or one at an end); separate settings with single commas",
            )
        key, eq, value = item.partition("=")
        if not eq:
            if last[:1] == ["="] and len(last) > 1:
                raise _spaced(f"{item} = {last[1]}", f"{word}={last[1]}")
            if last and last[0].startswith("=") and last[0] != "=":
                raise _spaced(f"{item} {last[0]}", word + last[0])
            raise _fail(item, f"no '='; write {item}=value")
        if key not in _PARSERS:
            raise _fail(item, f"unknown key '{key}'; use one of {', '.join(KEYS)}")
        if key in values or (key == "deadline" and seen_deadline):
            raise _fail(item, f"'{key}' is given twice; give each key once")
        if not value:
            if last:
                raise _spaced(f"{item} {last[0]}", word + last[0])
            raise _fail(item, f"no value; write {key}=value")
        unit_error = _unit_word(key, value, last)
        if unit_error is not None:
            raise unit_error
        try:
            if key == "deadline":
                values.update(_deadline(value, now))
                seen_deadline = True
            elif key == "mem":
                values[key] = _parse_mem(value, max_mem)
            else:
                values[key] = _PARSERS[key](value)
        except HintError as exc:
            raise _fail(item, str(exc)) from None
        except (ValueError, ArithmeticError) as exc:  # a bug: still the user's one line
            raise _fail(
                item, f"cannot be read ({type(exc).__name__}); write a plain value"
            ) from None
    return Hints(**values)  # type: ignore[arg-type]
