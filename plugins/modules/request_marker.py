#!/usr/bin/python
# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Read, and optionally write, the small JSON file a repair role keeps on the node for one request."""

from __future__ import annotations

DOCUMENTATION = r"""
module: request_marker
short_description: Read and record a repair request's marker on the node, with this boot's id
description:
  - The repair roles (V(fleetmedic.fleet.reboot), V(fleetmedic.fleet.gpu_reset),
    V(fleetmedic.fleet.service_restart)) keep one small JSON file per role on the node, the
    request they last worked on and how far it got, so that a run repeated after a crash
    (the controller killed mid-repair) does not reboot or reset twice.
  - One task returns the marker as it was (O(path)), this boot's id, and, given O(record),
    writes the new marker. It replaces a C(slurp) of the boot id, a C(slurp) of the marker, a
    C(file) for its directory and a C(copy) of its content, four to six module runs on the node,
    with one.
  - A marker that is missing, unreadable or not a JSON object reads as none (RV(previous) is
    null), so the role acts as for a new request, and the record written replaces it.
  - The file is written whole under a temporary name and renamed, so a crash never leaves half a
    marker; its directory is made (mode 0755) when missing.
version_added: 0.4.0
author: fleetmedic developers (!UNKNOWN)
options:
  path:
    description: The marker file on the node.
    type: path
    required: true
  record:
    description:
      - The marker to write, a mapping written as JSON (mode 0644).
      - Omitted, the task only reads.
      - Writing what the file already holds changes nothing.
    type: dict
attributes:
  check_mode:
    support: full
    description: In check mode nothing is written; RV(ignore:changed) says whether it would be.
  diff_mode:
    support: none
    description: The result carries the marker before and the record.
"""

EXAMPLES = r"""
- name: Read this boot's id and the last reboot request
  fleetmedic.fleet.request_marker:
    path: /var/lib/fleetmedic/reboot-request.json
  register: marker

- name: Record the request and the boot it was made in
  fleetmedic.fleet.request_marker:
    path: /var/lib/fleetmedic/reboot-request.json
    record:
      request_id: "{{ request_id }}"
      boot_id: "{{ marker.boot_id }}"
"""

RETURN = r"""
previous:
  description: The marker before this task; null when missing, unreadable or not a JSON object.
  returned: always
  type: dict
  sample: {"request_id": "20261129T191333Z-gpu-17-reboot-efff023f", "boot_id": "5f1c..."}
boot_id:
  description: This boot's id (C(/proc/sys/kernel/random/boot_id)), to tell a reboot happened.
  returned: always
  type: str
  sample: 3b6d1f43-8a55-4d4e-9c54-7d4e2e5f0a11
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetmedic.fleet.plugins.module_utils.boot import BOOT_ID, boot_id


def read_marker(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_marker(path, record):
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            record=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    path, record = module.params["path"], module.params["record"]
    boot = boot_id()
    if boot is None:
        module.fail_json(msg="cannot read this boot's id from %s" % BOOT_ID)
    previous = read_marker(path)
    changed = record is not None and record != previous
    if changed and not module.check_mode:
        try:
            write_marker(path, record)
        except OSError as exc:
            module.fail_json(msg="cannot record %s: %s" % (path, exc), previous=previous)
    module.exit_json(changed=changed, previous=previous, boot_id=boot)


if __name__ == "__main__":
    main()
