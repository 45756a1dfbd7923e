"""Which pods the API server sends the webhook at all: its namespace and object selectors and
its match condition on `spec.hostNetwork`, as the chart renders them from the config (one home:
the chart's template is tested against from_config), and Kubernetes' label-selector rules.
Pure: selectors and labels in, reasons out. The webhook itself never needs this (the API server
applies it); the previews (`mutate`, `explain`) and the Event recorder do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core import names
from app.core.params import InjectConfig

NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
OPT_IN_MODES = ("namespace", "pod")


@dataclass(frozen=True)
class Selectors:
    """One webhook's selection, as its MutatingWebhookConfiguration entry holds it."""

    namespace: dict[str, Any]  # a LabelSelector
    object: dict[str, Any]
    host_network_only: bool = True  # matchConditions: object.spec.hostNetwork


def from_config(config: InjectConfig) -> Selectors:
    """The selectors the chart renders for this config (mutatingwebhookconfiguration.yaml)."""
    namespace = {
        "matchExpressions": [
            {"key": names.INJECT_LABEL, "operator": "In", "values": [names.INJECT_LABEL_VALUE]},
            {"key": NAME_LABEL, "operator": "NotIn", "values": list(config.exclude_namespaces)},
        ]
    }
    if config.opt_in == "pod":
        obj: dict[str, Any] = {"matchLabels": {names.INJECT_LABEL: names.INJECT_LABEL_VALUE}}
    else:
        obj = {
            "matchExpressions": [{"key": names.INJECT_LABEL, "operator": "NotIn", "values": [names.INJECT_DISABLED]}]
        }
    return Selectors(namespace=namespace, object=obj, host_network_only=True)


def from_webhook(hook: dict[str, Any]) -> Selectors:
    """The selection of an installed webhook (one `webhooks[]` entry, as JSON)."""
    conditions = hook.get("matchConditions") or []
    return Selectors(
        namespace=dict(hook.get("namespaceSelector") or {}),
        object=dict(hook.get("objectSelector") or {}),
        host_network_only=any("spec.hostNetwork" in str(c.get("expression", "")) for c in conditions),
    )


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes' LabelSelector rule: every matchLabels pair and every expression holds; an
    empty selector selects everything."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def mode(selectors: Selectors) -> str:
    """`pod` when the object selector asks pods for the opt-in label, else `namespace`."""
    obj = selectors.object
    if (obj.get("matchLabels") or {}).get(names.INJECT_LABEL) == names.INJECT_LABEL_VALUE:
        return "pod"
    for expr in obj.get("matchExpressions") or []:
        if expr.get("key") == names.INJECT_LABEL and expr.get("operator") == "In":
            return "pod"
    return "namespace"


def excluded(selectors: Selectors) -> tuple[str, ...]:
    """The namespaces named in the namespace selector's `kubernetes.io/metadata.name NotIn`."""
    out: list[str] = []
    for expr in selectors.namespace.get("matchExpressions") or []:
        if expr.get("key") == NAME_LABEL and expr.get("operator") == "NotIn":
            out += [str(v) for v in expr.get("values") or []]
    return tuple(out)


def not_sent(
    selectors: Selectors, pod: dict[str, Any], namespace: str, namespace_labels: dict[str, str] | None
) -> list[str]:
    """Why the API server would not send this pod to the webhook ([] when it would). Without the
    namespace's labels (a file previewed offline) the namespace is taken as opted in, so only
    an exclusion by name can keep it out."""
    reasons: list[str] = []
    opt = f"{names.INJECT_LABEL}={names.INJECT_LABEL_VALUE}"
    ns_labels = (
        dict(namespace_labels) if namespace_labels is not None else {names.INJECT_LABEL: names.INJECT_LABEL_VALUE}
    )
    ns_labels[NAME_LABEL] = namespace
    if not matches(selectors.namespace, ns_labels):
        if namespace in excluded(selectors):
            reasons.append(f"namespace {namespace} is excluded from the webhook (the chart's webhook.excludeNamespaces, "
                           "or the webhook's own namespace)")  # fmt: skip
        elif ns_labels.get(names.INJECT_LABEL) != names.INJECT_LABEL_VALUE:
            value = ns_labels.get(names.INJECT_LABEL)
            has = "lacks the label" if value is None else f"has {names.INJECT_LABEL}={value!r}, not"
            reasons.append(f"namespace {namespace} {has} {opt} (kubectl label namespace {namespace} {opt})")
        else:
            reasons.append(f"namespace {namespace} does not match the webhook's namespaceSelector")
    meta = _mapping(pod.get("metadata"))
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()}
    if not matches(selectors.object, labels):
        value = labels.get(names.INJECT_LABEL)
        if value == names.INJECT_DISABLED:
            reasons.append(f"the pod opts out: label {names.INJECT_LABEL}={names.INJECT_DISABLED}")
        elif mode(selectors) == "pod":
            has = "lacks the label" if value is None else f"has {names.INJECT_LABEL}={value!r}, not"
            reasons.append(f"the pod {has} {opt}, which the webhook's opt-in mode `pod` requires (set it in the "
                           "job's pod template, not on the job)")  # fmt: skip
        else:
            reasons.append("the pod's labels do not match the webhook's objectSelector")
    spec = _mapping(pod.get("spec"))
    if selectors.host_network_only and spec.get("hostNetwork") is not True:
        reasons.append("spec.hostNetwork is not true: only host-network pods are sent")
    return reasons


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
