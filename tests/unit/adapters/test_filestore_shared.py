"""The file store shared between bastions (adapters/filestore.py): its identity, and the
mounts on which its locks would not be shared (read from mountinfo lines in the kernel's
format)."""

from __future__ import annotations

import threading
import uuid

import pytest

from fleetmedic.adapters.filestore import FileStore, StoreCorrupt, shared_problem

# /proc/self/mountinfo lines (fields as proc(5) gives them)
ROOTFS = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw"
NFS = "40 22 0:45 / /srv/fleetmedic rw,relatime shared:20 - nfs4 nas:/export/fm rw,vers=4.2,{opts}"
SPACE = r"41 22 0:46 / /mnt/with\040space rw shared:21 - nfs nas:/x rw,vers=3,nolock"


def test_the_identity_is_made_once_and_shared_by_everyone_who_opens_the_directory(tmp_path):
    got: list[str] = []
    threads = [
        threading.Thread(target=lambda: got.append(FileStore(tmp_path / "s").store_id()))
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and uuid.UUID(got[0])
    assert FileStore(tmp_path / "s").store_id() == got[0]
    assert FileStore(tmp_path / "other").store_id() != got[0]


def test_a_damaged_identity_is_reported_never_replaced(tmp_path):
    store = FileStore(tmp_path / "s")
    store.store_id()
    (tmp_path / "s" / ".store-id").write_text("garbage\n")
    with pytest.raises(StoreCorrupt, match="not a UUID"):
        store.store_id()


@pytest.mark.parametrize("opts", ["local_lock=flock", "local_lock=all", "nolock"])
def test_nfs_with_host_local_locks_is_refused(opts):
    info = "\n".join([ROOTFS, NFS.format(opts=opts)])
    why = shared_problem("/srv/fleetmedic/slurm", info)  # type: ignore[arg-type]
    assert why and opts in why and "two bastions" in why and "\n" not in why


@pytest.mark.parametrize("opts", ["local_lock=none", "hard,proto=tcp"])
def test_nfs_with_shared_locks_and_local_disks_pass(opts):
    info = "\n".join([ROOTFS, NFS.format(opts=opts)])
    assert shared_problem("/srv/fleetmedic/slurm", info) is None  # type: ignore[arg-type]
    assert shared_problem("/var/lib/fleetmedic", info) is None  # type: ignore[arg-type]
    assert shared_problem("/srv/fleetmedicX", info) is None  # type: ignore[arg-type]


def test_mount_points_with_spaces_are_matched():
    info = "\n".join([ROOTFS, SPACE])
    why = shared_problem("/mnt/with space/state", info)  # type: ignore[arg-type]
    assert why and "nolock" in why
