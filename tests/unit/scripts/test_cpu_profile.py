"""scripts/cpu_profile.py: a command's CPU by program from the kernel's process accounting,
with what ran inside a node (below systemd-nspawn) counted as ``node:``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "cpu_profile.py"
_spec = importlib.util.spec_from_file_location("cpu_profile", SCRIPT)
assert _spec and _spec.loader
cpu_profile = importlib.util.module_from_spec(_spec)
sys.modules["cpu_profile"] = cpu_profile  # (its dataclass looks its module up there)
_spec.loader.exec_module(cpu_profile)


def record(pid: int, ppid: int, comm: str, utime: int, stime: int = 0, start: int = 0) -> bytes:
    """One acct_v3 record as the kernel writes it (times as comp_t ticks)."""
    return cpu_profile._V3.pack(
        0, 3, 0, 0, 0, 0, pid, ppid, start, 1.0, utime, stime, 0, 0, 0, 0, 0, 0, comm.encode()
    )


def test_comp_t_has_a_base_8_exponent():
    assert cpu_profile.comp_t(100) == 100
    assert cpu_profile.comp_t((1 << 13) | 5) == 40  # 5 * 8
    assert cpu_profile.comp_t((2 << 13) | 3) == 192  # 3 * 64


def test_programs_in_a_node_are_counted_apart_and_times_add_up():
    # in the order processes end: children before their parents
    ended = [
        record(20, 10, "python3", 50, 20),  # a module run on the node, below its sshd
        record(15, 12, "sshd", 5),  # a session's sshd, below the node's sshd (pid 12)
        record(10, 5, "systemd", 30),
        record(5, 1, "systemd-nspawn", 1),
        record(31, 30, "ansible-playboo", (1 << 13) | 25),  # 25 * 8 ticks
        record(30, 1, "python3", 200, 50),  # the same name on the host
        b"\x00\x02" + bytes(62),  # a v2 record: skipped
    ]
    procs = list(cpu_profile.records(b"".join(ended)))
    assert len(procs) == 6
    # the node's sshd (pid 12) left no record: the session's sshd is not known as a node's
    assert cpu_profile.by_program(procs)[0]["sshd"] == pytest.approx(0.05)
    ended.insert(2, record(12, 10, "sshd", 0))
    cpu, count = cpu_profile.by_program(cpu_profile.records(b"".join(ended)))
    assert cpu["node:python3"] == pytest.approx(0.7) and count["node:python3"] == 1
    assert cpu["python3"] == pytest.approx(2.5)
    assert cpu["node:sshd"] == pytest.approx(0.05) and count["node:sshd"] == 2
    assert cpu["node:systemd"] == pytest.approx(0.3)
    assert cpu["ansible-playboo"] == pytest.approx(2.0)
    assert cpu["systemd-nspawn"] == pytest.approx(0.01)


def test_a_reused_pid_is_not_taken_for_the_parent():
    """pid_max is 32768: in a long run a pid comes back; a parent is the first record with
    that pid after its child's that started no later than the child."""
    data = b"".join(
        [
            record(7, 1, "systemd-nspawn", 1, start=100),  # node 1's nspawn, pid 7, ended
            record(9, 7, "systemd", 1, start=101),  # ... (ends before it, in truth)
            record(40, 7, "python3", 100, start=500),  # later, on the host: its parent...
            record(7, 1, "ansible-playboo", 50, start=400),  # ...is this pid 7, not nspawn
            record(41, 7, "python3", 100, start=600),  # started after the ansible 7 ended:
        ]
    )
    cpu, _ = cpu_profile.by_program(cpu_profile.records(data))
    assert cpu["python3"] == pytest.approx(2.0), "host processes taken for a node's"
    assert "node:python3" not in cpu
    assert cpu["ansible-playboo"] == pytest.approx(0.5)


@pytest.mark.skipif(os.geteuid() != 0, reason="acct(2) needs root")
@pytest.mark.skipif(
    not Path("/proc/sys/kernel/acct").exists(),
    reason="this kernel has no BSD process accounting (CONFIG_BSD_PROCESS_ACCT)",
)
@pytest.mark.skipif(
    "FLEETMEDIC_CPU_PROFILE" in os.environ,
    reason="a profile is being taken: switching accounting to a file of its own would end it",
)
def test_a_real_command_is_accounted_with_its_children(tmp_path):
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--json",
            "--keep",
            str(tmp_path / "pacct"),
            "--",
            "sh",
            "-c",
            f'{sys.executable} -c "{busy}"; true',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    programs = json.loads(out.stdout)
    seconds, procs = programs[Path(sys.executable).name[:15]]  # the kernel's command name
    assert seconds >= 0.29 and procs >= 1
    assert programs["sh"][1] >= 1, "the parent shell has its record too"
    assert (tmp_path / "pacct").stat().st_size % 64 == 0


def test_no_command_and_no_file_is_a_usage_error():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert out.returncode == 2 and "give a command" in out.stderr
