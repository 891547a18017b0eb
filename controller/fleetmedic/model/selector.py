"""Kubernetes label selectors, matched on the client side.

The API server matches selectors in list calls, but a profile's selector must be
matched against Nodes the controller already holds (one list of the whole pool, then
each node to its profile). The Kubernetes Python client has no matcher of its own, so
this is a small one of the same grammar as ``kubectl get -l``:

    key=value  key==value  key!=value  key in (a,b)  key notin (a,b)  key  !key

Requirements are ANDed; a ``!=`` or ``notin`` also matches nodes without the label, as
the API server does.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclasses.dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in | notin | exists | !exists
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


@dataclasses.dataclass(frozen=True)
class Selector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return self.text


def parse(text: str) -> Selector:
    """Parse ``text``; ValueError naming the bad part. An empty selector matches everything."""
    reqs = [_requirement(part) for part in _split(text) if part.strip()]
    return Selector(text.strip(), tuple(reqs))


def _split(text: str) -> list[str]:
    """Split on the commas outside ``( )``."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _requirement(part: str) -> Requirement:
    if m := _SET.match(part):
        values = [v.strip() for v in m.group(3).split(",")]
        if not values or not all(re.fullmatch(_VALUE, v) and v for v in values):
            raise ValueError(f"bad label selector part {part.strip()!r}: bad value list")
        return Requirement(m.group(1), m.group(2), frozenset(values))
    if m := _CMP.match(part):
        op = "notin" if m.group(2) == "!=" else "in"
        return Requirement(m.group(1), op, frozenset({m.group(3)}))
    if m := _EXISTS.match(part):
        return Requirement(m.group(2), "!exists" if m.group(1) else "exists")
    raise ValueError(f"bad label selector part {part.strip()!r}")
