"""The hooks' UDP word to the planner daemon (``[planner] notify``): a Prolog that started
its job says ``started``, every Epilog ``ended``, each datagram signed with the site key;
the listener wakes the daemon once per genuine datagram; a bad address or a missing key
is a warning in the hook's log, never a failed job, and without the key nothing is sent."""

from __future__ import annotations

import socket
import threading

import pytest
from hooksite import make_site, run

from slurm_mig.config import load_config
from slurm_mig.node.hookmain import notify_planner
from slurm_mig.node.hooks import epilog_main, prolog_main
from slurm_mig.slurm.notify import Guard, Listener, send

KEY = b"k" * 32


@pytest.fixture
def receiver():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(2.0)
    yield sock
    sock.close()


def with_notify(site, value: str) -> None:
    text = site.config.read_text().replace("[planner]\n", f'[planner]\nnotify = "{value}"\n')
    site.config.write_text(text)


def fields(data: bytes) -> list[bytes]:
    """magic, event, job, time in ms, mac."""
    return data.split(b" ")


def test_send_is_one_signed_bounded_datagram(receiver):
    assert send(receiver.getsockname(), "42", "ended", KEY, now=lambda: 1000.5) is None
    data = receiver.recv(256)
    assert fields(data)[:4] == [b"slurm-mig-n1", b"ended", b"42", b"1000500"]
    assert Guard(KEY, wall=lambda: 1000.5).check(data, "127.0.0.1") is None
    assert send(receiver.getsockname(), "7" * 500, "started-and-more", KEY) is None
    data = receiver.recv(256)
    assert len(data) < 128 and fields(data)[1:3] == [b"started-", b"7" * 32]


def test_send_to_an_unusable_address_returns_the_reason():
    failed = send(("256.0.0.1", 9), "42", "ended", KEY)
    assert failed is not None and failed.startswith("cannot notify the planner at 256.0.0.1:9")


def test_the_listener_wakes_once_per_genuine_datagram():
    woke = threading.Semaphore(0)
    refused: list[str] = []
    listener = Listener(("127.0.0.1", 0), woke.release, KEY, refused=refused.append).start()
    try:
        for job in ("1", "2", "3"):
            assert send(listener.address, job, "ended", KEY) is None
        assert all(woke.acquire(timeout=2.0) for _ in range(3))
        assert send(listener.address, "4", "ended", b"x" * 32) is None  # another key
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"slurm-mig ended 5", listener.address)  # the old unsigned form
        assert not woke.acquire(timeout=0.5)
        assert listener.received == 3
        assert sorted(refused) == ["forged", "malformed"]
    finally:
        listener.close()


def test_prolog_says_started_and_epilog_ended(tmp_path, capsys, receiver):
    site = make_site(tmp_path)
    host, port = receiver.getsockname()
    with_notify(site, f"{host}:{port}")
    env = site.env("42", site.comment("42"))
    guard = Guard(site.key)
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 0, err
    data = receiver.recv(256)
    assert fields(data)[1:3] == [b"started", b"42"] and guard.check(data, host) is None
    rc, _, err = run(epilog_main, env, capsys)
    assert rc == 0, err
    data = receiver.recv(256)
    assert fields(data)[1:3] == [b"ended", b"42"] and guard.check(data, host) is None


def test_a_refused_prolog_says_nothing(tmp_path, capsys, receiver):
    site = make_site(tmp_path)
    host, port = receiver.getsockname()
    with_notify(site, f"{host}:{port}")
    rc, _, _ = run(prolog_main, site.env("42", "mig:key=x migplan=2.forged"), capsys)
    assert rc == 0 and site.state.refusal("42") is not None  # the TaskProlog fails it
    receiver.settimeout(0.3)
    with pytest.raises(TimeoutError):
        receiver.recv(256)


def test_a_hook_without_the_key_sends_nothing_and_says_why(tmp_path, receiver):
    from slurm_mig.node.hooks import Outcome

    site = make_site(tmp_path)
    host, port = receiver.getsockname()
    with_notify(site, f"{host}:{port}")
    (tmp_path / "key").chmod(0o644)  # not root's alone: refused as a key
    out = Outcome()
    notify_planner(load_config(site.config), "42", "ended", out)
    assert any("the planner is not notified" in w and "key" in w for _, w in out.log), out.log
    receiver.settimeout(0.3)
    with pytest.raises(TimeoutError):
        receiver.recv(256)


def test_an_unreachable_planner_is_a_warning_not_a_failure(tmp_path, capsys):
    site = make_site(tmp_path)
    with_notify(site, "256.0.0.1:9")
    env = site.env("42", site.comment("42"))
    assert run(prolog_main, env, capsys)[0] == 0
    rc, _, err = run(epilog_main, env, capsys)
    assert rc == 0
    assert any("cannot notify the planner at 256.0.0.1:9" in line for line in err), err
