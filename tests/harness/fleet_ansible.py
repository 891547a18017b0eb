"""Run Ansible against a test fleet with ansible-runner, the way the controller does.

    r = run_ansible(fleet, module="ping")
    r = run_ansible(fleet, playbook=[{"hosts": "node-2", "tasks": [...]}], timeout=120)
    assert r.rc == 0 and set(r.stats["ok"]) == {...}
    hosts_with(r, "runner_on_unreachable")

Each run gets a fresh private_data_dir under the fleet dir (ansible-runner writes
``env/*`` only when missing). The venv's bin is put first on PATH (ansible-runner finds
``ansible-playbook`` there; without it rc is 127 and ``stats`` is None) and the
checkout's ansible.cfg is used. Host key checking is forced on: ansible-runner
otherwise sets ANSIBLE_HOST_KEY_CHECKING=False, and ssh then accepts a changed key. ``timeout`` is
ansible-runner's job timeout: a backstop on top of the inventory's ServerAlive options.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

import ansible_runner
import yaml

from tests.harness.fleet import ROOT, Fleet

_runs = itertools.count(1)


def run_ansible(
    fleet: Fleet,
    *,
    playbook: str | Path | list | None = None,
    module: str | None = None,
    module_args: str = "",
    hosts: str = "all",
    limit: str | None = None,
    extravars: dict | None = None,
    timeout: int = 300,
    envvars: dict | None = None,
    quiet: bool = True,
    inventory: str | Path | None = None,
) -> ansible_runner.Runner:
    """``playbook``: a path, or a list of plays (dicts) written to a file. Or ``module``
    (ad hoc, on ``hosts``). ``inventory`` overrides the fleet's. Returns the finished
    Runner (``rc``, ``status``, ``stats``, ``events``); its private_data_dir stays in the
    fleet dir for post-mortems."""
    if (playbook is None) == (module is None):
        raise ValueError("give exactly one of playbook= or module=")
    pdd = fleet.dir / "runner" / f"{next(_runs):03d}-{os.getpid()}"
    (pdd / "project").mkdir(parents=True)
    if isinstance(playbook, list):
        path = pdd / "project" / "play.yml"
        path.write_text(yaml.safe_dump(playbook, sort_keys=False))
        playbook = str(path)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_CONFIG": os.environ.get("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg")),
        # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless told otherwise,
        # which makes ssh accept even a *changed* host key.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        **(envvars or {}),
    }
    kwargs = dict(
        private_data_dir=str(pdd),
        inventory=str(inventory or fleet.inventory),
        envvars=env,
        extravars=extravars or {},
        limit=limit,
        timeout=timeout,
        quiet=quiet,
        project_dir=str(ROOT),
    )
    if module is not None:
        kwargs.update(module=module, module_args=module_args, host_pattern=hosts)
    else:
        kwargs.update(playbook=str(playbook))
    return ansible_runner.run(**kwargs)


def hosts_with(runner: ansible_runner.Runner, event: str) -> set[str]:
    """Hosts that had ``event`` (e.g. ``runner_on_unreachable``, ``runner_on_ok``)."""
    return {e["event_data"].get("host") for e in runner.events if e.get("event") == event}


def failures(runner: ansible_runner.Runner) -> list[str]:
    """The ``msg`` of every failed task, in order (what a role says when it fails)."""
    return [
        e["event_data"]["res"].get("msg", "")
        for e in runner.events
        if e.get("event") == "runner_on_failed"
    ]


def last_stdout(runner: ansible_runner.Runner) -> dict:
    """The JSON the run's last successful task printed (a role's one result line)."""
    out = [
        e["event_data"]["res"]["stdout"]
        for e in runner.events
        if e.get("event") == "runner_on_ok"
        and isinstance(e["event_data"]["res"].get("stdout"), str)
    ]
    return json.loads(out[-1])
