"""run_bounded: a hard deadline that kills the whole process tree and keeps partial output."""

import os
import subprocess
import sys
import time

from fleetmedic.checks import proc
from fleetmedic.checks.proc import run_bounded


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_normal_exit_keeps_both_streams_and_code():
    r = run_bounded(["sh", "-c", "echo out; echo err >&2; exit 3"], 5)
    assert (r.returncode, r.stdout, r.stderr, r.timed_out, r.ok) == (
        3,
        "out\n",
        "err\n",
        False,
        False,
    )
    assert "exit 3" in r.describe()


def test_deadline_kills_the_process_group_and_keeps_partial_output(tmp_path):
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    r = run_bounded(["sh", "-c", f"echo started; sleep 60 & echo $! > {pidfile}; wait"], 1.0)
    elapsed = time.monotonic() - start
    assert r.timed_out and r.returncode is None and not r.abandoned
    assert r.stdout == "started\n"
    assert elapsed < 1.0 + proc.KILL_GRACE + 0.5
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild), "the grandchild holding the pipe must die with the group"
    assert "no answer within" in r.describe()


def test_a_background_leftover_does_not_hold_a_finished_run():
    start = time.monotonic()
    r = run_bounded(["sh", "-c", "sleep 60 & echo done"], 10)
    assert r.returncode == 0 and r.stdout == "done\n" and not r.timed_out
    assert time.monotonic() - start < proc.KILL_GRACE + 1


def test_missing_program_is_an_error_not_an_exception():
    r = run_bounded(["/nonexistent/tool", "--json"], 1)
    assert r.error and r.returncode is None and not r.ok
    assert "cannot run" in r.describe()


def test_output_is_capped():
    r = run_bounded([sys.executable, "-c", "print('x' * 100000)"], 5, max_output=1000)
    assert len(r.stdout) == 1000


def test_a_stuck_previous_run_blocks_its_key_only():
    # A process that survived SIGKILL (D state) cannot be made on purpose; register a
    # living one by hand the way run_bounded does when the kill grace runs out.
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with proc._stuck_lock:
            proc._stuck["test-key"] = sleeper
        r = run_bounded(["true"], 5, key="test-key")
        assert r.timed_out and r.error and str(sleeper.pid) in r.error and r.elapsed == 0.0
        assert run_bounded(["true"], 5, key="other-key").ok
        sleeper.kill()
        sleeper.wait()
        assert proc.stuck("test-key") is None
        assert run_bounded(["true"], 5, key="test-key").ok
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        proc._stuck.pop("test-key", None)


def test_env_is_passed():
    r = run_bounded(
        ["sh", "-c", "echo $FLEETMEDIC_PROBE"], 5, env={**os.environ, "FLEETMEDIC_PROBE": "yes"}
    )
    assert r.stdout == "yes\n"
