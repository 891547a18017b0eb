"""GB200 switch-tray Fabric Manager records (issue 39, Fabric Manager as a source): the
published multi-line GPU NVL records make one finding each, judged by their head line,
and their detail lines make none of their own."""

from __future__ import annotations

import io

from fleetmedic.scan import Scanner
from fleetmedic.scan.scanner import is_fabric_log

# A public GB200 runbook's `grep -i "Fatal" fabricmanager.log* -A 11` of an NVOS switch
# tray's Fabric Manager log (the fabricmanager_catalog.yaml source gb200-fm-nvl-record).
RUNBOOK_FATAL = (
    "[Oct 13 2025 18:14:38] [ERROR] [tid 202] Fabric Manager detected GPU NVL Fatal error on :",
    "moduleId : 3",
    "nodeId : 7",
    "partitionId : 4137",
    "gpuGuid : 0xED0A8727AFC3C6F9",
    "portNum : 4",
    "portStatus : 1",
    "errorCode : 0x06",
    "errorSubcode : 0x0E",
    "portDownReasonCode : 0x0A",
    "isErrorFirst : 0",
    "errorStatus : 0x00000000",
)
# phatut/nmx-c-analyzers examples/sample_input_logs.txt (source nmx-c-analyzers)
NMXC_NON_FATAL = (
    "[Jul 19 2025 18:34:55] [ERROR] [tid 192] Fabric Manager detected GPU NVL Non Fatal error on :",
    "moduleId : 1",
    "nodeId : 6",
    "partitionId : 32766",
    "gpuGuid : 0xb0cf0e0300e42e00",
    "portNum : 61",
    "portStatus : 2",
    "errorCode : 0x02",
    "errorSubcode : 0x07",
    "portDownReasonCode : 0x00",
    "isErrorFirst : 1",
    "errorStatus : 0x00000008",
    "errorDebugData : 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000",
    "",
    "[Jul 19 2025 18:34:57] [WARNING] [tid 134] Trunk port failure detected for switch GUID "
    "0xb0cf0e0300e42e00 and switch chassis sn 1825124190179, slot 7 port number 61 port GUID "
    "0xb0cf0e0300e42e00 cage 7.",
)


def both(lines: tuple[str, ...]):
    """The line-by-line and the bulk scan of a copied switch-tray log agree."""
    by_line = [(f.line, f.rule, f.action) for f in Scanner(dedup=False, fabric=True).scan(lines)]
    data = io.BytesIO(("\n".join(lines) + "\n").encode())
    bulk = [(f.line, f.rule, f.action) for f in Scanner(dedup=False, fabric=True).scan_binary(data)]
    assert by_line == bulk
    return by_line


def test_a_switch_tray_log_is_read_as_a_fabric_manager_log():
    assert is_fabric_log("\n".join(RUNBOOK_FATAL))
    assert is_fabric_log("\n".join(NMXC_NON_FATAL))


def test_a_gpu_nvl_fatal_record_is_one_reset_and_its_details_add_nothing():
    assert both(RUNBOOK_FATAL) == [(1, "fm.gpu-nvl-fatal", "reset")]


def test_a_non_fatal_record_is_recorded_and_a_trunk_port_failure_too():
    assert both(NMXC_NON_FATAL) == [
        (1, "fm.gpu-nvl-non-fatal", "monitor"),
        (15, "fm.trunk-port-failure", "monitor"),
    ]
