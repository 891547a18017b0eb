"""The bulk pre-filter finds exactly the lines a per-line test finds, with the right numbers."""

from __future__ import annotations

import io
import os
import tempfile

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


MAPPED = pytest.mark.skipif(
    literals.finder([b"NVRM"]).counter != "stringzilla",
    reason="files are memory-mapped only where StringZilla counts the lines",
)


def run_stream(stream, chunk: int, limit=None, follow=()):
    generator = prefilter.candidates(
        stream, TRIGGERS, chunk, limit=limit, follow=follow, mapped=True
    )
    out = []
    while True:
        try:
            out.append(next(generator))
        except StopIteration as stop:
            return out, stop.value


@MAPPED
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(_pieces, max_size=4).map(b" ".join), max_size=60),
    st.integers(1, 64),
    st.booleans(),
    st.data(),
)
def test_a_mapped_file_gives_what_reading_it_gives(lines, chunk, trailing, data):
    """A regular file is searched through a memory map, in the windows the reads would
    return: the same lines, numbers, line count, lines passed on by ``follow`` and, with a
    ``limit``, the same stream position afterwards (the next range's reader relies on it)."""
    blob = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    start = data.draw(st.integers(0, len(blob)))
    limit = data.draw(st.one_of(st.none(), st.integers(0, len(blob) - start)))
    follow = [b"SXid"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "log")
        with open(path, "wb") as out:
            out.write(blob)
        with open(path, "rb") as handle:
            handle.seek(start)
            assert prefilter._mapped_windows(handle, chunk, limit) is not None or start == len(blob)
            handle.seek(start)
            mapped = run_stream(handle, chunk, limit, follow)
            mapped_pos = handle.tell()
    memory = io.BytesIO(blob)
    memory.seek(start)
    assert mapped == run_stream(memory, chunk, limit, follow)
    if limit is not None and not any(f in (mapped[0] or [(0, b"")])[-1][1] for f in follow):
        assert mapped_pos == memory.tell()


@MAPPED
def test_a_file_truncated_during_the_scan_ends_it_at_its_new_size(tmp_path):
    """Pages of a map past a file's end raise SIGBUS: each window is cut to the file's size
    first, so a log truncated under the scan (logrotate's copytruncate) ends it quietly."""
    chunk = 4096
    lines = [
        b"NVRM: Xid (PCI:0000:3b:00): %d, x" % i if i % 5 == 0 else b"noise" for i in range(5000)
    ]
    path = tmp_path / "kern.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with open(path, "rb") as handle:
        generator = prefilter.candidates(handle, TRIGGERS, chunk, mapped=True)
        first = next(generator)
        with open(path, "r+b") as writer:
            writer.truncate(3 * chunk)
        rest = list(generator)
    assert first == (1, lines[0])
    assert rest == [hit for hit in naive(path.read_bytes())[0] if hit[0] > 1]
    assert len(rest) > 100


def test_only_the_bulk_scan_maps_a_file(tmp_path, monkeypatch):
    """The node's own kernel-log check reads its file (a copytruncate under a mapped
    window's search would end the agent's check with SIGBUS); ``fleetmedic scan`` and
    ``Scanner.scan_path`` map it where StringZilla counts the lines."""
    from fleetmedic.checks import kernel
    from fleetmedic.scan import Scanner

    log = tmp_path / "kern.log"
    log.write_bytes(b"noise\nNVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    asked = []
    real = prefilter._mapped_windows
    monkeypatch.setattr(prefilter, "_mapped_windows", lambda *a: asked.append(a) or real(*a))
    findings, lines = kernel.scan_current_boot(str(log))
    assert [f.code for f in findings] == [79] and lines == 2
    assert asked == []
    assert [f.code for f in Scanner().scan_path(str(log))] == [79]
    if literals.finder([b"NVRM"]).counter == "stringzilla":
        assert len(asked) == 1
