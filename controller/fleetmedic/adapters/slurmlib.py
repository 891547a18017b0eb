"""Reading one Slurm node through the Slurm library, in a child process, with ``sinfo -n``
(adapters/slurmread.py) behind it: the agent's read when it fences.

Why: a fence is decided on a fresh read of the node (adapters/slurmdoc.py), and a
``sinfo -n`` process costs more than the write itself. Measured on 22.05.8 here
(bench/xid_to_drain_slurm.py), each after the same idle: a bare ``scontrol update`` is
4.4 ms to slurmctld's log line; ``sinfo -n`` and then that update, 10.3 ms; the same read
made in a process that already holds the library, then the update, 5.2 ms (the read
alone 1.5 ms). The library read is also one RPC (REQUEST_NODE_INFO_SINGLE) where
``sinfo`` adds the partition table.

How, and why it is safe:

- **The library the client tools link** (:func:`library_of`: ``ldd`` of ``sinfo``;
  Debian's ``libslurmfull``), so it is always the release the tools are. It is loaded in
  a child process (adapters/slurmlibchild.py), never in the agent: a crash or a hang in C
  costs one read, which ``sinfo`` then makes, and the child is started again at the next
  read. Three failed starts in a row and the agent reads with ``sinfo`` until it restarts.
  The child holds 13.5 MB resident (22.05; the same after 200 and 2,200 reads).
- **No release-matched structure is read.** The child uses seven functions of slurm.h's
  public API and the first three members of ``node_info_msg_t``, unchanged from 22.05 to
  26.05. The library formats the node as ``scontrol show node`` prints it, and
  :func:`parse_node_text` reads that text, which has the same shape on 22.05, 24.11 and
  26.05 (tests/integration/test_slurm_libread.py compares it with ``sinfo -n`` on each).
- **Checked against sinfo before it is trusted.** The first read of each child is made
  both ways and compared field by field (:data:`COMPARED`); any difference turns the
  library off for the process, with one line saying which field differed.
- **Anything it cannot read exactly goes to sinfo**: a reason, Comment or Extra that
  spans lines (the library prints a reason's lines apart and drops empty ones), a line it
  does not know, a key twice, any error slurmctld answers.

What this read does not give: the node's partitions (the partition table is the RPC it
saves; no caller of a single-node read uses them). It gives the boot time, which
``sinfo -n`` cannot.

One line of text a reader cannot tell apart: a Comment (set by a Slurm administrator)
holding a newline and then ``   Extra=...``, on a node with no Extra of its own, would
read as that Extra. A node with an Extra shows the key twice and goes to sinfo.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

from fleetmedic.adapters.slurm import tool_error
from fleetmedic.adapters.slurmjson import IN_SERVICE, in_service
from fleetmedic.adapters.slurmread import Run, UnreadableNode, sinfo_single
from fleetmedic.errors import TemporaryError

log = logging.getLogger(__name__)

COMPARED = (
    "name",
    "state",
    "state_flags",
    "reason",
    "reason_set_by_user",
    "reason_changed_at",
    "address",
    "gres",
    "features",
    "comment",
    "extra",
)
"""The fields of a node the library's first read must give as ``sinfo -n`` does."""
MAX_STARTS = 3
"""Failed starts (or crashed children) in a row before the library is left for good."""
READY_TIMEOUT = 10.0
"""Seconds for the child to load the library and answer ready."""

_WHOLE_LINE = ("AvailableFeatures", "ActiveFeatures", "Gres", "OS", "Reason", "Comment", "Extra")
"""Keys whose value is the rest of their line (it may hold spaces)."""
_ONCE = ("Reason", "Comment", "Extra")
_KEY = re.compile(r"^   (?P<key>[A-Za-z_]+)=(?P<value>.*)$")
_TOKEN = re.compile(r"(?P<key>[A-Za-z_]+)=(?P<value>\S*)")
_REASON = re.compile(r"^(?P<reason>.*) \[(?P<user>[^\[\]@]*)@(?P<time>\d+)\]$")
NULL = "(null)"


def library_of(sinfo: str = "sinfo") -> str:
    """The Slurm library ``sinfo`` (a name on PATH, or a path) is linked with, or "" when
    none is found (a wrapper script, a static build, no ldd)."""
    path = shutil.which(sinfo)
    ldd = shutil.which("ldd")
    if not path or not ldd:
        return ""
    try:
        out = subprocess.run(
            [ldd, path], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return library_in(out)


def library_in(ldd_output: str) -> str:
    """The Slurm library in ``ldd``'s output (``libslurmfull.so`` or ``libslurm.so.N``)."""
    m = re.search(r"=>\s*(\S*libslurm(?:full)?\.so\S*)", ldd_output)
    return m[1] if m else ""


def parse_node_text(text: str, name: str) -> dict[str, Any]:
    """The node ``name`` as ``slurm_sprint_node_table`` printed it (multi-line form, with
    ``SLURM_TIME_FORMAT=%s``), in the fields of :func:`fleetmedic.adapters.slurmread.
    parse_sinfo_single`. :class:`UnreadableNode` when the text cannot be read exactly."""
    lines = text.rstrip("\n").split("\n")
    head = {m["key"]: m["value"] for m in _TOKEN.finditer(lines[0])}
    if head.get("NodeName") != name:
        raise UnreadableNode(f"libslurm: answered for {head.get('NodeName')!r}, not {name!r}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if not line.strip():
            continue  # (24.11 prints an empty line before the reason)
        m = _KEY.match(line)
        if not m:
            raise UnreadableNode(f"libslurm {name}: a line it cannot read ({line[:60]!r})")
        key = m["key"]
        if key in _WHOLE_LINE:
            if key in _ONCE and key in fields:
                raise UnreadableNode(f"libslurm {name}: {key} twice")
            fields[key] = m["value"]
        else:
            for t in _TOKEN.finditer(line):
                fields.setdefault(t["key"], t["value"])
    state = fields.get("State", "").lower()
    base, *rest = state.split("+")
    flags = [f.upper() for f in rest]
    if not base:
        raise UnreadableNode(f"libslurm {name}: no State")
    reason, user, stamp = fields.get("Reason", ""), "", None
    told = _REASON.match(reason)
    if told:
        reason, user, stamp = told["reason"], told["user"], int(told["time"])
    if in_service(base, flags):
        reason, user, stamp = "", "", None  # one left from before a resume (24.11)
    boot = fields.get("BootTime", "")
    return {
        "name": name,
        "state": base,
        "state_flags": flags,
        "reason": reason,
        "reason_set_by_user": user,
        "reason_changed_at": stamp,
        "address": _unset(fields.get("NodeAddr", "")),
        "partitions": [],
        "gres": _unset(fields.get("Gres", "")),
        "features": _unset(fields.get("AvailableFeatures", "")),
        "comment": _unset(fields.get("Comment", "")),
        "extra": _unset(fields.get("Extra", "")),
        "boot_time": int(boot) if boot.isdigit() else None,
    }


def _unset(value: str) -> str:
    return "" if value == NULL else value


def differences(ours: Mapping[str, Any], tools: Mapping[str, Any]) -> list[str]:
    """The :data:`COMPARED` fields in which the library's read and sinfo's differ. Base
    states of a node in service (idle, mixed, allocated, completing) count as one: the
    single-node read's allocation is stale anyway, and nothing decides on it
    (adapters/slurmread.py)."""
    return [k for k in COMPARED if _compared(k, ours) != _compared(k, tools)]


def _compared(key: str, node: Mapping[str, Any]) -> Any:
    value = node.get(key)
    return "in service" if key == "state" and value in IN_SERVICE else value


class ChildFailed(RuntimeError):
    """The child did not answer as it should: it is stopped, and sinfo reads."""


class LibraryReader:
    """A :class:`fleetmedic.adapters.slurmread.Reader` that reads through the Slurm
    library in a child process and through ``sinfo -n`` whenever it cannot (module doc).
    ``env`` holds ``SLURM_CONF``; ``timeout`` bounds one answer of the child."""

    def __init__(
        self, library: str, env: Mapping[str, str], timeout: float, python: str = sys.executable
    ) -> None:
        self.library, self.timeout, self.python = library, timeout, python
        self.env = {**env, "SLURM_TIME_FORMAT": "%s"}
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self._checked = False  # this child's first read was compared with sinfo's
        self._failures = 0  # failed starts or crashes in a row
        self.off = ""  # why the library is no longer used ("" while it is)
        self.reads = {"library": 0, "sinfo": 0}  # for the benches and tests

    def __call__(self, run: Run, name: str) -> dict[str, Any]:
        with self._lock:
            if not self.off:
                try:
                    node = self._read(name)
                except UnreadableNode as exc:
                    log.debug("%s; reading it with sinfo", exc)
                except ChildFailed as exc:
                    self._failed(str(exc))
                else:
                    if self._checked:
                        self.reads["library"] += 1
                        return node
                    return self._check(run, name, node)
            self.reads["sinfo"] += 1
            return sinfo_single(run, name)

    def close(self) -> None:
        with self._lock:
            self._stop()

    # -- the child ----------------------------------------------------------------------
    def _read(self, name: str) -> dict[str, Any]:
        if self._child is None:
            self._start()
        child = self._child
        assert child is not None and child.stdin is not None
        try:
            child.stdin.write(name + "\n")
            child.stdin.flush()
        except OSError as exc:
            raise ChildFailed(f"the library's process took no request: {exc}") from None
        answer = self._answer(self.timeout)
        if "error" in answer:
            err = tool_error(f"libslurm read of {name}", str(answer["error"]))
            if isinstance(err, TemporaryError):
                raise err  # (slurmctld unreachable: sinfo would wait as long again)
            raise UnreadableNode(f"libslurm {name}: {answer['error']}")  # sinfo says it
        if answer.get("text") is None:
            raise UnreadableNode(f"libslurm {name}: no such node")
        return parse_node_text(str(answer["text"]), name)

    def _start(self) -> None:
        self._checked = False
        try:
            self._child = subprocess.Popen(
                [self.python, "-m", "fleetmedic.adapters.slurmlibchild", self.library],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**self.env, "PYTHONPATH": _package_root(self.env)},
            )
        except OSError as exc:
            raise ChildFailed(f"{self.python}: {exc}") from None
        hello = self._answer(READY_TIMEOUT)
        if "ready" not in hello:
            raise ChildFailed(f"{self.library}: {hello.get('error') or 'not ready'}")
        log.info(
            "reading Slurm nodes through %s (pid %s; with sinfo -n where it cannot)",
            self.library,
            hello.get("pid"),
        )

    def _answer(self, timeout: float) -> dict[str, Any]:
        child = self._child
        assert child is not None and child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], timeout)
        line = child.stdout.readline() if ready else ""
        if not line:
            why = f"no answer in {timeout:g}s" if not ready else f"exited {child.poll()}"
            raise ChildFailed(f"the library's process: {why}")
        try:
            answer = json.loads(line)
        except ValueError:
            raise ChildFailed(f"the library's process said {line[:80]!r}") from None
        if not isinstance(answer, dict):
            raise ChildFailed(f"the library's process said {line[:80]!r}")
        return answer

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:  # (a request left in the buffer of a pipe to a dead child)
                pass

    def _failed(self, why: str) -> None:
        self._stop()
        self._failures += 1
        if self._failures >= MAX_STARTS:
            self.off = f"{why} ({self._failures} times in a row)"
            log.warning("%s: reading Slurm nodes with sinfo from now on", self.off)
        else:
            log.warning("%s: this read with sinfo; the next starts it again", why)

    def _check(self, run: Run, name: str, node: dict[str, Any]) -> dict[str, Any]:
        """The child's first read, against sinfo's: equal, the library is trusted."""
        tools = sinfo_single(run, name)
        self.reads["sinfo"] += 1
        differ = differences(node, tools)
        if differ:
            self.off = f"the library's read of {name} differs from sinfo's in {', '.join(differ)}"
            log.warning("%s: reading Slurm nodes with sinfo from now on", self.off)
            self._stop()
            return tools
        self._checked, self._failures = True, 0
        return node


def _package_root(env: Mapping[str, str]) -> str:
    """PYTHONPATH for the child: this fleetmedic's own directory first (it may not be
    installed where the child's Python looks)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rest = env.get("PYTHONPATH", "")
    return f"{here}{os.pathsep}{rest}" if rest else here
