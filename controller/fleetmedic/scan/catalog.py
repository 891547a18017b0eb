"""The fault catalog: what each Xid, SXid and kernel message means, as data.

The catalog lives in YAML files in ``fleetmedic/data`` (one per family, each
with a ``sources`` table that every entry must cite):

- ``xid_catalog.yaml``: NVIDIA Xid codes with NVIDIA's immediate and
  investigatory resolution buckets and our action; Xid 154's recovery
  actions by hex value; the Xid 144-150 (NVLink 5) decode table; NVIDIA
  kernel messages without an Xid number (``nvrm`` rules).
- ``sxid_catalog.yaml``: NVSwitch SXid codes with their severity
  (non-fatal, fatal, always fatal).
- ``amdgpu_catalog.yaml``: amdgpu kernel messages (resets, ring timeouts,
  RAS errors, page faults, init failures).
- ``workload_catalog.yaml``: NCCL and CUDA messages in pod logs that mean
  hardware.
- ``source_nvidia.yaml`` / ``source_amdgpu.yaml`` / ``source_nvswitch.yaml``: what the
  driver sources print on each family's error path, and every SXid code the NVSwitch
  driver defines with the severity it prints (derived by ``scripts/derive_families.py``,
  :mod:`fleetmedic.scan.families`); the catalog files' ``families:`` say what each
  family calls for.

The records are in :mod:`.entries`; the files are read and checked by
:mod:`.catalogfiles`, :mod:`.catalogcodes` and :mod:`.catalogrules`; the packaged
files' parse is kept by their content (:mod:`.catalogcache`: a start-up cost of
``fleetmedic scan``), and checked again at every load.

:func:`load` validates everything once (an unknown action, a missing
source, a bad regex is a :class:`~fleetmedic.errors.ConfigError` with a
one-line message) and returns a frozen :class:`Catalog`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from fleetmedic.errors import ConfigError
from fleetmedic.scan import families as fammod
from fleetmedic.scan.catalogcodes import load_sxids, load_xids
from fleetmedic.scan.catalogfiles import (
    TRIGGER_AMDGPU,
    TRIGGER_NVRM,
    TRIGGER_SXID,
    catalog_file,
    fail,
    programs,
    read_files,
    shipped_thresholds,
)
from fleetmedic.scan.catalogrules import load_families, load_joins, load_net, load_rules
from fleetmedic.scan.entries import (
    Benign,
    Join,
    NetRule,
    Nvlink5Row,
    Rule,
    SxidEntry,
    Threshold,
    XidEntry,
    parse_threshold,
    threshold_for,
)

__all__ = [
    "FILES",
    "SOURCE_LISTS",
    "TRIGGER_AMDGPU",
    "TRIGGER_NVRM",
    "TRIGGER_SXID",
    "Benign",
    "Catalog",
    "Join",
    "NetRule",
    "Nvlink5Row",
    "Rule",
    "SxidEntry",
    "Threshold",
    "XidEntry",
    "load",
    "parse_threshold",
    "threshold_for",
]

FILES = (
    "xid_catalog.yaml",
    "sxid_catalog.yaml",
    "amdgpu_catalog.yaml",
    "workload_catalog.yaml",
    "fabricmanager_catalog.yaml",
)
SOURCE_LISTS = ("source_nvidia.yaml", "source_amdgpu.yaml", "source_nvswitch.yaml")
"""The lists derived from the driver sources (scripts/derive_families.py) the catalog reads."""
PACKAGED = FILES + SOURCE_LISTS
"""Every file :func:`load` reads: one kept parse of exactly these (scan/catalogcache.py), so
a reader of some of them asks for all (scan/xidcontext.py) and shares it, instead of
rewriting the cache with a parse of its own."""


@dataclasses.dataclass(frozen=True)
class Catalog:
    """Everything the classifier looks up. Build it with :func:`load`."""

    sources: Mapping[str, str]
    xids: Mapping[int, XidEntry]
    bucket_actions: Mapping[str, str]
    unknown_xid_action: str
    xid154_actions: Mapping[int, tuple[str, str]]
    xid154_unknown_action: str
    nvlink5: Mapping[tuple[int, str], Nvlink5Row]
    nvlink5_bucket_actions: Mapping[str, str]
    nvlink5_severity_actions: Mapping[str, str]
    sxids: Mapping[int, SxidEntry]
    sxid_severity_actions: Mapping[str, str]
    sxid_printed: Mapping[str, str]
    unknown_sxid_action: str
    rules: tuple[Rule, ...]
    thresholds: Mapping[str, Threshold] = dataclasses.field(default_factory=dict)
    sxid_parts: Mapping[str, re.Pattern[str]] = dataclasses.field(default_factory=dict)
    net: tuple[NetRule, ...] = ()
    failure_words: re.Pattern[str] | None = None
    benign: tuple[Benign, ...] = ()
    families: tuple[fammod.Family, ...] = ()
    source_lists: Mapping[str, fammod.SourceList] = dataclasses.field(default_factory=dict)
    driver_sxids: Mapping[int, tuple[str, str]] = dataclasses.field(default_factory=dict)
    """Every SXid the NVSwitch driver defines: code -> (name, severity it prints)."""
    joins: tuple[Join, ...] = ()
    sxid_raise_reasons: Mapping[int, str] = dataclasses.field(default_factory=dict)
    device_aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Another name a driver's lines carry instead of its literal (``drmn`` -> ``amdgpu``)."""

    def threshold_for(self, rule: str) -> Threshold | None:
        """The threshold of rule id ``rule`` (an exact key first, then fnmatch patterns)."""
        return threshold_for(self.thresholds, rule)

    def rules_for(self, message: str) -> tuple[Rule, ...]:
        """Rules whose ``requires`` literal (or an alias of it) occurs in ``message``, in
        catalog order."""
        present = {lit for lit in self._literals if lit in message}
        present |= {lit for alias, lit in self.device_aliases.items() if alias in message}
        key = frozenset(present)
        found = self._rules_by_literals.get(key)
        if found is None:
            found = tuple(rule for rule in self.rules if rule.requires in key)
            self._rules_by_literals[key] = found
        return found

    @functools.cached_property
    def _literals(self) -> frozenset[str]:
        """The distinct ``requires`` literals (tested once each per message)."""
        return frozenset(rule.requires for rule in self.rules)

    @functools.cached_property
    def _rules_by_literals(self) -> dict[frozenset[str], tuple[Rule, ...]]:
        """:meth:`rules_for`'s answer by the set of literals a message holds (at most one
        entry per subset of the few literals; the walk over every rule was a tenth of a
        classification's time)."""
        return {}

    @property
    def triggers(self) -> tuple[str, ...]:
        """Literal substrings of which every classifiable line contains one."""
        found = [TRIGGER_NVRM, TRIGGER_SXID]
        literals = [rule.requires for rule in self.rules] + [n.requires for n in self.net]
        literals += list(self.device_aliases)
        for literal in literals:
            if not any(t in literal for t in found):
                found.append(literal)
        return tuple(found)

    @property
    def cut_heads(self) -> tuple[str, ...]:
        """Literals of which the first half of every cut record (``joins``) contains one:
        the bulk pre-filter passes the line after such a line on too, so the second
        half needs no trigger of its own."""
        return tuple(dict.fromkeys(join.requires for join in self.joins))

    @property
    def cut_tails(self) -> tuple[str, ...]:
        """Literals of which the second half of every cut record contains one: a source
        that cannot ask for the line after a cut head (a LogQL line filter) asks for
        these besides :attr:`triggers`."""
        return tuple(dict.fromkeys(lit for join in self.joins for lit in join.literals))

    def net_for(self, message: str) -> NetRule | None:
        """The safety-net entry whose driver literal ``message`` contains, if any."""
        for rule in self.net:
            if rule.requires in message:
                return rule
        return None

    def is_benign(self, message: str) -> bool:
        """True if ``message`` has a known-benign shape (``benign`` in the catalog)."""
        return any(shape.match.search(message) for shape in self.benign)


@cache
def load(directory: str | None = None) -> Catalog:
    """Read and validate the catalog (from ``fleetmedic/data`` unless ``directory``).

    The result is cached per directory. Raises :class:`ConfigError` (one
    line) on any invalid entry.
    """
    read = read_files(Path(directory) if directory else None, PACKAGED)
    files = {name: catalog_file(read, name) for name in FILES}
    sources: dict[str, str] = {}
    for name, data in files.items():
        for key, text in data["sources"].items():
            if key in sources and sources[key] != text:
                raise fail(name, f"source {key!r} is defined differently in two files")
            sources[key] = " ".join(str(text).split())
    try:
        parts = load_xids(FILES[0], files[FILES[0]])
        nv_families = load_families(FILES[0], files[FILES[0]], read)
        parts["rules"] += nv_families["rules"]
        parts.update(load_sxids(FILES[1], files[FILES[1]], read))
        amd = files[FILES[2]]
        parts["rules"] += load_rules(
            FILES[2], amd["rules"], amd["sources"], "amd", "amdgpu", TRIGGER_AMDGPU
        )
        amd_families = load_families(FILES[2], amd, read)
        parts["rules"] += amd_families["rules"]
        work = files[FILES[3]]
        parts["rules"] += load_rules(FILES[3], work["rules"], work["sources"], "nvidia", None, None)
        fm = files[FILES[4]]
        parts["rules"] += load_rules(FILES[4], fm["rules"], fm["sources"], "nvidia", None, None)
        parts["families"] = nv_families["families"] + amd_families["families"]
        parts["source_lists"] = {**nv_families["lists"], **amd_families["lists"]}
        parts["joins"] = tuple(j for name in FILES for j in load_joins(name, files[name]))
        parts["device_aliases"] = {
            str(k): str(v)
            for name in FILES
            for k, v in (files[name].get("device_aliases") or {}).items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"fault catalog: malformed entry ({type(exc).__name__}: {exc})") from None
    net: list[NetRule] = []
    benign: list[Benign] = []
    words: list[str] = []
    try:
        for name in FILES:
            extra = load_net(name, files[name])
            net += extra["net"]
            benign += extra["benign"]
            if extra["failure_words"] is not None:
                words.append(extra["failure_words"].pattern)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"fault catalog: malformed entry ({type(exc).__name__}: {exc})") from None
    parts["net"] = tuple(net)
    parts["benign"] = tuple(benign)
    words_text = "|".join(f"(?:{w})" for w in words)
    parts["failure_words"] = programs().compile(words_text) if words else None
    parts["thresholds"] = {}
    for name in FILES:
        parts["thresholds"].update(shipped_thresholds(name, files[name]))
    ids = [rule.id for rule in parts["rules"]] + [rule.id for rule in parts["net"]]
    if len(ids) != len(set(ids)):
        raise ConfigError("fault catalog: duplicate rule id")
    programs().save()
    return Catalog(sources=sources, **parts)
