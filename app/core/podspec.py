"""Upsert-by-name helpers over raw pod dicts. They never duplicate a name, so the diff of
the result is always a patch the API server can apply."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def child(obj: Obj, key: str) -> Obj:
    """obj[key] as a dict, created when missing."""
    v = obj.get(key)
    if not isinstance(v, dict):
        v = {}
        obj[key] = v
    return v


def child_list(obj: Obj, key: str) -> list[Any]:
    v = obj.get(key)
    if not isinstance(v, list):
        v = []
        obj[key] = v
    return v


def find_named(items: list[Any], name: str) -> Obj | None:
    for item in items:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return None


def add_volume(pod_spec: Obj, volume: Obj) -> None:
    """Add the volume unless one of that name exists (ours from an earlier pass)."""
    volumes = child_list(pod_spec, "volumes")
    if find_named(volumes, volume["name"]) is None:
        volumes.append(volume)


def mount_at(container: Obj, path: str) -> Obj | None:
    for m in container.get("volumeMounts") or []:
        if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == path.rstrip("/"):
            return m
    return None


def add_mount(container: Obj, name: str, path: str, sub_path: str = "") -> None:
    if mount_at(container, path) is not None:
        return
    mounts = child_list(container, "volumeMounts")
    if find_named(mounts, name) is not None:
        return
    mount: Obj = {"name": name, "mountPath": path}
    if sub_path:
        mount["subPath"] = sub_path
    mounts.append(mount)


class Env:
    """A container's env list with a name index: one scan per container, not one per key."""

    def __init__(self, container: Obj) -> None:
        self.container = container
        self.index: dict[str, Obj] = {}
        for e in container.get("env") or []:
            if isinstance(e, dict) and isinstance(e.get("name"), str):
                self.index.setdefault(e["name"], e)

    def get(self, key: str) -> Obj | None:
        return self.index.get(key)

    def _append(self, key: str, value: str) -> None:
        entry = {"name": key, "value": value}
        child_list(self.container, "env").append(entry)
        self.index[key] = entry

    def set_default(self, key: str, value: str) -> bool:
        """Add key=value unless the container already declares key (the user's value wins)."""
        if key in self.index:
            return False
        self._append(key, value)
        return True

    def set_owned(self, key: str, value: str) -> None:
        """Set a variable the webhook owns (HOSTNET_RDMA_*): always the computed value."""
        entry = self.index.get(key)
        if entry is None:
            self._append(key, value)
        else:
            entry.pop("valueFrom", None)
            entry["value"] = value
