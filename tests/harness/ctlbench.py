"""The controller test bench the integration tests' fixtures hand out (``bench`` in
test_controller_e2e.py, ``safety_bench`` in tests/integration/conftest.py), built on ctlenv.

A :class:`Benches` belongs to one test: each :meth:`Benches.new` gives a fresh fleet, its
nodes prepared (:func:`ctlenv.prepare_nodes`) and a pool; the fixture's teardown stops
the controllers it started (log shown) and may delete the kwok Nodes it made.

:func:`fast_config`: a controller config whose ladder runs fast stand-in playbooks (``ping``
and a short ``sleep``) instead of the collection's, for tests that time the controller's
decisions rather than reboots (budget, leader, breaker, PDB, node Lease).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from tests.harness import ctlenv
from tests.harness.ctlenv import ControllerProcess


def pool_name(tag: str) -> str:
    """``tag`` and a random suffix: the API server is shared by the session."""
    return f"{tag}{uuid.uuid4().hex[:5]}"


class Bench:
    """One fleet and pool: kwok Nodes, controller configs and controllers for it."""

    def __init__(self, benches: Benches, nodes: int, pool: str) -> None:
        self._benches = benches
        self.kube = benches.kube
        self.fleet = benches.fleet_factory(nodes)
        ctlenv.prepare_nodes(self.fleet)
        self.pool = pool
        self.dir = benches.workdir

    def register(self, taints_by_index: dict[int, list[dict]] | None = None, **kw) -> list[str]:
        """kwok Nodes ``<pool>-<i>`` for the fleet's nodes, with the given taints by index."""
        by_name = {f"{self.pool}-{i}": t for i, t in (taints_by_index or {}).items()}
        names = list(ctlenv.register(self.kube, self.fleet, self.pool, taints=by_name, **kw))
        self._benches.made.extend(names)
        return names

    def make_nodes(
        self, names: list[str], addresses: list[str], taints=(), labels=None
    ) -> list[str]:
        """kwok Nodes in this pool whose InternalIPs are the given fleet addresses
        (several Nodes may share one SSH node), with ``labels`` added."""
        self.kube.make_nodes(
            names,
            labels={
                ctlenv.POOL_LABEL: self.pool,
                "fleetmedic.io/gpu-vendor": "nvidia",
                "fleetmedic.io/expected-gpus": "2",
                **(labels or {}),
            },
            addresses=addresses,
            taints=list(taints),
        )
        self._benches.made.extend(names)
        return names

    def config(self, smtp=None, name: str = "ctl", **overrides) -> Path:
        return ctlenv.write_config(
            self.dir / name, self.kube, self.fleet, self.pool, smtp, overrides
        )

    def controller(self, config: Path, n: int = 1) -> ControllerProcess:
        p = ControllerProcess(config, self.dir / f"controller-{n}.log").start()
        self._benches.started.append(p)
        return p


class Benches:
    """A test's benches, and what they leave to clean up."""

    def __init__(self, kube, fleet_factory, workdir: Path) -> None:
        self.kube, self.fleet_factory, self.workdir = kube, fleet_factory, workdir
        self.started: list[ControllerProcess] = []
        self.made: list[str] = []

    def new(self, nodes: int, pool: str) -> Bench:
        return Bench(self, nodes, pool)

    def stop_controllers(self, log_lines: int) -> None:
        """Stop them and print each log's tail (pytest shows it when the test failed)."""
        for p in self.started:
            p.stop()
            print(f"--- {p.log} (shown when the test failed) ---\n{p.tail(log_lines)}")

    def delete_nodes(self) -> None:
        """The kwok Nodes made, so no later test sees them (the API server is shared by the
        session)."""
        if self.made:
            self.kube.delete_nodes(self.made)


# -- fast stand-in playbooks (the safety tests time the controller, not reboots) --------
FAST_PLAY = [
    {
        "name": "fleetmedic test: a fast stand-in for {step}",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "Reach the node", "ansible.builtin.ping": {}},
            {
                "name": "Take a moment, as real work does",
                "ansible.builtin.command": "sleep 0.5",
                "changed_when": False,
            },
        ],
    }
]


def fast_playbooks(workdir) -> str:
    d = workdir / "fast-playbooks"
    (d / "group_vars").mkdir(parents=True, exist_ok=True)
    # quarantine.yml: the diagnose rung's diagnostics (default ladder), checked at start-up
    steps = ("diagnose", "reset", "reboot", "reimage", "restore", "verify", "quarantine")
    for step in (*steps, "rma_case"):  # (rma_case.yml: the lemon rule's case, checked too)
        play = [{**FAST_PLAY[0], "name": FAST_PLAY[0]["name"].format(step=step)}]
        (d / f"{step}.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    (d / "group_vars" / "all.yml").write_text(yaml.safe_dump(ctlenv.GROUP_VARS))
    return str(d)


def fast_config(b, workdir, smtp=None, name: str = "ctl", notify=None, **safety):
    return b.config(
        smtp,
        name=name,
        **({"notify": notify} if notify else {}),
        ansible={"playbook_dir": fast_playbooks(workdir), "forks": 5},
        ladder={"reboot": {"phases": ["drain", "verify"]}},
        safety={"max_concurrent": 3, **safety},
    )
