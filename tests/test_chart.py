"""The Helm chart: lint, template snapshots per cert mode, schema errors, rendered-manifest
drift, and the examples' pod templates."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import config
from app.core import Params, mutate, selection

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "hostnet-rdma"
SNAPSHOTS = ROOT / "tests" / "chart-snapshots"
REFRESH = os.environ.get("REFRESH_GOLDEN", "") not in ("", "0", "false")
MODES = {
    "default": [],
    "cert-manager": ["--set", "certs.mode=cert-manager"],
    "cert-manager-issuer": ["--set", "certs.mode=cert-manager", "--set", "certs.certManager.issuerRef.name=corp-ca",
                            "--set", "certs.certManager.issuerRef.kind=ClusterIssuer"],
    "provided": ["--set", "certs.mode=provided", "--set", "certs.provided.secretName=my-tls",
                 "--set", "certs.provided.caBundle=LS0tLS1CRUdJTi0tLS0t"],
    "network-policy": ["--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.0/24}",
                       "--set-json", 'networkPolicy.metricsFrom=[{"namespaceSelector": {"matchLabels": '
                                     '{"kubernetes.io/metadata.name": "monitoring"}}}]'],
    "inline-wrapper": ["--set", "config.wrapper.delivery=inline"],
}  # fmt: skip


def helm_bin() -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/testenv/build-binaries.sh"), "helm"], capture_output=True, text=True, check=True
    )
    cached = Path(out.stdout.strip().splitlines()[-1]) / "helm"
    found = str(cached) if cached.exists() else shutil.which("helm")
    assert found, "helm not found"
    return found


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_bin(), *args], capture_output=True, text=True, cwd=ROOT)


def template(*args: str) -> subprocess.CompletedProcess[str]:
    return helm(
        "template", "hostnet-rdma", str(CHART), "--namespace", "hostnet-rdma-system", "--kube-version", "1.36.3", *args
    )


def test_lint_clean() -> None:
    p = helm("lint", str(CHART), "--strict", "--kube-version", "1.36.3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 chart(s) failed" in p.stdout


@pytest.mark.parametrize("mode", sorted(MODES))
def test_template_snapshot(mode: str) -> None:
    p = template(*MODES[mode])
    assert p.returncode == 0, p.stderr
    snap = SNAPSHOTS / f"{mode}.yaml"
    if REFRESH:
        snap.parent.mkdir(exist_ok=True)
        snap.write_text(p.stdout)
    want = snap.read_text()
    if p.stdout != want:
        diff = "".join(
            difflib.unified_diff(want.splitlines(True), p.stdout.splitlines(True), str(snap), "helm template")
        )
        pytest.fail(f"chart output changed (REFRESH_GOLDEN=1 to accept):\n{diff}")


def docs(mode: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(template(*MODES[mode]).stdout) if d]


def test_hardened_deployment_and_least_privilege_rbac() -> None:
    rendered = docs("default")
    dep = next(d for d in rendered if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert dep["spec"]["replicas"] >= 2
    rules = [r for d in rendered if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    events = {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
    # An Event only where the webhook's selectors admit: a namespace's labels are read (get, not
    # list or watch; namespaces cannot be named in advance).
    namespaces = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}
    # ... and only about a job that exists with the review's uid: get on the kinds Events are
    # recorded on (app.events.KINDS), one rule per API group, nothing more.
    from app.events import KINDS

    by_group: dict[str, list[str]] = {}
    for (group, _), resource in KINDS.items():
        by_group.setdefault(group, []).append(resource)
    jobs = [
        {"apiGroups": [g], "resources": sorted(set(rs), key=rs.index), "verbs": ["get"]} for g, rs in by_group.items()
    ]
    for r in rules:
        assert "*" not in r["verbs"] and "*" not in r["resources"]
        if r["verbs"] != ["create"] and r not in (events, namespaces, *jobs):  # Events are named by the webhook itself
            assert r.get("resourceNames"), r
    assert events in rules and namespaces in rules
    # No RBAC for the webhook when it does not manage certificates but the Events rule, none
    # at all with events off; `helm test` reads only the caBundle of its one configuration.
    rbac = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    test_hook = [d for d in docs("provided") if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
    ours = [d for d in docs("provided") if d["kind"] in rbac and d not in test_hook]
    got = [r for d in ours if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert got[:2] == [events, namespaces]
    assert sorted(got[2:], key=str) == sorted(jobs, key=str)  # in any order, each group once
    assert {d["metadata"]["name"] for d in ours} == {"hostnet-rdma-events"}
    (test_role,) = [d for d in test_hook if d["kind"] == "ClusterRole"]
    assert test_role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                                   "resources": ["mutatingwebhookconfigurations"],
                                   "resourceNames": ["hostnet-rdma"], "verbs": ["get"]}]  # fmt: skip


def test_events_off_means_no_rbac_and_no_token() -> None:
    off = [d for d in yaml.safe_load_all(template(*MODES["provided"], "--set", "events.enabled=false").stdout) if d]
    hook = [d for d in off if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
    assert not [d for d in off if d["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
                and d not in hook]  # fmt: skip
    dep = next(d for d in off if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    sa = next(d for d in off if d["kind"] == "ServiceAccount")
    assert dep["automountServiceAccountToken"] is False and sa["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("value") for e in dep["containers"][0]["env"]}
    assert env["HOSTNET_RDMA_EVENTS"] == "false" and "POD_NAME" not in env
    on = next(d for d in docs("provided") if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert on["automountServiceAccountToken"] is True  # Events need the API server


def test_webhook_configuration() -> None:
    mwc = next(d for d in docs("default") if d["kind"] == "MutatingWebhookConfiguration")
    hook = mwc["webhooks"][0]
    # Events on the pod's job are its only side effect, and never on dry runs.
    assert hook["sideEffects"] == "NoneOnDryRun" and hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent" and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    excluded = hook["namespaceSelector"]["matchExpressions"][1]["values"]
    assert excluded == ["kube-system", "hostnet-rdma-system"]
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": "hostnet-rdma.io/inject", "operator": "NotIn", "values": ["disabled"]}]
    }
    assert hook["matchConditions"] == [
        {"name": "host-network", "expression": "has(object.spec.hostNetwork) && object.spec.hostNetwork"}
    ]
    cm = next(d for d in docs("cert-manager") if d["kind"] == "MutatingWebhookConfiguration")
    assert cm["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "hostnet-rdma-system/hostnet-rdma"


@pytest.mark.parametrize("opt_in", ["namespace", "pod"])
def test_the_webhooks_selection_is_what_the_config_says(opt_in: str) -> None:
    """One home: the selectors the chart renders are app.core.selection's for the config the
    chart's ConfigMap holds (what the previews and the Event recorder read)."""
    p = template("--set", f"config.optIn={opt_in}", "--set", "webhook.excludeNamespaces={kube-system,monitoring}")
    assert p.returncode == 0, p.stderr
    rendered = [d for d in yaml.safe_load_all(p.stdout) if d]
    hook = next(d for d in rendered if d["kind"] == "MutatingWebhookConfiguration")["webhooks"][0]
    cm = next(d for d in rendered if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {}))
    cfg = config.from_dict(yaml.safe_load(cm["data"]["config.yaml"]))
    assert cfg.opt_in == opt_in
    assert cfg.exclude_namespaces == ("kube-system", "monitoring", "hostnet-rdma-system")
    assert selection.from_webhook(hook) == selection.from_config(cfg)
    assert selection.mode(selection.from_webhook(hook)) == opt_in


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "webhook.failurPolicy=Fail"], "at '/webhook': additional properties 'failurPolicy' not allowed"),
        (["--set", "replicaCount=two"], "at '/replicaCount': got string, want integer"),
        (["--set", "certs.mode=magic"], "at '/certs/mode'"),
        (["--set", "config.profiles.x.env.LD_PRELOAD=/evil.so"], "LD_PRELOAD"),
        (["--set", "config.inject.shmSize=lots"], "at '/config/inject/shmSize'"),
        (["--set", "config.inject.infinibandPath=/"], "at '/config/inject/infinibandPath'"),
        (["--set", "certs.mode=provided"], "certs.provided.secretName is required when certs.mode=provided"),
        (["--set", "networkPolicy.enabled=true"], "networkPolicy.enabled needs networkPolicy.apiServerCIDRs"),
        (["--set", "networkPolicy.apiServerCIDRs={everywhere}"], "at '/networkPolicy/apiServerCIDRs/0'"),
        (["--set", "config.wrapper.delivery=sidecar"], "at '/config/wrapper/delivery'"),
    ],
    ids=[
        "typo",
        "type",
        "enum",
        "env-key",
        "quantity",
        "infiniband-path",
        "required",
        "netpol-cidrs",
        "netpol-cidr",
        "delivery",
    ],
)
def test_bad_values_fail_with_a_readable_error(args: list[str], message: str) -> None:
    p = template(*args)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr


def test_rendered_manifests_do_not_drift() -> None:
    committed = (ROOT / "deploy" / "manifests" / "hostnet-rdma.yaml").read_text()
    body = "\n".join(line for line in committed.splitlines()[2:]) + "\n"
    assert body == template().stdout, "deploy/manifests drifted from the chart: run scripts/render-manifests.sh"


def test_config_map_is_valid_webhook_config(tmp_path: Path) -> None:
    from app import config

    cm = next(d for d in docs("default") if d["kind"] == "ConfigMap")
    f = tmp_path / "config.yaml"
    f.write_text(cm["data"]["config.yaml"])
    cfg = config.load(f)
    assert cfg.shm_size == "32Gi" and "BM.GPU4.8" in cfg.profiles


def _pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "spec" in x and isinstance(x["spec"], dict) and "containers" in x["spec"]:
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return found


@pytest.mark.parametrize("example", sorted((ROOT / "deploy" / "examples").glob("*.yaml")), ids=lambda p: p.stem)
def test_examples_opt_in_and_mutate(example: Path) -> None:
    manifests = [d for d in yaml.safe_load_all(example.read_text()) if d]
    templates = [t for d in manifests for t in _pod_templates(d)]
    if example.stem == "namespace":
        assert manifests[0]["metadata"]["labels"]["hostnet-rdma.io/inject"] == "enabled"
        return
    if example.stem == "train-script":
        (cm,) = manifests
        assert cm["kind"] == "ConfigMap" and cm["metadata"] == {"name": "ddp-script", "namespace": "ml"}
        compile(cm["data"]["train.py"], "train.py", "exec")
        return
    full = [t for t in templates if "hostNetwork" in t["spec"]]  # runtime patches are partial
    if not full:  # a TrainJob on another example's runtime (trainjob-kueue.yaml on trainjob.yaml's)
        runtimes = {d["metadata"]["name"] for f in example.parent.glob("*.yaml") for d in yaml.safe_load_all(f.read_text())
                    if d and d["kind"] == "ClusterTrainingRuntime"}  # fmt: skip
        jobs = [d for d in manifests if d["kind"] == "TrainJob"]
        assert jobs and all(j["spec"]["runtimeRef"]["name"] in runtimes for j in jobs), example
        return
    for t in full:
        # The namespace's label is the opt-in (the default mode): no pod label in the examples.
        assert "hostnet-rdma.io/inject" not in (t.get("metadata") or {}).get("labels", {}), example
        assert t["spec"]["hostNetwork"] is True
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "example-0", **(t.get("metadata") or {})},
               "spec": {**t["spec"], "hostname": "example-0", "subdomain": "example"}}  # fmt: skip
        if not any("command" in c for c in t["spec"]["containers"]):
            # A runtime's template: the TrainJob gives the command, and the pods are JobSet pods
            # (training pods by their launcher); this stand-in pod has neither, so say it trains.
            pod["metadata"] = {**pod["metadata"], "labels": {"hostnet-rdma.io/inject": "enabled"}}
        result = mutate(pod, Params(namespace="ml", wrapper_payload="x"))
        assert result.changed and "dns" in result.applied
        # No hand-written rendezvous flags in the examples: the webhook supplies them.
        for c in t["spec"]["containers"]:
            argv = " ".join(c.get("command", []) + c.get("args", []))
            assert "--local-addr" not in argv and "is_host" not in argv


def test_network_policy_admits_only_the_api_server_helm_test_and_metrics_peers() -> None:
    assert not [d for d in docs("default") if d["kind"] == "NetworkPolicy"], "off by default"
    (policy,) = [d for d in docs("network-policy") if d["kind"] == "NetworkPolicy"]
    deployment = next(d for d in docs("network-policy") if d["kind"] == "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "https", "protocol": "TCP"}]
    test_pod = next(d for d in docs("network-policy") if d["kind"] == "Pod")
    peers = rule["from"]
    assert peers[0] == {"ipBlock": {"cidr": "10.0.0.0/24"}}
    labels = peers[1]["podSelector"]["matchLabels"]
    assert labels.items() <= test_pod["metadata"]["labels"].items(), "the helm test pod must be let in"
    assert peers[2] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


@pytest.mark.parametrize(("kube_version", "delivery"), [("1.36.3", "imageVolume"), ("1.35.0", "imageVolume"),
                                                    ("1.34.2", "initContainer"), ("1.30.0", "initContainer")])  # fmt: skip
def test_auto_delivery_follows_the_cluster_version_and_uses_the_chart_image(kube_version: str, delivery: str) -> None:
    p = helm(
        "template", "hostnet-rdma", str(CHART), "--namespace", "hostnet-rdma-system", "--kube-version", kube_version
    )
    assert p.returncode == 0, p.stderr
    rendered = [d for d in yaml.safe_load_all(p.stdout) if d]
    cm = next(d for d in rendered if d["kind"] == "ConfigMap")
    wrapper = yaml.safe_load(cm["data"]["config.yaml"])["wrapper"]
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert wrapper["delivery"] == delivery
    assert wrapper["imagePullPolicy"] == container["imagePullPolicy"]
    if delivery == "imageVolume":  # the wrapper-only image, same tag, its files at the root
        assert wrapper["image"] == container["image"].replace("/hostnet-rdma:", "/hostnet-rdma-wrapper:")
        assert wrapper["imageSubPath"] == ""
    else:  # the init container copies from the webhook's image
        assert wrapper["image"] == container["image"]


def test_image_volume_of_the_webhook_image_when_no_wrapper_image_is_given() -> None:
    p = template("--set", "wrapperImage.useWebhookImage=true")
    cm = next(d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "ConfigMap")
    wrapper = yaml.safe_load(cm["data"]["config.yaml"])["wrapper"]
    assert wrapper["delivery"] == "imageVolume" and wrapper["imageSubPath"] == "wrapper"
    assert wrapper["image"] == "ghcr.io/hostnet-rdma/hostnet-rdma:0.1.0"


def test_an_explicit_delivery_is_kept() -> None:
    inline = next(d for d in docs("inline-wrapper") if d["kind"] == "ConfigMap")
    assert yaml.safe_load(inline["data"]["config.yaml"])["wrapper"]["delivery"] == "inline"
    p = template("--set", "config.wrapper.delivery=initContainer")
    cm = next(d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "ConfigMap")
    assert yaml.safe_load(cm["data"]["config.yaml"])["wrapper"]["delivery"] == "initContainer"


def test_the_wrapper_image_follows_the_webhook_image_to_the_users_registry() -> None:
    """Pointing the chart at one's own registry moves the wrapper image too: the image volume
    is never pulled from a registry the user did not choose."""
    p = template("--set", "image.repository=registry.example.com/hr", "--set-string", "image.tag=9")
    cm = next(d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "ConfigMap")
    assert yaml.safe_load(cm["data"]["config.yaml"])["wrapper"]["image"] == "registry.example.com/hr-wrapper:9"
    p = template("--set", "wrapperImage.repository=mirror.example/w", "--set-string", "wrapperImage.tag=2")
    cm = next(d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "ConfigMap")
    assert yaml.safe_load(cm["data"]["config.yaml"])["wrapper"]["image"] == "mirror.example/w:2"


@pytest.mark.parametrize(
    ("sets", "kube"),
    [
        ([], "1.36.3"),
        ([], "1.33.0"),
        (["--set", "wrapperImage.useWebhookImage=true"], "1.36.3"),
        (["--set", "image.repository=registry.example/hr", "--set", "image.tag=1.2.3"], "1.36.3"),
        (["--set", "image.repository=registry.example/hr", "--set", "image.tag=1.2.3"], "1.34.0"),
        (["--set", "config.wrapper.delivery=inline", "--set", "config.optIn=pod"], "1.36.3"),
        (["--set", "webhook.excludeNamespaces={kube-system,monitoring}"], "1.36.3"),
    ],
)
def test_the_previews_config_is_the_configmap_the_chart_renders(sets: list[str], kube: str) -> None:
    """`hostnet-rdma mutate/explain -f` with the chart's values (or none) compute the webhook's
    config as templates/configmap.yaml does (app/preview/chart.py), for every delivery choice."""
    from app.preview import chart

    p = helm(
        "template", "hostnet-rdma", str(CHART), "--namespace", "hostnet-rdma-system", "--kube-version", kube, *sets
    )
    assert p.returncode == 0, p.stderr
    cm = next(d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "ConfigMap" and "config.yaml" in d["data"])
    rendered = yaml.safe_load(cm["data"]["config.yaml"])
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for i in range(0, len(sets), 2):  # the --set values, onto the chart's defaults
        key, _, value = sets[i + 1].partition("=")
        *parents, leaf = key.split(".")
        node = values
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = (
            value.strip("{}").split(",")
            if value.startswith("{")
            else (value == "true" if value in ("true", "false") else value)
        )
    assert chart.from_values(values, kube) == rendered


def test_the_charts_defaults_are_the_previews() -> None:
    from app import __version__
    from app.preview import chart

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert values["image"]["repository"] == chart.IMAGE_REPOSITORY and meta["appVersion"] == __version__
    assert values["image"]["pullPolicy"] == chart.IMAGE_PULL_POLICY
    assert tuple(values["webhook"]["excludeNamespaces"]) == chart.EXCLUDE_NAMESPACES


def test_every_configmap_an_example_mounts_is_shipped_with_them() -> None:
    """Every example mounted a ConfigMap `ddp-script` that nothing in the repository created:
    the quick start's `kubectl apply` could never run."""
    shipped: set[tuple[str, str]] = set()
    mounted: dict[tuple[str, str], str] = {}
    for example in sorted((ROOT / "deploy" / "examples").glob("*.yaml")):
        for d in (d for d in yaml.safe_load_all(example.read_text()) if d):
            ns = (d.get("metadata") or {}).get("namespace", "ml")
            if d["kind"] == "ConfigMap":
                shipped.add((ns, d["metadata"]["name"]))
            for t in _pod_templates(d):
                for v in t["spec"].get("volumes") or []:
                    if "configMap" in v:
                        mounted[(ns, v["configMap"]["name"])] = example.name
    assert mounted and all(key in shipped for key in mounted), (mounted, shipped)
