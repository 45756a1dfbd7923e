"""The only module that talks to the Kubernetes API (`kubernetes` client).

Self-managed certificates: a CA and a serving cert kept in one Secret, shared by every
replica, and the CA written into our MutatingWebhookConfiguration's caBundle. Safe when
several replicas start at once: creating the Secret is the lock (409 -> use the winner's),
updates carry resourceVersion, and patching the caBundle with the same CA is idempotent.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from cryptography import x509
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from app import events
from app.core import selection
from app.webhook import tls

log = logging.getLogger("hostnet_rdma.certs")

# Callers catch this without importing the client themselves (tests/test_contracts.py).
__all__ = [
    "ApiException",
    "EventSender",
    "NodeAgentApi",
    "NodeCleanupApi",
    "Objects",
    "SelfManagedCerts",
    "api_client",
    "api_message",
    "context_namespace",
    "installed_config",
    "list_pods",
    "mutating_webhook_configurations",
    "namespace_labels",
    "namespace_labels_or_none",
    "pod_log",
    "read_pod",
    "refusal",
    "webhook_selectors",
]  # fmt: skip


def api_message(e: Any) -> str:
    """The API server's own message for a refused request (a Status object's `message`: it
    names the user, the verb and the resource RBAC did not allow), else its status line."""
    body = getattr(e, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if isinstance(body, str) and '"message"' in body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):  # not a Status object (a proxy's page)
            message = None
        if message:
            return " ".join(str(message).split())
    return f"{getattr(e, 'status', '')} {getattr(e, 'reason', '')}".strip()


def refusal(e: ApiException) -> str:
    """One line for a refused request: the status, then the API server's message when it sent
    one (`403 Forbidden` alone says neither who nor what)."""
    head = f"{e.status} {e.reason}"
    message = api_message(e)
    return head if message == head else f"{head}: {message}"


CA_KEY = "ca.key"


# Every call to the API server is bounded (connect, read seconds): a black-holed API server must
# not hang the webhook's start-up, its certificate keeper or a CLI command without a word.
TIMEOUT = (5.0, 10.0)


class KubeconfigError(Exception):
    """No usable credentials: the kubeconfig is missing or malformed, or its context names a
    cluster or user it lacks. A user error, said in one line."""


def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In-cluster credentials in a pod; otherwise KUBECONFIG / ~/.kube/config (that context,
    else its current one), as kubectl reads them. Its calls time out (TIMEOUT) unless a call
    says otherwise. Raises KubeconfigError."""
    cfg = client.Configuration()
    in_cluster = kubeconfig is None and context is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    except (config.ConfigException, yaml.YAMLError) as e:
        # The next step, with what was read: a missing or wrong file is the usual cause.
        if in_cluster:
            raise KubeconfigError(
                f"in-cluster credentials: {e} (KUBERNETES_SERVICE_HOST is set, so no kubeconfig was read;"
                " pass --kubeconfig to use one)"
            ) from None
        read = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        what = f"not YAML: {str(e).splitlines()[0]}" if isinstance(e, yaml.YAMLError) else str(e)
        raise KubeconfigError(
            f"kubeconfig: {what} (read {read}; choose the file with --kubeconfig or KUBECONFIG, the context with --context)"
        ) from None
    cfg.retries = 1  # urllib3's default of 3 makes one unanswered call wait four timeouts
    api = client.ApiClient(cfg)
    # The client has no default timeout (None waits forever), and the dynamic client's discovery
    # takes none: every request goes through this one method, so the default is set here.
    request: Callable[..., Any] = api.rest_client.request

    def bounded(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = TIMEOUT
        return request(*args, **kwargs)

    api.rest_client.request = bounded  # type: ignore[method-assign]
    return api


def context_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of that kubeconfig context (kubectl's default for -n), "" if it names none
    or there is no kubeconfig (in a pod)."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, yaml.YAMLError):
        return ""  # api_client says what is wrong with the file
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    return str(((chosen or {}).get("context") or {}).get("namespace") or "")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data.get(key, ""))


def _sans(cert_pem: bytes) -> set[str]:
    """DNS names and IP addresses the certificate is valid for, as strings."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    names = set(ext.value.get_values_for_type(x509.DNSName))
    return names | {str(ip) for ip in ext.value.get_values_for_type(x509.IPAddress)}


@dataclass
class SelfManagedCerts:
    api: client.ApiClient
    namespace: str
    secret: str
    service: str
    webhook_config: str
    cert_dir: Path
    cluster_domain: str = "cluster.local"
    rotate_before: dt.timedelta = dt.timedelta(days=30)
    # Extra SANs, for a webhook reached by URL (out-of-cluster development and tests).
    extra_hosts: tuple[str, ...] = ()

    @property
    def hosts(self) -> list[str]:
        return tls.service_names(self.service, self.namespace, self.cluster_domain) + list(self.extra_hosts)

    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def _read(self) -> Any | None:
        try:
            return self._core().read_namespaced_secret(self.secret, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _needs_new_serving(self, data: dict[str, str]) -> str | None:
        try:
            cert = _unb64(data, tls.CERT_FILE)
            left = tls.not_after(cert) - dt.datetime.now(dt.UTC)
        except (ValueError, TypeError):
            return "unreadable serving certificate"
        if left < self.rotate_before:
            return f"serving certificate expires in {left.days} days"
        if not set(self.hosts) <= _sans(cert):
            return "serving certificate names do not match the Service"
        return None

    def ensure_secret(self) -> dict[str, str]:
        """The Secret's data, created or rotated as needed. Retries on races."""
        for _ in range(5):
            secret = self._read()
            if secret is None:
                ca = tls.make_ca(f"{self.service}-ca")
                serving = tls.make_serving(ca, self.hosts)
                data = {
                    tls.CA_FILE: _b64(ca.cert_pem),
                    CA_KEY: _b64(ca.key_pem),
                    tls.CERT_FILE: _b64(serving.cert_pem),
                    tls.KEY_FILE: _b64(serving.key_pem),
                }
                body = client.V1Secret(
                    metadata=client.V1ObjectMeta(name=self.secret, namespace=self.namespace,
                                                 labels={"app.kubernetes.io/name": "hostnet-rdma"}),
                    type="kubernetes.io/tls",
                    data=dict(data),
                )  # fmt: skip
                try:
                    self._core().create_namespaced_secret(self.namespace, body)
                    log.info("created CA and serving certificate in Secret %s/%s", self.namespace, self.secret)
                    return data
                except ApiException as e:
                    if e.status == 409:  # another replica won; use its pair
                        continue
                    raise
            data = dict(secret.data or {})
            why = self._needs_new_serving(data)
            if why is None:
                return data
            ca = tls.Pair(_unb64(data, tls.CA_FILE), _unb64(data, CA_KEY))
            serving = tls.make_serving(ca, self.hosts)
            data[tls.CERT_FILE] = _b64(serving.cert_pem)
            data[tls.KEY_FILE] = _b64(serving.key_pem)
            secret.data = data
            try:
                self._core().replace_namespaced_secret(self.secret, self.namespace, secret)
                log.info("rotated serving certificate in Secret %s/%s: %s", self.namespace, self.secret, why)
                return data
            except ApiException as e:
                if e.status == 409:  # resourceVersion moved: someone else rotated; re-read
                    continue
                raise
        raise RuntimeError(f"could not settle Secret {self.namespace}/{self.secret} after 5 attempts")

    def patch_ca_bundle(self, ca_pem: bytes) -> bool:
        """Write the CA into every webhook of our configuration; True if anything changed."""
        api = client.AdmissionregistrationV1Api(self.api)
        mwc = api.read_mutating_webhook_configuration(self.webhook_config)
        bundle = _b64(ca_pem)
        ops: list[dict[str, Any]] = []
        for i, hook in enumerate(mwc.webhooks or []):
            if hook.client_config.ca_bundle != bundle:
                ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.name})
                ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle})
        if ops:
            api.patch_mutating_webhook_configuration(self.webhook_config, ops)
            log.info("patched caBundle of MutatingWebhookConfiguration %s", self.webhook_config)
        return bool(ops)

    def ensure(self) -> None:
        data = self.ensure_secret()
        serving = tls.Pair(_unb64(data, tls.CERT_FILE), _unb64(data, tls.KEY_FILE))
        tls.write_dir(self.cert_dir, serving, tls.Pair(_unb64(data, tls.CA_FILE), b""))
        self.patch_ca_bundle(_unb64(data, tls.CA_FILE))

    def run(self, stop: threading.Event, every_seconds: float) -> None:
        """Re-check periodically: rotation by any replica reaches every replica's files."""
        while not stop.wait(every_seconds):
            try:
                self.ensure()
            except Exception as e:
                log.warning("certificate check failed, will retry: %s", e)


def read_pod(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The pod as raw JSON (typed models drop fields we may need)."""
    resp: Any = client.CoreV1Api(api).read_namespaced_pod(name, namespace, _preload_content=False)
    data: dict[str, Any] = json.loads(resp.data)
    return data


def namespace_labels(api: client.ApiClient, namespace: str) -> dict[str, str]:
    ns = client.CoreV1Api(api).read_namespace(namespace)
    return dict((ns.metadata.labels if ns.metadata else None) or {})


def _first_webhook(api: client.ApiClient, webhook_config: str) -> dict[str, Any] | None:
    """The first webhook of the installed MutatingWebhookConfiguration (the chart has one);
    None when there is no such configuration."""
    try:
        resp: Any = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(
            webhook_config, _preload_content=False
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    hook: dict[str, Any] = (json.loads(resp.data).get("webhooks") or [{}])[0]
    return hook


def webhook_selectors(api: client.ApiClient, webhook_config: str) -> selection.Selectors | None:
    """The selection of the installed webhook configuration; None when there is none."""
    hook = _first_webhook(api, webhook_config)
    return None if hook is None else selection.from_webhook(hook)


def installed_config(api: client.ApiClient, webhook_config: str) -> tuple[dict[str, Any], selection.Selectors] | None:
    """The installed webhook's config (its ConfigMap `<release>-config`, in the namespace of the
    Service the webhook configuration calls) and its selection; None without the configuration."""
    hook = _first_webhook(api, webhook_config)
    if hook is None:
        return None
    service = (hook.get("clientConfig") or {}).get("service") or {}
    namespace = str(service.get("namespace") or "hostnet-rdma-system")
    cm = client.CoreV1Api(api).read_namespaced_config_map(f"{webhook_config}-config", namespace)
    data = yaml.safe_load((cm.data or {}).get("config.yaml") or "{}") or {}
    return data, selection.from_webhook(hook)


def namespace_labels_or_none(api: client.ApiClient, namespace: str) -> dict[str, str] | None:
    """A namespace's labels; None when it does not exist (yet)."""
    try:
        return namespace_labels(api, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def pod_log(api: client.ApiClient, namespace: str, name: str, container: str | None, previous: bool = False) -> str:
    text: str = client.CoreV1Api(api).read_namespaced_pod_log(name, namespace, container=container, previous=previous)
    return text


def list_pods(api: client.ApiClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods matching a label selector, as raw JSON, by name."""
    resp: Any = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return sorted(items, key=lambda p: str(p["metadata"]["name"]))


def list_nodes(api: client.ApiClient) -> list[dict[str, Any]]:
    resp: Any = client.CoreV1Api(api).list_node(_preload_content=False)
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items


def list_all_pods(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every pod that is not finished, in every namespace (what holds a node's resources)."""
    resp: Any = client.CoreV1Api(api).list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items


def mutating_webhook_configurations(api: client.ApiClient) -> list[dict[str, Any]]:
    resp: Any = client.AdmissionregistrationV1Api(api).list_mutating_webhook_configuration(_preload_content=False)
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items


class Objects:
    """Objects of any kind the cluster serves, by apiVersion and kind (the client's dynamic
    client: discovery per group, on first use), as raw dicts."""

    def __init__(self, api: client.ApiClient) -> None:
        from kubernetes.dynamic import DynamicClient

        self.api = api
        self.dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]

    def served(self, api_version: str, kind: str) -> bool:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return False
        return True

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj.get("metadata", {}).get("namespace")
        created: Any = resource.create(body=obj, namespace=namespace)
        out: dict[str, Any] = created.to_dict()
        return out

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        try:
            found: Any = resource.get(name=name, namespace=namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        out: dict[str, Any] = found.to_dict()
        return out

    def list_objects(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        found: Any = resource.get(namespace=namespace)
        items: list[dict[str, Any]] = found.to_dict().get("items") or []
        return items

    def delete(self, obj: dict[str, Any]) -> None:
        """Delete an object and, in the background, what it owns (its pods); gone already is fine."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj.get("metadata") or {}
        try:
            resource.delete(name=meta["name"], namespace=meta.get("namespace"), propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise

    def create_namespace(self, name: str, labels: dict[str, str]) -> None:
        body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
        client.CoreV1Api(self.api).create_namespace(body)

    def delete_namespace(self, name: str) -> None:
        try:
            client.CoreV1Api(self.api).delete_namespace(name, propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise

    def service_account_exists(self, namespace: str, name: str = "default") -> bool:
        try:
            client.CoreV1Api(self.api).read_namespaced_service_account(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def namespace_exists(self, name: str) -> bool:
        try:
            client.CoreV1Api(self.api).read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


class EventSender:
    """app.events.Sender over events.k8s.io/v1 (the chart's RBAC: create and patch events), and
    the reads of the recorder's gates (get namespaces; get the launchers' kinds, app.events.KINDS).
    Every call is bounded in time; an API server that does not answer raises events.Unavailable
    (the recorder backs off)."""

    def __init__(self, api: client.ApiClient, timeout_seconds: float = 5.0) -> None:
        self.events = client.EventsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.timeout = timeout_seconds

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        with _unavailable():
            self.events.create_namespaced_event(namespace, body, _request_timeout=self.timeout)  # type: ignore[arg-type]

    def patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        # A list body goes as application/json-patch+json.
        with _unavailable():
            self.events.patch_namespaced_event(name, namespace, ops, _request_timeout=self.timeout)

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """A namespace's labels; None when it does not exist."""
        try:
            with _unavailable():
                ns = self.core.read_namespace(namespace, _request_timeout=self.timeout)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict((ns.metadata.labels if ns.metadata else None) or {})

    def object_uid(self, namespace: str, group: str, version: str, resource: str, name: str) -> str | None:
        """The uid of an object (a job an Event would be about); None when it does not exist."""
        try:
            with _unavailable():
                resp: Any = self.custom.get_namespaced_custom_object(
                    group, version, namespace, resource, name, _request_timeout=self.timeout, _preload_content=False
                )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        meta = json.loads(resp.data).get("metadata") or {}
        uid = meta.get("uid")
        return uid if isinstance(uid, str) else None


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """The API server did not answer (or said it is overloaded or broken): events.Unavailable."""
    try:
        yield
    except ApiException as e:
        if e.status is not None and (e.status >= 500 or e.status == 429):
            raise events.Unavailable(f"{e.status} {e.reason}") from None
        raise
    except (urllib3.exceptions.HTTPError, OSError) as e:  # timeouts, refused or reset connections
        raise events.Unavailable(str(e) or type(e).__name__) from None


def read_node(core: client.CoreV1Api, name: str, timeout: float) -> dict[str, Any] | None:
    """A Node as the API server has it (None: there is none), as JSON: no model objects."""
    try:
        resp: Any = core.read_node(name, _preload_content=False, _request_timeout=timeout)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    data: dict[str, Any] = json.loads(resp.data)
    return data


class NodeAgentApi:
    """The fabric watch's calls (app.fleet.agent.NodeApi): its own Node's condition (nodes/status),
    report annotation and taint (nodes), Events on it, and reads of the peers it probes. The
    fleet is the ready endpoints of the agents' headless Service, kept by one watch of its
    EndpointSlices (a list, then deltas; relisted after a break), as kube-proxy reads Services: a
    10,000-node fleet costs each agent the changes, not a list of 10,000 Nodes a minute. Every call
    is bounded in time; failures raise (the agent retries next round)."""

    def __init__(self, api: client.ApiClient, namespace: str, service: str, event_namespace: str = "default",
                 timeout_seconds: float = 5.0) -> None:  # fmt: skip
        self.core = client.CoreV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.namespace, self.service, self.event_namespace = namespace, service, event_namespace
        self.timeout = timeout_seconds
        self._slices: dict[str, set[str]] = {}
        self._listed = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self.watch_error = ""

    # ------------------------------------------------------------------ the fleet, by watch
    def _ready_nodes(self, endpoint_slice: Any) -> set[str]:
        return {
            e.node_name for e in endpoint_slice.endpoints or []
            if e.node_name and (e.conditions is None or e.conditions.ready is not False)
        }  # fmt: skip

    def _watch_forever(self) -> None:
        from kubernetes import watch

        selector = f"kubernetes.io/service-name={self.service}"
        backoff = 1.0
        while True:
            try:
                listed: Any = self.discovery.list_namespaced_endpoint_slice(
                    self.namespace, label_selector=selector, _request_timeout=self.timeout
                )
                with self._lock:
                    self._slices = {s.metadata.name: self._ready_nodes(s) for s in listed.items}
                self._listed.set()
                backoff = 1.0
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self.discovery.list_namespaced_endpoint_slice, self.namespace, label_selector=selector,
                    resource_version=listed.metadata.resource_version, timeout_seconds=300,
                    _request_timeout=(self.timeout, 330),
                )  # fmt: skip
                for change in stream:
                    obj = change["object"]
                    if change["type"] == "ERROR" or not hasattr(obj, "metadata"):
                        break  # 410 Gone and the like: list again
                    with self._lock:
                        if change["type"] == "DELETED":
                            self._slices.pop(obj.metadata.name, None)
                        else:
                            self._slices[obj.metadata.name] = self._ready_nodes(obj)
                self.watch_error = ""
            except Exception as e:  # the API server's outage: keep the fleet last seen, back off
                self.watch_error = str(e) or type(e).__name__
                log.warning("fabric-watch: the agents' endpoints: %s; again in %.0f s", self.watch_error, backoff)
                threading.Event().wait(backoff)
                backoff = min(backoff * 2, 60.0)

    def members(self) -> list[str]:
        if not self.service:
            return []  # `fabric-watch --once` without the agents' Service: this node only
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch_forever, name="fleet-watch", daemon=True)
            self._watcher.start()
        if not self._listed.wait(self.timeout):
            raise events.Unavailable(f"the agents' endpoints not listed yet: {self.watch_error or 'no answer'}")
        with self._lock:
            return sorted(set().union(*self._slices.values())) if self._slices else []

    # ------------------------------------------------------------------ reads and writes
    def node(self, name: str) -> dict[str, Any] | None:
        return read_node(self.core, name, self.timeout)

    def write_condition(self, node: str, condition: dict[str, str]) -> None:
        # A strategic merge by type: the kubelet's and other agents' conditions are left alone.
        self.core.patch_node_status(node, {"status": {"conditions": [condition]}}, _request_timeout=self.timeout)

    def write_report(self, node: str, annotation: str) -> None:
        from app.fleet import report

        body = {"metadata": {"annotations": {report.ANNOTATION: annotation}}}
        self.core.patch_node(node, body, _request_timeout=self.timeout)

    def set_taint(self, node: str, on: bool, key: str) -> None:
        """Add or remove our NoSchedule taint, others' kept: read, change, write with the
        resourceVersion read (a 409 when someone else wrote in between: read again)."""
        for _ in range(3):
            current = self.node(node)
            if current is None:
                return
            from app.fleet import condition

            if key != condition.TAINT_KEY:
                raise ValueError(f"{key}: the fabric watch sets {condition.TAINT_KEY} only")
            ops = condition.taint_patch(current, on)  # a compare-and-swap on the resourceVersion read
            try:
                self.core.patch_node(node, ops, _request_timeout=self.timeout)
                return
            except ApiException as e:
                if e.status != 409:
                    raise
        raise events.Unavailable(f"the taint on {node}: conflicting writes, three times")

    def event(self, node: str, kind: str, reason: str, message: str) -> None:
        """A core/v1 Event about the Node, where `kubectl describe node` finds the kubelet's (its
        involvedObject uid is the node's name, as the kubelet's are)."""
        now = dt.datetime.now(dt.UTC)
        body = {
            "metadata": {"generateName": f"{node}.", "namespace": self.event_namespace},
            "involvedObject": {"kind": "Node", "apiVersion": "v1", "name": node, "uid": node},
            "reason": reason, "message": message[:1024], "type": kind, "count": 1,
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "source": {"component": "hostnet-rdma-fabric-watch", "host": node},
        }  # fmt: skip
        self.core.create_namespaced_event(self.event_namespace, body, _request_timeout=self.timeout)  # type: ignore[arg-type]


class NodeCleanupApi:
    """`fabric-watch --clear`'s calls (app.fleet.cleanup.CleanupApi): every Node, page by page (a
    10,000-node fleet is never held whole), JSON patches of nodes with the resourceVersion read,
    strategic merges of nodes/status; and the agents' pods, to wait until they are gone. Every
    call is bounded in time; a refusal raises with the API server's message."""

    PAGE = 100

    def __init__(self, api: client.ApiClient, timeout_seconds: float = 10.0) -> None:
        self.core = client.CoreV1Api(api)
        self.timeout = timeout_seconds

    @staticmethod
    def _failed(e: ApiException) -> RuntimeError:
        return RuntimeError(refusal(e))

    def nodes(self) -> Iterator[dict[str, Any]]:
        token = ""
        while True:
            try:
                resp: Any = self.core.list_node(limit=self.PAGE, _continue=token or None, _preload_content=False,
                                                _request_timeout=self.timeout)  # fmt: skip
            except ApiException as e:
                raise self._failed(e) from None
            page: dict[str, Any] = json.loads(resp.data)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def node(self, name: str) -> dict[str, Any] | None:
        try:
            return read_node(self.core, name, self.timeout)
        except ApiException as e:
            raise self._failed(e) from None

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> bool:
        """A JSON patch (the client sends a list body as application/json-patch+json); False on
        409, when the Node changed since the resourceVersion in `ops` was read."""
        try:
            self.core.patch_node(name, ops, _request_timeout=self.timeout)
        except ApiException as e:
            if e.status == 409:
                return False
            if e.status == 404:
                return True  # gone: nothing of ours left on it
            raise self._failed(e) from None
        return True

    def patch_node_status(self, name: str, body: dict[str, Any]) -> None:
        """A strategic merge of nodes/status (the client's content type for a dict body)."""
        try:
            self.core.patch_node_status(name, body, _request_timeout=self.timeout)
        except ApiException as e:
            if e.status != 404:
                raise self._failed(e) from None

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        try:
            resp: Any = self.core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False,
                                                      _request_timeout=self.timeout)  # fmt: skip
        except ApiException as e:
            raise self._failed(e) from None
        items: list[dict[str, Any]] = json.loads(resp.data)["items"]
        return items
