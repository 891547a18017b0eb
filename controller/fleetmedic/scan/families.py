"""Fault families read from the drivers' own sources: every error line of a family, as data.

The catalog files name the families and what each calls for (``families:`` in
``xid_catalog.yaml`` and ``amdgpu_catalog.yaml``: an id, an action, the error path and
the sources); the members come from the driver sources, derived by
``scripts/derive_families.py`` into ``source_nvidia.yaml`` / ``source_amdgpu.yaml``
(each member: the source file, the function that prints it, the print level and the
format string, for the release named in the file). A family becomes one catalog
:class:`~fleetmedic.scan.catalog.Rule` whose regex is built from its members' formats:

- NVIDIA lines carry the printing function (``NVRM: kfspPollForQueueEmpty_IMPL: ...``,
  newer drivers ``NVRM: GPU0 rpcRmApiFree_GSP: ...``); a member matches its format's
  leading text after *any* function name, because functions are renamed between
  releases (``kfspPollForResponse_IMPL`` became ``kfspWaitForResponse``) while the
  message they print stays;
- amdgpu's ``dev_err`` lines carry no function, so a member matches its format alone.

A format's conversions (``%d``, ``0x%08x``, ``%s`` ...) match any text: the literal
words of the format are what identify it, and what a newer or older driver keeps.
Formats with fewer than :data:`MIN_LITERAL` literal characters identify nothing and
were left out when the list was derived.

:func:`member_line` turns a member back into a log line the driver would print;
``tests/unit/scan/test_scan_families.py`` feeds every member through the scanner, so a
family cannot silently lose a member when a rule or the catalog changes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from fleetmedic.scan import regexcache

MIN_LITERAL = 12
_CONVERSION = regexcache.compile(
    r"%[-+ #0]*(?:\d+|\*)?(?:\.\d+)?(?:hh|h|ll|l|L|q|j|z|t)?([diouxXcspfeEgG%])"
)
_WORD = regexcache.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HAL_SUFFIX = regexcache.compile(r"_(?:IMPL|KERNEL|HAL|[A-Z]{2}\d{3}[A-Z]?)$")
_FILL = {"d": "1", "i": "1", "u": "1", "o": "1", "x": "1f", "X": "1F", "c": "x", "s": "x"}
_FILL |= {"p": "0", "f": "1.0", "e": "1.0", "E": "1.0", "g": "1", "G": "1", "%": "%"}


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    """One error line of a family: where the driver prints it, and its format."""

    file: str
    function: str
    level: str
    format: str


@dataclasses.dataclass(frozen=True, slots=True)
class Family:
    """A family as the catalog names it, with its members from the source list."""

    name: str
    rule_id: str
    vendor: str
    path: str
    action: str
    members: tuple[Member, ...]
    by_function: bool


@dataclasses.dataclass(frozen=True, slots=True)
class SourceList:
    """One derived file: which repository and release it was read from, and the families."""

    vendor: str
    repository: str
    release: str
    commit: str
    families: Mapping[str, tuple[str, tuple[Member, ...]]]  # name -> (path, members)


def parse_source_list(data: Mapping[str, Any]) -> SourceList:
    """The derived file's content (``{vendor: {repository, release, commit, families}}``)."""
    ((vendor, body),) = data.items()
    families = {}
    for name, fam in (body.get("families") or {}).items():
        members = tuple(
            Member(str(m["file"]), str(m["function"]), str(m["level"]), str(m["format"]))
            for m in fam.get("members") or ()
        )
        families[str(name)] = (str(fam["path"]), members)
    return SourceList(
        str(vendor),
        str(body.get("repository", "")),
        str(body["release"]),
        str(body["commit"]),
        families,
    )


def base_function(name: str) -> str:
    """The function without its HAL suffix: ``kgspBootstrap_GH100`` -> ``kgspBootstrap``."""
    return _HAL_SUFFIX.sub("", name)


_CONVERSION_REGEX = {"s": r".{0,120}?", "c": r".?", "%": "%"}
r"""What a conversion matches: a number is one token (``[-+.\w]*``: ``0x1f``, ``-110``,
``1.0``), a string up to 120 characters; bounded and space-free where possible, so the
search stays linear on long lines."""


def format_regex(fmt: str) -> str:
    """A regex for the leading text of ``fmt``: literals escaped, conversions as above;
    it stops after the last literal run (trailing values never decide), and starts at the
    first literal (a leading value would only slow the search down)."""
    out = []
    pos = 0
    for match in _CONVERSION.finditer(fmt):
        out.append(re.escape(fmt[pos : match.start()]))
        out.append(_CONVERSION_REGEX.get(match.group(1), r"[-+.\w]*"))
        pos = match.end()
    out.append(re.escape(fmt[pos:]))
    while out and out[-1] in ("", *_CONVERSION_REGEX.values(), r"[-+.\w]*"):
        out.pop()
    while out and out[0] in ("", r".{0,120}?", r".?", r"[-+.\w]*"):
        out.pop(0)
    # runs of spaces in a format are often padding: any whitespace matches
    return re.sub(r"(?:\\ )+", r"\\s+", "".join(out))


def member_regex(family: Family, member: Member) -> str:
    """The regex that finds ``member`` in a kernel message: its format's leading text,
    wherever it stands (after any function name, see the module doc)."""
    return format_regex(member.format)


def literal_key(fmt: str) -> str:
    """The longest literal run of ``fmt``: a line without it cannot be this member."""
    runs = _CONVERSION.split(fmt)[::2]
    return max((r.strip() for r in runs), key=len, default="")


_LAST: list = ["", frozenset()]  # the last message and its words


def _words(text: str) -> frozenset[str]:
    """The words of a message (the last one kept: every family asks for the same message
    in turn, one after the other)."""
    if _LAST[0] is not text:
        _LAST[0], _LAST[1] = text, frozenset(_WORD.findall(text))
    return _LAST[1]


class FamilyPattern:
    """A family's members as one matcher. Each member is indexed by the longest word of
    its longest literal run; a line's words pick the few members it can be, and only
    their regexes run (a line costs one word split and a few dict look-ups, not one
    regex pass per member).

    It quacks like the part of :class:`re.Pattern` the classifier uses: ``search`` and
    ``pattern``. A member's regex is compiled when a line first asks for it: the catalog
    has hundreds, compiling them all was half of ``fleetmedic scan``'s start-up, and a
    scan asks for a few (``tests/unit/scan/test_scan_families.py`` asks for them all)."""

    def __init__(self, family: Family) -> None:
        self.index: dict[str, list[tuple[str, str]]] = {}  # word -> (literal key, regex)
        self._compiled: dict[str, re.Pattern[str]] = {}
        members: dict[str, str] = {}  # regex -> its literal key
        for m in family.members:
            members.setdefault(member_regex(family, m), literal_key(m.format))
        # index each member by the rarest word of its key (the longest among equals):
        # a line's common words ("failed") then pick few members to try
        counts: dict[str, int] = {}
        for key in members.values():
            for word in set(_WORD.findall(key)):
                counts[word] = counts.get(word, 0) + 1
        for text, key in members.items():
            words = _WORD.findall(key) or [""]
            pick = min(words, key=lambda w: (counts.get(w, 0), -len(w)))
            self.index.setdefault(pick, []).append((key, text))
        seen = members
        self.pattern = "|".join(sorted(seen))
        self.words = frozenset(self.index)

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        for word in _words(text) & self.words:
            for key, regex in self.index[word]:
                if key in text:
                    found = self._regex(regex).search(text, pos)
                    if found is not None:
                        return found
        for key, regex in self.index.get("", ()):
            found = self._regex(regex).search(text, pos) if key in text else None
            if found is not None:
                return found
        return None

    def _regex(self, text: str) -> re.Pattern[str]:
        found = self._compiled.get(text)
        if found is None:
            found = self._compiled[text] = re.compile(text)
        return found


def member_line(family: Family, member: Member, pci: str = "0000:03:00.0") -> str:
    """A kernel message the driver prints for ``member`` (its conversions filled in)."""
    text = _CONVERSION.sub(lambda m: _FILL[m.group(1)], member.format)
    if family.by_function:
        return f"NVRM: {member.function}: {text}"
    return f"amdgpu {pci}: amdgpu: {text}"
