"""Why a pod was, or would be, mutated or not. Pure: pod (+ namespace labels) in, reasons out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core import InvalidPod, Params, UnsupportedPod, mutate, names
from app.core.params import STEP_NAMES


@dataclass
class Step:
    ok: bool
    text: str


def explain(
    pod: dict[str, Any],
    params: Params,
    namespace_labels: dict[str, str] | None = None,
    excluded_namespaces: tuple[str, ...] = ("kube-system",),
) -> list[Step]:
    steps: list[Step] = []
    meta = pod.get("metadata") or {}
    ns = params.namespace
    opt = f"{names.INJECT_LABEL}={names.INJECT_LABEL_VALUE}"
    if namespace_labels is not None:
        on = namespace_labels.get(names.INJECT_LABEL) == names.INJECT_LABEL_VALUE
        steps.append(Step(on, f"namespace {ns} {'has' if on else 'lacks'} the label {opt}"
                          + ("" if on else f" (kubectl label namespace {ns} {opt})")))  # fmt: skip
        enforce = namespace_labels.get("pod-security.kubernetes.io/enforce", "")
        if enforce in ("baseline", "restricted"):
            steps.append(Step(False, f"namespace {ns} enforces Pod Security '{enforce}': host-network pods are "
                              "rejected; label it pod-security.kubernetes.io/enforce=privileged"))  # fmt: skip
    if ns in excluded_namespaces:
        steps.append(Step(False, f"namespace {ns} is excluded from the webhook"))
    labels = meta.get("labels") or {}
    has = labels.get(names.INJECT_LABEL) == names.INJECT_LABEL_VALUE
    steps.append(Step(has, f"pod {'has' if has else 'lacks'} the label {opt}"
                      + ("" if has else " (set it in the job's pod template, not on the job)")))  # fmt: skip
    host = (pod.get("spec") or {}).get("hostNetwork") is True
    steps.append(Step(host, "spec.hostNetwork is true" if host else "spec.hostNetwork is not true: nothing to do"))
    status = (meta.get("annotations") or {}).get(names.STATUS_ANNOTATION)
    if status:
        data = json.loads(status)
        skipped = data.get("skipped") or {}
        # Every step not skipped is in effect (older versions also listed them as "steps").
        applied = data.get("steps") or [s for s in STEP_NAMES if s not in skipped]
        steps.append(Step(True, f"already mutated by hostnet-rdma {data.get('version')}: launcher {data.get('launcher')}, "
                          f"profile {data.get('profile')}, steps {', '.join(applied)}"))  # fmt: skip
        for step, why in skipped.items():
            steps.append(Step(True, f"skipped {step}: {why}"))
        return steps
    try:
        result = mutate(pod, params)
    except (InvalidPod, UnsupportedPod) as e:
        steps.append(Step(False, f"the pod cannot be mutated safely: {e}"))
        return steps
    if result.info is None:
        return steps
    info = result.info
    steps.append(Step(True, f"launcher detected: {info.launcher}" + (f" (job {info.job})" if info.job else "")))
    steps.append(
        Step(
            bool(info.advertised_address),
            f"this pod's DNS name: {info.advertised_address or '(none: no hostname+subdomain)'}",
        )
    )
    steps.append(Step(True, f"NCCL profile: {result.profile} ({result.profile_reason})"))
    steps.append(Step(True, f"would inject: {', '.join(result.applied) or 'nothing'}"))
    for step, why in result.skipped.items():
        steps.append(Step(True, f"would skip {step}: {why}"))
    for w in result.warnings:
        steps.append(Step(False, f"warning: {w}"))
    return steps
