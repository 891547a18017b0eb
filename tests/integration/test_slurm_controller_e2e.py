"""The controller's loop on a Slurm cluster, end to end (issue 28): ``fleetmedic run`` with
``kind: slurm`` as a real subprocess against a real slurmctld 22.05 whose slurmd nodes are
test-fleet nodes (real sshd, real reboots: tests/harness/slurmfleet.py), real Ansible,
a real SMTP sink. The only stand-ins are the GPUs (fake NVML) and the kernel log (a file).

Each test asserts what Slurm itself shows (sinfo's state, flags, reason, boot time, the
record in Extra) and what a person would check: a job runs on the repaired node, another
tool's drain is untouched, one email.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import ctlenv
from tests.harness.ctlbench import fast_playbooks, pool_name
from tests.harness.ctlenv import ControllerProcess, wait_until
from tests.harness.slurmfleet import new_boot
from tests.harness.smtp import body_text

pytestmark = [pytest.mark.slow]

NHC = "NHC: check_hw_ib: mlx5_0 port 1 is down"
AGENT = (
    "fleetmedic agent --node-name $(hostname) --slurm-conf /etc/slurm/slurm.conf"
    " --config /dev/null --kernel-log /var/lib/fleetmedic-test/kern.log --vendor none --once"
)


@pytest.fixture
def sf(slurm_fleet):
    """The session's Slurm fleet, prepared for the checks, every node idle before/after."""
    slurm_fleet.reset()
    ctlenv.prepare_nodes(slurm_fleet.fleet)
    yield slurm_fleet
    slurm_fleet.reset()


class Run:
    """Controllers started by one test, stopped at its end (their log shown on failure)."""

    def __init__(self, sf, workdir: Path) -> None:
        self.sf, self.workdir, self.procs = sf, workdir, []

    def config(self, smtp=None, **overrides) -> Path:
        slurm = {
            "conf": str(self.sf.slurm.conf),
            "poll_interval": 1,
            "state_dir": str(self.workdir / "state"),
        }
        over = {"kind": "slurm", "slurm": slurm, **overrides}
        return ctlenv.write_config(self.workdir, None, self.sf.fleet, "slurm", smtp, over)

    def start(self, config: Path) -> ControllerProcess:
        p = ControllerProcess(config, self.workdir / f"controller-{len(self.procs)}.log")
        self.procs.append(p.start())
        return p

    def stop(self) -> None:
        for p in self.procs:
            p.stop()


@pytest.fixture
def run(sf, tmp_path):
    r = Run(sf, tmp_path)
    yield r
    r.stop()
    for p in r.procs:  # (captured: pytest shows it when the test failed)
        print(f"--- {p.log}\n{p.tail(120)}")


def record(sf, node: str) -> dict[str, str]:
    extra = sf.sinfo(node)["extra"]
    return (json.loads(extra).get("fleetmedic") or {}) if extra else {}


def history(sf, node: str) -> list[dict]:
    return json.loads(record(sf, node).get("fleetmedic.io/history") or "[]")


def flight(sf, node: str) -> tuple[str, str]:
    """The phase and status of the node's in-flight record, as slurmctld has it."""
    f = json.loads(record(sf, node).get("fleetmedic.io/in-flight") or "{}")
    return f.get("phase", ""), f.get("status", "")


def in_service(n: dict) -> bool:
    return n["state"] == "idle" and not n["state_flags"] and not n["reason"]


def run_job(sf, node: str, timeout: float = 120) -> str:
    out = f"/tmp/job-{uuid.uuid4().hex[:8]}.out"
    sf.slurm.run(
        "sbatch", "--wait", "--gres=gpu:2", "-w", node, "--chdir=/tmp", "-o", out,
        "--wrap", 'echo "host=$(hostname)"', timeout=timeout,
    )  # fmt: skip
    return sf.node(node).ssh(f"cat {out}").stdout.strip()


def agent_drains_xid79(sf, index: int) -> str:
    """The real agent inside the node reads a Xid 79 and drains the node with our reason."""
    node = sf.node(index)
    ctlenv.xid79(node)  # `fleetmedic check` fails until the next boot
    out = json.loads(node.ssh(AGENT, timeout=120).stdout)
    assert out["kernel_findings_acted"] == 1, out
    reason = sf.sinfo(node.name)["reason"]
    assert reason.startswith("fleetmedic: reboot: xid.79"), reason
    return node.name


@pytest.mark.slurm_contract  # the one end-to-end repair every release runs, 26.05 too
def test_xid79_is_rebooted_verified_and_resumed_and_a_foreign_drain_is_untouched(sf, run):
    """The issue's first two scenarios: n1 drained by the agent for Xid 79 is rebooted by
    our role, verified over SSH and resumed, and a job then runs on it; n2, drained by NHC,
    is never touched (reason, Extra and state as NHC left them), also in `status`."""
    n2 = sf.node(2).name
    sf.slurm.run("scontrol", "update", f"nodename={n2}", "state=drain", f"reason={NHC}")
    n1 = agent_drains_xid79(sf, 1)
    boot_before, id_before = sf.boot_time(n1), sf.node(1).boot_id()
    cfg = run.config()
    proc = run.start(cfg)
    sf.wait_node(n1, in_service, "repaired and resumed", timeout=420)
    assert proc.alive, proc.tail()
    assert sf.node(1).boot_id() != id_before, "rebooted by our role"
    assert new_boot(sf.sinfo(n1), boot_before), "slurmd registered the new boot"
    steps = [(h.get("step"), h.get("result")) for h in history(sf, n1)]
    assert ("reboot", "pass") in steps, steps
    assert run_job(sf, n1) == f"host={n1}"
    info = sf.sinfo(n2)
    assert info["reason"] == NHC and "DRAIN" in info["state_flags"] and info["extra"] == ""
    status = ctlenv.cli(cfg, "status", "--all", "--json")
    assert status.returncode == 0, status.stderr
    rows = {r["name"]: r for r in json.loads(status.stdout)}
    assert rows[n1]["state"] == "healthy" and rows[n1]["fenced_by"] == "", rows[n1]
    assert rows[n2]["state"] == "healthy" and rows[n2]["fenced_by"] == "foreign_nhc", rows[n2]
    table = ctlenv.cli(cfg, "status").stdout  # (without --all: a foreign drain is shown)
    assert n2 in table and "foreign_nhc" in table, table
    # the node's timeline: its attempts from Extra, its Events from the state directory
    hist = ctlenv.cli(cfg, "history", n1, "--json")
    assert hist.returncode == 0, hist.stderr
    said = json.dumps(json.loads(hist.stdout))
    assert "Repaired" in said and "reboot" in said, said[:2000]


def test_the_drain_waits_for_a_running_job_then_slurm_reboots_the_node(sf, run):
    """n3 runs a job when the agent drains it: the controller waits (DRAINING) until the
    job ends by itself, then reboots through Slurm (reboot_via: slurm: RebootProgram,
    nextstate=down), verifies and resumes. The job completed; the node booted once."""
    n3 = sf.node(3).name
    job = sf.slurm.run(
        "sbatch", "--parsable", "-w", n3, "--chdir=/tmp", "--wrap", "sleep 25"
    ).strip()  # fmt: skip
    sf.wait_node(n3, lambda n: n["state"] in ("allocated", "mixed"), "running the job", 60)
    agent_drains_xid79(sf, 3)
    boot_before = sf.boot_time(n3)
    started = time.time()
    run.start(run.config(ladder={"reboot_via": "slurm"}, safety={"drain": {"timeout": 120}}))
    sf.wait_node(n3, in_service, "repaired through Slurm and resumed", timeout=480)
    assert time.time() - started >= 15, "the node was taken before the job ended"
    state = sf.slurm.run("sacct", "-n", "-X", "-j", job, "-o", "State", check=False)
    squeue = sf.slurm.run("squeue", "-h", "-j", job, check=False)
    assert "RUNNING" not in squeue
    assert "CANCELLED" not in state and "REQUEUED" not in state, state
    assert new_boot(sf.sinfo(n3), boot_before)
    steps = [(h.get("step"), h.get("result")) for h in history(sf, n3)]
    assert ("reboot", "pass") in steps, steps


def test_a_node_no_reboot_cures_climbs_to_manual_with_one_email(sf, run, smtp_sink, tmp_path):
    """A GPU lost for good: reboot, then reimage, then manual, with exactly one email naming
    the Slurm node; the node stays drained with our reason. The reimage rung runs the real
    reimage.yml: the node's features say ``nvidia`` (a Slurm node has no gpu-vendor label:
    model/gpuvendor.py), so the driver packages are reinstalled from the test apt
    repository and the node rebooted into them (issue 37's second defect: the rung used to
    fail at once, "no fleetmedic.io/gpu-vendor label")."""
    node = sf.node(1)
    ctlenv.prepare_apt_repo([node])
    ctlenv.gpu_lost(node)
    n1 = node.name
    sf.slurm.run(
        "scontrol", "update", f"nodename={n1}", "availablefeatures=nvidia,ib",
        "activefeatures=nvidia,ib",
    )  # fmt: skip
    try:
        _climbs_to_manual(sf, run, smtp_sink, node)
    finally:
        sf.slurm.run(
            "scontrol", "update", f"nodename={n1}", "availablefeatures=", "activefeatures="
        )
        node.ssh("rm -f /var/lib/fleetmedic/nvidia-driver-reinstall.json", check=False)


def _climbs_to_manual(sf, run, smtp_sink, node) -> None:
    n1 = node.name
    sf.slurm.run(
        "scontrol", "update", f"nodename={n1}", "state=drain",
        "reason=fleetmedic: reboot: gpu 1 lost",
    )  # fmt: skip
    boots = node.boots
    cfg = run.config(smtp_sink, ladder={"order": ["reboot", "reimage", "manual"]})
    run.start(cfg)
    wait_until(lambda: sf.sinfo(n1)["reason"].startswith("fleetmedic: manual: "), 900, "manual")
    smtp_sink.wait_for(1, timeout=120)
    time.sleep(5)  # (a second email would come right after the first)
    assert len(smtp_sink.messages) == 1
    assert n1 in body_text(smtp_sink.messages[0])
    steps = [(h.get("step"), h.get("result")) for h in history(sf, n1)]
    assert steps[:2] == [("reboot", "fail"), ("reimage", "fail")], steps
    marker = json.loads(node.ssh("cat /var/lib/fleetmedic/nvidia-driver-reinstall.json").stdout)
    assert marker["request_id"].startswith("e1-reimage1-"), marker  # this attempt's reinstall
    installed = node.ssh("dpkg-query -W -f '${Version}' fm-nvidia-kernel").stdout
    assert installed == "550.1-1", installed
    assert node.boots == boots + 2, "one boot in the reboot step, one in reimage"
    assert "DRAIN" in sf.sinfo(n1)["state_flags"], "still out of service"
    # the on-call engineer replaces the GPU and releases the node: Slurm resumes it
    ctlenv.healthy(node)
    r = ctlenv.cli(cfg, "release", n1)
    assert r.returncode == 0, r.stderr
    sf.wait_node(n1, in_service, "released and resumed", timeout=60)
    assert history(sf, n1)[-1]["result"] == "released"
    time.sleep(3)  # (three polls: a released node is not picked up again)
    assert in_service(sf.sinfo(n1)) and len(smtp_sink.messages) == 1
    r = ctlenv.cli(cfg, "release", "no-such-node")
    assert r.returncode != 0 and r.stderr.startswith("fleetmedic: error: ")
    assert len(r.stderr.strip().splitlines()) == 1


def test_sigkill_and_a_slurmctld_restart_while_the_node_reboots_reboot_it_once(sf, run):
    """The controller is SIGKILLed while the node reboots; slurmctld is killed and restarted,
    a new controller starts: the node is rebooted once (one new boot id, one boot counted by
    the fleet's supervisor), verified and resumed, and nothing of its record is lost."""
    n1 = agent_drains_xid79(sf, 1)
    node = sf.node(1)
    boots = [node.boot_id()]
    boots_before = node.boots
    cfg = run.config()
    first = run.start(cfg)
    wait_until(lambda: flight(sf, n1) == ("reboot", "running"), 240, "rebooting", interval=0.1)
    wait_until(
        lambda: node.boots > boots_before or node.status()["state"] != "running",
        120,
        "the node going down for the reboot",
    )
    first.kill9()
    sf.slurm.restart_ctld(kill=True)
    run.start(cfg)
    sf.wait_node(n1, in_service, "repaired and resumed after the restarts", timeout=480)
    boots.append(node.boot_id())
    assert boots[0] != boots[1]
    reboots = [h for h in history(sf, n1) if h.get("step") == "reboot"]
    assert [h.get("result") for h in reboots] == ["pass"], reboots
    assert node.boots == boots_before + 1, f"{node.boots - boots_before} boots (one wanted)"


def test_a_crash_before_slurmctld_saved_the_reboot_record_never_reboots_twice(sf, run):
    """Issue 42's item 6 and 37's item 5, made deterministic: slurmctld's saves are frozen
    (its StateSaveLocation read-only: tests/harness/slurm.py) from the first phase of the
    repair on, so every record the controller writes after that is lost when slurmctld is
    killed. The controller must not begin the reboot while the record saying it began is
    unsaved: it waits until that record is in slurmctld's node_state file (the Slurm
    kind's settle, kinds/slurm.py, with adapters/slurmsave.py). It is SIGKILLed while it
    waits, slurmctld is killed and restarted from the frozen state, and a new controller
    repairs the node: exactly one boot. Without the check (no wait, or the old fixed 6 s) the
    reboot runs on an unsaved record, the restarted slurmctld forgets it, and the next
    controller reboots the node a second time."""
    n1 = agent_drains_xid79(sf, 1)
    # The agent's drain must be on disk before the freeze, or the crash loses it too and
    # the restarted slurmctld shows the node in service with nothing to repair. A barrier,
    # not wait_saved(<its reason>): 24.11 keeps a resumed node's last reason in node_state,
    # so after an earlier test's drain of this node the reason is there already and
    # wait_saved returned before this drain was saved (issue 38: reboots == [] on 24.11).
    sf.slurm.save_barrier()
    node = sf.node(1)
    boots = node.boots
    cfg = run.config()
    first = run.start(cfg)
    wait_until(lambda: flight(sf, n1)[0] in ("diagnose", "drain"), 240, "begun", interval=0.1)
    with sf.slurm.saves_frozen():

        def went_on() -> bool:
            assert first.alive, first.tail()
            held = "waiting for slurmctld to save" in first.log.read_text()
            return held or node.boots > boots or node.status()["state"] != "running"

        wait_until(went_on, 300, "the reboot begun, or held until its record is saved")
        first.kill9()
        sf.slurm.stop_proc("slurmctld", kill=True)
    sf.slurm.start_ctld()
    sf.slurm.wait_ready()
    assert flight(sf, n1) != ("reboot", "running"), "the crash lost what came after the freeze"
    back = sf.sinfo(n1)
    assert "DRAIN" in back["state_flags"], f"the drain saved before the freeze was lost: {back}"
    run.start(cfg)
    sf.wait_node(n1, in_service, "repaired after the crash", timeout=480)
    reboots = [h.get("result") for h in history(sf, n1) if h.get("step") == "reboot"]
    assert reboots == ["pass"], reboots
    assert node.boots == boots + 1, f"{node.boots - boots} boots (one wanted)"


@pytest.mark.parametrize(
    "rts, who", [(2, "slurm"), (1, "slurm"), (0, "slurm"), (1, "person")], ids=str
)
def test_a_node_back_from_slurms_reboot_is_released_only_by_a_person(sf, run, rts, who):
    """Issue 37's first defect. The controller asks Slurm for the reboot (``reboot_via:
    slurm``) and is SIGKILLed; the node comes back DOWN with ``<ours> : reboot issued :
    reboot complete``; its slurmd then registers again (a slurmd restart). With
    ReturnToService=2 Slurm puts it back in service and clears our reason, as a person's
    ``scontrol update state=resume`` would: the next controller must drain it again with
    our reason, verify it and only then resume it, never record it released. With 1 and 0
    Slurm leaves it DOWN with our reason and the next controller verifies it. A person's
    resume (here with 1) is a release: the next controller ends the repair and leaves the
    node in service, unverified, as the person chose."""
    sf.slurm.set_return_to_service(rts)
    try:
        _back_from_slurms_reboot(sf, run, rts, who)
    finally:
        sf.slurm.set_return_to_service(2)


def _back_from_slurms_reboot(sf, run, rts: int, who: str) -> None:
    n1 = agent_drains_xid79(sf, 1)
    node = sf.node(1)
    boots = node.boots
    cfg = run.config(ladder={"reboot_via": "slurm"})
    first = run.start(cfg)
    asked = {"REBOOT_REQUESTED", "REBOOT_ISSUED"}
    sf.wait_node(n1, lambda n: bool(asked & set(n["state_flags"])), "asked to reboot", 300)
    first.kill9()
    sf.wait_node(n1, lambda n: n["reason"].endswith(": reboot complete"), "back", 180)
    assert node.boots == boots + 1
    started = sf.sinfo(n1)["slurmd_start_time"]
    sf.slurm.stop_slurmd(n1)
    # slurmd's start time counts whole seconds: a restart within the second of the boot's
    # start would not show as a new registration (seen on a quiet machine)
    while time.time() < started + 1.5:
        time.sleep(0.1)
    sf.slurm.start_slurmd(n1)  # slurmd registers again
    sf.wait_node(n1, lambda n: n["slurmd_start_time"] != started, "registered again", 120)
    n = sf.sinfo(n1)  # (Slurm decides on the registration that set the start time)
    if rts == 2:
        assert in_service(n), f"returned to service by Slurm, as issue 37 saw it: {n}"
    else:
        assert n["state"] == "down" and n["reason"].startswith("fleetmedic: reboot: "), n
    if who == "person":
        sf.slurm.run("scontrol", "update", f"nodename={n1}", "state=resume")
        sf.wait_node(n1, in_service, "resumed by a person", 60)
    second = run.start(cfg)

    def results() -> list[tuple[str, str]]:
        assert second.alive, second.tail()
        return [(h.get("step"), h.get("result")) for h in history(sf, n1)]

    if who == "person":
        wait_until(lambda: ("reboot", "released") in results(), 120, "released")
        assert in_service(sf.sinfo(n1)) and node.boots == boots + 1
        return

    def repaired() -> bool:
        got = results()
        assert ("reboot", "released") not in got, f"Slurm's return taken for a person's: {got}"
        return ("reboot", "pass") in got and in_service(sf.sinfo(n1))

    wait_until(repaired, 300, "verified and resumed by the controller")
    assert results() == [("reboot", "pass")]
    assert node.boots == boots + 1, "verified, not rebooted again"
    if rts == 2:
        assert "fenced again" in second.log.read_text(), second.tail()


def test_one_controller_serves_a_kubernetes_and_a_slurm_cluster(sf, run, kube, tmp_path):
    """Mixed fleets: one `fleetmedic run` with a Kubernetes cluster and a Slurm cluster,
    a repair in each (fast stand-in plays: this is about the loop, not reboots). Log lines,
    the audit lines and `status` name the cluster; each keeps its own state where its kind
    keeps it (the Node's annotations; the Slurm node's Extra)."""
    pool = pool_name("mixed")
    [k8s_node] = ctlenv.register(
        kube,
        sf.fleet,
        pool,
        nodes=[sf.node(2)],
        taints={f"{pool}-2": [ctlenv.repair_taint("reboot")]},
    )
    n1 = sf.node(1).name
    sf.slurm.run(
        "scontrol", "update", f"nodename={n1}", "state=drain", "reason=fleetmedic: reboot: test"
    )
    slurm = {"conf": str(sf.slurm.conf), "poll_interval": 1, "state_dir": str(tmp_path / "st")}
    cfg = ctlenv.write_config(
        tmp_path,
        kube,
        sf.fleet,
        pool,
        overrides={
            "ansible": {"playbook_dir": fast_playbooks(tmp_path)},
            "ladder": {"reboot": {"phases": ["drain", "verify"]}},
            "clusters": [
                {"name": "k8s", "kube": {"kubeconfig": str(kube.kubeconfig)}},
                {"name": "hpc", "kind": "slurm", "slurm": slurm},
            ],
        },
    )
    try:
        _mixed(sf, run, kube, cfg, k8s_node, n1)
    finally:
        kube.request("DELETE", f"/api/v1/nodes/{k8s_node}")


def _mixed(sf, run, kube, cfg: Path, k8s_node: str, n1: str) -> None:
    proc = run.start(cfg)
    sf.wait_node(n1, in_service, "repaired in the Slurm cluster", timeout=180)

    def k8s_repaired() -> bool:
        assert proc.alive, proc.tail(40)
        return [(a["step"], a["result"]) for a in ctlenv.history(kube, k8s_node)] == [
            ("reboot", "pass")
        ] and not ctlenv.node(kube, k8s_node)["spec"].get("taints")

    wait_until(k8s_repaired, 180, "the Kubernetes node repaired")
    assert [(h["step"], h["result"]) for h in history(sf, n1)] == [("reboot", "pass")]
    log = proc.log.read_text()
    assert f"[k8s] {k8s_node}: " in log and f"[hpc] {n1}: " in log, proc.tail(40)
    audits = [json.loads(line[line.index("{") :]) for line in log.splitlines() if '"audit"' in line]
    assert {(a["cluster"], a["node"]) for a in audits} >= {("k8s", k8s_node), ("hpc", n1)}
    status = ctlenv.cli(cfg, "status", "--all", "--json")
    assert status.returncode == 0, status.stderr
    seen = {(r["cluster"], r["name"]) for r in json.loads(status.stdout)}
    assert {("k8s", k8s_node), ("hpc", n1)} <= seen


def test_a_job_that_outlasts_the_drain_is_requeued_when_the_profile_says_force(sf, run):
    """The other choice of the issue's n3: the job runs past `safety.drain.timeout` and the
    profile says `pdb_blocked: force`, so the controller requeues it (Slurm puts it back in
    the queue) and the repair goes ahead; the node is rebooted, verified and resumed."""
    n3 = sf.node(3).name
    job = sf.slurm.run(
        "sbatch", "--parsable", "--requeue", "-w", n3, "--chdir=/tmp", "--wrap", "sleep 600"
    ).strip()  # fmt: skip
    sf.wait_node(n3, lambda n: n["state"] in ("allocated", "mixed"), "running the job", 60)
    agent_drains_xid79(sf, 3)
    id_before = sf.node(3).boot_id()
    run.start(run.config(safety={"drain": {"timeout": 5, "pdb_blocked": "force"}}))
    sf.wait_node(n3, in_service, "repaired after the requeue and resumed", timeout=420)
    assert sf.node(3).boot_id() != id_before
    requeued = sf.slurm.run("scontrol", "show", "job", job)
    assert "Restarts=1" in requeued, requeued  # requeued once, by us
    # the drain's audit line says what it did
    log = run.procs[0].log.read_text().splitlines()
    audits = [json.loads(line[line.index("{") :]) for line in log if '"audit"' in line]
    drained = [a.get("message", "") for a in audits if a["what"] == "drain"]
    assert any(f"1 requeued ({job})" in m for m in drained), drained
