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

:func:`load` validates everything once (an unknown action, a missing
source, a bad regex is a :class:`~fleetmedic.errors.ConfigError` with a
one-line message) and returns a frozen :class:`Catalog`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.model.actions import FENCING_ACTIONS
from fleetmedic.scan import families as fammod
from fleetmedic.scan.finding import ACTION_RANK, ACTIONS

FILES = (
    "xid_catalog.yaml",
    "sxid_catalog.yaml",
    "amdgpu_catalog.yaml",
    "workload_catalog.yaml",
    "fabricmanager_catalog.yaml",
)
SOURCE_LISTS = ("source_nvidia.yaml", "source_amdgpu.yaml", "source_nvswitch.yaml")
"""The lists derived from the driver sources (scripts/derive_families.py) the catalog reads."""

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster start-up

TRIGGER_NVRM = "NVRM"
TRIGGER_SXID = "nvidia-nvswitch"  # the NVSwitch driver's device name, on every SXid line
TRIGGER_AMDGPU = "amdgpu"


@dataclasses.dataclass(frozen=True, slots=True)
class XidEntry:
    """One row of NVIDIA's Xid catalog plus our ``action`` (and ``why`` if it deviates)."""

    code: int
    mnemonic: str
    description: str
    immediate: str | None
    investigatory: str | None
    action: str
    why: str | None
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SxidEntry:
    """One NVSwitch SXid: its name, the Fabric Manager guide's severity, our action."""

    code: int
    name: str
    severity: str
    action: str
    why: str | None
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """A message rule (kinds ``nvrm``, ``amdgpu``, ``nccl``, ``cuda``).

    ``requires`` is a literal substring that must be in the message before
    the regex runs (it is also a pre-filter trigger for bulk scanning).
    """

    id: str
    vendor: str
    kind: str
    requires: str
    match: re.Pattern[str] | fammod.FamilyPattern
    unless: re.Pattern[str] | None
    action: str
    bucket: str | None
    code: int | None
    same_as: tuple[str, str] | None
    description: str
    sources: tuple[str, ...]
    continued_by: re.Pattern[str] | None = None
    awaits_process: bool = False
    """The report names its process on a follow-up line (newer amdgpu page faults): the
    scanner holds the finding for that line (context workflows judge by process)."""
    by_status: Mapping[int, str] = dataclasses.field(default_factory=dict)
    """The driver's status code on the line (``status=0x..``) -> action; a status not
    listed gives ``status_default`` (a line without a status keeps ``action``)."""
    status_default: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Join:
    """A record the log cut in two (``joins`` in the catalog): a line matching ``head``
    (the driver stopped mid-message, or an author wrapped it) is joined with the next
    line when that one matches ``tail`` and carries no driver literal of its own."""

    id: str
    requires: str  # a literal every head contains (the head regex runs only then)
    head: re.Pattern[str]
    tail: re.Pattern[str]
    literals: tuple[str, ...]
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class NetRule:
    """The safety net for one driver (``unclassified`` in the catalog): a line that
    contains ``requires``, that no rule matched and that is not a known-benign shape
    becomes an ``id`` finding (action ``action``) when it was logged at kernel level
    ``err`` or worse (only if ``level_counts``) or when it says a failure word."""

    id: str
    vendor: str
    kind: str
    requires: str
    level_counts: bool
    action: str
    description: str
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Benign:
    """A known-benign line shape of a GPU driver: the net stays silent on it."""

    match: re.Pattern[str]
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Threshold:
    """When findings that only monitor add up: ``count`` lines of one rule on one GPU
    within ``window`` seconds fence at ``action``. Lines closer than ``burst`` seconds
    to the last counted one are the same event. ``count`` 0 turns it off."""

    count: int
    window: float
    action: str
    burst: float = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Nvlink5Row:
    """``(xid, unit)`` of an Xid 144-150 line -> bucket per error status."""

    status: Mapping[int, str]
    default: str | None
    promotable: frozenset[int]


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
        return tuple(rule for rule in self.rules if rule.requires in present)

    @functools.cached_property
    def _literals(self) -> frozenset[str]:
        """The distinct ``requires`` literals (tested once each per message)."""
        return frozenset(rule.requires for rule in self.rules)

    @property
    def triggers(self) -> tuple[str, ...]:
        """Literal substrings of which every classifiable line contains one."""
        found = [TRIGGER_NVRM, TRIGGER_SXID]
        literals = [rule.requires for rule in self.rules] + [n.requires for n in self.net]
        literals += [lit for join in self.joins for lit in join.literals]
        literals += list(self.device_aliases)
        for literal in literals:
            if not any(t in literal for t in found):
                found.append(literal)
        return tuple(found)

    def net_for(self, message: str) -> NetRule | None:
        """The safety-net entry whose driver literal ``message`` contains, if any."""
        for rule in self.net:
            if rule.requires in message:
                return rule
        return None

    def is_benign(self, message: str) -> bool:
        """True if ``message`` has a known-benign shape (``benign`` in the catalog)."""
        return any(shape.match.search(message) for shape in self.benign)


def threshold_for(table: Mapping[str, Threshold], rule: str) -> Threshold | None:
    """``table[rule]``, else the first fnmatch pattern key that matches ``rule``."""
    found = table.get(rule)
    if found is not None:
        return found
    for key, value in table.items():
        if fnmatch.fnmatchcase(rule, key):
            return value
    return None


def parse_threshold(where: str, key: str, raw: Any) -> Threshold:
    """One threshold from ``{count, window, action, burst}``; ConfigError (one line) if bad."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}: threshold {key!r} must be a mapping with count, window, action"
        )
    unknown = set(raw) - {"count", "window", "action", "burst"}
    if unknown:
        raise ConfigError(f"{where}: threshold {key!r} has unknown key {sorted(unknown)[0]!r}")
    try:
        count = int(raw.get("count", 0))
        window = float(raw.get("window", 3600))
        burst = float(raw.get("burst", 10.0))
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: threshold {key!r} needs numbers for count/window/burst"
        ) from None
    action = raw.get("action", "reboot")
    if action not in FENCING_ACTIONS:
        raise ConfigError(
            f"{where}: threshold {key!r} action {action!r} "
            f"must be one of {', '.join(FENCING_ACTIONS)}"
        )
    if count < 0 or window <= 0 or burst < 0:
        raise ConfigError(f"{where}: threshold {key!r} needs count >= 0, window > 0, burst >= 0")
    return Threshold(count, window, str(action), burst)


def _thresholds(file: str, data: Mapping[str, Any]) -> dict[str, Threshold]:
    """A count the catalog ships must cite where it comes from (an operator's own counts in
    the agent config need not): a count without a published source fences healthy nodes."""
    out = {}
    for key, raw in (data.get("thresholds") or {}).items():
        entry = dict(raw) if isinstance(raw, Mapping) else raw
        if isinstance(entry, dict):
            _sources(file, {"id": f"threshold {key}", **entry}, data["sources"])
            entry.pop("source", None)
        out[str(key)] = parse_threshold(f"fault catalog {file}", str(key), entry)
    return out


def _fail(file: str, what: str) -> ConfigError:
    return ConfigError(f"fault catalog {file}: {what}")


def _sources(file: str, entry: Mapping[str, Any], known: Mapping[str, str]) -> tuple[str, ...]:
    raw = entry.get("source")
    names = (raw,) if isinstance(raw, str) else tuple(raw or ())
    if not names:
        raise _fail(file, f"entry {_label(entry)} has no source")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise _fail(file, f"entry {_label(entry)} cites unknown source {unknown[0]!r}")
    return names


def _label(entry: Mapping[str, Any]) -> str:
    return str(entry.get("id", entry.get("code", entry.get("xid", "?"))))


def _action(file: str, entry: Mapping[str, Any], value: Any) -> str:
    if value not in ACTIONS:
        raise _fail(
            file, f"entry {_label(entry)} has action {value!r}, not one of {', '.join(ACTIONS)}"
        )
    return str(value)


def _regex(file: str, entry: Mapping[str, Any], text: Any) -> re.Pattern[str]:
    try:
        return re.compile(str(text))
    except re.error as exc:
        raise _fail(file, f"entry {_label(entry)} has a bad regex: {exc}") from None


def _hex(text: Any) -> int:
    return int(str(text), 16)


def _read(directory: Path | None, name: str) -> dict[str, Any]:
    try:
        if directory is None:
            text = resources.files("fleetmedic.data").joinpath(name).read_text(encoding="utf-8")
        else:
            text = (directory / name).read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise _fail(name, f"cannot be read: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        raise _fail(name, "is not a mapping with a `sources` table")
    return data


def _load_xids(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    sources = data["sources"]
    buckets = {str(k): _action(name, {"id": k}, v) for k, v in data["bucket_actions"].items()}
    xids: dict[int, XidEntry] = {}
    for entry in data["xids"]:
        code = int(entry["code"])
        if code in xids:
            raise _fail(name, f"Xid {code} is listed twice")
        xids[code] = XidEntry(
            code,
            str(entry["mnemonic"]),
            str(entry["description"]),
            entry.get("immediate"),
            entry.get("investigatory"),
            _action(name, entry, entry["action"]),
            entry.get("why"),
            _sources(name, entry, sources),
        )
    x154 = data["xid154"]
    _sources(name, {"id": "xid154", **x154}, sources)
    actions154 = {
        _hex(k): (str(v["name"]), _action(name, {"id": f"xid154 {k}"}, v["action"]))
        for k, v in x154["recovery_actions"].items()
    }
    nvl = data["nvlink5"]
    _sources(name, {"id": "nvlink5", **nvl}, sources)
    nvl_buckets = {str(k): _action(name, {"id": k}, v) for k, v in nvl["bucket_actions"].items()}
    decode: dict[tuple[int, str], Nvlink5Row] = {}
    for row in nvl["decode"]:
        status = {_hex(k): str(v) for k, v in (row.get("status") or {}).items()}
        for bucket in [*status.values(), row.get("default")]:
            if bucket is not None and bucket not in nvl_buckets:
                raise _fail(
                    name, f"nvlink5 row {row['xid']} uses bucket {bucket!r} without an action"
                )
        parsed = Nvlink5Row(
            status, row.get("default"), frozenset(_hex(p) for p in row.get("promotable", ()))
        )
        for unit in row["units"]:
            decode[(int(row["xid"]), str(unit).upper())] = parsed
    return {
        "xids": xids,
        "bucket_actions": buckets,
        "unknown_xid_action": _action(
            name, {"id": "unknown_xid_action"}, data["unknown_xid_action"]
        ),
        "xid154_actions": actions154,
        "xid154_unknown_action": _action(name, {"id": "xid154"}, x154["unknown_action"]),
        "nvlink5": decode,
        "nvlink5_bucket_actions": nvl_buckets,
        "nvlink5_severity_actions": {
            str(k): _action(name, {"id": k}, v) for k, v in nvl["severity_actions"].items()
        },
        "rules": _load_rules(name, data.get("nvrm", ()), sources, "nvidia", "nvrm", TRIGGER_NVRM),
    }


def _load_sxids(name: str, data: Mapping[str, Any], base: Path | None) -> dict[str, Any]:
    sources = data["sources"]
    severities = {str(k): _action(name, {"id": k}, v) for k, v in data["severity_actions"].items()}
    sxids: dict[int, SxidEntry] = {}
    raises: dict[int, str] = {}
    for entry in data["sxids"]:
        code = int(entry["code"])
        if code in sxids:
            raise _fail(name, f"SXid {code} is listed twice")
        severity = str(entry["severity"])
        if severity not in severities:
            raise _fail(name, f"SXid {code} has unknown severity {severity!r}")
        floor = severities[severity]
        action = _action(name, entry, entry.get("action", floor))
        if action != floor and not entry.get("why"):
            raise _fail(name, f"SXid {code} departs from its severity's action without a `why`")
        if ACTION_RANK[action] < ACTION_RANK[floor] and floor in FENCING_ACTIONS:
            raise _fail(
                name,
                f"SXid {code} action {action!r} is below its severity's {floor!r}: "
                "an entry may raise the driver's word, never lower a fence",
            )
        if ACTION_RANK[action] > ACTION_RANK[floor]:
            raises[code] = str(entry["why"])
        sxids[code] = SxidEntry(
            code,
            str(entry["name"]),
            severity,
            action,
            entry.get("why"),
            _sources(name, entry, sources),
        )
    printed = {str(k).lower(): str(v) for k, v in data["printed_severity"].items()}
    for word, severity in printed.items():
        if severity not in severities:
            raise _fail(name, f"printed severity {word!r} maps to unknown {severity!r}")
    driver: dict[int, tuple[str, str]] = {}
    if data.get("driver_list"):
        listed = _read_plain(base, str(data["driver_list"]))
        for row in next(iter(listed.values())).get("sxids") or ():
            said = printed.get(str(row["severity"]).lower())
            if said is not None:
                driver[int(row["code"])] = (str(row["name"]), said)
    return {
        "sxids": sxids,
        "sxid_severity_actions": severities,
        "sxid_printed": printed,
        "unknown_sxid_action": _action(
            name, {"id": "unknown_sxid_action"}, data["unknown_sxid_action"]
        ),
        "sxid_parts": {
            str(k): _regex(name, {"id": f"parts.{k}"}, v)
            for k, v in (data.get("parts") or {}).items()
        },
        "driver_sxids": driver,
        "sxid_raise_reasons": raises,
    }


def _load_net(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``unclassified``, ``failure_words`` and ``benign`` sections of one file."""
    sources = data["sources"]
    net = tuple(
        NetRule(
            id=str(entry["id"]),
            vendor=str(entry["vendor"]),
            kind=str(entry["kind"]),
            requires=str(entry["requires"]),
            level_counts=bool(entry.get("level_counts", True)),
            action=_action(name, entry, entry.get("action", "monitor")),
            description=" ".join(str(entry.get("description", "")).split()),
            sources=_sources(name, entry, sources),
        )
        for entry in data.get("unclassified") or ()
    )
    for rule in net:
        if rule.action not in ("none", "monitor"):
            raise _fail(
                name, f"unclassified {rule.id} must not fence on its own (action {rule.action!r})"
            )
    benign = tuple(
        Benign(_regex(name, entry, entry["match"]), _sources(name, entry, sources))
        for entry in data.get("benign") or ()
    )
    words = data.get("failure_words")
    return {
        "net": net,
        "benign": benign,
        "failure_words": _regex(name, {"id": "failure_words"}, words) if words else None,
    }


def _load_rules(
    name: str,
    entries: Any,
    sources: Mapping[str, str],
    vendor: str,
    kind: str | None,
    requires: str | None,
) -> tuple[Rule, ...]:
    rules = []
    for entry in entries or ():
        rule_kind = str(entry.get("kind", kind))
        same = entry.get("same_as")
        code = entry.get("code")
        literal = str(entry.get("requires", requires or ""))
        if not literal:
            raise _fail(
                name, f"rule {_label(entry)} needs `requires` (a literal pre-filter string)"
            )
        rules.append(
            Rule(
                id=str(entry["id"]),
                vendor=str(entry.get("vendor", vendor)),
                kind=rule_kind,
                requires=literal,
                match=_regex(name, entry, entry["match"]),
                unless=_regex(name, entry, entry["unless"]) if entry.get("unless") else None,
                action=_action(name, entry, entry["action"]),
                bucket=entry.get("bucket"),
                code=int(code) if code is not None else None,
                same_as=(str(same["kind"]), str(same["code"])) if same else None,
                description=" ".join(str(entry.get("description", "")).split()),
                sources=_sources(name, entry, sources),
                continued_by=(
                    _regex(name, entry, entry["continued_by"])
                    if entry.get("continued_by")
                    else None
                ),
                awaits_process=bool(entry.get("awaits_process", False)),
                **_status_actions(name, entry),
            )
        )
    return tuple(rules)


def _status_actions(file: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    raw = entry.get("by_status") or {}
    return {
        "by_status": {_hex(k): _action(file, entry, v) for k, v in raw.items()},
        "status_default": (
            _action(file, entry, entry["status_default"]) if "status_default" in entry else None
        ),
    }


def _load_families(file: str, data: Mapping[str, Any], base: Path | None) -> dict[str, Any]:
    """The ``families:`` section of one catalog file, with its derived source list."""
    section = data.get("families")
    if not section:
        return {"rules": (), "families": (), "lists": {}}
    sources = data["sources"]
    listed = fammod.parse_source_list(_read_plain(base, str(section["list"])))
    rules, families = [], []
    for entry in section["entries"]:
        name = str(entry["family"])
        if name not in listed.families:
            raise _fail(file, f"family {name!r} is not in {section['list']}")
        path, members = listed.families[name]
        if not members:
            raise _fail(file, f"family {name!r} has no members in {section['list']}")
        family = fammod.Family(
            name,
            str(entry["id"]),
            listed.vendor,
            path,
            _action(file, entry, entry["action"]),
            members,
            bool(section.get("by_function", False)),
        )
        families.append(family)
        rules.append(
            Rule(
                id=family.rule_id,
                vendor=str(section.get("vendor", "nvidia")),
                kind=str(section["kind"]),
                requires=str(section["requires"]),
                match=fammod.FamilyPattern(family),
                unless=_regex(file, entry, entry["unless"]) if entry.get("unless") else None,
                action=family.action,
                bucket=entry.get("bucket"),
                code=None,
                same_as=None,
                description=" ".join(str(entry.get("description", "")).split()),
                sources=_sources(file, entry, sources),
                continued_by=None,
                **_status_actions(file, entry),
            )
        )
    unnamed = set(listed.families) - {f.name for f in families}
    if unnamed:
        raise _fail(file, f"family {sorted(unnamed)[0]!r} of {section['list']} has no entry")
    return {"rules": tuple(rules), "families": tuple(families), "lists": {listed.vendor: listed}}


def _load_joins(file: str, data: Mapping[str, Any]) -> tuple[Join, ...]:
    sources = data["sources"]
    return tuple(
        Join(
            str(entry["id"]),
            str(entry["requires"]),
            _regex(file, entry, entry["head"]),
            _regex(file, entry, entry["tail"]),
            tuple(str(x) for x in entry.get("literals") or ()),
            _sources(file, entry, sources),
        )
        for entry in data.get("joins") or ()
    )


def _read_plain(directory: Path | None, name: str) -> dict[str, Any]:
    """A data file without a ``sources`` table (the derived lists)."""
    try:
        if directory is None:
            text = resources.files("fleetmedic.data").joinpath(name).read_text(encoding="utf-8")
        else:
            text = (directory / name).read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise _fail(name, f"cannot be read: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict) or len(data) != 1:
        raise _fail(name, "is not a mapping with one vendor key")
    return data


@cache
def load(directory: str | None = None) -> Catalog:
    """Read and validate the catalog (from ``fleetmedic/data`` unless ``directory``).

    The result is cached per directory. Raises :class:`ConfigError` (one
    line) on any invalid entry.
    """
    base = Path(directory) if directory else None
    files = {name: _read(base, name) for name in FILES}
    sources: dict[str, str] = {}
    for name, data in files.items():
        for key, text in data["sources"].items():
            if key in sources and sources[key] != text:
                raise _fail(name, f"source {key!r} is defined differently in two files")
            sources[key] = " ".join(str(text).split())
    try:
        parts = _load_xids(FILES[0], files[FILES[0]])
        nv_families = _load_families(FILES[0], files[FILES[0]], base)
        parts["rules"] += nv_families["rules"]
        parts.update(_load_sxids(FILES[1], files[FILES[1]], base))
        amd = files[FILES[2]]
        parts["rules"] += _load_rules(
            FILES[2], amd["rules"], amd["sources"], "amd", "amdgpu", TRIGGER_AMDGPU
        )
        amd_families = _load_families(FILES[2], amd, base)
        parts["rules"] += amd_families["rules"]
        work = files[FILES[3]]
        parts["rules"] += _load_rules(
            FILES[3], work["rules"], work["sources"], "nvidia", None, None
        )
        fm = files[FILES[4]]
        parts["rules"] += _load_rules(FILES[4], fm["rules"], fm["sources"], "nvidia", None, None)
        parts["families"] = nv_families["families"] + amd_families["families"]
        parts["source_lists"] = {**nv_families["lists"], **amd_families["lists"]}
        parts["joins"] = tuple(j for name in FILES for j in _load_joins(name, files[name]))
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
            extra = _load_net(name, files[name])
            net += extra["net"]
            benign += extra["benign"]
            if extra["failure_words"] is not None:
                words.append(extra["failure_words"].pattern)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"fault catalog: malformed entry ({type(exc).__name__}: {exc})") from None
    parts["net"] = tuple(net)
    parts["benign"] = tuple(benign)
    parts["failure_words"] = re.compile("|".join(f"(?:{w})" for w in words)) if words else None
    parts["thresholds"] = {}
    for name in FILES:
        parts["thresholds"].update(_thresholds(name, files[name]))
    ids = [rule.id for rule in parts["rules"]] + [rule.id for rule in parts["net"]]
    if len(ids) != len(set(ids)):
        raise ConfigError("fault catalog: duplicate rule id")
    return Catalog(sources=sources, **parts)
