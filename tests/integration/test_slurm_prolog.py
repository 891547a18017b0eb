"""deploy/slurm/fleetmedic-slurm-check as the real slurmd's Prolog and HealthCheckProgram
(tests/harness/slurm.py, a cluster of its own with those slurm.conf lines): a healthy
node runs the job; a failing GPU (fake NVML) is drained by the prolog with OUR reason and
the job requeued; an Xid 79 in a node's kernel log is drained by the periodic health
check. Only the GPUs are fake."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import slurm24
from tests.harness.agentenv import FAKES, FLEETMEDIC, ROOT, banner, h100, wait_until, xid_line
from tests.harness.slurm import SlurmCluster

SCRIPT = ROOT / "deploy" / "slurm" / "fleetmedic-slurm-check"
# At debug slurmd logs each prolog's time and slurmctld each scheduling pass: what the job
# story of a job that does not run in time is read from (CI's two 24.11 failures here were
# a prolog failing in a stale tree root, tests/harness/slurm24.py's Root.current)
DEBUG_LOGS = "SlurmctldDebug=debug\nSlurmdDebug=debug\n"


def _setup(tmp_path: Path, nodes: tuple[str, ...], c: SlurmCluster) -> Path:
    """The script beside its env file, and per node a fake NVML scenario, a kernel log
    and a boot id (what a real node has). SLURM_CONFIG is named, as a site whose
    slurm.conf is not /etc/slurm/slurm.conf must: the health check gets no SLURM_CONF.
    With 24.11, slurmd runs the script in the Debian 13 tree: its own fleetmedic."""
    conf = c.conf
    fleetmedic = FLEETMEDIC if c.version == "22.05" else slurm24.FLEETMEDIC
    d = tmp_path / "slurmcheck"
    d.mkdir()
    script = d / SCRIPT.name
    shutil.copy(SCRIPT, script)
    for n in nodes:
        (d / n).mkdir()
        (d / n / "nvml.json").write_text(json.dumps(h100(2)))
        (d / n / "kern.log").write_text(banner() + "[    1.000000] kernel: clean boot\n")
        (d / n / "boot_id").write_text(f"{uuid.uuid4()}\n")
    (d / "fleetmedic-slurm.env").write_text(
        f"FLEETMEDIC={fleetmedic}\nSLURM_CONFIG={conf}\n"
        f"export LD_LIBRARY_PATH={FAKES / 'lib'}\n"
        f"export FLEETMEDIC_FAKE_NVML={d}/${{node}}/nvml.json\n"
        f'FLEETMEDIC_ARGS="--vendor nvidia --expected-gpus 2 --kernel-log {d}/${{node}}/kern.log '
        f'--boot-id-file {d}/${{node}}/boot_id --log-level info"\n'
    )
    return d


def _wait_ran(c: SlurmCluster, job: str, out: Path) -> None:
    """Wait until ``job`` wrote "ran" to ``out``; on a timeout, say what slurmctld and the
    slurmd logs know of it."""
    wait_until(
        "the job to run",
        lambda: out.exists() and "ran" in out.read_text(),
        60,
        0.2,
        on_timeout=lambda: c.job_story(job),
    )


def test_prolog_and_health_check_drain_with_our_reason(slurm_factory, tmp_path):
    script = tmp_path / "slurmcheck" / SCRIPT.name
    c = slurm_factory(
        nodes=2,
        extra_conf=f"Prolog={script}\nHealthCheckProgram={script}\nHealthCheckInterval=5\n"
        + DEBUG_LOGS,
    )
    d = _setup(tmp_path, ("n1", "n2"), c)
    out = tmp_path / "job-%j.out"

    # healthy: the prolog passes and the job runs
    job = c.run("sbatch", "--parsable", "-w", "n1", "-o", str(out), "--wrap", "echo ran").strip()
    done = tmp_path / f"job-{job}.out"
    _wait_ran(c, job, done)
    assert not c.nodes()["n1"]["reason"]

    # a failing GPU: the prolog fences at once with our reason, Slurm requeues the job
    (d / "n1" / "nvml.json").write_text(
        json.dumps(h100(2, **{"1": {"ecc_volatile_uncorrected": 2}}))
    )
    t0 = time.monotonic()
    job = c.run("sbatch", "--parsable", "-w", "n1", "-o", "/dev/null", "--wrap", "true").strip()
    wait_until(
        "the prolog's drain",
        lambda: c.nodes()["n1"]["reason"].startswith("fleetmedic: reboot: gpu problem: "),
        60,
        0.1,
        on_timeout=lambda: f"n1: {c.nodes()['n1']}",
    )
    print(f"\nsbatch -> prolog drain visible: {time.monotonic() - t0:.2f} s")
    n1 = c.nodes()["n1"]
    assert "DRAIN" in n1["state_flags"] and "nvidia.ecc" in n1["reason"], n1["reason"]
    assert (
        json.loads(json.loads(n1["extra"])["fleetmedic"]["fleetmedic.io/last-results"])["gpu"][
            "status"
        ]
        == "problem"
    )
    wait_until(
        "the job requeued",
        lambda: "requeued" in c.run("squeue", "-h", "-j", job, "-o", "%r"),
        30,
        0.2,
    )
    time.sleep(6)  # a health check round later, the reason is still ours
    assert c.nodes()["n1"]["reason"].startswith("fleetmedic: reboot: gpu problem: ")

    # the periodic health check follows n2's kernel log: an Xid 79 drains it
    with open(d / "n2" / "kern.log", "a") as f:
        f.write(xid_line(code=79, bus=0x3B, uptime=200.0))
    t0 = time.monotonic()
    wait_until(
        "the health check's drain",
        lambda: c.nodes()["n2"]["reason"].startswith("fleetmedic: reboot: xid.79 0000:3b:00"),
        60,
        0.2,
    )
    print(f"Xid line -> health check drain visible: {time.monotonic() - t0:.2f} s")


BROKEN = {
    # a wrong SLURM_CONFIG: fleetmedic says so and exits 2
    "config-error": "SLURM_CONFIG=/nonexistent/slurm.conf\n",
    # an install whose package is gone (what a stale chroot gave every prolog in CI):
    # Python's "No module named fleetmedic", exit 1, the status a crash has too
    "crash": "FLEETMEDIC={gone}\n",
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_fleetmedic_never_fails_the_prolog(slurm_factory, tmp_path, broken):
    """fleetmedic cannot run: the script exits 0, so the job runs and no "Prolog error"
    drain lands on the node. Only our fence (fleetmedic's exit 4) fails the prolog."""
    c = slurm_factory(
        nodes=1, extra_conf=f"Prolog={tmp_path / 'slurmcheck' / SCRIPT.name}\n" + DEBUG_LOGS
    )
    d = _setup(tmp_path, ("n1",), c)
    gone = d / "fleetmedic-without-its-package"
    gone.write_text('#!/bin/sh\nexec python3 -I -m fleetmedic "$@"\n')
    gone.chmod(0o755)
    with open(d / "fleetmedic-slurm.env", "a") as f:
        f.write(BROKEN[broken].format(gone=gone))
    out = tmp_path / "job.out"
    job = c.run("sbatch", "--parsable", "-o", str(out), "--wrap", "echo ran").strip()
    _wait_ran(c, job, out)
    assert not c.nodes()["n1"]["reason"]
