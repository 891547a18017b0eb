"""fleetmedic check: rendering and option handling (the probes are covered elsewhere)."""

import json

from click.testing import CliRunner

from fleetmedic.checks import base, cli


def test_table_marks_problems_and_not_applicable():
    results = [
        base.ok("nvidia.ecc", "no errors on 8 GPU(s)"),
        base.not_applicable("nvidia.nvlink", "not supported"),
        base.problem("nvidia.remapped_rows", "GPU 3: row remapping failed", action="manual"),
        base.unknown("network.throughput", "no peer", "network"),
    ]
    text = cli.render_table(results)
    lines = text.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "SUMMARY"]
    assert "ok (n/a)" in lines[2] and "PROBLEM" in lines[3] and "[action: manual]" in lines[3]
    assert text.endswith("overall: problem (exit 1)")


def test_vendor_none_and_nothing_else_is_healthy():
    r = CliRunner().invoke(cli.check, ["--vendor", "none", "--category", "gpu", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["status"] == "ok" and doc["results"] == [] and doc["exit_code"] == 0


def test_config_file_and_flags(tmp_path):
    conf = tmp_path / "agent.yaml"
    conf.write_text("checks:\n  vendor: none\n  network:\n    min_mbps: 5\n")
    r = CliRunner().invoke(cli.check, ["--config", str(conf), "--category", "gpu"])
    assert r.exit_code == 0 and "no checks ran" in r.output


def test_bad_config_is_a_usage_error(tmp_path):
    conf = tmp_path / "bad.yaml"
    conf.write_text("checks:\n  vendor: intel\n")
    r = CliRunner().invoke(cli.check, ["--config", str(conf)])
    assert r.exit_code == 2 and "vendor" in r.output


def test_node_config_from_the_environment(tmp_path, monkeypatch):
    conf = tmp_path / "check.yaml"
    conf.write_text("vendor: none\n")
    monkeypatch.setenv("FLEETMEDIC_CHECK_CONFIG", str(conf))
    r = CliRunner().invoke(cli.check, ["--category", "gpu"])
    assert r.exit_code == 0 and "no checks ran" in r.output


def test_explicit_missing_config_is_an_error(tmp_path):
    r = CliRunner().invoke(cli.check, ["--config", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "nope.yaml" in r.output


def test_profile_and_sysfs_root(tmp_path):
    from tests.harness.rdma_sysfs import HDR, efa_node, infiniband_node, write_port

    efa_node(tmp_path / "efa")
    args = ["--vendor", "none", "--category", "network", "--json"]
    r = CliRunner().invoke(
        cli.check, [*args, "--hardware-profile", "p5", "--sysfs-root", str(tmp_path / "efa")]
    )
    assert r.exit_code == 0, r.output
    names = {x["name"] for x in json.loads(r.output)["results"]}
    assert names == {"fabric.ports"} | {
        f"profile.rdma_{x}" for x in ("count", "link_layer", "rate")
    }
    mine = tmp_path / "mine.yaml"
    mine.write_text("profiles:\n  ib8:\n    rdma: {count: 8, rate_gbps: 400}\n")
    infiniband_node(tmp_path / "ib")
    write_port(tmp_path / "ib", "mlx5_3", rate=HDR)
    ib = ["--sysfs-root", str(tmp_path / "ib")]
    r = CliRunner().invoke(
        cli.check, [*args, *ib, "--hardware-profile", "ib8", "--hardware-profiles", str(mine)]
    )
    assert r.exit_code == 1, r.output
    (rate,) = [x for x in json.loads(r.output)["results"] if x["status"] == "problem"]
    assert rate["summary"] == "mlx5_3/1 at 200 Gb/s, expected 400"


def test_unknown_profile_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(cli.check, ["--vendor", "none", "--hardware-profile", "p55"])
    assert r.exit_code == 2 and "no hardware profile named 'p55'" in r.output
