#!/usr/bin/env python3
"""The receptor executor's price (issue 17): the same playbook on the same node through an
execution node of the Receptor mesh against the local executor, in the same run. Target:
per run <= 1.3x local. Then a batch spread over two execution nodes against the same batch
run locally: both wall times and the controller process's own CPU time.

Usage::

    .venv/bin/python bench/receptor_overhead.py                  # 10 pairs, a batch of 100
    .venv/bin/python bench/receptor_overhead.py --pairs 5 --batch 40
    .venv/bin/python bench/receptor_overhead.py --smoke          # 1 pair, a batch of 4
    .venv/bin/python bench/receptor_overhead.py --pairs 8 --batch 0  # the pairs only

All real: a 3-node nspawn fleet (real sshd), the test mesh of tests/harness/mesh.py (the
controller's Receptor node and two execution nodes in network namespaces of their own,
mutual TLS, signed work; exec-1 reaches node-1, exec-2 node-2 and node-3), and
``fleetmedic.adapters.runner.run_playbook`` as the controller calls it (``via=`` for the
mesh: ``ansible-runner transmit``, a work unit, ``ansible-runner process``, release).
The play is diagnose-sized (a few commands over SSH, facts off): what is measured is the
executor's cost around a run, not the payload. Pairs are interleaved (local, then mesh)
so load drifts hit both alike; each pair also runs the mesh with ``direct_results``
(results read straight from the execution node, signed with the mesh's work-signing key)
unless ``--direct off``; ``--direct only`` drops the default path. CPU is this process
and its children (ansible-runner's ansible-playbook) from ``getrusage``; on the mesh the
playbook's own CPU is spent on the execution nodes, which is the point of it.
"""

from __future__ import annotations

import logging
import resource
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
from receptorctl.socket_interface import ReceptorControl  # noqa: E402

from fleetmedic.adapters import receptor, runner  # noqa: E402
from fleetmedic.errors import TemporaryError  # noqa: E402
from fleetmedic.model.config import AnsibleConfig, ReceptorConfig  # noqa: E402
from tests.harness.fleet import start_fleet  # noqa: E402
from tests.harness.mesh import Mesh, find_binaries, start_mesh, two_shares  # noqa: E402

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
IN_FLIGHT = "8"  # runs in flight during the batch (the controller's default pool size)


class Tracer:
    """``--trace``: the remote unit's timeline, read every 20 ms from the control sockets
    of our node and of exec-1 (the bench can reach exec-1's socket on the shared file
    system; the controller cannot, which is why this is a bench aid and not a route).
    Marks, in seconds after submit: exec-1 has output (its unit's StdoutSize > 0), our
    node's copy of the state first shows that output (its 1 s status poll), our node's
    copy of the output starts (the stdout copier dialled), exec-1's unit is complete."""

    MARKS = ("exec-1 output", "our node sees it", "copy starts", "exec-1 done")

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.unit = ""
        self.since = 0.0
        self.rows: list[tuple[float, ...]] = []
        self._marks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, unit: str) -> None:
        self.unit, self.since, self._marks = unit, time.monotonic(), {}
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        deadline = time.monotonic() + 3  # exec-1's state may say so after the stream ended
        while "exec-1 done" not in self._marks and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.rows.append(tuple(self._marks.get(m, float("nan")) for m in self.MARKS))

    def _mark(self, name: str) -> None:
        self._marks.setdefault(name, time.monotonic() - self.since)

    def _sample(self) -> None:
        ours = ReceptorControl(f"unix:{self.mesh.socket}")
        theirs = ReceptorControl(f"unix:{self.mesh.node('exec-1').socket}")
        copy = self.mesh.controller_data_dir / self.mesh.controller_id / self.unit / "stdout"
        remote = ""
        try:
            while not self._stop.wait(0.02):
                st = ours.simple_command(f"work status {self.unit}")
                remote = remote or (st.get("ExtraData") or {}).get("RemoteUnitID") or ""
                if st.get("StdoutSize"):
                    self._mark("our node sees it")
                if copy.exists() and copy.stat().st_size:
                    self._mark("copy starts")
                if remote:
                    rst = theirs.simple_command(f"work status {remote}")
                    if rst.get("StdoutSize"):
                        self._mark("exec-1 output")
                    if rst.get("State", 0) >= 2:  # Succeeded, Failed
                        self._mark("exec-1 done")
        except (OSError, RuntimeError, ValueError):
            pass  # the unit is released: the run is over
        finally:
            ours.close()
            theirs.close()


class Phases(logging.Handler):
    """The receptor adapter's per-run phase times (its debug line), for the pairs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.on = False
        self.route = ""
        self.by_route: dict[str, list[tuple[float, ...]]] = {}
        self.marks: dict[str, list[tuple[float, ...]]] = {}
        self.tracer: Tracer | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if not self.on:
            return
        if self.tracer and record.msg.startswith("run %s: unit %s on"):
            self.tracer.start(str(record.args[1]))  # type: ignore[index]
        for prefix, into in (("run %s: transmit", self.by_route), ("run %s: after", self.marks)):
            if record.msg.startswith(prefix):
                times = tuple(float(x) for x in record.args[1:])  # type: ignore[index]
                into.setdefault(self.route, []).append(times)


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
    ap.add_argument(
        "--receptor",
        choices=("stock", "patched"),
        default="stock",
        help="the Receptor build (tests/receptor/patches: patched); stock is what operators run",
    )
    ap.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="the executor's per-execution-node cap (default: the config's default; with"
        " direct_results on stock Receptor, 1, the only cap the config accepts there)",
    )
    ap.add_argument(
        "--unguarded",
        action="store_true",
        help="stock Receptor with direct_results at --max-in-flight above 1, as if patched"
        " (patched_receptor): reproduces the link wedge the config refuses",
    )
    ap.add_argument(
        "--in-flight",
        default=IN_FLIGHT,
        help="runs in flight during the batch; a comma list runs a batch at each (e.g. 2,4,8)",
    )
    ap.add_argument(
        "--direct",
        choices=("both", "off", "only"),
        default="both",
        help="also (both), never (off) or only (only) run the mesh with direct_results;"
        " the batch uses direct_results unless off",
    )
    ap.add_argument(
        "--trace",
        action="store_true",
        help="also read the default route's unit state every 20 ms on both nodes (a timeline"
        " of where the time goes; the polling costs a little CPU, so ratios are best taken"
        " without it)",
    )
    args = ap.parse_args()
    if args.smoke:
        args.pairs, args.batch = 1, 4
    in_flight = [int(n) for n in args.in_flight.split(",")]
    work = Path(tempfile.mkdtemp(prefix="fmbench-receptor-"))
    phases = Phases()
    rlog = logging.getLogger(receptor.__name__)
    rlog.setLevel(logging.DEBUG)
    rlog.addHandler(phases)
    with start_fleet(3, prefix="rcpt") as fleet:
        mesh = start_mesh(
            two_shares(fleet),
            binaries=find_binaries(patched=args.receptor == "patched"),
        )
        print(f"receptor_overhead: mesh logs in {mesh.dir}", flush=True)
        try:
            s = mesh.settings()
            cap = {"max_in_flight": args.max_in_flight} if args.max_in_flight else {}
            patched = args.receptor == "patched" or args.unguarded
            mesh_cfg = ReceptorConfig(socket=s["socket"], tls_client=s["tls_client"], **cap)
            direct_cfg = ReceptorConfig(
                socket=s["socket"],
                tls_client=s["tls_client"],
                direct_results=True,
                signing_key=mesh.tls.work_signing_key,
                patched_receptor=patched,
                **(cap if patched or args.max_in_flight else {"max_in_flight": 1}),
            )
            routes = {"both": ("mesh", "direct"), "off": ("mesh",), "only": ("direct",)}
            cfgs = {"mesh": mesh_cfg, "direct": direct_cfg}
            batch_cfg = mesh_cfg if args.direct == "off" else direct_cfg
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

            lost: dict[int, list[str]] = {}

            def run(
                i: int, via: str | None, width: int = 0, cfg: ReceptorConfig = batch_cfg
            ) -> float:
                t0 = time.monotonic()
                try:
                    r = runner.run_playbook(
                        PLAY,
                        [target(i)],
                        settings,
                        timeout=120,
                        via=runner.Via(via, cfg) if via else None,
                    )
                except TemporaryError as exc:  # not submitted: a wedged link refuses it
                    if not width:
                        raise
                    lost.setdefault(width, []).append(str(exc))
                    return time.monotonic() - t0
                took = time.monotonic() - t0
                host = r.hosts.get(fleet.node(i).name, runner.HostResult("none"))
                if host.status != "ok" and not (width and r.status == "lost"):
                    raise SystemExit(f"run {r.run_id} ({r.executor}) failed: {r.hosts}")
                if host.status != "ok":
                    lost.setdefault(width, []).append(host.message)
                return took

            run(1, None)  # warm every path (imports, SSH, the mesh)
            for route in routes[args.direct]:
                run(1, "exec-1", cfg=cfgs[route])
            local: list[float] = []
            remote: dict[str, list[float]] = {r: [] for r in routes[args.direct]}
            phases.on = True
            tracer = Tracer(mesh) if args.trace else None
            for _ in range(args.pairs):
                local.append(run(1, None))
                for route in routes[args.direct]:
                    phases.route = route
                    phases.tracer = tracer if route == "mesh" else None
                    remote[route].append(run(1, "exec-1", cfg=cfgs[route]))
                    if phases.tracer:
                        phases.tracer.stop()
            phases.on = False

            def batch(via_for, width: int) -> tuple[float, float]:
                if via_for(1):  # a fresh controller node: a wedged link (stock) is not inherited
                    mesh.stop_controller()
                    mesh.start_controller()
                    mesh.wait_connected()
                jobs = [(1 + i % 3, via_for(1 + i % 3)) for i in range(args.batch)]
                c0, t0 = cpu(), time.monotonic()
                with ThreadPoolExecutor(width) as ex:
                    list(ex.map(lambda j: run(*j, width=width), jobs))
                return time.monotonic() - t0, cpu() - c0

            batches = {
                width: (
                    batch(lambda i: "exec-1" if i == 1 else "exec-2", width),
                    batch(lambda i: None, width),
                )
                for width in (in_flight if args.batch else ())
            }
        finally:
            receptor.drain()
            mesh.stop()
    lm = statistics.median(local)
    print(
        f"receptor_overhead ({args.receptor} receptor{', unguarded' if args.unguarded else ''},"
        f" at most {batch_cfg.max_in_flight} units per execution node in the batch):"
        f" {args.pairs} interleaved round(s) "
        f"on node-1, then a batch of {args.batch}"
        + (f" (direct_results {'on' if batch_cfg.direct_results else 'off'})" if args.batch else "")
    )
    print(f"  one run: local median {lm:.2f} s (trials {min(local):.2f}-{max(local):.2f} s)")
    label = {"mesh": "through our node (default)", "direct": "direct_results"}
    ratios = {}
    for route, times in remote.items():
        rm = statistics.median(times)
        ratios[route] = rm / lm
        per_pair = [r / a for r, a in zip(times, local, strict=True)]
        print(
            f"  exec-1, {label[route]}: median {rm:.2f} s (trials {min(times):.2f}-"
            f"{max(times):.2f} s): ratio {rm / lm:.2f}x (per pair {min(per_pair):.2f}-"
            f"{max(per_pair):.2f}x; target <= 1.3x)"
        )
        if phases.by_route.get(route):
            names = ("transmit", "submit", "run and stream", "read artifacts")
            rows = phases.by_route[route]
            medians = [statistics.median(r[k] for r in rows) for k in range(len(names))]
            print(
                "    median per phase: "
                + ", ".join(f"{n} {m:.2f} s" for n, m in zip(names, medians, strict=True))
            )
        if phases.marks.get(route):
            names = ("first status line", "last status line", "stream end")
            rows = phases.marks[route]
            medians = [statistics.median(r[k] for r in rows) for k in range(len(names))]
            print(
                "    median after submit: "
                + ", ".join(f"{n} {m:.2f} s" for n, m in zip(names, medians, strict=True))
            )
        if route == "mesh" and tracer and tracer.rows:
            medians = [statistics.median(r[k] for r in tracer.rows) for k in range(4)]
            print(
                "    traced, median after submit: "
                + ", ".join(f"{n} {m:.2f} s" for n, m in zip(Tracer.MARKS, medians, strict=True))
            )
            for row in tracer.rows:
                print("      run: " + " ".join(f"{m:.2f}" for m in row))
    for width, (spread, here) in batches.items():
        print(
            f"  batch of {args.batch} over 3 nodes, {width} at a time: "
            f"local {here[0]:.1f} s wall, "
            f"{here[1]:.1f} s CPU here; over exec-1 and exec-2 {spread[0]:.1f} s wall "
            f"(ratio {spread[0] / here[0]:.2f}x), {spread[1]:.1f} s CPU here "
            f"(ratio {spread[1] / here[1]:.2f}x)"
        )
        if lost.get(width):
            print(f"    LOST {len(lost[width])} of {args.batch}: {lost[width][0]}")
    best = "direct" if "direct" in ratios else "mesh"
    targets = [
        (f"receptor run <= 1.3x local (median, {label[best]})", ratios[best] <= 1.3),
        ("no run lost in the batches", not any(lost.values())),
    ]
    return _common.verdict(targets, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
