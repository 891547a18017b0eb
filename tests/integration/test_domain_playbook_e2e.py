"""A domain incident's playbook end to end: three nspawn fleet nodes (real sshd, real
Ansible through ansible-runner, real systemd units) behind kwok Nodes that share an NVLink
clique label, the real API server and SMTP sink, ``fleetmedic run`` as a subprocess.

The shared fault is "the fabric manager is down": a fake fabric-manager systemd unit
(``fm-test-fabricmanager``, not GPU hardware: just a unit that logs each start) stopped on
every node, and the nodes fenced together, as their agents would. The domain playbook
(``domain-fm.yml`` here: it logs each run on the node, then the collection's
``domain_restart_services.yml`` restarts the unit once per request id) runs once over them;
the ladder's verify (``verify-fm.yml``: the collection's ``verify.yml`` and a check that
the unit is active) then judges each node.

- one node's unit cannot start until it reboots (a marker in /run, which a boot clears):
  the other two return with their boot ids unchanged, that node alone enters its ladder
  (the reboot rung cures it), and the closing email says which nodes returned;
- the controller SIGKILLed while the playbook runs (slow the first time, after its restart):
  the restarted controller resumes the run with the same request id, so the playbook ran
  again but the unit was restarted once on each node; all three return, boot ids unchanged.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import Benches, pool_name
from tests.harness.ctlenv import history, state_of, wait_until
from tests.harness.smtp import body_text

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

CLIQUE = "nvidia.com/gpu.clique"
UNIT = "fm-test-fabricmanager"
STATE = "/var/lib/fm-test"
# Restart=on-failure: systemd in these nspawn nodes (cgroup v1 hybrid) now and then fails
# to spawn a unit's process ("control process exited with error code" after "Failed to
# kill control group ... Input/output error"); a real fabric manager unit restarts too.
# The fault check is in ExecStart (no control process); its exit 3 is not restarted, so a
# broken node's unit stays failed (never briefly active between restarts).
FM_UNIT = f"""[Unit]
Description=fleetmedic test: a fake fabric manager (logs each start)
StartLimitIntervalSec=0

[Service]
ExecStart=/bin/sh -c 'test -e /run/fm-test-broken && exit 3; echo started >> {STATE}/fm-starts; \\
exec sleep infinity'
Restart=on-failure
RestartSec=1
RestartPreventExitStatus=3

[Install]
WantedBy=multi-user.target
"""
DOMAIN_PLAY = [
    {
        "name": "Log this run of the domain playbook on each node",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Log the run and its request id",
                "ansible.builtin.shell": (
                    f'echo "{{{{ fleetmedic_request_id }}}}" >> {STATE}/domain-runs'
                ),
                "changed_when": True,
            }
        ],
    },
    {
        "ansible.builtin.import_playbook": "domain_restart_services.yml",
        "vars": {"domain_services": [UNIT]},
    },
    {
        "name": "Take a while the first time, when the test asks (after the restart)",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Sleep once",
                "ansible.builtin.shell": (
                    f"test -e {STATE}/slow-once || exit 0; test -e {STATE}/slowed && exit 0; "
                    f"touch {STATE}/slowed; sleep 300"
                ),
                "changed_when": False,
            }
        ],
    },
]
VERIFY_PLAY = [
    {"ansible.builtin.import_playbook": "verify.yml"},
    {
        "name": "The fabric manager runs",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Check the fake fabric manager unit",
                "ansible.builtin.command": f"systemctl is-active {UNIT}",
                "changed_when": False,
            }
        ],
    },
]


@pytest.fixture
def bench(kube, fleet_factory, tmp_path, request):
    benches = Benches(kube, fleet_factory, tmp_path)
    yield lambda nodes=3: benches.new(nodes, pool_name("dpb"))
    benches.stop_controllers(log_lines=120)
    benches.delete_nodes()


def setup(b, smtp_sink):
    """The fake fabric manager on every node (running), the clique's kwok Nodes, the
    playbooks and the config; returns (config path, names, fleet node by name)."""
    for node in b.fleet.nodes:
        node.ssh(
            f"mkdir -p {STATE} && cat > /etc/systemd/system/{UNIT}.service <<'EOF'\n{FM_UNIT}EOF\n"
            f"systemctl daemon-reload && systemctl enable --now --quiet {UNIT}",
            timeout=60,
        )
    nodes = list(b.fleet.nodes)
    names = [f"{b.pool}-{n.index}" for n in nodes]
    b.make_nodes(names, [n.address for n in nodes], labels={CLIQUE: "nvl72"})
    cfg = b.config(
        smtp_sink,
        ladder={
            "reboot": {"phases": ["drain", "reboot", "verify"]},
            "playbooks": {
                "reboot": {"playbook": "reboot.yml", "timeout": 120},
                "verify": {"playbook": "verify-fm.yml", "timeout": 180},
            },
        },
        safety={"pause_configmap": f"kube-system/fleetmedic-{b.pool}"},
    )
    books = ctlenv.playbook_dir(b.dir / "ctl")
    (books / "domain-fm.yml").write_text(yaml.safe_dump(DOMAIN_PLAY, sort_keys=False))
    (books / "verify-fm.yml").write_text(yaml.safe_dump(VERIFY_PLAY, sort_keys=False))
    data = yaml.safe_load(cfg.read_text())
    data["domains"] = [
        {
            "key": CLIQUE,
            "threshold": 3,
            "window": "5m",
            "settle": "60s",
            "action": {"playbook": "domain-fm.yml", "timeout": "10m"},
        }
    ]
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    b.kube.request(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"fleetmedic-{b.pool}"},
            "data": {"pause": "false"},
        },
    )
    return cfg, names, dict(zip(names, nodes, strict=True))


def fabric_manager_down(node) -> None:
    node.ssh(f"systemctl stop {UNIT}", timeout=60)


def starts(node) -> int:
    out = node.ssh(f"cat {STATE}/fm-starts 2>/dev/null || true", timeout=60)
    return len([ln for ln in out.stdout.splitlines() if ln.strip() == "started"])


def runs(node) -> list[str]:
    out = node.ssh(f"cat {STATE}/domain-runs 2>/dev/null || true", timeout=60)
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def record(b) -> list[dict]:
    cm = b.kube.request("GET", f"/api/v1/namespaces/kube-system/configmaps/fleetmedic-{b.pool}")
    return json.loads((cm.get("data") or {}).get("domains") or "[]")


def fence_together(b, cfg, names, proc) -> None:
    wait_until(lambda: "watching 3 nodes" in proc.log.read_text(), 60, "controller ready")
    ctlwait.looked_again(b.kube, cfg, names[0], n=1, timeout=120)  # past the baseline look
    ctlenv.taint_all(b.kube, names)


def closed(b) -> dict | None:
    rec = record(b)
    return rec[0] if rec and rec[0].get("closed_at") else None


def test_the_playbook_cures_two_nodes_which_return_untouched_and_the_third_alone_enters_its_ladder(
    bench, smtp_sink
):
    b = bench(3)
    cfg, names, by = setup(b, smtp_sink)
    stuck = names[2]
    by[stuck].ssh("touch /run/fm-test-broken", timeout=60)  # its unit starts only after a boot
    boots = {n: by[n].boot_id() for n in names}
    for n in names:
        fabric_manager_down(by[n])
    before = {n: starts(by[n]) for n in names}
    proc = b.controller(cfg)
    fence_together(b, cfg, names, proc)

    done = wait_until(lambda: closed(b), 420, "the incident to close after its playbook")
    assert done["closed_by"] == "playbook", done
    play = done["play"]
    assert play["status"] == "done" and play["runs"] == 1, play
    assert sorted(play["passed"]) == sorted(names[:2]) and play["failed"] == [stuck], play
    for n in names[:2]:
        assert state_of(b.kube, n) == "healthy"
        assert by[n].boot_id() == boots[n], f"{n} was not rebooted"
        [entry] = history(b.kube, n)
        assert (entry["step"], entry["result"]) == ("domain", "pass"), entry
        assert f"{CLIQUE}=nvl72" in entry["message"]
    for n in names:  # the playbook ran once on each node, and restarted the unit once
        assert len(runs(by[n])) == 1, (n, runs(by[n]))
        assert starts(by[n]) == before[n] + 1 or n == stuck, (n, starts(by[n]), before[n])

    # the third alone enters its ladder: the reboot rung (its boot clears the fault) cures it
    wait_until(
        lambda: state_of(b.kube, stuck) == "healthy" and history(b.kube, stuck),
        300,
        "the node that still failed to be repaired by its own ladder",
    )
    assert [(x["step"], x["result"]) for x in history(b.kube, stuck)] == [("reboot", "pass")]
    assert by[stuck].boot_id() != boots[stuck]
    for n in names[:2]:
        assert by[n].boot_id() == boots[n] and len(history(b.kube, n)) == 1, "no ladder on them"

    msgs = smtp_sink.wait_for(2, timeout=60)
    [opening] = [m for m in msgs if "nodes fenced together" in m["Subject"]]
    assert "domain-fm.yml runs once" in body_text(opening)
    [closing] = [m for m in msgs if "closed" in m["Subject"]]
    assert "2 of 3 nodes returned" in closing["Subject"], closing["Subject"]
    text = body_text(closing)
    assert all(n in text for n in names) and "still failing: its own ladder" in text
    assert "returned to service" in text


def test_a_controller_killed_during_the_playbook_resumes_it_and_it_acts_once(bench, smtp_sink):
    b = bench(3)
    cfg, names, by = setup(b, smtp_sink)
    boots = {n: by[n].boot_id() for n in names}
    for n in names:
        fabric_manager_down(by[n])
        by[n].ssh(f"touch {STATE}/slow-once", timeout=60)
    before = {n: starts(by[n]) for n in names}
    proc = b.controller(cfg)
    fence_together(b, cfg, names, proc)

    # the playbook has restarted the units and sleeps: its run is on the record
    wait_until(
        lambda: all(
            by[n].ssh(f"test -e {STATE}/slowed && echo y", check=False).stdout.strip() == "y"
            for n in names
        ),
        240,
        "the domain playbook's first (slow) run on every node",
        interval=1,
    )
    [inc] = record(b)
    assert inc["play"]["status"] == "running" and inc["play"]["runs"] == 1, inc
    proc.kill9()
    assert all(starts(by[n]) == before[n] + 1 for n in names)

    proc2 = b.controller(cfg, n=2)
    done = wait_until(lambda: closed(b), 420, "the incident to close after the restart")
    assert "resumed with the same request id" in proc2.log.read_text()
    play = done["play"]
    assert play["runs"] == 2, play  # started twice (resumed), acted once (below)
    assert (play["status"], sorted(play["passed"]), play.get("failed", [])) == (
        "done",
        sorted(names),
        [],
    ), play
    for n in names:
        ran = runs(by[n])
        assert len(ran) == 2 and ran[0] == ran[1], (n, ran)  # resumed, same request id
        assert starts(by[n]) == before[n] + 1, f"{n}: the unit was restarted once, not twice"
        assert state_of(b.kube, n) == "healthy" and by[n].boot_id() == boots[n]
        assert [(x["step"], x["result"]) for x in history(b.kube, n)] == [("domain", "pass")]
    msgs = smtp_sink.wait_for(2, timeout=60)
    assert sum("nodes fenced together" in m["Subject"] for m in msgs) == 1, "one page"
    [closing] = [m for m in msgs if "closed" in m["Subject"]]
    assert "3 of 3 nodes returned" in closing["Subject"]
