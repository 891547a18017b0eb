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


class FlakyLoop:
    """A cluster's loop that fails at start until ``fails`` runs have failed."""

    def __init__(self, log: list[str], fails: int) -> None:
        self.log, self.fails = log, fails

    def run(self, stop, once=False):
        self.log.append("run")
        if self.log.count("run") <= self.fails:
            raise ConfigError("API server https://10.0.0.9:6443 not answering")


def test_a_failed_cluster_loop_starts_again_fresh_and_once_reports_it(monkeypatch):
    import threading

    from fleetmedic.controller import daemon as ctlcli

    monkeypatch.setattr(ctlcli, "CLUSTER_RETRY", 0.01)
    log: list[str] = []
    made: list[FlakyLoop] = []

    def make():
        made.append(FlakyLoop(log, fails=2))
        return made[-1]

    failed: list[str] = []
    ctlcli._run_cluster("beta", FlakyLoop(log, fails=2), make, threading.Event(), False, failed)
    assert log == ["run", "run", "run"] and len(made) == 2, "a fresh loop for each retry"
    assert failed == []
    log.clear()
    ctlcli._run_cluster("beta", FlakyLoop(log, fails=1), make, threading.Event(), True, failed)
    assert log == ["run"] and failed == ["beta"], "--once: no retry, the exit status says so"
