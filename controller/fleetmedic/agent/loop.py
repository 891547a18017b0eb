"""The agent's composition root: a check loop and a kernel-log thread.

Every ``interval`` seconds the loop:

1. reads its Node (waiting out API outages, see :mod:`fleetmedic.agent.retry`);
2. runs the checks through :func:`fleetmedic.checks.run_checks` (hard timeouts;
   a hung probe is ``unknown``): GPU and network, or only network while a repair
   taint is on the node. The kernel log is *not* a round check here: the
   :class:`~fleetmedic.agent.kernelwatch.KernelWatch` thread follows it live;
3. writes strikes, taints and last results in one conflict-safe update
   (:class:`~fleetmedic.agent.writer.NodeWriter`).

The GPU vendor and count come from the Node's labels (``fleetmedic.io/gpu-vendor``,
``fleetmedic.io/expected-gpus``) when set, else from the config. The hardware profile
is picked each round from the Node's ``node.kubernetes.io/instance-type`` label (or the
label or pool ``checks.hardware`` names, or a profile it names outright); which one, or
that none matches and no profile checks run, is logged once, and again when it changes.
The RDMA ports' counters are kept from round to round in memory (:class:`Memory`), so
a counter that grew past its threshold between two rounds (a flapping link) is a strike.

Shutdown (SIGTERM/SIGINT) only sets ``stop``: a round in progress is discarded
and nothing is written after it, so stopping the agent never removes a taint
or resets a strike.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.agent import annotations as ann
from fleetmedic.agent.config import AgentConfig
from fleetmedic.agent.fabricwatch import FabricWatch
from fleetmedic.agent.kernelwatch import KernelWatch
from fleetmedic.agent.metrics import AgentMetrics
from fleetmedic.agent.retry import Retrier, Stopped
from fleetmedic.agent.writer import NodeWriter, Outcome
from fleetmedic.agent.xidflows import XidFlows
from fleetmedic.checks import CheckConfig, CheckResult, by_category, hwprofile, run_checks
from fleetmedic.checks.runner import Memory
from fleetmedic.errors import ConfigError
from fleetmedic.model import keys

log = logging.getLogger("fleetmedic.agent")
VENDORS = ("auto", "nvidia", "amd", "none")


def check_config(base: CheckConfig, node: Mapping[str, Any]) -> CheckConfig:
    """``base`` with the vendor and GPU count the Node's labels give (bad labels ignored)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    changes: dict[str, Any] = {}
    vendor = labels.get(keys.LABEL_VENDOR)
    if vendor in VENDORS:
        changes["vendor"] = vendor
    count = labels.get(keys.LABEL_EXPECTED_GPUS)
    if isinstance(count, str) and count.isdigit():
        changes["expected_gpus"] = int(count)
    return dataclasses.replace(base, **changes) if changes else base


def pick_profile(base: CheckConfig, node: Mapping[str, Any]) -> tuple[CheckConfig, str]:
    """``base`` with the hardware profile this Node's labels select (or the one the config
    names), and one line saying which or that none matched. A profile file that cannot
    be read now is said in that line and means no profile checks this round."""
    hw = base.hardware
    if not hw.enabled:
        return base, "hardware profiles disabled (checks.hardware.enabled: false)"
    labels = (node.get("metadata") or {}).get("labels") or {}
    try:
        name, why = hwprofile.choose(
            hwprofile.load_cached(hw.profiles),
            labels,
            label=hw.label,
            pool=hw.pool,
            profile=hw.profile,
        )
    except hwprofile.ProfileError as exc:
        name, why = None, f"hardware profiles not usable ({exc}): no profile checks"
    return dataclasses.replace(base, hardware=dataclasses.replace(hw, profile=name)), why


def found_vendor(configured: str, results: list[CheckResult]) -> str | None:
    """The GPU stack this node has, as its checks found it: the configured vendor, else
    the one whose checks ran (``nvidia.*``, ``amd.*``). None: not known this round."""
    if configured in ("nvidia", "amd"):
        return configured
    ran = {r.name.split(".", 1)[0] for r in results if r.category == "gpu"}
    ran &= {"nvidia", "amd"}
    return ran.pop() if len(ran) == 1 else None


def summary_line(results: list[CheckResult], out: Outcome, limit: int) -> str:
    cats = by_category(results)
    parts = []
    for cat in ("gpu", "network"):
        status = cats.get(cat, "skipped" if cat == "gpu" and out.before_repair else None)
        if status is None:
            continue
        bad = [r.name for r in results if r.category == cat and r.status != "ok"]
        parts.append(f"{cat} {status}" + (f" ({', '.join(bad)})" if bad else ""))
    s = out.decision.strikes
    fenced = f"; fenced repair={out.fenced}" if out.fenced else ""
    if out.held:
        fenced = "; nothing written (someone else's drain)"
    return (
        f"{'; '.join(parts) or 'no checks'}; strikes gpu {s.gpu}/{limit}, "
        f"network {s.network}/{limit}{fenced}"
    )


class Agent:
    def __init__(
        self,
        cfg: AgentConfig,
        kube: NodeDocs,
        *,
        kernel_kube: NodeDocs | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.cfg = cfg
        self.stop = stop or threading.Event()
        self.vocab = cfg.vocabulary()
        self.retrier = Retrier(self.stop, cap=cfg.retry_cap, on_attempt=self.beat)
        self.metrics = AgentMetrics()

        def writer(k: NodeDocs) -> NodeWriter:
            return NodeWriter(
                k,
                cfg.node_name,
                self.vocab,
                strike_limit=cfg.strike_limit,
                events=cfg.events,
                on_write=self.metrics.wrote,
            )

        self.writer = writer(kube)
        # its own connection, so a slow round never delays a fencing write
        # (one store for both, as Slurm's: one writer, so a refusal is said once)
        kernel_writer = self.writer if kernel_kube in (None, kube) else writer(kernel_kube)
        self.kernel = KernelWatch(
            cfg.kernel,
            kernel_writer,
            self.retrier,
            self.stop,
            on_finding=self.metrics.finding,
            flows=XidFlows(on_verdict=self.metrics.verdict),
        )
        self.fabric = FabricWatch(
            cfg.fabricmanager,
            kernel_writer,
            self.retrier,
            self.stop,
            boot=self.kernel.boot,
            on_finding=self.metrics.finding,
        )
        self.memory = Memory()  # the RDMA counters of the last round
        self._profile_said = ""
        hw = cfg.checks.hardware
        if hw.enabled:  # a bad profile file or name stops the agent at start, as bad config
            try:
                hwprofile.choose(hwprofile.load_cached(hw.profiles), {}, profile=hw.profile)
            except hwprofile.ProfileError as exc:
                raise ConfigError(f"checks.hardware: {exc}") from None
        self.rounds = 0
        self._last_line = ""
        self._beat_failed = False

    def beat(self) -> None:
        """Touch ``alive_file`` (the liveness heartbeat); a failure is logged once."""
        path = self.cfg.alive_file
        if not path:
            return
        try:
            with open(path, "a"):
                pass
            os.utime(path)
        except OSError as exc:
            if not self._beat_failed:
                log.warning("cannot touch the heartbeat file %s: %s", path, exc.strerror)
            self._beat_failed = True

    # -- one round --------------------------------------------------------------
    def round(self) -> Outcome | None:
        """One check round; None if the agent was stopped before it could write."""
        try:
            node = self.retrier.call("read node", self.writer.read)
        except Stopped:
            return None
        repair = ann.repair_state(node, self.vocab)
        categories = ["network"] if repair else ["gpu", "network"]
        checks, said = pick_profile(check_config(self.cfg.checks, node), node)
        if said != self._profile_said:
            log.info("node %s: %s", self.cfg.node_name, said)
            self._profile_said = said
        results = run_checks(checks, categories=categories, memory=self.memory)
        if self.stop.is_set():
            return None
        skipped = {"gpu": f"node under repair ({repair})"} if repair else None
        vendor = found_vendor(checks.vendor, results) if self.cfg.slurm is not None else None
        try:
            out = self.retrier.call(
                "write node", lambda: self.writer.record_round(results, skipped, vendor)
            )
        except Stopped:
            return None
        self.rounds += 1
        self.metrics.round(results, out.decision.strikes)
        line = summary_line(results, out, self.cfg.strike_limit)
        noteworthy = any(r.status != "ok" for r in results) or line != self._last_line
        (log.info if noteworthy else log.debug)("round %d: %s", self.rounds, line)
        self._last_line = line
        return out

    # -- the whole life ---------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        log.info(
            "agent for node %s: interval %gs, strike limit %d, taints %s, kernel log %s",
            cfg.node_name,
            cfg.interval,
            cfg.strike_limit,
            cfg.taints,
            cfg.kernel.source,
        )
        if cfg.metrics_port:
            threading.Thread(
                target=self._serve_metrics, name="fleetmedic-metrics", daemon=True
            ).start()
        thread = threading.Thread(
            target=self._kernel_thread, name="fleetmedic-kernelwatch", daemon=True
        )
        thread.start()
        fabric = threading.Thread(
            target=self._fabric_thread, name="fleetmedic-fabricwatch", daemon=True
        )
        fabric.start()
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                self.beat()
                try:
                    self.round()
                except Exception as exc:  # a bug of ours: log it, keep the agent alive
                    log.exception(
                        "round failed (%s: %s); next round in %gs",
                        type(exc).__name__,
                        exc,
                        cfg.interval,
                    )
                self.stop.wait(max(0.0, started + cfg.interval - time.monotonic()))
        finally:
            self.stop.set()
            thread.join(timeout=5)
            fabric.join(timeout=5)
        log.info("agent for node %s stopped; taints and strikes left as they are", cfg.node_name)

    def _serve_metrics(self) -> None:
        """Bind the metrics port, retrying while it is taken: with hostNetwork the old pod of
        a rolling update may still hold it, and metrics must never stop the checks."""
        cfg, said = self.cfg, False
        while not self.stop.is_set():
            try:
                self.metrics.serve(cfg.metrics_address, cfg.metrics_port or 0)
            except OSError as exc:
                if not said:
                    log.warning(
                        "metrics port %s:%s not available (%s); trying again every 5s",
                        cfg.metrics_address,
                        cfg.metrics_port,
                        exc.strerror or exc,
                    )
                    said = True
                self.stop.wait(5)
                continue
            log.info("metrics on http://%s:%d/metrics", cfg.metrics_address, cfg.metrics_port)
            return

    def run_once(self) -> Outcome | None:
        """``--once``: the kernel log as it is now (against the watermark), then one round.
        Gives up (None) when the API server does not answer within ``retry_cap`` seconds."""
        self.kernel.once = self.fabric.once = True
        self.retrier.give_up_after = self.cfg.retry_cap
        self._kernel_thread()
        self._fabric_thread()
        return self.round()

    def _fabric_thread(self) -> None:
        while not self.stop.is_set():
            try:
                self.fabric.run()
                return
            except Exception as exc:  # a bug of ours must not take the check loop with it
                log.exception("fabric manager thread failed (%s); restarting it in 5s", exc)
                if self.fabric.once:
                    return
                self.stop.wait(5)

    def _kernel_thread(self) -> None:
        while not self.stop.is_set():
            try:
                self.kernel.run()
                return
            except Exception as exc:  # a bug of ours must not take the check loop with it
                log.exception("kernel log thread failed (%s); restarting it in 5s", exc)
                if self.kernel.once:
                    return
                self.stop.wait(5)
