"""The catalog's regexes built from kept programs are the patterns ``re.compile`` builds;
a bad regex fails at every load; a damaged or unwritable cache costs only the compile."""

from __future__ import annotations

import marshal
import re

import pytest

from fleetmedic.scan import catalogfiles, load_catalog, regexcache

PATTERNS = [
    r"\bXid \((?P<dev>[^)]{0,64})\):?\s*(?P<code>\d{1,6})\b,?\s?(?P<rest>.*)",
    r"amdgpu(?: \S+)?: .*ring (?P<ring>\S+) timeout",
    r"(?i)fatal|non-?fatal",
    r"(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})(?:\.\d)?",
    r"^\[[A-Z][a-z]{2} [ \d]\d \d{4}\] (?:x|y)+$",
]


@pytest.fixture
def path(tmp_path):
    if regexcache.location(tmp_path / "catalog.marshal") is None:
        pytest.skip("not CPython's matcher: every pattern is compiled as before")
    return regexcache.location(tmp_path / "catalog.marshal")


def _same(a: re.Pattern[str], b: re.Pattern[str]) -> None:
    assert a == b  # text, flags and program (re.Pattern's own equality)
    assert (a.flags, a.groups, dict(a.groupindex)) == (b.flags, b.groups, dict(b.groupindex))


def test_a_kept_program_builds_the_pattern_re_compile_builds(path, monkeypatch):
    first = regexcache.Programs(path)
    for text in PATTERNS:
        _same(first.compile(text), re.compile(text))
    first.save()
    assert path.exists()

    def no_compile(*_args):
        raise AssertionError("compiled again although its program was kept")

    again = regexcache.Programs(path)
    assert set(again.kept) == {(text, 0) for text in PATTERNS}
    monkeypatch.setattr(regexcache.re, "compile", no_compile)
    built = [again.compile(text) for text in PATTERNS]
    monkeypatch.undo()
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus"
    for text, pattern in zip(PATTERNS, built, strict=True):
        _same(pattern, re.compile(text))
        found, reference = pattern.search(line), re.compile(text).search(line)
        assert (found and found.groupdict()) == (reference and reference.groupdict())


def test_flags_are_part_of_the_key(path):
    first = regexcache.Programs(path)
    for flags in (0, re.M, re.S, re.M | re.I):
        _same(
            first.compile(r"^ DEVICE=\+pci:(\S+).", flags),
            re.compile(r"^ DEVICE=\+pci:(\S+).", flags),
        )
    first.save()
    again = regexcache.Programs(path)
    assert len(again.kept) == 4
    for flags in (0, re.M, re.S, re.M | re.I):
        built = again.compile(r"^ DEVICE=\+pci:(\S+).", flags)
        _same(built, re.compile(r"^ DEVICE=\+pci:(\S+).", flags))
        assert built.flags == re.compile(r"^ DEVICE=\+pci:(\S+).", flags).flags


def test_the_scan_modules_regexes_are_kept_too():
    from fleetmedic.scan import nvidia, parser, scanner

    shared = regexcache.shared()
    if shared.path is None:
        pytest.skip("no cache directory")
    load_catalog()
    for pattern in (nvidia._XID, parser._KMSG, scanner._DEVICE):
        assert (pattern.pattern, pattern.flags & ~re.U) in shared.kept  # str: re.U implied
        _same(pattern, re.compile(pattern.pattern, pattern.flags))


def test_a_bad_regex_fails_at_every_load_and_is_never_kept(path):
    for _ in range(2):
        programs = regexcache.Programs(path)
        with pytest.raises(re.error):
            programs.compile("(unclosed")
        programs.save()
        assert ("(unclosed", 0) not in programs.kept


def test_a_damaged_file_costs_the_compile_only(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    for damage in (
        b"\x00garbage",
        marshal.dumps(["not", "a", "dict"]),
        marshal.dumps({(PATTERNS[0], 0): (0, [1, 2, 3], 0, {}, ())}),  # one _sre refuses
        marshal.dumps({(PATTERNS[0], 0): "nonsense"}),
    ):
        path.write_bytes(damage)
        programs = regexcache.Programs(path)
        _same(programs.compile(PATTERNS[0]), re.compile(PATTERNS[0]))
        programs.save()
        _same(regexcache.Programs(path).compile(PATTERNS[0]), re.compile(PATTERNS[0]))


def test_an_unwritable_cache_costs_the_compile_only(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    path = regexcache.location(blocker / "sub" / "catalog.marshal")  # mkdir below a file
    programs = regexcache.Programs(path)
    _same(programs.compile(PATTERNS[1]), re.compile(PATTERNS[1]))
    programs.save()  # no error
    assert regexcache.location(None) is None
    _same(regexcache.Programs(None).compile(PATTERNS[2]), re.compile(PATTERNS[2]))


def test_the_catalogs_regexes_are_re_compiles():
    catalog = load_catalog()
    if catalogfiles.programs().path is not None:
        assert catalogfiles.programs().kept  # the packaged catalog's programs are kept
    patterns = [p for r in catalog.rules for p in (r.match, r.unless, r.continued_by) if p]
    patterns += [j.head for j in catalog.joins] + [j.tail for j in catalog.joins]
    patterns += [b.match for b in catalog.benign] + list(catalog.sxid_parts.values())
    compiled = [p for p in patterns if isinstance(p, re.Pattern)]
    assert len(compiled) > 50
    for pattern in compiled:
        _same(pattern, re.compile(pattern.pattern))
