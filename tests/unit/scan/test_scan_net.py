"""The safety net: driver lines no rule knows are counted when they say they failed or were
logged as errors, benign chatter stays silent whatever its prefix or numbers, and the net
never fences on its own."""

from __future__ import annotations

import random
import re

import pytest
from corpus import lines
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmedic.scan import Scanner, catalog
from fleetmedic.scan.net import shape, unclassified
from fleetmedic.scan.parser import parse

CAT = catalog.load()
BENIGN = [c["line"] for c in lines() if c["expect"] is None]
UNKNOWN_FAILURES = [c for c in lines() if c["family"].endswith("unclassified")]

_PREFIX = re.compile(
    r"^\s*(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?: \S+)? kernel: )?"
    r"(?:\[[^\]]*\d\] ?|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d [\d:]+ \d{4}\] )?"
)
_PCI = re.compile(r"\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d\b")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")


def _body(line: str) -> str:
    """The message without the published log prefix (the fuzz adds its own)."""
    return parse(line).message


def _level(body: str) -> int:
    """The kernel level a benign line is logged at: NVRM prints every line at KERN_ERR
    (3), the rest of this chatter is dev_info / DRM_INFO (6)."""
    return 3 if "NVRM" in body else 6


PREFIXES = st.sampled_from(["dmesg", "ctime", "iso", "syslog", "journal", "kmsg", "dmesg-x"])


def _render(fmt: str, body: str, rng: random.Random) -> str:
    up = f"{rng.randint(0, 99999)}.{rng.randint(0, 999999):06d}"
    if fmt == "dmesg":
        return f"[{up:>12}] {body}"
    if fmt == "ctime":
        return f"[Thu Nov  6 {rng.randint(0, 23):02d}:38:46 2025] {body}"
    if fmt == "iso":
        return f"2025-01-25T10:34:{rng.randint(0, 59):02d},859532+00:00 {body}"
    if fmt == "syslog":
        return f"Oct  7 15:47:{rng.randint(0, 59):02d} host-{rng.randint(1, 99)} kernel: {body}"
    if fmt == "journal":
        return f"2024-02-14T05:03:41+0000 node{rng.randint(1, 9)} kernel: {body}"
    if fmt == "kmsg":
        return f"{_level(body)},{rng.randint(1, 10**6)},{rng.randint(1, 10**10)},-;{body}"
    return f"kern  :{'err' if _level(body) == 3 else 'info'}  : [{up:>12}] {body}"


def _vary(body: str, rng: random.Random) -> str:
    """Other devices and other register values: the shape stays the same."""
    body = _PCI.sub(lambda _m: f"0000:{rng.randint(0, 255):02x}:{rng.randint(0, 31):02x}.0", body)
    return _HEX.sub(lambda m: f"0x{rng.getrandbits(4 * max(len(m.group(0)) - 2, 1)):x}", body)


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, len(BENIGN) - 1), fmt=PREFIXES, seed=st.integers(0, 2**32))
def test_benign_lines_stay_silent_with_any_prefix_and_numbers(index, fmt, seed):
    rng = random.Random(seed)
    line = _render(fmt, _vary(_body(BENIGN[index]), rng), rng)
    assert Scanner(dedup=False).feed(line) == [], line


def test_the_benign_corpus_is_large_enough_to_mean_something():
    assert len(BENIGN) >= 100


@pytest.mark.parametrize("case", UNKNOWN_FAILURES, ids=[c["line"][:60] for c in UNKNOWN_FAILURES])
def test_real_failure_lines_the_catalog_lacks_are_counted(case):
    found = Scanner(dedup=False).feed(case["line"])
    assert len(found) == 1
    assert found[0].rule.endswith(".unclassified") and found[0].action == "monitor"


def test_there_are_real_unknown_failures_to_count():
    assert len(UNKNOWN_FAILURES) >= 5


NEW_AMD = "amdgpu 0000:03:00.0: amdgpu: a message no rule has seen"
NEW_NVRM = "NVRM: GPU0 someNewFunction_GB100: a message no rule has seen"


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (f"3,1234,5678901,-;{NEW_AMD}", "amdgpu.unclassified"),  # /dev/kmsg at err
        (f"<3>Feb 14 05:03:41 host kernel: {NEW_AMD}", "amdgpu.unclassified"),  # syslog <pri>
        (f"kern  :err   : [   12.300000] {NEW_AMD}", "amdgpu.unclassified"),  # dmesg -x
        (f"kern  :crit  : [   12.300000] {NEW_AMD}", "amdgpu.unclassified"),
        (f"6,1234,5678901,-;{NEW_AMD}", None),  # info: chatter
        (f"kern  :warn  : [   12.300000] {NEW_AMD}", None),
        (f"[   12.300000] {NEW_AMD}", None),  # no level, no failure word
        (f"3,1234,5678901,-;{NEW_NVRM}", None),  # NVRM prints everything at KERN_ERR
        (f"[   12.300000] {NEW_NVRM} and then it failed", "nvrm.unclassified"),
        ("[   12.3] nvidia-nvswitch2: an unknown fatal condition", "nvswitch.unclassified"),
        # Not netted (display; see the catalog): silent unless a rule knows it.
        ("[   12.3] nvidia-modeset: ERROR: GPU:0: Error while waiting for GPU progress", None),
    ],
)
def test_level_and_failure_words_decide(line, rule):
    found = Scanner(dedup=False).feed(line)
    assert [f.rule for f in found] == ([rule] if rule else [])
    for f in found:
        assert f.action == "monitor" and f.code is None


def test_the_net_gives_the_gpu_when_the_line_names_one():
    (found,) = Scanner(dedup=False).feed(f"3,1,1,-;{NEW_AMD}")
    assert found.pci == "0000:03:00"


def test_the_net_never_fences_on_its_own():
    assert CAT.net and all(rule.action in ("none", "monitor") for rule in CAT.net)


def test_the_net_can_be_turned_off():
    assert Scanner(dedup=False, net=False).feed(f"3,1,1,-;{NEW_AMD}") == []


def test_a_rule_always_wins_over_the_net():
    line = "3,1,1,-;amdgpu 0000:c5:00.0: amdgpu: MES failed to respond to msg=REMOVE_QUEUE"
    assert [f.rule for f in Scanner(dedup=False).feed(line)] == ["amdgpu.mes-kiq-failed"]


def test_one_new_message_repeated_is_one_finding_with_dedup():
    lines_ = [f"3,{i},{i},-;amdgpu 0000:03:00.0: amdgpu: new thing {i} failed" for i in range(5)]
    assert len(list(Scanner().scan(lines_))) == 1


def test_every_benign_shape_names_a_known_source():
    assert CAT.benign
    for shape_ in CAT.benign:
        assert shape_.sources and all(s in CAT.sources for s in shape_.sources)


def test_shape_folds_what_varies():
    a = shape(
        "NVRM: GPU6 kbusSend: timeout waiting for startToken = 0x3 cnt=24105122 on 0000:a1:00.0"
    )
    b = shape("NVRM: GPU2 kbusSend: timeout waiting for startToken = 0x5 cnt=1 on 0000:01:00.0")
    assert (
        a == b == "NVRM: GPU<n> kbusSend: timeout waiting for startToken = <hex> cnt=<n> on <pci>"
    )


def test_unclassified_direct_call_matches_the_scanner():
    assert unclassified(NEW_AMD, 3, CAT) is not None
    assert unclassified(NEW_AMD, 6, CAT) is None


@pytest.mark.parametrize("rule", [rule.id for rule in CAT.net])
def test_unknown_errors_never_fence_by_a_count_of_our_own(rule):
    """Issue 39 item 6: a count without a published source goes; the net's findings are
    shown (``fleetmedic status``), an operator may count them in the agent config."""
    assert CAT.threshold_for(rule) is None
    assert next(r for r in CAT.net if r.id == rule).action == "monitor"


def test_the_catalog_ships_no_count_threshold():
    assert dict(CAT.thresholds) == {}
