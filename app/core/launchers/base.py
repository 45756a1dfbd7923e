"""What every launcher adapter provides, and small helpers to read a raw pod dict."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from app.core import budget

Pod = dict[str, Any]


@dataclass
class LauncherInfo:
    """What the owning launcher implies for this pod's rendezvous; read-only by convention.

    Values may contain ``${VAR}``: the wrapper expands them from the container env at run
    time (launchers such as Volcano and LWS publish host lists only as runtime env).
    """

    launcher: str
    job: str = ""
    # The DNS label and headless-service subdomain that make this pod addressable.
    hostname: str = ""
    subdomain: str = ""
    # The address other nodes must use to reach this pod (torchrun --local-addr).
    advertised_address: str = ""
    # True when the launcher creates one Service per pod, named like the pod (Training Operator).
    service_per_pod: bool = False
    rdzv_endpoint: str = ""
    rdzv_backend: str = ""
    rdzv_id: str = ""
    nnodes: str = ""
    # The container the launcher runs training in, when it names one.
    designated_container: str = ""
    # Glob patterns of the host names of the job's pods (`job-*`): an endpoint matching none
    # names no pod, so nobody would host the store (reported at admission and run time).
    peers: tuple[str, ...] = ()
    # The endpoint's port is the one describe() was given (the launcher implies the store's
    # port, the user named none): a job's own port may replace it (mutate.job_port).
    default_port: bool = False

    # Written out: the dataclass's generated __init__ runs interpreted even in the compiled
    # core (BENCHMARKS.md); this one compiles. Same fields, same order and defaults.
    def __init__(
        self,
        launcher: str,
        job: str = "",
        hostname: str = "",
        subdomain: str = "",
        advertised_address: str = "",
        service_per_pod: bool = False,
        rdzv_endpoint: str = "",
        rdzv_backend: str = "",
        rdzv_id: str = "",
        nnodes: str = "",
        designated_container: str = "",
        peers: tuple[str, ...] = (),
        default_port: bool = False,
    ) -> None:
        self.launcher = launcher
        self.job = job
        self.hostname = hostname
        self.subdomain = subdomain
        self.advertised_address = advertised_address
        self.service_per_pod = service_per_pod
        self.rdzv_endpoint = rdzv_endpoint
        self.rdzv_backend = rdzv_backend
        self.rdzv_id = rdzv_id
        self.nnodes = nnodes
        self.designated_container = designated_container
        self.peers = peers
        self.default_port = default_port

    def _bases(self) -> list[str]:
        """The names a Service makes for this pod, before the namespace: `host.subdomain`
        (headless Service) and/or `host` (a Service per pod, or no subdomain)."""
        if not self.hostname:
            return []
        bases = [f"{self.hostname}.{self.subdomain}"] if self.subdomain else []
        if self.service_per_pod or not self.subdomain:
            bases.append(self.hostname)
        return bases

    def identities(self, namespace: str, cluster_domain: str) -> tuple[str, ...]:
        """Every DNS name an endpoint may use for this pod (never the node's name or IP)."""
        if not self.hostname:
            return ()
        names = [self.hostname]
        for base in self._bases():
            names.append(base)
            if namespace:
                names += [f"{base}.{namespace}", f"{base}.{namespace}.svc", f"{base}.{namespace}.svc.{cluster_domain}"]
        return tuple(dict.fromkeys(names))

    def longest_identities(self, namespace: str, cluster_domain: str) -> tuple[str, ...]:
        """What the pod spec carries of identities(): the longest names only; the wrapper's
        rules (expand_identities) give back the shorter forms (~100 bytes instead of ~200)."""
        bases = self._bases()
        return tuple(f"{b}.{namespace}.svc.{cluster_domain}" for b in bases) if namespace else tuple(bases)


class Kind(NamedTuple):
    """An object users create whose controller makes a launcher's pods (and owns them, or a
    Job or StatefulSet of its own that does): what Events are recorded on, what the preview
    expands, what the chart's RBAC reads."""

    group: str
    kind: str
    plural: str


class Launcher(Protocol):
    """A launcher's identity, declared once here and read by every table that needs it: the
    core's order (app.core.launchers), Events (app.events.gates.KINDS), the preview
    (app.preview.controllers.EXPANDERS), the e2e jobs and the cluster tier's controllers."""

    name: str

    @property
    def kinds(self) -> tuple[Kind, ...]: ...

    # Its pods are training pods by ownership, whatever they run.
    training_only: bool
    # The container it runs training in, when it names one ("" when any may).
    container: str
    # Its controller in the cluster tier's pins (scripts/testenv/launchers.pins); "" for Kubernetes'.
    controller: str

    def detect(self, pod: Pod) -> bool: ...

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo: ...


def meta(pod: Pod) -> dict[str, Any]:
    m = pod.get("metadata")
    return m if isinstance(m, dict) else {}


def spec(pod: Pod) -> dict[str, Any]:
    s = pod.get("spec")
    return s if isinstance(s, dict) else {}


def _strings(v: object) -> dict[str, str]:
    """A string map as the adapters read it, never to be written. The API server sends labels
    and annotations as strings, so the pod's own dict is returned (detection reads them ~5
    times a pod); a hand-written pod (`hostnet-rdma mutate`) may have other scalars: a copy."""
    if not isinstance(v, dict):
        return {}
    for k, x in v.items():
        if type(k) is not str or type(x) is not str:
            return {str(k): str(x) for k, x in v.items()}
    return v


def pod_labels(pod: Pod) -> dict[str, str]:
    return _strings(meta(pod).get("labels"))


def pod_annotations(pod: Pod) -> dict[str, str]:
    return _strings(meta(pod).get("annotations"))


def name(pod: Pod) -> str:
    return str(meta(pod).get("name") or "")


def owner(pod: Pod, of: Kind) -> dict[str, Any] | None:
    """The ownerReference of that API group and kind, if any."""
    group, kind = of.group, of.kind
    refs = meta(pod).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if not isinstance(ref, dict):
            continue
        api = str(ref.get("apiVersion", ""))
        if ref.get("kind") == kind and api.split("/")[0] == group:
            return ref
    return None


def containers(pod: Pod) -> list[dict[str, Any]]:
    c = spec(pod).get("containers")
    return [x for x in c if isinstance(x, dict)] if isinstance(c, list) else []


def env_names(pod: Pod) -> set[str]:
    """Names of env vars declared on any regular container."""
    out: set[str] = set()
    for c in containers(pod):
        for e in c.get("env") or []:
            if isinstance(e, dict) and isinstance(e.get("name"), str):
                out.add(e["name"])
    return out


def env_literal(pod: Pod, key: str) -> str | None:
    """The literal value of an env var on any regular container (not valueFrom)."""
    for c in containers(pod):
        for e in c.get("env") or []:
            if isinstance(e, dict) and e.get("name") == key and isinstance(e.get("value"), str):
                return str(e["value"])
    return None


def hostname_and_subdomain(pod: Pod) -> tuple[str, str]:
    s = spec(pod)
    return str(s.get("hostname") or ""), str(s.get("subdomain") or "")


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def dns_name(value: str) -> str:
    """A name taken from the pod (a job's, from a label, annotation or owner reference) as the
    rendezvous defaults and peer patterns may use it: a DNS subdomain (what the API server allows
    for object names), else "" (it names no pod). A tenant chooses these names, and a review
    need not come from the API server: never a pattern, never longer than budget.NAME_BYTES."""
    if not value or len(value) > budget.NAME_BYTES or not _DNS_SUBDOMAIN.fullmatch(value):
        return ""
    return value
