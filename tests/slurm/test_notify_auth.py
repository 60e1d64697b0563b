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


def test_forgeries_spend_no_bucket_and_genuine_ones_pass_the_source_bucket():
    clock = Clock()
    g = guard(clock)
    forged = sign(b"x" * 32, "ended", "42", clock.wall)
    got = [g.check(forged, "10.0.0.66") for _ in range(10_000)]
    assert got == ["forged"] * 10_000  # each one checked, none spends a token
    assert g.check(sign(KEY, "started", "7", clock.wall), "10.0.0.66") is None  # spoofed or not
    got = [g.check(sign(KEY, "ended", str(i), clock.wall), "10.0.0.2") for i in range(1000)]
    assert got.count(None) == notify.SOURCE_BURST  # genuine ones from one source: bounded
    assert got.count("limited") == 1000 - notify.SOURCE_BURST
    clock.advance(1.0)
    got = [g.check(sign(KEY, "started", str(i), clock.wall), "10.0.0.2") for i in range(1000)]
    assert got.count(None) == notify.SOURCE_RATE


def test_forged_and_replayed_floods_from_many_sources_leave_the_total_untouched():
    clock = Clock()
    g = guard(clock)
    genuine = sign(KEY, "ended", "1", clock.wall)
    assert g.check(genuine, "10.0.0.1") is None
    forged = sign(b"x" * 32, "ended", "42", clock.wall)
    tokens = g.total.tokens
    for i in range(200 * 100):  # 200 addresses, 100 each: past every bucket's burst
        src = f"127.0.0.{i % 200 + 1}"
        assert g.check(forged if i % 2 else genuine, src) == ("forged" if i % 2 else "replayed")
    assert g.total.tokens == tokens and not g.sources.keys() - {"10.0.0.1"}
    assert g.check(sign(KEY, "started", "2", clock.wall), "127.0.0.1") is None


def test_all_sources_together_are_bounded_too():
    clock = Clock()
    g = guard(clock)

    def burst(prefix: str) -> list[str | None]:
        return [
            g.check(
                sign(KEY, "ended", f"{prefix}{i}", clock.wall), f"10.{prefix}.{i // 250}.{i % 250}"
            )
            for i in range(5000)
        ]

    assert burst("1").count("busy") == 5000 - notify.TOTAL_BURST
    assert len(g.sources) <= notify.SOURCES  # the table of sources stays bounded
    clock.advance(1.0)
    assert burst("2").count("busy") == 5000 - notify.TOTAL_RATE


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


def _listener(clock: Clock, wake, refused: list[str]) -> Listener:
    return Listener(
        ("127.0.0.1", 0),
        wake,
        KEY,
        refused=refused.append,
        monotonic=lambda: clock.mono,
        wall=lambda: clock.wall,
    ).start()


def test_a_flood_of_forged_and_replayed_datagrams_wakes_nothing_a_genuine_one_does(caplog):
    clock = Clock()
    woke = threading.Semaphore(0)
    refused: list[str] = []
    listener = _listener(clock, woke.release, refused)
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
            # a genuine one from the flood's own address still wakes (no bucket was spent)
            s.sendto(sign(KEY, "started", "3", clock.wall), listener.address)
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
    assert "forged" in lines[0] and "replayed" in lines[0]
    assert refused.count("forged") == 61 and refused.count("replayed") == 60


def test_forgeries_from_200_loopback_addresses_never_keep_a_genuine_one_out():
    """Issue 34, hole 10: 200 sources x 5 forged datagrams (past the total burst, the
    clock still) used to spend the shared bucket and pause the listener; now each is
    refused as forged, spending nothing, and the genuine ones after them wake it."""
    clock = Clock()
    woke = threading.Semaphore(0)
    refused: list[str] = []
    listener = _listener(clock, woke.release, refused)
    senders = []
    try:
        for x in range(1, 201):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            senders.append(s)
            s.bind((f"127.0.0.{x}", 0))
        sent = 0
        for group in range(0, 200, 20):  # 100 at a time: within the socket's buffer
            for s in senders[group : group + 20]:
                for _ in range(5):
                    s.sendto(sign(b"x" * 32, "ended", f"{sent}", clock.wall), listener.address)
                    sent += 1
            _until(lambda sent=sent: len(refused) == sent)
        assert sent > notify.TOTAL_BURST  # more than the shared bucket ever held
        assert set(refused) == {"forged"} and listener.guard.total.tokens == notify.TOTAL_BURST
        senders[0].sendto(sign(KEY, "ended", "7", clock.wall), listener.address)
        assert woke.acquire(timeout=2.0)
        senders[-1].sendto(sign(KEY, "ended", "8", clock.wall), listener.address)
        assert woke.acquire(timeout=2.0)
        assert listener.received == 2
    finally:
        listener.close()
        for s in senders:
            s.close()


def _until(ok, timeout: float = 5.0) -> None:
    """Wait for the listener's thread to have done something (not about time)."""
    done = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if ok():
            return
        done.wait(0.02)
    raise AssertionError("the listener did not get there")
