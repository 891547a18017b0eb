"""A record the log cut in two reaches the scanner whole on every path, though its second
half carries no trigger literal: the bulk pre-filter passes the line after a cut head on
(``follow``), across chunk and range boundaries, and the Loki source asks for the second
halves by their own literals (a LogQL filter cannot ask for "the next line")."""

from __future__ import annotations

import io
import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmedic.agent.lokisource import LokiSource, LokiSourceConfig
from fleetmedic.scan import Scanner, literals, load_catalog, prefilter

TRIGGERS = [b"NVRM", b"amdgpu"]
FOLLOW = [b"HEAD"]

# published: ishitatsuyuki/acominer issue 9 (dmesg); a wrapped Xid 154 as in
# test_scan_driver_words.py (NVIDIA's Xid catalog, Xid 154's recovery actions)
SPLIT_SMU = (
    "[442366.409593] amdgpu: [powerplay] ",
    "                 failed to send message 200 ret is 0",
)
WRAPPED_154 = (
    "[  931.482757] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to",
    "[  931.482800] 0x2 (Node Reboot Required)",
)
NOISE = "[  100.000000] usb 1-1: new high-speed USB device number 3 using xhci_hcd"


def naive(data: bytes, follow=FOLLOW):
    """Every line with a trigger, and the line after every such line that holds a follow
    literal (chained: a passed-on line that holds one passes its own next line on)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out, wanted = [], False
    for number, line in enumerate(lines, 1):
        if wanted or any(t in line for t in TRIGGERS):
            out.append((number, line))
            wanted = any(f in line for f in follow)
        else:
            wanted = False
    return out, len(lines)


def run(stream, chunk: int, engine: str, follow=FOLLOW, limit=None):
    generator = prefilter.candidates(
        stream, TRIGGERS, chunk, limit=limit, engine=engine, follow=follow
    )
    out = []
    while True:
        try:
            out.append(next(generator))
        except StopIteration as stop:
            return out, stop.value


_pieces = st.sampled_from([b"NVRM x", b"amdgpu HEAD", b"HEAD", b"tail", b"", b"NVR", b"\r"])


@pytest.mark.parametrize("engine", literals.available())
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(_pieces, max_size=3).map(b" ".join), max_size=40),
    st.integers(1, 48),
    st.booleans(),
)
def test_the_line_after_a_cut_head_is_passed_on_at_any_chunk_size(engine, lines, chunk, trailing):
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    assert run(io.BytesIO(data), chunk, engine) == naive(data)


@pytest.mark.parametrize("engine", literals.available())
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(_pieces, max_size=3).map(b" ".join), min_size=1, max_size=30),
    st.integers(1, 16),
    st.data(),
)
def test_a_range_that_ends_on_a_cut_head_reads_past_its_end_while_lines_ask(
    engine, lines, chunk, data
):
    blob = b"\n".join(lines) + b"\n"
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    cut = data.draw(st.sampled_from(starts))
    stream = io.BytesIO(blob)
    first, count = run(stream, chunk, engine, limit=cut)
    whole, _total = naive(blob)
    inside = [hit for hit in whole if hit[0] <= count]
    # the range's own lines, plus the lines after its last one while each one before
    # asks for the next (a multi-line record's detail lines: issue 39)
    past: list[tuple[int, bytes]] = []
    asking = bool(inside) and inside[-1][0] == count and any(f in inside[-1][1] for f in FOLLOW)
    for number, line in whole:
        if number <= count:
            continue
        if not asking or number != count + len(past) + 1:
            break
        past.append((number, line))
        asking = any(f in line for f in FOLLOW)
    assert first == inside + past[: prefilter.FOLLOW_PAST_LIMIT]
    assert count == blob[:cut].count(b"\n")


EXPECTED = {"powerplay": ("amdgpu.smu-failed", "monitor"), "xid154": ("xid.154.0x2", "reboot")}


@pytest.mark.parametrize("name,record", [("powerplay", SPLIT_SMU), ("xid154", WRAPPED_154)])
def test_a_cut_record_is_one_finding_wherever_the_chunks_fall(name, record):
    lines = [NOISE] * 5 + list(record) + [NOISE] * 5
    expected = [(*EXPECTED[name], 6)]
    found = Scanner(dedup=False).scan(lines)
    assert [(f.rule, f.action, f.line) for f in found] == expected
    data = ("\n".join(lines) + "\n").encode()
    for chunk in range(1, len(data) + 2):  # every place a chunk can end, the cut included
        found = Scanner(dedup=False).scan_binary(io.BytesIO(data), chunk_size=chunk)
        assert [(f.rule, f.action, f.line) for f in found] == expected, chunk


def test_a_second_half_without_its_literals_is_joined_on_no_path():
    """A line that matches a cut record's tail but holds none of its literals is not the
    second half anywhere: the Loki source (which asks Loki for the literals) would never
    see it, so the kernel paths must not join it either."""
    head = WRAPPED_154[0]
    lines = [NOISE, head, "[  931.482800] 0x2 Node Reboot Required", NOISE]
    catalog = load_catalog()
    unknown = ("xid.154.unknown", catalog.xid154_unknown_action, 2)
    found = Scanner(dedup=False).scan(lines)
    assert [(f.rule, f.action, f.line) for f in found] == [unknown]
    data = ("\n".join(lines) + "\n").encode()
    found = Scanner(dedup=False).scan_binary(io.BytesIO(data))
    assert [(f.rule, f.action, f.line) for f in found] == [unknown]
    # the same record with its literal is one finding, read from its new value
    lines[2] = "[  931.482800] 0x2 (Node Reboot Required)"
    found = Scanner(dedup=False).scan(lines)
    assert [(f.rule, f.action, f.line) for f in found] == [("xid.154.0x2", "reboot", 2)]


def test_the_kernel_scan_searches_for_no_second_half():
    """What the second halves say ("failed to send", "(None)", ...) are common words: as
    trigger literals they cost the literal search of every line (issue 39's scan speed)."""
    catalog = load_catalog()
    assert catalog.cut_tails and catalog.cut_heads
    for scanner in (Scanner(), Scanner(fabric=True)):
        assert not set(catalog.cut_tails) & set(scanner.triggers)
    # a cut head holds a trigger (the pre-filter yields it) and a cut-head literal (then
    # it passes the next line on); the second half holds neither
    for head, tail in (SPLIT_SMU, WRAPPED_154):
        assert any(t in head for t in Scanner().triggers)
        assert any(c in head for c in catalog.cut_heads)
        assert not any(t in tail for t in Scanner().triggers)


def test_a_range_boundary_after_a_cut_head_loses_nothing_in_parallel(tmp_path, monkeypatch):
    rng = random.Random(5)
    lines = []
    for _ in range(400):
        lines += [NOISE] * rng.randrange(0, 4)
        lines += list(rng.choice([SPLIT_SMU, WRAPPED_154]))
    path = tmp_path / "cut.log"
    path.write_text("\n".join(lines) + "\n")
    blob = path.read_bytes()
    heads = {SPLIT_SMU[0].encode(), WRAPPED_154[0].encode()}
    monkeypatch.setattr(prefilter, "PARALLEL_MIN_BYTES", 1)
    expected = list(Scanner(dedup=False).scan_path(str(path), jobs=1))
    assert len(expected) == 400
    after_a_head = 0
    for jobs in range(2, 9):
        for _start, stop in prefilter._ranges(str(path), jobs)[:-1]:
            after_a_head += blob[:stop].rstrip(b"\n").rsplit(b"\n", 1)[-1] in heads
        assert list(Scanner(dedup=False).scan_path(str(path), jobs=jobs)) == expected, jobs
    assert after_a_head >= 3  # some ranges did end right after a cut head


def test_the_loki_queries_ask_for_the_second_halves():
    source = LokiSource(LokiSourceConfig(endpoint="http://127.0.0.1:9"), lambda node: None, None)
    assert source.queries
    for query in source.queries:
        line_filter = re.compile(json.loads(query.rpartition("|~ ")[2]))
        for record in (SPLIT_SMU, WRAPPED_154):
            assert all(line_filter.search(line) for line in record), query
