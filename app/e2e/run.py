"""The e2e run against a live cluster: find the installed webhook and the launchers the
cluster serves, create a namespace opted in the way that webhook selects, submit one job per
launcher (all at once: each has its own port), follow their pods until each completes, fails
or runs out of time, judge them (outcome.py) and delete the namespace.

The webhook is used as installed: its namespace and pod selectors give the labels, so a chart
installed with other values is exercised as it is.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from app import kube
from app.core import selection
from app.e2e import capacity, outcome
from app.e2e.jobs import JOB_LABEL, LAUNCHERS, Params, job_name, manifests, script_configmap

WEBHOOK = "pods.hostnet-rdma.io"  # the chart's webhook name (mutatingwebhookconfiguration.yaml)
# Kueue (--cluster-queue): the LocalQueue the run creates in its namespace; the versions of
# Kueue's API it can use, newest first; the launchers Kueue does not manage.
LOCAL_QUEUE = "hostnet-rdma-e2e"
KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")
NOT_KUEUES = ("volcano",)


class E2EError(Exception):
    """The run cannot start (no webhook, no cluster access): exit 2 with this message."""


# How often a job that is still running says what it waits for.
PROGRESS_SECONDS = 30.0


@dataclass(frozen=True)
class Options:
    params: Params  # namespace filled in by the run
    launchers: Sequence[str] | None = None  # None: every launcher the cluster serves
    timeout: float = 600.0
    keep: bool = False
    poll: float = 2.0
    # How often a running job says what it waits for (a terminal's status line: every poll).
    every: float = PROGRESS_SECONDS
    cluster_queue: str = ""  # Kueue: submit the jobs through a LocalQueue for this ClusterQueue
    # Jobs at once. None: one at a time when they request GPUs (a GPU cluster has room for one
    # job's worth, and launchers without gang scheduling would each hold a node and wait), all
    # at once otherwise.
    parallel: int | None = None


def opt_in_labels(api: Any, webhook: str = WEBHOOK) -> tuple[dict[str, str], dict[str, str], str]:
    """(namespace labels, pod labels, opt-in mode) that the installed webhook selects, from its
    MutatingWebhookConfiguration: `In` expressions and matchLabels of both selectors. In the
    namespace mode the pods need no label (and carry none: that is what the run shows)."""
    for mwc in kube.mutating_webhook_configurations(api):
        for hook in mwc.get("webhooks") or []:
            if hook.get("name") != webhook:
                continue
            ns_labels: dict[str, str] = {}
            pod_labels: dict[str, str] = {}
            for selector, out in ((hook.get("namespaceSelector") or {}, ns_labels),
                                  (hook.get("objectSelector") or {}, pod_labels)):  # fmt: skip
                out.update(selector.get("matchLabels") or {})
                for expr in selector.get("matchExpressions") or []:
                    if expr.get("operator") == "In" and expr.get("values"):
                        out[expr["key"]] = expr["values"][0]
            return ns_labels, pod_labels, selection.mode(selection.from_webhook(hook))
    raise E2EError(
        f"the hostnet-rdma webhook is not installed on this cluster (no MutatingWebhookConfiguration has a webhook "
        f"named {webhook}): install the chart first (README, Install)"
    )


def present(objects: kube.Objects) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for name, ln in LAUNCHERS.items():
        needs = [(ln.api_version, ln.kind), *ln.also_needs]
        out[name] = all(objects.served(v, k) for v, k in needs)
    return out


def script() -> str:
    return resources.files("app.e2e").joinpath("train.py").read_text()


class Follow:
    """One job: submit, poll its pods and logs until it is decided."""

    def __init__(self, api: Any, objects: kube.Objects, launcher: str, params: Params, timeout: float,
                 poll: float, say: Callable[[str], None] | None = None, every: float = PROGRESS_SECONDS) -> None:  # fmt: skip
        self.api, self.objects, self.launcher, self.params = api, objects, launcher, params
        self.timeout, self.poll = timeout, poll
        # What the job is waiting for, said at least every `every` seconds while it runs (a GPU
        # job may take 10 minutes: Pending and why, pulling, running, its pods' first lines).
        self.say, self.every = say, every
        self.name = job_name(launcher)
        self.container = LAUNCHERS[launcher].training_container
        self.result: outcome.Result | None = None

    def logs(self, pods: list[dict[str, Any]]) -> dict[str, str]:
        out: dict[str, str] = {}
        for pod in pods:
            status = outcome.training_container(pod, self.container)
            if status is None or not ({"running", "terminated"} & set(status.get("state") or {})):
                continue
            name = pod["metadata"]["name"]
            try:
                out[name] = kube.pod_log(self.api, self.params.namespace, name, self.container)
                if status.get("restartCount"):
                    out[name] = kube.pod_log(self.api, self.params.namespace, name, self.container,
                                             previous=True) + out[name]  # fmt: skip
            except kube.ApiException:
                continue  # the container is between states; read it next time
        return out

    def run(self, slots: threading.Semaphore | None = None, clean: bool = False) -> None:
        """Submit and follow the job once a slot is free (its timeout counts from then); with
        `clean`, delete it once decided, so the next job finds its nodes free."""
        with slots if slots is not None else contextlib.nullcontext():
            try:
                self.follow()
            except Exception as e:  # a bug or an API error mid-run: this job's result, not a lost thread
                self.result = outcome.Result(self.launcher, "failed", detail=f"the e2e run itself failed: {e!r}")
            if clean:
                self.remove()

    def remove(self, wait: float = 120) -> None:
        """Delete the job's objects and wait (bounded) until its pods are gone: pods that idle
        after training (StatefulSet, LeaderWorkerSet) hold their GPUs until then."""
        try:
            for obj in manifests(self.launcher, self.params):
                self.objects.delete(obj)
            deadline = time.monotonic() + wait
            while kube.list_pods(self.api, self.params.namespace, f"{JOB_LABEL}={self.name}"):
                if time.monotonic() > deadline:
                    break
                time.sleep(self.poll)
        except kube.ApiException:
            pass  # the namespace goes at the end of the run anyway

    def follow(self) -> None:
        t0 = time.monotonic()
        try:
            for obj in manifests(self.launcher, self.params):
                self.create(obj)
        except kube.ApiException as e:
            self.result = outcome.Result(self.launcher, "failed", detail=f"creating the job: {kube.api_message(e)}")
            return
        world = self.params.nodes * self.params.nproc_per_node
        selector = f"{JOB_LABEL}={self.name}"
        state = outcome.Progress("running", "no pods yet")
        pods: list[dict[str, Any]] = []
        logs: dict[str, str] = {}
        said = t0
        while time.monotonic() - t0 < self.timeout:
            try:
                pods = kube.list_pods(self.api, self.params.namespace, selector)
                logs = self.logs(pods)
            except kube.ApiException as e:
                state = outcome.Progress("running", f"reading pods: {kube.api_message(e)}")
            else:
                state = outcome.progress(pods, logs, self.container, world)
                if state.state != "running":
                    break
            now = time.monotonic()
            if self.say is not None and now - said >= self.every:
                said = now
                self.say(f"{self.launcher}: still running after {now - t0:.0f}s: {state.detail}")
            time.sleep(self.poll)
        seconds = time.monotonic() - t0
        if state.state == "completed":
            self.result = self.unqueued(outcome.judge(
                self.launcher, self.launcher, pods, logs, self.container,
                self.params.nodes, world, self.params.backend == "nccl", seconds,
            ))  # fmt: skip
            return
        what = "timed out" if state.state == "running" else "failed"
        detail = state.detail
        if what == "timed out":
            detail = f"after {self.timeout:.0f}s: {detail}{self.job_status()}{self.queue_status()}"
        self.result = outcome.Result(self.launcher, what, seconds=round(seconds, 1), detail=detail,
                                     path=outcome.path_verdict(logs, pods))  # fmt: skip

    def create(self, obj: dict[str, Any], patience: float = 60.0) -> None:
        """Create one object, retrying what a launcher's own webhook says while it catches up:
        its Service has no endpoints yet, or its cache has not seen the object just created
        before this one (Trainer: "specified trainingRuntime must be created before ...")."""
        deadline = time.monotonic() + patience
        while True:
            try:
                self.objects.create(obj)
                return
            except kube.ApiException as e:
                said = kube.api_message(e)
                transient = "failed calling webhook" in said or ("admission webhook" in said and "not found" in said)
                if not transient or time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def job_status(self) -> str:
        """The job object's own word on it (conditions, Volcano's phase), for a timeout."""
        ln = LAUNCHERS[self.launcher]
        try:
            obj = self.objects.get(ln.api_version, ln.kind, self.params.namespace, self.name)
        except kube.ApiException:
            return ""
        status = (obj or {}).get("status") or {}
        said = [f"{c.get('type')}={c.get('status')}: {c.get('message') or c.get('reason') or ''}".rstrip(": ")
                for c in status.get("conditions") or []]  # fmt: skip
        phase = (status.get("state") or {}).get("phase")
        if phase:
            said.append(f"phase {phase}")
        return f"; {ln.kind} status: {', '.join(said)}" if said else ""

    def workloads(self) -> list[dict[str, Any]]:
        """Kueue's Workloads for this job: owned by the job, or (pod groups: StatefulSet,
        LeaderWorkerSet) by its pods. Raises kube.ApiException."""
        version = kueue_version(self.objects)
        workloads = self.objects.list_objects(version, "Workload", self.params.namespace) if version else []
        return [w for w in workloads if any(o.get("name") == self.name or str(o.get("name", "")).startswith(
            self.name + "-") for o in w["metadata"].get("ownerReferences") or [])]  # fmt: skip

    def unqueued(self, result: outcome.Result) -> outcome.Result:
        """A job sent through Kueue that trained without a Workload ran past the queue and its
        quota: the path under test failed, though training passed (Kueue ignores a queue-name
        label on a kind whose integration is off, e.g. PyTorchJob on Kueue v0.19+)."""
        if not result.ok or not self.params.kueue_queue or self.launcher in NOT_KUEUES:
            return result
        try:
            if self.workloads():
                return result
        except kube.ApiException as e:
            why = f"its Kueue Workloads were not readable ({kube.api_message(e)})"
        else:
            kind = LAUNCHERS[self.launcher].kind
            why = (
                f"Kueue made no Workload for it, so it ran unqueued, past ClusterQueue quota: Kueue does "
                f"not manage {kind} here (its integration is off in Kueue's config; docs/launchers.md)"
            )
        return replace(result, outcome="failed", detail="; ".join(filter(None, (f"trained, but {why}", result.detail))))

    def queue_status(self) -> str:
        """Kueue's word on a queued job that timed out: its Workload's conditions (quota not
        reserved and why, e.g. a ClusterQueue without quota for a resource the pods ask for)."""
        if not self.params.kueue_queue or self.launcher in NOT_KUEUES:
            return ""
        try:
            mine = self.workloads()
        except kube.ApiException as e:
            return f"; Kueue Workloads not readable: {kube.api_message(e)}"
        if not mine:
            return f"; Kueue made no Workload for it (LocalQueue {self.params.kueue_queue})"
        said = []
        for w in mine:
            conditions = {c.get("type"): c for c in (w.get("status") or {}).get("conditions") or []}
            if (conditions.get("Admitted") or {}).get("status") == "True":
                said.append(f"{w['metadata']['name']} admitted")
                continue
            c = conditions.get("QuotaReserved") or {}
            said.append(f"{w['metadata']['name']} not admitted: {c.get('message') or c.get('reason') or 'pending'}")
        return f"; Kueue Workload {', '.join(said)}"


def kueue_version(objects: kube.Objects) -> str:
    """The newest Kueue API version the cluster serves LocalQueues of, "" without Kueue."""
    return next((v for v in KUEUE_VERSIONS if objects.served(v, "LocalQueue")), "")


def local_queue(namespace: str, version: str, cluster_queue: str) -> dict[str, Any]:
    return {"apiVersion": version, "kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue}}  # fmt: skip


def run(api: Any, opts: Options, say: Callable[[str], None]) -> list[outcome.Result]:
    ns_labels, pod_labels, mode = opt_in_labels(api)
    objects = kube.Objects(api)
    served = present(objects)
    wanted = list(opts.launchers) if opts.launchers is not None else list(LAUNCHERS)
    results: dict[str, outcome.Result] = {}
    for name in wanted:
        if not served[name]:
            ln = LAUNCHERS[name]
            results[name] = outcome.Result(name, "not present", detail=(
                f"{ln.installs} is not installed here (the API server serves no {ln.kind} of {ln.api_version})"))  # fmt: skip
    runnable = [n for n in wanted if served[n]]
    namespace = opts.params.namespace or f"hostnet-rdma-e2e-{secrets.token_hex(3)}"
    params = replace(opts.params, namespace=namespace, inject_labels=pod_labels)
    version = ""
    if opts.cluster_queue:
        version = kueue_version(objects)
        if not version:
            raise E2EError("--cluster-queue: Kueue is not installed here (the API server serves no LocalQueue of "
                           "kueue.x-k8s.io)")  # fmt: skip
        if objects.get(version, "ClusterQueue", "", opts.cluster_queue) is None:
            raise E2EError(f"--cluster-queue {opts.cluster_queue}: no such ClusterQueue (kubectl get clusterqueues)")
        params = replace(params, kueue_queue=LOCAL_QUEUE)
    at_once = len(runnable) or 1
    if runnable:
        at_once = jobs_at_once(api, params, opts, len(runnable), say)
        say(f"namespace {namespace}: {', '.join(runnable)} ({params.nodes} nodes x {params.nproc_per_node} "
            f"{params.backend} ranks each, timeout {opts.timeout:.0f}s each"
            + (", one after another)" if at_once == 1 and len(runnable) > 1 else
               f", {at_once} at a time)" if at_once < len(runnable) else ", side by side)"))  # fmt: skip
        say(
            f"opt-in mode {mode}: "
            + (
                "the namespace's label alone; the pods carry none"
                if not pod_labels
                else "the namespace's label and, on every pod, " + ", ".join(f"{k}={v}" for k, v in pod_labels.items())
            )
        )
        if version:
            outside = [n for n in runnable if n in NOT_KUEUES]
            say(
                f"through Kueue: LocalQueue {LOCAL_QUEUE} for ClusterQueue {opts.cluster_queue}"
                + (f" ({', '.join(outside)}: not a kind Kueue manages, submitted as it is)" if outside else "")
            )
        labels = {**ns_labels, "pod-security.kubernetes.io/enforce": "privileged", "app.kubernetes.io/created-by":
                  "hostnet-rdma-e2e"}  # fmt: skip
        objects.create_namespace(namespace, labels)
        try:
            _wait_for_service_account(objects, namespace)
            if version:
                objects.create(local_queue(namespace, version, opts.cluster_queue))
            objects.create(script_configmap(params, script()))
            follows = [Follow(api, objects, n, params, opts.timeout, opts.poll, say, opts.every) for n in runnable]
            slots = threading.Semaphore(at_once)
            one_by_one = at_once < len(follows)
            threads = [threading.Thread(target=f.run, args=(slots, one_by_one), name=f"e2e-{f.launcher}", daemon=True)
                       for f in follows]  # fmt: skip
            for t in threads:
                t.start()
            for f, t in zip(follows, threads, strict=True):
                t.join()
                assert f.result is not None
                results[f.launcher] = f.result
                say(f"{f.launcher}: {f.result.outcome}" + (f" in {f.result.seconds:.0f}s" if f.result.seconds else ""))
        finally:
            if opts.keep:
                say(f"namespace {namespace} kept (--keep): kubectl delete namespace {namespace}")
            else:
                delete_namespace(objects, namespace, say)
    return [results[n] for n in wanted]


def jobs_at_once(api: Any, params: Params, opts: Options, jobs: int, say: Callable[[str], None]) -> int:
    """How many jobs run at once, after checking that the cluster has room for one (with GPUs:
    nodes that are schedulable, selected, tolerated, with the GPUs free). Stops the run before
    anything is created when fewer nodes fit than a job needs."""
    if not params.gpus_per_node:
        return max(1, min(jobs, opts.parallel or jobs))
    fit = capacity.check(kube.list_nodes(api), kube.list_all_pods(api), params)
    if len(fit.fits) < params.nodes:
        why = "; ".join(f"{n}: {r}" for n, r in fit.why_not.items()) or "no nodes"
        raise E2EError(f"{len(fit.fits)} node(s) can take a pod with {params.gpus_per_node} {params.gpu_resource} "
                       f"({', '.join(fit.fits) or 'none'}), a job needs {params.nodes}: {why}")  # fmt: skip
    say(f"capacity: {len(fit.fits)} node(s) fit a pod with {params.gpus_per_node} {params.gpu_resource}: "
        f"{', '.join(fit.fits)}" + (f" (not: {'; '.join(f'{n}: {r}' for n, r in fit.why_not.items())})" if fit.why_not else ""))  # fmt: skip
    return max(1, min(jobs, opts.parallel or 1))


def delete_namespace(objects: Any, namespace: str, say: Callable[[str], None], wait: float = 120,
                     poll: float = 1) -> bool:  # fmt: skip
    """Delete the run's namespace and wait for it to go; say which it did. True when gone."""
    objects.delete_namespace(namespace)
    deadline = time.monotonic() + wait
    gone = not objects.namespace_exists(namespace)
    while not gone and time.monotonic() < deadline:
        time.sleep(poll)
        gone = not objects.namespace_exists(namespace)
    if gone:
        say(f"namespace {namespace} deleted")
    else:  # its pods may still hold the nodes' ports and GPUs a next run needs
        say(f"namespace {namespace} still terminating after {wait:g}s: kubectl get pods -n {namespace}")
    return gone


def _wait_for_service_account(objects: kube.Objects, namespace: str, timeout: float = 60) -> None:
    """Pods are refused until the namespace's default ServiceAccount exists."""
    deadline = time.monotonic() + timeout
    while not objects.service_account_exists(namespace):
        if time.monotonic() > deadline:
            raise E2EError(f"namespace {namespace} got no default ServiceAccount in {timeout:.0f}s")
        time.sleep(0.5)
