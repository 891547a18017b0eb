"""NVSentinel's HealthEvent in fleetmedic's terms (policy/nvsentinel.py): every
recommendedAction, errorCodes through the catalog, isFatal, the GPUs a reset is for, and
reading an ERR as NVSentinel's CRD lets it be written (names or numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetmedic.model.actions import fence_state
from fleetmedic.policy import nvsentinel
from fleetmedic.policy.nvsentinel import HealthEvent, answer, read
from fleetmedic.scan import catalog

CRD = Path(__file__).resolve().parents[2] / "data" / "nvsentinel" / "external_remediation.crd.yaml"
UUID = "GPU-fa4e5d1c-0000-4000-8000-000000000001"
CAT = catalog.load()


def event(**kw) -> HealthEvent:
    base = dict(node="n1", check="SysLogsXIDError", agent="syslog-health-monitor")
    return HealthEvent(**{**base, **kw})


def crd_enum() -> list:
    crd = yaml.safe_load(CRD.read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    he = props["spec"]["properties"]["healthEvent"]["properties"]
    return he["recommendedAction"]["enum"]


def test_every_recommended_action_of_the_crd_is_known_by_name_and_number():
    values = crd_enum()
    numbers = [v for v in values if isinstance(v, int)]
    names = [v for v in values if isinstance(v, str)]
    assert dict(zip(numbers, names, strict=True)) == nvsentinel.ACTION_NAMES
    for name in names:
        assert name in nvsentinel.RUNG_OF_ACTION or name == "CUSTOM", name


@pytest.mark.parametrize(
    ("action", "rung", "then"),
    [
        ("COMPONENT_RESET", "reset", None),
        ("RESTART_VM", "reboot", None),
        ("RESTART_BM", "reboot", None),
        ("REPLACE_VM", "replace", None),
        ("RUN_FIELDDIAG", "diagnose", None),
        ("RUN_DCGMEUD", "diagnose", None),
        ("CONTACT_SUPPORT", "diagnose", "manual"),
        (24, "reboot", None),  # the CRD takes the protobuf number too
        ("15", "reboot", None),
    ],
)
def test_recommended_action_picks_the_rung(action, rung, then):
    a = answer(event(action=nvsentinel.action_name(action), fatal=False), CAT, {})
    assert (a.rung, a.then) == (rung, then), a.why


@pytest.mark.parametrize(("fatal", "rung"), [(True, "reboot"), (False, "diagnose")])
def test_nothing_asked_and_no_code_falls_back_on_is_fatal(fatal, rung):
    for action in ("NONE", "UNKNOWN"):
        a = answer(event(action=action, fatal=fatal), CAT, {})
        assert a.rung == rung and "isFatal" in a.why


def test_xid_codes_go_through_the_catalog_and_fences_only_go_up():
    # Xid 79 is reboot in the catalog: a COMPONENT_RESET request for it starts at reboot
    a = answer(event(action="COMPONENT_RESET", codes=("79",)), CAT, {})
    assert a.rung == "reboot" == fence_state(CAT.xids[79].action)
    assert a.gpus == () and a.finding["xid"] == 79
    assert "XID 79: reboot in the catalog" in a.why and "COMPONENT_RESET: reset" in a.why
    # Xid 64 (row remap failure) needs hands whatever NVSentinel recommends
    assert answer(event(action="RESTART_BM", codes=("64",)), CAT, {}).rung == "manual"
    # a monitor-only Xid leaves the recommendation as it is
    assert answer(event(action="COMPONENT_RESET", codes=("13",)), CAT, {}).rung == "reset"


@pytest.mark.parametrize(
    ("code", "check", "xid"),
    [
        ("79", "SysLogsXIDError", 79),
        ("XID-79", "anything", 79),  # ADR-040's example spelling
        ("145.RLW_REMAP", "SysLogsXIDError", 145),  # NVL5 decoded form "<xid>.<subcode>"
        ("GPU_FALLEN_OFF_BUS", "SysLogsGPUFallenOff", 79),
    ],
)
def test_xid_spellings(code, check, xid):
    a = answer(event(action="NONE", codes=(code,), check=check), CAT, {})
    assert a.finding["xid"] == xid, a.why


def test_sxid_codes_use_the_sxid_table():
    # 11001 is a fatal SXid (reset, the FM guide 2.3's Table 22); as an Xid it is unknown
    # (monitor): the SXid table decides
    assert 11001 not in CAT.xids and CAT.unknown_xid_action == "monitor"
    sxid = event(action="NONE", check="SysLogsSXIDError", codes=("11001",), fatal=False)
    a = answer(sxid, CAT, {})
    assert a.rung == fence_state(CAT.sxids[11001].action) == "reset", a.why
    assert "xid" not in a.finding
    # a non-fatal one (monitor since issue 39) fences nothing itself: isFatal false decides
    a = answer(
        event(action="NONE", check="SysLogsSXIDError", codes=("11004",), fatal=False), CAT, {}
    )
    assert fence_state(CAT.sxids[11004].action) is None
    assert a.rung == "diagnose" and "SXID 11004: monitor" in a.why, a.why


def test_a_bare_number_from_an_unknown_check_is_not_guessed():
    a = answer(event(action="RESTART_VM", check="GpuMemWatch", codes=("48",)), CAT, {})
    assert a.rung == "reboot" and "'48' is not an Xid or SXid" in a.why


def test_custom_actions_by_name_else_the_codes():
    custom = {"fleetmedic-reset": "reset", "external-remediation": None}
    a = answer(event(action="CUSTOM", custom="fleetmedic-reset", fatal=True), CAT, custom)
    assert a.rung == "reset"
    a = answer(event(action="CUSTOM", custom="external-remediation", codes=("79",)), CAT, custom)
    assert a.rung == "reboot" and "CUSTOM external-remediation: null" in a.why
    # the tutorial's template: no errorCode; an unlisted name reads isFatal
    a = answer(event(action="CUSTOM", custom="anything", fatal=True), CAT, custom)
    assert a.rung == "reboot"


def test_reset_targets_prefer_uuids_then_bus_ids_then_indexes():
    ents = (("PCI", "0000:28:00.0"), ("GPU_UUID", UUID), ("GPU", "1"))
    a = answer(event(action="COMPONENT_RESET", entities=ents, fatal=False), CAT, {})
    assert a.gpus == (UUID,) and a.finding["gpus"] == [UUID]
    a = answer(event(action="COMPONENT_RESET", entities=ents[::2], fatal=False), CAT, {})
    assert a.gpus == ("0000:28:00.0",)
    a = answer(event(action="COMPONENT_RESET", entities=(("GPU", "1"),), fatal=False), CAT, {})
    assert a.gpus == ("1",)
    # no entities (the tutorial's template): every GPU
    assert answer(event(action="COMPONENT_RESET", fatal=False), CAT, {}).gpus == ()


def test_read_takes_the_crd_shape_and_tolerates_odd_fields():
    obj = {
        "metadata": {"name": "extrr-1", "uid": "u1", "generation": 2},
        "spec": {
            "healthEvent": {
                "nodeName": "n1",
                "recommendedAction": 2,
                "errorCode": ["79", ""],
                "entitiesImpacted": [{"entityType": "GPU_UUID", "entityValue": UUID}, "junk"],
                "isFatal": "yes",  # not a boolean: not fatal
                "message": "m",
            }
        },
        "status": {
            "conditions": [
                {"type": "NVSentinelOwnershipReleased", "status": "True"},
                None,
                {"type": "ExternalRemediationComplete", "status": "Unknown", "reason": "x"},
            ]
        },
    }
    r = read(obj)
    assert (r.name, r.uid, r.generation, r.node) == ("extrr-1", "u1", 2, "n1")
    assert r.event.action == "COMPONENT_RESET" and r.event.codes == ("79",)
    assert r.event.entities == (("GPU_UUID", UUID),) and r.event.fatal is False
    assert r.released and r.complete.status == "Unknown" and not r.deleting
    empty = read({"metadata": {"name": "x"}})
    assert (empty.node, empty.released, empty.complete) == ("", False, None)
    assert read({"metadata": {"deletionTimestamp": "2026-11-28T00:00:00Z"}}).deleting
    assert nvsentinel.action_name(True) == nvsentinel.action_name("bogus") == "UNKNOWN"
