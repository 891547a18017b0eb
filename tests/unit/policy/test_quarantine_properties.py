"""Properties of the quarantine rung on a simulated node fenced again and again for random
faults at random intervals, under controller crashes (kill -9 between any two steps):
a quarantine runs exactly when the history says this is the second return to service for
the same fault within the window, and a node returns to service from one only when every
test passed."""

from __future__ import annotations

import json
import random
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policysim import config
from test_quarantine_rung import QWorld, diag_line, fence

from fleetmedic.model import keys
from fleetmedic.policy import quarantine

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WINDOW = timedelta(days=7)
RESULTS = {
    quarantine.RETURN: diag_line(),
    quarantine.REPLACE: diag_line(
        "problem", [{"name": "SM Stress", "gpus": [1], "status": "fail"}], summary="SM Stress"
    ),
    quarantine.UNKNOWN: None,
}

rounds = st.lists(
    st.tuples(
        st.sampled_from(["xid.79", "xid.48", "xid.119"]),
        st.sampled_from(
            [timedelta(hours=1), timedelta(days=2), timedelta(days=6), timedelta(days=8)]
        ),
        st.sampled_from(list(RESULTS)),
    ),
    min_size=1,
    max_size=6,  # below the flap limit
)


@FAST
@given(rounds, st.integers(0, 2**32), st.floats(0, 0.3))
def test_quarantine_runs_exactly_when_due_and_returns_only_a_clean_node(spec, seed, crash):
    w = QWorld(
        config(
            ladder__order=["reboot", "manual"],
            ladder__quarantine={"enabled": True},
            safety__flap={"count": 8},  # (flap damping has tests of its own)
        ),
        random.Random(seed),
    )
    w.add("n1")
    w.crash_rate = crash
    returns: list[tuple[object, str]] = []  # (when, fault) of each return to service
    for rule, gap, verdict in spec:
        w.now += gap
        fence(w)
        w.nodes["n1"]["metadata"]["annotations"][keys.ANN_LAST_FINDING] = json.dumps(
            {"boot": "b", "fp": "f", "rule": rule}
        )
        due = any(f == rule and w.now - t < WINDOW for t, f in returns)
        w.diag = RESULTS[verdict]
        before = w.quarantines
        for _ in range(400):
            w.cycle()
            if w.settled():
                break
        assert w.settled()
        v = w.view("n1")
        assert (w.quarantines > before) == due, (rule, returns, w.now)
        if not due:
            assert v.state == "healthy"
            returns.append((w.now, rule))
            continue
        rec = json.loads(v.annotations[keys.ANN_QUARANTINE])
        assert rec["recommendation"] == verdict
        if verdict == quarantine.RETURN:
            assert v.state == "healthy" and not v.unschedulable
            returns.append((w.now, rule))
            continue
        assert v.state == "manual" and v.unschedulable, "never back in service on a doubt"
        break
