"""LeaderWorkerSet (v0.8.0 to v0.9.0): per group g a leader `<lws>-<g>` (the leader StatefulSet `<lws>`)
and workers `<lws>-<g>-<w>`, w = 1..size-1 (the worker StatefulSet `<lws>-<g>`), under the
headless Service `<lws>`; LWS's own pod webhook adds the group's labels and the LWS_* env."""

from __future__ import annotations

import copy

from app.preview.controllers.common import (
    ExpandError,
    Obj,
    as_dict,
    integer,
    literal,
    meta,
    name_of,
    pod_count,
    pod_from_template,
    uid_of,
)

L = "leaderworkerset.sigs.k8s.io/"


def leaderworkerset(obj: Obj) -> list[Obj]:
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    spec = as_dict(obj.get("spec"))
    lwt = spec.get("leaderWorkerTemplate")
    if not isinstance(lwt, dict) or not isinstance(lwt.get("workerTemplate"), dict):
        raise ExpandError(f"LeaderWorkerSet {name}: no spec.leaderWorkerTemplate.workerTemplate")
    groups = integer(spec.get("replicas"), 1, f"LeaderWorkerSet {name}: spec.replicas")
    size = integer(lwt.get("size"), 1, f"LeaderWorkerSet {name}: leaderWorkerTemplate.size")
    pod_count(groups * size, f"LeaderWorkerSet {name}")
    leader_template: Obj = as_dict(lwt.get("leaderTemplate")) or as_dict(lwt["workerTemplate"])
    pods: list[Obj] = []
    for g in range(groups):
        leader = f"{name}-{g}"
        group = {f"{L}name": name, f"{L}group-index": str(g), f"{L}group-key": f"<group key of {leader}>"}
        for w in range(size):
            pod_name = leader if w == 0 else f"{leader}-{w}"
            sts = name if w == 0 else leader
            template: Obj = copy.deepcopy(leader_template if w == 0 else as_dict(lwt["workerTemplate"]))
            p = pod_from_template(
                template, ns, name=pod_name,
                labels={**group, f"{L}worker-index": str(w), f"{L}template-revision-hash": "<revision>",
                        "statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(w),
                        "controller-revision-hash": f"{sts}-<revision>"},
                annotations={f"{L}size": str(size), **({} if w == 0 else {f"{L}leader-name": leader})},
                owners=[{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts,
                         "uid": f"<uid of StatefulSet {sts}>" if w else uid_of(obj), "controller": True,
                         "blockOwnerDeletion": True}],
            )  # fmt: skip
            p["spec"]["hostname"] = pod_name
            p["spec"]["subdomain"] = name
            for c in p["spec"].get("containers") or []:
                # LWS's pod webhook puts its env first.
                own = [
                    e
                    for e in c.get("env") or []
                    if e.get("name") not in ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")
                ]
                c["env"] = [literal("LWS_LEADER_ADDRESS", f"{leader}.{name}.{ns}"), literal("LWS_GROUP_SIZE", str(size)),
                            literal("LWS_WORKER_INDEX", str(w)), *own]  # fmt: skip
            pods.append(p)
    return pods
