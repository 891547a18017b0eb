#!/usr/bin/python
# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Read a node's GPU partition layout (MIG, AMD compute and memory partitions) and compare
it with a recorded one."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_partition
short_description: Read a node's GPU partition layout and say how it differs from a recorded one
description:
  - "NVIDIA: MIG mode per GPU (C(nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending))
    and the MIG devices of each GPU by profile (C(nvidia-smi -L), one line per MIG device)."
  - "AMD: the compute (SPX, DPX, TPX, QPX, CPX) and memory (NPS1 ... NPS8) partition of each GPU
    (C(amd-smi static --partition --json))."
  - With O(want), also one line naming every GPU whose layout differs from it (empty when none).
  - "With O(record_path), keeps the layout there as a record of O(request_id) (JSON:
    C(request_id), C(at), C(summary), C(layout)) and returns it, also as RV(stdout) (one line),
    in one task: a record of the same request already there is returned instead (after a
    repair the layout may be gone), and a layout that cannot be read records nothing (the task
    does not fail: a node under repair may not answer)."
  - Changes no GPU; the C(fleetmedic.fleet.gpu_partition) role applies layouts.
version_added: 0.1.0
author: fleetmedic developers (!UNKNOWN)
options:
  vendor:
    description: C(nvidia) or C(amd).
    type: str
    required: true
    choices: [nvidia, amd]
  want:
    description: A layout this module returned before (its RV(layout)), to compare with.
    type: dict
  nvidia_smi:
    description: The nvidia-smi program.
    type: str
    default: nvidia-smi
  amd_smi:
    description: The amd-smi program.
    type: str
    default: amd-smi
  timeout:
    description: Seconds before a tool counts as hung (the task fails).
    type: int
    default: 60
  record_path:
    description: Keep the layout in this file on the node (see the description).
    type: path
  request_id:
    description: The request the record belongs to; empty records on every run.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Reads only; in check mode no record is written.
  diff_mode:
    support: none
    description: RV(differs) says what differs.
"""

EXAMPLES = r"""
- name: Read the layout
  fleetmedic.fleet.gpu_partition:
    vendor: nvidia
  register: layout

- name: Compare it with the record
  fleetmedic.fleet.gpu_partition:
    vendor: nvidia
    want: "{{ layout.layout }}"
  register: now
  failed_when: now.differs | length > 0
"""

RETURN = r"""
layout:
  description:
    - "C(vendor), C(partitioned) (any GPU in MIG mode, or in a compute or memory partition other
      than SPX/NPS1) and C(gpus): per GPU its C(index) and, on NVIDIA, C(mig) (mode on),
      C(mig_pending) and C(devices) (MIG devices by profile), on AMD C(compute) and C(memory)."
  returned: always
  type: dict
  sample: {"vendor": "nvidia", "partitioned": true, "gpus": [{"index": 0, "mig": true, "mig_pending": true, "devices": {"3g.40gb": 2}}]}
partitioned:
  description: True when any GPU is partitioned.
  returned: always
  type: bool
summary:
  description: The layout in one line.
  returned: always
  type: str
  sample: "GPU 0: MIG 3g.40gb x2; GPU 1: MIG 3g.40gb x2"
differs:
  description: With O(want), one line naming what differs; empty when nothing does.
  returned: always
  type: str
  sample: "GPU 0: want MIG 3g.40gb x2, have MIG off"
record:
  description: With O(record_path), the record kept (empty when the layout could not be read).
  returned: when O(record_path) is set
  type: dict
stdout:
  description: With O(record_path), the record as one JSON line (empty when none was kept).
  returned: when O(record_path) is set
  type: str
unreadable:
  description: With O(record_path), why the layout could not be read (empty when it could).
  returned: when O(record_path) is set
  type: str
"""

import functools
import json
import os
import re
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+\d+:")
GPU_LINE = re.compile(r"^GPU\s+(\d+):")


class ToolError(Exception):
    pass


def run(argv, timeout):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ToolError(f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{' '.join(argv)} did not answer within {timeout}s") from None
    if p.returncode != 0:
        said = (p.stdout.strip() or p.stderr.strip()).splitlines()
        raise ToolError(f"{' '.join(argv)}: exit {p.returncode}: {said[0] if said else ''}")
    return p.stdout


def read_nvidia(smi, timeout):
    modes = run(
        [smi, "--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader"],
        timeout,
    )
    gpus = []
    for line in modes.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            gpus.append(
                {
                    "index": int(parts[0]),
                    "mig": parts[1] == "Enabled",
                    "mig_pending": parts[2] == "Enabled",
                    "devices": {},
                }
            )
    by_index = {g["index"]: g for g in gpus}
    current = None
    for line in run([smi, "-L"], timeout).splitlines():
        m = GPU_LINE.match(line)
        if m:
            current = by_index.get(int(m.group(1)))
            continue
        m = MIG_LINE.match(line)
        if m and current is not None:
            current["devices"][m.group(1)] = current["devices"].get(m.group(1), 0) + 1
    return {
        "vendor": "nvidia",
        "partitioned": any(g["mig"] or g["mig_pending"] for g in gpus),
        "gpus": gpus,
    }


def read_amd(amd_smi, timeout):
    text = run([amd_smi, "static", "--partition", "--json"], timeout)
    try:
        data = json.loads(text)
    except ValueError:
        raise ToolError("amd-smi static --partition --json printed no JSON") from None
    rows = data.get("gpu_data", []) if isinstance(data, dict) else data
    gpus = []
    for row in rows:
        part = row.get("partition") or {}
        gpus.append(
            {
                "index": int(row.get("gpu", len(gpus))),
                "compute": str(part.get("compute_partition", "N/A")).upper(),
                "memory": str(part.get("memory_partition", "N/A")).upper(),
            }
        )
    return {
        "vendor": "amd",
        "partitioned": any(
            g["compute"] not in ("SPX", "N/A") or g["memory"] not in ("NPS1", "N/A") for g in gpus
        ),
        "gpus": gpus,
    }


def describe(gpu):
    if "compute" in gpu:
        return f"{gpu['compute']}/{gpu['memory']}"
    if not gpu.get("mig"):
        return "MIG off"
    devs = ", ".join(f"{p} x{n}" for p, n in sorted(gpu.get("devices", {}).items()))
    return f"MIG {devs or 'on, no instances'}"


def summary(layout):
    return "; ".join(f"GPU {g['index']}: {describe(g)}" for g in layout["gpus"]) or "no GPUs"


def differs(want, have):
    """One line naming each GPU whose layout is not the recorded one."""
    if want.get("vendor") != have["vendor"]:
        return f"recorded for {want.get('vendor')}, node is {have['vendor']}"
    mine = {g["index"]: g for g in have["gpus"]}
    out = []
    for g in want.get("gpus") or []:
        h = mine.get(g["index"])
        if h is None:
            out.append(f"GPU {g['index']}: want {describe(g)}, GPU missing")
        elif describe(g) != describe(h):
            out.append(f"GPU {g['index']}: want {describe(g)}, have {describe(h)}")
    return "; ".join(out)


def kept_record(path, request_id):
    """The record of ``request_id`` already at ``path`` (None: none)."""
    if not request_id:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, ValueError):
        return None
    if isinstance(old, dict) and old.get("request_id") == request_id and "layout" in old:
        return old
    return None


def record(module, read):
    p = module.params
    path, rid = p["record_path"], p["request_id"]
    old = kept_record(path, rid)
    if old is not None:
        module.exit_json(changed=False, record=old, stdout=json.dumps(old), unreadable="")
    try:
        layout = read()
    except ToolError as exc:
        module.exit_json(changed=False, record={}, stdout="", unreadable=str(exc))
    rec = {
        "request_id": rid,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": summary(layout),
        "layout": layout,
    }
    if not module.check_mode:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(rec, f)
        os.replace(tmp, path)
    module.exit_json(changed=True, record=rec, stdout=json.dumps(rec), unreadable="")


def main():
    module = AnsibleModule(
        argument_spec={
            "vendor": {"type": "str", "required": True, "choices": ["nvidia", "amd"]},
            "want": {"type": "dict"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "amd_smi": {"type": "str", "default": "amd-smi"},
            "timeout": {"type": "int", "default": 60},
            "record_path": {"type": "path"},
            "request_id": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["vendor"] == "nvidia":
        read = functools.partial(read_nvidia, p["nvidia_smi"], p["timeout"])
    else:
        read = functools.partial(read_amd, p["amd_smi"], p["timeout"])
    if p["record_path"]:
        record(module, read)
    try:
        layout = read()
    except ToolError as exc:
        module.fail_json(msg=f"cannot read the GPU partition layout: {exc}")
    diff = differs(p["want"], layout) if p["want"] else ""
    module.exit_json(
        changed=False,
        layout=layout,
        partitioned=layout["partitioned"],
        summary=summary(layout),
        differs=diff,
    )


if __name__ == "__main__":
    main()
