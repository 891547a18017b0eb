"""The packaged catalog's parse is kept by content (scan/catalogcache.py): used while the
YAML is the same, never once it changed, and ``fleetmedic scan`` then starts without
PyYAML or anything else a scan does not need (issue 39's start-up)."""

from __future__ import annotations

import marshal
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.scan import catalog, catalogcache, catalogfiles, xidcontext

NAMES = catalog.PACKAGED


@pytest.fixture
def packaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the packaged catalog standing in for it, with a cache of its own."""
    data = tmp_path / "data"
    data.mkdir()
    for name in NAMES:
        shutil.copy(catalogfiles.DATA_DIR / name, data / name)
    monkeypatch.setattr(catalogfiles, "DATA_DIR", data)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    catalog.load.cache_clear()
    yield data
    catalog.load.cache_clear()


def _kept(data: Path) -> Path:
    path = catalogcache.location(str(data))
    assert path is not None
    return path


def _never(blobs):
    raise AssertionError(f"parsed {sorted(blobs)} although the cache holds them")


def _forbid_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogfiles, "parse_yaml", _never)


def test_a_second_load_reads_the_kept_parse(packaged: Path, monkeypatch: pytest.MonkeyPatch):
    first = catalog.load()
    assert _kept(packaged).is_file()
    _forbid_parsing(monkeypatch)
    catalog.load.cache_clear()
    second = catalog.load()
    assert second is not first
    assert second.xids == first.xids and second.sxids == first.sxids
    assert [r.id for r in second.rules] == [r.id for r in first.rules]


def test_the_xid_workflows_share_the_kept_parse(packaged: Path, monkeypatch: pytest.MonkeyPatch):
    """An agent's start-up reads the Xid 13/31/45 workflows (agent/config.py): from the
    same kept parse as the catalog, not by parsing two YAML files again each start."""
    xidcontext.load_workflows.cache_clear()
    catalog.load()
    _forbid_parsing(monkeypatch)
    for parse in ("load", "safe_load"):  # nor any other way of reading YAML
        monkeypatch.setattr(yaml, parse, _never)
    try:
        flows = xidcontext.load_workflows()
    finally:
        xidcontext.load_workflows.cache_clear()
    assert {"xid.13", "xid.31", "xid.45"} <= set(flows)


def test_an_edited_catalog_is_parsed_again_even_with_its_size_and_mtime_kept(packaged: Path):
    assert catalog.load().xids[79].description == "GPU has fallen off the bus"
    path = packaged / "xid_catalog.yaml"
    before = path.stat()
    text = path.read_text()
    edited = text.replace("GPU has fallen off the bus", "GPU has fallen off the BUS", 1)
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    catalog.load.cache_clear()
    assert catalog.load().xids[79].description == "GPU has fallen off the BUS"
    catalog.load.cache_clear()  # and the new parse is the one kept now
    assert catalog.load().xids[79].description == "GPU has fallen off the BUS"


def test_an_edited_catalog_is_still_checked(packaged: Path):
    catalog.load()
    path = packaged / "amdgpu_catalog.yaml"
    path.write_text(path.read_text().replace("action: reset", "action: fix_it", 1))
    catalog.load.cache_clear()
    with pytest.raises(ConfigError, match="fix_it"):
        catalog.load()


def test_the_kept_parse_is_the_parse_exactly(tmp_path: Path):
    blobs = {name: (catalogfiles.DATA_DIR / name).read_bytes() for name in NAMES}
    fresh = catalogfiles.parse_yaml(blobs)
    path = tmp_path / "kept.marshal"
    assert catalogcache.cached(blobs, lambda _blobs: fresh, path) is fresh
    kept = catalogcache.cached(blobs, _never, path)
    # the same values, in the same order, of the same types (1 is not True, nor 1.0)
    assert kept is not fresh and repr(kept) == repr(fresh)


@pytest.mark.parametrize("content", [b"", b"not marshal at all", b"\xfa\x00\x00", None], ids=str)
def test_a_broken_or_foreign_cache_file_costs_only_the_parse(
    packaged: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None
):
    path = _kept(packaged)
    path.parent.mkdir(parents=True)
    if content is None:  # a file kept for other bytes (another catalog, another Python)
        content = marshal.dumps(("0" * 64, {"xid_catalog.yaml": {"sources": {}}}))
    path.write_bytes(content)
    assert catalog.load().xids[79].action == "reboot"
    _forbid_parsing(monkeypatch)  # rewritten: the next start reads it
    catalog.load.cache_clear()
    assert catalog.load().xids[79].action == "reboot"


def test_no_writable_cache_directory_is_no_error(packaged: Path, monkeypatch, tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir below a file fails
    assert catalog.load().xids[79].action == "reboot"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "")  # no home directory: no cache at all
    assert catalogcache.location(str(packaged)) is None
    catalog.load.cache_clear()
    assert catalog.load().xids[79].action == "reboot"


def test_a_missing_catalog_file_is_a_one_line_config_error(packaged: Path):
    (packaged / "source_amdgpu.yaml").unlink()
    with pytest.raises(ConfigError, match=r"source_amdgpu\.yaml: cannot be read"):
        catalog.load()


# what `fleetmedic scan FILE` imports: none of these (each one cost start-up once)
NOT_AT_START = ("yaml", "importlib.resources", "subprocess", "shutil", "kubernetes", "pydantic")


def test_scan_of_a_file_starts_without_what_it_does_not_need(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    )
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    command = [sys.executable, "-X", "importtime", "-m", "fleetmedic", "scan", "--json", str(log)]
    cold = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert cold.returncode == 1 and '"code":79' in cold.stdout, cold.stderr[-2000:]
    warm = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert warm.stdout == cold.stdout
    imported = set(re.findall(r"^import time:.*\|\s*([\w.]+)$", warm.stderr, re.MULTILINE))
    assert "fleetmedic.scan.catalog" in imported  # (the check reads what it should)
    assert not imported & set(NOT_AT_START), sorted(imported & set(NOT_AT_START))
    assert "yaml" in set(re.findall(r"\|\s*([\w.]+)$", cold.stderr, re.MULTILINE))
