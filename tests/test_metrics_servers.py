"""The agent's and the controller's /metrics servers under slow and numerous clients: a
bounded number of scrapes at once, each cut off when its client goes silent (and, for the
agent, when the scrape takes too long), so that scrapers can never take the descriptors a
service needs for its real work. Loopback only; the timeouts are shortened for the test."""

import platform
import socket
import threading
import time
import urllib.request

from eventlet.green import socket as green_socket
from os_ken.lib import hub
from prometheus_client import CollectorRegistry, Gauge

from otcp.agent import metrics as agent_metrics
from otcp.agent.metrics import AgentMetrics
from otcp.service import metrics as controller_metrics
from otcp.wire import limits

SLOW_CLIENTS = 40


def closed_within(sock, seconds):
    """Whether the server closes sock (EOF or reset) within seconds."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_the_agent_serves_a_bounded_number_of_scrapes_and_cuts_off_slow_clients(monkeypatch):
    monkeypatch.setattr(agent_metrics._ScrapeHandler, "timeout", 1.0)
    monkeypatch.setattr(agent_metrics, "SCRAPE_DEADLINE_S", 2.0)
    metrics = AgentMetrics()
    metrics.applied_generation.set(7)
    server = metrics.serve("127.0.0.1", 0, max_scrapes=4)
    port = server.server_address[1]
    threads = threading.active_count()
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(SLOW_CLIENTS)]
    for sock in slow:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
    open_ones = list(slow)
    deadline = time.monotonic() + 30
    while open_ones and time.monotonic() < deadline:
        # Each scrape in progress holds a thread and its deadline's timer; the rest are closed unanswered,
        # and the silent ones after the read timeout.
        assert threading.active_count() <= threads + 2 * 4
        open_ones = [sock for sock in open_ones if not closed_within(sock, 0.01)]
    assert open_ones == [] and server.refused > 0
    # A client that trickles a header line every half second is cut at the scrape's deadline.
    trickler = socket.create_connection(("127.0.0.1", port))
    trickler.sendall(b"GET /metrics HTTP/1.1\r\n")
    started = time.monotonic()
    with_deadline = False
    while time.monotonic() - started < 6:
        try:
            trickler.sendall(b"X-Slow: 1\r\n")
        except OSError:
            with_deadline = True
            break
        if closed_within(trickler, 0.5):
            with_deadline = True
            break
    assert with_deadline and time.monotonic() - started < 4
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "otcp_agent_applied_generation 7.0" in page
    assert f'otcp_build_info{{protocol="{limits.VERSION}",python="{platform.python_version()}",version="' in page
    for sock in slow + [trickler]:
        sock.close()
    server.shutdown()
    server.server_close()


def test_the_controller_serves_a_bounded_number_of_scrapes_and_cuts_off_silent_clients(monkeypatch):
    monkeypatch.setattr(controller_metrics, "SCRAPE_TIMEOUT_S", 1.0)
    registry = CollectorRegistry()
    Gauge("otcp_controller_generation", "test", registry=registry).set(3)
    listener = hub.listen(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    thread = controller_metrics.serve_on(listener, registry)
    try:
        slow = [green_socket.create_connection(("127.0.0.1", port)) for _ in range(SLOW_CLIENTS)]
        for sock in slow:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        scraper = green_socket.create_connection(("127.0.0.1", port))
        scraper.sendall(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        answer = b""
        scraper.settimeout(30)
        while chunk := scraper.recv(65536):
            answer += chunk
        assert b"otcp_controller_generation 3.0" in answer
        assert all(closed_within(sock, 5.0) for sock in slow)
        for sock in slow + [scraper]:
            sock.close()
    finally:
        hub.kill(thread)
        listener.close()
