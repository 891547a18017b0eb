"""The Slurm fleet (tests/harness/slurmfleet.py): fleet nodes that really reboot and are
slurmd nodes of one real slurmctld. Both reboot paths a repair can take, as Slurm sees
them:

- ours: ``ansible-playbook -i <slurm_nodes inventory> playbooks/reboot.yml --limit N``
  reboots a node we drained; slurmd registers again with the new boot time, the drain
  and its reason stay, and ``state=resume`` returns the node to service;
- Slurm's: ``scontrol reboot ASAP nextstate=resume reason=...`` runs RebootProgram in
  the node, which reboots it like ``systemctl reboot``; slurmctld sees the new boot time
  and resumes it itself.

Each reboot test prints the seconds from the request to the node answering again in
sinfo with its new boot time (the figure the report quotes).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from tests.harness.adhoc import cli_env, recap
from tests.harness.agentenv import xid_line
from tests.harness.fleet import ROOT
from tests.harness.slurmfleet import BOOT_TIME_JITTER, new_boot

pytestmark = [pytest.mark.slow]
OUR_REASON = "fleetmedic: reboot: Xid 79 on GPU 0"


@pytest.fixture
def sf(slurm_fleet):
    """The session's Slurm fleet, every node idle before and after the test."""
    slurm_fleet.reset()
    yield slurm_fleet
    slurm_fleet.reset()


def run_job(sf, node: str, *, gres: str = "gpu:2", timeout: float = 120) -> str:
    """``sbatch --wait`` a job on ``node``; returns what it printed (read on the node)."""
    out = f"/tmp/job-{uuid.uuid4().hex[:8]}.out"
    sf.slurm.run(
        "sbatch",
        "--wait",
        f"--gres={gres}",
        "-w",
        node,
        "--chdir=/tmp",
        "-o",
        out,
        "--wrap",
        'echo "host=$(hostname) gpus=$CUDA_VISIBLE_DEVICES"',
        timeout=timeout,
    )
    return sf.node(node).ssh(f"cat {out}").stdout.strip()


def boot_id(sf, node: str) -> str:
    return sf.node(node).boot_id()


def test_nodes_are_fleet_nodes_and_slurmd_nodes(sf):
    nodes = sf.slurm.nodes()
    assert sorted(nodes) == ["node-1", "node-2", "node-3"]
    for n in sf.fleet:
        info = nodes[n.name]
        assert info["address"] == n.address, "slurmctld reaches slurmd at the node's address"
        assert info["state"] == "idle" and info["state_flags"] == []
        assert info["gres"] == "gpu:2"
        # slurmd runs inside the node (its systemd unit), not on the host
        assert n.ssh("systemctl is-active slurmd").stdout.strip() == "active"
        # the node's clock starts at its boot (the supervisor's record of it), not at the
        # host's, and sinfo's boot time is that boot
        uptime = float(n.ssh("cut -d' ' -f1 /proc/uptime").stdout)
        booted = n.status()["since"]
        assert abs(uptime - (time.time() - booted)) < 5, (uptime, booted)
        assert abs(int(info["boot_time"]) - booted) < 5


def test_a_gpu_job_runs_on_a_node(sf):
    assert run_job(sf, "node-1") == "host=node-1 gpus=0,1"


def test_the_node_drains_itself_with_scontrol(sf):
    """What an agent on a Slurm node does: the client tools in the node reach slurmctld
    with the cluster's slurm.conf and munge (no Kubernetes)."""
    p = sf.node(2).ssh(
        "scontrol update nodename=$(hostname) state=drain reason='fleetmedic: reboot: Xid 79'"
        " && sinfo -h -n $(hostname) -o '%T|%E'"
    )
    assert p.stdout.strip() == "drained|fleetmedic: reboot: Xid 79"
    assert sf.sinfo("node-2")["reason"] == "fleetmedic: reboot: Xid 79"


def test_restarting_slurmd_is_not_a_reboot(sf):
    """The boot time is the node's, so a slurmd restart keeps it (``slurmd -b`` would not)."""
    before = sf.sinfo("node-3")
    sf.node(3).ssh("systemctl restart slurmd")
    sf.wait_node(
        "node-3",
        lambda n: n["slurmd_start_time"] > before["slurmd_start_time"] and n["state"] == "idle",
        "registered by the restarted slurmd",
        timeout=120,
    )
    # (it may move by a second: BOOT_TIME_JITTER)
    assert abs(sf.boot_time("node-3") - before["boot_time"]) <= BOOT_TIME_JITTER


def test_reboot_playbook_reboots_a_drained_node_and_slurm_sees_the_new_boot(sf, tmp_path):
    node = "node-2"
    sf.slurm.run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={OUR_REASON}")
    inv = sf.slurm_inventory(tmp_path / "inv")
    graph = subprocess.run(
        ["ansible-inventory", "-i", str(inv), "--graph"],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        check=True,
    ).stdout
    assert node in graph.split("@repair_reboot:")[1].split("@")[0], graph
    before_boot, before_id = sf.boot_time(node), boot_id(sf, node)

    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            "ansible-playbook",
            "-i",
            str(inv),
            str(ROOT / "playbooks" / "reboot.yml"),
            "--limit",
            node,
            "-e",
            "fleetmedic_node_lease=false fleetmedic_collect_evidence=false reboot_verify=false",
            "-e",
            "reboot_timeout=240",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(),
        cwd=ROOT,
    )
    try:
        sf.wait_rebooted(node, after=before_boot, timeout=240)
        seen = time.monotonic() - t0
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-4000:]
    assert recap(out)[node]["failed"] == 0
    assert boot_id(sf, node) != before_id, "Ansible's reboot: a new boot_id"
    info = sf.sinfo(node)
    assert new_boot(info, before_boot)
    # Slurm kept our drain across the reboot: the node is ours to resume
    assert info["state"] == "idle" and info["state_flags"] == ["DRAIN"], info
    assert info["reason"] == OUR_REASON
    for other in ("node-1", "node-3"):
        assert sf.sinfo(other)["state_flags"] == [], "only the drained node was touched"
    sf.slurm.run("scontrol", "update", f"nodename={node}", "state=resume")
    assert run_job(sf, node) == f"host={node} gpus=0,1"
    print(f"reboot.yml: new boot time in sinfo {seen:.1f} s after the run started")


def test_scontrol_reboot_runs_reboot_program_and_slurm_resumes_the_node(sf):
    node = "node-3"
    extra = '{"fleetmedic": {"rung": "reboot"}}'  # a repair record, as the adapter keeps it
    sf.slurm.run("scontrol", "update", f"nodename={node}", f"extra={extra}")
    before_boot, before_id, boots = sf.boot_time(node), boot_id(sf, node), sf.node(3).boots
    t0 = time.monotonic()
    sf.slurm.run("scontrol", "reboot", "ASAP", "nextstate=resume", f"reason={OUR_REASON}", node)
    # slurmctld issues the reboot: DOWN+DRAIN+REBOOT_ISSUED with our reason while it runs
    # (or, on a slow machine polled late, already back)
    sf.wait_node(
        node,
        lambda n: "REBOOT_ISSUED" in n["state_flags"] or new_boot(n, before_boot),
        "rebooting",
        timeout=60,
    )
    # back in service by Slurm's own hand (nextstate=resume): idle, no drain, no reason
    sf.wait_node(
        node,
        lambda n: new_boot(n, before_boot) and n["state"] == "idle" and not n["state_flags"],
        "resumed by slurmctld after its reboot",
        timeout=240,
    )
    seen = time.monotonic() - t0
    assert sf.sinfo(node)["reason"] == ""
    assert sf.sinfo(node)["extra"] == extra, "the record survives Slurm's reboot"
    assert boot_id(sf, node) != before_id, "RebootProgram really rebooted the node"
    assert sf.node(3).boots == boots + 1, "one reboot"
    assert "Node reboot request being processed" in sf.slurmd_log(node)
    assert run_job(sf, node) == f"host={node} gpus=0,1"
    print(f"scontrol reboot: node resumed with its new boot time {seen:.1f} s after the request")


def test_scontrol_reboot_nextstate_down_keeps_the_node_out_until_we_resume_it(sf):
    """For a reboot that must be verified before the node takes jobs again: 22.05 allows
    only nextstate=resume or down (not drain). With down the node comes back DOWN, no
    DRAIN flag, with our reason and Slurm's notes after it, so it is still ours; it stays
    out of service (ReturnToService=2 does not return it) until ``state=resume``."""
    node = "node-1"
    sf.slurm.run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={OUR_REASON}")
    before_boot = sf.boot_time(node)
    sf.slurm.run("scontrol", "reboot", "ASAP", "nextstate=down", f"reason={OUR_REASON}", node)
    sf.wait_node(
        node,
        lambda n: new_boot(n, before_boot) and "REBOOT_ISSUED" not in n["state_flags"],
        "back from Slurm's reboot",
        timeout=240,
    )
    time.sleep(3)  # and it stays out of service
    info = sf.sinfo(node)
    assert info["state"] == "down" and info["state_flags"] == [], info
    assert info["reason"] == f"{OUR_REASON} : reboot issued : reboot complete"
    sf.slurm.run("scontrol", "update", f"nodename={node}", "state=resume")
    assert run_job(sf, node) == f"host={node} gpus=0,1"


def _hold_job(sf, node: str, release: str) -> str:
    """A job on ``node`` that runs until the file ``release`` appears on the node."""
    job = sf.slurm.run(
        "sbatch",
        "--parsable",
        "--gres=gpu:1",
        "-w",
        node,
        "--chdir=/tmp",
        "-o",
        "/dev/null",
        "--wrap",
        f"while [ ! -e {release} ]; do sleep 0.2; done",
    ).strip()
    sf.wait_node(node, lambda n: n["state"] in ("mixed", "allocated"), "running the job", 120)
    return job


def test_drain_waits_for_the_running_job(sf):
    node, release = "node-1", f"/tmp/release-{uuid.uuid4().hex[:8]}"
    job = _hold_job(sf, node, release)
    sf.slurm.run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={OUR_REASON}")
    time.sleep(3)  # the job still runs: the node is draining, not drained
    info = sf.sinfo(node)
    assert info["state"] in ("mixed", "allocated") and "DRAIN" in info["state_flags"], info
    assert "draining" in sf.slurm.run("sinfo", "-h", "-n", node, "-o", "%T")
    assert job in sf.slurm.run("squeue", "-h", "-o", "%i", "-w", node)
    sf.node(1).ssh(f"touch {release}")
    sf.wait_node(
        node, lambda n: n["state"] == "idle" and n["state_flags"] == ["DRAIN"], "drained", 120
    )
    assert sf.slurm.run("sinfo", "-h", "-n", node, "-o", "%T").strip() == "drained"
    assert sf.sinfo(node)["reason"] == OUR_REASON


def test_scontrol_reboot_asap_waits_for_the_running_job(sf):
    node, release = "node-2", f"/tmp/release-{uuid.uuid4().hex[:8]}"
    _hold_job(sf, node, release)
    before_boot, before_id = sf.boot_time(node), boot_id(sf, node)
    sf.slurm.run("scontrol", "reboot", "ASAP", "nextstate=resume", f"reason={OUR_REASON}", node)
    time.sleep(3)  # the job runs on: no reboot yet, the node drains
    info = sf.sinfo(node)
    assert "REBOOT_REQUESTED" in info["state_flags"] and "DRAIN" in info["state_flags"], info
    assert boot_id(sf, node) == before_id, "rebooted under a running job"
    sf.node(2).ssh(f"touch {release}")
    sf.wait_node(
        node,
        lambda n: new_boot(n, before_boot) and n["state"] == "idle" and not n["state_flags"],
        "rebooted after the job and resumed",
        timeout=240,
    )
    assert boot_id(sf, node) != before_id


def test_slurmctld_crash_and_restart_the_nodes_come_back_and_our_drain_stays(sf):
    # a reason no earlier test wrote: wait_saved looks for the text in slurmctld's state file
    reason = f"{OUR_REASON} ({uuid.uuid4().hex[:8]})"
    sf.slurm.run("scontrol", "update", "nodename=node-1", "state=drain", f"reason={reason}")
    sf.slurm.wait_saved(reason)
    seconds = sf.slurm.restart_ctld(kill=True, timeout=120)
    info = sf.sinfo("node-1")
    assert info["state_flags"] == ["DRAIN"] and info["reason"] == reason
    assert all(sf.sinfo(n)["state"] == "idle" for n in ("node-2", "node-3"))
    assert run_job(sf, "node-2") == "host=node-2 gpus=0,1", "slurmd in the nodes found it again"
    print(f"slurmctld SIGKILL to every node answering again: {seconds:.1f} s")


AGENT = (
    "fleetmedic agent --node-name $(hostname) --slurm-conf /etc/slurm/slurm.conf"
    " --config /dev/null --kernel-log /var/lib/fleetmedic-test/kern.log --vendor none --once"
)


def test_the_agent_in_the_node_drains_it_and_slurms_reboot_cures_it(sf):
    """The issue's first scenario without the controller: the real agent, inside the node,
    reads an Xid 79 and drains its node through scontrol with our reason; Slurm's reboot
    (RebootProgram) then reboots the node, slurmctld resumes it, and the agent, run again
    in the new boot, leaves it in service (the Xid line is the last boot's)."""
    node = sf.node(1)
    with open(node.kern_log, "a") as f:
        f.write(xid_line(code=79, bus=0x3B, uptime=42.5))
    out = json.loads(node.ssh(AGENT, timeout=120).stdout)
    assert out["kernel_findings_acted"] == 1, out
    info = sf.sinfo(node.name)
    assert "DRAIN" in info["state_flags"]
    reason = info["reason"]
    assert reason.startswith("fleetmedic: reboot: xid.79 0000:3b:00"), reason

    before_boot, before_id = info["boot_time"], node.boot_id()
    sf.slurm.run("scontrol", "reboot", "ASAP", "nextstate=resume", f"reason={reason}", node.name)
    sf.wait_node(
        node.name,
        lambda n: new_boot(n, before_boot) and n["state"] == "idle" and not n["state_flags"],
        "rebooted by Slurm and resumed",
        timeout=240,
    )
    node.wait_ssh(60)
    assert node.boot_id() != before_id
    again = json.loads(node.ssh(AGENT, timeout=120).stdout)
    # not even "already handled": the line is before this boot's kernel banner
    assert again["kernel_findings_acted"] == 0 and again["kernel_findings_already_handled"] == 0
    assert sf.sinfo(node.name)["state_flags"] == [], "the cured node stays in service"
    assert run_job(sf, node.name) == f"host={node.name} gpus=0,1"


def test_a_slow_reboot_is_seen_down_and_the_node_comes_back_still_ours(slurm_fleet_factory):
    """Real hosts take minutes to reboot, longer than SlurmdTimeout: slurmctld marks the
    node DOWN meanwhile. Our drain and reason stay through that, so the node comes back
    IDLE+DRAIN, still ours to resume (ReturnToService=2 brings it back from DOWN)."""
    sf = slurm_fleet_factory(1, slurmd_timeout=10)
    node = sf.node(1)
    sf.slurm.run(
        "scontrol", "update", f"nodename={node.name}", "state=drain", f"reason={OUR_REASON}"
    )
    before = sf.boot_time(node.name)
    node.set_boot_delay(30)
    node.ssh("systemctl reboot", check=False)
    sf.wait_node(
        node.name,
        lambda n: n["state"] == "down" or "NOT_RESPONDING" in n["state_flags"],
        "seen gone by slurmctld",
        timeout=120,
    )
    gone = sf.sinfo(node.name)
    said = sf.slurm.marked_down(OUR_REASON)
    assert "DRAIN" in gone["state_flags"] and gone["reason"] in (OUR_REASON, said), gone
    sf.wait_rebooted(node.name, before, timeout=240)
    node.set_boot_delay(0)
    back = sf.sinfo(node.name)
    assert back["state"] == "idle" and back["state_flags"] == ["DRAIN"], back
    assert back["reason"] == said
