"""``fleetmedic watch loki`` in its default tail mode against a real Loki and the real API
server: a line pushed while the source tails is fenced through the websocket (the poll
interval is minutes, so no poll can be what found it); a Loki SIGKILLed and restarted in
the middle loses no line and counts none twice (the catch-up from the cursor and the
tail meet without a gap or an overlap); a multi-tenant Loki is tailed with the tenant's
header; a Loki on HTTPS is tailed over wss with the same certificate checks as its
queries; a Loki whose limits refuse every tail is followed by polling, with one warning
line."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from fleetmedic.adapters.loki import LokiClient
from fleetmedic.errors import TemporaryError
from tests.harness.ctlenv import FLEETMEDIC, wait_until
from tests.harness.loki import kernel_labels, now_ns, pod_labels

pytestmark = [pytest.mark.kube, pytest.mark.slow]

XID79 = (
    "[ 8812.412345] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)
IB = (
    "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from "
    "peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
)
REBOOT = {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}


@pytest.fixture
def nodes(kube):
    run = uuid.uuid4().hex[:6]
    names = [f"tail-{run}-{i}" for i in range(3)]
    kube.make_nodes(names, labels={"fleetmedic.io/gpu-vendor": "nvidia"})
    yield names
    kube.delete_nodes(names)


def node(kube, name: str) -> dict:
    return kube.request("GET", f"/api/v1/nodes/{name}")


def taints(kube, name: str) -> list[dict]:
    return node(kube, name)["spec"].get("taints") or []


def counted(kube, name: str) -> int:
    raw = (node(kube, name)["metadata"].get("annotations") or {}).get(
        "fleetmedic.io/monitor-counts"
    )
    seen = (json.loads(raw) if raw else {}).get("seen") or {}
    return sum(len(v.get("t", [])) for v in seen.values())


class Source:
    """``fleetmedic watch loki`` as a process, its log in a file."""

    def __init__(self, loki, kube, tmp_path, *args: str, env: dict | None = None) -> None:
        self.cursor = tmp_path / "cursor.json"
        self.log = tmp_path / "source.log"
        self.base = [
            str(FLEETMEDIC),
            "watch",
            "loki",
            "--endpoint",
            loki.url,
            "--cursor-file",
            str(self.cursor),
            "--kubeconfig",
            str(kube.kubeconfig),
            *args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc = subprocess.Popen(
            [*self.base, "--log-level", "info"],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("a"),
            env=self.env,
        )

    def text(self) -> str:
        assert self.proc.poll() is None, f"watch loki exited:\n{self.log.read_text()}"
        return self.log.read_text()

    def sessions(self) -> int:
        return self.text().count("tailing ")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)

    def once(self) -> dict:
        r = subprocess.run(
            [*self.base, "--once"], capture_output=True, text=True, timeout=60, env=self.env
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)


def test_a_line_pushed_while_tailing_is_fenced_through_the_tail(
    loki, kube, nodes, tmp_path, monkeypatch
):
    target = nodes[0]
    src = Source(
        loki,
        kube,
        tmp_path,
        "--kernel-query",
        f'{{node_name="{target}"}}',
        "--pod-query",
        '{namespace="none-of-these"}',
        "--poll-interval",
        "10m",  # no poll can find it: only the tail (or a catch-up, which needs a reconnect)
    )
    try:
        wait_until(lambda: src.sessions() == 1, 60, "the source tailing")
        loki.push(kernel_labels("promtail", node=target), [XID79])
        wait_until(lambda: taints(kube, target) == [REBOOT], 30, f"{target} fenced")
        assert src.sessions() == 1, "one session: the tail delivered it, no reconnect"
        log = src.text()
        assert "refused" not in log and "unreachable" not in log, log
    finally:
        src.stop()
    assert src.once()["lines"] == 0, "the tail's batch moved the saved cursor"
    # as the query client, the tail takes no proxy from the environment (none listens here)
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    LokiClient(loki.url).tail(f'{{node_name="{target}"}}', now_ns()).close()


def test_loki_killed_mid_stream_loses_no_line_and_counts_none_twice(
    loki_factory, kube, nodes, tmp_path
):
    """A threshold finding (NCCL IB completion errors) is counted on the Node for every
    line handled: a line handled twice would count twice. Lines go in before the kill
    (tail), right after Loki is back (the reconnect's catch-up or the new tail, whichever
    is first) and once the source tails again; each is counted exactly once."""
    loki = loki_factory()
    target = nodes[1]
    labels = pod_labels("promtail", node=target, namespace="train", pod="w-0", container="m")
    # no count threshold ships (issue 39): the site's agent config sets this one
    agent_cfg = tmp_path / "agent.yaml"
    agent_cfg.write_text(
        "kernel:\n  thresholds:\n"
        "    nccl.ib-completion: {count: 10, window: 3600, action: reboot}\n"
    )
    src = Source(
        loki,
        kube,
        tmp_path,
        "--kernel-query",
        '{transport="none-of-these"}',
        "--pod-query",
        f'{{node_name="{target}"}}',
        "--poll-interval",
        "10m",
        "--agent-config",
        str(agent_cfg),
    )
    # events 30 s apart (the rule's burst is 10 s), minutes ago, oldest first
    stamps = iter(now_ns() - 300 * 10**9 + i * 30 * 10**9 for i in range(4))
    try:
        wait_until(lambda: src.sessions() == 1, 60, "the source tailing")
        loki.push(labels, [IB], ts=next(stamps))
        wait_until(lambda: counted(kube, target) == 1, 30, "the first IB error counted")

        loki.restart(kill=True)  # SIGKILL: the WAL replays the line already handled
        loki.push(labels, [IB], ts=next(stamps))
        wait_until(lambda: counted(kube, target) == 2, 60, "the line pushed after the restart")
        wait_until(lambda: src.sessions() >= 2, 60, "tailing again")
        loki.push(labels, [IB], ts=next(stamps))
        wait_until(lambda: counted(kube, target) == 3, 30, "the line pushed to the new tail")
        time.sleep(3)  # (a line handled twice would be counted by now)
        assert counted(kube, target) == 3
    finally:
        src.stop()
    assert src.once()["lines"] == 0, "nothing past the saved cursor"
    assert counted(kube, target) == 3, "--once read nothing again"


def test_a_refused_tail_falls_back_to_polling_with_one_warning(loki_factory, kube, nodes, tmp_path):
    """Loki's own limit (max_concurrent_tail_requests: 0) refuses every tail, as a proxy
    without websockets would: the source says so once and polls."""
    loki = loki_factory(limits={"max_concurrent_tail_requests": 0})
    target = nodes[2]
    src = Source(
        loki,
        kube,
        tmp_path,
        "--kernel-query",
        f'{{host="{target}"}}',
        "--pod-query",
        '{namespace="none-of-these"}',
        "--poll-interval",
        "0.3s",
    )
    try:
        wait_until(lambda: "loki tail refused 3 times" in src.text(), 60, "the fallback")
        loki.push(kernel_labels("fluent-bit", node=target), [XID79])
        wait_until(lambda: taints(kube, target) == [REBOOT], 30, f"{target} fenced by polling")
        log = src.text()
        assert log.count("loki tail refused") == 1, log
        assert "max concurrent tail requests" in log, log
        assert src.sessions() == 0 and "unreachable" not in log, log
    finally:
        src.stop()


def test_a_multi_tenant_loki_is_tailed_as_the_tenant(loki_factory, kube, nodes, tmp_path):
    """auth_enabled: every request names its tenant (X-Scope-OrgID); the tail's handshake
    carries --tenant as the queries do, and sees only that tenant's lines."""
    loki = loki_factory(tenant="gpu-team")
    target = nodes[0]
    src = Source(
        loki,
        kube,
        tmp_path,
        "--tenant",
        "gpu-team",
        "--kernel-query",
        f'{{k8s_node_name="{target}"}}',
        "--pod-query",
        '{namespace="none-of-these"}',
        "--poll-interval",
        "10m",
    )
    try:
        wait_until(lambda: src.sessions() == 1, 60, "the source tailing")
        loki.tenant = "someone-else"  # (the harness pushes as this tenant for a moment)
        loki.push(kernel_labels("otel", node=target), [XID79])
        loki.tenant = "gpu-team"
        time.sleep(3)  # another tenant's line: not this source's to see
        assert taints(kube, target) == []
        loki.push(kernel_labels("otel", node=target), [XID79])
        wait_until(lambda: taints(kube, target) == [REBOOT], 30, f"{target} fenced")
        assert src.sessions() == 1, "through the tail"
    finally:
        src.stop()


def test_a_loki_on_https_is_tailed_over_wss_with_its_certificate_checked(
    loki_factory, kube, nodes, tmp_path, monkeypatch
):
    """The tail verifies Loki's certificate as the queries do (the system's CAs, which
    SSL_CERT_FILE names here: a test CA), host name included."""
    loki = loki_factory(tls=True)
    target = nodes[1]
    src = Source(
        loki,
        kube,
        tmp_path,
        "--kernel-query",
        f'{{node_name="{target}"}}',
        "--pod-query",
        '{namespace="none-of-these"}',
        "--poll-interval",
        "10m",
        env={"SSL_CERT_FILE": str(loki.ca_file)},
    )
    try:
        wait_until(lambda: src.sessions() == 1, 60, "the source tailing over wss")
        loki.push(kernel_labels("promtail", node=target), [XID79])
        wait_until(lambda: taints(kube, target) == [REBOOT], 30, f"{target} fenced")
        assert src.sessions() == 1, "through the tail"
    finally:
        src.stop()
    # without the CA, the certificate is refused: one line, exit 3 (unreachable)
    untrusted = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    r = subprocess.run(
        [*src.base, "--once"], capture_output=True, text=True, timeout=60, env=untrusted
    )
    assert r.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with pytest.raises(TemporaryError, match="CERTIFICATE_VERIFY_FAILED"):
        LokiClient(loki.url).tail(f'{{node_name="{target}"}}', now_ns())  # the tail too


def test_a_line_of_another_node_stamped_earlier_but_shipped_later_is_not_lost(
    loki, kube, nodes, tmp_path
):
    """One query covers many nodes' streams, and shippers push in batches (Promtail waits
    up to a second): node B's line can reach Loki after node A's newer one. The cursor
    lets such a line through (within its settle window) instead of dropping it as older
    than what was handled; the line handled already stays handled once."""
    a, b, _ = nodes
    run = a.rsplit("-", 1)[0]
    src = Source(
        loki,
        kube,
        tmp_path,
        "--kernel-query",
        f'{{node_name=~"{run}-.*"}}',
        "--pod-query",
        '{namespace="none-of-these"}',
        "--poll-interval",
        "10m",
    )
    try:
        wait_until(lambda: src.sessions() == 1, 60, "the source tailing")
        stamp = now_ns()
        loki.push(kernel_labels("promtail", node=a), [XID79], ts=stamp)
        wait_until(lambda: taints(kube, a) == [REBOOT], 30, f"{a} fenced")
        loki.push(kernel_labels("promtail", node=b), [XID79], ts=stamp - 800_000_000)
        wait_until(lambda: taints(kube, b) == [REBOOT], 30, f"{b} fenced from the late line")
    finally:
        src.stop()
    # a poll round reads the window again: nothing in it is new
    assert src.once()["lines"] == 0
