"""One node read inside the calling process, through the Slurm library the client tools use
(ctypes), for bench/xid_to_drain_slurm.py: what a fence decided on a fresh read would cost
if the read needed no process of its own.

Not a product path, on purpose: fleetmedic reads a node with ``sinfo -n`` (a process,
~8 ms here) because the library's structures change with every release (``node_info_t``
has five layouts from 22.05 to 25.11) and the client tools link ``libslurmfull``, a private
library with no stable ABI. Loading it into the agent would put a release-matched struct
layout, and a crash in C, inside a safety-critical process. This measures only the
request, with the record freed unread, so no layout is assumed: the figure is the cost of
REQUEST_NODE_INFO_SINGLE in-process, the floor such a design could reach.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable

SHOW_ALL = 1  # slurm.h: show_flags, every node including hidden ones


def library_of(tool: str = "sinfo") -> str:
    """The Slurm library ``tool`` is linked with (``ldd``), or "" when none is."""
    path = shutil.which(tool)
    if not path:
        return ""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
    m = re.search(r"=>\s*(\S*libslurm(?:full)?\.so\S*)", out)
    return m[1] if m else ""


def inprocess_reader(env: dict[str, str], first: str) -> tuple[Callable[[str], float] | None, str]:
    """``(read, "")``: ``read(name)`` asks slurmctld for one node in this process and
    returns the seconds it took; or ``(None, why)`` when the library cannot be used here.
    The node ``first`` is read once before (that request loads the auth plugin)."""
    lib_path = library_of()
    if not lib_path:
        return None, "no libslurm linked by sinfo"
    os.environ.update(env)  # slurm_init reads SLURM_CONF
    try:
        # RTLD_GLOBAL: the library's plugins (auth_munge.so) resolve its symbols
        lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)
        lib.slurm_init(None)
    except (OSError, AttributeError) as exc:
        return None, f"{lib_path}: {exc}"
    lib.slurm_load_node_single.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_char_p,
        ctypes.c_uint16,
    ]
    lib.slurm_free_node_info_msg.argtypes = [ctypes.c_void_p]

    def read(name: str) -> float:
        msg = ctypes.c_void_p()
        t0 = time.perf_counter()
        rc = lib.slurm_load_node_single(ctypes.byref(msg), name.encode(), SHOW_ALL)
        took = time.perf_counter() - t0
        if rc != 0:
            raise RuntimeError(f"slurm_load_node_single({name}) returned {rc}")
        lib.slurm_free_node_info_msg(msg)
        return took

    try:
        read(first)
    except RuntimeError as exc:
        return None, str(exc)
    return read, ""
