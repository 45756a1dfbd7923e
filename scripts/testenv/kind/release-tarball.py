#!/usr/bin/env python3
"""Write a kubernetes-server-linux-amd64.tar.gz-shaped tarball for `kind build node-image --type
file`: kubeadm, kubelet and kubectl, and the images kind bakes into the node as `docker save`
archives.

    release-tarball.py OUT VERSION BIN_DIR IMAGE...

The first four images go in one archive each (kube-apiserver, kube-controller-manager,
kube-scheduler, kube-proxy, as in a Kubernetes release); the rest ride in kube-proxy's archive.
Two quirks of kind, read in its nodeimage build: it compares image names literally, so every
RepoTag is written fully qualified (docker.io/library/...), and it reads only the first
manifest entry of an archive unless `repositories` comes before `manifest.json`, so that is
written first.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")


def qualified(ref: str) -> str:
    first = ref.split("/")[0]
    if "/" not in ref:
        ref = "library/" + ref
    if not ("." in first or ":" in first or first == "localhost"):
        ref = "docker.io/" + ref
    return ref


def archive(images: list[str]) -> bytes:
    raw = subprocess.run(["docker", "save", *images], check=True, stdout=subprocess.PIPE).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as src:
        return _rewrite(src)


def _rewrite(src: tarfile.TarFile) -> bytes:
    manifest_file = src.extractfile("manifest.json")
    assert manifest_file is not None
    manifest = json.load(manifest_file)
    repos: dict[str, dict[str, str]] = {}
    for entry in manifest:
        entry["RepoTags"] = [qualified(t) for t in entry.get("RepoTags") or []]
        for tag in entry["RepoTags"]:
            repo, version = tag.rsplit(":", 1)
            repos.setdefault(repo, {})[version] = entry["Config"].split("/")[-1].split(".")[0]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as dst:
        for name, text in (("repositories", json.dumps(repos)), ("manifest.json", json.dumps(manifest))):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            dst.addfile(info, io.BytesIO(data))
        for member in src.getmembers():
            if member.name not in ("repositories", "manifest.json"):
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return buf.getvalue()


def main() -> None:
    out, version, bin_dir, *images = sys.argv[1:]
    groups: dict[str, list[str]] = {name: [] for name in CONTROL_PLANE}
    for ref in images:
        name = ref.rsplit("/", 1)[-1].split(":")[0]
        groups["kube-proxy" if name not in groups else name].append(ref)
    with tarfile.open(out, "w:gz", compresslevel=1) as t:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))

        add("kubernetes/version", f"{version}\n".encode())
        for binary in ("kubeadm", "kubelet", "kubectl"):
            t.add(f"{bin_dir}/{binary}", arcname=f"kubernetes/server/bin/{binary}")
        for name, refs in groups.items():
            add(f"kubernetes/server/bin/{name}.tar", archive(refs))
            print(f"[kind/release-tarball] {name}.tar: {' '.join(refs)}", file=sys.stderr)


if __name__ == "__main__":
    main()
