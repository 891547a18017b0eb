#!/usr/bin/python
# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Run fleetmedic's node health checks and return them as facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_check
short_description: Run C(fleetmedic check --json) on a node and report its health
description:
  - Runs fleetmedic's node health checks (GPU, driver, network, kernel log) once, under a hard
    timeout, and returns the overall status and each check's result.
  - The exit code decides the status, as for node-problem-detector plugins, 0 is V(ok),
    1 is V(problem), 2 is V(unknown). A timeout or any other exit code is V(unknown), never V(ok).
  - This module only reads; it never fails because the node is unhealthy. The
    C(fleetmedic.fleet.gpu_health) role decides what an unhealthy node means.
version_added: 0.1.0
author: fleetmedic developers (!UNKNOWN)
options:
  command:
    description: The check command as an argument list (run without a shell).
    type: list
    elements: str
    default: [fleetmedic, check, --json]
  timeout:
    description: Seconds before the check is killed and the status is V(unknown).
    type: int
    default: 300
  retries:
    description:
      - Run the check again up to this many times while it is not V(ok), waiting O(delay) seconds
        between runs (a GPU stack may need a moment after boot). The last run's result is returned.
    type: int
    default: 0
  delay:
    description: Seconds between retries.
    type: int
    default: 10
  report_command:
    description:
      - After a check that passed (V(ok)), run this command too (an argument list, same timeout)
        and return its output in RV(report), decoded as JSON. The verify playbook reads the GPUs'
        identities this way (C(fleetmedic gpus --json)) in the same module run as the check.
      - Empty, nothing more runs.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: The check only reads, so it also runs in check mode.
  diff_mode:
    support: none
    description: Nothing to compare; the result says what happened.
"""

EXAMPLES = r"""
- name: Check the node
  fleetmedic.fleet.gpu_check:
    timeout: 120
  register: gpu_health_result

- name: Show what is wrong
  ansible.builtin.debug:
    msg: "{{ gpu_health_result.message }}"
  when: gpu_health_result.status != 'ok'
"""

RETURN = r"""
status:
  description: Overall status.
  returned: always
  type: str
  sample: problem
healthy:
  description: True only when the status is V(ok).
  returned: always
  type: bool
exit_code:
  description:
    - Exit code of the check, or null on a timeout or when it is not installed.
    - Not called C(rc), so Ansible does not read a non-zero code as a failed task.
  returned: always
  type: int
  sample: 1
message:
  description: One line for an operator, naming every check that is not ok.
  returned: always
  type: str
  sample: "problem: nvidia.count: problem: 7 of 8 expected GPUs visible"
problems:
  description: One line per check that is not ok, as C(name), status and summary joined by colons.
  returned: always
  type: list
  elements: str
results:
  description: Every check result as C(fleetmedic check --json) printed it.
  returned: always
  type: list
  elements: dict
duration:
  description: Seconds the last run of the check took.
  returned: always
  type: float
attempts:
  description: How many times the check ran.
  returned: always
  type: int
report:
  description:
    - The output of O(report_command), JSON decoded, after a check that passed.
    - Null when none was asked, the check did not pass, or the command failed (an exit code other
      than 0 or 2), timed out, is not installed or printed no JSON object.
  returned: always
  type: dict
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetmedic.fleet.plugins.module_utils import fleetmedic_checks as fc


def check_once(argv, timeout):
    exe = fc.which(argv[0])
    if exe is None:
        # Not installed is not healthy: the GPU stack (or fleetmedic itself) is missing.
        msg = "unknown: %s is not installed on this node" % argv[0]
        return dict(
            status="unknown",
            healthy=False,
            exit_code=None,
            message=msg,
            problems=[msg],
            results=[],
            duration=0.0,
            stderr="",
        )
    rc, out, err, seconds, timed_out = fc.run([exe] + argv[1:], timeout)
    out = (out or b"").decode("utf-8", "replace")
    err = (err or b"").decode("utf-8", "replace").strip()
    results = fc.parse_results(out)
    status = fc.overall_status(rc, timed_out)
    stderr_tail = err.splitlines()[-1] if err else ""
    problems = fc.summary_lines(results or [])
    if results is None and not timed_out and rc in fc.STATUS_BY_RC:
        problems.append("check output is not JSON: %s" % (out.strip()[:200] or "empty"))
    return dict(
        status=status,
        healthy=status == "ok",
        exit_code=rc,
        message=fc.message(status, rc, results or [], timed_out, timeout, stderr_tail),
        problems=problems,
        results=results or [],
        duration=round(seconds, 3),
        stderr=err[-4000:],
    )


def read_report(argv, timeout):
    """``argv``'s JSON object (exit 0, or 2: a report with unreadable parts), else None."""
    exe = fc.which(argv[0])
    if exe is None:
        return None
    rc, out, _err, _seconds, timed_out = fc.run([exe] + argv[1:], timeout)
    if timed_out or rc not in (0, 2):
        return None
    try:
        value = json.loads((out or b"").decode("utf-8", "replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            command=dict(type="list", elements="str", default=["fleetmedic", "check", "--json"]),
            timeout=dict(type="int", default=300),
            retries=dict(type="int", default=0),
            delay=dict(type="int", default=10),
            report_command=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    argv = list(module.params["command"])
    if not argv:
        module.fail_json(msg="command must not be empty")
    attempts = 0
    while True:
        attempts += 1
        result = check_once(argv, module.params["timeout"])
        if result["healthy"] or attempts > max(0, module.params["retries"]):
            break
        time.sleep(max(0, module.params["delay"]))
    report = None
    if result["healthy"] and module.params["report_command"]:
        report = read_report(list(module.params["report_command"]), module.params["timeout"])
    module.exit_json(changed=False, attempts=attempts, report=report, **result)


if __name__ == "__main__":
    main()
