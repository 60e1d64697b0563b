"""Issue 18, hole 3: the notify port must not let anyone multiply the controller's load.
Each datagram is checked (`notify.Guard`) against the site key, its age, replays and a
token bucket per source and for all; what is refused never wakes the daemon and is
logged as one summary line a minute. Time is faked throughout."""

from __future__ import annotations

import logging
import socket
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_mig.slurm import notify
from slurm_mig.slurm.notify import Guard, Listener, TokenBucket, sign

KEY = b"s" * 32
WALL = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = WALL

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def guard(clock: Clock, key: bytes = KEY) -> Guard:
    return Guard(key, monotonic=lambda: clock.mono, wall=lambda: clock.wall)


def test_a_token_bucket_gives_its_burst_then_its_rate():
    bucket = TokenBucket(rate=2.0, burst=5.0, now=0.0)
    assert sum(bucket.take(0.0) for _ in range(100)) == 5
    assert sum(bucket.take(1.0) for _ in range(100)) == 2  # one second: two more
    assert sum(bucket.take(100.0) for _ in range(100)) == 5  # never more than the burst
    assert not bucket.take(99.0)  # a clock that steps back gives nothing


def test_a_genuine_datagram_is_accepted_once():
    clock = Clock()
    g = guard(clock)
    data = sign(KEY, "ended", "42", clock.wall)
    assert g.check(data, "10.0.0.1") is None
    assert g.check(data, "10.0.0.1") == "replayed"
    assert g.check(data, "10.0.0.9") == "replayed"  # from elsewhere too
    clock.advance(30)
    assert g.check(data, "10.0.0.1") == "replayed"
    assert g.check(sign(KEY, "ended", "42", clock.wall), "10.0.0.1") is None  # a new one
    assert g.accepted == 2


def test_forged_altered_and_other_keys_datagrams_are_refused():
    clock = Clock()
    g = guard(clock)
    good = sign(KEY, "started", "42", clock.wall)
    assert g.check(sign(b"x" * 32, "started", "42", clock.wall), "h") == "forged"
    assert g.check(good.replace(b" 42 ", b" 43 "), "h") == "forged"
    assert g.check(good.replace(b"started", b"ended  ")[:-1], "h") == "malformed"
    stamp = good.split(b" ")[3]
    later = str(int(stamp) + 1).encode()
    assert g.check(good.replace(stamp, later), "h") == "forged"  # a replay made "new"
    assert g.check(b"slurm-mig ended 42", "h") == "malformed"  # the unsigned form
    assert g.check(good, "h") is None  # the genuine one still goes through
    assert g.refused["forged"] == 3 and g.accepted == 1


def test_stale_and_future_datagrams_are_refused():
    clock = Clock()
    g = guard(clock)
    f = notify.FRESH_S
    assert g.check(sign(KEY, "ended", "1", clock.wall - f - 1), "h") == "stale"
    assert g.check(sign(KEY, "ended", "2", clock.wall + f + 1), "h") == "stale"
    assert g.check(sign(KEY, "ended", "3", clock.wall - f + 1), "h") is None
    assert g.check(sign(KEY, "ended", "4", clock.wall + f - 1), "h") is None


def test_a_replay_stays_refused_after_it_leaves_the_memory():
    clock = Clock()
    g = guard(clock)
    data = sign(KEY, "ended", "42", clock.wall)
    assert g.check(data, "h") is None
    clock.advance(2 * notify.FRESH_S + 1)  # forgotten, but by now too old to count
    assert g.check(data, "h") == "stale"
    assert len(g.seen) == 0


def test_one_source_floods_alone_within_its_bucket():
    clock = Clock()
    g = guard(clock)
    forged = sign(b"x" * 32, "ended", "42", clock.wall)
    got = [g.check(forged, "10.0.0.66") for _ in range(10_000)]
    assert got.count("forged") == notify.SOURCE_BURST  # the rest never reach the HMAC
    assert got.count("limited") == 10_000 - notify.SOURCE_BURST
    assert g.check(sign(KEY, "ended", "7", clock.wall), "10.0.0.2") is None  # another node
    clock.advance(1.0)
    got = [g.check(forged, "10.0.0.66") for _ in range(1000)]
    assert got.count("forged") == notify.SOURCE_RATE


def test_all_sources_together_are_bounded_too():
    clock = Clock()
    g = guard(clock)
    forged = sign(b"x" * 32, "ended", "42", clock.wall)
    got = [g.check(forged, f"10.1.{i // 250}.{i % 250}") for i in range(5000)]
    assert got.count("busy") == 5000 - notify.TOTAL_BURST
    assert len(g.sources) <= notify.SOURCES  # the table of sources stays bounded
    clock.advance(1.0)
    got = [g.check(forged, f"10.2.{i // 250}.{i % 250}") for i in range(5000)]
    assert got.count("busy") == 5000 - notify.TOTAL_RATE


def test_refusals_are_one_summary_line_a_minute():
    clock = Clock()
    g = guard(clock)
    forged = sign(b"x" * 32, "ended", "42", clock.wall)
    for _ in range(50):
        g.check(forged, "10.0.0.66")
    g.check(sign(KEY, "ended", "42", clock.wall - 3600), "10.0.0.5")
    assert g.summary() is None  # not yet a minute
    clock.advance(notify.SUMMARY_S)
    line = g.summary()
    assert line is not None and "\n" not in line
    assert "refused 51 datagrams" in line and "50 forged" in line and "1 stale" in line
    assert "10.0.0.66 (50)" in line
    assert g.summary() is None  # counted afresh
    clock.advance(notify.SUMMARY_S)
    assert g.summary() is None  # nothing refused meanwhile: nothing said


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_no_datagram_raises_or_wakes_without_the_key(data):
    clock = Clock()
    assert (
        Guard(KEY, monotonic=lambda: clock.mono, wall=lambda: clock.wall).check(data, "h")
        in notify.REASONS
    )


def test_a_flood_of_forged_and_replayed_datagrams_wakes_nothing_a_genuine_one_does(caplog):
    clock = Clock()
    woke = threading.Semaphore(0)
    pauses: list[float] = []
    refused: list[str] = []
    listener = Listener(
        ("127.0.0.1", 0),
        woke.release,
        KEY,
        refused=refused.append,
        monotonic=lambda: clock.mono,
        wall=lambda: clock.wall,
        sleep=pauses.append,
    ).start()
    caplog.set_level(logging.WARNING, logger="slurm_mig.planner")
    try:
        genuine = sign(KEY, "ended", "1", clock.wall)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(genuine, listener.address)
            assert woke.acquire(timeout=2.0)
            forged = sign(b"x" * 32, "ended", "2", clock.wall)
            for i in range(120):  # within the socket's buffer: none dropped by the kernel
                s.sendto(genuine if i % 2 else forged, listener.address)
            _until(lambda: len(refused) == 120)
            # a genuine one from another address (127.0.0.2: another node) still wakes
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
                other.bind(("127.0.0.2", 0))
                other.sendto(sign(KEY, "started", "3", clock.wall), listener.address)
            assert woke.acquire(timeout=2.0)
            assert not woke.acquire(timeout=0.3)  # the flood woke nothing
            assert listener.received == 2
            assert not [r for r in caplog.records if "notify" in r.getMessage()]
            clock.advance(notify.SUMMARY_S)
            s.sendto(forged, listener.address)
            _until(lambda: any("notify: refused" in r.getMessage() for r in caplog.records))
    finally:
        listener.close()
    lines = [r.getMessage() for r in caplog.records if "notify: refused" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "forged" in lines[0] and "replayed" in lines[0] and "limited" in lines[0]
    assert set(refused) <= set(notify.REASONS) and len(refused) == 121


def _until(ok, timeout: float = 5.0) -> None:
    """Wait for the listener's thread to have done something (not about time)."""
    done = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if ok():
            return
        done.wait(0.02)
    raise AssertionError("the listener did not get there")
