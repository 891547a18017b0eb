"""Leader election and node Leases over the file store: two controller processes on one
bastion, one store directory (what a Slurm-only fleet runs with no API server).

- Exactly one of two processes started together leads; the other stands by.
- SIGKILL the leader: the other takes over once the Lease has expired, not before, and then
  gets the node Lease the dead leader held.
- A node Lease one holds is refused to another (the controller, or an ad-hoc run), and a
  leader that resigns hands over at the other's next try.

No API server is needed: the processes share nothing but the directory."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from fleetmedic.adapters.filestore import FileStore
from fleetmedic.controller.leadership import Leadership
from fleetmedic.model.config.sections import LeaderElectionConfig

LEASE = 4.0
"""Seconds: short so a takeover is quick, long enough that a loaded 2-CPU CI machine renews
in time (the leader renews every RETRY seconds)."""
RETRY = 0.5
CFG = LeaderElectionConfig(
    lease_duration=LEASE, renew_deadline=3.0, retry_period=RETRY, node_lease_duration=LEASE
)
NODE = "gpu-node-1"
STARTUP = 90.0  # a Python child importing the controller on a loaded machine
CONTROLLER = textwrap.dedent(
    f"""
    import sys, time
    from fleetmedic.adapters.filestore import FileStore
    from fleetmedic.controller.leadership import Leadership
    from fleetmedic.model.config.sections import LeaderElectionConfig

    cfg = LeaderElectionConfig.model_validate({CFG.model_dump()!r})
    say = lambda what: print(what, time.time(), flush=True)
    me = Leadership(
        FileStore(sys.argv[1]), cfg, sys.argv[2],
        on_gained=lambda: say("leading"), on_lost=lambda: say("lost"),
    )
    held = False
    while True:
        if me.leading() and not held:
            held = me.hold({NODE!r})
            if held:
                say("holds-node")
        time.sleep(0.05)
    """
)


class Controller:
    """A child process running Leadership over the store; its lines land in ``events``."""

    def __init__(self, root: Path, identity: str) -> None:
        self.identity = identity
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONTROLLER, str(root), identity],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.events: queue.Queue[tuple[str, float]] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            what, at = line.split()
            self.events.put((what, float(at)))

    def wait_for(self, what: str, timeout: float) -> float | None:
        """The wall time ``what`` happened at, or None if it did not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                got, at = self.events.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(got)
            if got == what:
                return at
        return None

    def kill(self) -> float:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        return time.time()


@pytest.fixture
def controllers(tmp_path):
    made: list[Controller] = []

    def start(identity: str) -> Controller:
        made.append(Controller(tmp_path / "store", identity))
        return made[-1]

    yield start
    for c in made:
        if c.proc.poll() is None:
            c.kill()


def holder(store: FileStore, name: str) -> str | None:
    return store.get_lease(CFG.namespace, name)["spec"].get("holderIdentity")


def test_one_of_two_leads_and_the_other_takes_over_after_a_sigkill(tmp_path, controllers):
    store = FileStore(tmp_path / "store")
    a, b = controllers("bastion-a"), controllers("bastion-b")

    # both race for a Lease that does not exist yet: exactly one wins
    leader = follower = None
    deadline = time.monotonic() + STARTUP
    while leader is None and time.monotonic() < deadline:
        for c, other in ((a, b), (b, a)):
            if c.wait_for("leading", timeout=0.2) is not None:
                leader, follower = c, other
                break
    assert leader is not None and follower is not None, "no one took the leader Lease"
    assert leader.wait_for("holds-node", timeout=STARTUP) is not None
    assert holder(store, CFG.lease_name) == leader.identity

    # the follower keeps trying (every RETRY) and is refused for several Lease lifetimes
    assert follower.wait_for("leading", timeout=2 * LEASE) is None
    assert follower.proc.poll() is None and holder(store, CFG.lease_name) == leader.identity

    # a node Lease the leader holds is refused to anyone else (here: this process)
    other = Leadership(store, CFG.model_copy(update={"enabled": False}), "adhoc-run")  # type: ignore[arg-type]
    assert not other.hold(NODE)
    assert holder(store, "fleetmedic-node-" + NODE) == leader.identity

    leader.kill()
    spec = store.get_lease(CFG.namespace, CFG.lease_name)["spec"]
    last_renewal = datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00")).timestamp()
    took_over = follower.wait_for("leading", timeout=LEASE + STARTUP)
    assert took_over is not None, f"no takeover; follower said {follower.seen}"
    # not before the dead leader's last renewal had expired, and soon after
    assert last_renewal + LEASE < took_over < last_renewal + LEASE + 30
    assert holder(store, CFG.lease_name) == follower.identity
    # and the node Lease the dead leader held comes free in its turn
    assert follower.wait_for("holds-node", timeout=LEASE + STARTUP) is not None
    assert holder(store, "fleetmedic-node-" + NODE) == follower.identity
    assert store.get_lease(CFG.namespace, CFG.lease_name)["spec"]["leaseTransitions"] == 1


def test_node_leases_and_a_resignation_in_one_process(tmp_path):
    store = FileStore(tmp_path / "store")
    a = Leadership(store, CFG, "a")  # type: ignore[arg-type]
    b = Leadership(store, CFG, "b")  # type: ignore[arg-type]
    assert a.leading() and not b.leading()

    assert a.hold(NODE) and not b.hold(NODE)
    a.let_go(NODE)
    assert b.hold(NODE) and not a.hold(NODE)

    a.resign()  # at shutdown: the follower need not wait the Lease out
    b._next_renew = 0.0  # its next retry, without sleeping RETRY
    assert b.leading() and b.is_leading
    assert holder(store, CFG.lease_name) == "b"
