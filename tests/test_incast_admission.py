"""The incast client's admission on loopback: with --admit K it asks at most K servers at once,
the next as soon as one has sent its whole block; without it, every server at once."""

import socket
import threading
import time

import pytest

from otcp.experiments.hostprogs import incast_client
from otcp.experiments.hostprogs.incast_server import REQUEST
from otcp.experiments.runner.controller import free_port

BLOCK = 20_000
#: Each server answers this long after a request, so that asked servers overlap.
ANSWER_AFTER_S = 0.05


class Servers:
    """One listening socket per loopback address on one port; every request's arrival time (the
    monotonic clock, as the client's) is kept per address."""

    def __init__(self, count):
        self.port = free_port()
        self.addresses = [f"127.0.0.{2 + i}" for i in range(count)]
        self.requests = {address: [] for address in self.addresses}
        self.listeners = []
        for address in self.addresses:
            listener = socket.create_server((address, self.port))
            self.listeners.append(listener)
            threading.Thread(target=self.accept, args=(listener, address), daemon=True).start()

    def accept(self, listener, address):
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn, address), daemon=True).start()

    def serve(self, conn, address):
        with conn:
            while True:
                request = conn.recv(REQUEST.size, socket.MSG_WAITALL)
                if len(request) < REQUEST.size:
                    return
                self.requests[address].append(time.monotonic())
                time.sleep(ANSWER_AFTER_S)
                conn.sendall(b"x" * REQUEST.unpack(request)[0])

    def close(self):
        for listener in self.listeners:
            listener.close()


@pytest.fixture
def servers():
    started = Servers(6)
    yield started
    started.close()


def completions(start, durations):
    return sorted(start + d for d in durations)


@pytest.mark.parametrize("persistent", [False, True])
def test_admission_asks_each_server_only_once_another_has_finished(servers, persistent):
    sockets = (incast_client.connect_persistent(servers.addresses, servers.port, "reno", 5.0)
               if persistent else None)
    try:
        start, duration, durations = incast_client.run_round(servers.addresses, servers.port, BLOCK, "reno", 10.0,
                                                             sockets, admit=2)
    finally:
        for sock in sockets or []:
            sock.close()
    assert len(durations) == 6 and duration == max(durations)
    done = completions(start, durations)
    asked = [servers.requests[address][0] for address in servers.addresses]
    # The first two at once; server i (i >= 2) only once i - 1 blocks were complete.
    assert max(asked[:2]) < done[0]
    for i in range(2, 6):
        assert done[i - 2] <= asked[i], i
    # The durations come back in --servers order: the admitted late finish late.
    assert durations[5] > durations[0] + ANSWER_AFTER_S


def test_without_admission_every_server_is_asked_at_once(servers):
    start, _, durations = incast_client.run_round(servers.addresses, servers.port, BLOCK, "reno", 10.0)
    asked = [servers.requests[address][0] for address in servers.addresses]
    assert max(asked) < completions(start, durations)[0]


def test_admitting_more_than_there_are_servers_asks_them_all(servers):
    start, _, durations = incast_client.run_round(servers.addresses, servers.port, BLOCK, "reno", 10.0, admit=50)
    assert len(durations) == 6
    assert max(servers.requests[a][0] for a in servers.addresses) < completions(start, durations)[0]


def test_a_round_timeout_names_the_servers_still_waiting_their_turn(servers):
    silent = socket.create_server(("127.0.0.9", servers.port))  # accepts, never answers
    try:
        with pytest.raises(incast_client.RoundError, match=r"127\.0\.0\.9, 127\.0\.0\.2, 127\.0\.0\.3"):
            incast_client.run_round(["127.0.0.9", *servers.addresses[:2]], servers.port, BLOCK, "reno", 0.5, admit=1)
    finally:
        silent.close()


@pytest.mark.parametrize("bad", ["0", "-3"])
def test_admit_below_one_is_refused(bad, capsys):
    with pytest.raises(SystemExit) as exited:
        incast_client.parse_args(["--servers", "127.0.0.2", "--port", "5001", "--block-bytes", "10", "--rounds", "1",
                                  "--admit", bad])
    assert exited.value.code == 2
    assert f"--admit: must be at least 1, got {bad}" in capsys.readouterr().err
