"""The hooks' UDP word to the planner daemon (``[planner] notify``): a Prolog that started
its job says ``started``, every Epilog ``ended``; the listener wakes the daemon once per
datagram; a bad address is a warning in the hook's log, never a failed job."""

from __future__ import annotations

import socket
import threading

import pytest
from test_hooks import make_site, run

from slurm_mig.slurm.hooks import epilog_main, prolog_main
from slurm_mig.slurm.notify import Listener, send


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


def test_send_is_one_bounded_datagram(receiver):
    assert send(receiver.getsockname(), "42") is None
    assert receiver.recv(256) == b"slurm-mig ended 42"
    assert send(receiver.getsockname(), "7" * 500, "started-and-more") is None
    data = receiver.recv(256)
    assert data == b"slurm-mig started- " + b"7" * 32


def test_send_to_an_unusable_address_returns_the_reason():
    failed = send(("256.0.0.1", 9), "42")
    assert failed is not None and failed.startswith("cannot notify the planner at 256.0.0.1:9")


def test_the_listener_wakes_once_per_datagram():
    woke = threading.Semaphore(0)
    listener = Listener(("127.0.0.1", 0), woke.release).start()
    try:
        for job in ("1", "2", "3"):
            assert send(listener.address, job) is None
        assert all(woke.acquire(timeout=2.0) for _ in range(3))
        assert listener.received == 3
    finally:
        listener.close()


def test_prolog_says_started_and_epilog_ended(tmp_path, capsys, receiver):
    site = make_site(tmp_path)
    host, port = receiver.getsockname()
    with_notify(site, f"{host}:{port}")
    env = site.env("42", site.comment("42"))
    rc, _, err = run(prolog_main, env, capsys)
    assert rc == 0, err
    assert receiver.recv(256) == b"slurm-mig started 42"
    rc, _, err = run(epilog_main, env, capsys)
    assert rc == 0, err
    assert receiver.recv(256) == b"slurm-mig ended 42"


def test_a_refused_prolog_says_nothing(tmp_path, capsys, receiver):
    site = make_site(tmp_path)
    host, port = receiver.getsockname()
    with_notify(site, f"{host}:{port}")
    rc, _, _ = run(prolog_main, site.env("42", "mig:key=x migplan=2.forged"), capsys)
    assert rc == 0 and site.state.refusal("42") is not None  # the TaskProlog fails it
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
