"""NCCL profile selection: annotation, else the instance-type nodeSelector, else default."""

from __future__ import annotations

from typing import Any

from app.core import names, reasons
from app.core.params import InjectConfig, Profile
from app.core.reasons import Warned


def select(pod: dict[str, Any], config: InjectConfig, warnings: list[Warned]) -> tuple[Profile, str]:
    """The profile for this pod and why it was chosen."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    wanted = ann.get(names.ANN_PROFILE)
    if wanted:
        if wanted in config.profiles:
            return config.profiles[wanted], f"annotation {names.ANN_PROFILE}"
        warnings.append(
            Warned(
                reasons.ANNOTATION_IGNORED,
                f"unknown NCCL profile {wanted!r} in {names.ANN_PROFILE}; known: {', '.join(sorted(config.profiles))}",
            )
        )
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    instance_type = selector.get(names.INSTANCE_TYPE_LABEL) if isinstance(selector, dict) else None
    if instance_type and instance_type in config.profiles:
        return config.profiles[instance_type], f"nodeSelector {names.INSTANCE_TYPE_LABEL}={instance_type}"
    found = config.profiles.get(config.default_profile)  # not .get(k, Profile(...)): that builds one every pod
    return (found if found is not None else Profile(config.default_profile, ())), "default"
