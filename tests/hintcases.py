"""The hint grammar's cases, shared by the parser's tests (tests/test_hints.py) and job_submit.lua's (tests/e2e/test_job_submit.py): comments that parse with what they give, comments refused with what the error shows and its fix, and near-miss comments built from the grammar's pieces."""

from __future__ import annotations

import random

from slurm_mig.hints import Hints

GiB = 2**30


MiB = 2**20


# comment -> (the setting the message must show, the fix it must give)
SIZE_FIX = "write bytes or a size like 12G or 512MiB"


TIME_FIX = "write seconds or a time like 90s, 15m, 2h or 1:30:00"


TASKS_FIX = "write a whole number from 1 to 8, e.g. tasks=4"


KEYS_FIX = "use one of key, mem, iters, time, pcie, alpha, restartable, deadline, tasks"


DEADLINE_FIX = (
    "write a time after submission like 2h or 1:30:00, or a UTC date like 2027-01-31T18:00"
)


# comment -> the Hints it means
GOOD: list[tuple[str | None, Hints]] = [
    (None, Hints()),
    ("", Hints()),
    ("just some free text", Hints()),
    ("xmig:mem=12X is not a hint word", Hints()),
    ("migplan=v1.a.b is the planner's token", Hints()),
    ("mig:mem=1G MIGHT be fine: no colon", Hints(mem=GiB)),
    ("mig:key=resnet50", Hints(key="resnet50")),
    ("mig:key=A.b-c_9", Hints(key="A.b-c_9")),
    ("mig:key=" + "k" * 64, Hints(key="k" * 64)),
    ("mig:mem=12G", Hints(mem=12 * GiB)),
    ("mig:mem=12GiB", Hints(mem=12 * GiB)),
    ("mig:mem=12gb", Hints(mem=12 * GiB)),
    ("mig:mem=512M", Hints(mem=512 * MiB)),
    ("mig:mem=512MiB", Hints(mem=512 * MiB)),
    ("mig:mem=1.5T", Hints(mem=1536 * GiB)),
    ("mig:mem=2k", Hints(mem=2048)),
    ("mig:mem=4096B", Hints(mem=4096)),  # a unit: bytes meant
    ("mig:mem=1048576", Hints(mem=MiB)),  # plain bytes from 1 MiB
    ("mig:mem=12884901888", Hints(mem=12 * GiB)),
    ("mig:mem=1024T", Hints(mem=2**50)),
    ("mig:iters=1000", Hints(iters=1000)),
    ("mig:iters=007", Hints(iters=7)),
    ("mig:time=90", Hints(time=90.0)),
    ("mig:time=90s", Hints(time=90.0)),
    ("mig:time=15m", Hints(time=900.0)),
    ("mig:time=2h", Hints(time=7200.0)),
    ("mig:time=1.5h", Hints(time=5400.0)),
    ("mig:time=1d", Hints(time=86400.0)),
    ("mig:time=1:30:00", Hints(time=5400.0)),
    ("mig:time=30:00", Hints(time=1800.0)),
    ("mig:time=90:00", Hints(time=5400.0)),
    ("mig:time=0:01", Hints(time=1.0)),
    ("mig:time=366d", Hints(time=366 * 86400.0)),
    ("mig:time=8784:00:00", Hints(time=366 * 86400.0)),
    ("mig:pcie=0", Hints(pcie=0.0)),
    ("mig:pcie=1000", Hints(pcie=1000.0)),
    ("mig:alpha=100", Hints(alpha=100.0)),
    ("mig:iters=1000000000", Hints(iters=10**9)),
    ("mig:iters=" + "0" * 200 + "1", Hints(iters=1)),
    ("mig:time=" + "0" * 200 + "1:00:00", Hints(time=3600.0)),
    ("mig:key=a,iters=" + "0" * 239 + "1", Hints(key="a", iters=1)),
    ("mig:pcie=12.5", Hints(pcie=12.5)),
    ("mig:alpha=0.9", Hints(alpha=0.9)),
    ("mig:alpha=2", Hints(alpha=2.0)),
    ("mig:restartable=yes", Hints(restartable=True)),
    ("mig:restartable=no", Hints(restartable=False)),
    (
        "nightly run mig:key=bert,mem=4G,iters=10,time=15m,pcie=3,alpha=0.5,restartable=no "
        "migplan=v1.abc.def",
        Hints(
            key="bert", mem=4 * GiB, iters=10, time=900.0, pcie=3.0, alpha=0.5, restartable=False
        ),
    ),
    ("note\tmig:mem=1G\tmore", Hints(mem=GiB)),
    ("mig:deadline=2h", Hints(deadline_in=7200.0)),
    ("mig:deadline=1:30:00", Hints(deadline_in=5400.0)),
    ("mig:deadline=90", Hints(deadline_in=90.0)),
    ("mig:deadline=2099-01-31T18:00", Hints(deadline_at=4073565600.0)),
    ("mig:deadline=2099-01-31T18:00:30Z", Hints(deadline_at=4073565630.0)),
    ("mig:deadline=2196-02-29T00:00", Hints(deadline_at=7136985600.0)),
    ("mig:key=x,deadline=15m,time=5m", Hints(key="x", deadline_in=900.0, time=300.0)),
    # a word after the hint that is no unit of a bare number, or after a unit
    ("mig:time=2h hours", Hints(time=7200.0)),
    ("mig:time=2 hourly runs", Hints(time=2.0)),
    ("mig:mem=2G GB", Hints(mem=2 * GiB)),
    ("mig:mem=2097152 bytes", Hints(mem=2 * MiB)),
    ("mig:iters=2 h", Hints(iters=2)),
    ("mig:time=2,key=x hours", Hints(time=2.0, key="x")),
    ("mig:time=90 k-means", Hints(time=90.0)),
    ("mig:time=2 migplan=v1.a.b", Hints(time=2.0)),
    ("mig:key=x [slurm-mig: hours]", Hints(key="x")),  # the planner's note follows
    ("m\u0131g:mem=1G M\u0130G:x", Hints()),  # an ASCII prefix only, in any case
    # a job of several slices (issue 36): one instance per task
    ("mig:tasks=1", Hints()),
    ("mig:tasks=4", Hints(tasks=4)),
    ("mig:tasks=8", Hints(tasks=8)),
    ("mig:tasks=04,key=w", Hints(tasks=4, key="w")),
    ("mig:mem=4G,tasks=2,time=1h", Hints(mem=4 * GiB, tasks=2, time=3600.0)),
]


BAD: list[tuple[str, str, str]] = [
    ("mig:", "'mig:'", "write mig:key=value"),
    ("mig:mem=12X", "'mem=12X'", "unknown unit 'X'; " + SIZE_FIX),
    ("mig:mem=12GB2", "'mem=12GB2'", "'12GB2' is not a size; " + SIZE_FIX),
    ("mig:mem=12Gi", "'mem=12Gi'", "unknown unit 'Gi'; " + SIZE_FIX),
    ("mig:mem=-1G", "'mem=-1G'", SIZE_FIX),
    ("mig:mem=.5G", "'mem=.5G'", SIZE_FIX),
    ("mig:mem=1e5", "'mem=1e5'", SIZE_FIX),
    ("mig:mem=1.5", "'mem=1.5'", "whole number of bytes; " + SIZE_FIX),
    ("mig:mem=0G", "'mem=0G'", "not above 0; " + SIZE_FIX),
    ("mig:mem=1025T", "'mem=1025T'", "more than 1 PiB; " + SIZE_FIX),
    ("mig:mem=" + "9" * 200, "'mem=" + "9" * 200 + "'", "more than 1 PiB; " + SIZE_FIX),
    ("mig:mem", "'mem'", "no '='; write mem=value"),
    ("mig:mem=", "'mem='", "no value; write mem=value"),
    # a size without a unit below 1 MiB is surely not bytes (issue 21)
    ("mig:mem=12", "'mem=12'", "'12' is 12 bytes; write 12G or 12MiB"),
    ("mig:mem=1048575", "'mem=1048575'", "is 1048575 bytes; write 1048575G or"),
    ("mig:mem=007", "'mem=007'", "'007' is 7 bytes; write 007G or 007MiB"),
    # a bare number, then a unit word: 2 s planned, not 2 h (issue 21)
    (
        "mig:time=2 hours",
        "'time=2'",
        "followed by 'hours': the unit must be part of the value; write time=2h",
    ),
    ("mig:time=2 Hours", "'time=2'", "followed by 'Hours'"),
    ("run mig:time=1.5 HRS. please", "'time=1.5'", "followed by 'HRS.'"),
    ("mig:time=90 s", "'time=90'", "write time=90s"),
    ("mig:time=90 seconds", "'time=90'", "write time=90s"),
    ("mig:time=30 min", "'time=30'", "write time=30m"),
    ("mig:time=30 minutes", "'time=30'", "write time=30m"),
    ("mig:time=2 h", "'time=2'", "write time=2h"),
    ("mig:time=3 days", "'time=3'", "write time=3d"),
    ("mig:key=x,time=1 day,", "'time=1'", "write time=1d"),
    ("mig:deadline=2 hours", "'deadline=2'", "write deadline=2h"),
    ("mig:key=x,deadline=45 mins", "'deadline=45'", "write deadline=45m"),
    (
        "mig:mem=12 GB",
        "'mem=12'",
        "followed by 'GB': the unit must be part of the value; write mem=12GB",
    ),
    ("mig:mem=1.5 t", "'mem=1.5'", "write mem=1.5t"),
    ("mig:mem=2000000 MiB", "'mem=2000000'", "write mem=2000000MiB"),
    ("mig:time=2 migplan=v1.a.b hours", "'time=2'", "write time=2h"),  # tokens skipped
    # the prefix in another case was ignored (issue 21)
    ("MIG:mem=12G", "'MIG:mem=12G'", "write the prefix in lower case: mig:mem=12G"),
    ("run Mig:time=2h", "'Mig:time=2h'", "write the prefix in lower case: mig:time=2h"),
    ("mIG:", "'mIG:'", "write the prefix in lower case: mig:"),
    ("mig:mem=1G MIG:time=1h", "'MIG:time=1h'", "write the prefix in lower case: mig:time=1h"),
    # a space inside the word
    ("mig: mem=12G", "'mig: mem=12G'", "a space inside the mig: word; write mig:mem=12G"),
    ("mig:mem = 12G", "'mem = 12G'", "a space inside the mig: word; write mig:mem=12G"),
    ("mig:mem =12G x", "'mem =12G'", "a space inside the mig: word; write mig:mem=12G"),
    ("mig:mem= 12G", "'mem= 12G'", "a space inside the mig: word; write mig:mem=12G"),
    (
        "mig:key=a, mem=1G",
        "'mig:key=a, mem=1G'",
        "a space inside the mig: word; write mig:key=a,mem=1G",
    ),
    ("mig:mem =", "'mem'", "no '='; write mem=value"),
    ("mig:=5", "'=5'", "unknown key ''; " + KEYS_FIX),
    ("mig:foo=1", "'foo=1'", "unknown key 'foo'; " + KEYS_FIX),
    ("mig:Mem=1G", "'Mem=1G'", "unknown key 'Mem'; " + KEYS_FIX),
    ("mig:mem=1G,mem=2G", "'mem=2G'", "'mem' is given twice; give each key once"),
    ("mig:mem=1G,", "'mig:mem=1G,'", "separate settings with single commas"),
    ("mig:,mem=1G", "'mig:,mem=1G'", "separate settings with single commas"),
    ("mig:mem=1G,,time=1h", "'mig:mem=1G,,time=1h'", "separate settings with single commas"),
    ("a mig:mem=1G b mig:time=1h", "'mig:time=1h'", "put all settings in one mig: word"),
    ("mig:key=" + "k" * 65, "'key=" + "k" * 65 + "'", "use 1 to 64 letters, digits"),
    ("mig:key=a/b", "'key=a/b'", "use 1 to 64 letters, digits, '_', '.' or '-'"),
    ("mig:key=a=b", "'key=a=b'", "use 1 to 64 letters"),
    ("mig:key=50%d%s", "'key=50%d%s'", "use 1 to 64 letters"),
    ("mig:key=\u00fcber", "'key=\u00fcber'", "use 1 to 64 letters"),
    ("mig:iters=0", "'iters=0'", "write e.g. iters=1000"),
    ("mig:iters=1.5", "'iters=1.5'", "write e.g. iters=1000"),
    ("mig:iters=-3", "'iters=-3'", "write e.g. iters=1000"),
    ("mig:iters=1e3", "'iters=1e3'", "write e.g. iters=1000"),
    ("mig:time=0", "'time=0'", "not above 0; " + TIME_FIX),
    ("mig:time=0:00", "'time=0:00'", "not above 0; " + TIME_FIX),
    ("mig:time=367d", "'time=367d'", "more than 366 days; " + TIME_FIX),
    ("mig:time=8784:00:01", "'time=8784:00:01'", "more than 366 days; " + TIME_FIX),
    ("mig:time=" + "9" * 200 + "h", "'time=" + "9" * 200 + "h'", "more than 366 days; " + TIME_FIX),
    # hours of any length are read as a float (an int overflowed converting to float)
    ("mig:time=" + "9" * 200 + ":00:00", "'time=" + "9" * 200 + ":00:00'", "more than 366 days"),
    ("mig:time=1:60:00", "'time=1:60:00'", "below 60; " + TIME_FIX),
    ("mig:time=0:61", "'time=0:61'", "below 60; " + TIME_FIX),
    ("mig:time=90x", "'time=90x'", "not a duration; " + TIME_FIX),
    ("mig:time=90S", "'time=90S'", "not a duration; " + TIME_FIX),
    ("mig:time=1h30m", "'time=1h30m'", "not a duration; " + TIME_FIX),
    ("mig:time=-5", "'time=-5'", "not a duration; " + TIME_FIX),
    ("mig:time=1:2:3:4", "'time=1:2:3:4'", "not a duration; " + TIME_FIX),
    ("mig:time=100:00", "'time=100:00'", "not a duration; " + TIME_FIX),
    ("mig:pcie=-1", "'pcie=-1'", "write a number >= 0, e.g. pcie=12.5"),
    ("mig:pcie=fast", "'pcie=fast'", "write a number >= 0"),
    ("mig:pcie=inf", "'pcie=inf'", "write a number >= 0"),
    ("mig:pcie=1e3", "'pcie=1e3'", "write a number >= 0"),
    ("mig:pcie=" + "9" * 200, "'pcie=" + "9" * 200 + "'", "more than 1000 GB/s"),
    ("mig:pcie=1000.5", "'pcie=1000.5'", "'1000.5' is more than 1000 GB/s; write e.g. pcie=12.5"),
    ("mig:alpha=" + "9" * 200, "'alpha=" + "9" * 200 + "'", "more than 100; write e.g. alpha=0.9"),
    ("mig:alpha=100.01", "'alpha=100.01'", "'100.01' is more than 100; write e.g. alpha=0.9"),
    ("mig:iters=1000000001", "'iters=1000000001'", "more than 1000000000 iterations"),
    # an int of more than 4300 digits raised ValueError (not a HintError) in the hooks
    ("mig:iters=" + "9" * 200, "'iters=" + "9" * 200 + "'", "more than 1000000000 iterations"),
    ("mig:key=a,mem=" + "1" * 260, "'mig:...'", "274 characters, more than 256; shorten"),
    ("x mig:iters=" + "9" * 400, "'mig:...'", "410 characters, more than 256; shorten"),
    ("mig:alpha=0", "'alpha=0'", "write e.g. alpha=0.9"),
    ("mig:alpha=0.0", "'alpha=0.0'", "write e.g. alpha=0.9"),
    ("mig:alpha=nan", "'alpha=nan'", "write e.g. alpha=0.9"),
    ("mig:restartable=Yes", "'restartable=Yes'", "write restartable=yes or restartable=no"),
    ("mig:restartable=1", "'restartable=1'", "write restartable=yes or restartable=no"),
    (
        "mig:deadline=2001-01-01T00:00",
        "'deadline=2001-01-01T00:00'",
        "in the past (UTC); " + DEADLINE_FIX,
    ),
    (
        "mig:deadline=2027-02-30T00:00",
        "'deadline=2027-02-30T00:00'",
        "not a date of the calendar; " + DEADLINE_FIX,
    ),
    ("mig:deadline=2099-01-31T24:00", "'deadline=2099-01-31T24:00'", "hours must be below 24"),
    (
        "mig:deadline=2300-01-01T00:00",
        "'deadline=2300-01-01T00:00'",
        "the year must be 2000 to 2199",
    ),
    ("mig:deadline=2099-01-31", "'deadline=2099-01-31'", "not a deadline; " + DEADLINE_FIX),
    ("mig:deadline=soon", "'deadline=soon'", "not a deadline; " + DEADLINE_FIX),
    ("mig:deadline=-5", "'deadline=-5'", "not a deadline; " + DEADLINE_FIX),
    ("mig:deadline=0", "'deadline=0'", "not above 0; " + TIME_FIX),
    ("mig:deadline=367d", "'deadline=367d'", "more than 366 days; " + TIME_FIX),
    ("mig:deadline=2h,deadline=3h", "'deadline=3h'", "'deadline' is given twice"),
    ("mig:tasks=0", "'tasks=0'", "'0' is not a whole number of tasks; " + TASKS_FIX),
    ("mig:tasks=9", "'tasks=9'", "'9' is more than 8 tasks (one MIG slice each); " + TASKS_FIX),
    ("mig:tasks=" + "9" * 200, "'tasks=" + "9" * 200 + "'", "more than 8 tasks"),
    ("mig:tasks=2.0", "'tasks=2.0'", "not a whole number of tasks; " + TASKS_FIX),
    ("mig:tasks=-2", "'tasks=-2'", TASKS_FIX),
    ("mig:tasks=four", "'tasks=four'", TASKS_FIX),
    ("mig:tasks=1e1", "'tasks=1e1'", TASKS_FIX),
    ("mig:tasks=", "'tasks='", "no value; write tasks=value"),
    ("mig:tasks=2,tasks=3", "'tasks=3'", "'tasks' is given twice"),
]


def fuzz_comments(n: int, seed: int = 7) -> list[str]:
    """Near-miss comments built from the grammar's pieces, to compare Python and Lua
    beyond the hand-written cases."""
    rng = random.Random(seed)
    keys = ["key", "mem", "iters", "time", "pcie", "alpha", "restartable", "deadline", "tasks",
            "Mem", "x", ""]  # fmt: skip
    values = [
        "1", "0", "12G", "1048576", "1048575", "2", "1.5", "12 ", "12g", "1.5T", "7KiB", "3kb", "1.", ".5", "1e3", "-1", "yes", "no",
        "Yes", "1:30:00", "61:00", "5:5", "1:5:7", "2h", "2H", "0.0", "a-b.c", "a b", "",
        "9" * 30, "1:00:60", "10m", "0:00:01", "12TiB", "12tIb", "x=y", "2099-01-31T18:00",
        "2001-01-01T00:00", "2099-02-29T00:00", "2099-1-1T00:00", "2099-01-31T18:00:00Z",
    ]  # fmt: skip
    good = ["key=a.b", "mem=12G", "mem=3kb", "iters=5", "time=1:30:00", "time=2h", "pcie=0",
            "alpha=0.5", "restartable=no", "deadline=2h", "deadline=2099-12-31T23:59",
            "tasks=3"]  # fmt: skip
    out = []
    for _ in range(n):
        items = []
        for _ in range(rng.randint(0, 3)):
            r = rng.random()
            if r < 0.05:
                items.append("")
            elif r < 0.1:
                items.append(rng.choice(keys))
            elif r < 0.6:
                items.append(rng.choice(good))
            else:
                items.append(f"{rng.choice(keys)}={rng.choice(values)}")
        word = rng.choice(["mig:"] * 8 + ["MIG:", "Mig:"]) + ",".join(items)
        around = rng.choice(["", "text ", "a\t", "migplan=tok "])
        tail = ["", " mig:mem=1G", " tail", " hours", " GB,", " = 2", " 5m", " migplan=t min"]
        out.append(f"{around}{word}" + rng.choice(tail))
    return out
