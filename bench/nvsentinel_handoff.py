#!/usr/bin/env python3
"""NVSentinel's hand-off: from an ExternalRemediationRequest's release to fleetmedic's first
playbook start, against fleetmedic's own taint -> playbook start in the same run. Targets
(issue 41): release -> playbook p50 <= 2x taint -> playbook p50; 0 nodes acted on by both
NVSentinel and fleetmedic; 0 requests left without a Complete condition once their ladder
ended, with the controller SIGKILLed while they run.

Usage::

    .venv/bin/python bench/nvsentinel_handoff.py              # 10 trials of each, 2 kills
    .venv/bin/python bench/nvsentinel_handoff.py --trials 20 --kills 3
    .venv/bin/python bench/nvsentinel_handoff.py --smoke      # 1 trial of each, 1 kill

Setup (all real but NVSentinel): a test control plane (tests/harness/kube.py) with
NVSentinel's own CRD (tests/data/nvsentinel), the test stand-in playing NVSentinel's part
(tests/harness/nvsentinel.py), and ``fleetmedic run`` as a subprocess with
``nvsentinel.enabled``, running the fast stand-in playbooks of tests/harness/ctlbench.py (a
ping and a short sleep). The Nodes have no SSH host behind them (their InternalIP is
127.0.0.1, where nothing listens on port 22), so every playbook fails at once; only its
start is timed, and each ladder climbs to ``manual`` in seconds (no SMTP: the escalation
is recorded), which is when the request must say Complete=False.

- taint -> playbook: a healthy Node gets ``fleetmedic.io/repair=reboot`` (one RV-guarded
  write, as the agent fences); the clock runs from that write's return until the controller
  creates the run's private_data_dir (ansible-runner starts the playbook in it; polled every
  5 ms). That is the baseline.
- release -> playbook: the stand-in quarantines a Node, marks it drained, creates the request
  as NVSentinel's template does and initializes it (not timed), then releases it as janitor
  does (the Node write with its taint and managed=false, then
  ``NVSentinelOwnershipReleased=True``); the clock runs from that last write's return until
  the run's directory appears. The responder must see the condition (its ERR watch), check
  the Node's marks, and write the claim; the loop then starts the ladder.
- acted on by both: Nodes NVSentinel quarantined and is still draining (state label) that
  also carry fleetmedic's repair taint (its agent fenced them too): none may get a playbook
  run; and no handed-over Node may have a run of ours before its release.
- the kill: while handed-over ladders climb, the controller is SIGKILLed (with everything it
  started) and started again, ``--kills`` times; at the end every request whose Node is in
  ``manual`` must carry ``ExternalRemediationComplete`` from fleetmedic.

Each trial starts once the controller runs no playbook (an earlier trial's ansible-playbook
would otherwise be timed too). The load average is printed with the figures.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

from tests.harness.ctlbench import fast_playbooks  # noqa: E402
from tests.harness.ctlenv import free_port, load_average, process_tree  # noqa: E402
from tests.harness.kube import KubeCluster  # noqa: E402
from tests.harness.nvsentinel import (  # noqa: E402
    COMPLETE,
    NVSentinel,
    health_event,
    install_crd,
)

VENV_BIN = Path(sys.executable).parent
POOL_LABEL = "fleetmedic.test/pool"
REPAIR = {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}


def write_config(work: Path, kubeconfig: str, pool: str) -> Path:
    key = work / "id_dummy"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (work / "known_hosts").touch()
    books = ("diagnose", "reset", "reboot", "verify", "restore")
    playbooks = fast_playbooks(work)  # (a ping and a short sleep: only the start is timed)
    data = {
        "kube": {"kubeconfig": kubeconfig, "label_selector": f"{POOL_LABEL}={pool}"},
        "ansible": {
            "playbook_dir": playbooks,
            "config_file": str(ROOT / "ansible.cfg"),
            "run_dir": str(work / "runs"),
            "evidence_dir": str(work / "evidence"),
            "remote_user": "root",
            "ssh_key_file": str(key),
            "known_hosts_file": str(work / "known_hosts"),
            "job_timeout": 60,
        },
        "ladder": {
            "playbooks": {
                **{b: {"playbook": f"{b}.yml", "timeout": 30} for b in books},
                "diagnostics": {"playbook": "quarantine.yml", "timeout": 900},
                "reinstall_nvidia": {"playbook": "reimage.yml", "timeout": 30},
                "reinstall_amd": {"playbook": "reimage.yml", "timeout": 30},
            }
        },
        "safety": {
            "max_concurrent": 50,
            "max_concurrent_percent": 100,
            "min_healthy": 0,
            "breaker": {"enabled": False},
            "pause_configmap": f"kube-system/fleetmedic-{pool}",
        },
        "metrics": {"address": "127.0.0.1", "port": free_port()},
        # node Leases in kube-system, short so a killed controller's lapse soon
        "leader_election": {
            "enabled": False,
            "namespace": "kube-system",
            "lease_duration": 6,
            "renew_deadline": 4,
            "retry_period": 1,
            "node_lease_duration": 8,
        },
        "nvsentinel": {"enabled": True},
    }
    path = work / "controller.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start(config: Path, log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [str(VENV_BIN / "fleetmedic"), "run", "--config", str(config)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill9(p: subprocess.Popen) -> None:
    """SIGKILL the controller and every process it started, as systemd kills a cgroup."""
    os.kill(p.pid, signal.SIGSTOP)
    for pid in process_tree(p.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait(10)


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def wait_for(pred, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise SystemExit(f"timed out waiting for {what}")


def up(p: subprocess.Popen, log: Path) -> bool:
    text = log.read_text(errors="replace")
    if p.poll() is not None:
        raise SystemExit(f"the controller exited: {text.strip().splitlines()[-1:]}")
    return "watching" in text


def playbooks_running(pid: int) -> int:
    return sum(len(p.read_text().split()) for p in Path(f"/proc/{pid}/task").glob("*/children"))


def quiet(pid: int, timeout: float = 120.0) -> None:
    """Until the controller runs no playbook for 0.5 s."""
    deadline, since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if playbooks_running(pid):
            since = None
        elif since is None:
            since = time.monotonic()
        elif time.monotonic() - since >= 0.5:
            return
        time.sleep(0.05)
    raise SystemExit("the controller never stopped running playbooks")


def runs_of(run_dir: Path, node: str) -> list[str]:
    if not run_dir.exists():
        return []
    return [d for d in os.listdir(run_dir) if f"-{node}-" in d]  # (runner.new_run_id's form)


def first_run(run_dir: Path, node: str, timeout: float = 30.0) -> float:
    """time.monotonic() when the first run directory of ``node`` was seen (5 ms polls)."""
    return wait_for(lambda: runs_of(run_dir, node) and time.monotonic(), timeout, node, 0.005)


def taint(kube: KubeCluster, node: str) -> None:
    n = kube.request("GET", f"/api/v1/nodes/{node}")
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {
            "metadata": {"resourceVersion": n["metadata"]["resourceVersion"]},
            "spec": {"taints": [*(n["spec"].get("taints") or []), REPAIR]},
        },
        content_type="application/merge-patch+json",
    )


def state_of(kube: KubeCluster, node: str) -> str:
    for t in kube.request("GET", f"/api/v1/nodes/{node}")["spec"].get("taints") or []:
        if t["key"] == REPAIR["key"]:
            return t["value"]
    return "healthy"


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--held", type=int, default=3, help="nodes NVSentinel works on, fenced by us")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory and logs")
    args = ap.parse_args()
    if args.smoke:
        args.trials, args.kills, args.held = 1, 1, 1
    work = Path(tempfile.mkdtemp(prefix="fleetmedic-nvsentinel-"))
    pool = f"nvb{uuid.uuid4().hex[:5]}"
    kube = KubeCluster(work / "kube").start()
    nv = NVSentinel(kube)
    procs: list[subprocess.Popen] = []
    try:
        install_crd(kube)
        nv.start()
        names = [f"{pool}-{i}" for i in range(2 * args.trials + args.held)]
        kube.make_nodes(names, labels={POOL_LABEL: pool}, addresses=["127.0.0.1"] * len(names))
        base_nodes = names[: args.trials]
        handed_nodes = names[args.trials : 2 * args.trials]
        held_nodes = names[2 * args.trials :]
        cfg = write_config(work, kube.kubeconfig, pool)
        log = work / "controller.log"
        procs.append(start(cfg, log))
        wait_for(lambda: up(procs[-1], log), 60, "the controller up")
        run_dir = work / "runs"

        # NVSentinel works on these (quarantined, draining) and our agent fenced them too
        for n in held_nodes:
            nv.quarantine(n)
            nv.set_state(n, "draining", "drain")
            taint(kube, n)

        base: list[float] = []
        handoff: list[float] = []
        early: dict[str, bool] = {}
        for b, h in zip(base_nodes, handed_nodes, strict=True):
            quiet(procs[-1].pid)
            t0 = time.monotonic()
            taint(kube, b)
            base.append(first_run(run_dir, b) - t0)
            quiet(procs[-1].pid)
            nv.quarantine(h)
            nv.set_state(h, "drain-succeeded", "drain")
            req = nv.create_request(health_event(h))
            nv.set_state(h, "remediating", "remediate")
            nv.initialize(req)
            early[h] = bool(runs_of(run_dir, h))  # ours while NVSentinel still owned it
            t1 = nv.release(req, initialize=False)
            handoff.append(first_run(run_dir, h) - t1)

        # the kill test: ladders climbing to manual while the controller is killed
        for _ in range(args.kills):
            time.sleep(1.5)
            kill9(procs.pop())
            procs.append(start(cfg, log))
            wait_for(lambda: up(procs[-1], log), 60, "the controller up again")
        done = wait_for(
            lambda: all(state_of(kube, h) == "manual" for h in handed_nodes) and handed_nodes,
            300,
            "every handed-over ladder ended in manual",
            interval=0.5,
        )
        assert done

        def answered(name: str) -> bool:
            c = nv.condition(name, COMPLETE) or {}
            return c.get("status") in ("True", "False") and c.get("message", "").startswith(
                "fleetmedic:"
            )

        reqs = list(nv.made)
        try:
            wait_for(lambda: all(answered(r) for r in reqs), 60, "every request answered", 0.5)
        except SystemExit:
            pass
        unanswered = [r for r in reqs if not answered(r)]
        held_runs = sum(len(runs_of(run_dir, n)) for n in held_nodes)
        both = {n for n in held_nodes if runs_of(run_dir, n)} | {h for h, e in early.items() if e}

        p50_base, p50_hand = statistics.median(base), statistics.median(handoff)
        ratio = p50_hand / p50_base
        print(
            f"nvsentinel_handoff: {args.trials} trials of each, {args.kills} kills, "
            f"load average {load_average()}"
        )
        print(
            f"  taint -> playbook start (baseline): p50 {p50_base * 1000:.0f} ms, "
            f"max {max(base) * 1000:.0f} ms"
        )
        print(
            f"  ERR release -> playbook start: p50 {p50_hand * 1000:.0f} ms, "
            f"max {max(handoff) * 1000:.0f} ms: ratio {ratio:.2f}x of the baseline (target <= 2)"
        )
        print(
            f"  nodes acted on by both: {len(both)} ({len(held_nodes)} held nodes NVSentinel "
            f"works on had {held_runs} runs of ours; {len(handed_nodes)} handed over)"
        )
        print(
            f"  requests without a Complete condition after their ladder ended: "
            f"{len(unanswered)} of {len(reqs)} (controller SIGKILLed {args.kills}x meanwhile)"
        )
        code = _common.verdict(
            [
                ("release -> playbook p50 <= 2x taint -> playbook p50", ratio <= 2.0),
                ("0 nodes acted on by both", not both),
                ("0 requests left without Complete after the ladder ended", not unanswered),
            ],
            args.smoke,
        )
    except BaseException:
        print(f"failed; scratch directory and controller log kept in {work}", file=sys.stderr)
        raise
    else:
        if args.keep:
            print(f"  scratch directory and controller log kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        for p in procs:
            stop(p)
        nv.stop()
        kube.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
