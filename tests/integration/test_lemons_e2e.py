"""Lemons end to end (issue 43): a real API server with kwok Nodes mapped onto test-fleet
SSH nodes, real Ansible, real reboots, a real SMTP sink, a real HTTP receiver as the
ticket system, and ``fleetmedic run`` as a real subprocess. The only stand-ins are the
GPUs (the fake libnvidia-ml.so, whose GPUs now carry serials) and the kernel log file.

A GPU "falls off the bus" as the driver says it does: the node's kernel log gets the
driver's naming lines and a Xid 79 at the GPU's PCI address, and the node is fenced at
reboot (as the agent fences a Xid 79). A reboot cures it (the Xid belongs to the boot
before), so every episode ends in service, until the lemon rule stops it.
"""

from __future__ import annotations

import calendar
import json
import time

import pytest

from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import Benches, pool_name
from tests.harness.ctlenv import (
    annotation,
    cli,
    history,
    set_taints,
    state_of,
    wait_state,
    wait_until,
)
from tests.harness.smtp import attachments, body_text

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

SERIAL = "1652000000101"
UUID = "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae"
PCI = "0000:28:00"  # GPU 1's address in the fake library (0x18 + 0x10 * index)


@pytest.fixture
def bench(kube, fleet_factory, tmp_path, request):
    benches = Benches(kube, fleet_factory, tmp_path)
    yield lambda nodes=1: benches.new(nodes, pool_name("lemon"))
    benches.stop_controllers(log_lines=120)


def store(kube, pool: str) -> None:
    """The pause ConfigMap (deploy/controller/configmap.yaml ships it at a site): the GPUs'
    history across nodes is kept there."""
    kube.request(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        {"metadata": {"name": f"fleetmedic-{pool}"}, "data": {}},
    )


def gpus(node, serial: str = SERIAL, uuid: str = UUID) -> None:
    """Two healthy GPUs; GPU 1 is the one this test follows, by its serial and UUID."""
    scenario = {"driver_version": "550.90.07", "gpus": [{}, {"serial": serial, "uuid": uuid}]}
    (node.state_dir / "nvml.json").write_text(json.dumps(scenario))


def falls_off_the_bus(b, node, name: str, serial: str = SERIAL, uuid: str = UUID) -> None:
    """What the driver logs (akash-network/support issue 244's dmesg: it names the GPU
    before its first Xid of a boot) and the fence the agent puts on it."""
    stamp = time.strftime("%b %d %H:%M:%S")
    lines = [
        f"NVRM: GPU at PCI:{PCI}: {uuid}",
        f"NVRM: GPU Board Serial Number: {serial}",
        f"NVRM: Xid (PCI:{PCI}): 79, pid=4242, name=python3, GPU has fallen off the bus.",
    ]
    with node.kern_log.open("a") as f:
        for line in lines:
            f.write(f"{stamp} {node.name} kernel: [ 4242.424242] {line}\n")
    set_taints(b.kube, name, lambda t: [*t, ctlenv.repair_taint("reboot")])


def episode(b, node, name: str, proc, want: str = "healthy", **kw) -> None:
    falls_off_the_bus(b, node, name, **kw)
    wait_until(lambda: state_of(b.kube, name) == "reboot", 30, "the fence")
    wait_state(b.kube, name, want, proc, 300)


def config(b, smtp_sink, webhook, **over):
    ticket = {"url": webhook.http_url("rma"), "retry_interval": 2, **over.pop("ticket", {})}
    return b.config(smtp_sink, ticket=ticket, **over)


@pytest.mark.timeout(1200)  # three episodes with reboots, on a loaded machine
def test_a_gpu_failing_three_times_in_a_week_goes_to_manual_with_its_rma_case(
    bench, smtp_sink, webhook
):
    b = bench(1)
    node = b.fleet.node(1)
    gpus(node)
    [name] = b.register()
    store(b.kube, b.pool)
    cfg = config(b, smtp_sink, webhook)
    proc = b.controller(cfg)
    for _ in range(2):
        episode(b, node, name, proc)
    boots = node.boots
    assert smtp_sink.messages == [], "repaired twice, no human yet"
    record = annotation(b.kube, name, "fleetmedic.io/gpus")
    assert [(i["sn"], i["fam"], i["ep"]) for i in record["inc"]] == [
        (SERIAL, "bus-loss", 1),
        (SERIAL, "bus-loss", 2),
    ]
    assert {g["sn"]: g["uid"] for g in record["gpus"]}[SERIAL] == UUID

    # the third: straight to manual after its diagnose, no reboot, the case and the ticket
    episode(b, node, name, proc, want="manual")
    # the manual taint comes one write before the escalation's record (policy/ladder.py's
    # begin: the history's "escalated" line and fleetmedic.io/escalated together)
    wait_until(
        lambda: annotation(b.kube, name, "fleetmedic.io/escalated"), 60, "the escalation recorded"
    )
    assert node.boots == boots, "the rung that did not hold twice was not run a third time"
    ep3 = [(a["step"], a["result"], a.get("phase")) for a in history(b.kube, name) if a["ep"] == 3]
    assert ep3 == [("reboot", "rma-candidate", "rma"), ("manual", "escalated", None)], ep3
    rma = annotation(b.kube, name, "fleetmedic.io/rma")
    assert rma["summary"].startswith(f"RMA candidate: GPU {SERIAL}")
    [case_path] = rma["cases"]
    assert case_path.endswith(f"{name}-e3-rma-{SERIAL}.json")

    [msg] = smtp_sink.wait_for(1, timeout=60)
    assert msg["Subject"].startswith(f"{name} needs hands: RMA candidate: GPU {SERIAL}")
    assert len(msg["Subject"]) <= 78, msg["Subject"]
    files = attachments(msg)
    case = json.loads(files[f"{name}-e3-rma-{SERIAL}.json"])
    assert any(f.endswith("-rma.tar.gz") for f in files), list(files)
    assert "RMA candidate" in body_text(msg)

    # what the vendor's intake asks for, in the case
    assert case["gpu"]["serial"] == SERIAL and case["gpu"]["uuid"] == UUID
    facts = case["gpu"]["vendor_facts"]
    assert facts["inforom_image_version"] and facts["vbios_version"] and facts["board_part_number"]
    assert "retired_pages" in facts and "remapped_rows" in facts
    assert [h["ep"] for h in case["history"]] == [1, 2, 3] and all(h["at"] for h in case["history"])
    assert case["rule"] == {
        **case["rule"],
        "family": "bus-loss",
        "episodes": 3,
        "sources": ["nvidia-xid-catalog"],
    }

    # one ticket, the same case, within the cycle of the escalation
    got = webhook.wait_for(lambda r: r.path == "/rma", timeout=30)
    assert got.body["case_id"] == case["case_id"] and got.body["gpu"]["serial"] == SERIAL
    assert got.headers["Idempotency-Key"] == case["case_id"]
    wait_until(
        lambda: (annotation(b.kube, name, "fleetmedic.io/rma") or {}).get("ticket") == "sent",
        30,
        "the ticket recorded as sent",
    )
    # the ticket goes in the cycle that sees the escalation decided (controller/ticketer.py):
    # within seconds of the decision, not a minute's idle wake later
    decided = annotation(b.kube, name, "fleetmedic.io/escalated")["decided"]
    latency = got.at - calendar.timegm(time.strptime(decided, "%Y-%m-%dT%H:%M:%SZ"))
    print(f"ticket latency after the escalation: {latency:.1f}s")
    assert latency < 10, latency
    ctlwait.looked_again(b.kube, cfg, name)
    assert [r.answered for r in webhook.received if r.path == "/rma"] == [200], "one ticket"
    assert len(smtp_sink.messages) == 1

    # the on-call engineer's views: status marks the repeat offender, history shows the GPU
    status = cli(cfg, "status", "--json")
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)
    assert row["repeat_gpus"] == [{"gpu": 1, "serial": SERIAL, "family": "bus-loss", "episodes": 3}]
    assert row["rma"]["ticket"] == "sent"
    table = cli(cfg, "status")
    assert "GPU REPEATS" in table.stdout and "GPU1 x3 bus-loss; RMA (ticket sent)" in table.stdout
    h = cli(cfg, "history", name, "--json")
    rows = [r for r in json.loads(h.stdout) if r["source"] == "gpu"]
    assert [r["gpu"]["serial"] for r in rows] == [SERIAL] * 3
    text = cli(cfg, "history", name).stdout
    assert f"SN {SERIAL}" in text and "bus-loss x3" in text


@pytest.mark.timeout(1500)  # three episodes with reboots and the window's wait, loaded
def test_a_moved_gpu_keeps_its_history_a_held_repair_starts_over_and_a_kill_sends_one_ticket(
    bench, smtp_sink, webhook
):
    """The pool's own numbers (2 episodes, a 60 s window), so the test can wait one out:
    GPU 1 fails on the first node; the repair holds longer than the window, so its next
    failure there starts the count over; the GPU moves to the second node (a new node name,
    the same serial) and fails within the window of that repair: the second in its chain,
    whatever node it is in, so an RMA candidate there. The ticket system is down when the
    case is written; the controller is SIGKILLed then; its successor sends one ticket."""
    b = bench(2)
    first, second = b.fleet.node(1), b.fleet.node(2)
    gpus(first)
    gpus(second, serial="1652000000999", uuid="GPU-99999999-0000-4000-8000-000000000001")
    names = b.register()
    store(b.kube, b.pool)
    lemon = {"families": {"bus-loss": {"count": 2, "window": "60s"}}, "rma": {"diag_level": 0}}
    cfg = config(b, smtp_sink, webhook, ladder={"lemon": lemon})
    proc = b.controller(cfg)
    episode(b, first, names[0], proc)
    time.sleep(65)  # back in service longer than the window: that repair held
    episode(b, first, names[0], proc)  # the count starts over: repaired again, not a lemon
    assert annotation(b.kube, names[0], "fleetmedic.io/rma") is None
    # the GPU moves: out of the first node, into the second
    gpus(first, serial="1652000000777", uuid="GPU-77777777-0000-4000-8000-000000000001")
    gpus(second)
    webhook.failing = 10_000  # the ticket system is down: the case waits on the Node
    falls_off_the_bus(b, second, names[1])
    wait_until(
        lambda: (annotation(b.kube, names[1], "fleetmedic.io/rma") or {}).get("cases"),
        400,
        "the case written",
    )
    proc.kill9()
    assert not [r for r in webhook.received if r.answered == 200]
    rma = annotation(b.kube, names[1], "fleetmedic.io/rma")
    assert rma["ticket"] == "pending"
    [g] = rma["gpus"]
    assert g["serial"] == SERIAL and [x["node"] for x in g["chain"]] == names, g["chain"]
    assert [x["ep"] for x in g["chain"]] == [2, 1], "the first node's second episode, then this"
    webhook.failing = 0
    proc2 = b.controller(cfg, 2)
    wait_state(b.kube, names[1], "manual", proc2, 120)
    wait_until(
        lambda: (annotation(b.kube, names[1], "fleetmedic.io/rma") or {}).get("ticket") == "sent",
        60,
        "the ticket sent after the restart",
    )
    ctlwait.looked_again(b.kube, cfg, names[1])
    assert len([r for r in webhook.received if r.answered == 200]) == 1, "one ticket"
    assert state_of(b.kube, names[0]) == "healthy"
    h = cli(cfg, "history", names[1], "--json")
    rows = [r for r in json.loads(h.stdout) if r["source"] == "gpu"]
    assert {(r["gpu"]["node"], r["result"]) for r in rows} == {
        (names[0], "bus-loss"),
        (names[1], "bus-loss"),
    }, "the GPU's episodes on the node it came from, shown where it is now"
