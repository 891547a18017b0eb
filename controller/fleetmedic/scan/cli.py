"""``fleetmedic scan``: classify GPU faults in kernel logs (files or stdin).

Exit status: 0 when every input was read (findings or not), 2 when an input
cannot be read (one line on stderr: ``fleetmedic scan: error: ...``).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO, TextIO

import click

from fleetmedic.errors import FleetmedicError
from fleetmedic.scan import render, stream
from fleetmedic.scan.dedup import DEFAULT_WINDOW, Dedup
from fleetmedic.scan.finding import Finding
from fleetmedic.scan.scanner import Scanner

EXIT_UNREADABLE = 2


def _die(message: str) -> None:
    click.echo(f"fleetmedic scan: error: {' '.join(message.split())}", err=True)
    sys.exit(EXIT_UNREADABLE)


def _open(name: str) -> BinaryIO:
    if name == "-":
        return sys.stdin.buffer
    try:
        handle = open(name, "rb")
        if os.path.isdir(name):
            handle.close()
            raise IsADirectoryError(21, "Is a directory")
        return handle
    except OSError as exc:
        _die(f"cannot read {name}: {exc.strerror or exc}")
        raise  # unreachable


def _scanner(no_dedup: bool, window: float, boot_id: str | None) -> Scanner:
    dedup: Dedup | bool = False if no_dedup else Dedup(window, replay_guard=boot_id is not None)
    return Scanner(boot_id=boot_id, dedup=dedup)


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
        scanner = _scanner(no_dedup, window, boot_id)
        try:
            if handle is sys.stdin.buffer or jobs <= 1:
                findings = scanner.scan_binary(handle)
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
    name: str, no_dedup: bool, window: float, boot_id: str | None
) -> Iterator[tuple[str, Finding]]:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scanner = _scanner(no_dedup, window, boot_id)
    try:
        lines = stream.follow(name, stop=stop)
        for finding in scanner.scan(lines):
            yield name, finding
    except FleetmedicError as exc:
        _die(str(exc))


@click.command("scan", short_help="Classify GPU faults in kernel logs (files or stdin).")
@click.argument("files", nargs=-1, metavar="[FILE]...")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for JSON Lines (one object per finding).",
)
@click.option(
    "--no-dedup", is_flag=True, help="Report every matching line, not one per (boot, PCI id, code)."
)
@click.option(
    "--window",
    type=click.FloatRange(min=0),
    default=DEFAULT_WINDOW,
    show_default=True,
    help="Seconds within which a repeat of the same fault is the same finding.",
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
    fmt: str,
    no_dedup: bool,
    window: float,
    boot_id: str | None,
    follow: bool,
    jobs: int,
) -> None:
    """Classify GPU faults in kernel logs: NVIDIA Xid/SXid, amdgpu, NCCL/CUDA.

    Reads each FILE (stdin when none or '-') in any common format: dmesg
    (plain, -T, iso), journalctl (short, short-iso), syslog, /dev/kmsg
    records. Prints one finding per fault with the action fleetmedic takes
    (none, monitor, reboot, reimage, manual) and NVIDIA's resolution bucket.
    Lines that are not GPU faults print nothing.

    Exit status: 0 when the input was read, 2 when it could not be.
    """
    names = list(files) or ["-"]
    if follow and len(names) != 1:
        _die("--follow takes exactly one FILE")
    totals: list[int] = []
    jobs = jobs or min(4, os.cpu_count() or 1)
    rows = (
        _follow(names[0], no_dedup, window, boot_id)
        if follow
        else _scan_inputs(names, no_dedup, window, boot_id, totals, jobs)
    )
    out = sys.stdout
    try:
        if fmt == "json" or follow:
            _stream_out(rows, fmt, out, flush=follow)
            return
        collected = list(rows)
        width = shutil.get_terminal_size().columns if out.isatty() else None
        show_source = len(names) > 1
        render.write_table(
            [(name if show_source else None, f) for name, f in collected], out, width
        )
        click.echo(
            render.summary([f for _, f in collected], sum(totals), len(names)), err=not collected
        )
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        _quiet_broken_pipe()


def _stream_out(rows: Iterator[tuple[str, Finding]], fmt: str, out: TextIO, flush: bool) -> None:
    """Write findings as they come; flush each one only when following a live log."""
    try:
        for _name, finding in rows:
            if fmt == "json":
                out.write(render.json_line(finding) + "\n")
            else:
                render.write_table([(None, finding)], out)
            if flush:
                out.flush()
    except KeyboardInterrupt:
        return


def _quiet_broken_pipe() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)
