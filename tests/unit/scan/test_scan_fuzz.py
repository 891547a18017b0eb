"""Fuzz: 120,000 generated lines (mutated published lines and junk) through both scan paths.

No exception, every finding keeps the JSON contract, and the bulk scan's pre-filter
path (Hyperscan and StringZilla) finds exactly what the pure path (``re`` and
``bytes.count``) finds. Seeded, so a failure reproduces; it takes a few seconds.
"""

from __future__ import annotations

import io
import random
import time

from scan_helpers import assert_valid, published_lines

from fleetmedic.scan import Scanner
from tests.harness import loadscale

LINES = 120_000
PREFIXES = [
    "",
    "[ 12.345678] ",
    "[Fri Aug 30 11:43:09 2024] ",
    "kern  :err   : ",
    "2025-01-25T10:34:54,859532+00:00 ",
    "Feb 14 05:03:41 gpu-1 kernel: ",
    "2026-02-14T05:03:41+0000 gpu-1 kernel: ",
    "<3>",
    "6,1,2,-;",
    "Dec  2 11:49:53 worker4 kernel: [  885.242168] ",
    "               ",
    "9,x,y,z;",
]
ALPHABET = "NVRMSXidamdgpu:()[],.=0123456789abcdefx -_'<>\"\\;\t\x0b\u00e9\u2028\ud7ff\x00"


BASE = published_lines()


def mutate(rng: random.Random, line: str) -> str:
    choice = rng.randrange(9)
    if choice == 0:
        return line[: rng.randrange(len(line) + 1)]
    if choice == 1:
        i = rng.randrange(len(line) + 1)
        return (
            line[:i] + "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 12))) + line[i:]
        )
    if choice == 2:
        chars = list(line)
        for _ in range(rng.randrange(1, 6)):
            if chars:
                chars[rng.randrange(len(chars))] = rng.choice(ALPHABET)
        return "".join(chars)
    if choice == 3:
        return line.replace("0x", "0x" + "f" * rng.randrange(1, 30), 1)
    if choice == 4:
        return line.replace(")", "", 1) if rng.random() < 0.5 else line.replace("(", "", 1)
    if choice == 5:
        return rng.choice(PREFIXES) + line
    if choice == 6:
        return line + " " + rng.choice(BASE)
    if choice == 7:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 200)))
    return line.replace(" ", rng.choice([" ", "  ", "\t", ""]), rng.randrange(3))


def generated(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [mutate(rng, rng.choice(PREFIXES) + rng.choice(BASE)) for _ in range(count)]


def test_fuzz_lines_never_raise():
    lines = generated(20261121, LINES)
    assert len(lines) >= 100_000
    start = time.process_time()
    by_line = []
    scanner = Scanner(dedup=False)
    for line in lines:
        by_line.extend(scanner.feed(line))
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    scanner = Scanner(dedup=False)
    bulk = list(scanner.scan_binary(io.BytesIO(data), chunk_size=1 << 16))
    for finding in bulk:
        assert_valid(finding)
    assert len(bulk) > 10_000
    assert [(f.line, f.rule) for f in bulk] == [(f.line, f.rule) for f in by_line]
    # The pre-filter path above (the default engine: Hyperscan and StringZilla where
    # installed) and the pure path (re and bytes.count) agree on every field and count.
    pure = Scanner(dedup=False)
    assert list(pure.scan_binary(io.BytesIO(data), chunk_size=1 << 16, engine="re")) == bulk
    assert scanner.lines_read == pure.lines_read == LINES
    deduped = list(Scanner().scan(lines[:20_000]))
    assert 0 < len(deduped) < 20_000
    # A hang guard against a regex that backtracks without end, not a speed test (that is
    # bench/scan_throughput.py): about 8 s of CPU normally; the CPU time itself swells with
    # the load (32 s in a CI run at load 20, in the nice-19 unit lane), so the bound does.
    assert time.process_time() - start < loadscale.scaled(30)
