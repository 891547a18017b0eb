"""Slurm behind a thin adapter: read nodes, fence (drain with our reason), unfence (resume
a drain of ours), and keep the node's repair record on the node itself.

It drives the Slurm client tools on the bastion with a ``SLURM_CONF`` (``sinfo --json``
to read, ``scontrol update`` to write), as argv lists, never through a shell; node names
are checked first (:func:`check_node_name`). Measured against Debian's Slurm 22.05.8
(slurmctld and slurmd from apt, tests/integration/test_slurm_adapter.py), and run against
24.11.5 too: from 23.02 on, nodes are read with ``scontrol --json=<data_parser> show
node``, and every answer is parsed by the version it declares (adapters/slurmjson.py,
which also says what 24.11 does differently):

- Reading the cluster (:meth:`Slurm.nodes`, the controller's poll and the inventory):
  ``sinfo --json`` (openapi v0.0.38) carries every field used here: ``state``,
  ``state_flags`` (DRAIN, NOT_RESPONDING, REBOOT_REQUESTED, ...), ``reason``,
  ``reason_set_by_user``, ``reason_changed_at``, ``partitions``, ``boot_time``, ``gres``,
  ``features``, and the node's ``comment`` and ``extra``. It ignores ``-n`` in 22.05.
  With slurmctld down it exits 0 after about 9 s with ``"errors": [{"error": "Unspecified
  error"}]`` and an empty node list: the adapter treats any error there as a
  TemporaryError.
- Reading one node (:meth:`Slurm.node`: every write, the agent, the steps' waits) is the
  cheapest single-node request of the Slurm version (adapters/slurmread.py: ``sinfo -n N``
  in text, slurmctld's REQUEST_NODE_INFO_SINGLE, which has no boot time; measured on
  22.05 and 24.11).
  Each write is decided on such a read, passed in as ``current`` so it is not read twice.
- Fencing is ``scontrol update nodename=N state=drain reason="fleetmedic: <rung>:
  <finding>"`` (model/slurmreason.py). A drain that is not ours (any other reason: NHC,
  HyperPod, soperator, Slinky, a human, Slurm's own "Not responding") is refused with
  :class:`ForeignDrain`; we never overwrite another's reason. Unfencing is ``state=resume``
  and only when the reason is still ours at the moment we look.
- The repair record (what annotations hold on Kubernetes: rung, attempts, the in-flight
  step, evidence pointers) lives in the node's **Extra** field, as JSON
  ``{"fleetmedic": {key: value, ...}}``, other keys of a JSON Extra kept as they were. Why
  Extra: 22.05 has both Comment and Extra on nodes, both settable by ``scontrol update``
  and both in ``sinfo --json``, so the record needs no store of our own and any bastion
  that takes over reads it from slurmctld. Comment is where people write notes for
  people ("RMA 4711"); Extra is meant for machine-readable data (later Slurm matches
  jobs' ``--extra`` against it as JSON). An Extra that someone else filled with non-JSON
  is never overwritten (:class:`ForeignField`).
- Durability, measured: slurmctld keeps Extra, Comment and the drain in its
  StateSaveLocation and restores them after a SIGKILL and restart, and ``state=resume``
  keeps Extra. But slurmctld answers an update before it saves it: the first update after
  a quiet spell was on disk within 3-27 ms, while one that followed another save within a
  few seconds was saved only 4.4-4.8 s later, and a SIGKILL in between lost it (the drain
  and the record alike). So :meth:`Slurm.fence` writes the drain and the record in **one**
  ``scontrol update``: a crash keeps or loses them together, never a drain without its
  record. A caller about to do something it must not repeat (a reboot) after a record
  write waits until slurmctld has saved it (adapters/slurmsave.py reads its state file).
- A node whose slurmd goes away (a reboot by our role) keeps our drain and reason: measured,
  slurmctld marks it NOT_RESPONDING, then DOWN+DRAIN+NOT_RESPONDING after SlurmdTimeout,
  with the reason untouched ("Not responding" goes only on a node with no reason), and
  IDLE+DRAIN with our reason once slurmd registers again. So it stays ours to resume.
- Slurm has no compare-and-swap on a node: between our read and our write another tool
  can drain the node, and our update then replaces its reason. The window is one
  ``scontrol`` round trip (milliseconds); we re-check ownership right before each write.
- Jobs on a node: ``squeue -h -w N -o %i`` (text: ``squeue --json`` ignores ``-w`` in 22.05
  as ``sinfo --json`` ignores ``-n``). ``scontrol requeue <job>`` ends the job on a
  draining node at once, so the node is drained, and puts it back in the queue; Slurm holds
  a requeued batch job for about two minutes (its EligibleTime was 121 s after the
  requeue), so it starts again elsewhere only then.
- Rebooting through Slurm (:meth:`Slurm.reboot`): ``scontrol reboot ASAP nextstate=down
  reason=<ours> N``. The node goes DRAIN+REBOOT_REQUESTED, DOWN+DRAIN+REBOOT_ISSUED with
  ``<reason> : reboot issued``, and after the boot DOWN (no flags) with ``<reason> : reboot
  issued : reboot complete``, ours at every step; also from DOWN (a second reboot).
  22.05 refuses ``nextstate=drain``. kinds/slurmreboot.py waits for it.
- ``scontrol update state=resume`` on a node that is not drained fails (rc 1, "Invalid
  node state specified"): :meth:`Slurm.unfence` does not call it then. Extra accepted a
  70,000-character value; the record is capped at :data:`RECORD_MAX` all the same, the
  oldest attempts of its history dropped first.

Errors map into fleetmedic.errors: an unreachable slurmctld or a timeout is a
TemporaryError, an unknown node a NotFoundError, a missing tool or SLURM_CONF a
ConfigError, a refused write a PermanentError; each message is one line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetmedic.adapters import slurmjson, slurmread
from fleetmedic.adapters.slurmrecord import RECORD_KEY, RECORD_MAX, extra_doc, fitted
from fleetmedic.errors import (
    ConfigError,
    ForeignDrain,
    ForeignField,
    NotFoundError,
    PermanentError,
    TemporaryError,
    one_line,
)
from fleetmedic.model.slurmreason import DEFAULT_PREFIX, check_prefix, format_reason, is_ours

NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")  # a job, or one task of an array
DRAINED_STATES = ("idle", "down", "future")  # with DRAIN and no job left: drained


class BadNodeName(PermanentError):
    """A node name we refuse to hand to scontrol."""


def check_node_name(name: str) -> str:
    """``name`` if it is a plain Slurm node name, else BadNodeName (one line). No hostlist
    expressions (``n[1-3]``), lists (``n1,n2``), spaces or shell metacharacters: a name
    is one node, passed as one argv element."""
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise BadNodeName(
            f"refused Slurm node name {name!r}: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (one node, no hostlist expression)"
        )
    return name


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo --json`` shows it."""

    name: str
    state: str  # base state, lower case: idle, allocated, mixed, down, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, REBOOT_REQUESTED, ...
    reason: str
    reason_user: str
    reason_time: int | None  # epoch seconds when the reason was set
    partitions: tuple[str, ...]
    comment: str
    extra: str
    boot_time: int | None  # None: unknown (22.05's single-node read does not show it)
    address: str
    gres: str = ""  # "gpu:h100:8(S:0-1)", as slurm.conf or slurmd's detection names it
    features: str = ""  # the node's available features, comma-separated

    @property
    def drain(self) -> bool:
        """Drained or draining (the DRAIN flag)."""
        return "DRAIN" in self.flags

    @property
    def drained(self) -> bool:
        """Drained with no job left (sinfo's ``drained``; ``draining`` otherwise). Measured:
        after a requeue, slurmctld showed the node drained while squeue still listed the
        job as COMPLETING for a moment; before a reboot, check :meth:`Slurm.jobs` too. On
        a single-node read (:meth:`Slurm.node`) the base state can lag behind the jobs
        (adapters/slurmread.py): a hint there, true only from the whole read."""
        return self.drain and self.state in DRAINED_STATES

    @property
    def record(self) -> dict[str, str]:
        """Our repair record from Extra ({} when there is none or it is unreadable: the
        worst case is one more repair, never a missed one)."""
        doc = extra_doc(self.extra)
        rec = doc.get(RECORD_KEY) if isinstance(doc, dict) else None
        return {str(k): str(v) for k, v in rec.items()} if isinstance(rec, dict) else {}

    @classmethod
    def from_json(cls, n: Mapping[str, Any]) -> SlurmNode:
        return cls(
            name=str(n["name"]),
            state=str(n.get("state") or "").lower(),
            flags=frozenset(str(f) for f in n.get("state_flags") or ()),
            reason=str(n.get("reason") or ""),
            reason_user=str(n.get("reason_set_by_user") or ""),
            reason_time=int(n["reason_changed_at"]) if n.get("reason_changed_at") else None,
            partitions=tuple(str(p) for p in n.get("partitions") or ()),
            comment=str(n.get("comment") or ""),
            extra=str(n.get("extra") or ""),
            boot_time=int(n["boot_time"]) if n.get("boot_time") else None,
            address=str(n.get("address") or ""),
            gres=str(n.get("gres") or ""),
            features=str(n.get("features") or ""),
        )


class Slurm:
    """The Slurm client tools against one cluster (``slurm_conf``: its slurm.conf; None
    uses the environment's SLURM_CONF). ``prefix`` is the reason prefix we own."""

    def __init__(
        self,
        slurm_conf: str | Path | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 30.0,
        bin_dir: str | Path | None = None,
        reader: slurmread.Reader | None = None,
    ) -> None:
        self.prefix = check_prefix(prefix)
        self.timeout = timeout
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self._reader = reader  # None: chosen by the tools' version at the first read
        self._preferred: slurmread.Reader | None = None  # use_reader's, after that check
        self.calls: Counter[str] = Counter()  # tool runs, for the benches and tests
        self.env = dict(os.environ)
        if slurm_conf is not None:
            # scontrol retries a missing slurm.conf for 60 s before it says so: check first
            if not Path(slurm_conf).is_file():
                raise ConfigError(f"SLURM_CONF {slurm_conf}: no such file")
            self.env["SLURM_CONF"] = str(slurm_conf)
        self._version: tuple[int, int] | None = None
        self._parser: str | None = None  # the data_parser version found to work

    @property
    def data_parser(self) -> str | None:
        """The data_parser version the node list is read with, once found (None before the
        first whole read, and on 22.05, which has none)."""
        return self._parser

    def use_reader(self, reader: slurmread.Reader) -> None:
        """Read single nodes with ``reader`` (adapters/slurmlib.py), once the release is
        known to be one :func:`slurmread.reader_for` reads."""
        self._preferred = reader

    # -- running the tools ----------------------------------------------------------
    def _run(self, tool: str, *args: str, env: Mapping[str, str] | None = None) -> str:
        exe = str(self.bin_dir / tool) if self.bin_dir else tool
        what = f"{tool} {' '.join(args)}"[:200]
        self.calls[tool] += 1
        try:
            p = subprocess.run(
                [exe, *args],
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env={**self.env, **env} if env else self.env,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise ConfigError(f"{exe}: not found (install the Slurm client tools)") from None
        except subprocess.TimeoutExpired:
            raise TemporaryError(f"{what}: no answer in {self.timeout:.0f}s", delay=5) from None
        if p.returncode == 0:
            return p.stdout
        raise tool_error(what, p.stderr.strip() or p.stdout.strip() or f"rc {p.returncode}")

    # -- reading ----------------------------------------------------------------------
    def version(self) -> tuple[int, int]:
        """The Slurm release of the client tools, (major, minor): asked once."""
        if self._version is None:
            self._version = slurmjson.parse_version(self._run("scontrol", "--version"))
        return self._version

    def _node_json(self) -> list[dict[str, Any]]:
        """Every node, as JSON in openapi/v0.0.38's field names, read with the command this
        release has (adapters/slurmjson.py): ``sinfo --json`` on 22.05, ``scontrol
        --json=<data_parser> show node`` later, asking for the newest data_parser this Slurm
        ships of those we read (the one found is kept)."""
        version = self.version()
        if version < slurmjson.FIRST_DATA_PARSER_RELEASE:
            argv = slurmjson.list_argv(version)
            return slurmjson.node_list(self._run(*argv), " ".join(argv))
        tried = []
        for parser in (self._parser,) if self._parser else slurmjson.DATA_PARSERS:
            argv = slurmjson.list_argv(version, parser)
            try:
                text = self._run(*argv)
            except PermanentError as exc:
                if not slurmjson.missing_parser(str(exc)):
                    raise
                tried.append(parser)
                continue
            self._parser = parser
            return slurmjson.node_list(text, " ".join(argv))
        raise slurmjson.UnsupportedSlurmJson(
            f"scontrol show node --json: Slurm {version[0]}.{version[1]:02d} ships none of the "
            f"data_parser versions this fleetmedic reads ({', '.join(tried)})"
        )

    def nodes(self, partitions: Iterable[str] | None = None) -> list[SlurmNode]:
        """Every node (in any of ``partitions``, when given), sorted by name."""
        nodes = [SlurmNode.from_json(n) for n in self._node_json()]
        if partitions is not None:
            want = set(partitions)
            nodes = [n for n in nodes if want.intersection(n.partitions)]
        return sorted(nodes, key=lambda n: n.name)

    def node(self, name: str) -> SlurmNode:
        """One node, with the cheapest request this Slurm version answers
        (adapters/slurmread.py: one node and the partition table, not the whole cluster;
        ``boot_time`` is None, :meth:`node_full` has it. Not ``scontrol show node NAME``:
        on 24.11 too it loads the whole node table and picks the name out client-side)."""
        check_node_name(name)
        if self._reader is None:
            try:
                self._reader = slurmread.reader_for(self.version())
            except slurmread.UnreadableNode as exc:
                raise ConfigError(str(exc)) from None
        try:
            return SlurmNode.from_json((self._preferred or self._reader)(self._run, name))
        except slurmread.UnreadableNode as exc:
            raise TemporaryError(f"{exc}", delay=5) from None
        except LookupError:
            raise NotFoundError(f"Slurm node {name}: not found") from None

    def node_full(self, name: str) -> SlurmNode:
        """One node out of the whole cluster's ``sinfo --json`` (with its boot time)."""
        check_node_name(name)
        for n in self.nodes():
            if n.name == name:
                return n
        raise NotFoundError(f"Slurm node {name}: not found")

    def config(self) -> dict[str, str]:
        """slurmctld's running configuration (``scontrol show config``: one RPC), by key."""
        out = {}
        for line in self._run("scontrol", "show", "config").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and " " not in key.strip():
                out[key.strip()] = value.strip()
        return out

    # -- writing ----------------------------------------------------------------------
    def _refuse_foreign(self, node: SlurmNode, action: str) -> None:
        if node.reason and not is_ours(node.reason, self.prefix):
            raise ForeignDrain(
                f"Slurm node {node.name}: not {action}: its reason is not ours "
                f"({one_line(node.reason, 120)!r}, set by {node.reason_user or 'unknown'})"
            )

    def _extra_with(self, node: SlurmNode, values: Mapping[str, str | None]) -> str:
        doc = extra_doc(node.extra)
        if doc is None:
            raise ForeignField(
                f"Slurm node {node.name}: Extra holds something else "
                f"({one_line(node.extra, 80)!r}): our record is not written over it"
            )
        rec = node.record
        for key, value in values.items():
            if value is None:
                rec.pop(key, None)
            elif not isinstance(value, str):
                raise TypeError(f"record value for {key!r} must be a string")
            else:
                rec[key] = value
        if rec:
            doc[RECORD_KEY] = rec
        else:
            doc.pop(RECORD_KEY, None)
        return fitted(node.name, doc)

    def fence(
        self,
        name: str,
        rung: str,
        finding: str,
        record: Mapping[str, str | None] | None = None,
        *,
        current: SlurmNode | None = None,
    ) -> str:
        """Drain ``name`` with our reason for ``rung`` and ``finding``, and merge
        ``record`` into its repair record, in one update. A node whose reason is not ours
        is refused (ForeignDrain). Returns the reason written. ``current``: the node as the
        caller read it a moment ago (else it is read here); ownership is checked on it."""
        node = current if current is not None else self.node(name)
        self._refuse_foreign(node, "fenced")
        reason = format_reason(rung, finding, self.prefix)
        args = ["update", f"nodename={node.name}", "state=drain", f"reason={reason}"]
        if record:
            args.append(f"extra={self._extra_with(node, record)}")
        self._run("scontrol", *args)
        return reason

    def unfence(
        self,
        name: str,
        record: Mapping[str, str | None] | None = None,
        *,
        current: SlurmNode | None = None,
    ) -> bool:
        """Resume ``name`` when it is drained (or down) with our reason, merging ``record``
        into its repair record in the same update (so a crash keeps or loses both). False
        when there is nothing to resume; ForeignDrain when the reason is someone else's
        (never resumed). The rest of the record stays: the caller clears what it no longer
        needs. ``current``: as for :meth:`fence`."""
        node = current if current is not None else self.node(name)
        if not (node.drain or node.state == "down"):
            return False
        if not is_ours(node.reason, self.prefix):
            self._refuse_foreign(node, "resumed")
            return False  # down with no reason at all: not ours to resume either
        args = ["update", f"nodename={node.name}", "state=resume"]
        if record:
            args.append(f"extra={self._extra_with(node, record)}")
        self._run("scontrol", *args)
        return True

    def jobs(self, name: str) -> list[str]:
        """IDs of the jobs allocated to ``name`` (running, completing or suspended)."""
        check_node_name(name)
        out = self._run("squeue", "-h", "-w", name, "-o", "%i")
        return [j for j in out.split() if JOB_ID.fullmatch(j)]

    def requeue(self, name: str) -> list[str]:
        """Requeue every job on ``name`` (the ``requeue`` choice of a drain that waited
        too long); returns their IDs. A job that refuses (submitted with --no-requeue)
        raises PermanentError naming it; the ones before it are requeued."""
        done = []
        for job in self.jobs(name):
            self._run("scontrol", "requeue", job)
            done.append(job)
        return done

    def record(
        self,
        name: str,
        values: Mapping[str, str | None],
        *,
        current: SlurmNode | None = None,
    ) -> dict[str, str]:
        """Merge ``values`` into the node's repair record (None deletes a key); other
        keys of a JSON Extra are kept. Returns the record written. ``current``: as for
        :meth:`fence`."""
        node = current if current is not None else self.node(name)
        text = self._extra_with(node, values)
        self._run("scontrol", "update", f"nodename={node.name}", f"extra={text}")
        return SlurmNode.from_json({"name": node.name, "extra": text}).record

    def set_extra_key(self, name: str, key: str, value: Mapping[str, Any] | None) -> None:
        """Set (or, with None, remove) one top-level key of the node's Extra JSON beside
        our record (the controller's claim: model/controllerclaim.py); the rest of Extra
        is kept. An Extra that is not JSON is refused (ForeignField)."""
        if key == RECORD_KEY:
            raise ValueError(f"{key!r} is the record's key: use record()")
        node = self.node(name)
        doc = extra_doc(node.extra)
        if doc is None:
            raise ForeignField(
                f"Slurm node {node.name}: Extra holds something else "
                f"({one_line(node.extra, 80)!r}): not written over"
            )
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = dict(value)
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True) if doc else ""
        if len(text.encode()) > RECORD_MAX:
            raise PermanentError(f"Slurm node {node.name}: Extra would exceed {RECORD_MAX} bytes")
        self._run("scontrol", "update", f"nodename={node.name}", f"extra={text}")

    def reboot(self, name: str, reason: str, nextstate: str = "down") -> None:
        """Ask slurmctld to reboot ``name`` through the site's RebootProgram: ``scontrol
        reboot ASAP nextstate=<nextstate> reason=<reason> <name>``. ``reason`` must be ours
        (ValueError otherwise) and so must the node's current reason, if any
        (ForeignDrain). ``down`` (default) keeps the node out of service after the boot
        until :meth:`unfence`, so our checks run first; 22.05 refuses ``drain`` there."""
        if nextstate not in ("down", "resume"):
            raise ValueError(f"nextstate {nextstate!r}: Slurm 22.05 takes down or resume")
        if not is_ours(reason, self.prefix) or not reason.isprintable():
            raise ValueError(f"refused reboot reason {reason!r}: not one of ours")
        node = self.node(name)
        self._refuse_foreign(node, "rebooted")
        self._run(
            "scontrol", "reboot", "ASAP", f"nextstate={nextstate}", f"reason={reason}", node.name
        )


def tool_error(what: str, stderr: str) -> Exception:
    """The error a Slurm client (a tool, or the library: adapters/slurmlib.py) reported,
    as the fleetmedic error it means."""
    msg = f"{what}: {one_line(stderr, 200)}"
    low = stderr.lower()
    if "invalid node name" in low:
        return NotFoundError(msg)
    if any(
        s in low
        for s in (
            "unable to contact slurm controller",
            "socket timed out",
            "zero bytes were transmitted",
            "connection refused",
            "slurm_persist_conn",
        )
    ):
        return TemporaryError(msg, delay=5)
    if "configuration file" in low or "cannot stat file" in low:
        return ConfigError(msg)
    return PermanentError(msg)
