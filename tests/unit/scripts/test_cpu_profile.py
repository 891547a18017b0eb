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


def record(pid: int, ppid: int, comm: str, utime: int, stime: int = 0) -> bytes:
    """One acct_v3 record as the kernel writes it (times as comp_t ticks)."""
    return cpu_profile._V3.pack(
        0, 3, 0, 0, 0, 0, pid, ppid, 0, 1.0, utime, stime, 0, 0, 0, 0, 0, 0, comm.encode()
    )


def test_comp_t_has_a_base_8_exponent():
    assert cpu_profile.comp_t(100) == 100
    assert cpu_profile.comp_t((1 << 13) | 5) == 40  # 5 * 8
    assert cpu_profile.comp_t((2 << 13) | 3) == 192  # 3 * 64


def test_programs_in_a_node_are_counted_apart_and_times_add_up():
    data = b"".join(
        [
            record(20, 10, "python3", 50, 20),  # a module run on the node, below its sshd
            record(15, 12, "sshd", 5),
            record(10, 5, "systemd", 30),
            record(5, 1, "systemd-nspawn", 1),
            record(30, 1, "python3", 200, 50),  # the same name on the host
            record(31, 30, "ansible-playboo", (1 << 13) | 25),  # 25 * 8 ticks
            b"\x00\x02" + bytes(62),  # a v2 record: skipped
        ]
    )
    procs = list(cpu_profile.records(data))
    assert len(procs) == 6
    # the node's sshd (pid 15) is below pid 12, which left no record: not known as a node's
    data += record(12, 10, "sshd", 0)
    cpu, count = cpu_profile.by_program(cpu_profile.records(data))
    assert cpu["node:python3"] == pytest.approx(0.7) and count["node:python3"] == 1
    assert cpu["python3"] == pytest.approx(2.5)
    assert cpu["node:sshd"] == pytest.approx(0.05) and count["node:sshd"] == 2
    assert cpu["node:systemd"] == pytest.approx(0.3)
    assert cpu["ansible-playboo"] == pytest.approx(2.0)
    assert cpu["systemd-nspawn"] == pytest.approx(0.01)


@pytest.mark.skipif(os.geteuid() != 0, reason="acct(2) needs root")
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
