"""fleetmedic.adapters.filestore: Kube's Lease and ConfigMap semantics on files.

The same scenarios run against the real API server in
tests/integration/test_store_contract.py; here are the file store's own concerns: names
that would leave the root, corrupt files, a writer killed before its rename, writers in
several processes at once."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fleetmedic.adapters import filestore
from fleetmedic.adapters.filestore import FileStore, StoreCorrupt
from fleetmedic.adapters.lease import Lease
from fleetmedic.errors import ConflictError, NotFoundError, PermanentError, TemporaryError
from tests.harness import loadscale

NS = "fleetmedic"


def lease_body(name: str, holder: str = "a", rv: str | None = None, **spec) -> dict:
    meta = {"name": name, **({"resourceVersion": rv} if rv else {})}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30, **spec},
    }


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "store")


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


# -- leases ------------------------------------------------------------------------------
def test_lease_round_trip_looks_like_the_api_servers(store):
    made = store.create_lease(
        NS, lease_body("l1", renewTime="2026-11-27T03:04:05.123456+00:00", acquireTime=None)
    )
    meta = made["metadata"]
    assert (made["apiVersion"], made["kind"]) == ("coordination.k8s.io/v1", "Lease")
    assert (meta["name"], meta["namespace"]) == ("l1", NS)
    assert meta["resourceVersion"].isdigit() and meta["uid"] and meta["creationTimestamp"]
    # MicroTime in UTC with a Z, as the API server formats it; nulls left out
    assert made["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 30,
        "renewTime": "2026-11-27T03:04:05.123456Z",
    }
    assert store.get_lease(NS, "l1") == made


def test_create_twice_is_a_conflict(store):
    store.create_lease(NS, lease_body("l1"))
    with pytest.raises(ConflictError, match="already exists"):
        store.create_lease(NS, lease_body("l1", holder="b"))
    assert store.get_lease(NS, "l1")["spec"]["holderIdentity"] == "a"


def test_replace_is_a_compare_and_swap_on_resource_version(store):
    first = store.create_lease(NS, lease_body("l1"))
    rv = first["metadata"]["resourceVersion"]
    second = store.replace_lease(NS, lease_body("l1", holder="b", rv=rv))
    assert int(second["metadata"]["resourceVersion"]) > int(rv)
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    with pytest.raises(ConflictError, match="modified"):
        store.replace_lease(NS, lease_body("l1", holder="c", rv=rv))
    assert store.get_lease(NS, "l1")["spec"]["holderIdentity"] == "b"


def test_replace_creates_a_missing_lease_as_the_api_servers_put_does(store):
    made = store.replace_lease(NS, lease_body("gone", rv="99"))
    assert made["metadata"]["resourceVersion"] != "99" and made["metadata"]["uid"]
    assert store.get_lease(NS, "gone") == made


def test_replace_of_an_existing_lease_needs_a_resource_version(store):
    store.create_lease(NS, lease_body("l1"))
    with pytest.raises(PermanentError, match="resourceVersion"):
        store.replace_lease(NS, lease_body("l1", holder="b"))
    assert store.get_lease(NS, "l1")["spec"]["holderIdentity"] == "a"


def test_missing_lease_is_not_found(store):
    with pytest.raises(NotFoundError, match="get lease fleetmedic/none"):
        store.get_lease(NS, "none")


def test_a_replace_that_changes_nothing_keeps_the_version(store):
    made = store.create_lease(NS, lease_body("l1"))
    body = dict(
        made, metadata={"name": "l1", "resourceVersion": made["metadata"]["resourceVersion"]}
    )
    assert store.replace_lease(NS, body) == made


def test_versions_grow_store_wide_even_for_an_object_made_again(store, tmp_path):
    a = store.create_lease(NS, lease_body("a"))
    b = store.create_lease("other", lease_body("b"))
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    (tmp_path / "store" / NS / "leases" / "a").unlink()  # removed by hand
    again = store.create_lease(NS, lease_body("a"))
    # a holder still holding the old copy's version can never write the new object
    assert int(again["metadata"]["resourceVersion"]) > int(b["metadata"]["resourceVersion"])
    with pytest.raises(ConflictError):
        store.replace_lease(NS, lease_body("a", rv=a["metadata"]["resourceVersion"]))


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"leaseDurationSeconds": 0}, "greater than 0"),
        ({"leaseDurationSeconds": "30"}, "must be an integer"),
        ({"leaseTransitions": -1}, "greater than or equal to 0"),
        ({"renewTime": "yesterday"}, "not a MicroTime"),
        ({"renewTime": "2026-11-27T03:04:05.000000"}, "not a MicroTime"),  # no zone
        ({"renewTime": "2026-11-27T03:04:05.5Z"}, "not a MicroTime"),  # 1 fraction digit
        ({"renewTime": "2026-13-27T03:04:05.000000Z"}, "not a MicroTime"),  # month 13
    ],
)
def test_bad_lease_specs_are_refused(store, spec, message):
    with pytest.raises(PermanentError, match=message):
        store.create_lease(NS, lease_body("l1", **spec))
    with pytest.raises(NotFoundError):
        store.get_lease(NS, "l1")


def test_body_namespace_must_match(store):
    body = lease_body("l1")
    body["metadata"]["namespace"] = "elsewhere"
    with pytest.raises(PermanentError, match="does not match"):
        store.create_lease(NS, body)


def test_lease_primitive_runs_on_the_store(store):
    a = Lease(store, NS, "leader", "a", 30)  # type: ignore[arg-type]
    b = Lease(store, NS, "leader", "b", 30)  # type: ignore[arg-type]
    assert a.try_acquire() and not b.try_acquire()
    assert a.try_acquire()  # a renewal: one replace on its own copy
    assert b.current_holder() == "a"
    a.release()
    assert b.current_holder() is None and b.try_acquire()
    spec = store.get_lease(NS, "leader")["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


def test_one_of_many_racing_creators_wins(store):
    wins: list[str] = []
    go = threading.Barrier(8)

    def take(who: str) -> None:
        go.wait()
        if Lease(store, NS, "race", who, 30).try_acquire():  # type: ignore[arg-type]
            wins.append(who)

    threads = [threading.Thread(target=take, args=(f"h{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert store.get_lease(NS, "race")["spec"]["holderIdentity"] == wins[0]


# -- config maps -------------------------------------------------------------------------
def test_config_map_patch_creates_merges_and_removes(store):
    assert store.get_config_map(NS, "cm") is None
    made = store.patch_config_map_data(NS, "cm", {"a": "1", "gone": None})
    assert (made["apiVersion"], made["kind"], made["data"]) == ("v1", "ConfigMap", {"a": "1"})
    rv = made["metadata"]["resourceVersion"]
    merged = store.patch_config_map_data(NS, "cm", {"b": "2"}, resource_version=rv)
    assert merged["data"] == {"a": "1", "b": "2"}
    emptied = store.patch_config_map_data(NS, "cm", {"a": None, "b": None})
    assert "data" not in emptied  # the API server leaves an empty map out
    assert store.get_config_map(NS, "cm") == emptied


def test_config_map_version_guard(store):
    rv = store.patch_config_map_data(NS, "cm", {"a": "1"})["metadata"]["resourceVersion"]
    store.patch_config_map_data(NS, "cm", {"a": "2"})
    with pytest.raises(ConflictError):
        store.patch_config_map_data(NS, "cm", {"a": "3"}, resource_version=rv)
    assert store.get_config_map(NS, "cm")["data"] == {"a": "2"}
    with pytest.raises(NotFoundError):
        store.patch_config_map_data(NS, "absent", {"a": "1"}, resource_version=rv)
    assert store.get_config_map(NS, "absent") is None


def test_a_patch_that_changes_nothing_keeps_the_version(store):
    made = store.patch_config_map_data(NS, "cm", {"a": "1"})
    assert store.patch_config_map_data(NS, "cm", {"a": "1", "b": None}) == made
    assert store.ensure_config_map(NS, "cm") == made


def test_ensure_config_map_makes_an_empty_one(store):
    made = store.ensure_config_map(NS, "pause")
    assert made["metadata"]["name"] == "pause" and "data" not in made
    assert store.get_config_map(NS, "pause") == made


@pytest.mark.parametrize(
    "data, message",
    [
        ({"a": 1}, "must be a string"),
        ({"a/b": "x"}, "invalid data key"),
        ({"..": "x"}, "invalid data key"),
        ({"big": "x" * (filestore.MAX_CONFIGMAP_DATA + 1)}, "at most"),
    ],
)
def test_bad_config_map_data_is_refused(store, data, message):
    with pytest.raises(PermanentError, match=message):
        store.patch_config_map_data(NS, "cm", data)
    assert store.get_config_map(NS, "cm") is None


# -- names -------------------------------------------------------------------------------
BAD_NAMES = ["../x", "..", ".", "x/y", "/etc", "Upper", "", "-a", "a-", "a\nb", "a" * 254, None]
BAD_NAMESPACES = ["../x", "a.b", "", "A", "a" * 64, "x/y"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused_in_one_line(store, tmp_path, name):
    calls = [
        lambda: store.get_lease(NS, name),
        lambda: store.create_lease(NS, lease_body(name)),
        lambda: store.replace_lease(NS, lease_body(name, rv="1")),
        lambda: store.get_config_map(NS, name),
        lambda: store.patch_config_map_data(NS, name, {"a": "1"}),
    ]
    for call in calls:
        with pytest.raises(PermanentError, match="invalid name") as err:
            call()
        assert "\n" not in str(err.value)
    assert files_under(tmp_path) <= {"store", "store/.lock"}


@pytest.mark.parametrize("namespace", BAD_NAMESPACES)
def test_bad_namespaces_are_refused(store, tmp_path, namespace):
    with pytest.raises(PermanentError, match="invalid namespace"):
        store.create_lease(namespace, lease_body("l1"))
    with pytest.raises(PermanentError, match="invalid namespace"):
        store.patch_config_map_data(namespace, "cm", {"a": "1"})
    assert files_under(tmp_path) <= {"store", "store/.lock"}


def test_longest_names_fit_on_disk(store):
    name = ".".join(["a" * 63] * 4)[:253]
    store.create_lease(NS, lease_body(name))
    assert store.get_lease(NS, name)["metadata"]["name"] == name


# -- corrupt and stray files -------------------------------------------------------------
@pytest.mark.parametrize(
    "content", [b"", b"{not json", b"[1, 2]", b'{"metadata": {"name": "other"}}', b"\xff\xfe"]
)
def test_a_corrupt_lease_is_an_error_naming_the_file_never_free(store, tmp_path, content):
    path = tmp_path / "store" / NS / "leases" / "leader"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(StoreCorrupt) as err:
        store.get_lease(NS, "leader")
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    # the Lease primitive does not take a lease it cannot read: that would make two leaders
    with pytest.raises(StoreCorrupt):
        Lease(store, NS, "leader", "b", 30).try_acquire()  # type: ignore[arg-type]
    with pytest.raises(StoreCorrupt):
        store.create_lease(NS, lease_body("leader"))
    assert path.read_bytes() == content


def test_a_corrupt_config_map_is_an_error_not_absent(store, tmp_path):
    path = tmp_path / "store" / NS / "configmaps" / "cm"
    path.parent.mkdir(parents=True)
    path.write_text("{")
    with pytest.raises(StoreCorrupt, match=str(path)):
        store.get_config_map(NS, "cm")
    with pytest.raises(StoreCorrupt, match=str(path)):
        store.patch_config_map_data(NS, "cm", {"a": "1"})


def test_a_hand_edited_config_map_with_a_number_is_an_error(store, tmp_path):
    made = store.patch_config_map_data(NS, "cm", {"pause": "false"})
    path = tmp_path / "store" / NS / "configmaps" / "cm"
    path.write_text(json.dumps(dict(made, data={"pause": True})))
    with pytest.raises(StoreCorrupt, match="data an object of strings"):
        store.get_config_map(NS, "cm")


def test_a_symlinked_object_is_not_followed(store, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"metadata": {"name": "cm", "resourceVersion": "1"}}))
    path = tmp_path / "store" / NS / "configmaps" / "cm"
    path.parent.mkdir(parents=True)
    path.symlink_to(outside)
    with pytest.raises(StoreCorrupt, match="cannot read"):
        store.get_config_map(NS, "cm")


def test_a_stray_temp_file_is_ignored_and_reused(store, tmp_path):
    made = store.patch_config_map_data(NS, "cm", {"a": "1"})
    stray = tmp_path / "store" / NS / "configmaps" / ".tmp"
    stray.write_text('{"half": ')
    assert store.get_config_map(NS, "cm") == made
    store.patch_config_map_data(NS, "cm", {"a": "2"})
    assert not stray.exists()
    assert store.get_config_map(NS, "cm")["data"] == {"a": "2"}


def test_a_torn_revision_counter_still_orders_an_objects_writes(store, tmp_path):
    made = store.patch_config_map_data(NS, "cm", {"a": "1"})
    (tmp_path / "store" / ".lock").write_bytes(b"\x00garbage")
    again = store.patch_config_map_data(NS, "cm", {"a": "2"})
    assert int(again["metadata"]["resourceVersion"]) > int(made["metadata"]["resourceVersion"])


# -- crashes and other processes ---------------------------------------------------------
KILLED_BEFORE_RENAME = textwrap.dedent(
    """
    import os, signal, sys
    from fleetmedic.adapters.filestore import FileStore

    def die(src, dst):  # the writer dies after its temp file is written and fsynced
        os.kill(os.getpid(), signal.SIGKILL)

    os.replace = die
    FileStore(sys.argv[1]).patch_config_map_data("fleetmedic", "cm", {"a": "new"})
    """
)


def test_a_writer_killed_before_its_rename_leaves_the_old_object(store, tmp_path):
    made = store.patch_config_map_data(NS, "cm", {"a": "old"})
    child = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_RENAME, str(tmp_path / "store")],
        timeout=loadscale.guard(60),
    )
    assert child.returncode == -signal.SIGKILL
    tmp = tmp_path / "store" / NS / "configmaps" / ".tmp"
    assert '"new"' in tmp.read_text()  # it got as far as the temp file
    assert store.get_config_map(NS, "cm") == made
    # its lock died with it: the next writer is not held up
    assert store.patch_config_map_data(NS, "cm", {"a": "next"})["data"] == {"a": "next"}


COUNTER = textwrap.dedent(
    """
    import sys
    from fleetmedic.adapters.filestore import FileStore
    from fleetmedic.errors import ConflictError

    store, n, conflicts = FileStore(sys.argv[1]), int(sys.argv[2]), 0
    for _ in range(n):
        while True:
            cm = store.get_config_map("fleetmedic", "counter")
            count = int(cm["data"]["n"])
            rv = cm["metadata"]["resourceVersion"]
            try:
                store.patch_config_map_data("fleetmedic", "counter", {"n": str(count + 1)}, rv)
                break
            except ConflictError:
                conflicts += 1
    print(conflicts)
    """
)


def test_processes_get_compare_and_swap(store, tmp_path):
    """Read-increment-write from 4 processes at once: no increment is lost."""
    store.patch_config_map_data(NS, "counter", {"n": "0"})
    procs, each = 4, 25
    children = [
        subprocess.Popen(
            [sys.executable, "-c", COUNTER, str(tmp_path / "store"), str(each)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    outs = [c.communicate(timeout=loadscale.guard(120))[0] for c in children]
    assert [c.returncode for c in children] == [0] * procs
    assert store.get_config_map(NS, "counter")["data"]["n"] == str(procs * each)
    assert all(o.strip().isdigit() for o in outs)


def test_a_held_lock_is_a_temporary_error_in_bounded_time(store, tmp_path, monkeypatch):
    store.ensure_config_map(NS, "cm")
    monkeypatch.setattr(filestore, "LOCK_TIMEOUT", 0.2)
    with open(tmp_path / "store" / ".lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(TemporaryError, match="held by another writer"):
            store.patch_config_map_data(NS, "cm", {"a": "1"})
        assert store.get_config_map(NS, "cm") is not None  # readers take no lock


def test_files_are_private_to_the_controllers_user(store, tmp_path):
    store.patch_config_map_data(NS, "cm", {"a": "1"})
    root = tmp_path / "store"
    for path in (root, root / NS, root / NS / "configmaps"):
        assert path.stat().st_mode & 0o077 == 0, path
    assert (root / NS / "configmaps" / "cm").stat().st_mode & 0o077 == 0
    assert os.stat(root / ".lock").st_mode & 0o077 == 0
