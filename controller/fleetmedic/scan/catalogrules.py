"""The catalog's message rules, source-derived families, cut records (joins) and the
safety net (``unclassified``, ``benign``, ``failure_words``), read from one file each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetmedic.scan import families as fammod
from fleetmedic.scan.catalogfiles import (
    checked_action,
    cited,
    compiled,
    fail,
    hex_value,
    label,
    source_list,
)
from fleetmedic.scan.entries import Benign, Join, NetRule, Rule


def load_net(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``unclassified``, ``failure_words`` and ``benign`` sections of one file."""
    sources = data["sources"]
    net = tuple(
        NetRule(
            id=str(entry["id"]),
            vendor=str(entry["vendor"]),
            kind=str(entry["kind"]),
            requires=str(entry["requires"]),
            level_counts=bool(entry.get("level_counts", True)),
            action=checked_action(name, entry, entry.get("action", "monitor")),
            description=" ".join(str(entry.get("description", "")).split()),
            sources=cited(name, entry, sources),
        )
        for entry in data.get("unclassified") or ()
    )
    for rule in net:
        if rule.action not in ("none", "monitor"):
            raise fail(
                name, f"unclassified {rule.id} must not fence on its own (action {rule.action!r})"
            )
    benign = tuple(
        Benign(compiled(name, entry, entry["match"]), cited(name, entry, sources))
        for entry in data.get("benign") or ()
    )
    words = data.get("failure_words")
    return {
        "net": net,
        "benign": benign,
        "failure_words": compiled(name, {"id": "failure_words"}, words) if words else None,
    }


def load_rules(
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
            raise fail(name, f"rule {label(entry)} needs `requires` (a literal pre-filter string)")
        rules.append(
            Rule(
                id=str(entry["id"]),
                vendor=str(entry.get("vendor", vendor)),
                kind=rule_kind,
                requires=literal,
                match=compiled(name, entry, entry["match"]),
                unless=compiled(name, entry, entry["unless"]) if entry.get("unless") else None,
                action=checked_action(name, entry, entry["action"]),
                bucket=entry.get("bucket"),
                code=int(code) if code is not None else None,
                same_as=(str(same["kind"]), str(same["code"])) if same else None,
                description=" ".join(str(entry.get("description", "")).split()),
                sources=cited(name, entry, sources),
                continued_by=(
                    compiled(name, entry, entry["continued_by"])
                    if entry.get("continued_by")
                    else None
                ),
                awaits_process=bool(entry.get("awaits_process", False)),
                record_details=bool(entry.get("record_details", False)),
                **status_actions(name, entry),
            )
        )
    return tuple(rules)


def status_actions(file: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    raw = entry.get("by_status") or {}
    return {
        "by_status": {hex_value(k): checked_action(file, entry, v) for k, v in raw.items()},
        "status_default": (
            checked_action(file, entry, entry["status_default"])
            if "status_default" in entry
            else None
        ),
    }


def load_families(file: str, data: Mapping[str, Any], read: Mapping[str, Any]) -> dict[str, Any]:
    """The ``families:`` section of one catalog file, with its derived source list."""
    section = data.get("families")
    if not section:
        return {"rules": (), "families": (), "lists": {}}
    sources = data["sources"]
    listed = fammod.parse_source_list(source_list(read, str(section["list"])))
    rules, families = [], []
    for entry in section["entries"]:
        name = str(entry["family"])
        if name not in listed.families:
            raise fail(file, f"family {name!r} is not in {section['list']}")
        path, members = listed.families[name]
        if not members:
            raise fail(file, f"family {name!r} has no members in {section['list']}")
        family = fammod.Family(
            name,
            str(entry["id"]),
            listed.vendor,
            path,
            checked_action(file, entry, entry["action"]),
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
                unless=compiled(file, entry, entry["unless"]) if entry.get("unless") else None,
                action=family.action,
                bucket=entry.get("bucket"),
                code=None,
                same_as=None,
                description=" ".join(str(entry.get("description", "")).split()),
                sources=cited(file, entry, sources),
                continued_by=None,
                **status_actions(file, entry),
            )
        )
    unnamed = set(listed.families) - {f.name for f in families}
    if unnamed:
        raise fail(file, f"family {sorted(unnamed)[0]!r} of {section['list']} has no entry")
    return {"rules": tuple(rules), "families": tuple(families), "lists": {listed.vendor: listed}}


def load_joins(file: str, data: Mapping[str, Any]) -> tuple[Join, ...]:
    sources = data["sources"]
    return tuple(
        Join(
            str(entry["id"]),
            str(entry["requires"]),
            compiled(file, entry, entry["head"]),
            compiled(file, entry, entry["tail"]),
            tuple(str(x) for x in entry.get("literals") or ()),
            cited(file, entry, sources),
        )
        for entry in data.get("joins") or ()
    )
