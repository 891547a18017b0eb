"""Kernel log: GPU faults of the current boot, classified by the scanner's catalog.

One pass over what the log holds now (``fleetmedic check``, the verify step).
The agent's live path is different: it *follows* the log with
:mod:`fleetmedic.scan` itself so a Xid 79 fences within a second, and runs
this check only when it wants a one-shot answer.

- Source: ``kernel.path`` (a file such as the test fleet's
  ``/var/lib/fleetmedic-test/kern.log``, or a ``/dev/kmsg``-like device);
  default ``/dev/kmsg``, which holds the current boot only.
- Current boot only: in a file, findings before the last kernel banner
  (``Linux version ...``) belong to an earlier boot and are ignored, so a
  node that was rebooted for a Xid 79 passes verify afterwards.
- A finding whose catalog action is ``reset`` or stronger is
  a problem carrying that action (definitive: the agent acts at once);
  ``monitor`` findings are listed in the evidence only.
- A log that cannot be read is ``unknown``, never ``ok``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Mapping

from fleetmedic.checks.base import CheckResult, ok, problem, unknown, with_duration
from fleetmedic.checks.config import CheckConfig
from fleetmedic.model.actions import FENCING_ACTIONS
from fleetmedic.scan import ACTION_RANK, Finding, Scanner, last_boot_offset, read_kmsg
from fleetmedic.scan.stream import KMSG

NAME = "kernel.log"
FENCING = FENCING_ACTIONS
MAX_EVIDENCE = 20  # findings kept in the evidence (the worst first)


def scan_current_boot(path: str) -> tuple[list[Finding], int]:
    """(findings of the last boot in ``path``, lines read). Raises OSError if unreadable."""
    scanner = Scanner()
    boot, current = scanner.boot_key, list[Finding]()
    with contextlib.ExitStack() as stack:
        if stat.S_ISCHR(os.stat(path).st_mode):
            findings = scanner.scan(read_kmsg(path))
        else:
            handle = stack.enter_context(open(path, "rb"))
            handle.seek(last_boot_offset(handle) or 0)
            findings = scanner.scan_binary(handle)
        for finding in findings:
            if scanner.boot_key != boot:  # a banner started a new boot: forget the old one
                boot, current = scanner.boot_key, []
            current.append(finding)
    if scanner.boot_key != boot:  # a banner after the last finding: a clean boot
        current = []
    return current, scanner.lines_read


def _describe(f: Finding) -> str:
    what = {"xid": f"Xid {f.code}", "sxid": f"SXid {f.code}"}.get(f.kind, f.kind)
    where = f" on {f.pci}" if f.pci else ""
    return f"{what}{where}: {f.message[:120]}"


def run(cfg: CheckConfig, env: Mapping[str, str] | None = None) -> list[CheckResult]:
    start = time.monotonic()
    path = cfg.kernel.path or KMSG
    try:
        findings, lines = scan_current_boot(path)
    except OSError as exc:
        return with_duration(
            [
                unknown(
                    NAME,
                    f"cannot read kernel log {path}: {exc.strerror or exc}",
                    "kernel",
                    source=path,
                )
            ],
            time.monotonic() - start,
        )
    findings.sort(key=lambda f: -ACTION_RANK[f.action])
    fencing = [f for f in findings if f.action in FENCING]
    evidence = {
        "source": path,
        "lines": lines,
        "findings": [f.to_json() for f in findings[:MAX_EVIDENCE]],
        "counts": {
            a: sum(f.action == a for f in findings) for a in sorted({f.action for f in findings})
        },
    }
    if fencing:
        worst = fencing[0]
        more = f" (+{len(fencing) - 1} more)" if len(fencing) > 1 else ""
        result = problem(
            NAME, f"{_describe(worst)}{more}", "kernel", action=worst.action, **evidence
        )
    else:
        monitor = f"; {len(findings)} finding(s) to monitor" if findings else ""
        result = ok(
            NAME,
            f"no GPU faults needing repair in this boot's kernel log{monitor}",
            "kernel",
            **evidence,
        )
    return with_duration([result], time.monotonic() - start)
