"""Shared fixtures. The heavy ones (fleet, API server, SMTP sink, Loki, Receptor mesh) live in
tests/harness and are registered here as plugins so every test can use them."""

pytest_plugins = [
    p
    for p in (
        "tests.harness.smtp_fixtures",
        "tests.harness.fleet_fixtures",
        "tests.harness.kube_fixtures",
        "tests.harness.kubelet_fixtures",
        "tests.harness.loki_fixtures",
        "tests.harness.mesh_fixtures",
    )
    if __import__("importlib.util").util.find_spec(p) is not None
]
