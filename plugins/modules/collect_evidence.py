#!/usr/bin/python
# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Collect a node's GPU evidence into one tar.gz bundle."""

from __future__ import annotations

DOCUMENTATION = r"""
module: collect_evidence
short_description: Collect command output and log slices from a node into one tar.gz
description:
  - Runs each command (without a shell, each under its own hard timeout) and saves its output,
    copies the tail of each file, writes C(node.json) from O(info) and a C(manifest.json) that
    records what ran, its exit code and time, and what was missing, then packs it all into O(dest).
  - A command whose program is not installed is recorded as missing, not as an error, so one
    list serves NVIDIA nodes (C(nvidia-smi), C(nvidia-bug-report.sh)) and AMD nodes (C(amd-smi),
    C(rocm-smi), C(rocminfo)).
  - It only reads the node; the one file it writes is O(dest) (and, with O(dest_dir), the private
    directory that holds it).
version_added: 0.1.0
author: fleetmedic developers (!UNKNOWN)
options:
  dest:
    description:
      - Path of the bundle to write on the node (a C(.tar.gz)). Its directory must exist.
      - One of O(dest) and O(dest_dir) is required.
    type: path
  dest_dir:
    description:
      - Make a private directory (mode 0700) under this one and write the bundle there, as
        C(<name>.tar.gz); RV(dest) says where. The caller removes that directory once it has the
        bundle (C(dirname) of RV(dest)); when collecting fails, the module removes it itself.
      - Saves the caller a C(tempfile) task, one module run on the node.
    type: path
  name:
    description: Name of the top directory inside the bundle.
    type: str
    default: evidence
  commands:
    description:
      - Commands to run. Each has C(name) (the file name in the bundle), C(argv) (a list; the text
        C({workdir}) is replaced with the bundle's working directory, for tools that write their
        own files, such as C(nvidia-bug-report.sh --output-file)), and optionally C(timeout).
    type: list
    elements: dict
    default: []
  files:
    description:
      - Files to copy. Each is a path, or a dict with C(path), optionally C(name) (in the bundle) and
        C(lines), the number of lines to keep from the end (default O(file_lines)).
      - A missing file is recorded as missing.
    type: list
    elements: raw
    default: []
  file_lines:
    description: Lines kept from the end of each file without its own C(lines) (0 keeps the whole file).
    type: int
    default: 5000
  info:
    description: Data written to C(node.json) in the bundle (labels, taints, annotations, the reason).
    type: dict
    default: {}
  timeout:
    description: Default per-command timeout in seconds.
    type: int
    default: 120
  publish:
    description:
      - Names of commands whose output is also returned in RV(published), decoded as JSON when it is
        JSON (the caller publishes the GPU identity report with C(set_stats) this way, without a
        second run). Outputs over 256 KiB are not returned.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: none
    description: Collecting evidence is the point of the task; it does not run in check mode.
  diff_mode:
    support: none
    description: Nothing to compare; the result says what happened.
"""

EXAMPLES = r"""
- name: Collect evidence
  fleetmedic.fleet.collect_evidence:
    dest: /tmp/evidence.tar.gz
    name: node-2-20260101T000000Z
    commands:
      - {name: nvidia-smi-q.txt, argv: [nvidia-smi, -q], timeout: 120}
      - {name: fleetmedic-check.json, argv: [fleetmedic, check, --json]}
    files:
      - {path: /var/log/kern.log, lines: 5000}
    info:
      node: node-2
"""

RETURN = r"""
dest:
  description: Path of the bundle on the node.
  returned: always
  type: str
size:
  description: Size of the bundle in bytes.
  returned: always
  type: int
manifest:
  description: One entry per command and file, with C(rc), C(seconds), C(missing) and C(timed_out).
  returned: always
  type: list
  elements: dict
published:
  description: The output of each command named in O(publish) that ran, by name (JSON decoded).
  returned: always
  type: dict
boot_id:
  description:
    - The node's kernel boot id when the evidence was collected (null when unreadable).
    - The controller checks a later reboot against it.
  returned: always
  type: str
"""

import json
import os
import shutil
import socket
import tarfile
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetmedic.fleet.plugins.module_utils import fleetmedic_checks as fc
from ansible_collections.fleetmedic.fleet.plugins.module_utils.boot import boot_id


def safe_name(name):
    name = os.path.basename(str(name).strip()) or "unnamed"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def tail(path, lines, out_path, chunk=65536):
    """Copy the last ``lines`` lines of ``path`` (all when 0) without reading it all."""
    with open(path, "rb") as src, open(out_path, "wb") as dst:
        if lines <= 0:
            shutil.copyfileobj(src, dst)
            return
        src.seek(0, os.SEEK_END)
        pos = src.tell()
        data = b""
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(chunk, pos)
            pos -= step
            src.seek(pos)
            data = src.read(step) + data
        dst.write(b"\n".join(data.split(b"\n")[-lines - 1 :]))


def run_command(spec, workdir, default_timeout):
    name = safe_name(spec.get("name") or spec["argv"][0])
    argv = [str(a).replace("{workdir}", workdir) for a in spec["argv"]]
    timeout = int(spec.get("timeout") or default_timeout)
    entry = {"name": name, "argv": argv, "timeout": timeout}
    exe = fc.which(argv[0])
    if exe is None:
        entry["missing"] = True
        return entry
    out_path = os.path.join(workdir, name)
    with open(out_path, "wb") as out, open(out_path + ".stderr", "wb") as err:
        try:
            rc, _o, _e, seconds, timed_out = fc.run(
                [exe] + argv[1:], timeout, stdout=out, stderr=err
            )
        except OSError as exc:
            rc, seconds, timed_out = None, 0.0, False
            entry["error"] = str(exc)
    if os.path.getsize(out_path + ".stderr") == 0:
        os.unlink(out_path + ".stderr")
    entry.update(rc=rc, seconds=round(seconds, 3), timed_out=timed_out)
    return entry


def copy_file(spec, workdir):
    path = spec["path"]
    name = safe_name(spec.get("name") or path.strip("/").replace("/", "_"))
    entry = {"name": name, "path": path, "lines": int(spec.get("lines") or 0)}
    if not os.path.isfile(path):
        entry["missing"] = True
        return entry
    try:
        tail(path, entry["lines"], os.path.join(workdir, name))
    except OSError as exc:
        entry["error"] = str(exc)
    return entry


PUBLISH_LIMIT = 256 * 1024


def read_output(path):
    """A command's saved output for O(publish): JSON decoded when it is; None when it did
    not run or is too big to return."""
    try:
        if os.path.getsize(path) > PUBLISH_LIMIT:
            return None
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path"),
            dest_dir=dict(type="path"),
            name=dict(type="str", default="evidence"),
            commands=dict(type="list", elements="dict", default=[]),
            files=dict(type="list", elements="raw", default=[]),
            file_lines=dict(type="int", default=5000),
            info=dict(type="dict", default={}),
            timeout=dict(type="int", default=120),
            publish=dict(type="list", elements="str", default=[]),
        ),
        mutually_exclusive=[("dest", "dest_dir")],
        required_one_of=[("dest", "dest_dir")],
        supports_check_mode=False,
    )
    p = module.params
    for spec in p["commands"]:
        if not isinstance(spec.get("argv"), list) or not spec["argv"]:
            module.fail_json(msg="each command needs a non-empty argv list: %r" % (spec,))
    files = []
    for spec in p["files"]:
        spec = {"path": spec} if isinstance(spec, str) else spec
        if not isinstance(spec, dict) or not spec.get("path"):
            module.fail_json(msg="each file needs a path: %r" % (spec,))
        files.append(dict({"lines": p["file_lines"]}, **spec))
    top = safe_name(p["name"])
    private = None
    if p["dest_dir"]:
        if not os.path.isdir(p["dest_dir"]):
            module.fail_json(msg="dest_dir %s does not exist" % p["dest_dir"])
        private = tempfile.mkdtemp(prefix="fleetmedic-evidence.", dir=p["dest_dir"])
        p["dest"] = os.path.join(private, top + ".tar.gz")
    elif not os.path.isdir(os.path.dirname(p["dest"]) or "."):
        module.fail_json(msg="directory of dest %s does not exist" % p["dest"])
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="fleetmedic-evidence-", dir=os.path.dirname(p["dest"]) or None)
    try:
        workdir = os.path.join(tmp, top)
        cmd_dir = os.path.join(workdir, "commands")
        file_dir = os.path.join(workdir, "files")
        os.makedirs(cmd_dir)
        os.makedirs(file_dir)
        manifest = {
            "commands": [run_command(s, cmd_dir, p["timeout"]) for s in p["commands"]],
            "files": [copy_file(s, file_dir) for s in files],
        }
        manifest.update(
            hostname=socket.gethostname(),
            boot_id=boot_id(),
            started=started,
            seconds=round(time.time() - started, 3),
        )
        with open(os.path.join(workdir, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
        with open(os.path.join(workdir, "node.json"), "w") as f:
            json.dump(p["info"], f, indent=2, sort_keys=True, default=str)
        published = {
            name: value
            for name in p["publish"]
            for value in [read_output(os.path.join(cmd_dir, safe_name(name)))]
            if value is not None
        }
        partial = p["dest"] + ".part"
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(workdir, arcname=top)
        os.chmod(partial, 0o600)
        os.replace(partial, p["dest"])
    except OSError as exc:
        if private:
            shutil.rmtree(private, ignore_errors=True)
        module.fail_json(msg="collecting evidence failed: %s" % exc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    flat = [dict(e, kind="command") for e in manifest["commands"]] + [
        dict(e, kind="file") for e in manifest["files"]
    ]
    module.exit_json(
        changed=True,
        dest=p["dest"],
        size=os.path.getsize(p["dest"]),
        manifest=flat,
        published=published,
        boot_id=manifest["boot_id"],
    )


if __name__ == "__main__":
    main()
