"""The driver's own words decide (issue 39 item 1): where a line states its severity or
the recovery it needs, that sets the action's floor; the catalog may raise it, never lower
a fence below it. Multi-line records are joined before they are judged."""

from __future__ import annotations

import io

import pytest

from fleetmedic.scan import Scanner, load_catalog

CAT = load_catalog()


def scan(*lines: str):
    return list(Scanner(dedup=False).scan(list(lines)))


def bulk(*lines: str):
    data = ("\n".join(lines) + "\n").encode()
    return list(Scanner(dedup=False).scan_binary(io.BytesIO(data)))


def sxid(code: int, rest: str) -> str:
    return f"nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): {code}, {rest}"


# published SXid lines: gpud's tests (12028), Red Hat solution 6619941 via gpud (20034),
# the MENTHOS data set on Hugging Face (19084, "Severity 5" on 10002)
@pytest.mark.parametrize(
    "line,action",
    [
        (
            "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
            "monitor",
        ),
        (
            "nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)",
            "monitor",
        ),
        (
            "[131453.740743] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
            "reset",
        ),
    ],
)
def test_a_published_sxid_line_is_judged_by_its_own_word(line, action):
    (f,) = scan(line)
    assert (f.kind, f.action) == ("sxid", action)


@pytest.mark.parametrize("code", sorted(CAT.sxids))
def test_a_non_fatal_sxid_never_fences_and_a_fatal_one_always_does(code):
    """Whatever the catalog entry says: the printed word is the driver's. A fatal word
    resets the GPUs; the guide's always-fatal table (Table 23) raises it to a reboot."""
    (quiet,) = scan(sxid(code, "Non-fatal, Link 03 some error (First)"))
    assert quiet.action in ("none", "monitor"), code
    (loud,) = scan(sxid(code, "Fatal, Link 03 some error (First)"))
    always = CAT.sxids[code].severity == "always_fatal"
    assert loud.action == ("reboot" if always else "reset"), code
    (fixed,) = scan(sxid(code, "Correctable, Link 03 some error"))
    assert fixed.action == "none", code


def test_an_sxid_no_catalog_lists_is_judged_by_its_word_not_a_count():
    new = 25999
    assert new not in CAT.sxids and new not in CAT.driver_sxids
    assert scan(sxid(new, "Fatal, Link 01 a newer error"))[0].action == "reset"
    assert scan(sxid(new, "Non-fatal, Link 01 a newer error"))[0].action == "monitor"
    assert scan(sxid(new, "Data {0x0, 0x1}"))[0].action == "monitor"


def test_the_engine_line_carries_the_severity_too():
    # NVSWITCH_ERROR_SEVERITY_TYPE: 0 non-fatal, 1 fatal
    assert (
        scan(sxid(10002, "Severity 1 Engine instance 00 Sub-engine instance 00"))[0].action
        == "reset"
    )
    assert (
        scan(sxid(10002, "Severity 0 Engine instance 00 Sub-engine instance 00"))[0].action
        == "monitor"
    )


def test_a_wordless_line_of_a_code_only_the_driver_lists_takes_the_driver_severity():
    fatal = next(
        c
        for c, (_, sev) in sorted(CAT.driver_sxids.items())
        if sev == "fatal" and c not in CAT.sxids
    )
    (f,) = scan(sxid(fatal, "Data {0x00000001, 0x00000002}"))
    assert (f.action, f.rule) == ("reset", f"sxid.{fatal}")


@pytest.mark.parametrize(
    "text,action,rule",
    [
        ("94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No", "monitor", "xid.94"),
        (
            "94, pid=7194, Contained: CE User Channel (0x9). RST: Yes, D-RST: No",
            "reset",
            "xid.94.rst",
        ),
        ("94, pid=7194, Contained: SM (0x1). RST: No, D-RST: Yes", "reset", "xid.94.d-rst"),
        # a rule may raise above the word: Xid 95's bucket is RESET_GPU even when RST says No
        ("95, pid=7194, Uncontained: FBHUB. RST: No, D-RST: No", "reset", "xid.95"),
    ],
)
def test_xid_94_95_reset_words(text, action, rule):
    (f,) = scan(f"NVRM: Xid (PCI:0000:01:00 GPU-I:05): {text}")
    assert (f.action, f.rule) == (action, rule)


def test_nvlink5_fatal_is_a_floor_and_status_bits_are_decoded_one_by_one():
    # TLW errorStatus 0x5 = 0x1 (IGNORE) | 0x4 (RESET_GPU): the worst bit decides
    (f,) = scan(
        "NVRM: Xid (PCI:0018:01:00): 146, TLW_RX Nonfatal XC0 i0 Link 3 (0x00000001 0x00000005 0x0)"
    )
    assert (f.action, f.bucket) == ("reset", "RESET_GPU")
    # a decoded IGNORE row that the driver prints Fatal: the word is the floor
    (f,) = scan(
        "NVRM: Xid (PCI:0018:01:00): 147, TREX Fatal XC0 i0 Link 3 (0x00000001 0x00000001 0x0)"
    )
    assert f.action == "reset"
    (f,) = scan(
        "NVRM: Xid (PCI:0018:01:00): 147, TREX Nonfatal XC0 i0 Link 3 (0x00000001 0x00000001 0x0)"
    )
    assert f.action == "none"


WRAPPED_154 = (
    "[  931.482711] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to",
    "0x2 (Node Reboot Required)",
)


@pytest.mark.parametrize("read", [scan, bulk])
def test_a_wrapped_xid_154_is_joined_and_read_from_its_new_value(read):
    (f,) = read(*WRAPPED_154)
    assert (f.code, f.action, f.rule, f.line) == (154, "reboot", "xid.154.0x2", 1)
    # split before the "to": the old value must not be read as the new one
    (g,) = read(
        "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None)",
        "to 0x1 (GPU Reset Required)",
    )
    assert g.action == "reset"


def test_a_cut_xid_154_without_its_continuation_is_not_read_as_its_old_value():
    (f,) = scan(WRAPPED_154[0], "[  931.482800] NVRM: something else entirely")
    assert f.rule == "xid.154.unknown" and f.action == CAT.xid154_unknown_action
    (f,) = scan(WRAPPED_154[0])  # the end of the input flushes it
    assert f.rule == "xid.154.unknown"


# published: ishitatsuyuki/acominer issue 9 (dmesg) and ROCm issue 640 (journal)
SPLIT_SMU = (
    "[442366.409593] amdgpu: [powerplay] ",
    "                 failed to send message 200 ret is 0",
)


@pytest.mark.parametrize("read", [scan, bulk])
def test_the_split_powerplay_message_is_one_smu_finding(read):
    (f,) = read(*SPLIT_SMU)
    assert (f.rule, f.line) == ("amdgpu.smu-failed", 1)
    assert "failed to send message 200" in f.message


def test_a_continuation_line_alone_is_nothing():
    assert scan("                 failed to send message 200 ret is 0") == []


# published: getsolus/packages issue 7986 (process on the second line)
NEWER_FAULT = (
    "[ 2480.727732] amdgpu 0000:0e:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:173 vmid:8 pasid:32791)",
    "[ 2480.727739] amdgpu 0000:0e:00.0: amdgpu:  Process python3 pid 15615 thread python3 pid 15615",
    "[ 2480.727743] amdgpu 0000:0e:00.0: amdgpu:   in page starting at address 0x00007febd6383000 from client 10",
)


@pytest.mark.parametrize("read", [scan, bulk])
def test_a_page_fault_takes_its_process_from_the_next_line(read):
    (f,) = read(*NEWER_FAULT)
    assert (f.rule, f.process, f.pid, f.line) == ("amdgpu.page-fault", "python3", 15615, 1)


def test_freebsd_drmn_lines_are_amdgpu_lines():
    # freebsd/drm-kmod issues 366 and 78
    (f,) = scan("Sep 21 01:25:14 merak kernel: drmn0: GPU reset begin!")
    assert (f.vendor, f.rule) == ("amd", "amdgpu.gpu-reset")
    (f,) = scan(
        "drmn0: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:5 pasid:32772, "
        "for process  pid 101038 thread  pid 101038)"
    )
    assert (f.rule, f.pid) == ("amdgpu.page-fault", 101038)
    # the net stays out of drmn lines: drmn0 is any DRM driver on FreeBSD
    assert scan("drmn0: [drm] GuC firmware load failed") == []


def test_page_faults_in_the_kernels_own_context_call_for_diagnostics():
    (f,) = scan(
        "May 26 18:09:57 fedora kernel: amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault "
        "(src_id:0 ring:169 vmid:0 pasid:0, for process  pid 0 thread  pid 0)"
    )
    assert (f.rule, f.action) == ("amdgpu.page-fault-kernel", "diagnose")


# The Fabric Manager user guide, edition 2.3 (March 2025), "Bare Metal Mode" -> "Runtime
# NVSwitch and GPU Errors": its example of one SXid event, as the guide prints it.
FM_GUIDE_2_3_EXAMPLE = (
    "[...] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore MCTO (First)",
    "[...] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Severity 0 Engine instance 46 Sub-engine instance 00",
    "[...] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Data {0x00140004, 0x00100000, 0x00140004, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
)


def test_the_fm_guide_2_3_example_event_is_one_non_fatal_finding():
    (f,) = Scanner().scan(list(FM_GUIDE_2_3_EXAMPLE))
    assert (f.kind, f.code, f.pci, f.action) == ("sxid", 28006, "0000:c1:00", "monitor")


@pytest.mark.parametrize(
    "code,rest,action",
    [
        # Table 22 (fatal): reset the GPUs; Table 23 (always fatal): restart the host
        (20034, "Fatal, Link 30 LTSSM Fault Up", "reset"),
        (24007, "Fatal, Link 28 sourcetrack timeout error (First)", "reset"),
        (12020, "Fatal, Link 02 egress sequence ID error", "reboot"),
        (22003, "Fatal, Link 05 Minion Halt", "reboot"),
        (22003, "Data {0x00000005}", "reboot"),
        # Table 24: 10003 is fatal, recovered by resetting all GPUs and NVSwitches
        (10003, "Data {0x00000000}", "reset"),
        # Table 21: 19084's recovery names a reset, but it is non-fatal: the fatal SXid
        # that usually comes with it is the one that fences
        (19084, "Data {0x0000001d}", "monitor"),
        (12028, "Data {0x000001c0}", "monitor"),
    ],
)
def test_the_fm_guide_2_3_tables_set_the_rung(code, rest, action):
    (f,) = scan(sxid(code, rest))
    assert (f.code, f.action) == (code, action)
