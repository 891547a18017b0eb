"""The process that reads Slurm nodes through the Slurm library for
:mod:`fleetmedic.adapters.slurmlib`: its crash boundary. A crash, a hang or a leak in C
ends here, never in the agent. Only the standard library is imported: it starts in
about 50 ms and runs on the node's own Python.

    python -m fleetmedic.adapters.slurmlibchild /usr/lib/.../libslurmfull.so

The library is the one the client tools link (``slurmlib.library_of``). The process calls
``slurm_init`` and answers one JSON line: ``{"ready": <slurm_api_version>}``, or
``{"error": ...}`` before it exits 2. Then, for each node name on stdin, it answers one
JSON line: ``{"text": ...}`` (the node as ``scontrol show node`` prints it:
``slurm_sprint_node_table``), ``{"text": null}`` (slurmctld knows no such node), or
``{"error": ...}`` (slurmctld's error, by ``slurm_strerror``).

Seven functions of the public API (slurm.h: :func:`open_library` lists them), the same
from 22.05 to 26.05 (in the libraries of all three, checked with nm), and one structure,
of which only the first three members are read: ``node_info_msg_t``'s ``last_update``,
``record_count`` and ``node_array``. Those are unchanged from 22.05 to 26.05. The node
record itself (``node_info_t``, five layouts over those releases) is never read here. The
library formats it, and :func:`fleetmedic.adapters.slurmlib.parse_node_text` reads the
text.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

SHOW_ALL = 1  # slurm.h show_flags: hidden nodes too, as sinfo -n N shows them


class NodeInfoMsg(ctypes.Structure):
    """The head of slurm.h's ``node_info_msg_t`` (see the module doc)."""

    _fields_ = [
        ("last_update", ctypes.c_int64),  # time_t
        ("record_count", ctypes.c_uint32),
        ("node_array", ctypes.c_void_p),  # node_info_t *, handed back to the library
    ]


def _say(out, msg: dict) -> None:
    out.write(json.dumps(msg) + "\n")
    out.flush()


def open_library(path: str):
    """The library at ``path``, initialised (reads SLURM_CONF), with argument types set."""
    # RTLD_GLOBAL: the library's plugins (auth_munge.so) resolve its symbols
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL, use_errno=True)
    msg_pp = ctypes.POINTER(ctypes.POINTER(NodeInfoMsg))
    for name, args, res in (
        ("slurm_init", [ctypes.c_char_p], None),
        ("slurm_api_version", [], ctypes.c_long),
        ("slurm_load_node_single", [msg_pp, ctypes.c_char_p, ctypes.c_uint16], ctypes.c_int),
        ("slurm_sprint_node_table", [ctypes.c_void_p, ctypes.c_int], ctypes.c_void_p),
        ("slurm_free_node_info_msg", [ctypes.POINTER(NodeInfoMsg)], None),
        ("slurm_xfree_ptr", [ctypes.c_void_p], None),
        ("slurm_strerror", [ctypes.c_int], ctypes.c_char_p),
    ):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    lib.slurm_init(None)
    return lib


def read_node(lib, name: str) -> dict:
    """One node: REQUEST_NODE_INFO_SINGLE, formatted by the library."""
    msg = ctypes.POINTER(NodeInfoMsg)()
    ctypes.set_errno(0)
    if lib.slurm_load_node_single(ctypes.byref(msg), name.encode(), SHOW_ALL) != 0:
        err = ctypes.get_errno()
        return {"error": (lib.slurm_strerror(err) or b"").decode(errors="replace") or str(err)}
    try:
        if not msg or msg.contents.record_count == 0:
            return {"text": None}
        raw = lib.slurm_sprint_node_table(msg.contents.node_array, 0)
        try:
            return {"text": ctypes.string_at(raw).decode(errors="replace") if raw else None}
        finally:
            lib.slurm_xfree_ptr(raw)
    finally:
        if msg:
            lib.slurm_free_node_info_msg(msg)


def main(argv: list[str]) -> int:
    out = sys.stdout
    if len(argv) != 1:
        _say(out, {"error": "usage: python -m fleetmedic.adapters.slurmlibchild LIBRARY"})
        return 2
    try:
        lib = open_library(argv[0])
        version = lib.slurm_api_version()
    except (OSError, AttributeError) as exc:
        _say(out, {"error": f"{argv[0]}: {exc}"})
        return 2
    # Ctrl-C in the agent's terminal reaches this process group too: the agent decides
    # when this ends (end of input, or it kills it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _say(out, {"ready": version, "pid": os.getpid()})
    for line in sys.stdin:
        _say(out, read_node(lib, line.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
