#!/usr/bin/env python3
"""Write directory trees as an OCI image archive (standard library only).

    python3 deploy/image/oci_archive.py layer DIR OUT.tar.gz [--epoch SECONDS]
    python3 deploy/image/oci_archive.py image OUT.tar --layer L1.tar.gz [--layer L2.tar.gz] \\
        --name fleetmedic/fleetmedic:0.1.0 [--entrypoint fleetmedic] [--cmd agent] \\
        [--user 10001:10001] [--env K=V] [--label K=V] [--workdir /] [--epoch SECONDS]

``layer`` writes one gzip'd layer and, beside it, ``OUT.tar.gz.json`` with its digest
and diff_id, so a layer that did not change (the Debian base) is reused as it is.

The archive is an OCI image layout in a tar (``oci-layout``, ``index.json``,
``blobs/sha256/...``) plus Docker's ``manifest.json``, so ``ctr images import``,
``podman load`` and ``docker load`` all take it, and ``skopeo copy
oci-archive:OUT.tar docker://REGISTRY/...`` pushes it. The index names the image both
ways loaders read a name: ``io.containerd.image.name`` (the full reference) and
``org.opencontainers.image.ref.name`` (its tag).

The layer is reproducible: entries sorted, owners kept as numbers, times clamped to
``--epoch`` (default ``SOURCE_DATE_EPOCH`` or 0), gzip without a name or time. The same
tree gives the same digest. ``/dev``, ``/proc``, ``/sys``, ``/run`` and ``/tmp`` go in
empty (the runtime provides them).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

EMPTY_DIRS = ("dev", "proc", "sys", "run", "tmp")
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


class _Hashing(io.RawIOBase):
    """A write-only file that hashes and counts what passes through to ``out``."""

    def __init__(self, out) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.sha.update(b)
        self.size += len(b)
        self.out.write(b)
        return len(b)


def full_reference(name: str) -> str:
    """``fleetmedic/fleetmedic:0.1.0`` -> ``docker.io/fleetmedic/fleetmedic:0.1.0``
    (how containerd and the kubelet spell a name without a registry)."""
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"library/{name}"
    elif "." in first or ":" in first or first == "localhost":
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
    name = f"docker.io/{name}"
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def write_layer(rootfs: Path, out, epoch: int) -> tuple[str, str, int]:
    """The gzip'd tar of ``rootfs`` into ``out``; returns (diff_id, digest, size)."""
    compressed = _Hashing(out)
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=6) as gz:
        plain = _Hashing(gz)
        with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:

            def norm(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
                parts = Path(ti.name).parts
                if len(parts) > 1 and parts[0] in EMPTY_DIRS:
                    return None
                ti.mtime = min(int(ti.mtime), epoch)
                ti.uname = ti.gname = ""
                ti.pax_headers = {}
                return ti

            for entry in sorted(os.listdir(rootfs)):
                tar.add(rootfs / entry, arcname=entry, filter=norm)
    return (
        f"sha256:{plain.sha.hexdigest()}",
        f"sha256:{compressed.sha.hexdigest()}",
        compressed.size,
    )


def layer(tree: Path, out: Path, epoch: int = 0) -> dict:
    """Write ``tree`` as a layer to ``out`` (+ ``out.json``); returns its descriptor."""
    part = out.with_name(out.name + ".part")
    with open(part, "wb") as f:
        diff_id, digest, size = write_layer(tree, f, epoch)
    meta = {"diff_id": diff_id, "digest": digest, "size": size}
    out.with_name(out.name + ".json").write_text(json.dumps(meta))
    part.replace(out)
    return meta


def _layer_meta(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".json").read_text())


def _blob(data: bytes) -> tuple[str, bytes]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", data


def build(
    layers: Sequence[Path],
    out: Path,
    *,
    name: str,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    user: str = "",
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
    labels: dict[str, str] | None = None,
    workdir: str = "/",
    epoch: int = 0,
) -> dict:
    """Write the archive; returns {"name", "digest" (of the manifest), "size"}."""
    ref = full_reference(name)
    tag = ref.rsplit(":", 1)[1]
    metas = [_layer_meta(p) for p in layers]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            k: v
            for k, v in {
                "User": user,
                "Env": list(env),
                "Entrypoint": list(entrypoint) or None,
                "Cmd": list(cmd) or None,
                "WorkingDir": workdir,
                "Labels": dict(labels or {}) or None,
            }.items()
            if v
        },
        "rootfs": {"type": "layers", "diff_ids": [m["diff_id"] for m in metas]},
        "history": [
            {"created": created, "created_by": f"deploy/image/oci_archive.py layer {p.name}"}
            for p in layers
        ],
    }
    cfg_digest, cfg = _blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": cfg_digest, "size": len(cfg)},
        "layers": [
            {"mediaType": MT_LAYER, "digest": m["digest"], "size": m["size"]} for m in metas
        ],
        "annotations": dict(labels or {}),
    }
    man_digest, man = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [
            {
                "mediaType": MT_MANIFEST,
                "digest": man_digest,
                "size": len(man),
                "annotations": {
                    "io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": tag,
                },
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    docker = [
        {
            "Config": f"blobs/sha256/{cfg_digest[7:]}",
            "RepoTags": [ref.removeprefix("docker.io/").removeprefix("library/")],
            "Layers": [f"blobs/sha256/{m['digest'][7:]}" for m in metas],
        }
    ]
    part = out.with_name(out.name + ".part")
    with tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as tar:

        def put(arcname: str, data: bytes | None = None, path: Path | None = None) -> None:
            ti = tarfile.TarInfo(arcname)
            ti.mtime, ti.mode = epoch, 0o644
            if path is not None:
                ti.size = path.stat().st_size
                with open(path, "rb") as f:
                    tar.addfile(ti, f)
            else:
                assert data is not None
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))

        for d in ("blobs", "blobs/sha256"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(ti)
        put("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        put(f"blobs/sha256/{cfg_digest[7:]}", cfg)
        for m, p in zip(metas, layers, strict=True):
            put(f"blobs/sha256/{m['digest'][7:]}", path=p)
        put(f"blobs/sha256/{man_digest[7:]}", man)
        put("index.json", json.dumps(index, sort_keys=True).encode())
        put("manifest.json", json.dumps(docker).encode())
    part.replace(out)
    return {"name": ref, "digest": man_digest, "size": out.stat().st_size}


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"oci_archive: bad {what} {item!r} (want KEY=VALUE)")
        out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    lp = sub.add_parser("layer", help="write one layer (and its .json)")
    lp.add_argument("tree", type=Path)
    lp.add_argument("out", type=Path)
    ip = sub.add_parser("image", help="write the image archive from layers")
    ip.add_argument("out", type=Path)
    ip.add_argument("--layer", type=Path, action="append", required=True)
    ip.add_argument("--name", required=True, help="e.g. fleetmedic/fleetmedic:0.1.0")
    ip.add_argument("--entrypoint", action="append", default=[])
    ip.add_argument("--cmd", action="append", default=[])
    ip.add_argument("--user", default="")
    ip.add_argument("--env", action="append", default=[])
    ip.add_argument("--label", action="append", default=[])
    ip.add_argument("--workdir", default="/")
    for p in (lp, ip):
        p.add_argument("--epoch", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    args = ap.parse_args(argv)
    if args.what == "layer":
        if not args.tree.is_dir():
            print(f"oci_archive: {args.tree} is not a directory", file=sys.stderr)
            return 2
        print(json.dumps(layer(args.tree, args.out, args.epoch)))
        return 0
    for p in args.layer:
        if not p.with_name(p.name + ".json").exists():
            print(f"oci_archive: {p} is not a layer written by 'layer'", file=sys.stderr)
            return 2
    _pairs(args.env, "--env")
    env = args.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    info = build(
        args.layer,
        args.out,
        name=args.name,
        entrypoint=args.entrypoint,
        cmd=args.cmd,
        user=args.user,
        env=env,
        labels=_pairs(args.label, "--label"),
        workdir=args.workdir,
        epoch=args.epoch,
    )
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
