"""LeaderWorkerSet. Leader `<lws>-<g>`, workers `<lws>-<g>-<w>`, under subdomain `<lws>`.

LWS's own pod webhook adds LWS_LEADER_ADDRESS / LWS_GROUP_SIZE env and the group-key label,
possibly after ours (we are re-invoked then), so defaults refer to that env at run time.
The rendezvous id is the group key, sha1(namespace/leader name): an LWS deleted and created
again reuses it. Leader and workers share no per-incarnation value at admission (their owners
differ, and pods have no UID yet), which matters only for etcd backends (c10d keeps no state).
"""

from __future__ import annotations

from app.core.launchers.base import Kind, LauncherInfo, Pod, dns_name, hostname_and_subdomain, name, pod_labels

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"


class LeaderWorkerSet:
    name = "lws"
    kinds = (Kind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets"),)
    training_only = True
    container = ""
    controller = "lws"

    def detect(self, pod: Pod) -> bool:
        return LWS_NAME in pod_labels(pod)

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        lab = pod_labels(pod)
        lws = dns_name(lab[LWS_NAME])
        hostname, subdomain = hostname_and_subdomain(pod)
        hostname = hostname or name(pod)
        subdomain = subdomain or lws
        group = lab.get(GROUP_INDEX, "")
        return LauncherInfo(
            launcher=self.name,
            job=f"{lws}-{group}" if group else lws,
            hostname=hostname,
            subdomain=subdomain,
            advertised_address=f"{hostname}.{subdomain}" if hostname else "",
            rdzv_endpoint=f"${{LWS_LEADER_ADDRESS}}:{rdzv_port}",
            default_port=True,
            rdzv_backend="c10d",
            rdzv_id=lab.get(GROUP_KEY) or (f"{lws}-{group}" if group else ""),
            nnodes="${LWS_GROUP_SIZE}",
            peers=(f"{lws}-*",) if lws else (),
        )
