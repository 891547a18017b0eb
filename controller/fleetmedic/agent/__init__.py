"""The node agent (``fleetmedic agent``): runs checks, keeps strikes on its own Node, fences it.

Modules, from the top:

- :mod:`~fleetmedic.agent.cli`: the click command and its flags.
- :mod:`~fleetmedic.agent.loop`: the composition root; check rounds every
  ``interval`` seconds and the kernel-log thread.
- :mod:`~fleetmedic.agent.kernelwatch`: follows the kernel log with the scanner;
  a definitive finding (Xid 79, a row-remap failure) fences at once.
- :mod:`~fleetmedic.agent.logsource`: kernel log sources and the pre-scan of a file.
- :mod:`~fleetmedic.agent.watermark`: which finding was acted on last, per boot,
  so a restart neither re-fences on old lines nor misses new ones.
- :mod:`~fleetmedic.agent.writer`: the one place that writes the Node
  (conflict-safe; the policy decides on the freshly read Node) and posts Events.
- :mod:`~fleetmedic.agent.annotations`: the annotations' shapes, as pure edits.
- :mod:`~fleetmedic.agent.retry`: waiting out API outages with one log line.
- :mod:`~fleetmedic.agent.config`: settings, with the reason for every default.

The decision itself is :func:`fleetmedic.policy.strikes.decide` (pure); the
checks are :func:`fleetmedic.checks.run_checks`. deploy/agent has the RBAC, the
admission policies that confine the agent to its own Node, and the DaemonSet.
"""
