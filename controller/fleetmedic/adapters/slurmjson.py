"""Slurm's node JSON, read by the version it declares.

Slurm changed its JSON after 22.05: the OpenAPI plugins of the client tools became
``data_parser`` plugins, a node's state became a list, times became objects, and
``scontrol show node --json`` appeared. Every answer says which plugin wrote it, in
``meta.plugin``; this module reads a node list only when it knows that plugin, and turns
every version into one shape (the field names of 22.05's openapi/v0.0.38, which
:class:`fleetmedic.adapters.slurm.SlurmNode` is built from). A version it does not know is
:class:`UnsupportedSlurmJson`, one line naming it, never a guess.

What each version looks like, as the real tools printed it here:

- **openapi/v0.0.38** (Slurm 22.05.8, ``sinfo --json``; ``meta.plugin.type``): ``state``
  a lower-case string (``idle``), ``state_flags`` a list (``DRAIN``, ``REBOOT_ISSUED``),
  times (``boot_time``, ``reason_changed_at``) plain epoch integers, 0 when unset.
  ``sinfo --json`` ignores ``-n`` and 22.05 has no ``scontrol show node --json``.
- **data_parser/v0.0.40, v0.0.41, v0.0.42** (Slurm 24.11.5 ships all three, v0.0.42 by
  default; ``meta.plugin.data_parser``): ``scontrol show node [NAME] --json`` honours the
  name; ``state`` a list whose first word is the base state (``["IDLE", "DRAIN"]``), times
  ``{"set": bool, "infinite": bool, "number": int}``; an unknown name answers rc 0 with no
  nodes and the warning "No nodes to dump". (24.11's ``sinfo --json`` prints sinfo's
  grouped lines, not one record per node: the node read is scontrol's.)
  **A resumed node keeps its last reason** in 24.11.5 (measured: ``state=resume`` leaves
  ``IDLE`` with the old reason, ``reason=`` does not clear it, and ``reason=X`` on an idle
  node sets one), where 22.05 clears it and ignores a reason on a node in service. A
  reason on a node in service is therefore a leftover, not a drain: the parser drops it
  (with its user and time), so a node NHC drained and resumed is not "someone else's"
  forever, and ours is not "still fenced". A reason counts while the node is out of
  service: DRAIN, FAIL or a reboot flag, or a base state other than idle, allocated,
  mixed or completing (down, unknown, future, ...).
- **data_parser/v0.0.43, v0.0.44, v0.0.45** (Slurm 26.05.5 ships v0.0.42 to v0.0.45,
  v0.0.45 by default): every field read here is as in v0.0.42 (measured: one drained node
  with our reason, record and a Comment, read with all four, parses to the same nodes;
  the nodes differ only in fields not read here). 26.05's release notes deprecate
  v0.0.42 and say it goes in 26.11, so the newest version is asked for first. 26.05
  **clears the reason on resume**, as 22.05 does (measured on 26.05.5: ``state=resume``
  leaves ``IDLE`` with no reason, and a ``reason=X`` on an idle node is logged but never
  shown); the in-service rule above is harmless there. Right after a resume 26.05 shows
  ``IDLE`` + ``NOT_RESPONDING`` until slurmd's next contact (under a second here): a
  flag that is not out of service, so nothing reads it as a drain.

:func:`list_argv` says which command reads every node for a Slurm release (from
``scontrol --version``), and :data:`DATA_PARSERS` which data_parser versions to ask for,
newest first: asking for one by name (``--json=v0.0.42``) keeps what we parse the same when
an upgrade changes the default (Slurm keeps each data_parser for about three releases).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleetmedic.errors import ConfigError, TemporaryError, one_line

OPENAPI_V38 = "openapi/v0.0.38"
DATA_PARSERS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40")
"""The data_parser versions read here, newest first (v0.0.40-42 checked against Slurm
24.11.5, v0.0.42-45 against 26.05.5). On 24.11 the first three are not there: scontrol
says so at once (no RPC) and the next is asked, once per adapter."""
FIRST_DATA_PARSER_RELEASE = (23, 2)
"""From this release on, nodes are read with ``scontrol show node --json``; before it with
``sinfo --json`` (22.05; 23.02 is the first with data_parser plugins)."""
NO_NODES = "No nodes to dump"  # 24.11's and 26.05's warning for a name they do not know
_VERSION = re.compile(r"\b(\d+)\.(\d+)(?:\.(\d+))?")


class UnsupportedSlurmJson(ConfigError):
    """JSON of a version (or a shape) this fleetmedic does not read: one line, at start."""


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) from ``scontrol --version`` (``slurm 22.05.8``, ``slurm-wlm 24.11.5``)."""
    m = _VERSION.search(text or "")
    if not m:
        raise UnsupportedSlurmJson(
            f"scontrol --version: no Slurm release in {one_line(text, 80)!r}"
        )
    return int(m.group(1)), int(m.group(2))


def list_argv(version: tuple[int, int], parser: str | None = None) -> tuple[str, ...]:
    """The command that reads every node of a Slurm ``version``: ``sinfo --json`` before
    23.02, else ``scontrol --json=<parser> show node`` (``parser`` one of
    :data:`DATA_PARSERS`, the newest by default)."""
    if version < FIRST_DATA_PARSER_RELEASE:
        return ("sinfo", "--json")
    return ("scontrol", f"--json={parser or DATA_PARSERS[0]}", "show", "node")


def missing_parser(stderr: str) -> bool:
    """scontrol's answer when asked for a data_parser this Slurm does not ship (24.11:
    ``load_plugins: unable to find plugin: data_parser/v0.0.43``)."""
    return "unable to find plugin: data_parser/" in stderr


def declared(doc: Mapping[str, Any]) -> str:
    """The plugin that wrote ``doc``: ``data_parser/v0.0.4x`` or ``openapi/v0.0.38``."""
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    if not isinstance(plugin, Mapping):
        return ""
    return str(plugin.get("data_parser") or plugin.get("type") or "")


def release(doc: Mapping[str, Any]) -> str:
    """The Slurm release that answered (``22.05.8``, ``24.11.5``), for messages."""
    meta = doc.get("meta") or {}
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    return str(slurm.get("release") or "unknown") if isinstance(slurm, Mapping) else "unknown"


def node_list(text: str, what: str) -> list[dict[str, Any]]:
    """The nodes of one JSON answer (``what`` names the command, for messages), each in
    openapi/v0.0.38's field names. Errors Slurm put in the answer are a TemporaryError
    (22.05 exits 0 with an empty list when slurmctld is down: never "no nodes"); an
    undeclared or unknown version is :class:`UnsupportedSlurmJson`."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise TemporaryError(f"{what}: unreadable answer: {one_line(exc)}") from None
    if not isinstance(doc, dict):
        raise TemporaryError(f"{what}: unreadable answer: not a JSON object")
    version = declared(doc)
    parse = PARSERS.get(version)
    if parse is None:
        known = ", ".join(PARSERS)
        raise UnsupportedSlurmJson(
            f"{what}: Slurm {release(doc)} answered in {version or 'an undeclared format'}, "
            f"which this fleetmedic does not read (it reads {known})"
        )
    errors = doc.get("errors") or []
    if errors:
        raise TemporaryError(f"{what}: {one_line(errors, 200)}", delay=5)
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise UnsupportedSlurmJson(f"{what}: {version} answer without a node list")
    out = []
    for raw in nodes:
        try:
            out.append(parse(raw))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            name = raw.get("name") if isinstance(raw, dict) else None
            raise UnsupportedSlurmJson(
                f"{what}: node {name!r} is not in {version}'s shape ({one_line(exc, 120)})"
            ) from None
    return out


def no_such_nodes(text: str) -> bool:
    """A data_parser answer that found no node by the name asked for."""
    try:
        warnings = json.loads(text).get("warnings") or []
    except (ValueError, AttributeError):
        return False
    return any(NO_NODES in str((w or {}).get("description", "")) for w in warnings)


# -- one parser per declared version ------------------------------------------------
def _v38(n: Mapping[str, Any]) -> dict[str, Any]:
    """openapi/v0.0.38 is the shape itself: the fields used, type-checked."""
    out = _common(n)
    out["state"] = _text(n, "state").lower()
    out["state_flags"] = _words(n, "state_flags")
    out["reason_changed_at"] = _epoch(n.get("reason_changed_at"), "reason_changed_at")
    out["boot_time"] = _epoch(n.get("boot_time"), "boot_time")
    return out


IN_SERVICE = frozenset({"idle", "allocated", "mixed", "completing"})
OUT_OF_SERVICE_FLAGS = frozenset({"DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED"})


def in_service(state: str, flags: Iterable[str]) -> bool:
    """A node taking jobs: a reason it shows is a leftover from before a resume (24.11
    keeps it; see the module doc), not a drain. ``state`` the base state in lower case,
    ``flags`` in upper case, as every reader here returns them."""
    return state in IN_SERVICE and not OUT_OF_SERVICE_FLAGS.intersection(flags)


def _data_parser(n: Mapping[str, Any]) -> dict[str, Any]:
    """data_parser/v0.0.40-45: the state list split into the base state and its flags,
    times unwrapped from their set/infinite/number objects, and the reason a node in
    service keeps from before its resume dropped (see the module doc)."""
    out = _common(n)
    words = _words(n, "state")
    out["state"] = words[0].lower() if words else ""
    out["state_flags"] = words[1:]
    out["reason_changed_at"] = _number(n.get("reason_changed_at"), "reason_changed_at")
    out["boot_time"] = _number(n.get("boot_time"), "boot_time")
    if in_service(out["state"], out["state_flags"]):
        out.update(reason="", reason_set_by_user="", reason_changed_at=0)
    return out


PARSERS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    OPENAPI_V38: _v38,
    **{f"data_parser/{v}": _data_parser for v in DATA_PARSERS},
}


def _common(n: Mapping[str, Any]) -> dict[str, Any]:
    name = n["name"]
    if not isinstance(name, str) or not name:
        raise ValueError("name must be a non-empty string")
    return {
        "name": name,
        "reason": _text(n, "reason"),
        "reason_set_by_user": _text(n, "reason_set_by_user"),
        "partitions": _words(n, "partitions"),
        "comment": _text(n, "comment"),
        "extra": _text(n, "extra"),
        "address": _text(n, "address"),
        "gres": _joined(n.get("gres")),
        "features": _joined(n.get("features")),
    }


def _joined(value: Any) -> str:
    """A node's GRES or features, comma-separated: a string in v0.0.38 and for GRES later,
    a list of strings for features in data_parser. Only a hint to the GPU vendor
    (model/gpuvendor.py): any other shape reads as none rather than failing the read."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(w, str) for w in value):
        return ",".join(value)
    return ""


def _text(n: Mapping[str, Any], key: str) -> str:
    value = n.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string, not {type(value).__name__}")
    return value


def _words(n: Mapping[str, Any], key: str) -> list[str]:
    value = n.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise TypeError(f"{key} must be a list of strings")
    return list(value)


def _epoch(value: Any, key: str) -> int:
    """v0.0.38's times: epoch seconds, 0 when unset."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} must be an integer")
    return value


def _number(value: Any, key: str) -> int:
    """data_parser's times: ``{"set": true, "infinite": false, "number": N}``; unset or
    infinite is 0 (what v0.0.38 says for "unset")."""
    if value is None:
        return 0
    if not isinstance(value, Mapping) or not isinstance(value.get("set"), bool):
        raise TypeError(f"{key} must be a set/infinite/number object")
    if not value["set"] or value.get("infinite"):
        return 0
    return _epoch(value.get("number"), key)
