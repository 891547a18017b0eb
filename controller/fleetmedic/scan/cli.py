"""``fleetmedic scan``: classify GPU faults in kernel logs (files or stdin).

Exit status, as every command's (fleetmedic/clikit.py): 0 every input was read and no
finding reached ``--fail-on``; 1 a finding at or above ``--fail-on`` (default: any action
that fences a node); 2 usage or input error (a file that cannot be read, a binary file),
one line on stderr; 3 a dependency could not be reached (``--follow journal`` without
journalctl).

What only ``--follow``, ``--unknown`` or a table on a terminal needs is imported when
asked for: a scan of a file pays for none of it (start-up is a fifth of grep's whole
run at 1 GB, issue 39).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO, NoReturn, TextIO

import click

from fleetmedic.clikit import (
    CONTEXT,
    DURATION,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    epilog,
    fail,
    json_option,
)
from fleetmedic.errors import FleetmedicError, PermanentError
from fleetmedic.model.actions import ACTION_RANK, ACTIONS, FENCING_ACTIONS
from fleetmedic.scan import render
from fleetmedic.scan.dedup import DEFAULT_WINDOW, Dedup
from fleetmedic.scan.finding import Finding
from fleetmedic.scan.scanner import FABRIC, Scanner, is_fabric_log

NEVER = "never"
DEFAULT_FAIL_ON = FENCING_ACTIONS[0]
"""The mildest action that fences a node (``diagnose``)."""

BINARY_SNIFF = 8192
"""Bytes looked at to tell a binary file from a log: a NUL there is never in a kernel log."""


def _die(message: str, code: int = EXIT_USAGE) -> NoReturn:
    fail(message, code, prog="fleetmedic scan")


def _hint_if_terminal() -> None:
    """A person who typed ``fleetmedic scan`` alone gets told what it waits for."""
    if sys.stdin.isatty():
        click.echo(
            "fleetmedic scan: reading a kernel log from the terminal (end with Ctrl-D); "
            "give a FILE or pipe one in: dmesg | fleetmedic scan",
            err=True,
        )


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


def _open(name: str) -> BinaryIO:
    if name == "-":
        _hint_if_terminal()
        handle: BinaryIO = sys.stdin.buffer
        peek = getattr(handle, "peek", None)
        head = (
            peek(BINARY_SNIFF)[:BINARY_SNIFF] if peek is not None and not handle.isatty() else b""
        )
    else:
        try:
            handle = open(name, "rb")
            if os.path.isdir(name):
                handle.close()
                raise IsADirectoryError(21, "Is a directory")
            head = handle.read(BINARY_SNIFF) if os.path.isfile(name) else b""
            if head:
                handle.seek(0)
        except OSError as exc:
            _die(f"cannot read {name}: {exc.strerror or exc}")
    if _is_binary(head):
        _die(f"{'stdin' if name == '-' else name} is a binary file, not a kernel log")
    return handle


def _scanner(no_dedup: bool, window: float, boot_id: str | None, fabric: bool = True) -> Scanner:
    dedup: Dedup | bool = False if no_dedup else Dedup(window, replay_guard=boot_id is not None)
    return Scanner(boot_id=boot_id, dedup=dedup, fabric=fabric)


def _fabric(name: str) -> bool:
    """A Fabric Manager log (its own format or its unit's lines in the first 64 KB, or
    its file name), read with the Fabric Manager rules too; stdin always is."""
    if name == "-" or FABRIC in os.path.basename(name):
        return True
    try:
        with open(name, "rb") as f:
            return is_fabric_log(f.read(65536).decode("utf-8", "replace"))
    except OSError:
        return True


def _fails(findings: list[Finding], fail_on: str) -> bool:
    if fail_on == NEVER:
        return False
    return any(ACTION_RANK[f.action] >= ACTION_RANK[fail_on] for f in findings)


def _scan_inputs(
    names: list[str],
    no_dedup: bool,
    window: float,
    boot_id: str | None,
    totals: list[int],
    jobs: int,
) -> Iterator[tuple[str, Finding]]:
    handles = [(name, _open(name)) for name in names]  # fail before printing anything
    for name, handle in handles:
        scanner = _scanner(no_dedup, window, boot_id, _fabric(name))
        try:
            if handle is sys.stdin.buffer or jobs <= 1:
                findings = scanner.scan_binary(handle, mapped=True)
            else:
                findings = scanner.scan_path(name, jobs)
            for finding in findings:
                yield name, finding
        except OSError as exc:
            _die(f"cannot read {name}: {exc.strerror or exc}")
        finally:
            if handle is not sys.stdin.buffer:
                handle.close()
        totals.append(scanner.lines_read)


def _follow(
    name: str,
    no_dedup: bool,
    window: float,
    boot_id: str | None,
    quiet: Callable[[Finding], None],
) -> Iterator[tuple[str, Finding]]:
    """Findings of a followed log as they come. A multi-line record the log ends on (a
    Fabric Manager GPU NVL record) is ended once the log has been quiet for
    ``fmrecord.RECORD_WAIT`` and its finding goes to ``quiet`` at once: this generator
    cannot yield while the follower waits for the next line."""
    import signal
    import threading
    import time

    from fleetmedic.scan import stream
    from fleetmedic.scan.fmrecord import RECORD_WAIT

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scanner = _scanner(no_dedup, window, boot_id)
    last_line = time.monotonic()

    def idle() -> None:
        if time.monotonic() - last_line >= RECORD_WAIT:
            for finding in scanner.expire():
                quiet(finding)

    try:
        for line in stream.follow(name, stop=stop, idle=idle):
            last_line = time.monotonic()
            for finding in scanner.feed(line):
                yield name, finding
        for finding in scanner.flush():
            yield name, finding
    except PermanentError as exc:
        _die(str(exc), EXIT_UNREACHABLE if "cannot run" in str(exc) else EXIT_USAGE)
    except FleetmedicError as exc:
        _die(str(exc))


EPILOG = epilog(
    "fleetmedic scan --fail-on reboot /var/log/kern.log  # exit 1 if a reboot is due",
    "fleetmedic scan --unknown /var/log/kern.log  # driver errors the catalog does not know",
    codes=(EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_UNREACHABLE),
)


@click.command(
    "scan",
    short_help="Classify GPU faults in kernel logs (files or stdin).",
    epilog=EPILOG,
    context_settings=CONTEXT,
)
@click.argument("files", nargs=-1, metavar="[FILE]...")
@json_option("JSON Lines for machines: one object per finding.")
@click.option(
    "--fail-on",
    type=click.Choice([*ACTIONS[1:], NEVER]),
    default=DEFAULT_FAIL_ON,
    show_default=True,
    help="Exit 1 when a finding's action is this or stronger ('never': always 0).",
)
@click.option(
    "--unknown",
    "unknown_only",
    is_flag=True,
    help="List the driver lines no catalog rule knows (the safety net's), grouped by shape.",
)
@click.option(
    "--no-dedup", is_flag=True, help="Report every matching line, not one per (boot, PCI id, code)."
)
@click.option(
    "--window",
    type=DURATION,
    default=DEFAULT_WINDOW,
    show_default=True,
    help="How long a repeat of the same fault stays the same finding.",
)
@click.option(
    "--boot-id", default=None, help="Kernel boot id of the input (enables the replay guard)."
)
@click.option(
    "--follow",
    "-f",
    "follow",
    is_flag=True,
    help="Keep reading one FILE as it grows (or /dev/kmsg, or 'journal'); Ctrl-C stops.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=0,
    show_default="0 = one per CPU, at most 4",
    help="Processes that pre-filter a big file (256 MB or more); 1 keeps it in-process.",
)
def scan(
    files: tuple[str, ...],
    as_json: bool,
    fail_on: str,
    unknown_only: bool,
    no_dedup: bool,
    window: float,
    boot_id: str | None,
    follow: bool,
    jobs: int,
) -> None:
    """Classify GPU faults in kernel logs: NVIDIA Xid/SXid, amdgpu, NCCL/CUDA.

    Reads each FILE (stdin when none or '-') in any common format: dmesg
    (plain, -T, -x, iso), journalctl (short, short-iso), syslog, /dev/kmsg
    records. Prints one finding per fault with the action fleetmedic takes
    (none, monitor, diagnose, reset, reboot, reimage, manual) and NVIDIA's
    resolution
    bucket. A GPU driver line that no rule knows but that was logged as an
    error or says it failed is an 'unclassified' finding (monitor).
    Lines that are not GPU faults print nothing. Exits 1 when a finding's
    action is --fail-on or stronger, so scripts can use it as a check.
    """
    names = list(files) or ["-"]
    if follow and len(names) != 1:
        _die("--follow takes exactly one FILE")
    if unknown_only:
        if follow:
            _die("--unknown reads whole files; it does not take --follow")
        _list_unknown(names, as_json)
        return
    totals: list[int] = []
    jobs = jobs or min(4, os.cpu_count() or 1)
    out = sys.stdout
    seen: list[Finding] = []
    write = _row_writer(as_json, out, follow, seen)
    rows = (
        _follow(names[0], no_dedup, window, boot_id, write)
        if follow
        else _scan_inputs(names, no_dedup, window, boot_id, totals, jobs)
    )
    try:
        if as_json or follow:
            _stream_out(rows, write)
        else:
            collected = list(rows)
            seen = [f for _, f in collected]
            width = _terminal_width() if out.isatty() else None
            show_source = len(names) > 1
            render.write_table(
                [(name if show_source else None, f) for name, f in collected], out, width
            )
            click.echo(render.summary(seen, sum(totals), len(names)), err=not collected)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        _quiet_broken_pipe()
    sys.exit(EXIT_FINDINGS if _fails(seen, fail_on) else EXIT_OK)


def _row_writer(
    as_json: bool, out: TextIO, flush: bool, seen: list[Finding]
) -> Callable[[Finding], None]:
    """Write one finding as it comes (kept in ``seen``); flush it only when following a
    live log."""

    def write(finding: Finding) -> None:
        seen.append(finding)
        if as_json:
            out.write(render.json_line(finding) + "\n")
        else:
            render.write_table([(None, finding)], out)
        if flush:
            out.flush()

    return write


def _stream_out(rows: Iterator[tuple[str, Finding]], write: Callable[[Finding], None]) -> None:
    """Write findings as they come."""
    try:
        for _name, finding in rows:
            write(finding)
    except KeyboardInterrupt:
        pass


def _list_unknown(names: list[str], as_json: bool) -> None:
    """``--unknown``: the safety net's lines, grouped by shape, most frequent first."""
    from fleetmedic.scan import unknown

    handles = [(name, _open(name)) for name in names]
    groups = unknown.Groups()
    try:
        for name, handle in handles:
            scanner = Scanner(dedup=False, fabric=_fabric(name))
            try:
                groups.add_all(name, scanner.scan_binary(handle, mapped=True))
            except OSError as exc:
                _die(f"cannot read {name}: {exc.strerror or exc}")
            finally:
                if handle is not sys.stdin.buffer:
                    handle.close()
        if as_json:
            unknown.write_json(groups, sys.stdout)
        else:
            unknown.write_table(groups, sys.stdout, multi=len(names) > 1)
    except BrokenPipeError:
        _quiet_broken_pipe()


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size().columns


def _quiet_broken_pipe() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)
