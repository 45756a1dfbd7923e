"""The cluster config a chart install gives the webhook, computed as the chart's
templates/configmap.yaml computes it, so a preview (`mutate`, `explain`) of the chart's `config:`
block, or of no config at all, is what a default install stores. tests/test_chart.py renders the
chart with helm and holds this to it. Pure."""

from __future__ import annotations

import copy
from typing import Any

from app import __version__

# The chart's defaults (values.yaml, Chart.yaml's appVersion); the test above keeps them equal.
IMAGE_REPOSITORY = "ghcr.io/hostnet-rdma/hostnet-rdma"
IMAGE_PULL_POLICY = "IfNotPresent"
EXCLUDE_NAMESPACES = ("kube-system",)
RELEASE_NAMESPACE = "hostnet-rdma-system"
# The newest Kubernetes minor the chart is rendered for (deploy/manifests, the cluster tier).
KUBE_VERSION = "1.36"
IMAGE_VOLUMES_SINCE = (1, 35)  # `delivery: auto` picks imageVolume from this version on


def _minor(version: str) -> tuple[int, int]:
    parts = version.lstrip("v").split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        raise ValueError(f"--kube-version {version!r} is not a Kubernetes version (e.g. 1.34)") from None


def from_values(values: dict[str, Any] | None, kube_version: str = KUBE_VERSION) -> dict[str, Any]:
    """The ConfigMap's config.yaml for these chart values (a values file, or just its
    `config:` block given as {"config": ...}); `delivery: auto` resolved for `kube_version`."""
    values = values or {}
    config: dict[str, Any] = copy.deepcopy(values.get("config") or {})
    image = values.get("image") or {}
    repository = str(image.get("repository") or IMAGE_REPOSITORY)
    tag = str(image.get("tag") or __version__)
    wrapper_image = values.get("wrapperImage") or {}
    wrapper = config.setdefault("wrapper", {})
    delivery = wrapper.get("delivery") or "auto"
    if delivery == "auto":
        delivery = "imageVolume" if _minor(kube_version) >= IMAGE_VOLUMES_SINCE else "initContainer"
    wrapper["delivery"] = delivery
    if not wrapper.get("image"):
        if delivery == "imageVolume" and not wrapper_image.get("useWebhookImage"):
            wrapper["image"] = (f"{wrapper_image.get('repository') or repository + '-wrapper'}:"
                                f"{wrapper_image.get('tag') or image.get('tag') or __version__}")  # fmt: skip
        else:
            wrapper["image"] = f"{repository}:{tag}"
            if delivery == "imageVolume":
                wrapper["imageSubPath"] = "wrapper"
    if not wrapper.get("imagePullPolicy"):
        wrapper["imagePullPolicy"] = str(image.get("pullPolicy") or IMAGE_PULL_POLICY)
    webhook = values.get("webhook") or {}
    excluded = list(webhook.get("excludeNamespaces") or EXCLUDE_NAMESPACES)
    namespace = str(values.get("releaseNamespace") or RELEASE_NAMESPACE)
    config["excludeNamespaces"] = list(dict.fromkeys([*excluded, namespace]))
    return config


def is_chart_block(data: dict[str, Any]) -> bool:
    """A values file (with `config:`) or the chart's config block, rather than the webhook's
    own config file: it may say `delivery: auto`, or leave the wrapper image to the chart."""
    if "config" in data and isinstance(data["config"], dict):
        return True
    raw = data.get("wrapper")
    wrapper: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return wrapper.get("delivery") in (None, "auto") or not wrapper.get("image")
