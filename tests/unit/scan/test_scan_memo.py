"""The scanner's per-message memo and the catalog's per-literal-set rule lists give the
answers of the unmemoised functions: lines that differ only in an Xid code, an SXid
number, a GPU bus id or a status code keep their own verdicts, whatever came before."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from fleetmedic.scan import Dedup, Finding, Scanner, classify, load_catalog, parser

# Pairs of messages that differ only in digits (an Xid code, a bus id, an SXid number, a
# recovery action's value) that a careless memo key would normalise away, with different
# verdicts (action, rule or device) in the catalog.
NEAR_TWINS = [
    (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ),
    (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:4b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ),
    (
        "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
        "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 12028, Non-fatal, Link 44 Minion Link DLREQ interrupt",
    ),
    (
        "NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
        "NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (Node Reboot Required)",
    ),
    (
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=1234, Contained: CE User Channel (0x9). RST: No, D-RST: No",
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 95, pid=1234, Contained: CE User Channel (0x9). RST: No, D-RST: No",
    ),
]


def _verdict(found: Finding | None) -> tuple[object, ...] | None:
    if found is None:
        return None
    return (found.kind, found.code, found.pci, found.action, found.bucket, found.rule, found.pid)


def test_near_twins_have_different_verdicts_in_the_catalog():
    catalog = load_catalog()
    for a, b in NEAR_TWINS:
        assert _verdict(classify(a, catalog)) != _verdict(classify(b, catalog)), (a, b)


@pytest.mark.parametrize("pair", NEAR_TWINS, ids=[str(i) for i in range(len(NEAR_TWINS))])
def test_the_scanner_keeps_each_twin_its_own_verdict(pair):
    catalog = load_catalog()
    lines = [f"[{100 + i}.000000] {message}" for i, message in enumerate(pair * 3)]
    findings = list(Scanner(dedup=False).scan(lines))
    assert [_verdict(f) for f in findings] == [
        _verdict(classify(parser.parse(line).message, catalog)) for line in lines
    ]


def test_a_repeated_message_is_placed_at_each_of_its_lines():
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    found = list(Scanner(dedup=False).scan([f"[  1.5] {line}", "x", f"[ 99.25] {line}"]))
    assert [(f.line, f.timestamp, f.time) for f in found] == [(1, "1.5", 1.5), (3, "99.25", 99.25)]


def test_rules_for_gives_the_catalog_order_for_every_set_of_literals():
    catalog = load_catalog()
    literals = sorted({rule.requires for rule in catalog.rules} | set(catalog.device_aliases))
    for size in (0, 1, 2, 3):
        for chosen in itertools.combinations(literals, size):
            message = " ".join(chosen)
            held = {lit for lit in literals if lit in message}
            held |= {catalog.device_aliases[a] for a in catalog.device_aliases if a in message}
            walked = tuple(rule for rule in catalog.rules if rule.requires in held)
            assert catalog.rules_for(message) == walked  # computed
            assert catalog.rules_for(message) == walked  # kept


def _finding(rng: random.Random) -> Finding:
    return Finding(
        line=rng.randrange(1, 100),
        vendor="nvidia",
        kind=rng.choice(["xid", "sxid", "nvrm"]),
        code=rng.choice([None, 13, 79]),
        pci=rng.choice([None, "0000:3b:00", "0000:cb:00"]),
        action=rng.choice(["none", "monitor", "reset", "reboot"]),
        bucket=None,
        message="m",
        time=rng.choice([None, rng.uniform(0, 9000)]),
        clock=rng.choice(["uptime", "wall"]),
        rule=rng.choice(["xid.79", "nvrm.fallen-off-the-bus"]),
    )


@pytest.mark.parametrize("guard", [False, True])
def test_admit_identity_is_admit_for_a_finding_not_built(guard):
    rng = random.Random(7)
    findings = [_finding(rng) for _ in range(400)]
    by_finding = Dedup(replay_guard=guard, clock=lambda: 5.0)
    by_identity = Dedup(replay_guard=guard, clock=lambda: 5.0)
    kept = [f for f in findings if by_finding.admit(f, "b")]
    passed = [
        f
        for f in findings
        if by_identity.admit_identity("b", f.identity(), f.time, f.clock, f.rank)
    ]
    assert passed == kept
    assert 0 < len(kept) < len(findings)
    assert by_identity.to_state() == by_finding.to_state()


def test_fields_are_the_records_fields():
    for line in [
        "[ 1843.308145] NVRM: x",
        "<3>Feb 14 05:03:41 host kernel: amdgpu: y",
        "kern  :err   : [ 12.3] NVRM: z",
        "6,1234,5678901,-;NVRM: k",
        "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error",
        "<4>[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error",
        "node: kern:    warning: [2026-04-22T21:27:51.29Z]: NVRM: t",
        "plain",
    ]:
        record = parser.parse(line)
        assert parser.fields(line) == tuple(
            getattr(record, f.name) for f in dataclasses.fields(record)
        )
        assert parser.clock_of(record.kind, parser.seconds(record.timestamp, record.kind)) == (
            record.clock
        )
    # the outer <pri> outranks the level Fabric Manager's own format carries
    assert parser.parse("<4>[Jul 23 2024 07:53:55] [ERROR] [tid 841] x").level == 4
    assert parser.parse("[Jul 23 2024 07:53:55] [ERROR] [tid 841] x").level == 3
