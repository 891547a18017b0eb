"""The fault families read from the driver sources (issue 39 item 2).

Every member of every family (an error line the driver prints on that family's error
path, from ``data/source_*.yaml``) is fed through the scanner as the driver prints it:
each must give a finding of its family, or of a catalog rule that names it, never the
safety net's "unclassified" and never nothing. So a family cannot silently lose a
member when a rule, the catalog or the derived list changes.
"""

from __future__ import annotations

import pytest

from fleetmedic.model.actions import FENCING_ACTIONS
from fleetmedic.scan import Scanner, load_catalog
from fleetmedic.scan.families import format_regex, literal_key, member_line

CAT = load_catalog()
MEMBERS = [(fam, m) for fam in CAT.families for m in fam.members]
EXPECTED = {
    "nvrm.gsp-boot": "reboot",
    "nvrm.gsp-firmware-load": "reboot",
    "nvrm.fsp": "reboot",
    "nvrm.gfw-boot": "reboot",
    "nvrm.gsp-rpc": "reset",
    "amdgpu.ras-aca": "monitor",
    "amdgpu.smu": "monitor",
    "amdgpu.psp": "reimage",
    "amdgpu.mes": "reset",
    "amdgpu.vm-fault": "monitor",
}


def scan(line: str):
    return list(Scanner(dedup=False).scan([line]))


def test_every_family_is_named_with_its_action_and_comes_from_a_named_release():
    assert {f.rule_id: f.action for f in CAT.families} == EXPECTED
    for vendor, listed in CAT.source_lists.items():
        assert listed.repository and listed.release and len(listed.commit) == 40, vendor
    for fam in CAT.families:
        assert len(fam.members) >= 4, fam.name  # a family the derivation emptied fails here
        for m in fam.members:
            assert m.file and m.function and m.format, m


@pytest.mark.parametrize(
    "family,member",
    MEMBERS,
    ids=[f"{f.rule_id}:{m.function}:{m.format[:40]}" for f, m in MEMBERS],
)
def test_every_member_of_every_family_is_recognised(family, member):
    found = scan(member_line(family, member))
    assert found, "a member line gave no finding"
    f = found[0]
    assert not f.rule.endswith(".unclassified"), f.rule
    if f.rule == family.rule_id:
        if family.rule_id != "nvrm.gsp-rpc":  # RPC lines: the status decides (below)
            assert f.action == family.action
        return
    # a catalog rule named this line first: it must not be weaker than a fencing family
    assert f.rule in {r.id for r in CAT.rules} or f.kind in ("xid", "sxid"), f.rule
    if family.action in FENCING_ACTIONS:
        assert f.action in FENCING_ACTIONS, (f.rule, f.action)


def test_a_member_matches_whatever_function_prints_it():
    """Functions are renamed between releases; the message is what identifies the path."""
    fsp = next(f for f in CAT.families if f.rule_id == "nvrm.fsp")
    member = next(m for m in fsp.members if m.format == "FSP command timed out")
    for fn in (member.function, "kfspPollForResponse_IMPL", "GPU0 kfspSomethingNew_GB202"):
        (f,) = scan(f"[  12.000001] NVRM: {fn}: FSP command timed out")
        assert (f.rule, f.action) == ("nvrm.fsp", "reboot")


@pytest.mark.parametrize(
    "status,action",
    [
        ("0x0000000f", "reboot"),  # NV_ERR_GPU_IS_LOST: as Xid 79
        ("0x00000062", "reset"),  # NV_ERR_RESET_REQUIRED
        ("0x00000065", "reset"),  # NV_ERR_TIMEOUT
        ("0x00000010", "monitor"),  # NV_ERR_GPU_IN_FULLCHIP_RESET: a reset is under way
        ("0x00000056", "monitor"),  # NV_ERR_NOT_SUPPORTED: the caller's problem
        ("0x00000051", "monitor"),  # NV_ERR_NO_MEMORY
    ],
)
def test_a_failed_rpc_is_judged_by_the_status_the_driver_names(status, action):
    line = (
        "NVRM: GPU0 rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; "
        "hParent=0x5c000054; hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; "
        f"paramsStatus={status}; status={status}"
    )
    (f,) = scan(line)
    assert (f.rule, f.action) == ("nvrm.gsp-rpc", action)


def test_an_rpc_line_without_a_status_resets_like_xid_119():
    (f,) = scan("NVRM: _issueRpcAndWait: rpcRecvPoll timedout for fn 76 sequence 12!")
    assert f.action == "reset"


def test_format_regexes_stop_at_the_last_literal_and_pick_a_long_key():
    assert format_regex("failed to wait for GFW boot complete: 0x%x VBIOS version %s") == (
        r"failed\s+to\s+wait\s+for\s+GFW\s+boot\s+complete:\s+0x[-+.\w]*\s+VBIOS\s+version\s+"
    )
    # a leading value would only slow the search: the regex starts at the first literal
    assert format_regex("%s(0x%04x) aborted; SMU still servicing msg").startswith(r"\(0x")
    assert literal_key("RAS records:%d exceed threshold:%d") == "exceed threshold:"


def test_a_benign_amdgpu_line_stays_quiet_despite_the_families():
    assert (
        scan("[    9.117653] amdgpu 0000:12:00.0: amdgpu: SMU is initialized successfully!") == []
    )
