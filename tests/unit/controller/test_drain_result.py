"""What a drain reports (kinds/kubedrain.py's DrainResult): the Outcome status and the
one-line message the ladder records and posts, for each way a drain can end."""

from __future__ import annotations

from fleetmedic.kinds.kubedrain import DrainResult
from fleetmedic.policy.drainplan import EMPTYDIR, NO_CONTROLLER


def result(**kw) -> DrainResult:
    return DrainResult(**{"evicted": ("ns/a",), "blocked": (), "skipped": (), **kw})


def test_complete():
    r = result(skipped=(("ns/ds", "DaemonSet"),), seconds=21.4)
    assert (r.status, r.complete) == ("ok", True)
    assert r.message == "evicted 1 pod(s) in 21s"


def test_still_terminating_at_the_timeout_does_not_hold_the_repair():
    r = result(terminating=("ns/slow",))
    assert r.status == "ok"
    assert "1 still terminating: ns/slow" in r.message


def test_refused_pods_block_with_the_setting_that_allows_each():
    r = result(refused=(("ns/bare", NO_CONTROLLER), ("ns/scratch", EMPTYDIR)))
    assert r.status == "blocked"
    assert (
        "2 refused: ns/bare (declares no controller; allowed by safety.drain.force), "
        "ns/scratch (has emptyDir data; allowed by safety.drain.delete_emptydir_data)"
    ) in r.message


def test_pdb_blocked_and_force_denied():
    blocked = tuple(f"ns/db-{i}" for i in range(7))
    r = result(blocked=blocked)
    assert r.status == "blocked"
    assert "7 pod(s) protected by a PodDisruptionBudget: ns/db-0, " in r.message
    assert r.message.startswith("7 pod(s) protected"), "what holds the drain comes first"
    assert "ns/db-4 (+2 more); evicted 1 pod(s)" in r.message
    denied = result(blocked=blocked[:1], force_denied="delete pod ns/db-0: HTTP 403 no")
    assert denied.status == "forbidden"
    # the history keeps 240 characters: the grant to apply and the 403 must be in them
    assert "force-drain.yaml" in denied.message[:240] and "HTTP 403" in denied.message[:240]
