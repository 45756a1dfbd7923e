"""Why a pod was, or would be, mutated or not. Pure: pod (+ namespace labels) in, reasons out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core import InvalidPod, Params, UnsupportedPod, mutate, names, selection
from app.core.params import STEP_NAMES


@dataclass
class Step:
    ok: bool
    text: str


def explain(
    pod: dict[str, Any],
    params: Params,
    namespace_labels: dict[str, str] | None = None,
    selectors: selection.Selectors | None = None,
    live: bool = False,
) -> list[Step]:
    """`selectors`: the installed webhook's (read from the cluster); None: what the chart
    renders for params.config. `namespace_labels`: None for a file previewed offline. `live`:
    the pod as the cluster stored it, so one the webhook would change but that carries no status
    annotation was created without it."""
    steps: list[Step] = []
    meta = pod.get("metadata") or {}
    ns = params.namespace
    sel = selectors if selectors is not None else selection.from_config(params.config)
    mode = selection.mode(sel)
    opt = f"{names.INJECT_LABEL}={names.INJECT_LABEL_VALUE}"
    steps.append(Step(True, f"opt-in mode {mode}: " + (
        "every host-network pod of a labelled namespace is sent; training pods get the plumbing"
        if mode == "namespace" else f"a pod is sent only if it carries {opt} too")))  # fmt: skip
    reasons = selection.not_sent(sel, pod, ns, namespace_labels)
    ns_reasons = [r for r in reasons if r.startswith(f"namespace {ns} ")]
    if namespace_labels is not None and not ns_reasons:
        steps.append(Step(True, f"namespace {ns} has the label {opt}"))
    steps += [Step(False, r) for r in ns_reasons]
    if namespace_labels is not None:
        enforce = namespace_labels.get("pod-security.kubernetes.io/enforce", "")
        if enforce in ("baseline", "restricted"):
            steps.append(Step(False, f"namespace {ns} enforces Pod Security '{enforce}': host-network pods are "
                              "rejected; label it pod-security.kubernetes.io/enforce=privileged"))  # fmt: skip
    labels = meta.get("labels") or {}
    label = labels.get(names.INJECT_LABEL)
    pod_reasons = [r for r in reasons if r.startswith("the pod")]
    if pod_reasons:
        steps += [Step(False, r) for r in pod_reasons]
    elif label == names.INJECT_LABEL_VALUE:
        steps.append(
            Step(
                True, f"pod has the label {opt}" + (": a training pod, whatever it runs" if mode == "namespace" else "")
            )
        )
    elif label is None:
        steps.append(Step(True, "no pod label needed (opt-in mode namespace)"))
    else:
        steps.append(Step(True, f"pod label {names.INJECT_LABEL}={label!r} is neither {names.INJECT_LABEL_VALUE!r} "
                          f"(a training pod) nor {names.INJECT_DISABLED!r} (opt out): read as no label"))  # fmt: skip
    rest = [r for r in reasons if r not in ns_reasons and r not in pod_reasons]
    if (pod.get("spec") or {}).get("hostNetwork") is True:
        steps.append(Step(True, "spec.hostNetwork is true"))
    steps += [Step(False, r) for r in rest]
    if reasons:
        return steps
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
        steps.append(Step(False, f"left unchanged: {result.reason}"))
        return steps
    info = result.info
    if live and result.changed:
        # Sent to the webhook (the selectors above), a pod it changes, yet stored without its
        # status: the API server created it without the webhook (failurePolicy Ignore).
        steps.append(Step(False, "created without the webhook (it was unreachable or timed out): this pod has no "
                          "plumbing; recreate it once the webhook answers. What the webhook would have done:"))  # fmt: skip
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
        steps.append(Step(False, f"warning: {w.text}"))
    return steps
