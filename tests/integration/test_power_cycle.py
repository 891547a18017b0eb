"""The power_cycle rung end to end, on real parts: a real API server (kwok Nodes), nspawn
nodes behind real sshd, a Redfish BMC per node (sushy-tools, whose ForceOff/On stop and
boot the node: tests/harness/bmc.py), real Ansible (community.general's redfish modules)
through ``fleetmedic run`` as a subprocess, and a real SMTP sink. The GPU (fake NVML) is
the only stand-in: its fault survives a warm reboot and goes with a power cut.

One 5-node fleet and its BMCs serve the module; one controller works five nodes at once:

- node 1, fenced at reboot: the reboot does not cure it, the power cycle does (new boot
  id, checks pass, taint gone), its BMC's event log of the last hours in the evidence;
- node 2, whose BMC accepts connections and never answers: the rung fails in bounded
  time with one line, the ladder moves on (manual, one email);
- node 3, in a profile whose BMC password is wrong: the same, the BMC's 401 in one line;
- node 4, whose GPU stays lost: cycled, verify fails, the email carries the event log;
- node 5, hung (SSH connects, never answers): power-cycled without its boot id, cured.

None of the BMC credentials appears in the controller's log, its Ansible run
directories, the Events, the Nodes' annotations, the evidence or the emails. Then the
controller is SIGKILLed while node 1 is powered off mid-cycle: the next one powers it on
and verifies it, and the BMC is never asked to power it off a second time. Node 2 is
power-cycled meanwhile through IPMI (ipmitool against pyghmi's BMC), wherever the kill
finds it: once, and its event log, which that BMC does not serve, recorded as unavailable.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetmedic.model.vocabulary import preset
from tests.harness import ctlenv
from tests.harness.bmc import BmcSet, SilentBmc, hang_until_power_off, lost_until_power_off
from tests.harness.ctlbench import pool_name
from tests.harness.ctlenv import ControllerProcess, history, wait_state, wait_until
from tests.harness.fleet import FleetError, start_fleet
from tests.harness.smtp import attachments, body_text

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

ADDRESS = "fleetmedic.io/bmc-address"
CREDS_LABEL = "fleetmedic.test/bmc-creds"
PROTOCOL_LABEL = "fleetmedic.test/bmc-protocol"
GROUP_VARS = {"power_cycle_verify": False, "power_cycle_timeout": 60, "power_cycle_off_wait": 30}


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """The fleet, one BMC per node, a silent BMC address, and the credential files."""
    work = tmp_path_factory.mktemp("power-cycle")
    try:
        fleet = start_fleet(5, prefix="pytest", owned=True)
    except FleetError as exc:
        pytest.fail(f"test fleet: {exc}", pytrace=False)
    bmcs = None
    try:
        ctlenv.prepare_nodes(fleet)
        bmcs = BmcSet(work).start(fleet)
        creds = work / "creds"
        creds.mkdir(mode=0o700)
        for name, value in (
            ("user", bmcs.username),
            ("password", bmcs.password),
            ("wrong-password", bmcs.password[::-1] + "x"),
        ):
            (creds / name).write_text(value + "\n")
            (creds / name).chmod(0o600)
        with SilentBmc(f"127.1.{fleet.octet}.250") as silent:
            yield fleet, bmcs, silent, creds, work
    finally:
        if bmcs is not None:
            bmcs.stop()
        fleet.down()


def config(
    kube, fleet, creds: Path, workdir: Path, pool: str, smtp=None, off_time: str = "3s"
) -> Path:
    cfg = ctlenv.write_config(
        workdir,
        kube,
        fleet,
        pool,
        smtp,
        {
            "ladder": {
                "order": ["reboot", "power_cycle", "manual"],
                "playbooks": {"power_cycle": {"playbook": "power_cycle.yml", "timeout": 240}},
            },
            "bmc": {
                "address_from": "label",
                "address_key": ADDRESS,
                "username_file": str(creds / "user"),
                "password_file": str(creds / "password"),
                "timeout": "5s",
                "off_time": off_time,
            },
            "safety": {"max_concurrent": 5},  # every node of the fleet at once
            "profiles": [
                {
                    "name": "wrong-password",
                    "selector": f"{CREDS_LABEL}=wrong",
                    "bmc": {"password_file": str(creds / "wrong-password")},
                },
                {"name": "ipmi", "selector": f"{PROTOCOL_LABEL}=ipmi", "bmc": {"protocol": "ipmi"}},
            ],
        },
    )
    ctlenv.playbook_dir(workdir, GROUP_VARS)  # the test's role variables beside the playbooks
    return cfg


def make_node(kube, pool: str, node, bmc: str, state: str, **labels: str) -> str:
    name = f"{pool}-{node.index}"
    kube.make_nodes(
        [name],
        labels={
            ctlenv.POOL_LABEL: pool,
            "fleetmedic.io/gpu-vendor": "nvidia",
            "fleetmedic.io/expected-gpus": "2",
            ADDRESS: bmc,
            **labels,
        },
        addresses=[node.address],
        taints=[preset("default").repair(state).as_taint()],  # power_cycle: "power-cycle"
    )
    return name


def test_power_cycle_cures_what_a_reboot_did_not_and_bmc_failures_move_on(stage, kube, smtp_sink):
    fleet, bmcs, silent, creds, work = stage
    n1, n2, n3, n4, n5 = fleet.nodes
    pool = pool_name("pc")
    workdir = work / "a"
    lost_until_power_off(n1)
    ctlenv.gpu_lost(n4)  # stays lost: a power cycle does not help either
    b1, b4 = bmcs[n1.name], bmcs[n4.name]
    for bmc in (b1, b4):
        bmc.add_sel("GPU 1 PCIe link down: fell off the bus", severity="Critical", age=600)
        bmc.add_sel("Fan 3 replaced", severity="OK", age=3 * 86400)  # older than 24 h
    boot1, boots1, boots4 = n1.boot_id(), n1.boots, n4.boots
    boots23, boots5 = (n2.boots, n3.boots), n5.boots
    names = [
        make_node(kube, pool, n1, b1.address, "reboot"),
        make_node(kube, pool, n2, silent.address, "power_cycle"),
        make_node(kube, pool, n3, bmcs[n3.name].address, "power_cycle", **{CREDS_LABEL: "wrong"}),
        make_node(kube, pool, n4, b4.address, "power_cycle"),
        make_node(kube, pool, n5, bmcs[n5.name].address, "power_cycle"),
    ]
    hang_until_power_off(n5)
    cfg = config(kube, fleet, creds, workdir, pool, smtp_sink)
    proc = ControllerProcess(cfg, workdir / "controller.log").start()
    try:
        for name in (names[0], names[4]):
            wait_state(kube, name, "healthy", proc, 300)
        for name in names[1:4]:
            wait_state(kube, name, "manual", proc, 120)
        smtp_sink.wait_for(3, timeout=60)
        ctlenv_counts = {n: len(history(kube, n)) for n in names}
    finally:
        proc.stop()
    print(proc.tail(40))

    # node 1: reboot (GPU still lost), then one power cycle through its BMC, in service
    assert [(a["step"], a["result"]) for a in history(kube, names[0])] == [
        ("reboot", "fail"),
        ("power_cycle", "pass"),
    ]
    assert n1.boot_id() != boot1 and n1.boots == boots1 + 2, "a reboot and a power cycle"
    assert b1.actions() == ["ForceOff (was On)", "On (was Off)"]
    assert ctlenv.in_service(kube, names[0]), ctlenv.taints(kube, names[0])
    evidence = work / "a" / "evidence"
    [sel_file] = (evidence / names[0]).glob(f"{names[0]}-e1-power_cycle1-*-sel.json")
    sel = json.loads(sel_file.read_text())
    assert (sel["status"], sel["bmc"], sel["hours"]) == ("ok", b1.address, 24)
    assert [e["Message"] for e in sel["entries"]] == ["GPU 1 PCIe link down: fell off the bus"]

    # node 5, hung: no boot id to read before, power-cycled all the same, back in service
    [attempt] = history(kube, names[4])
    assert (attempt["step"], attempt["result"]) == ("power_cycle", "pass")
    # (the notes, shortened: "diagnose unreachable: ...; power-cycled without a boot id")
    assert attempt["message"].startswith("diagnose unreachable: "), attempt
    assert "; power-cycle" in attempt["message"], attempt
    assert n5.boots == boots5 + 1 and bmcs[n5.name].power_offs() == 1

    # nodes 2 and 3: the rung failed in bounded time, with one line naming the BMC and why;
    # the ladder moved on to manual (one email each)
    h2, h3 = history(kube, names[1]), history(kube, names[2])
    for h in (h2, h3):
        assert [(a["step"], a["result"]) for a in h] == [
            ("power_cycle", "fail"),
            ("manual", "escalated"),
        ]
    for h, bmc, why in ((h2, silent.address, "timed out"), (h3, bmcs[n3.name].address, "401")):
        msg = h[0]["message"]
        assert f"BMC {bmc} (redfish)" in msg and why in msg.lower(), msg
        assert "\n" not in msg
    assert (n2.boots, n3.boots) == boots23 and bmcs[n3.name].actions() == [], "no power cut"

    # node 4: cycled once, still broken: the email carries the event log of the last hours
    assert n4.boots == boots4 + 1 and b4.power_offs() == 1
    emails = {m["Subject"].split()[0]: m for m in smtp_sink.messages}  # (the node first)
    assert set(emails) == set(names[1:4]), list(emails)
    files = attachments(emails[names[3]])
    [sel_name] = [f for f in files if f.endswith("-sel.json")]
    assert b"fell off the bus" in files[sel_name] and b"Fan 3" not in files[sel_name]
    assert "power_cycle" in body_text(emails[names[3]])

    # the credentials are nowhere: logs, Ansible's run directories, Events, annotations,
    # evidence, emails
    secrets = [bmcs.username, bmcs.password, (creds / "wrong-password").read_text().strip()]
    places: dict[str, str] = {"controller log": proc.log.read_text(errors="replace")}
    for path in [*(workdir / "runs").rglob("*"), *evidence.rglob("*")]:
        if path.is_file():
            places[str(path)] = path.read_bytes().decode(errors="replace")
    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    places["events"] = json.dumps([e for e in events if e["involvedObject"]["name"] in names])
    places["annotations"] = json.dumps(
        [ctlenv.node(kube, n)["metadata"].get("annotations") for n in names]
    )
    for m in smtp_sink.messages:
        places[f"email {m['Subject']}"] = m.as_string() + json.dumps(
            {k: v.decode(errors="replace") for k, v in attachments(m).items() if k.endswith("json")}
        )
    assert len(places) > 20, list(places)
    leaks = [(where, s[:6]) for where, text in places.items() for s in secrets if s in text]
    assert not leaks, f"BMC credentials found in: {leaks}"
    assert ctlenv_counts == {n: len(history(kube, n)) for n in names}, "nothing after the stop"
    kube.delete_nodes(names)


def test_sigkill_while_the_node_is_off_then_restart_powers_it_on_never_off_twice(stage, kube):
    fleet, bmcs, _silent, creds, work = stage
    node, other = fleet.node(1), fleet.node(2)
    bmc, ipmi = bmcs[node.name], bmcs[other.name]
    pool = pool_name("pk")
    workdir = work / "b"
    lost_until_power_off(node)
    lost_until_power_off(other)
    before, before_ipmi = len(bmc.actions()), ipmi.power_offs()
    boots, boots_ipmi = node.boots, other.boots
    name = make_node(kube, pool, node, bmc.address, "power_cycle")
    by_ipmi = make_node(kube, pool, other, ipmi.address, "power_cycle", **{PROTOCOL_LABEL: "ipmi"})
    # 6 s off: time enough to see the node off and kill the controller before the power-on
    cfg = config(kube, fleet, creds, workdir, pool, off_time="6s")
    first = ControllerProcess(cfg, workdir / "controller-1.log").start()
    second = None
    try:
        wait_until(
            lambda: len(bmc.actions()) > before and node.status().get("state") == "off",
            180,
            "the BMC to power the node off",
            interval=0.05,
        )
        first.kill9()
        killed_at = time.monotonic()
        assert node.status().get("state") == "off", "killed between power-off and power-on"
        assert bmc.actions()[before:] == ["ForceOff (was On)"]
        second = ControllerProcess(cfg, workdir / "controller-2.log").start()
        wait_state(kube, name, "healthy", second, 180)
        took = time.monotonic() - killed_at
        wait_state(kube, by_ipmi, "healthy", second, 120)
    finally:
        first.stop()
        print(first.tail(30))
        if second is not None:
            second.stop()
            print(second.tail(40))
    assert bmc.actions()[before:] == ["ForceOff (was On)", "On (was Off)"], "never off twice"
    assert node.boots == boots + 1
    [attempt] = history(kube, name)
    assert (attempt["step"], attempt["result"]) == ("power_cycle", "pass")
    assert "run again for the same request" in attempt["message"], attempt
    print(f"restart to healthy: {took:.1f} s")
    # the IPMI node: one power-off, one boot, its event log recorded as unavailable
    assert ipmi.power_offs() == before_ipmi + 1 and other.boots == boots_ipmi + 1
    assert [(a["step"], a["result"]) for a in history(kube, by_ipmi)] == [("power_cycle", "pass")]
    [sel_file] = (workdir / "evidence" / by_ipmi).glob("*-sel.json")
    sel = json.loads(sel_file.read_text())
    assert sel["protocol"] == "ipmi" and sel["status"].startswith("unavailable: "), sel
    kube.delete_nodes([name, by_ipmi])
