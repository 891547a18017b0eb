"""Wait until the controller has looked, instead of sleeping: for "nothing happened" checks.

A fixed sleep before "no repair started" or "exactly one email" is slow when the machine
is idle and proves nothing when it is loaded (the controller may not have looked yet).
:func:`looked_again` waits for whole decision cycles that began after the call, counted
by the controller's ``fleetmedic_cycles_total`` on the metrics endpoint its config opens.

An idle controller cycles only on a Node event or every 60 s (``IDLE_WAKE``), so each
poll also pokes a Node of its pool with a test annotation that no part of fleetmedic
reads: the watch event wakes the loop, and a cycle woken by a poke sees the Nodes at
least as new as that poke (one watch stream delivers events in order), so it sees the
situation the test arranged before it called.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import yaml

POKE = "fleetmedic-test/poke"  # read by nothing in fleetmedic: a watch event, no meaning
SERIES = {"fleetmedic_cycles_total": "cycles", "fleetmedic_actions_admitted_total": "admitted"}


def counts(config: Path) -> dict[str, int]:
    """The controller's ``cycles`` (decision cycles run) and ``admitted`` (actions handed
    to a worker) so far, from its metrics endpoint."""
    metrics = yaml.safe_load(Path(config).read_text())["metrics"]
    url = f"http://{metrics.get('address', '127.0.0.1')}:{metrics['port']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in SERIES:
            out[SERIES[name]] = int(float(value))
    assert set(out) == set(SERIES.values()), f"missing counters at {url}: {out}"
    return out


def cycles(config: Path) -> int:
    return counts(config)["cycles"]


def poke(kube, node: str) -> None:
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"annotations": {POKE: str(time.monotonic_ns())}}},
        content_type="application/merge-patch+json",
    )


def looked_again(kube, config: Path, node: str, n: int = 2, timeout: float = 60) -> dict[str, int]:
    """Return once ``n`` whole cycles have run that began after this call and after a
    poke of ``node`` (a Node in the controller's pool); returns :func:`counts` then, so a
    caller can also check that those cycles admitted nothing.

    A cycle is counted at its start, so the count read after the first poke may belong
    to a cycle already under way; the wait is for that count + 1 + ``n`` (the ``n``
    cycles after it have ended when the next one starts). n=2 by default: the first
    may have been woken by an earlier event and read a view from just before the poke.
    Work a cycle admits starts later in a worker, so "nothing started" checks compare
    ``admitted`` too, not only what the Nodes show.
    """
    deadline = time.monotonic() + timeout
    poke(kube, node)
    target = cycles(config) + 1 + n
    while True:
        now = counts(config)
        seen = now["cycles"]
        if seen >= target:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {n} controller cycles"
                f" (at {seen}, waiting for {target})"
            )
        poke(kube, node)
        time.sleep(0.2)
