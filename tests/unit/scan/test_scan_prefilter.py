"""The bulk pre-filter finds exactly the lines a per-line test finds, with the right numbers."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmedic.scan import literals, prefilter

TRIGGERS = [b"NVRM", b"SXid", b"amdgpu", b"uncorrectable", b"Got completion from peer"]


def naive(data: bytes):
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    hits = [(i + 1, line) for i, line in enumerate(lines) if any(t in line for t in TRIGGERS)]
    return hits, len(lines)


def run(data: bytes, chunk: int, engine: str | None = None):
    generator = prefilter.candidates(io.BytesIO(data), TRIGGERS, chunk, engine=engine)
    out = []
    while True:
        try:
            out.append(next(generator))
        except StopIteration as stop:
            return out, stop.value


_pieces = st.sampled_from(
    [
        b"NVRM: Xid (PCI:0000:3b:00): 79, x",
        b"noise",
        b"",
        b"SXid",
        b"xxamdgpuxx",
        b"Got completion from peer 1",
        b"uncorrectable",
        b"NVR",
        b"M",
        b"\xff\xfe",
        b"\r",
    ]
)


@pytest.mark.parametrize("engine", literals.available())
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(_pieces, max_size=4).map(b" ".join), max_size=40),
    st.integers(1, 64),
    st.booleans(),
)
def test_candidates_match_a_naive_scan(engine, lines, chunk, trailing):
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    assert run(data, chunk, engine) == naive(data)


def test_empty_and_newline_only():
    assert run(b"", 8) == ([], 0)
    assert run(b"\n\n\n", 2) == ([], 3)


def test_overlong_line_is_cut(monkeypatch):
    monkeypatch.setattr(prefilter, "MAX_LINE", 32)
    data = b"x" * 100 + b"NVRM" + b"\nNVRM ok\n"
    found, _ = run(data, 16)
    assert found[-1][1] == b"NVRM ok"


def test_parallel_equals_sequential(tmp_path):
    lines = [
        b"NVRM: Xid (PCI:0000:3b:00): %d, x" % i if i % 7 == 0 else b"noise %d" % i
        for i in range(20_000)
    ]
    path = tmp_path / "log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    sequential = run(path.read_bytes(), prefilter.CHUNK_SIZE)
    generator = prefilter.candidates_parallel(str(path), TRIGGERS, 3)
    parallel = []
    while True:
        try:
            parallel.append(next(generator))
        except StopIteration as stop:
            assert stop.value == sequential[1]
            break
    assert parallel == sequential[0]


def test_search_keys_are_suffixes_and_few_passes_cover_the_catalog():
    from fleetmedic.scan import Scanner

    triggers = tuple(t.encode() for t in Scanner().triggers)
    keys = literals.search_keys(triggers)
    assert len(keys) == len(triggers)
    for trigger, key in zip(triggers, keys, strict=True):
        assert trigger.endswith(key) and len(key) >= 3
    # one pass per distinct first byte (issue 39's literals for Fabric Manager, the cut
    # records' continuations and FreeBSD's drmn0 made it four)
    assert len({key[0] for key in keys}) <= 4
    assert len(literals.searchers(triggers)) == len({key[0] for key in keys})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=6))
def test_search_keys_for_any_literals(words):
    keys = literals.search_keys(tuple(words))
    unique = list(dict.fromkeys(words))
    assert len(keys) == len(unique)
    for literal, key in zip(unique, keys, strict=True):
        assert literal.endswith(key) and key
