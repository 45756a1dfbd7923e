"""What one admission tells the Events recorder, and what an Event says: who it is about (the
job the user created), its reason, and its note. Made on the event loop: small, bounded.

A review need not come from the API server (anyone who reaches the Service can post one), so
nothing of the review's free text reaches an Event: a note is our own sentence for its reason
(NOTES) and names that are DNS names of bounded length (the pod; the job, once app.events.gates
has found it exists with that uid). The warnings' own text goes back to the pod's creator in
the admission response and, for what stops a job, into the pod's status annotation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from app.core import Warned, reasons

NOTE_MAX = 1024  # the API server rejects longer notes
# Bounds on what one admission hands the recorder.
MAX_WARNINGS = len(reasons.REASONS)  # one note per reason is all an Event shows
FIELD_MAX = 253  # names, kinds, API versions (DNS subdomain length)
UID_MAX = 128

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"

# Every reason (app.core.reasons: each warning is made with its own); they are a contract (users
# filter on them: `kubectl get events --field-selector reason=NodeCountUnknown`), listed in
# docs/configuration.md.
REASONS = reasons.REASONS

# What an Event of each reason says: ours, never the review's. The pod's admission warning (its
# creator, the controller, gets it) and `hostnet-rdma explain POD` say which container and flag.
NOTES = {
    reasons.LEFTOVER_FLAG: "the command sets --local-addr or is_host itself (hand-written rendezvous shell): the wrapper "
    "replaces or refuses it at start; remove it, the webhook sets both on each pod",
    reasons.NODE_COUNT_UNKNOWN: "--nnodes not given for a job of several pods: torchrun's default (1 node) would train each "
    "pod alone, so the wrapper refuses to start. Pass --nnodes=N or annotate the pod template hostnet-rdma.io/nnodes",
    reasons.LOOPBACK_ENDPOINT: "the rendezvous endpoint is loopback, but the job runs on several nodes: the wrapper refuses "
    "to start. Point --rdzv-endpoint at the DNS name of one pod of the job",
    reasons.ENDPOINT_NAMES_NO_POD: "the rendezvous endpoint names no pod of this job (an IP address, a node name, a "
    "Service): decided by address in each pod; use the DNS name of one pod of the job",
    reasons.TORCHRUN_NOT_WRAPPED: "torchrun is not wrapped (no command, so the image entrypoint runs; or no stable DNS name "
    "for the pod): no preflight checks, and what admission could not set is left to torchrun",
    reasons.SHM_CAPPED: "/dev/shm will be capped by the pod's memory limit, below the size asked for",
    reasons.PRIVILEGE_KEPT: "privileged: false, allowPrivilegeEscalation: false or a dropped capability was kept as set: "
    "RDMA may not work in this pod",
    reasons.ENV_FROM_OVERRIDDEN: "envFrom values are invisible at admission: the profile's NCCL env wins over them",
    reasons.DNS_POLICY_KEPT: "dnsPolicy Default kept: the pods' DNS names will not resolve, and the rendezvous cannot form",
    reasons.MPI_ENV_NOT_FORWARDED: "MPIJob workers run sshd, and the ranks mpirun starts there get a fresh environment: "
    "settings the webhook could not write to the worker's /etc/nccl.conf (the container mounts its own, or another "
    "library's) reach them only from the launcher, if it sets them; the worker's admission warning names them",
    reasons.ALLOCATOR_ASSUMED: "the pod asks for a resource that looks like a NIC pool of an allocator hostnet-rdma does "
    "not know: taken to hand the pod its NICs, so it got no /dev/infiniband hostPath, privileged or SYS_ADMIN; the "
    "config's rdmaResourcePrefixes names a cluster's own allocators",
    reasons.POD_LEFT_UNCHANGED: "the pod could not be handled safely and was admitted unchanged, without the RDMA plumbing",
    reasons.ANNOTATION_IGNORED: "a hostnet-rdma.io/ annotation has a value that is not understood; it was ignored",
    reasons.RENDEZVOUS_REFUSED: "a rendezvous setting of the command cannot work (is_host against the endpoint, "
    "--master-addr on a rank other than 0): the wrapper refuses to start",
    reasons.SSHD_ON_NODE_PORT: "sshd in a host-network pod listens on port 22, the node's, where the node's own sshd "
    "listens: it cannot bind, and mpirun's ssh reaches the node's sshd. Start sshd on another port (sshd -D -p 2222) "
    'and tell mpirun\'s ssh that port (Open MPI 4: -mca plm_rsh_args "-p 2222"; Open MPI 5: PRTE_MCA_plm_ssh_args)',
    reasons.MULTUS_ON_HOST_NETWORK: "Multus network attachments on a host-network pod are never made (no CNI runs for "
    "it): their interfaces never appear and their VFs get no address. Drop hostNetwork, or drop the attachments",
    reasons.DRA_CLAIM_ON_HOST_NETWORK: "DRA resource claims on a host-network pod: a DRA driver that moves NICs into the "
    "pod's network namespace has none to move them to (dranet refuses the pod's sandbox). Drop hostNetwork for pods "
    "whose NICs come from DRA",
    reasons.GENERAL: "an admission warning",
}

_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def dns_name(value: Any) -> str:
    """A name from the review as an Event may carry it: a DNS subdomain (what object names
    are), else "" (a review the API server did not send may say anything)."""
    return value if isinstance(value, str) and _DNS_NAME.fullmatch(value) else ""


class Regarding(NamedTuple):
    """The object an Event is about: what `kubectl describe` matches (kind, name, uid). A tuple:
    one is made each admission, and a frozen dataclass's generated __init__ runs interpreted."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str

    def ref(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
                "namespace": self.namespace}  # fmt: skip


def regarding(pod: dict[str, Any], namespace: str) -> Regarding | None:
    """The job the user created, as far as the pod shows it: a JobSet's pods name it in their
    labels (their owner is one of its Jobs); otherwise the pod's controller. None for a pod
    with no owner: its creator gets the admission warnings directly."""
    meta = pod.get("metadata")
    return regarding_of(meta if isinstance(meta, dict) else {}, namespace)


def regarding_of(meta: dict[str, Any], namespace: str) -> Regarding | None:
    """regarding() from the pod's metadata. Names that are no DNS names name nothing."""
    labels = meta.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    if labels.get(JOBSET_NAME) and labels.get(JOBSET_UID):
        name = dns_name(labels[JOBSET_NAME])
        return Regarding("jobset.x-k8s.io/v1alpha2", "JobSet", name, str(labels[JOBSET_UID])[:UID_MAX],
                         namespace[:FIELD_MAX]) if name else None  # fmt: skip
    refs = meta.get("ownerReferences")
    refs = [r for r in refs if isinstance(r, dict)] if isinstance(refs, list) else []
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is None or not all(
        isinstance(ref.get(k), str) and ref.get(k) for k in ("apiVersion", "kind", "name", "uid")
    ):
        return None
    name = dns_name(ref["name"])
    if not name:
        return None
    return Regarding(str(ref["apiVersion"])[:FIELD_MAX], str(ref["kind"])[:FIELD_MAX], name,
                     str(ref["uid"])[:UID_MAX], namespace[:FIELD_MAX])  # fmt: skip


class Admission(NamedTuple):
    """What one admission tells the recorder: a small record of bounded size (never the pod's
    metadata), made on the event loop by admission(): the warnings' reasons, never their text."""

    regarding: Regarding
    launcher: str
    version: str
    mutated: bool
    applied: tuple[str, ...]
    profile: str
    reasons: tuple[str, ...]
    pod: str = ""


def admission(
    metadata: dict[str, Any],
    namespace: str,
    launcher: str,
    version: str,
    mutated: bool,
    applied: Sequence[str],
    profile: str,
    warnings: Sequence[Warned],
) -> Admission | None:
    """The record of one admission, None when no job owns the pod (its creator gets the
    admission warnings directly: nothing to record)."""
    about = regarding_of(metadata, namespace)
    if about is None:
        return None
    pod = dns_name(metadata.get("name")) or dns_name(metadata.get("generateName"))
    # Lists, not generators, into the tuples: a generator is an object of its own in mypyc.
    return Admission(about, launcher[:64], version[:64], mutated, tuple([a[:64] for a in applied[:16]]),
                     profile[:FIELD_MAX], tuple(dict.fromkeys([w.reason for w in warnings]))[:MAX_WARNINGS], pod)  # fmt: skip


def size_of(a: Admission) -> int:
    """What a record holds, in bytes as far as it matters (its strings), plus its objects."""
    r = a.regarding
    strings = (r.api_version, r.kind, r.name, r.uid, r.namespace, a.launcher, a.version, a.profile, *a.applied,
               *a.reasons, a.pod)  # fmt: skip
    return 400 + sum(len(x) for x in strings)


@dataclass(frozen=True)
class Occurrence:
    regarding: Regarding
    reason: str
    type: str  # Normal | Warning
    note: str


def occurrences(a: Admission) -> list[Occurrence]:
    about = a.regarding
    out: list[Occurrence] = []
    if a.mutated:
        steps = ", ".join(f"{s} (profile {a.profile})" if s == "nccl-env" else s for s in a.applied)
        out.append(Occurrence(about, "Injected", "Normal",
                              f"hostnet-rdma {a.version}, launcher {a.launcher}: {steps or 'no step'}"))  # fmt: skip
    seen: set[str] = set()
    for reason in a.reasons:
        if reason not in seen:  # one per kind a pod
            seen.add(reason)
            where = (
                f" (first seen on pod {a.pod}: `hostnet-rdma explain` it for the container and flag)" if a.pod else ""
            )
            out.append(Occurrence(about, reason, "Warning", (NOTES[reason] + where)[:NOTE_MAX]))
    return out
