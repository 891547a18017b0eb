"""The pre-filter path (Hyperscan finding the literals, StringZilla counting the lines)
and the pure path (the standard library's ``re`` and ``bytes.count``) give the same
findings, line numbers and line counts: on the corpus, on generated logs, and with
chunk boundaries cutting lines (and triggers) anywhere. The fuzz set is compared in
test_scan_fuzz.py. And the pre-filter's triggers, taken from the catalog, are on every
line the classifier recognises."""

from __future__ import annotations

import contextlib
import io
import random
from collections.abc import Iterator
from unittest import mock

import pytest
from corpus import lines as corpus_lines
from corpus import reports as corpus_reports
from hypothesis import given, settings
from hypothesis import strategies as st
from scan_helpers import published_lines

from fleetmedic.scan import Scanner, classify, literals, load_catalog, parser, prefilter

needs_hyperscan = pytest.mark.skipif(
    "hyperscan" not in literals.available(),
    reason="the hyperscan wheel is not installed on this platform (pure-Python path only)",
)
needs_stringzilla = pytest.mark.skipif(
    not literals._stringzilla_works(),
    reason="the stringzilla wheel is not installed on this platform (bytes.count counts)",
)
CATALOG_TRIGGERS = tuple(t.encode() for t in Scanner().triggers)
COUNTERS = ["stringzilla", "bytes.count"]


@contextlib.contextmanager
def counting_with(counter: str) -> Iterator[None]:
    """The Hyperscan engine counting lines with ``counter`` (skip if not installed)."""
    if counter == "stringzilla":
        if not literals._stringzilla_works():
            pytest.skip("the stringzilla wheel is not installed on this platform")
        yield
        return
    with mock.patch.object(literals, "_stringzilla_works", lambda: False):
        assert literals.finder([b"NVRM"], "hyperscan").counter == "bytes.count"
        yield


def run(data: bytes, chunk: int, engine: str, triggers=CATALOG_TRIGGERS):
    generator = prefilter.candidates(io.BytesIO(data), triggers, chunk, engine=engine)
    out = []
    while True:
        try:
            out.append(next(generator))
        except StopIteration as stop:
            return out, stop.value


def scan(blob: bytes, engine: str, chunk: int = prefilter.CHUNK_SIZE, dedup: bool = False):
    scanner = Scanner(dedup=dedup)
    found = list(scanner.scan_binary(io.BytesIO(blob), chunk_size=chunk, engine=engine))
    return found, scanner.lines_read


def corpus_log() -> bytes:
    """Every corpus line and report, in order, with ordinary lines between them."""
    out = []
    for i, case in enumerate(corpus_lines()):
        out += [case["line"], f"[{i:5d}.000000] usb 1-1: new high-speed USB device number {i}"]
    for report in corpus_reports():
        out += [*report["lines"], "[    9.999999] EXT4-fs (md127p3): re-mounted r/w"]
    return ("\n".join(out) + "\n").encode()


@needs_hyperscan
@pytest.mark.parametrize("counter", COUNTERS)
@pytest.mark.parametrize("chunk", [1, 7, 64, 4096, prefilter.CHUNK_SIZE])
@pytest.mark.parametrize("dedup", [False, True])
def test_engines_agree_on_the_corpus(counter, chunk, dedup):
    blob = corpus_log()
    with counting_with(counter):
        hyperscan_result = scan(blob, "hyperscan", chunk, dedup)
    assert hyperscan_result == scan(blob, "re", chunk, dedup)
    # and both are what the line-by-line path finds
    by_line = list(Scanner(dedup=dedup).scan(blob.decode().split("\n")[:-1]))
    assert hyperscan_result[0] == by_line
    faults = [case for case in corpus_lines() if case["expect"] is not None]
    assert len(by_line) >= len(faults) // 2  # dedup folds repeats, not half the faults


# Pieces of real lines and of the catalog's triggers, so that lines hold whole
# triggers, cut ones ("NVR" at a chunk's end), several, or none.
_PIECES = st.sampled_from(
    [
        *(t.decode() for t in CATALOG_TRIGGERS),
        *(t.decode()[: len(t) // 2] for t in CATALOG_TRIGGERS),
        *(t.decode()[len(t) // 2 :] for t in CATALOG_TRIGGERS),
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off",
        "amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=3",
        "[ 12.345678] ",
        "noise",
        "",
        "\r",
        "\udcff",
    ]
)
_LINES = st.one_of(st.sampled_from(published_lines()), st.lists(_PIECES, max_size=4).map("".join))


@settings(max_examples=150, deadline=None)
@needs_hyperscan
@given(st.lists(_LINES, max_size=50), st.integers(1, 300), st.booleans(), st.booleans())
def test_engines_agree_on_generated_logs(lines, chunk, trailing, dedup):
    blob = ("\n".join(lines) + ("\n" if trailing and lines else "")).encode(
        "utf-8", "surrogateescape"
    )
    pure = run(blob, chunk, "re"), scan(blob, "re", chunk, dedup)
    for counter in COUNTERS:
        with counting_with(counter):
            assert (run(blob, chunk, "hyperscan"), scan(blob, "hyperscan", chunk, dedup)) == pure


def test_the_catalogs_triggers_are_on_every_line_the_classifier_recognises():
    """Both scan paths drop a line without one of the catalog's triggers before the
    classifier sees it, so a message that classify() recognises without one is lost.

    Every real line the tests hold (corpus faults and benign lines, multi-line reports,
    published lines) that classify() recognises has a trigger. Of the first 40,000 fuzz
    lines (which mutate and cut the triggers), only SXid lines whose NVSwitch device
    name was mutated ("mvidia-nvswitch3: SXid (...)") do not: classify() accepts any
    "SXid (" line, the scanner's SXid trigger is the device name that the driver prints
    on every SXid line (catalog.TRIGGER_SXID). That gap is the same on both paths, so
    it changes no finding; recorded here so that any other one fails."""
    from test_scan_fuzz import generated

    catalog = load_catalog()
    triggers = Scanner().triggers
    # Fabric Manager's lines are read with its own rules and triggers (Scanner(fabric=True):
    # its log, never a kernel log's bulk scan)
    fabric_triggers = Scanner(fabric=True).triggers
    real = [
        *(case["line"] for case in corpus_lines()),
        *(line for report in corpus_reports() for line in report["lines"]),
        *published_lines(),
    ]
    recognised = 0
    for line in real:
        found = classify(parser.parse(line).message, catalog)
        if found is not None:
            recognised += 1
            own = fabric_triggers if found.kind == "fabricmanager" else triggers
            assert any(t in line for t in own), line
    assert recognised > 150
    recognised = 0
    for line in generated(20261121, 40_000):  # the fuzz test's first third: enough
        found = classify(parser.parse(line).message, catalog)
        if found is not None:
            recognised += 1
            if not any(t in line for t in triggers):
                assert found.kind == "sxid" and "SXid" in line, line
    assert recognised > 4_000


@needs_stringzilla
def test_the_hyperscan_engine_counts_lines_with_stringzilla():
    assert literals.finder([b"NVRM"], "hyperscan").counter == "stringzilla"
    assert literals.finder([b"NVRM"], "re").counter == "bytes.count"  # the pure path


@needs_stringzilla
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 3100), st.integers(0, 3100), st.booleans())
def test_stringzilla_counts_newlines_as_bytes_count_does(blob, start, end, mutable):
    data = bytearray(blob.replace(b"\x00", b"\n")) if mutable else blob.replace(b"\x00", b"\n")
    start, end = sorted((min(start, len(data)), min(end, len(data))))
    finder = literals.finder([b"NVRM"], "hyperscan")
    assert finder.count_lines(data, start, end) == data.count(b"\n", start, end)


def test_a_counter_that_disagrees_is_not_used(monkeypatch):
    class Broken:
        @staticmethod
        def count(data, needle, start, end):
            return data.count(needle, start, end) + (end - start > 100)

    monkeypatch.setattr(literals, "stringzilla", Broken)
    literals._stringzilla_works.cache_clear()
    try:
        assert not literals._stringzilla_works()
        if "hyperscan" in literals.available():
            assert literals.finder([b"NVRM"], "hyperscan").counter == "bytes.count"
    finally:
        literals._stringzilla_works.cache_clear()


@needs_hyperscan
def test_engines_agree_on_a_large_mixed_log_in_parallel(tmp_path, monkeypatch):
    lines = published_lines() * 30 + ["x" * 200, "", "usb 1-1: new device"] * 3000
    random.Random(11).shuffle(lines)
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(prefilter, "PARALLEL_MIN_BYTES", 1)
    results = {}
    for engine in ("hyperscan", "re"):
        for jobs in (1, 3):
            scanner = Scanner()
            results[engine, jobs] = (
                list(scanner.scan_path(str(path), jobs, engine)),
                scanner.lines_read,
            )
    assert len(set(map(repr, results.values()))) == 1
    assert results["re", 1][1] == len(lines)


def test_without_hyperscan_the_pure_path_is_used(monkeypatch):
    monkeypatch.setattr(literals, "hyperscan", None)
    literals._hyperscan_works.cache_clear()
    try:
        assert literals.available() == ("re",)
        assert literals.default_engine() == "re"
        monkeypatch.setenv(literals.ENGINE_ENV, "hyperscan")  # asked for, not installed
        assert literals.default_engine() == "re"
        with pytest.raises(ValueError, match="not available"):
            literals.finder([b"NVRM"], "hyperscan")
        blob = b"boot\nNVRM: Xid (PCI:0000:3b:00): 79, x\n"
        (finding,), count = scan(blob, engine=None)
        assert (finding.code, finding.line, count) == (79, 2, 2)
    finally:
        literals._hyperscan_works.cache_clear()


@needs_hyperscan
def test_hyperscan_is_the_default_and_the_environment_can_turn_it_off(monkeypatch):
    monkeypatch.delenv(literals.ENGINE_ENV, raising=False)
    assert literals.default_engine() == "hyperscan"
    assert literals.finder([b"NVRM"]).name == "hyperscan"
    monkeypatch.setenv(literals.ENGINE_ENV, "re")
    assert literals.finder([b"NVRM"]).name == "re"


def test_unknown_engine_and_oversized_chunks_are_refused():
    with pytest.raises(ValueError, match="not available"):
        literals.finder([b"NVRM"], "grep")
    with pytest.raises(ValueError, match="chunk_size"):
        run(b"NVRM\n", literals.MAX_SCAN + 1, "re")
    with pytest.raises(ValueError, match="chunk_size"):
        run(b"NVRM\n", 0, "re")


@needs_hyperscan
def test_hyperscan_window_is_bounded_below_the_bindings_32_bit_length():
    # The binding hands hs_scan a 32-bit length: 4 GiB + n bytes would be scanned as
    # n bytes. Windows are refused long before that instead of being cut silently.
    finder = literals.finder([b"NVRM"], "hyperscan")
    with pytest.raises(ValueError, match="exceeds"):
        finder.line_starts(b"", 0, literals.MAX_SCAN + 1)


@needs_hyperscan
@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_hyperscan_finder_reads_bytes_and_bytearray_windows(kind):
    data = kind(b"skip NVRM\nx NVRM y NVLink\nnone\namdgpu\ntail NVRM")
    finder = literals.finder(CATALOG_TRIGGERS, "hyperscan")
    end = data.rfind(b"\n") + 1
    assert finder.line_starts(data, 10, end) == [10, 31]  # one start per line, in order
    assert finder.line_starts(data, 10, 10) == []
