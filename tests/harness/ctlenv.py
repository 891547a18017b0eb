"""The controller's test bench: kwok Nodes mapped onto test-fleet SSH nodes, a controller
config with short timeouts, GPU faults, and the controller as a real subprocess.

Used by tests/integration/test_controller_e2e.py, the demo (tests/harness/demo.py) and the
benchmarks in bench/. Nothing here is a mock: the API server, sshd, reboots, Ansible and
SMTP are real; the GPU is the fake libnvidia-ml.so driven by each node's scenario file and
the kernel log is the node's test log file.

- :func:`prepare_nodes`: on each fleet node, a check config (``/etc/fleetmedic/check.yaml``:
  NVIDIA, 2 GPUs expected, the test kernel log) and a boot unit that writes what a GPU
  node's kernel logs at every boot, the ``Linux version`` banner and the NVIDIA driver's
  ``NVRM: loading NVIDIA UNIX ...`` line, to that log (the scanner starts a new boot
  segment at the driver load). So a Xid logged before a reboot belongs to an earlier boot
  afterwards, and a node whose fault a reboot cures passes verify after one.
- :func:`healthy`, :func:`xid79`, :func:`gpu_lost`: the node's GPUs are fine; a Xid 79 in
  this boot's log (cured by a reboot); a GPU that stays lost (nothing automatic cures it).
- :func:`register`: kwok Nodes named ``<pool>-<i>`` whose InternalIP is the fleet node's.
- :func:`state_of`, :func:`history`: a node's repair state (its taint) and its recorded
  attempts.
- :func:`write_config`: the controller's YAML, with explicit safety limits (the defaults
  hold everything in a 3-node fleet) and a playbook directory whose ``group_vars`` make a
  test run fast (see :data:`GROUP_VARS`).
- :class:`ControllerProcess`: ``fleetmedic run --config ...`` as a subprocess; ``kill9()``
  kills it and every process it started, as systemd does to a service's cgroup.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.harness.loadscale import Deadline

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
FLEETMEDIC = VENV_BIN / "fleetmedic"
POOL_LABEL = "fleetmedic.test/pool"
TEST_REPO = ROOT / ".cache" / "molecule" / "apt-repo"
HEALTHY_NVML = {"driver_version": "550.90.07", "gpus": [{}, {}]}
LOST_NVML = {"driver_version": "550.90.07", "gpus": [{}, {"lost": True}]}
# the fake nvidia-smi (tests/fakes/nvidia) clears these on --gpu-reset, as a real reset does
RESET_CURABLE_NVML = {
    "driver_version": "550.90.07",
    "gpus": [{}, {"ecc_volatile_uncorrected": 4, "recovery_action": 1}],
}
# ... and refuses to reset a GPU another process holds ("In use by another client")
RESET_REFUSED_NVML = {"driver_version": "550.90.07", "gpus": [{}, {"in_use": True}]}
XID79 = "NVRM: Xid (PCI:0000:5a:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
CHECK_YAML = (
    "vendor: nvidia\nexpected_gpus: 2\ntimeout: 20\n"
    "kernel:\n  path: /var/lib/fleetmedic-test/kern.log\n"
)
BANNER_UNIT = """[Unit]
Description=fleetmedic test: log this boot's kernel banner and NVIDIA driver load
DefaultDependencies=no
After=local-fs.target
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo "$$(date "+%%b %%d %%H:%%M:%%S") $$(hostname) kernel: [    0.000000] \
Linux version 6.1.0-fleetmedic-test" >> /var/lib/fleetmedic-test/kern.log'
ExecStart=/bin/sh -c 'echo "$$(date "+%%b %%d %%H:%%M:%%S") $$(hostname) kernel: [    4.210000] \
NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024" \
>> /var/lib/fleetmedic-test/kern.log'

[Install]
WantedBy=multi-user.target
"""
# Role variables for test runs: the playbook directory's group_vars/all.yml.
GROUP_VARS: dict[str, Any] = {
    "ansible_python_interpreter": "/usr/bin/python3",
    "reboot_timeout": 25,  # a hung node fails in ~40 s, not 15 min
    "reboot_verify": False,  # the ladder's own verify phase checks
    "gpu_reset_verify": False,  # the same for the reset rung
    "diagnostics_nvidia_bug_report": False,
    "diagnostics_command_timeout": 30,
    "diagnostics_check_timeout": 60,
    "gpu_health_timeout": 60,
    # reimage: the pinned test "driver" from the local apt repository
    "nvidia_driver_packages": ["fm-nvidia-kernel", "fm-nvidia-utils"],
    "nvidia_driver_version": "550.1-1",
    "nvidia_driver_repo_uris": ["file:///srv/fm-test-repo"],
    "nvidia_driver_repo_suites": ["./"],
    "nvidia_driver_repo_trusted": True,
}


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.5,
    tolerate: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll ``predicate`` until it is truthy; exceptions in ``tolerate`` count as "not yet"
    (e.g. an API server slow to answer on a loaded machine). ``timeout`` is an idle
    machine's figure, stretched by the load (tests/harness/loadscale.py)."""
    deadline = Deadline(timeout)
    while True:
        try:
            value = predicate()
        except tolerate:
            value = None
        if value:
            return value
        if deadline.passed():
            raise AssertionError(f"timed out after {deadline} waiting for {what}")
        time.sleep(interval)


# -- fleet nodes --------------------------------------------------------------------------
def prepare_nodes(fleet, nodes: Iterable | None = None) -> None:
    """Check config and boot-banner unit on each node; GPUs healthy, kernel log clean."""
    script = (
        f"mkdir -p /etc/fleetmedic && printf '%s' '{CHECK_YAML}' > /etc/fleetmedic/check.yaml"
        f" && cat > /etc/systemd/system/fm-test-boot-banner.service <<'EOF'\n{BANNER_UNIT}EOF\n"
        "systemctl daemon-reload && systemctl enable --quiet fm-test-boot-banner.service"
    )
    for node in nodes or fleet.nodes:
        node.ssh(script, timeout=60)
        healthy(node)


def healthy(node) -> None:
    (node.state_dir / "nvml.json").write_text(json.dumps(HEALTHY_NVML))


def gpu_lost(node) -> None:
    """GPU 1 is lost and stays lost across reboots and reinstalls."""
    (node.state_dir / "nvml.json").write_text(json.dumps(LOST_NVML))


def reset_curable(node) -> None:
    """GPU 1 has an uncorrected ECC error with recovery action "GPU reset": a reset cures it."""
    (node.state_dir / "nvml.json").write_text(json.dumps(RESET_CURABLE_NVML))


def reset_refused(node) -> None:
    """A Xid 79 in this boot's log, and GPU 1 held by a process: the reset is refused, and
    only a reboot cures the node."""
    (node.state_dir / "nvml.json").write_text(json.dumps(RESET_REFUSED_NVML))
    xid79(node)


def xid79(node) -> None:
    """A Xid 79 in this boot's kernel log: `fleetmedic check` fails until the next boot."""
    with node.kern_log.open("a") as f:
        f.write(f"{time.strftime('%b %d %H:%M:%S')} {node.name} kernel: [ 4242.424242] {XID79}\n")


NODE_APT_REPO = "/srv/fm-test-repo"
# tests/molecule/_shared/prepare_apt_repo.yml's steps (the Molecule scenarios and
# test_playbooks_reimage run that file), as one SSH session reading the repository as a tar
# on stdin: the play's per-file copy took about 90 s of a test at load 12, this 1-2 s.
# python3-apt comes from the repository only where none is installed (Debian 12's build:
# a Debian 13 node, Slurm 24.11's, has its own for Python 3.13).
PREPARE_APT_REPO = f"""set -e
mkdir -p {NODE_APT_REPO}
tar -x --no-same-owner -C {NODE_APT_REPO}
if [ -e /etc/apt/sources.list ] && [ ! -e /etc/apt/sources.list.disabled ]; then
  mv /etc/apt/sources.list /etc/apt/sources.list.disabled
fi
if ! ls /usr/lib/python3/dist-packages/apt_pkg.cpython-*.so >/dev/null 2>&1; then
  dpkg --install $(ls {NODE_APT_REPO}/python3-apt_*.deb {NODE_APT_REPO}/python-apt-common_*.deb \
    {NODE_APT_REPO}/distro-info-data_*.deb | sort)
fi
"""


def prepare_apt_repo(nodes: Iterable) -> None:
    """Give nodes the local test apt repository, as the molecule scenarios do (the
    unreachable Debian source set aside, python3-apt installed for Ansible's apt module),
    so the reimage step really reinstalls the pinned test driver packages."""
    subprocess.run(
        [sys.executable, str(ROOT / "tests/molecule/_shared/build_test_repo.py"), str(TEST_REPO)],
        check=True,
        capture_output=True,
        text=True,
    )
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        for path in sorted(TEST_REPO.iterdir()):
            info = tar.gettarinfo(str(path), arcname=path.name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    for node in nodes:
        p = subprocess.run(
            node.ssh_command(PREPARE_APT_REPO),
            input=packed.getvalue(),
            capture_output=True,
            timeout=300,
        )
        if p.returncode != 0:
            raise AssertionError(
                f"{node.name}: preparing the apt repository failed (rc {p.returncode}):\n"
                + p.stderr.decode(errors="replace")[-3000:]
            )


# -- kube ------------------------------------------------------------------------------
def register(
    kube,
    fleet,
    pool: str,
    nodes: Iterable | None = None,
    taints: Mapping[str, list[dict]] | None = None,
) -> dict[str, Any]:
    """kwok Nodes ``<pool>-<index>`` for fleet nodes; returns {node name: fleet node}."""
    fleet_nodes = list(nodes or fleet.nodes)
    names = [f"{pool}-{n.index}" for n in fleet_nodes]
    for name, n in zip(names, fleet_nodes, strict=True):
        kube.make_nodes(
            [name],
            labels={
                POOL_LABEL: pool,
                "fleetmedic.io/gpu-vendor": "nvidia",
                "fleetmedic.io/expected-gpus": "2",
            },
            addresses=[n.address],
            taints=(taints or {}).get(name, []),
        )
    return dict(zip(names, fleet_nodes, strict=True))


def node(kube, name: str) -> dict:
    return kube.request("GET", f"/api/v1/nodes/{name}")


def in_service(kube, name: str) -> bool:
    """No taint left and schedulable again."""
    n = node(kube, name)
    return not n["spec"].get("taints") and not n["spec"].get("unschedulable")


def annotation(kube, name: str, key: str, default: Any = None) -> Any:
    raw = (node(kube, name)["metadata"].get("annotations") or {}).get(key)
    return default if raw is None else json.loads(raw)


def taints(kube, name: str) -> list[dict]:
    return [
        {k: t[k] for k in ("key", "value", "effect") if k in t}
        for t in node(kube, name)["spec"].get("taints") or []
    ]


def state_of(kube, name: str) -> str:
    """The node's ``fleetmedic.io/repair`` taint value, or ``healthy`` without one."""
    values = [
        t["value"]
        for t in taints(kube, name)
        if t["key"] == "fleetmedic.io/repair" and t["effect"] == "NoSchedule"
    ]
    return values[0] if values else "healthy"


def history(kube, name: str) -> list[dict]:
    """The node's attempts as recorded in its history annotation."""
    return annotation(kube, name, "fleetmedic.io/history", [])


def set_taints(kube, name: str, edit: Callable[[list[dict]], list[dict]]) -> None:
    """Read-modify-write of spec.taints with the resourceVersion as precondition (409:
    read again), as any well-behaved actor does."""
    for _ in range(50):
        n = node(kube, name)
        new = edit([dict(t) for t in n["spec"].get("taints") or []])
        body = {
            "metadata": {"resourceVersion": n["metadata"]["resourceVersion"]},
            "spec": {"taints": new or None},
        }
        try:
            kube.request(
                "PATCH", f"/api/v1/nodes/{name}", body, content_type="application/merge-patch+json"
            )
            return
        except Exception as exc:  # ApiError 409: someone wrote in between
            if getattr(exc, "status", None) != 409:
                raise
    raise AssertionError(f"{name}: 50 conflicts in a row")


def taint_all(kube, names: Iterable[str], state: str = "reboot") -> None:
    """Add the repair taint at ``state`` to every node at once (a storm, as agents fence)."""
    threads = [
        threading.Thread(target=set_taints, args=(kube, n, lambda t: [*t, repair_taint(state)]))
        for n in names
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def scrape(port: int, series: str) -> float | None:
    """One series from a /metrics endpoint on loopback, as Prometheus reads it (None: the
    series is absent or the endpoint does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def repair_taint(state: str) -> dict:
    return {"key": "fleetmedic.io/repair", "value": state, "effect": "NoSchedule"}


# -- config ----------------------------------------------------------------------------
def playbook_dir(workdir: Path, extra_vars: Mapping[str, Any] | None = None) -> Path:
    """The collection's playbooks (symlinked) with test group_vars next to them."""
    d = workdir / "playbooks"
    (d / "group_vars").mkdir(parents=True, exist_ok=True)
    for pb in (ROOT / "playbooks").glob("*.yml"):
        link = d / pb.name
        if not link.exists():
            link.symlink_to(pb)
    (d / "group_vars" / "all.yml").write_text(yaml.safe_dump({**GROUP_VARS, **(extra_vars or {})}))
    return d


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(
    workdir: Path, kube, fleet, pool: str, smtp=None, overrides: Mapping[str, Any] | None = None
) -> Path:
    """The controller config for one test pool; ``overrides`` merge into the data.
    ``kube`` None: no `kube` section (a `kind: slurm` config says its cluster in
    ``overrides``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "kube": (
            {"kubeconfig": kube.kubeconfig, "label_selector": f"{POOL_LABEL}={pool}"}
            if kube is not None
            else {}
        ),
        "ladder": {
            "playbooks": {
                "diagnose": {"playbook": "diagnose.yml", "timeout": 180},
                "reset": {"playbook": "reset.yml", "timeout": 180},
                "reboot": {"playbook": "reboot.yml", "timeout": 120},
                "reinstall_nvidia": {"playbook": "reimage.yml", "timeout": 400},
                "reinstall_amd": {"playbook": "reimage.yml", "timeout": 400},
                "verify": {"playbook": "verify.yml", "timeout": 180},
            },
            "probe_timeout": 30,
            "probe_interval": 3,
            "foreign_grace": 60,
        },
        "ansible": {
            "playbook_dir": str(playbook_dir(workdir)),
            "config_file": str(ROOT / "ansible.cfg"),
            "run_dir": str(workdir / "runs"),
            "evidence_dir": str(workdir / "evidence"),
            "remote_user": "root",
            "ssh_key_file": str(fleet.private_key),
            "known_hosts_file": str(fleet.known_hosts),
            "job_timeout": 600,
        },
        # 3-node fleets: the defaults (min_healthy 50%, 10% of the pool, breaker) hold all
        "safety": {
            "max_concurrent": 3,
            "max_concurrent_percent": 100,
            "min_healthy": 0,
            "breaker": {"enabled": False},
            "flap": {"count": 8},
            "pause_configmap": f"kube-system/fleetmedic-{pool}",
            "drain": {"timeout": 20, "retry_interval": 10},
        },
        "metrics": {"address": "127.0.0.1", "port": free_port()},
        "leader_election": {
            "namespace": "kube-system",
            "lease_name": f"fleetmedic-{pool}",
            "lease_duration": 6,
            "renew_deadline": 4,
            "retry_period": 1,
            "node_lease_duration": 8,
        },
    }
    if smtp is not None:
        data["smtp"] = {
            "host": smtp.host,
            "port": smtp.port,
            "tls": "none",
            "from": "fleetmedic@example.test",
            "to": ["gpu-oncall@example.test"],
            "retry_interval": 5,
            "timeout": 10,
        }
    if kube is None:
        del data["kube"]
    _merge(data, overrides or {})
    path = workdir / "controller.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _merge(base: dict, extra: Mapping[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


# -- the controller as a process ---------------------------------------------------------
def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(stat.parent.name))
    return tree


def process_tree(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child after fork imports nothing


def _stop_with_parent() -> None:
    """In the child: SIGTERM when the spawning thread's process dies (a killed test run
    or demo), so no controller outlives it; SIGTERM lets it cancel its playbook runs."""
    _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ControllerProcess:
    """``fleetmedic run --config CONFIG`` in the background, logging to ``log``. It is
    stopped (SIGTERM) if the process that started it dies."""

    def __init__(self, config: Path, log: Path, *args: str, prefix: tuple[str, ...] = ()) -> None:
        """``prefix``: run it under a command (``nsenter --net=...``: another bastion)."""
        self.config, self.log, self.args, self.prefix = config, log, args, prefix
        self.proc: subprocess.Popen | None = None

    def start(self) -> ControllerProcess:
        env = {
            **os.environ,
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
        out = self.log.open("ab")
        try:
            self.proc = subprocess.Popen(
                [*self.prefix, str(FLEETMEDIC), "run", "--config", str(self.config), *self.args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_stop_with_parent,
            )
        finally:
            out.close()
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the controller and everything it started (ansible-playbook runs in a
        session of its own), as systemd kills a service's cgroup."""
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGSTOP)  # no new children while we look
        except ProcessLookupError:
            pass
        pids = process_tree(self.proc.pid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        for pid in process_tree(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20) -> int | None:
        if not self.alive:
            return self.proc.returncode if self.proc else None
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def cli(
    config: Path, *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run a ``fleetmedic`` controller command (status, plan, release, reset)."""
    return subprocess.run(
        [str(FLEETMEDIC), *args, "--config", str(config)],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- a whole stage for the demo and the benchmarks ----------------------------------------
class Stage:
    """API server + fleet (+ SMTP sink), nodes prepared; ``with Stage(3, workdir) as s:``.
    Everything is torn down on exit, also on Ctrl-C."""

    def __init__(self, nodes: int, workdir: Path, smtp: bool = False, prefix: str = "bench"):
        self.nodes, self.workdir, self.want_smtp, self.prefix = nodes, workdir, smtp, prefix
        self.kube = self.fleet = self.sink = None

    def __enter__(self) -> Stage:
        from tests.harness.fleet import start_fleet
        from tests.harness.kube import KubeCluster
        from tests.harness.smtp import SmtpSink

        try:
            self.fleet = start_fleet(self.nodes, prefix=self.prefix, owned=True)
            self.kube = KubeCluster(self.workdir / "kube").start()
            if self.want_smtp:
                self.sink = SmtpSink().start()
            prepare_nodes(self.fleet)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sink is not None:
            self.sink.stop()
        if self.fleet is not None:
            self.fleet.down()
        if self.kube is not None:
            self.kube.stop()


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def wait_state(kube, name: str, state: str, proc: ControllerProcess, timeout: float) -> None:
    """Wait for ``name`` to reach ``state`` while ``proc`` stays alive (its log's tail is
    printed when it does not)."""

    def reached():
        assert proc.alive, f"the controller died:\n{proc.tail()}"
        return state_of(kube, name) == state

    try:
        wait_until(reached, timeout, f"{name} to be {state}")
    except AssertionError:
        print(proc.tail(80))
        raise
