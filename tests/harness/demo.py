"""The demo: a local GPU fleet repaired by the controller (``make demo``).

    python -m tests.harness.demo [--keep-logs DIR]

1. Starts the test control plane (etcd, kube-apiserver, kwok), 3 nspawn SSH nodes
   registered as Nodes ``gpu-1..3`` (their InternalIP is the node's address), and an
   SMTP sink on loopback.
2. Breaks two nodes and fences them as the node agent would (taint
   ``fleetmedic.io/repair=reboot`` plus its finding):
   - ``gpu-1``: a Xid 79 (GPU fallen off the bus) in this boot's kernel log: a reboot
     cures it;
   - ``gpu-2``: a GPU that stays lost: reboot, then driver reinstall, then a human.
   ``gpu-3`` stays healthy and untouched.
3. Runs ``fleetmedic run`` against them and prints ``fleetmedic status`` whenever it
   changes, until gpu-1 is back in service and gpu-2's escalation email has arrived;
   then prints that email.
4. Cleans everything up on exit, error or Ctrl-C.

Only the GPU (a fake libnvidia-ml.so) and the kernel log (a file) are stand-ins;
sshd, reboots, Ansible, the API server and SMTP are real.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.harness import ctlenv
from tests.harness.fleet import FleetError, start_fleet
from tests.harness.kube import KubeCluster, KubeError
from tests.harness.smtp import SmtpSink, attachments, body_text

POOL = "gpu"
DEADLINE = 285.0  # seconds: the demo gives up (and says so) before five minutes


def say(msg: str = "") -> None:
    print(msg, flush=True)


class Demo:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.kube: KubeCluster | None = None
        self.fleet = None
        self.sink: SmtpSink | None = None
        self.controller: ctlenv.ControllerProcess | None = None
        self.t0 = time.monotonic()

    def clock(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"[{s // 60:02d}:{s % 60:02d}]"

    # -- setup -------------------------------------------------------------------------
    def start(self) -> tuple[Path, threading.Thread, list[BaseException]]:
        say(f"{self.clock()} starting 3 SSH nodes (systemd-nspawn, real sshd, real reboots)")
        self.fleet = start_fleet(3, prefix="demo", owned=True)
        gpu2 = self.fleet.node(2)
        repo_error: list[BaseException] = []

        def give_repo() -> None:
            try:
                ctlenv.prepare_apt_repo([gpu2])
            except BaseException as exc:  # reported below
                repo_error.append(exc)

        repo = threading.Thread(target=give_repo, daemon=True)
        # gpu-2 gets a local apt repository, so its reinstall is a real one; this runs while
        # the demo goes on (the reinstall comes a minute after the start at the earliest)
        repo.start()
        say(f"{self.clock()} starting the Kubernetes API server (etcd, kube-apiserver, kwok)")
        self.kube = KubeCluster(self.dir / "kube")
        self.kube.start()
        self.sink = SmtpSink().start()
        say(f"{self.clock()} SMTP sink on {self.sink.host}:{self.sink.port}")
        ctlenv.prepare_nodes(self.fleet)
        names = ctlenv.register(self.kube, self.fleet, POOL)
        say(f"{self.clock()} Nodes {', '.join(f'{n} ({f.address})' for n, f in names.items())}")
        cfg = ctlenv.write_config(self.dir / "controller", self.kube, self.fleet, POOL, self.sink)
        say(f"{self.clock()} controller config: {cfg}")
        return cfg, repo, repo_error

    def break_nodes(self) -> None:
        assert self.kube and self.fleet
        gpu1, gpu2 = self.fleet.node(1), self.fleet.node(2)
        ctlenv.xid79(gpu1)
        ctlenv.gpu_lost(gpu2)
        finding = {
            "vendor": "nvidia",
            "kind": "xid",
            "code": 79,
            "pci": "0000:5a:00",
            "action": "reboot",
            "message": "GPU has fallen off the bus.",
        }
        lost = {"gpu": "problem", "checks": {"nvidia.driver": "GPU 1: GPU is lost"}}
        lost_finding = {
            "summary": "nvidia.driver: GPU 1 is lost (NVML GPU_IS_LOST), 3 checks in a row"
        }
        for name, ann in (
            (f"{POOL}-1", {"fleetmedic.io/last-finding": json.dumps(finding)}),
            (
                f"{POOL}-2",
                {
                    "fleetmedic.io/last-results": json.dumps(lost),
                    "fleetmedic.io/last-finding": json.dumps(lost_finding),
                },
            ),
        ):
            # what the node agent does when it fences a node
            self.kube.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                {"metadata": {"annotations": ann}},
                content_type="application/merge-patch+json",
            )
            ctlenv.set_taints(self.kube, name, lambda ts: [*ts, ctlenv.repair_taint("reboot")])
        say(
            f"{self.clock()} fault injected on {POOL}-1: Xid 79 in this boot's kernel log "
            "(a reboot cures it)"
        )
        say(
            f"{self.clock()} fault injected on {POOL}-2: GPU 1 lost for good "
            "(reboot and reinstall will not help)"
        )
        say(
            f"{self.clock()} both fenced with fleetmedic.io/repair=reboot:NoSchedule, "
            "as the node agent does"
        )

    # -- watching ------------------------------------------------------------------------
    def status(self) -> str:
        from fleetmedic.controller.status import node_status, render_status
        from fleetmedic.model.config import parse
        from fleetmedic.model.nodestate import view

        cfg = parse({})
        nodes = self.kube.request(
            "GET", f"/api/v1/nodes?labelSelector={ctlenv.POOL_LABEL}%3D{POOL}"
        )["items"]
        at = datetime.now(UTC)
        rows = [node_status(view(n, cfg.vocabulary(), cfg.foreign()), at) for n in nodes]
        rows.sort(key=lambda r: r["name"])
        return render_status(rows, width=150, since_as_time=True)

    def watch(self, cfg: Path, repo: threading.Thread, repo_error: list) -> None:
        assert self.sink and self.kube
        self.controller = ctlenv.ControllerProcess(cfg, self.dir / "controller.log").start()
        say(f"{self.clock()} controller started: fleetmedic run --config {cfg}")
        say(f"{' ' * 8}(its log: {self.controller.log})\n")
        shown = ""
        while True:
            table = self.status()
            if table != shown:
                shown = table
                say(f"{self.clock()} fleetmedic status")
                say("  " + table.replace("\n", "\n  ") + "\n")
            if repo is not None and not repo.is_alive():
                if repo_error:
                    raise RuntimeError(
                        f"giving {POOL}-2 the test apt repository failed: {repo_error[0]}"
                    )
                repo = None
            if self.done():
                return
            if not self.controller.alive:
                raise RuntimeError(f"the controller exited:\n{self.controller.tail()}")
            if time.monotonic() - self.t0 > DEADLINE:
                raise RuntimeError(
                    "the demo ran out of time; controller log:\n" + self.controller.tail()
                )
            time.sleep(1)

    def done(self) -> bool:
        assert self.kube and self.sink
        cured = ctlenv.annotation(self.kube, f"{POOL}-1", "fleetmedic.io/history", [])
        esc = ctlenv.annotation(self.kube, f"{POOL}-2", "fleetmedic.io/escalated") or {}
        return (
            any(a.get("result") == "pass" for a in cured)
            and not ctlenv.taints(self.kube, f"{POOL}-1")
            and bool(esc.get("sent"))
            and bool(self.sink.received)
        )

    def show_email(self) -> None:
        assert self.sink
        msg = self.sink.messages[0]
        say(f"{self.clock()} the escalation email that arrived at the SMTP sink:\n")
        say(f"  From:    {msg['From']}\n  To:      {msg['To']}\n  Subject: {msg['Subject']}")
        for name, data in attachments(msg).items():
            say(f"  Attached: {name} ({len(data)} bytes)")
        say("")
        say(html_to_text(body_text(msg)))
        say(
            f"\n{self.clock()} done: {POOL}-1 was rebooted and is back in service; {POOL}-2 "
            "went reboot -> reimage -> manual and a human has the evidence."
        )

    # -- teardown ----------------------------------------------------------------------
    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop(timeout=15)
        if self.sink is not None:
            self.sink.stop()
        if self.fleet is not None:
            try:
                self.fleet.down()
            except FleetError as exc:
                say(f"demo: {exc}")
        if self.kube is not None:
            self.kube.stop()


def html_to_text(body: str) -> str:
    text = re.sub(r"</(tr|p|h2|h3|table|pre)>|<br>", "\n", body)
    text = re.sub(r"</t[dh]>", "  |  ", text)
    text = re.sub(r"<h[23]>", "\n== ", text)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    lines = [ln.rstrip(" |") for ln in text.splitlines()]
    return "\n".join("  " + ln for ln in lines if ln.strip())


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.harness.demo", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--keep-logs", type=Path, help="copy the controller's log and runs here")
    args = ap.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)  # also when started in the background (SIGINT ignored)
    workdir = Path(tempfile.mkdtemp(prefix="fleetmedic-demo-"))
    demo = Demo(workdir)
    code = 0
    try:
        cfg, repo, repo_error = demo.start()
        demo.break_nodes()
        demo.watch(cfg, repo, repo_error)
        demo.show_email()
    except KeyboardInterrupt:
        say("\ninterrupted: cleaning up")
        code = 130
    except (FleetError, KubeError, RuntimeError, AssertionError) as exc:
        say(f"demo: error: {exc}")
        code = 1
    finally:
        if args.keep_logs:
            shutil.copytree(
                workdir / "controller",
                args.keep_logs,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("cp"),
            )
            if (workdir / "controller.log").exists():
                shutil.copy(workdir / "controller.log", args.keep_logs)
        demo.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        say(f"cleaned up in {time.monotonic() - demo.t0:.0f}s total")
    return code


if __name__ == "__main__":
    sys.exit(main())
