import os
import socket
import urllib.request

from fleetmedic.controller import sdnotify
from fleetmedic.controller.metrics import Metrics


def test_notify_sends_datagram(tmp_path, monkeypatch):
    path = str(tmp_path / "notify.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert sdnotify.notify("READY=1")
    assert server.recv(100) == b"READY=1"
    server.close()


def test_notify_without_systemd_is_noop(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.notify("WATCHDOG=1") is False


def test_watchdog_interval(monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert sdnotify.watchdog_interval() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert sdnotify.watchdog_interval() is None


def test_metrics_served_over_http():
    m = Metrics()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m.serve("127.0.0.1", port)
    m.set_states({"reboot": 2, "healthy": 5}, slow_network=1)
    m.remediations.labels(step="reboot", result="pass").inc()
    m.duration.labels(step="reboot").observe(12.5)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'fleetmedic_nodes{state="reboot"} 2.0' in body
    assert 'fleetmedic_nodes{state="manual"} 0.0' in body
    assert "fleetmedic_slow_network_nodes 1.0" in body
    assert 'fleetmedic_remediations_total{result="pass",step="reboot"} 1.0' in body
    assert 'fleetmedic_remediation_duration_seconds_bucket{le="20.0",step="reboot"} 1.0' in body
    assert 'fleetmedic_build_info{version="' in body


def test_a_start_that_waits_for_the_api_server_asks_systemd_for_more_time(tmp_path, monkeypatch):
    """Type=notify with TimeoutStartSec: each wait for an unreachable API server extends
    the start (EXTEND_TIMEOUT_USEC), so systemd does not kill a start that only waits."""
    import logging
    import threading

    from fleetmedic import clikit
    from fleetmedic.controller import daemon
    from fleetmedic.errors import TemporaryError

    path = str(tmp_path / "notify.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    tries = []

    def probe():
        tries.append(1)
        if len(tries) < 3:
            raise TemporaryError("API server 127.0.0.1:1 refused the connection")

    clikit.wait_reachable(
        probe,
        None,
        log=logging.getLogger("t"),
        stop=threading.Event(),
        cap=0.05,
        on_retry=daemon._still_starting,
    )
    assert len(tries) == 3
    first = server.recv(200).decode()
    assert first.startswith("EXTEND_TIMEOUT_USEC=") and "STATUS=waiting for the API server" in first
    assert int(first.split("\n")[0].split("=")[1]) >= 60_000_000
    server.close()
