"""The receptor executor's per-execution-node cap (ReceptorConfig.max_in_flight): a run
waits for a slot, gives up on cancel or at its timeout, and a run that never got a unit
running gives its slot back. The mesh itself is tested in
tests/integration/test_receptor_executor.py."""

from __future__ import annotations

import threading
import time

import pytest

from fleetmedic.adapters import receptor
from fleetmedic.errors import TemporaryError
from fleetmedic.model.config import ReceptorConfig


def _settings(tmp_path, **kw) -> ReceptorConfig:
    return ReceptorConfig(socket=tmp_path / "absent.sock", poll_interval=0.01, **kw)


def _job(tmp_path, ident: str) -> dict:
    pdd = tmp_path / ident
    (pdd / "project").mkdir(parents=True)
    (pdd / "project" / "play.yml").write_text("- hosts: all\n  tasks: []\n")
    return {
        "private_data_dir": str(pdd),
        "ident": ident,
        "playbook": "play.yml",
        "inventory": {"all": {"hosts": {"n1": {}}}},
        "quiet": True,
    }


def test_one_slot_per_node_and_settings(tmp_path):
    s = _settings(tmp_path, max_in_flight=1)
    assert receptor._slot(s, "exec-1") is receptor._slot(s, "exec-1")
    assert receptor._slot(s, "exec-1") is not receptor._slot(s, "exec-2")
    assert receptor._slot(s, "exec-1") is not receptor._slot(_settings(tmp_path), "exec-1")


def test_a_full_node_makes_a_run_wait_until_cancelled_or_timed_out(tmp_path):
    s = _settings(tmp_path, max_in_flight=1)
    slot = receptor._slot(s, "exec-full")
    assert slot.acquire(blocking=False)
    try:
        t0 = time.monotonic()
        with pytest.raises(TemporaryError, match="1 units in flight for 0 s"):
            receptor.run(_job(tmp_path, "a"), "exec-full", s, timeout=0.2)
        assert time.monotonic() - t0 >= 0.2
        done = receptor.run(_job(tmp_path, "b"), "exec-full", s, timeout=60, cancel=lambda: True)
        assert (done.status, done.unit) == ("canceled", "")
    finally:
        slot.release()


def test_a_run_that_could_not_submit_frees_its_slot(tmp_path):
    s = _settings(tmp_path, max_in_flight=1)
    for ident in ("c", "d"):  # the second would wait forever if the first kept the slot
        with pytest.raises(TemporaryError, match="submit failed"):
            receptor.run(_job(tmp_path, ident), "exec-x", s, timeout=1)
    slot = receptor._slot(s, "exec-x")
    assert slot.acquire(blocking=False)
    slot.release()
    assert not [t for t in threading.enumerate() if t.name.startswith("receptor-")]
