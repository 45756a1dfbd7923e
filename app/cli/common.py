"""What the commands share: one way to fail, to load the cluster config, to read a pod file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from app import config
from app.core import ConfigError, InjectConfig


class CommandError(Exception):
    """A user error: printed as `hostnet-rdma: error: ...`, exit code 2."""


def error(message: str) -> int:
    print(f"hostnet-rdma: error: {message}", file=sys.stderr)
    return 2


def add_cluster_args(parser: Any) -> None:
    """How a command that reads the cluster finds it: as kubectl does."""
    parser.add_argument("-n", "--namespace", default="", help="namespace (default: the context's, else 'default')")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in a pod its credentials, else $KUBECONFIG / ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")


def cluster_namespace(args: Any) -> str:
    """-n, else the kubeconfig context's namespace, else `default`: kubectl's rule."""
    if args.namespace:
        return str(args.namespace)
    from app import kube

    return kube.context_namespace(args.kubeconfig, args.context) or "default"


def load_config(path: str | Path | None) -> InjectConfig:
    try:
        return config.load(path)
    except ConfigError as e:
        raise CommandError(str(e)) from None


def _documents(source: str) -> list[Any]:
    """The documents of a YAML or JSON file (`-`: stdin), empty ones left out."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as e:
        raise CommandError(f"cannot read {source}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise CommandError(f"{source} is not UTF-8 text (byte {e.start}): give a YAML or JSON file") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise CommandError(f"{source} is not YAML or JSON: {str(e).splitlines()[0]}") from None


def read_pod_file(source: str) -> dict[str, Any]:
    """Exactly one Pod from a YAML or JSON file (`-`: stdin)."""
    docs = _documents(source)
    if len(docs) != 1:
        raise CommandError(f"{source} must hold exactly one object, found {len(docs)}")
    doc = docs[0]
    if not isinstance(doc, dict):
        raise CommandError(f"{source} does not hold an object")
    if doc.get("kind") != "Pod":
        raise CommandError(
            f"{source} holds a {doc.get('kind') or 'object without kind'}, not a Pod "
            "(preview the pod its controller creates)"
        )
    return doc


def read_objects(sources: list[str]) -> list[dict[str, Any]]:
    """Every object of YAML or JSON files (`-`: stdin): multi-document, `kind: List` spread."""
    out: list[dict[str, Any]] = []
    for source in sources:
        for doc in _documents(source):
            if not isinstance(doc, dict):
                raise CommandError(f"{source} holds something that is not an object")
            if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                out += [d for d in doc["items"] if isinstance(d, dict)]
            else:
                out.append(doc)
    if not out:
        raise CommandError(f"{', '.join(sources)} holds no object")
    return out


def add_preview_args(parser: Any) -> None:
    """What a preview of job files is computed against: the installed webhook or a config."""
    parser.add_argument("-f", "--file", action="append", default=[],
                        help="what you apply (YAML or JSON, several documents, - for stdin): a Pod, Job, StatefulSet, "
                             "Deployment, ReplicaSet, DaemonSet, JobSet, LeaderWorkerSet, PyTorchJob, MPIJob (v2beta1), TrainJob (+ its "
                             "runtime) or a runtime alone, Volcano Job, AppWrapper; other kinds are named; repeatable")  # fmt: skip
    parser.add_argument("--config", help="the chart's config: block, a values file, or the webhook's config file "
                                         "(default: the chart's defaults, as a default install)")  # fmt: skip
    parser.add_argument("--kube-version", default=None, type=_kube_version,
                        help="Kubernetes version the chart's `delivery: auto` is resolved for (default: 1.36)")  # fmt: skip
    parser.add_argument("--from-cluster", action="store_true",
                        help="the installed webhook's config and selectors, the namespace's labels and TrainJob "
                             "runtimes, read from the cluster (--kubeconfig, --context)")  # fmt: skip
    parser.add_argument("--webhook-config", default="hostnet-rdma",
                        help="name of the installed MutatingWebhookConfiguration (the Helm release's fullname)")  # fmt: skip


def _kube_version(text: str) -> str:
    """--kube-version as argparse checks it: a usage error, not a traceback."""
    import argparse

    from app.preview import chart

    try:
        chart.from_values(None, text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--kube-version ")) from None
    return text


def preview_config(path: str | None, kube_version: str | None) -> InjectConfig:
    """The webhook's config for a preview: the chart's config: block (or a values file) resolved
    as the chart resolves it, the webhook's own ConfigMap or config file as it is, or the
    chart's defaults."""
    from app.preview import chart

    version = kube_version or chart.KUBE_VERSION
    if path is None:
        data: Any = chart.from_values(None, version)
    else:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except OSError as e:
            raise CommandError(f"config: cannot read {path}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise CommandError(f"config: {path} is not YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise CommandError(f"config: {path} must hold a mapping")
        if data.get("kind") == "ConfigMap":
            # The webhook's own ConfigMap (kubectl get cm <release>-config -o yaml): as it is.
            text = (data.get("data") or {}).get("config.yaml")
            if not isinstance(text, str):
                raise CommandError(f"config: the ConfigMap in {path} has no data config.yaml")
            try:
                data = yaml.safe_load(text) or {}
            except yaml.YAMLError as e:
                raise CommandError(f"config: config.yaml in {path} is not YAML: {str(e).splitlines()[0]}") from None
            if not isinstance(data, dict):
                raise CommandError(f"config: config.yaml in {path} must hold a mapping")
        elif chart.is_chart_block(data):
            try:
                data = chart.from_values(data if "config" in data else {"config": data}, version)
            except ValueError as e:
                raise CommandError(str(e)) from None
    try:
        return config.from_dict(data)
    except ConfigError as e:
        raise CommandError(str(e)) from None


def run_preview(args: Any, objects: list[dict[str, Any]] | None = None) -> tuple[list[Any], bool, list[Any]]:
    """The preview rows (app.preview.Row) of the files in args, whether the input was a single
    Pod, and the objects without pods (app.preview.controllers.Expansion: not workloads, or workloads
    the preview cannot expand). From the cluster (--from-cluster) or offline."""
    import dataclasses

    from app import preview
    from app.core import selection
    from app.preview import controllers
    from app.webhook import review

    # The objects as the caller read them: stdin (`-f -`) can be read once only.
    objects = read_objects(args.file) if objects is None else objects
    single_pod = len(objects) == 1 and objects[0].get("kind") == "Pod"
    labels: dict[str, str] | None = None
    runtime_of = None
    claim_objects: list[dict[str, Any]] = []
    if args.from_cluster:
        from app import kube

        namespace = cluster_namespace(args)
        try:
            api = kube.api_client(args.kubeconfig, args.context)
            found = kube.installed_config(api, args.webhook_config)
            if found is None:
                raise CommandError(f"no MutatingWebhookConfiguration {args.webhook_config!r} in this cluster: is the "
                                   "chart installed (helm list -A), under another release name (--webhook-config)?")  # fmt: skip
            data, selectors = found
            cfg = config.from_dict(data)
            labels = kube.namespace_labels_or_none(api, namespace) or {}
            objs = kube.Objects(api)

            def runtime_of(kind: str, ns: str, name: str) -> dict[str, Any] | None:
                return objs.get("trainer.kubeflow.org/v1alpha1", kind, ns if kind == "TrainingRuntime" else "", name)

            claim_objects = cluster_claim_objects(objs, namespace, objects)
        except kube.ApiException as e:
            raise CommandError(f"reading the installed webhook: {kube.refusal(e)}") from None
        except ConfigError as e:
            raise CommandError(f"the installed config: {e}") from None
    else:
        namespace = args.namespace or "default"
        cfg = preview_config(args.config, args.kube_version)
        selectors = selection.from_config(cfg)
    if getattr(args, "exclude_namespaces", None) is not None and not args.from_cluster:
        cfg = dataclasses.replace(cfg, exclude_namespaces=tuple(n for n in args.exclude_namespaces.split(",") if n))
        selectors = selection.from_config(cfg)
    # A file's own namespace wins, as with kubectl apply; -n for objects that name none.
    if args.namespace:
        objects = [{**o, "metadata": {**(o.get("metadata") or {}), "namespace": args.namespace}} for o in objects]
    try:
        expansions = controllers.expand(objects, namespace, runtime_of)
    except controllers.ExpandError as e:
        raise CommandError(str(e)) from None
    configmaps = {k: v for ex in expansions for k, v in ex.configmaps.items()}
    claims = preview.claim_templates([*objects, *claim_objects])
    rows = preview.rows(expansions, lambda ns: review.params_for(cfg, ns), selectors, labels, configmaps, claims)
    return rows, single_pod, [ex for ex in expansions if not ex.pods]


DRA_API = "resource.k8s.io/v1"


def cluster_claim_objects(objs: Any, namespace: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ResourceClaimTemplates the file's pods name but do not hold, read from the cluster
    (`objs`: app.kube.Objects), and the DeviceClasses they ask for: what the preview says a DRA
    claim holds. A cluster that does not serve DRA's v1 API, or a template not there: none."""
    from app import kube, preview

    wanted = sorted(preview.claim_template_names(objects))
    out: list[dict[str, Any]] = []
    try:
        if not wanted or not objs.served(DRA_API, "ResourceClaimTemplate"):
            return []
        for name in wanted:
            found = objs.get(DRA_API, "ResourceClaimTemplate", namespace, name)
            if found is not None:
                out.append(found)
    except kube.ApiException as e:  # not allowed to read them: the core's warning still says what may happen
        print(
            f"hostnet-rdma: DRA claim templates not read ({kube.refusal(e)}): their device classes not named",
            file=sys.stderr,
        )
        return out
    classes = {str(r.get("exactly", r).get("deviceClassName") or "") for t in out
               for r in ((t.get("spec") or {}).get("spec") or {}).get("devices", {}).get("requests") or []
               if isinstance(r, dict) and isinstance(r.get("exactly", r), dict)}  # fmt: skip
    for name in sorted(c for c in classes if c):
        try:
            found = objs.get(DRA_API, "DeviceClass", "", name)
        except kube.ApiException:
            found = None  # a known class name still says its driver (allocators.DRA_CLASSES)
        if found is not None:
            out.append(found)
    return out


def without_pods(others: list[Any]) -> tuple[list[str], int]:
    """Lines that account for the objects of a file that have no pod rows, and the exit code
    they call for: EXIT_NOT_PREVIEWED when a workload could not be expanded, else 0."""
    from app import preview

    lines = [f"{ex.source}: {ex.note}" for ex in others if ex.unexpanded]
    # A runtime is named with the TrainJob it serves (one no TrainJob uses has pod rows).
    lines += [
        f"{ex.source}: {ex.note}" for ex in others if not ex.unexpanded and ex.note.startswith("runtime of TrainJob")
    ]
    plain = [ex.source for ex in others if not ex.unexpanded and ex.note == "not a workload: no pods"]
    if plain:
        lines.append(f"not workloads (no pods): {', '.join(plain)}")
    return lines, preview.EXIT_NOT_PREVIEWED if any(ex.unexpanded for ex in others) else 0
