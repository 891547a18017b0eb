"""adapters/slurmrecord.py: our record in Extra stays within RECORD_MAX bytes, the oldest
attempts of its history dropped first; a record too big without any history is refused,
nothing written. (What RECORD_MAX costs the controller's poll: bench/slurm_record_size.py.)"""

from __future__ import annotations

import json

import pytest

from fleetmedic.adapters.slurmrecord import RECORD_KEY, RECORD_MAX, fitted
from fleetmedic.errors import PermanentError
from fleetmedic.model import keys


def attempt(n: int) -> dict:
    return {"ep": n, "step": "reboot", "attempt": 1, "result": "fail", "message": "x" * 240}


def doc(history: list[dict], **more: str) -> dict:
    return {"site": {"rack": 7}, RECORD_KEY: {keys.ANN_HISTORY: json.dumps(history), **more}}


def test_a_record_within_the_bound_is_written_as_it_is():
    d = doc([attempt(1), attempt(2)])
    assert json.loads(fitted("n1", d)) == d


def test_the_oldest_attempts_go_first_and_the_rest_stays():
    history = [attempt(n) for n in range(1, 201)]  # ~60 KB of history
    text = fitted("n1", doc(history, **{keys.ANN_IN_FLIGHT: '{"phase":"reboot"}'}))
    assert len(text.encode()) <= RECORD_MAX
    out = json.loads(text)
    kept = json.loads(out[RECORD_KEY][keys.ANN_HISTORY])
    assert kept == history[-len(kept) :] and 50 < len(kept) < 200, len(kept)
    assert out[RECORD_KEY][keys.ANN_IN_FLIGHT] == '{"phase":"reboot"}'
    assert out["site"] == {"rack": 7}, "other keys of Extra are kept"


def test_a_record_too_big_without_its_history_is_refused():
    with pytest.raises(PermanentError, match="even without its repair history"):
        fitted("n1", doc([], **{keys.ANN_LAST_RESULTS: "y" * (RECORD_MAX + 1)}))
