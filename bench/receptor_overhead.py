#!/usr/bin/env python3
"""The receptor executor's price (issue 17): the same playbook on the same node through an
execution node of the Receptor mesh against the local executor, in the same run. Target:
per run <= 1.3x local. Then a batch spread over two execution nodes against the same batch
run locally: both wall times and the controller process's own CPU time.

Usage::

    .venv/bin/python bench/receptor_overhead.py                  # 10 pairs, a batch of 100
    .venv/bin/python bench/receptor_overhead.py --pairs 5 --batch 40
    .venv/bin/python bench/receptor_overhead.py --smoke          # 1 pair, a batch of 4

All real: a 3-node nspawn fleet (real sshd), the test mesh of tests/harness/mesh.py (the
controller's Receptor node and two execution nodes in network namespaces of their own,
mutual TLS, signed work; exec-1 reaches node-1, exec-2 node-2 and node-3), and
``fleetmedic.adapters.runner.run_playbook`` as the controller calls it (``via=`` for the
mesh: ``ansible-runner transmit``, a work unit, ``ansible-runner process``, release).
The play is diagnose-sized (a few commands over SSH, facts off): what is measured is the
executor's cost around a run, not the payload. Pairs are interleaved (local, then mesh)
so load drifts hit both alike. CPU is this process and its children (ansible-runner's
ansible-playbook) from ``getrusage``; on the mesh the playbook's own CPU is spent on the
execution nodes, which is the point of it.
"""

from __future__ import annotations

import resource
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

from fleetmedic.adapters import runner  # noqa: E402
from fleetmedic.model.config import AnsibleConfig, ReceptorConfig  # noqa: E402
from tests.harness.fleet import start_fleet  # noqa: E402
from tests.harness.mesh import start_mesh  # noqa: E402

PLAY = [
    {
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": name, "ansible.builtin.command": cmd, "changed_when": False}
            for name, cmd in (
                ("Kernel", "uname -r"),
                ("Uptime", "cat /proc/uptime"),
                ("Boot id", "cat /proc/sys/kernel/random/boot_id"),
            )
        ],
    }
]
CONCURRENCY = 8  # runs in flight during the batch (the controller's default pool size)


def cpu() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args()
    if args.smoke:
        args.pairs, args.batch = 1, 4
    work = Path(tempfile.mkdtemp(prefix="fmbench-receptor-"))
    with start_fleet(3, prefix="rcpt") as fleet:
        mesh = start_mesh({"exec-1": [fleet.node(1)], "exec-2": [fleet.node(2), fleet.node(3)]})
        try:
            s = mesh.settings()
            mesh_cfg = ReceptorConfig(socket=s["socket"], tls_client=s["tls_client"])
            settings = AnsibleConfig(
                playbook_dir=ROOT / "playbooks",
                config_file=ROOT / "ansible.cfg",
                run_dir=work / "runs",
                evidence_dir=work / "evidence",
                ssh_key_file=fleet.private_key,
                known_hosts_file=fleet.known_hosts,
                remote_user="root",
                job_timeout=300,
            )

            def target(i: int) -> runner.Target:
                return runner.Target(fleet.node(i).name, fleet.node(i).address)

            def run(i: int, via: str | None) -> float:
                t0 = time.monotonic()
                r = runner.run_playbook(
                    PLAY,
                    [target(i)],
                    settings,
                    timeout=120,
                    via=runner.Via(via, mesh_cfg) if via else None,
                )
                took = time.monotonic() - t0
                if r.hosts.get(fleet.node(i).name, runner.HostResult("none")).status != "ok":
                    raise SystemExit(f"run {r.run_id} ({r.executor}) failed: {r.hosts}")
                return took

            run(1, None), run(1, "exec-1")  # warm both paths (imports, SSH, the mesh)
            local, remote = [], []
            for _ in range(args.pairs):
                local.append(run(1, None))
                remote.append(run(1, "exec-1"))

            def batch(via_for) -> tuple[float, float]:
                jobs = [(1 + i % 3, via_for(1 + i % 3)) for i in range(args.batch)]
                c0, t0 = cpu(), time.monotonic()
                with ThreadPoolExecutor(CONCURRENCY) as ex:
                    list(ex.map(lambda j: run(*j), jobs))
                return time.monotonic() - t0, cpu() - c0

            spread = batch(lambda i: "exec-1" if i == 1 else "exec-2")
            here = batch(lambda i: None)
        finally:
            mesh.stop()
    lm, rm = statistics.median(local), statistics.median(remote)
    print(
        f"receptor_overhead: {args.pairs} interleaved pair(s) on node-1, "
        f"then a batch of {args.batch}"
    )
    print(
        f"  one run: local median {lm:.2f} s, through exec-1 {rm:.2f} s: "
        f"ratio {rm / lm:.2f}x (target <= 1.3x)"
    )
    print(
        f"  batch of {args.batch} over 3 nodes, {CONCURRENCY} at a time: "
        f"local {here[0]:.1f} s wall, "
        f"{here[1]:.1f} s CPU here; over exec-1 and exec-2 {spread[0]:.1f} s wall "
        f"(ratio {spread[0] / here[0]:.2f}x), {spread[1]:.1f} s CPU here "
        f"(ratio {spread[1] / here[1]:.2f}x)"
    )
    return _common.verdict([("receptor run <= 1.3x local (median)", rm / lm <= 1.3)], args.smoke)


if __name__ == "__main__":
    sys.exit(main())
