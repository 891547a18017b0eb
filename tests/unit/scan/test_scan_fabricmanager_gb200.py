"""GB200 switch-tray Fabric Manager records (issue 39, Fabric Manager as a source): the
published multi-line GPU NVL records make one finding each, judged by their head line;
their detail lines make none of their own but are read into it (scan/fmrecord.py): the
GPU's GUID, its port, the compute tray and the error decoded to its NVLink5 Xid."""

from __future__ import annotations

import dataclasses
import io

import pytest

from fleetmedic.scan import Scanner, catalog, fmrecord, prefilter
from fleetmedic.scan.scanner import is_fabric_log
from fleetmedic.scan.stream import journal_line

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
# The same file's second record (phatut/nmx-c-analyzers examples/sample_input_logs.txt
# @70f8d9f, lines 20-33), whose pair that tool's own table decodes to Xid 150
# (examples/sample_table_with_gpu_errors.txt: "0x03/0x01 XID-150").
NMXC_FATAL = (
    "[Jul 19 2025 18:34:56] [ERROR] [tid 193] Fabric Manager detected GPU NVL Fatal error on :",
    "moduleId : 2",
    "nodeId : 7",
    "partitionId : 32766",
    "gpuGuid : 0xb0cf0e0300e31440",
    "portNum : 61",
    "portStatus : 3",
    "errorCode : 0x03",
    "errorSubcode : 0x01",
    "portDownReasonCode : 0x01",
    "isErrorFirst : 1",
    "errorStatus : 0x00000010",
    "errorDebugData : 0x00001234 0x00005678 0x00000000 0x00000000 0x00000000 0x00000000",
    "",
)


def findings(lines: tuple[str, ...], chunk_size: int = prefilter.CHUNK_SIZE, dedup=False):
    """The line-by-line and the bulk scan of a copied switch-tray log agree (on the
    findings' messages too, where the details go); the line-by-line ones."""
    by_line = list(Scanner(dedup=dedup, fabric=True).scan(lines))
    data = io.BytesIO(("\n".join(lines) + "\n").encode())
    bulk = list(Scanner(dedup=dedup, fabric=True).scan_binary(data, chunk_size=chunk_size))
    assert [(f.line, f.rule, f.action, f.message) for f in by_line] == [
        (f.line, f.rule, f.action, f.message) for f in bulk
    ]
    return by_line


def both(lines: tuple[str, ...]):
    return [(f.line, f.rule, f.action) for f in findings(lines)]


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


def test_a_records_detail_lines_make_its_finding_name_the_gpu_port_tray_and_xid():
    [head, _trunk] = findings(NMXC_NON_FATAL)
    assert head.message == (
        "Fabric Manager detected GPU NVL Non Fatal error on : errorCode 0x02/0x07 = Xid 149 "
        "NETIR (port down event); gpuGuid 0xb0cf0e0300e42e00 port 61; node 6 module 1"
    )
    assert len(head.message) <= 160  # what the node's annotation keeps of it
    [fatal] = findings(NMXC_FATAL)
    assert (fatal.line, fatal.rule, fatal.action) == (1, "fm.gpu-nvl-fatal", "reset")
    assert "errorCode 0x03/0x01 = Xid 150 MSE (timeout error)" in fatal.message
    assert "gpuGuid 0xb0cf0e0300e31440 port 61; node 7 module 2" in fatal.message


def test_an_unknown_error_code_keeps_the_record_and_says_so():
    """The runbook's 0x06/0x0E is in no published decode table (nmx-c-analyzers falls
    back to Xid 149 for every pair it lacks; we say unknown instead)."""
    [found] = findings(RUNBOOK_FATAL)
    assert (found.rule, found.action) == ("fm.gpu-nvl-fatal", "reset")
    assert found.message == (
        "Fabric Manager detected GPU NVL Fatal error on : unknown errorCode 0x06/0x0E; "
        "gpuGuid 0xED0A8727AFC3C6F9 port 4; node 7 module 3"
    )


def test_the_decoded_xid_never_lowers_the_head_and_raises_only_by_its_catalog_entry():
    xids = catalog.load().xids
    non_fatal = findings(NMXC_NON_FATAL)[0]
    assert non_fatal.action == "monitor"  # Xid 149's own entry says monitor: nothing stronger
    assert xids[149].action == "monitor"
    head = findings(NMXC_NON_FATAL[:1])[0]
    fatal_head = findings(NMXC_FATAL[:1])[0]
    details = {"errorCode": "0x02", "errorSubcode": "0x08", "gpuGuid": "0x1"}
    assert fmrecord.decorate(fatal_head, details, xids).action == "reset"  # never lowered
    raised = {145: dataclasses.replace(xids[145], action="reboot")}
    assert fmrecord.decorate(head, details, raised).action == "reboot"
    assert "Xid 145 RLW (recovery event)" in fmrecord.decorate(head, details, xids).message


@pytest.mark.parametrize(
    ("cut", "said"),
    [
        (5, "no errorCode; gpuGuid 0xED0A8727AFC3C6F9; node 7 module 3"),
        (9, "errorCode 0x06/0x0E; gpuGuid 0xED0A8727AFC3C6F9 port 4; node 7 module 3"),
    ],
)
def test_a_record_cut_by_the_end_of_the_log_still_gives_its_finding(cut, said):
    [found] = findings(RUNBOOK_FATAL[:cut])
    assert (found.line, found.rule, found.action) == (1, "fm.gpu-nvl-fatal", "reset")
    assert found.message.endswith(said)


def test_a_record_cut_by_the_next_one_gives_both_findings():
    """The first record loses its last lines (copied logs are cut like this); the next
    record's head ends it."""
    lines = NMXC_NON_FATAL[:6] + NMXC_FATAL
    first, second = findings(lines)
    assert (first.line, first.rule, first.action) == (1, "fm.gpu-nvl-non-fatal", "monitor")
    assert first.message.endswith(
        "no errorCode; gpuGuid 0xb0cf0e0300e42e00 port 61; node 6 module 1"
    )
    assert (second.line, second.rule, second.action) == (7, "fm.gpu-nvl-fatal", "reset")
    assert "Xid 150" in second.message


def test_a_timestamped_line_ends_a_record_even_when_it_reads_key_colon_value():
    lines = (
        *NMXC_FATAL[:3],
        "[Jul 19 2025 18:34:56] [INFO] [tid 7] gpuGuid : 0xdead",
        *NMXC_FATAL[3:],
    )
    [found] = findings(lines)
    assert "0xdead" not in found.message and "0xb0cf0e0300e31440" not in found.message
    assert found.message.endswith("no errorCode; node 7 module 2")


def test_a_record_holds_at_most_max_details_lines():
    padding = tuple(f"extra{i} : {i}" for i in range(fmrecord.MAX_DETAILS))
    lines = (*NMXC_FATAL[:2], *padding, *NMXC_FATAL[2:])
    [found] = findings(lines)
    assert "module 2" in found.message and "gpuGuid" not in found.message


def test_records_of_two_gpus_are_two_findings_with_dedup_on():
    """Without the details every GPU NVL record had one identity: a second GPU's fault
    within the dedup window was dropped."""
    twice = NMXC_FATAL + NMXC_FATAL
    other = NMXC_FATAL + tuple(
        line.replace("0xb0cf0e0300e31440", "0xb0cf0e0300e42e00") for line in NMXC_FATAL
    )
    assert len(findings(twice, dedup=True)) == 1
    assert len(findings(other, dedup=True)) == 2


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 333])
def test_the_bulk_scan_reads_a_record_across_chunk_boundaries(chunk_size):
    lines = NMXC_NON_FATAL + NMXC_FATAL + RUNBOOK_FATAL
    assert len(findings(lines, chunk_size=chunk_size)) == 4


def test_a_byte_range_brings_the_rest_of_a_record_past_its_end():
    """``fleetmedic scan -j N``: a worker whose range ends inside a record reads the rest
    of its detail lines (each asks for the next) so the record stays whole."""
    blob = ("\n".join(NMXC_FATAL) + "\n").encode()
    limit = len(NMXC_FATAL[0]) + len(NMXC_FATAL[1]) + 2  # the head and one detail line
    scanner = Scanner(dedup=False, fabric=True)
    generator = prefilter.candidates(
        io.BytesIO(blob), scanner._byte_triggers(), limit=limit, follow=scanner._byte_cuts()
    )
    got = list(generator)
    assert [n for n, _ in got] == list(range(1, 15))  # through the blank line that ends it


def test_a_follower_ends_a_record_when_the_log_goes_quiet():
    scanner = Scanner(dedup=False, fabric=True)
    assert [f for line in NMXC_FATAL[:-1] for f in scanner.feed(line)] == []
    [found] = scanner.expire()
    assert "Xid 150" in found.message and scanner.expire() == []
    assert scanner.feed(NMXC_FATAL[-1]) == [] and scanner.flush() == []


def test_a_record_the_journal_kept_as_one_message_is_read_the_same():
    """Logged through the journal, the record is one message with newlines, which our
    journal reader gives as one line (stream.journal_line)."""
    record = {
        "MESSAGE": "\n".join(NMXC_FATAL[:-1]),
        "SYSLOG_IDENTIFIER": "nv-fabricmanager",
        "_HOSTNAME": "tray1",
        "__REALTIME_TIMESTAMP": "1752950096000000",
        "PRIORITY": "3",
    }
    [found] = findings((journal_line(record),))
    assert (found.rule, found.action) == ("fm.gpu-nvl-fatal", "reset")
    assert found.message.endswith(
        "GPU NVL Fatal error on : errorCode 0x03/0x01 = Xid 150 MSE (timeout error); "
        "gpuGuid 0xb0cf0e0300e31440 port 61; node 7 module 2"
    )
