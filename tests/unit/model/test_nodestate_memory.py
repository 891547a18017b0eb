"""What a NodeView holds (nodestate.view): the controller keeps one per Node of every
cluster it serves, so its views keep only the annotations it reads (``keep``) and share
their label strings (interned)."""

from __future__ import annotations

import json
import sys

from fleetmedic.controller.loop import view_transform
from fleetmedic.model import config, keys
from fleetmedic.model.nodestate import own_annotations, view
from fleetmedic.model.vocabulary import preset

CREDS = {"username_credential": "bmc-user", "password_credential": "bmc-password"}
FOREIGN = {
    "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
    "nfd.node.kubernetes.io/feature-labels": "cpu-cpuid.AVX512F,pci-10de.present",
    "example.com/bmc": "10.0.0.9:8443",
}
OURS = {keys.ANN_SSH_HOST: "10.0.0.7", keys.ANN_HISTORY: json.dumps([{"step": "reboot"}])}


def node(name: str = "n1", annotations: dict | None = None) -> dict:
    # (json round trip: every string a fresh object, as the API's responses are)
    return json.loads(
        json.dumps(
            {
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, "pool": "gpu-a", "zone": "z1"},
                    "annotations": {**FOREIGN, **OURS, **(annotations or {})},
                    "resourceVersion": "7",
                },
                "spec": {},
                "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.1"}]},
            }
        )
    )


def test_without_keep_a_view_holds_every_annotation():
    assert view(node(), preset("default")).annotations == {**FOREIGN, **OURS}


def test_keep_drops_foreign_annotations_and_keeps_ours_and_the_named_ones():
    v = view(node(), preset("default"), keep=own_annotations({"example.com/bmc"}))
    assert v.annotations == {**OURS, "example.com/bmc": "10.0.0.9:8443"}
    assert view(node(), preset("default"), keep=own_annotations()).annotations == OURS
    assert v.address == "10.0.0.7", "the ssh-host annotation is ours: kept and used"


def test_a_foreign_signals_evidence_is_read_before_its_annotation_is_dropped():
    cfg = config.parse({})  # (the AWS health check's signal is a default one)
    aws = node(annotations={"gpu-healthcheck.aws-samples.io/results": "dcgm diag failed"})
    aws["spec"]["taints"] = [
        {"key": "gpu-healthcheck.aws-samples.io/unhealthy", "value": "true", "effect": "NoSchedule"}
    ]
    v = view_transform(cfg)(aws)
    assert [s.evidence for s in v.foreign] == ["dcgm diag failed"]
    assert "gpu-healthcheck.aws-samples.io/results" not in v.annotations


def test_the_controller_keeps_the_bmc_address_annotation_of_any_profile():
    by_label = config.parse({"bmc": CREDS})
    assert by_label.read_annotations() == frozenset()
    assert view_transform(by_label)(node()).annotations == OURS
    by_annotation = config.parse(
        {
            "bmc": CREDS,
            "profiles": [
                {
                    "name": "p",
                    "selector": "pool=gpu-a",
                    "bmc": {"address_from": "annotation", "address_key": "example.com/bmc"},
                }
            ],
        }
    )
    assert by_annotation.read_annotations() == frozenset({"example.com/bmc"})
    kept = view_transform(by_annotation)(node())
    assert kept.annotations == {**OURS, "example.com/bmc": "10.0.0.9:8443"}
    bmc = by_annotation.profile("p").bmc
    assert bmc is not None
    assert bmc.address_for("n1", kept.labels, kept.annotations)[0] == "10.0.0.9:8443"


def test_label_strings_and_the_name_are_shared_between_views():
    a, b = (view(node(n), preset("default")) for n in ("n1", "n2"))
    assert a.labels["pool"] is b.labels["pool"] is sys.intern("gpu-a")
    assert [k for k in a.labels] == [k for k in b.labels]
    assert all(x is y for x, y in zip(a.labels, b.labels, strict=True))
    assert a.labels["kubernetes.io/hostname"] is a.name
