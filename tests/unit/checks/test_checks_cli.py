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
