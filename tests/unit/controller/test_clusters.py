"""One controller, several clusters: which config a command gets (pick_cluster), and one
/metrics for every cluster's loop (metrics.ByCluster)."""

from __future__ import annotations

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from fleetmedic.controller.cli import pick_cluster
from fleetmedic.controller.metrics import ByCluster, Metrics
from fleetmedic.errors import ConfigError
from fleetmedic.model import config

TWO = config.parse(yaml.safe_load("clusters: [{name: a, kube: {}}, {name: b, kube: {}}]"))
ONE = config.parse(yaml.safe_load("clusters: [{name: a, kube: {}}]"))
PLAIN = config.parse({})


def test_a_command_gets_the_cluster_it_names_or_the_only_one():
    assert pick_cluster(TWO, "b", every=False).cluster_name == "b"
    assert pick_cluster(ONE, None, every=False).cluster_name == "a"
    assert pick_cluster(TWO, None, every=True) is TWO, "status and run serve every cluster"
    assert pick_cluster(PLAIN, None, every=False) is PLAIN


@pytest.mark.parametrize(
    "cfg,name,says",
    [
        (TWO, None, "serves 2 clusters (a, b): name one with --cluster"),
        (PLAIN, "a", "this config serves one cluster"),
        (TWO, "c", "no cluster 'c' (known: a, b)"),
    ],
)
def test_a_wrong_or_missing_cluster_is_one_line(cfg, name, says):
    with pytest.raises(ConfigError) as exc:
        pick_cluster(cfg, name, every=False)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_one_exposition_labels_each_clusters_samples_and_types_each_family_once():
    a, b = Metrics(), Metrics()
    a.nodes.labels(state="healthy").set(3)
    b.nodes.labels(state="healthy").set(5)
    b.remediations.labels(step="reboot", result="pass").inc()
    top = CollectorRegistry(auto_describe=False)
    top.register(ByCluster({"us-east": a.registry, "eu-west": b.registry}))
    text = generate_latest(top).decode()
    assert 'fleetmedic_nodes{cluster="us-east",state="healthy"} 3.0' in text
    assert 'fleetmedic_nodes{cluster="eu-west",state="healthy"} 5.0' in text
    assert 'fleetmedic_remediations_total{cluster="eu-west",result="pass",step="reboot"}' in text
    assert text.count("# TYPE fleetmedic_nodes gauge") == 1
