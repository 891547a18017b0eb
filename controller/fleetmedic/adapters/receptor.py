"""Run an ansible-runner job on a Receptor execution node, as AWX does.

``ansible-runner transmit`` packs the job (private data dir, inventory, playbook, env),
the controller's own Receptor node submits it as a signed work unit to the execution
node (``ansible-runner worker`` runs it there), and once the unit has ended its results
stream back through ``ansible-runner process`` into the same artifacts a local run
writes. The unit is then released, on the execution node too.

The unit's state is polled on the local control socket (cheap) rather than its results
streamed live: Receptor keeps a stream open while the remote node is silent, so a live
stream cannot tell a long task from a dead node. Given up (:class:`Lost`, the outcome is
unknown) when the execution node has had no route for ``lost_after`` or the unit has not
ended ``grace`` after the job's timeout; a given-up unit is cancelled and force-released
in the background: our record of it goes, its directory on the execution node stays (a
known gap: Receptor releases a remote unit only through a node that answers). A unit
that ended ``Failed`` is not lost: the worker exits non-zero when the playbook fails,
and its stream still holds every event.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible_runner
from receptorctl.socket_interface import ReceptorControl

from fleetmedic.errors import TemporaryError, one_line
from fleetmedic.model.config import ReceptorConfig

log = logging.getLogger(__name__)

DONE = ("Succeeded", "Failed")


class Lost(Exception):
    """The unit's outcome is unknown: its execution node died, its link was cut, or it
    never reported back. ``str()`` names the execution node and the unit."""

    def __init__(self, node: str, unit: str | None, why: str) -> None:
        self.node, self.unit = node, unit
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
    job = pdd / "job.stream"
    with job.open("wb") as out:
        ansible_runner.run(**{**run_kwargs, "streamer": "transmit", "_output": out})
    try:
        with job.open("rb") as payload:
            unit = _control(settings).submit_work(
                settings.work_type,
                payload,
                node=node,
                tlsclient=settings.tls_client,
                signwork=settings.sign_work,
            )["unitid"]
    except (RuntimeError, OSError) as exc:
        raise TemporaryError(
            f"run {ident}: execution node {node}: submit failed: {one_line(exc)}", 30
        ) from None
    finally:
        job.unlink(missing_ok=True)
    log.info("run %s: unit %s on execution node %s", ident, unit, node)
    try:
        state = _wait(unit, node, settings, timeout + settings.grace, cancel)
        if state is None:
            _release(unit, settings)
            return Processed("canceled", None, [], pdd / "artifacts" / ident, unit, node)
        done = _process(unit, node, settings, pdd, ident)
    except Lost as exc:
        log.warning("run %s: %s", ident, exc)
        # Receptor answers a remote cancel/release only after trying the lost node
        # (~30 s): not on the caller's time
        threading.Thread(target=_abandon, args=(unit, settings), daemon=True).start()
        raise
    _release(unit, settings)
    return done


def _control(settings: ReceptorConfig) -> ReceptorControl:
    return ReceptorControl(f"unix:{settings.socket}")


def _command(settings: ReceptorConfig, command: str) -> dict | None:
    rc = _control(settings)
    try:
        return rc.simple_command(command)
    except Exception as exc:  # receptorctl raises bare RuntimeError / OSError / ValueError
        log.debug("receptor %r: %s", command, exc)
        return None
    finally:
        rc.close()


def _wait(
    unit: str,
    node: str,
    settings: ReceptorConfig,
    limit: float,
    cancel: Callable[[], bool] | None,
) -> str | None:
    """The unit's final state; None when cancelled; Lost when given up."""
    t0 = time.monotonic()
    unrouted_since: float | None = None
    while True:
        if cancel and cancel():
            _command(settings, f"work cancel {unit}")
            return None
        st = _command(settings, f"work status {unit}") or {}
        if st.get("StateName") in DONE:
            return str(st["StateName"])
        now = time.monotonic()
        routes = (_command(settings, "status") or {}).get("RoutingTable") or {}
        if node in routes:
            unrouted_since = None
        elif unrouted_since is None:
            unrouted_since = now
        elif now - unrouted_since >= settings.lost_after:
            raise Lost(node, unit, f"no route for {settings.lost_after:.0f} s mid-run")
        if now - t0 >= limit:
            raise Lost(node, unit, f"no report after {limit:.0f} s")
        time.sleep(settings.poll_interval)


def _process(unit: str, node: str, settings: ReceptorConfig, pdd: Path, ident: str) -> Processed:
    rc = _control(settings)
    try:
        stream = rc.get_work_results(unit, return_sockfile=True)
        try:
            final: dict = {}
            ansible_runner.interface.run(
                streamer="process",
                private_data_dir=str(pdd),
                ident=ident,
                _input=stream,
                quiet=True,
                status_handler=lambda data, runner_config: final.update(data),
            )
        finally:
            stream.close()
    except (RuntimeError, OSError) as exc:
        raise Lost(node, unit, f"results unreadable: {one_line(exc)}") from None
    finally:
        rc.close()
    artifacts = pdd / "artifacts" / ident
    status = str(final.get("status") or "error")
    if status == "error":
        raise Lost(node, unit, f"results incomplete: {final.get('job_explanation', '')}")
    rc_file = artifacts / "rc"
    code = int(rc_file.read_text()) if rc_file.exists() else None
    files = (artifacts / "job_events").glob("*.json")
    events = sorted((json.loads(f.read_text()) for f in files), key=lambda e: e["counter"])
    return Processed(status, code, events, artifacts, unit, node)


def _abandon(unit: str, settings: ReceptorConfig) -> None:
    """Cancel a lost unit (stops its worker if the node comes back in time) and drop our
    record of it."""
    _command(settings, f"work cancel {unit}")
    _command(settings, f"work force-release {unit}")


def _release(unit: str, settings: ReceptorConfig) -> None:
    """Release the unit on its execution node (completes once the node confirms); when
    the request itself fails, drop our own record of it."""
    if _command(settings, f"work release {unit}") is None:
        _command(settings, f"work force-release {unit}")
