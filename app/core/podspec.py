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


def add_mount(container: Obj, name: str, path: str, read_only: bool = False) -> None:
    if mount_at(container, path) is not None:
        return
    mounts = child_list(container, "volumeMounts")
    if find_named(mounts, name) is not None:
        return
    mount: Obj = {"name": name, "mountPath": path}
    if read_only:
        mount["readOnly"] = True
    mounts.append(mount)


def env_entry(container: Obj, key: str) -> Obj | None:
    return find_named(container.get("env") or [], key)


def set_env_default(container: Obj, key: str, value: str) -> bool:
    """Add key=value unless the container already declares key (the user's value wins)."""
    if env_entry(container, key) is not None:
        return False
    child_list(container, "env").append({"name": key, "value": value})
    return True


def set_env_owned(container: Obj, key: str, value: str) -> None:
    """Set a variable the webhook owns (HOSTNET_RDMA_*): always the computed value."""
    entry = env_entry(container, key)
    if entry is None:
        child_list(container, "env").append({"name": key, "value": value})
    else:
        entry.pop("valueFrom", None)
        entry["value"] = value
