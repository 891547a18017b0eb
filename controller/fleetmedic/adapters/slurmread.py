"""Reading one Slurm node: the cheapest request each Slurm version answers, behind one seam.

:func:`reader_for` picks, by the client tools' version, a function ``read(run, name)`` that
returns one node as a dict of the shape of ``sinfo --json``'s nodes (22.05, openapi
v0.0.38: ``name``, ``state``, ``state_flags``, ``reason``, ``reason_set_by_user``,
``reason_changed_at``, ``address``, ``partitions``, ``gres``, ``features``, ``comment``,
``extra``, ``boot_time``), so :meth:`~fleetmedic.adapters.slurm.SlurmNode.from_json`
reads every version's answer. ``run(tool, *args, env=...)`` runs one client tool and
returns its stdout. A release that needs a reader of its own gets it here.

What each candidate costs slurmctld, read from the Slurm sources (22.05.8 to 25.05.8) and
measured with sdiag on 22.05.8 (bench/slurm_agents.py prints the figures):

- ``sinfo --json`` (22.05, 23.02): the whole node table (REQUEST_NODE_INFO) and the
  partition table, whatever ``-n`` says (22.05 dumps before it looks at ``-n``).
- ``scontrol show node N`` (text, and ``--json`` where it exists, 23.02 to 25.05): the whole
  node table too (``scontrol_load_nodes`` calls ``slurm_load_node``; it filters by name on
  the client), and the partition table.
- ``sinfo -n N`` with one plain name: REQUEST_NODE_INFO_SINGLE (slurmctld packs one node)
  and the partition table (REQUEST_PARTITION_INFO; a few partitions, small): two RPCs whose
  cost does not grow with the node count. In 23.11 and later ``sinfo --json -n N`` takes
  the same path, but its JSON is sinfo's grouped lines, not a node record.

Measured with sdiag on 24.11.5 and 26.05.5 too (tests/integration/test_slurm_agent.py
counts them on every release): ``sinfo -n N`` (text, and ``--json``) is
REQUEST_NODE_INFO_SINGLE and REQUEST_PARTITION_INFO, while ``scontrol show node N``, with
or without ``--json``, is REQUEST_NODE_INFO, the whole node table (and the partitions).
26.05 prints the fields below as 24.11 does (measured: the same words for no reason, no
user, no time and no Extra).

One thing that read does not refresh: the node's allocated CPUs, from which sinfo prints
``mixed`` or ``allocated``. slurmctld's REQUEST_NODE_INFO_SINGLE handler leaves the
refresh out (``select_g_select_nodeinfo_set_all()`` under ``#if 0`` in proc_req.c,
24.11.6, "too slow for our use here"); the whole-table read does it. Measured on 24.11.5:
after a requeue, ``sinfo -n`` showed ``mixed+drain`` for over a minute while ``scontrol
show node`` showed IDLE+DRAIN with CPUAlloc=0, until a whole read. So whether a node is
empty is asked of ``squeue`` (Slurm.jobs) or the whole read, never of this base state;
DRAIN, the reason and Extra are current.

So on every release the single-node read is ``sinfo -n N -N -h -O <fields>``
(:func:`sinfo_single`). Its text has every field we read except the **boot time**, which
no single-node read of the client tools shows: callers that need it (the reboot rung) take
it from the controller's own periodic full read. A reason on a node in service is dropped,
as the JSON readers drop it (adapters/slurmjson.py: 24.11 keeps a resumed node's last
reason; 22.05 and 26.05 never show one there). The fields are printed whole (``:0``), separated by
ASCII unit separators, each line ended by a record separator (a node in two partitions
is two lines), with Extra last: so a reason or an Extra with spaces, ``|`` or newlines
reads back as it is. The reason's time comes as epoch seconds (``SLURM_TIME_FORMAT=%s``).
sinfo prints ``none`` for no reason, ``(null)`` for no Extra, Gres, Features or Comment,
and ``Unknown`` for no reason user or time; those read as empty. A reason someone set to
the word ``none`` is told apart by its time (slurmctld stamps every reason it sets and
forgets the time with the reason; not by its user: a node defined in slurm.conf that
never had a reason shows ``root(0)``, measured on powered-down CLOUD nodes); an Extra that
is literally ``(null)`` reads as empty.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from fleetmedic.adapters.slurmjson import in_service

Run = Callable[..., str]
"""``run(tool, *args, env=None)``: stdout of one Slurm client tool (raises on failure)."""

SEP = "\x1f"  # ASCII unit separator: between fields
END = "\x1e"  # ASCII record separator: after each line's last field (Extra)
FIELDS = (
    ("NodeList", "name"),
    ("StateComplete", "state"),
    ("Reason", "reason"),
    ("UserLong", "reason_set_by_user"),
    ("Timestamp", "reason_changed_at"),
    ("NodeAddr", "address"),
    ("PartitionName", "partitions"),
    ("Gres", "gres"),
    ("Features", "features"),
    ("Comment", "comment"),
    ("Extra", "extra"),
)
NULL = "(null)"  # glibc's printf of a NULL string: sinfo's word for an unset field
_USER = re.compile(r"^(?P<name>.*)\((?P<uid>\d+)\)$")


class Reader(Protocol):
    def __call__(self, run: Run, name: str) -> dict[str, Any]: ...


class UnreadableNode(ValueError):
    """The tool answered something this reader does not understand."""


def sinfo_single_argv(name: str) -> list[str]:
    fmt = ",".join(
        f"{field}:0{END if i == len(FIELDS) - 1 else SEP}" for i, (field, _) in enumerate(FIELDS)
    )
    return ["-n", name, "-N", "-h", "-O", fmt]


def sinfo_single(run: Run, name: str) -> dict[str, Any]:
    """One node through REQUEST_NODE_INFO_SINGLE (see the module doc); ``boot_time`` None.
    ``name`` must already be checked (one plain node name)."""
    out = run("sinfo", *sinfo_single_argv(name), env={"SLURM_TIME_FORMAT": "%s"})
    return parse_sinfo_single(out, name)


def parse_sinfo_single(text: str, name: str) -> dict[str, Any]:
    """The node ``name`` from :func:`sinfo_single`'s output (one line per partition)."""
    rows = [r.lstrip("\n") for r in text.split(END)]
    rows = [r for r in rows if r.strip()]
    if not rows:  # (sinfo -n answers an unknown name with nothing, and exit status 0)
        raise LookupError(name)
    seen: list[dict[str, str]] = []
    for row in rows:
        cells = row.split(SEP, len(FIELDS) - 1)
        if len(cells) != len(FIELDS):
            raise UnreadableNode(f"sinfo -n {name}: {len(cells)} fields, {len(FIELDS)} expected")
        seen.append({key: cell for (_, key), cell in zip(FIELDS, cells, strict=True)})
    first = seen[0]
    if first["name"] != name:
        raise UnreadableNode(f"sinfo -n {name}: answered for {first['name']!r}")
    base, *rest = first["state"].split("+")
    flags = [f.upper() for f in rest]
    if not base or base == "n/a":
        raise UnreadableNode(f"sinfo -n {name}: no state ({first['state']!r})")
    user = _USER.match(first["reason_set_by_user"])
    stamp = first["reason_changed_at"]
    reason = first["reason"]
    if (reason == "none" and not stamp.isdigit()) or in_service(base, flags):
        reason, user, stamp = "", None, ""  # none, or one left from before a resume
    partitions = [p for p in dict.fromkeys(r["partitions"] for r in seen) if p and p != "n/a"]
    return {
        "name": first["name"],
        "state": base,
        "state_flags": flags,
        "reason": reason,
        "reason_set_by_user": user["name"] if user else "",
        "reason_changed_at": int(stamp) if stamp.isdigit() else None,
        "address": _unset(first["address"]),
        "partitions": partitions,
        "gres": _unset(first["gres"]),
        "features": _unset(first["features"]),
        "comment": _unset(first["comment"]),
        "extra": _unset(first["extra"]),
        "boot_time": None,
    }


def _unset(value: str) -> str:
    return "" if value == NULL else value


def sinfo_json_whole(run: Run, name: str) -> dict[str, Any]:
    """The old path, kept to compare against (bench/slurm_agents.py): the whole cluster's
    ``sinfo --json``, filtered here. Not chosen for any version."""
    try:
        data = json.loads(run("sinfo", "--json"))
        errors, nodes = data.get("errors") or [], data["nodes"]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnreadableNode(f"sinfo --json: unreadable answer: {exc}") from None
    if errors:
        raise UnreadableNode(f"sinfo --json: {str(errors)[:200]}")
    for n in nodes:
        if n.get("name") == name:
            return n
    raise LookupError(name)


def parse_version(text: str) -> tuple[int, int]:
    """``slurm 22.05.8`` (what ``sinfo --version`` prints) as (22, 5)."""
    m = re.search(r"(\d+)\.(\d+)", text)
    if not m:
        raise UnreadableNode(f"unreadable Slurm version {text.strip()[:60]!r}")
    return int(m[1]), int(m[2])


def reader_for(version: tuple[int, int]) -> Reader:
    """The single-node read of a Slurm version. 22.05 and later: :func:`sinfo_single`
    (the text fields used exist from 22.05 on, Extra among them; earlier versions have no
    Extra to keep our record in)."""
    if version < (22, 5):
        raise UnreadableNode(
            f"Slurm {version[0]}.{version[1]:02d}: fleetmedic needs 22.05 or later "
            "(nodes have no Extra field before it)"
        )
    return sinfo_single
