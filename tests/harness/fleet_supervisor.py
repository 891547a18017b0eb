"""The per-fleet supervisor: one host-side process that keeps every node of a fleet
booted, like the power button and BIOS of real machines.

Run as ``python -m tests.harness.fleet_supervisor <fleet dir>`` by ``fleet.start_fleet``.
One thread per node runs ``systemd-nspawn -b`` and looks at its exit code:

- 133 (``systemctl reboot`` inside): boot again -> a new boot_id. Before that, the
  fault files in the node dir apply: ``hang`` (present: stay down until it is removed),
  ``boot-delay`` (seconds to wait: a slow boot).
- 0 (``systemctl poweroff``): stay off until a ``power-on`` file appears.
- a ``power-off`` file (the test BMC, tests/harness/bmc.py): the power is cut while the
  node runs. ``force`` in it: every process of the container is SIGKILLed at once (a
  forced power-off; nothing is shut down cleanly); anything else: a clean poweroff, as
  an ACPI power button does. Either way the node then stays off until ``power-on``.
- anything else: a crash; boot again after 1 s, give up after 5 crashes in a row.

While a node is down its ``eth0`` is down too, so it vanishes from the network like a
real host rebooting. Each node's state is in ``<node dir>/status.json``; its console in
``console.log``; boots in ``boots.log``.

SIGTERM: power every node off cleanly (nspawn turns SIGTERM into a clean shutdown),
SIGKILL what did not stop within 10 s, exit. If the fleet has an owner process (the
pytest run) and it dies, the supervisor also tears the whole fleet down, so a killed
test run leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.harness import fleet_cgroup, fleet_net, fleet_sys

REBOOT_RC = 133
STOP_GRACE = 10.0
# A node with a boot time of its own stays down this long on a reboot. slurmctld takes a
# reboot it asked for as done once the node's boot time (whole seconds: its clock minus
# an uptime rounded up) is after the request; a node that is back within a second or
# two can report a boot time before the request and wait until ResumeTimeout (measured:
# back 1.3 s after the request, boot time 1 s before it). Real hosts take minutes.
FRESH_BOOT_GAP = 3.0


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


class NodeLoop(threading.Thread):
    def __init__(self, fleet: dict, node: dict, stop: threading.Event):
        super().__init__(name=node["name"], daemon=True)
        self.fleet, self.node, self.stop = fleet, node, stop
        self.dir = Path(fleet["dir"]) / "nodes" / node["name"]
        self.proc: subprocess.Popen | None = None
        self.boots = 0
        self.crashes = 0
        self.cut = False  # the last boot ended by a power-off file (not by the node)

    def status(self, state: str, **extra) -> None:
        data = {
            "state": state,
            "boots": self.boots,
            "since": time.time(),
            "pid": self.proc.pid if self.proc and self.proc.poll() is None else None,
            **extra,
        }
        tmp = self.dir / "status.json.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(self.dir / "status.json")

    def wait_while(self, cond, state: str) -> None:
        if cond():
            self.status(state)
            log(f"{self.node['name']}: {state}")
        while cond() and not self.stop.is_set():
            self.stop.wait(0.1)

    def command(self) -> list[str]:
        f, n = self.fleet, self.node
        cmd = [
            "systemd-nspawn",
            "--quiet",
            "-D",
            str(self.dir / "root"),
            "--boot",
            "--machine",
            n["name"],
            "--register=no",
            "--keep-unit",
            "--console=passive",
            f"--network-namespace-path=/run/netns/{n['netns']}",
            f"--uuid={n['machine_id']}",
            "--resolv-conf=off",
            "--timezone=off",
            "--link-journal=no",
            f"--bind={self.dir / 'state'}:/var/lib/fleetmedic-test",
            f"--bind-ro={Path(f['checkout']) / 'controller'}:/opt/fleetmedic/src",
        ]
        fakes = Path(f["checkout"]) / "tests" / "fakes" / "build"
        if fakes.is_dir():
            cmd.append(f"--bind-ro={fakes}:/opt/fleetmedic-fakes")
        cmd += list(n.get("nspawn_args", ()))
        if n.get("fresh_boottime"):
            # A time namespace whose CLOCK_BOOTTIME starts now: the node's uptime and boot
            # time are this boot's. unshare execs nspawn (no fork), so the pid is nspawn's
            # and the new namespace applies from that exec on. The offset may not make the
            # clock negative, hence whole seconds rounded down.
            cmd = ["unshare", "--time", f"--boottime={-_uptime()}", *cmd]
        return cmd

    def boot_once(self) -> int:
        fleet_net.set_node_eth0(self.fleet["octet"], self.node["name"], up=True)
        self.boots += 1
        # A real kernel log starts each boot with its banner; the scanner and the
        # kernel-log check use it to tell this boot's lines from earlier ones.
        with open(self.dir / "state" / "kern.log", "a") as klog:
            klog.write(
                f"[    0.000000] Linux version 6.1.0-fleetmedic-test (fleetmedic test fleet) "
                f"#1 SMP PREEMPT_DYNAMIC boot {self.boots}\n"
            )
        with open(self.dir / "console.log", "ab") as console:
            console.write(
                f"\n===== boot {self.boots} at {time.strftime('%H:%M:%S')} =====\n".encode()
            )
            console.flush()
            cgroups = list(self.node.get("cgroups", ()))
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **self.node.get("nspawn_env", {})},
                preexec_fn=(lambda: fleet_cgroup.join(cgroups)) if cgroups else None,
            )
        self.status("running")
        with open(self.dir / "boots.log", "a") as b:
            b.write(f"{time.time():.3f} boot {self.boots} pid {self.proc.pid}\n")
        self.cut = False
        while True:
            try:
                rc = self.proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if self.stop.is_set():
                    rc = self.shutdown()
                    break
                if (self.dir / "power-off").exists():
                    rc = self.power_cut()
                    break
        fleet_net.set_node_eth0(self.fleet["octet"], self.node["name"], up=False)
        with open(self.dir / "boots.log", "a") as b:
            b.write(f"{time.time():.3f} exit {rc}\n")
        return rc

    def power_cut(self) -> int:
        """The ``power-off`` file: cut the power (``force``: SIGKILL the container's init,
        which takes every process of its PID namespace with it) or shut down cleanly."""
        assert self.proc is not None
        path = self.dir / "power-off"
        try:
            force = path.read_text().strip() == "force"
        except OSError:
            force = False
        path.unlink(missing_ok=True)
        self.cut = True
        log(f"{self.node['name']}: power cut ({'forced' if force else 'clean'})")
        if not force:
            return self.shutdown()
        # nspawn is the child subreaper of the container: its children are the init
        for child in _children(self.proc.pid):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            return self.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def shutdown(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)  # nspawn: clean poweroff of the container
        try:
            return self.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            log(f"{self.node['name']}: no clean poweroff within {STOP_GRACE:.0f} s, killing")
            self.proc.kill()
            return self.proc.wait()

    def run(self) -> None:
        name = self.node["name"]
        first = True
        while not self.stop.is_set():
            if not first:
                self.wait_while(lambda: (self.dir / "hang").exists(), "hung")
                delay = _read_float(self.dir / "boot-delay")
                if delay > 0 and not self.stop.is_set():
                    self.status("booting-slowly", delay=delay)
                    log(f"{name}: slow boot, waiting {delay:.1f} s")
                    self.stop.wait(delay)
                if self.stop.is_set():
                    break
            first = False
            (self.dir / "power-on").unlink(missing_ok=True)
            rc = self.boot_once()
            if self.stop.is_set():
                break
            if self.cut:
                self.crashes = 0
                self.wait_while(lambda: not (self.dir / "power-on").exists(), "off")
            elif rc == REBOOT_RC:
                log(f"{name}: reboot")
                self.crashes = 0
                self.status("rebooting")
                if self.node.get("fresh_boottime"):
                    self.stop.wait(FRESH_BOOT_GAP)
            elif rc == 0:
                log(f"{name}: powered off")
                self.crashes = 0
                self.wait_while(lambda: not (self.dir / "power-on").exists(), "off")
            else:
                self.crashes += 1
                console = self.dir / "console.log"
                log(f"{name}: nspawn exited {rc} (crash {self.crashes}); see {console}")
                if self.crashes >= 5:
                    self.wait_while(lambda: not (self.dir / "power-on").exists(), "failed")
                    self.crashes = 0
                else:
                    self.status("crashed", rc=rc)
                    self.stop.wait(1.0)
        self.status("stopped")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _uptime() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]))


def _read_float(path: Path) -> float:
    try:
        return float(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def main(fleet_dir: str) -> int:

    record = json.loads((Path(fleet_dir) / "fleet.json").read_text())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    loops = [NodeLoop(record, n, stop) for n in record["nodes"]]
    for loop in loops:
        loop.start()
    log(f"fleet {record['name']}: supervising {len(loops)} nodes (pid {os.getpid()})")
    owner = record.get("owner")
    orphaned = False
    while not stop.wait(0.5):
        if owner and not fleet_sys.proc_alive(owner["pid"], owner["start"]):
            log(f"fleet {record['name']}: owner pid {owner['pid']} is gone, tearing down")
            orphaned = True
            stop.set()
    for loop in loops:
        loop.join()
    log(f"fleet {record['name']}: all nodes stopped")
    if orphaned:
        fleet_sys.teardown_resources(Path(fleet_dir), record, by_supervisor=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
