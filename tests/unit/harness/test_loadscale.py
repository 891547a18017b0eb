"""tests/harness/loadscale.py: a test's deadline is its idle-machine figure times the load
per CPU (1 to 4), and once stretched it never shrinks back mid-wait."""

from __future__ import annotations

import itertools

import pytest

from tests.harness import loadscale


def loadavg(tmp_path, value: float) -> str:
    path = tmp_path / "loadavg"
    path.write_text(f"{value} 1.00 1.00 3/300 4242\n")
    return str(path)


def test_the_factor_is_the_load_per_cpu_between_1_and_4(tmp_path, monkeypatch):
    monkeypatch.delenv(loadscale.ENV, raising=False)
    monkeypatch.setattr(loadscale, "cpus", lambda: 2)
    for load, want in ((0.5, 1.0), (2.0, 1.0), (5.0, 2.5), (40.0, 4.0)):
        assert loadscale.factor(loadavg(tmp_path, load)) == want, load


def test_the_override_fixes_the_factor(monkeypatch):
    monkeypatch.setenv(loadscale.ENV, "1")
    assert loadscale.scaled(25) == 25
    monkeypatch.setenv(loadscale.ENV, "4")
    assert loadscale.scaled(25) == 100
    monkeypatch.setenv(loadscale.ENV, "soon")
    with pytest.raises(ValueError, match=loadscale.ENV):
        loadscale.factor()


def test_an_unreadable_loadavg_counts_as_idle(tmp_path):
    assert loadscale.load_per_cpu(str(tmp_path / "absent")) == 1.0


def test_a_deadline_keeps_the_highest_stretch_it_saw(monkeypatch):
    monkeypatch.delenv(loadscale.ENV, raising=False)
    factors = itertools.chain([1.0, 3.0], itertools.repeat(1.0))
    monkeypatch.setattr(loadscale, "factor", lambda: next(factors))
    d = loadscale.Deadline(10)
    assert d.allowed() == 30  # the load came
    assert d.allowed() == 30  # and went: the wait keeps what it was given
    assert not d.passed() and 0 < d.remaining() <= 30
    assert "allowed 10s x load 3.0" in str(d)


def test_a_hang_guard_stretches_with_the_load_and_more_in_a_low_priority_lane(monkeypatch):
    monkeypatch.setenv(loadscale.ENV, "2")
    monkeypatch.setattr(loadscale.os, "nice", lambda inc: 0)
    assert loadscale.guard(60) == 120
    monkeypatch.setattr(loadscale.os, "nice", lambda inc: 19)  # scripts/test.sh's unit lane
    assert loadscale.guard(60) == 1200
