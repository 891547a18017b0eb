"""Run an ansible-runner job on a Receptor execution node, as AWX does.

``ansible-runner transmit`` packs the job (private data dir, inventory, playbook, env),
the controller's own Receptor node submits it as a signed work unit to the execution
node (``ansible-runner worker`` runs it there), and its results stream back while it
runs, through ``ansible-runner process``, into the same artifacts a local run writes.
The run ends when the stream does (the worker's ``eof`` line), not when the unit's state
next says so. The unit is then released, on the execution node too, in the background
(the outcome does not wait on it; :func:`drain` waits for releases still under way).
What stays slower than a local run is Receptor's, and for a short run it is a floor no
client of stock 1.4.4 can lower (measured with ``bench/receptor_overhead.py --trace``;
the issue-32 report has the table). Our node starts copying a remote unit's output only
on a tick of its 1 s stdout poll (``monitorRemoteStdout``) after its 1 s status poll
(``monitorRemoteStatus``) has seen the remote output grow. Both start when the unit does;
the first status read comes a dial later, before the execution node can show any output
(its command runner writes the output's size every 250 ms, and ``ansible-runner worker``
takes 0.3-0.6 s to print its first line), and every later one lands just after
that second's stdout tick. So the copy starts 2 s after submit at the earliest (3 s when
the worker's first line is later than about 0.75 s), then the execution node's ``work
results`` waits 250 ms before its first read (ours follows the copy every 250 ms, read
in four phases by :class:`_Merged`): a play that ends within 2 s of submit is seen
about 2.3 s after it. Nothing the controller
sends changes those ticks (``work submit`` takes no poll setting; the work type, TTL and
params do not touch the copy), so only ``direct_results`` is faster.

While the results stream, one control-socket connection per run watches the execution
node's route: a live stream alone cannot tell a long task from a dead node (Receptor
keeps it open while the remote node is silent). Given up (:class:`Lost`, the outcome is
unknown) when the execution node has had no route for ``lost_after`` or the stream has
not ended ``grace`` after the job's timeout; a given-up unit is cancelled and
force-released in the background: our record of it goes, its directory on the execution
node stays (a known gap: Receptor releases a remote unit only through a node that
answers). A unit that ended ``Failed`` is not lost: the worker exits non-zero when the
playbook fails, and its stream still holds every event.

With ``direct_results`` (opt-in) the stream comes straight from the execution node
(adapters/receptor_direct.py: a ``connect`` session to its control service, the request
signed with the work-signing key), which spares the ~1 s our node's copy lags behind;
everything else (route watch, limits, cancel, release) is the same, and any failure to
open it falls back to our node's copy. The release then also waits for the direct stream
to end from the execution node's side and for our node's own copy to be whole (read to
the worker's ``eof``), so neither stream is cut with data in flight. With stock 1.4.4 the
config accepts it only at ``max_in_flight: 1`` (ReceptorConfig.direct_results: direct
reads beside other units in flight to the node wedged its link within seconds).

Stock Receptor v1.4.4 (the only release the Go module proxy serves, and what AWX ships)
wedges a whole mesh link for good when a packet reaches a dialed connection it has
closed, and each remote unit makes the controller's node dial its execution node 3-4
times: with many units in flight that becomes likely (the fix, not released:
tests/receptor/patches). So a run adds no dial of its own beyond submit (results come
through our node, the release is one ``force-release``) and never cuts a stream with
data in flight (the release waits for our node to see the unit end). A wedged link
still ends runs :class:`Lost` with no route, and the warning says how to tell and clear
it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import ansible_runner
from receptorctl.socket_interface import ReceptorControl

from fleetmedic.adapters import receptor_direct
from fleetmedic.errors import TemporaryError, one_line
from fleetmedic.model.config import ReceptorConfig

log = logging.getLogger(__name__)

_SETTLE = 10.0
"""Seconds a release waits for our node to see the unit end (it reads a remote unit's
state once a second)."""
_EOF = b'{"eof": true}'
"""The last line of ``ansible-runner worker``'s stream."""
_WEDGE_HINT = (
    "; if {node} is up, the controller's Receptor may have wedged the link (stock 1.4.4"
    " does when a packet reaches a closed connection; its log then says 'Timing out"
    " connection {node}, idle for the past 21s'): only restarting it restores the route"
)
_pending: set[threading.Thread] = set()
_slots: dict[tuple[str, str, int], threading.BoundedSemaphore] = {}
_pending_lock = threading.Lock()


class Lost(Exception):
    """The unit's outcome is unknown: its execution node died, its link was cut, or it
    never reported back. ``str()`` names the execution node and the unit."""

    def __init__(self, node: str, unit: str | None, why: str, unrouted: bool = False) -> None:
        self.node, self.unit, self.unrouted = node, unit, unrouted
        super().__init__(f"execution node {node}: {why}" + (f" (unit {unit})" if unit else ""))


@dataclass
class Processed:
    """What ``ansible-runner process`` made of the stream, shaped like ansible-runner's
    Runner where runner.py reads it (``events``, ``status``, ``rc``, ``stdout``)."""

    status: str
    rc: int | None
    events: list[dict]
    artifact_dir: Path
    unit: str
    node: str

    @property
    def stdout(self) -> io.StringIO:
        f = self.artifact_dir / "stdout"
        return io.StringIO(f.read_text(errors="replace") if f.exists() else "")


class _Session:
    """One connection to the control socket for all of a run's questions: the control
    service answers any number of commands on one connection (a broken one is opened
    again once per question)."""

    def __init__(self, settings: ReceptorConfig) -> None:
        self._address = f"unix:{settings.socket}"
        self._rc: ReceptorControl | None = None

    def ask(self, command: str) -> dict | None:
        for _ in range(2):
            if self._rc is None:
                self._rc = ReceptorControl(self._address)
            try:
                return self._rc.simple_command(command)
            except RuntimeError as exc:  # an ERROR answer: the connection is still good
                log.debug("receptor %r: %s", command, exc)
                return None
            except (OSError, ValueError) as exc:  # broken, or not there (yet)
                log.debug("receptor %r: %s", command, exc)
                self.close()
        return None

    def close(self) -> None:
        if self._rc is not None:
            rc, self._rc = self._rc, None
            try:
                rc.close()
            except OSError:  # its buffered writer's flush to a peer that went away
                rc.close()  # the file is dropped already; this closes the socket


class _Results:
    """The unit's results stream fed to ``ansible-runner process`` in a thread of its
    own; :meth:`abort` ends it from outside (a lost node, a cancel)."""

    def __init__(
        self,
        stream: tuple[socket.socket | _Merged, BinaryIO],
        pdd: Path,
        ident: str,
        unit: str,
    ) -> None:
        self._sock, self._file = stream
        self.final: dict = {}
        self.ended = threading.Event()
        self.seen: list[float] = []
        """When the stream's first and (so far) last status lines were read (monotonic)."""
        self._thread = threading.Thread(
            target=self._process, args=(pdd, ident), name=f"receptor-results-{unit}", daemon=True
        )
        self._thread.start()

    def _process(self, pdd: Path, ident: str) -> None:
        try:
            ansible_runner.interface.run(
                streamer="process",
                private_data_dir=str(pdd),
                ident=ident,
                _input=self._file,
                quiet=True,
                status_handler=lambda data, runner_config: self._status(data),
            )
        except Exception as exc:  # any failure here leaves the outcome unknown
            self.final.update(status="error", job_explanation=one_line(exc))
        finally:
            self.ended.set()

    def _status(self, data: dict) -> None:
        self.final.update(data)
        now = time.monotonic()
        self.seen = [self.seen[0] if self.seen else now, now]

    def abort(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(10)
        self.close()

    def close(self) -> None:
        for f in (self._file, self._sock):
            try:
                f.close()
            except OSError:
                pass

    def finish(self, limit: float) -> None:
        """Read what is left to the end the sending node makes (up to ``limit``), then
        close: the execution node ends a direct stream once its unit is complete."""
        try:
            self._sock.settimeout(limit)
            while self._file.read(65536):
                pass
        except OSError:
            pass
        self.close()


def _open_results(
    settings: ReceptorConfig, unit: str, node: str, session: _Session
) -> tuple[tuple[socket.socket | _Merged, BinaryIO], bool]:
    """The stream to read the unit's results from, and whether it is direct."""
    if settings.direct_results:
        st = session.ask(f"work status {unit}") or {}
        remote = (st.get("ExtraData") or {}).get("RemoteUnitID")
        try:
            if not remote:
                raise receptor_direct.Refused("the execution node's unit ID is not known yet")
            stream = receptor_direct.open_results(settings, node, remote)
            log.debug("unit %s: results straight from %s (its unit %s)", unit, node, remote)
            return stream, True
        except receptor_direct.Refused as exc:
            log.warning("unit %s: results through our node: direct stream refused: %s", unit, exc)
    merged = _Merged(settings, unit)
    return (merged, merged.reader), False


_FOLLOW = 0.25
"""Seconds between our node's reads of its copy of a remote unit's output (GetResults)."""
_READERS = 4
"""Streams of our node's copy :class:`_Merged` reads, opened ``_FOLLOW / _READERS`` apart."""


class _Merged:
    """Our node's copy of the unit's output, read through ``_READERS`` ``work results``
    streams opened a fraction of its 250 ms follow tick apart and merged into one (each
    byte from the stream that has it first): a stream reads the copy in a phase set when
    it opens, and the copy lands at a fixed point of the unit's own 1 s ticks (2.27 s
    after submit in 8 of 8 traced runs), so a single stream waited ~0.23 s for it every
    run. The streams are local (our control socket): no dial of the execution node, so
    no more chances of the link wedge. Quacks like the socket :class:`_Results` shuts."""

    def __init__(self, settings: ReceptorConfig, unit: str) -> None:
        self._address = f"unix:{settings.socket}"
        self._unit = unit
        self._lock = threading.Lock()  # _socks, _left, _closed
        self._write_lock = threading.Lock()  # _delivered and the pipe's order
        self._socks: list[socket.socket] = []
        self._delivered = 0
        self._left = _READERS  # streams not ended yet (or not yet opened)
        self._closed = False
        r, w = os.pipe()
        self.reader: BinaryIO = os.fdopen(r, "rb")
        self._writer = os.fdopen(w, "wb")
        try:
            self._start(*self._open())  # the first one's failure is the caller's
        except BaseException:
            self._writer.close()
            self.reader.close()
            raise
        threading.Thread(target=self._open_rest, name=f"receptor-open-{unit}", daemon=True).start()

    def _open(self) -> tuple[socket.socket, BinaryIO]:
        rc = ReceptorControl(self._address)
        sock, reader = rc.get_work_results(self._unit, return_socket=True, return_sockfile=True)
        return sock, reader

    def _start(self, sock: socket.socket, reader: BinaryIO) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._socks.append(sock)
        if closed:  # shut while this stream was opening: it ends here, as a pump would
            reader.close()
            sock.close()
            self._ended()
            return
        threading.Thread(
            target=self._pump, args=(sock, reader), name=f"receptor-copy-{self._unit}", daemon=True
        ).start()

    def _open_rest(self) -> None:
        for _ in range(_READERS - 1):
            time.sleep(_FOLLOW / _READERS)
            try:
                if self._closed:
                    raise OSError("closed")
                self._start(*self._open())
            except (RuntimeError, OSError, ValueError) as exc:
                log.debug("unit %s: one more results stream: %s", self._unit, exc)
                self._ended()

    def _pump(self, sock: socket.socket, reader: BinaryIO) -> None:
        pos = 0
        try:
            while chunk := reader.read1(65536):  # type: ignore[attr-defined]
                end = pos + len(chunk)
                # its own lock: a full pipe blocks this write, and shutdown() must not wait
                with self._write_lock:
                    if end > self._delivered and not self._closed:
                        self._writer.write(chunk[self._delivered - pos :])
                        self._writer.flush()
                        self._delivered = end
                pos = end
        except (OSError, ValueError):
            pass  # shut from outside, or the reader went away
        finally:
            reader.close()
            sock.close()
            self._ended()

    def _ended(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left > 0:
                return
        self._close_writer()

    def _close_writer(self) -> None:
        try:
            self._writer.close()
        except OSError:  # the reading end is gone: nothing left to tell
            pass

    def shutdown(self, how: int) -> None:
        with self._lock:
            self._closed = True
            socks = list(self._socks)
        for sock in socks:
            try:
                sock.shutdown(how)
            except OSError:
                pass

    def settimeout(self, limit: float) -> None:
        """Only a direct stream is read on after the run (:meth:`_Results.finish`)."""

    def close(self) -> None:
        self.shutdown(socket.SHUT_RDWR)


def run(
    run_kwargs: Mapping[str, Any],
    node: str,
    settings: ReceptorConfig,
    *,
    timeout: float,
    cancel: Callable[[], bool] | None = None,
) -> Processed:
    """Run the job ``run_kwargs`` (ansible_runner.run's arguments) on execution node
    ``node``; :class:`Lost` when its outcome is unknown, TemporaryError when it could not
    be submitted (nothing ran)."""
    pdd = Path(run_kwargs["private_data_dir"])
    ident = str(run_kwargs["ident"])
    slot = _slot(settings, node)
    if not _take(slot, settings, timeout, cancel):
        if cancel and cancel():
            return Processed("canceled", None, [], pdd / "artifacts" / ident, "", node)
        raise TemporaryError(
            f"run {ident}: execution node {node}: {settings.max_in_flight} units in flight "
            f"for {timeout:.0f} s, none ended",
            30,
        )
    handed_over = False  # the slot goes with the unit's release
    try:
        done = _run(run_kwargs, node, settings, slot, timeout=timeout, cancel=cancel)
        handed_over = True
        return done
    except Lost:
        handed_over = True
        raise
    finally:
        if not handed_over:
            slot.release()


def _run(
    run_kwargs: Mapping[str, Any],
    node: str,
    settings: ReceptorConfig,
    slot: threading.BoundedSemaphore,
    *,
    timeout: float,
    cancel: Callable[[], bool] | None,
) -> Processed:
    pdd = Path(run_kwargs["private_data_dir"])
    ident = str(run_kwargs["ident"])
    job = pdd / "job.stream"
    t0 = time.monotonic()
    with job.open("wb") as out:
        ansible_runner.run(**{**run_kwargs, "streamer": "transmit", "_output": out})
    t1 = time.monotonic()
    try:
        with job.open("rb") as payload:
            unit = ReceptorControl(f"unix:{settings.socket}").submit_work(
                settings.work_type,
                payload,
                node=node,
                tlsclient=settings.tls_client,
                signwork=settings.sign_work,
            )["unitid"]
    except (RuntimeError, OSError, ValueError) as exc:
        raise TemporaryError(
            f"run {ident}: execution node {node}: submit failed: {one_line(exc)}", 30
        ) from None
    finally:
        job.unlink(missing_ok=True)
    t2 = time.monotonic()
    log.info("run %s: unit %s on execution node %s", ident, unit, node)
    session = _Session(settings)
    results: _Results | None = None
    direct = False
    try:
        try:
            stream, direct = _open_results(settings, unit, node, session)
            results = _Results(stream, pdd, ident, unit)
        except (RuntimeError, OSError, ValueError) as exc:
            raise Lost(node, unit, f"results unreadable: {one_line(exc)}") from None
        if not _watch(results, unit, node, settings, session, timeout + settings.grace, cancel):
            results.abort()
            session.ask(f"work cancel {unit}")
            _background(_release, unit, settings, slot)
            return Processed("canceled", None, [], pdd / "artifacts" / ident, unit, node)
        if not direct:
            results.close()
        t3 = time.monotonic()
        done = _processed(results.final, unit, node, session, pdd, ident)
        log.debug(
            "run %s: transmit %.3f s, submit %.3f s, run and stream %.3f s, read %.3f s",
            *(ident, t1 - t0, t2 - t1, t3 - t2, time.monotonic() - t3),
        )
        if results.seen:
            log.debug(
                "run %s: after submit, first status %.3f s, last status %.3f s, end %.3f s",
                *(ident, results.seen[0] - t2, results.seen[-1] - t2, t3 - t2),
            )
    except Lost as exc:
        log.warning(
            "run %s: %s%s", ident, exc, _WEDGE_HINT.format(node=node) if exc.unrouted else ""
        )
        if results is not None:
            results.abort()
        # Receptor answers a remote cancel/release only after trying the lost node
        # (~30 s): not on the caller's time
        _background(_abandon, unit, settings, slot)
        raise
    finally:
        session.close()
    _background(_release, unit, settings, slot, results if direct else None)
    return done


def drain(timeout: float = 30) -> int:
    """Wait up to ``timeout`` for background releases and cancels; how many are left."""
    deadline = time.monotonic() + timeout
    with _pending_lock:
        threads = list(_pending)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with _pending_lock:
        return len(_pending)


def _slot(settings: ReceptorConfig, node: str) -> threading.BoundedSemaphore:
    key = (str(settings.socket), node, settings.max_in_flight)
    with _pending_lock:
        return _slots.setdefault(key, threading.BoundedSemaphore(settings.max_in_flight))


def _take(
    slot: threading.BoundedSemaphore,
    settings: ReceptorConfig,
    limit: float,
    cancel: Callable[[], bool] | None,
) -> bool:
    """A slot for one more unit on the node: False when cancelled or none for ``limit``."""
    deadline = time.monotonic() + limit
    while not slot.acquire(timeout=settings.poll_interval):
        if (cancel and cancel()) or time.monotonic() >= deadline:
            return False
    return True


def _background(
    fn: Callable[..., None],
    unit: str,
    s: ReceptorConfig,
    slot: threading.BoundedSemaphore,
    *args: Any,
) -> None:
    def work() -> None:
        try:
            fn(unit, s, *args)
        finally:
            slot.release()
            with _pending_lock:
                _pending.discard(threading.current_thread())

    t = threading.Thread(target=work, name=f"receptor-{fn.__name__.strip('_')}-{unit}")
    t.daemon = True
    with _pending_lock:
        _pending.add(t)
    t.start()


def _watch(
    results: _Results,
    unit: str,
    node: str,
    settings: ReceptorConfig,
    session: _Session,
    limit: float,
    cancel: Callable[[], bool] | None,
) -> bool:
    """Wait for the results stream to end: True; False when cancelled; Lost when the
    execution node has had no route for ``lost_after`` or the stream outlives ``limit``."""
    t0 = time.monotonic()
    unrouted_since: float | None = None
    while not results.ended.wait(settings.poll_interval):
        if cancel and cancel():
            return False
        now = time.monotonic()
        routes = (session.ask("status") or {}).get("RoutingTable") or {}
        if node in routes:
            unrouted_since = None
        elif unrouted_since is None:
            unrouted_since = now
        elif now - unrouted_since >= settings.lost_after:
            raise Lost(
                node, unit, f"no route for {settings.lost_after:.0f} s mid-run", unrouted=True
            )
        if now - t0 >= limit:
            raise Lost(node, unit, f"no report after {limit:.0f} s")
    return True


def _processed(
    final: Mapping[str, Any], unit: str, node: str, session: _Session, pdd: Path, ident: str
) -> Processed:
    artifacts = pdd / "artifacts" / ident
    status = str(final.get("status") or "error")
    if status == "error":
        st = session.ask(f"work status {unit}") or {}
        why = final.get("job_explanation", "") or st.get("Detail", "")
        raise Lost(node, unit, f"results incomplete: {one_line(why)}")
    rc_file = artifacts / "rc"
    code = int(rc_file.read_text()) if rc_file.exists() else None
    files = (artifacts / "job_events").glob("*.json")
    events = sorted((json.loads(f.read_text()) for f in files), key=lambda e: e["counter"])
    return Processed(status, code, events, artifacts, unit, node)


def _abandon(unit: str, settings: ReceptorConfig) -> None:
    """Cancel a lost unit (stops its worker if the node comes back in time) and drop our
    record of it."""
    session = _Session(settings)
    try:
        session.ask(f"work cancel {unit}")
        session.ask(f"work force-release {unit}")
    finally:
        session.close()


def _release(unit: str, settings: ReceptorConfig, direct: _Results | None = None) -> None:
    """Release the unit, on its execution node and ours, once our node has seen it end
    (up to ``_SETTLE``): its copy of the output has then been streamed whole, so no
    stream is cut while data is in flight, which with stock Receptor 1.4.4 can wedge the
    link (see the module's docstring). One request: ``force-release`` asks the execution
    node to release the unit and waits for its answer, then drops our record (a plain
    ``release`` dials the node a second time to watch the unit go). After a ``direct``
    read, first that stream is read to its end and our node's copy to the worker's
    ``eof``: our node starts copying later than the direct stream started."""
    if direct is not None:
        direct.finish(_SETTLE)
        _read_to_eof(unit, settings, _SETTLE)
    session = _Session(settings)
    try:
        deadline = time.monotonic() + _SETTLE
        while time.monotonic() < deadline:
            state = (session.ask(f"work status {unit}") or {"StateName": "gone"})["StateName"]
            if state not in ("Pending", "Running"):
                break
            time.sleep(0.25)
        session.ask(f"work force-release {unit}")
    finally:
        session.close()


def _read_to_eof(unit: str, settings: ReceptorConfig, limit: float) -> None:
    """Read our node's copy of the unit's output up to the worker's ``eof`` line (or its
    end, or ``limit``) and drop it."""
    try:
        sock, reader = ReceptorControl(f"unix:{settings.socket}").get_work_results(
            unit, return_socket=True, return_sockfile=True
        )
    except (RuntimeError, OSError, ValueError) as exc:
        log.debug("unit %s: our node's copy unreadable: %s", unit, exc)
        return
    deadline = time.monotonic() + limit
    try:
        sock.settimeout(limit)
        for line in reader:
            if line.rstrip() == _EOF or time.monotonic() >= deadline:
                break
    except OSError:
        pass
    finally:
        reader.close()
        sock.close()
