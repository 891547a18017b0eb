"""Run a playbook on a set of nodes through ansible-runner, and say how each fared.

- A fresh private_data_dir per run (ansible-runner writes ``env/*`` only when
  missing, so a reused one would keep stale settings), named by the run id.
- An inventory of just the target nodes: ``ansible_host`` from the Node's
  address (``nodestate.address_of``: the ssh-host annotation, else InternalIP),
  per-host variables from the policy, strict host key checking against our
  known_hosts file, and ServerAlive options so a node that vanishes mid-task
  fails in seconds, not minutes. ``ansible_host_key_checking`` is set per host
  because ansible-runner otherwise exports ANSIBLE_HOST_KEY_CHECKING=False.
- ansible-runner's ``timeout=`` as the job's hard limit.
- The venv's bin first on PATH, or ansible-runner cannot find ansible-playbook.
- ssh's ControlPath sockets under ``run_dir/cp``, unless that path is too long for a
  Unix socket (a deep run_dir, e.g. one per cluster): then a private directory in the
  temp dir, named by the run_dir's hash (:func:`control_path_dir`).
- ``via``: an execution node of the Receptor mesh (adapters/receptor.py) runs the job
  instead of this process; the same artifacts come back, so the same outcomes. Its
  inventory has no ControlPath dir of ours (the worker keeps its own under its HOME: a
  master connection of this host must not carry a job past the execution node). A job
  whose execution node was lost ends every host ``unreachable`` with the node named:
  the outcome is unknown, as for a node that went away.
- Per-host outcome from the run's events: ``playbook_on_stats`` decides (a
  failure a rescue block handled is not a failure), ``runner_on_failed`` and
  ``runner_on_unreachable`` give the failing task and its message.

A run whose hosts failed is a result, not an exception. Exceptions are for runs
that could not run at all: :class:`PermanentError` (ansible-playbook missing, a
playbook that does not parse) or :class:`TemporaryError` (cancelled, no disk).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ansible_runner
import yaml
from ansible_runner.exceptions import AnsibleRunnerException, ConfigurationError

from fleetmedic.adapters import receptor
from fleetmedic.errors import PermanentError, TemporaryError, one_line
from fleetmedic.model.config import AnsibleConfig, ReceptorConfig, secret_path
from fleetmedic.model.nodestate import NodeView

OK, FAILED, UNREACHABLE, TIMEOUT = "ok", "failed", "unreachable", "timeout"
BOOT_ID_PLAY = [
    {
        "name": "Read boot_id",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "boot_id",
                "ansible.builtin.command": "cat /proc/sys/kernel/random/boot_id",
                "changed_when": False,
            }
        ],
    }
]


@dataclasses.dataclass(frozen=True)
class Target:
    """One node to act on: inventory name, SSH address, host variables."""

    name: str
    address: str | None
    vars: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, view: NodeView, hostvars: Mapping[str, Any] | None = None) -> Target:
        base = {"fleetmedic_vendor": view.vendor, "k8s_labels": dict(view.labels)}
        return cls(view.name, view.address, {**base, **(hostvars or {})})


@dataclasses.dataclass(frozen=True)
class HostResult:
    status: str  # ok | failed | unreachable | timeout
    task: str | None = None  # the failing task
    message: str = ""  # one line
    stdout: str = ""  # the last successful task's stdout (probes, the sweep's diagnostics)
    evidence: tuple[str, ...] = ()  # bundles the diagnostics role fetched in this run
    published: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """What the run's roles published for this host with ``set_stats`` (``{name: {host:
    value}}``, e.g. the diagnostics role's ``fleetmedic_gpus``), as ``{name: {host:
    value}}`` restricted to this host."""

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclasses.dataclass(frozen=True)
class RunResult:
    run_id: str
    rc: int | None
    status: str  # ansible-runner's: successful | failed | timeout
    hosts: Mapping[str, HostResult]
    artifact_dir: Path
    private_data_dir: Path
    duration: float
    executor: str = "local"  # or the execution node's ID


@dataclasses.dataclass(frozen=True)
class Via:
    """Run on this execution node of the mesh instead of locally."""

    node: str
    mesh: ReceptorConfig


def new_run_id(label: str = "run") -> str:
    """Sortable and unique: ``20261121T120000Z-verify-1a2b3c4d``."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:40] or "run"
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{safe}-{uuid.uuid4().hex[:8]}"


# ssh binds the master's socket at <dir>/<10-char hash>.<16 random chars> first; the
# whole path must fit sun_path (108 bytes with its NUL) or every connection fails.
_SUN_PATH_MAX = 107
_SOCKET_NAME_LEN = 1 + 10 + 1 + 16


def control_path_dir(run_dir: Path) -> Path:
    """Where ssh keeps this run_dir's master sockets: ``run_dir/cp`` when the socket path
    fits, else ``<tmp>/fleetmedic-cp-<uid>-<hash of run_dir>`` (one per run_dir, so two
    controllers or clusters never share masters)."""
    own = run_dir / "cp"
    if len(os.fsencode(own)) + _SOCKET_NAME_LEN <= _SUN_PATH_MAX:
        return own
    digest = hashlib.sha256(os.fsencode(run_dir.absolute())).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"fleetmedic-cp-{os.getuid()}-{digest}"


def _make_control_path_dir(path: Path) -> None:
    """Create ``path`` private to us; refuse one that another user made or that is a
    symlink (it may sit in a shared temp dir, where anyone can create it first)."""
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermanentError(
            f"ssh control path dir {path} is not a directory of uid {os.getuid()}; remove it"
        )
    if st.st_mode & 0o077:
        path.chmod(0o700)


def inventory(
    targets: Iterable[Target],
    settings: AnsibleConfig,
    environ: Mapping[str, str] = os.environ,
    *,
    control_path: bool = True,
) -> dict:
    """The inventory for just these targets (those with an address)."""
    ssh = [
        "-o",
        f"UserKnownHostsFile={settings.known_hosts_file}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ServerAliveInterval={settings.server_alive_interval}",
        "-o",
        f"ServerAliveCountMax={settings.server_alive_count_max}",
        *settings.extra_ssh_args,
    ]
    common: dict[str, Any] = {
        "ansible_host_key_checking": True,
        "ansible_ssh_common_args": shlex.join(ssh),
        "fleetmedic_become": settings.become,
    }
    if control_path:
        common["ansible_control_path_dir"] = str(control_path_dir(settings.run_dir))
    key = secret_path(settings.ssh_key_file, settings.ssh_key_credential, environ)
    if key:
        common["ansible_ssh_private_key_file"] = str(key)
    if settings.remote_user:
        common["ansible_user"] = settings.remote_user
    if settings.become:
        common["ansible_become"] = True
    hosts = {t.name: {**t.vars, "ansible_host": t.address} for t in targets if t.address}
    return {"all": {"vars": common, "hosts": hosts}}


def run_playbook(
    playbook: str | os.PathLike[str] | list,
    targets: Sequence[Target],
    settings: AnsibleConfig,
    *,
    extravars: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    run_id: str | None = None,
    cancel: Callable[[], bool] | None = None,
    environ: Mapping[str, str] = os.environ,
    via: Via | None = None,
) -> RunResult:
    """Run ``playbook`` (a path, or plays as data) on ``targets``; wait for it to end."""
    run_id = run_id or new_run_id(
        Path(str(playbook)).stem if not isinstance(playbook, list) else "play"
    )
    pdd = settings.run_dir / run_id
    evidence = settings.evidence_dir
    try:
        (pdd / "project").mkdir(parents=True)
        evidence.mkdir(parents=True, exist_ok=True)
        if via is None:
            _make_control_path_dir(control_path_dir(settings.run_dir))
    except OSError as exc:
        raise TemporaryError(f"run {run_id}: cannot create {pdd}: {exc.strerror}", 30) from None
    if isinstance(playbook, list):
        path = pdd / "project" / "play.yml"
        path.write_text(yaml.safe_dump(playbook, sort_keys=False))
        playbook = path
    reachable = [t for t in targets if t.address]
    started, t0 = time.time(), time.monotonic()
    kwargs: dict[str, Any] = dict(
        private_data_dir=str(pdd),
        ident=run_id,
        playbook=str(playbook),
        inventory=inventory(reachable, settings, environ, control_path=via is None),
        envvars=_env(settings, environ),
        extravars={"fleetmedic_run_id": run_id, **(extravars or {})},
        limit=",".join(t.name for t in reachable),
        forks=settings.forks,
        timeout=int(timeout or settings.job_timeout),
        quiet=True,
        cancel_callback=cancel,
    )
    r: Any = None
    lost: receptor.Lost | None = None
    if reachable:
        try:
            if via is None:
                r = ansible_runner.run(**kwargs)
            else:
                del kwargs["cancel_callback"]
                r = receptor.run(
                    kwargs, via.node, via.mesh, timeout=kwargs["timeout"], cancel=cancel
                )
        except receptor.Lost as exc:
            lost = exc
        except ConfigurationError as exc:
            raise PermanentError(f"run {run_id}: {one_line(exc)}") from None
        except (AnsibleRunnerException, OSError) as exc:
            raise TemporaryError(f"run {run_id}: {one_line(exc)}", 30) from None
    if lost is not None:
        hosts = {t.name: HostResult(UNREACHABLE, message=str(lost)) for t in reachable}
    else:
        hosts = _outcomes(r, [t.name for t in reachable], run_id)
    hosts.update(
        {
            t.name: HostResult(
                UNREACHABLE,
                message="no address: neither the "
                "fleetmedic.io/ssh-host annotation nor an InternalIP",
            )
            for t in targets
            if not t.address
        }
    )
    hosts = {
        name: dataclasses.replace(h, evidence=_evidence(evidence / name, started))
        for name, h in hosts.items()
    }
    return RunResult(
        run_id=run_id,
        rc=r.rc if r else None,
        status=r.status if r else ("lost" if lost else "failed"),
        hosts=hosts,
        artifact_dir=pdd / "artifacts" / run_id,
        private_data_dir=pdd,
        duration=time.monotonic() - t0,
        executor=via.node if via else "local",
    )


def read_boot_ids(
    targets: Sequence[Target],
    settings: AnsibleConfig,
    *,
    timeout: float = 60,
    run_id: str | None = None,
    environ: Mapping[str, str] = os.environ,
    via: Via | None = None,
) -> RunResult:
    """Each host's /proc/sys/kernel/random/boot_id, in ``hosts[name].stdout``."""
    return run_playbook(
        BOOT_ID_PLAY,
        targets,
        settings,
        timeout=timeout,
        run_id=run_id or new_run_id("boot-id"),
        environ=environ,
        via=via,
    )


def evidence_for(node: str, settings: AnsibleConfig, episode: int | None = None) -> list[str]:
    """Bundles the diagnostics role fetched for ``node`` (those of one episode when
    given: they are named ``<node>-<request id>``, and request ids begin ``e<episode>-``)."""
    prefix = f"{node}-e{episode}-" if episode is not None else ""
    try:
        found = [
            p
            for p in (settings.evidence_dir / node).iterdir()
            if p.is_file() and p.name.startswith(prefix)
        ]
    except OSError:
        return []
    return [str(p) for p in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)]


def prune_runs(settings: AnsibleConfig) -> int:
    """Remove the oldest run directories beyond ``keep_runs``; how many went."""
    try:
        runs = sorted(p for p in settings.run_dir.iterdir() if p.is_dir() and p.name != "cp")
    except OSError:
        return 0
    old = runs[: max(0, len(runs) - settings.keep_runs)]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    return len(old)


def _env(settings: AnsibleConfig, environ: Mapping[str, str]) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:{environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "FLEETMEDIC_EVIDENCE_DIR": str(settings.evidence_dir),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
    }
    if settings.config_file:
        env["ANSIBLE_CONFIG"] = str(settings.config_file)
    return {**env, **settings.env}


def _outcomes(r: Any, names: list[str], run_id: str) -> dict[str, HostResult]:
    if r is None:
        return {}
    failed: dict[str, tuple[str, str]] = {}
    unreachable: dict[str, str] = {}
    stdout: dict[str, str] = {}
    last_task: dict[str, str] = {}
    stats = None
    for event in r.events:
        kind, data = event.get("event"), event.get("event_data") or {}
        host, res = data.get("host"), data.get("res") or {}
        if kind == "runner_on_start" and host:
            last_task[host] = data.get("task", "")
        elif kind == "runner_on_ok" and host and isinstance(res.get("stdout"), str):
            stdout[host] = res["stdout"].strip()
        elif kind == "runner_on_failed" and host and not data.get("ignore_errors"):
            failed[host] = (data.get("task", ""), _message(res))
        elif kind == "runner_on_unreachable" and host:
            unreachable[host] = _message(res)
        elif kind == "playbook_on_stats":
            stats = data
    if stats is None and not failed and not unreachable and r.status == "failed":
        raise PermanentError(
            f"run {run_id}: ansible-playbook failed before any task ran (rc {r.rc}): {_tail(r)}"
        )
    artifacts = (stats or {}).get("artifact_data") or {}
    out = {}
    for name in names:
        result = _status_of(name, unreachable, failed, stdout, last_task, stats, r)
        mine = {
            k: {name: v[name]} for k, v in artifacts.items() if isinstance(v, Mapping) and name in v
        }
        out[name] = dataclasses.replace(result, published=mine) if mine else result
    return out


def _status_of(
    name: str,
    unreachable: Mapping[str, str],
    failed: Mapping[str, tuple[str, str]],
    stdout: Mapping[str, str],
    last_task: Mapping[str, str],
    stats: Mapping[str, Any] | None,
    r: Any,
) -> HostResult:
    if name in unreachable and (stats is None or name in (stats.get("dark") or {})):
        return HostResult(UNREACHABLE, last_task.get(name), unreachable[name])
    if stats is not None and name in (stats.get("failures") or {}):
        task, msg = failed.get(name, ("", "failed"))
        return HostResult(FAILED, task or None, msg, stdout=stdout.get(name, ""))
    if stats is not None and name in (stats.get("processed") or {}):
        return HostResult(OK, stdout=stdout.get(name, ""))
    if r.status == "timeout":
        last = last_task.get(name)
        return HostResult(TIMEOUT, last, f"job timeout (last task: {last or 'none'})")
    if name in failed:
        return HostResult(FAILED, failed[name][0] or None, failed[name][1])
    return HostResult(FAILED, None, f"no result for this host (run {r.status})")


def _message(res: Mapping[str, Any]) -> str:
    for key in ("msg", "stderr", "module_stderr", "stdout"):
        value = res.get(key)
        if value:
            return one_line(value)
    return ""


def _tail(r: Any) -> str:
    try:
        lines = [ln for ln in r.stdout.read().splitlines() if ln.strip()]
    except (OSError, AttributeError):
        return "no output"
    return one_line(" ".join(lines[-3:])) or "no output"


def _evidence(directory: Path, since: float) -> tuple[str, ...]:
    try:
        return tuple(
            sorted(
                str(p)
                for p in directory.iterdir()
                if p.is_file() and p.stat().st_mtime >= since - 1
            )
        )
    except OSError:
        return ()
