"""The chart's policy on pods created without the webhook (templates/unplumbed-pods-policy.yaml):
Warn + Audit by default, Deny or none by a value, matched as the webhook is. The API-server
tier runs it (tests/apiserver/test_unplumbed.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.test_chart import template


def rendered(*sets: str) -> list[dict[str, Any]]:
    p = template(*(a for s in sets for a in ("--set", s)))
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def policy_and_binding(docs: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    def one(kind: str) -> dict[str, Any] | None:
        found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith("-unplumbed-pods")]
        return found[0] if found else None

    return one("ValidatingAdmissionPolicy"), one("ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize(("value", "actions"), [(None, ["Warn", "Audit"]), ("Deny", ["Deny", "Audit"]), ("Off", None)])
def test_warn_and_audit_by_default_deny_or_off_by_a_value(value: str | None, actions: list[str] | None) -> None:
    policy, binding = policy_and_binding(rendered(*([f"webhook.unplumbedPods={value}"] if value else [])))
    if actions is None:
        assert policy is None and binding is None
        return
    assert policy is not None and binding is not None
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": actions}
    assert policy["spec"]["failurePolicy"] == "Ignore"  # an error in the policy never blocks a pod


@pytest.mark.parametrize("opt_in", ["namespace", "pod"])
def test_it_matches_the_pods_the_webhook_is_sent(opt_in: str) -> None:
    docs = rendered(f"config.optIn={opt_in}", "webhook.excludeNamespaces={kube-system,monitoring}")
    policy, _ = policy_and_binding(docs)
    assert policy is not None
    hook = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")["webhooks"][0]
    match = policy["spec"]["matchConstraints"]
    assert match["namespaceSelector"] == hook["namespaceSelector"]
    assert match["objectSelector"] == hook["objectSelector"]
    assert match["resourceRules"] == [{k: v for k, v in r.items() if k != "scope"} for r in hook["rules"]]
    assert hook["matchConditions"][0] in policy["spec"]["matchConditions"]


def test_the_configured_rdma_prefixes_are_training_signals() -> None:
    policy, _ = policy_and_binding(rendered("config.rdmaResourcePrefixes={example.com/nic-pool.a}"))
    assert policy is not None
    devices = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "devices")
    assert "|example\\\\.com/nic-pool\\\\.a.*)$" in devices  # quoted for the regex, then for CEL


def test_an_unknown_value_is_refused() -> None:
    p = template("--set", "webhook.unplumbedPods=Sometimes")
    assert p.returncode != 0 and "unplumbedPods" in p.stderr
