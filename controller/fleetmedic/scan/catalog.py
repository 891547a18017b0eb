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

:func:`load` validates everything once (an unknown action, a missing
source, a bad regex is a :class:`~fleetmedic.errors.ConfigError` with a
one-line message) and returns a frozen :class:`Catalog`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.model.actions import FENCING_ACTIONS
from fleetmedic.scan.finding import ACTIONS

FILES = ("xid_catalog.yaml", "sxid_catalog.yaml", "amdgpu_catalog.yaml", "workload_catalog.yaml")

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
    match: re.Pattern[str]
    unless: re.Pattern[str] | None
    action: str
    bucket: str | None
    code: int | None
    same_as: tuple[str, str] | None
    description: str
    sources: tuple[str, ...]
    continued_by: re.Pattern[str] | None = None


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

    def threshold_for(self, rule: str) -> Threshold | None:
        """The threshold of rule id ``rule`` (an exact key first, then fnmatch patterns)."""
        return threshold_for(self.thresholds, rule)

    def rules_for(self, message: str) -> tuple[Rule, ...]:
        """Rules whose ``requires`` literal occurs in ``message``, in catalog order."""
        return tuple(rule for rule in self.rules if rule.requires in message)

    @property
    def triggers(self) -> tuple[str, ...]:
        """Literal substrings of which every classifiable line contains one."""
        found = [TRIGGER_NVRM, TRIGGER_SXID]
        for literal in [rule.requires for rule in self.rules] + [n.requires for n in self.net]:
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
    raw = data.get("thresholds") or {}
    return {str(k): parse_threshold(f"fault catalog {file}", str(k), v) for k, v in raw.items()}


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


def _load_sxids(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    sources = data["sources"]
    severities = {str(k): _action(name, {"id": k}, v) for k, v in data["severity_actions"].items()}
    sxids: dict[int, SxidEntry] = {}
    for entry in data["sxids"]:
        code = int(entry["code"])
        if code in sxids:
            raise _fail(name, f"SXid {code} is listed twice")
        if entry["severity"] not in severities:
            raise _fail(name, f"SXid {code} has unknown severity {entry['severity']!r}")
        sxids[code] = SxidEntry(
            code,
            str(entry["name"]),
            str(entry["severity"]),
            _action(name, entry, entry["action"]),
            entry.get("why"),
            _sources(name, entry, sources),
        )
    printed = {str(k).lower(): str(v) for k, v in data["printed_severity"].items()}
    for word, severity in printed.items():
        if severity not in severities:
            raise _fail(name, f"printed severity {word!r} maps to unknown {severity!r}")
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
            )
        )
    return tuple(rules)


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
        parts.update(_load_sxids(FILES[1], files[FILES[1]]))
        amd = files[FILES[2]]
        parts["rules"] += _load_rules(
            FILES[2], amd["rules"], amd["sources"], "amd", "amdgpu", TRIGGER_AMDGPU
        )
        work = files[FILES[3]]
        parts["rules"] += _load_rules(
            FILES[3], work["rules"], work["sources"], "nvidia", None, None
        )
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
